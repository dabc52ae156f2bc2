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
  says backward (FSDP's ``FSDP::pre_backward`` / ``FSDP::post_backward_reduce``, DDP's reducer hooks run inside
  ``evaluate_function``) → ``backward``; under a forward (``nn.Module: …``, ``…forward``, ``FSDP::pre_forward``)
  → ``forward``. When the ops say none of these, the launch time decides: inside an optimizer annotation's
  span (on any thread) → ``optimizer``; else, within its step, before the step's first backward op →
  ``forward`` (a step with no backward op: all ``forward``), up to the end of its last backward op →
  ``backward``, after it → ``other`` (work for the next step: TorchRec's input distribution, prefetches);
  ``phase_from_time`` counts these kernels.
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
_BACKWARD = re.compile(r"(?i)^autograd::engine::evaluate_function|backward")
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
    """Per device with communication kernels inside ``windows``: exposed vs hidden communication per group,
    phase and (group, phase, collective). ``collectives`` are the trace's communication kernels
    (:func:`aiprof.analysis.comm.comm_stats`). Empty without steps or communication."""
    from aiprof.analysis.arrival import _group_key
    from aiprof.analysis.comm import is_comm_kernel

    if not windows or not trace.device_ids:
        return []
    c = trace.columns
    ws = np.asarray([w.start_ns for w in windows], dtype=np.int64)
    we = np.asarray([w.end_ns for w in windows], dtype=np.int64)
    steps_set = iv.merge(ws, we)
    kernels = (c.kind == int(Kind.KERNEL)) & ~suspect.mask(trace)
    comm = is_comm_kernel(trace)
    out = []
    phase_of: _Phases | None = None  # built for the first device with communication in the steps
    by_row = {col.row: col for col in collectives}
    for dev in trace.device_ids:
        on_dev = kernels & (c.device == dev)
        rows = np.flatnonzero(on_dev & comm)
        rows = rows[isin(rows, np.fromiter(by_row, dtype=np.int64, count=len(by_row)))]
        if not rows.size:
            continue
        inside = iv.overlap_per_window(steps_set, c.ts[rows], c.ts[rows] + c.dur[rows]) > 0
        rows = rows[inside]
        if not rows.size:
            continue
        compute = _span(trace, np.flatnonzero(on_dev & ~comm))
        phase_of = phase_of or _Phases(trace, windows)
        keys: list[tuple[str, str, str]] = []
        groups: dict[str, tuple[str | None, int | None]] = {}
        timed = 0
        for row in rows.tolist():
            coll = by_row[row]
            group = _group_key(coll.process_group_name, coll.process_group_ranks)
            groups.setdefault(group, (coll.process_group_desc, coll.group_size))
            phase, by_time = phase_of(int(row))
            timed += by_time
            keys.append((group, phase, coll.collective))
        n = len(windows)

        def measure(select: list[int]) -> dict[str, Any]:
            return msgspec.structs.asdict(_measure(trace, rows[np.asarray(select, dtype=np.int64)], compute,
                                                   steps_set, n))

        by_key: dict[tuple[str, str, str], list[int]] = {}
        for i, key in enumerate(keys):
            by_key.setdefault(key, []).append(i)
        by_group: dict[str, list[int]] = {}
        by_phase: dict[str, list[int]] = {}
        for i, (group, phase, _) in enumerate(keys):
            by_group.setdefault(group, []).append(i)
            by_phase.setdefault(phase, []).append(i)
        total = measure(list(range(len(keys))))
        out.append(DeviceCommExposure(
            **total,
            device=int(dev),
            steps=n,
            phase_from_time=timed,
            by_phase=[PhaseExposure(phase=p, **measure(by_phase[p]))
                      for p in PHASES if p in by_phase],
            by_group=sorted((GroupExposure(group=g, group_desc=groups[g][0], group_size=groups[g][1],
                                           **measure(idx)) for g, idx in by_group.items()),
                            key=lambda e: (-e.exposed_ns, e.group)),
            rows=sorted((ExposureRow(group=k[0], phase=k[1], collective=k[2], **measure(idx))
                         for k, idx in by_key.items()),
                        key=lambda e: (-e.exposed_ns, e.group, PHASES.index(e.phase), e.collective)),
        ))
    return out


def _span(trace: Trace, rows: I64) -> iv.IntervalSet:
    c = trace.columns
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def _measure(trace: Trace, rows: I64, compute: iv.IntervalSet, steps: iv.IntervalSet, n: int) -> Exposure:
    comm = iv.intersect(_span(trace, rows), steps)
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
        """(phase, 1 when the launch time decided it else 0)."""
        op = int(self.op[row])
        phase = self._of_ops(op) if op >= 0 else None
        if phase is not None:
            return phase, 0
        c = self.trace.columns
        launch = int(self.launch[row])
        t = int(c.ts[op]) if op >= 0 else int(c.ts[launch]) if launch >= 0 else int(c.ts[row])
        if iv.overlap_per_window(self.optimizer, np.asarray([t]), np.asarray([t + 1]))[0] > 0:
            return "optimizer", 1
        step = int(np.searchsorted(self.starts, t, side="right")) - 1
        if step < 0 or t >= self.ends[step]:  # launched outside the steps (the kernel runs inside one)
            step = max(int(np.searchsorted(self.starts, int(c.ts[row]), side="right")) - 1, 0)
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
