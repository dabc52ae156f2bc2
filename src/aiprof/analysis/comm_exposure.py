"""Exposed vs hidden communication per process group and per phase (forward, backward, optimizer).

On each device with communication kernels, inside the analysed step windows (the steps the timeline
accounts), every communication kernel is given

- its **process group**: Kineto's ``Process Group Name`` (with its description, ``Process Group Description``,
  and size when recorded), else ``ranks a,b,…`` from ``Process Group Ranks``, else ``default`` (the same key
  the cross-rank arrival analysis matches on);
- its **phase**, from the CPU op that launched it and the ops around it (the strongest phase any of them
  names wins: optimizer, then backward, then forward):
  under an ``Optimizer.step`` / ``Optimizer.zero_grad`` annotation → ``optimizer``; under an autograd
  backward op (``autograd::engine::evaluate_function: …``, ``…Backward0``) or any op or annotation whose name
  says backward (FSDP's ``FSDP::pre_backward`` / ``FSDP::post_backward_reduce``; DDP's reducer hooks run inside
  ``evaluate_function``, and its ``torch.distributed.ddp.reducer::…`` ops that finish the backward after the last
  one) → ``backward``; under a forward (``nn.Module: …``, ``…forward``, ``FSDP::pre_forward``)
  → ``forward``. When the ops say none of these, the launch time decides: inside an optimizer annotation's
  span (on any thread) → ``optimizer``; else, within its step, before the step's first backward op →
  ``forward`` (a step with no backward op: all ``forward``), up to the end of its last backward op →
  ``backward``, after it → ``other`` (work for the next step: TorchRec's input distribution, prefetches);
  ``phase_from_time`` counts these kernels.

A CPU-only trace (gloo) is one device, -1, whose communication is its host-side collective ops (the
timeline's ``communication`` bucket), each at its outermost op on its thread, hidden where a CPU op of another
thread computes meanwhile; its group from the op's (or a ``record_param_comms`` inside it) metadata.
  FSDP's all-gathers therefore land in ``forward`` (and, re-gathered for backward, ``backward``), its
  reduce-scatters in ``backward``, a ZeRO optimizer's all-gathers in ``optimizer``.

Then per (group, phase, collective) row, per group, per phase and for the device: ``comm_ns`` is the union of
those kernels' intervals clipped to the steps, ``hidden_ns`` the part of it during which a compute
(non-communication) kernel ran on the device, ``exposed_ns = comm_ns − hidden_ns``. The device's
``exposed_ns`` is the timeline's ``communication`` bucket summed over the steps. Rows (and groups, and phases)
can overlap one another in time — two groups' collectives on two streams at once — so their sums can exceed the
device's: each says how much of *its* communication compute hid, the device line what the step waited for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from aiprof.analysis import intervals as iv
from aiprof.arrays import isin
from aiprof.analysis.steps import StepWindow
from aiprof.trace import links, suspect
from aiprof.trace.model import I64, Kind, Trace

if TYPE_CHECKING:
    from aiprof.analysis.comm import Collective

PHASES = ("forward", "backward", "optimizer", "other")
_OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)")
_BACKWARD = re.compile(r"(?i)^autograd::engine::evaluate_function|backward|ddp\.reducer::")  # DDP's reducer: backward
_FORWARD = re.compile(r"(?i)^nn\.Module: |forward")
_MAX_DEPTH = 64


class Exposure(msgspec.Struct, kw_only=True):
    """Communication of one kind over the analysed steps: the numbers every row below carries."""

    kernels: int  # communication kernels counted
    comm_ns: int  # union of their intervals inside the steps
    hidden_ns: int  # part of comm_ns during which a compute kernel ran on the device
    exposed_ns: int  # comm_ns − hidden_ns: what the step waits for
    exposed_ns_per_step: int
    hidden_pct: float  # 100 × hidden / comm (0 when comm_ns is 0)


class GroupExposure(msgspec.Struct, kw_only=True):
    """One process group's communication."""

    group: str  # Process Group Name, "ranks a,b,…", or "default"
    group_desc: str | None  # Process Group Description (e.g. "default_pg", a mesh dimension), when recorded
    group_size: int | None
    kernels: int
    comm_ns: int
    hidden_ns: int
    exposed_ns: int
    exposed_ns_per_step: int
    hidden_pct: float


class PhaseExposure(msgspec.Struct, kw_only=True):
    """One phase's communication: ``forward``, ``backward``, ``optimizer`` or ``other`` (module doc)."""

    phase: str
    kernels: int
    comm_ns: int
    hidden_ns: int
    exposed_ns: int
    exposed_ns_per_step: int
    hidden_pct: float


class ExposureRow(msgspec.Struct, kw_only=True):
    """One collective of one group in one phase (FSDP: all_gather in forward, reduce_scatter in backward…)."""

    group: str
    phase: str
    collective: str  # all_reduce, all_gather, reduce_scatter, all_to_all, …
    kernels: int
    comm_ns: int
    hidden_ns: int
    exposed_ns: int
    exposed_ns_per_step: int
    hidden_pct: float


class DeviceCommExposure(msgspec.Struct, kw_only=True):
    """Exposed vs hidden communication on one device (an item of ``communication.exposure`` in the report)."""

    device: int
    steps: int  # analysed steps the numbers cover (``*_per_step`` divides by it)
    kernels: int
    comm_ns: int
    hidden_ns: int
    exposed_ns: int  # the timeline's communication bucket, summed over the steps
    exposed_ns_per_step: int
    hidden_pct: float
    phase_from_time: int  # kernels whose phase came from the launch time alone (their ops said none)
    by_phase: list[PhaseExposure]  # in PHASES order, phases with communication only
    by_group: list[GroupExposure]  # most exposed first
    rows: list[ExposureRow]  # most exposed first


def comm_exposure(trace: Trace, windows: list[StepWindow], collectives: Sequence[Collective]) -> list[DeviceCommExposure]:
    """Per device with communication inside ``windows``: exposed vs hidden communication per group, phase and
    (group, phase, collective). ``collectives`` are the trace's communication kernels
    (:func:`aiprof.analysis.comm.comm_stats`); a CPU-only trace is one device (-1) whose communication is its
    host-side collective ops (:func:`_cpu_exposure`). Empty without steps or communication."""
    from aiprof.analysis.arrival import _group_key
    from aiprof.analysis.comm import is_comm_kernel

    if not windows:
        return []
    if not trace.device_ids:
        return _cpu_exposure(trace, windows)
    c = trace.columns
    steps_set = _steps(windows)
    kernels = (c.kind == int(Kind.KERNEL)) & ~suspect.mask(trace)
    comm = is_comm_kernel(trace)
    out = []
    phase_of: _Phases | None = None  # built for the first device with communication in the steps
    by_row = {col.row: col for col in collectives}
    for dev in trace.device_ids:
        on_dev = kernels & (c.device == dev)
        rows = np.flatnonzero(on_dev & comm)
        rows = rows[isin(rows, np.fromiter(by_row, dtype=np.int64, count=len(by_row)))]
        rows = rows[iv.overlap_per_window(steps_set, c.ts[rows], c.ts[rows] + c.dur[rows]) > 0]
        if not rows.size:
            continue
        phase_of = phase_of or _Phases(trace, windows)
        keys: list[_Key] = []
        for row in rows.tolist():
            coll = by_row[row]
            phase, by_time = phase_of(int(row))
            keys.append(_Key(_group_key(coll.process_group_name, coll.process_group_ranks), coll.process_group_desc,
                             coll.group_size, phase, coll.collective, by_time))
        compute = _span(trace, np.flatnonzero(on_dev & ~comm))
        out.append(_device(trace, int(dev), rows, keys, compute, iv.EMPTY, steps_set, len(windows)))
    return out


def _cpu_exposure(trace: Trace, windows: list[StepWindow]) -> list[DeviceCommExposure]:
    """A CPU-only trace: the communication is its host-side collective ops (the timeline's ``communication``
    bucket: ``c10d::*``, ``gloo:all_reduce`` on gloo's threads, ``record_param_comms``, waits), each counted
    at its outermost op on its thread; compute is the CPU ops of *other* threads meanwhile (an op enclosing
    its own thread's blocking collective is waiting: :func:`aiprof.analysis.timeline.cpu_work`); time inside
    torch.compile's compilation is neither. Group: the op's ``Process Group Name`` when recorded, else
    ``default``; phase: as on a GPU, from the op and the ops around it, else its start time."""
    from aiprof.analysis.comm import _ranks, _str, canonical_collective
    from aiprof.analysis.arrival import _group_key
    from aiprof.analysis.compile import compile_set
    from aiprof.analysis.timeline import collective_rows, cpu_work

    c = trace.columns
    steps_set = _steps(windows)
    rows = _outermost(trace, collective_rows(trace))
    rows = rows[iv.overlap_per_window(steps_set, c.ts[rows], c.ts[rows] + c.dur[rows]) > 0]
    if not rows.size:
        return []
    phase_of = _Phases(trace, windows)
    ops = trace.rows_of(Kind.CPU_OP)
    params = ops[trace.name_matches(ops, r"^record_param_comms$")]
    keys = []
    for row in rows.tolist():
        meta = trace.comm_args(row) or _nested_meta(trace, row, params)
        size = meta.get("Group size")
        phase, by_time = phase_of.at(row, int(c.ts[row]))
        keys.append(_Key(_group_key(_str(meta.get("Process Group Name")), _ranks(meta.get("Process Group Ranks"))),
                         _str(meta.get("Process Group Description")), size if isinstance(size, int) else None,
                         phase, canonical_collective(trace.name_of(row)) or "unknown", by_time))
    compute, _, _ = cpu_work(trace)
    return [_device(trace, -1, rows, keys, compute, compile_set(trace), steps_set, len(windows))]


def _nested_meta(trace: Trace, row: int, params: I64) -> dict[str, Any]:
    """The collective metadata of the first ``record_param_comms`` inside ``row`` on its thread (a
    ``c10d::allreduce_`` carries none itself), or {}."""
    c = trace.columns
    lo, hi = int(c.ts[row]), int(c.ts[row] + c.dur[row])
    inside = params[(c.pid[params] == c.pid[row]) & (c.tid[params] == c.tid[row]) & (c.ts[params] >= lo)
                    & (c.ts[params] < hi)]
    for r in inside.tolist():
        meta = trace.comm_args(int(r))
        if meta:
            return meta
    return {}


@dataclass(frozen=True)
class _Key:
    """What one communication kernel (or host collective op) is: its group, phase and collective."""

    group: str
    group_desc: str | None
    group_size: int | None
    phase: str
    collective: str
    by_time: int  # 1: the phase came from its launch time


def _device(trace: Trace, device: int, rows: I64, keys: list[_Key], compute: iv.IntervalSet,
            minus: iv.IntervalSet, steps: iv.IntervalSet, n: int) -> DeviceCommExposure:
    """The exposure of one device's communication ``rows`` (described by ``keys``), per row, group and phase.
    ``minus`` is time that is no communication even under a collective (compilation, on a CPU)."""

    def measure(select: list[int]) -> dict[str, Any]:
        return msgspec.structs.asdict(_measure(trace, rows[np.asarray(select, dtype=np.int64)], compute, minus,
                                               steps, n))

    by_key: dict[tuple[str, str, str], list[int]] = {}
    by_group: dict[str, list[int]] = {}
    by_phase: dict[str, list[int]] = {}
    meta: dict[str, _Key] = {}
    for i, k in enumerate(keys):
        by_key.setdefault((k.group, k.phase, k.collective), []).append(i)
        by_group.setdefault(k.group, []).append(i)
        by_phase.setdefault(k.phase, []).append(i)
        meta.setdefault(k.group, k)
    return DeviceCommExposure(
        **measure(list(range(len(keys)))),
        device=device,
        steps=n,
        phase_from_time=sum(k.by_time for k in keys),
        by_phase=[PhaseExposure(phase=p, **measure(by_phase[p])) for p in PHASES if p in by_phase],
        by_group=sorted((GroupExposure(group=g, group_desc=meta[g].group_desc, group_size=meta[g].group_size,
                                       **measure(idx)) for g, idx in by_group.items()),
                        key=lambda e: (-e.exposed_ns, e.group)),
        rows=sorted((ExposureRow(group=k[0], phase=k[1], collective=k[2], **measure(idx)) for k, idx in by_key.items()),
                    key=lambda e: (-e.exposed_ns, e.group, PHASES.index(e.phase), e.collective)),
    )


def _steps(windows: list[StepWindow]) -> iv.IntervalSet:
    return iv.merge(np.asarray([w.start_ns for w in windows], dtype=np.int64),
                    np.asarray([w.end_ns for w in windows], dtype=np.int64))


def _outermost(trace: Trace, rows: I64) -> I64:
    """``rows`` without those inside another of them on the same thread (a ``record_param_comms`` inside its
    ``c10d::allreduce_``), in time order."""
    c = trace.columns
    order = rows[np.lexsort((-c.dur[rows], c.ts[rows], c.tid[rows], c.pid[rows]))]
    keep: list[int] = []
    end: dict[tuple[int, int], int] = {}
    for row, pid, tid, ts, dur in zip(order.tolist(), c.pid[order].tolist(), c.tid[order].tolist(),
                                      c.ts[order].tolist(), c.dur[order].tolist()):
        if ts < end.get((pid, tid), -1):
            continue
        end[(pid, tid)] = ts + dur
        keep.append(row)
    kept = np.asarray(keep, dtype=np.int64)
    return kept[np.argsort(c.ts[kept], kind="stable")]


def _span(trace: Trace, rows: I64) -> iv.IntervalSet:
    c = trace.columns
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def _measure(trace: Trace, rows: I64, compute: iv.IntervalSet, minus: iv.IntervalSet, steps: iv.IntervalSet,
             n: int) -> Exposure:
    comm = iv.subtract(iv.intersect(_span(trace, rows), steps), minus)
    comm_ns = iv.total(comm)
    hidden = iv.total(iv.intersect(comm, compute))
    exposed = comm_ns - hidden
    return Exposure(kernels=int(rows.size), comm_ns=comm_ns, hidden_ns=hidden, exposed_ns=exposed,
                    exposed_ns_per_step=exposed // max(n, 1),
                    hidden_pct=round(100.0 * hidden / comm_ns, 1) if comm_ns else 0.0)


class _Phases:
    """The phase of a communication kernel (module doc): from the ops around its launch, else its launch
    time within its step."""

    def __init__(self, trace: Trace, windows: list[StepWindow]) -> None:
        self.trace = trace
        self.par = links.parent(trace)
        self.op = links.gpu_op(trace)
        self.launch = links.launcher(trace)
        self.memo: dict[int, str | None] = {}
        c = trace.columns
        host = trace.rows_of(Kind.CPU_OP, Kind.USER_ANNOTATION)
        backward = host[trace.name_matches(host, r"^autograd::engine::evaluate_function")]
        optimizer = host[trace.name_matches(host, _OPTIMIZER.pattern)]
        self.starts = np.asarray([w.start_ns for w in windows], dtype=np.int64)
        self.ends = np.asarray([w.end_ns for w in windows], dtype=np.int64)
        # Per step: the backward span (first backward op's start to the last one's end) and the optimizer spans
        b_start, b_end = c.ts[backward], c.ts[backward] + c.dur[backward]
        self.backward = [(int(b_start[m].min()), int(b_end[m].max())) if m.any() else None
                         for m in ((b_start >= lo) & (b_start < hi) for lo, hi in zip(self.starts, self.ends))]
        self.optimizer = iv.merge(c.ts[optimizer], c.ts[optimizer] + c.dur[optimizer])

    def __call__(self, row: int) -> tuple[str, int]:
        """(phase, 1 when the launch time decided it else 0) of the kernel ``row``."""
        op = int(self.op[row])
        c = self.trace.columns
        launch = int(self.launch[row])
        t = int(c.ts[op]) if op >= 0 else int(c.ts[launch]) if launch >= 0 else int(c.ts[row])
        return self.at(op, t, int(c.ts[row]))

    def at(self, op: int, t: int, runs_at: int | None = None) -> tuple[str, int]:
        """(phase, 1 when the time decided it else 0) of work issued by the host row ``op`` (-1: none) at ``t``
        (``runs_at``: when it ran, for work issued outside the steps)."""
        phase = self._of_ops(op) if op >= 0 else None
        if phase is not None:
            return phase, 0
        if iv.overlap_per_window(self.optimizer, np.asarray([t]), np.asarray([t + 1]))[0] > 0:
            return "optimizer", 1
        step = int(np.searchsorted(self.starts, t, side="right")) - 1
        if step < 0 or t >= self.ends[step]:  # issued outside the steps (it runs inside one)
            step = max(int(np.searchsorted(self.starts, t if runs_at is None else runs_at, side="right")) - 1, 0)
        span = self.backward[step]
        if span is None or t < span[0]:
            return "forward", 1
        return ("backward", 1) if t < span[1] else ("other", 1)

    def _of_ops(self, op: int) -> str | None:
        """The phase the op and its ancestors name (outermost context: optimizer, then backward, then forward)."""
        chain: list[int] = []
        cur = op
        found: str | None = None
        while cur >= 0 and len(chain) < _MAX_DEPTH:
            if cur in self.memo:
                found = self.memo[cur]
                break
            chain.append(cur)
            cur = int(self.par[cur])
        # Walk back down from the outermost: an op's phase is its ancestors' if they name one, else its own name's
        for row in reversed(chain):
            found = _rank_phase(found, _name_phase(self.trace.name_of(row)))
            self.memo[row] = found
        return found


_ORDER = {"optimizer": 0, "backward": 1, "forward": 2}  # the phases ops name (never "other")


def _rank_phase(outer: str | None, own: str | None) -> str | None:
    """The phase of an op whose ancestors say ``outer`` and whose name says ``own``: the stronger of the two
    (optimizer > backward > forward: a recomputed forward under backward is backward)."""
    if outer is None or own is None:
        return outer or own
    return outer if _ORDER[outer] <= _ORDER[own] else own


def _name_phase(name: str) -> str | None:
    if _OPTIMIZER.search(name):
        return "optimizer"
    if _BACKWARD.search(name):
        return "backward"
    if _FORWARD.search(name):
        return "forward"
    return None


__all__ = ["DeviceCommExposure", "Exposure", "ExposureRow", "GroupExposure", "PHASES", "PhaseExposure", "comm_exposure"]
