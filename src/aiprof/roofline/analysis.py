"""Roofline per op: time, achieved FLOP/s and bytes/s, arithmetic intensity, % of the applicable roof,
and a class (compute-bound, memory-bound, latency-bound, unmodelled) for every op of a trace.

Attribution. Work items are GPU activities (kernels, memcpy, memset) on GPU traces, or each CPU op's
self time on CPU-only traces. Each item goes to the *innermost modelled op* around the op that issued it:
a modelled op (one with an :func:`op_cost`) that has no modelled op inside it. Composite ops whose parts
are modelled (``aten::linear`` over ``aten::addmm``) are thus never counted twice. Items with no modelled
op around them stay with their issuing op, listed as unmodelled with their share of time.

Time of an op call is the union of its items' intervals (kernels of one op on several streams are not
summed). The roof: ``roof_time = max(flops / peak[unit, dtype], bytes / bandwidth)``; bound is compute
when the FLOP term is larger (arithmetic intensity above the ridge point), else memory; an op achieving
under ``LATENCY_PCT`` % of its roof is latency-bound (far below both roofs: launch or dispatch overhead,
tiny grids). ``saving_ns = time - roof_time`` is what running at the roof would save.
"""

from __future__ import annotations

from functools import cached_property

import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace

import msgspec
import numpy as np
from msgspec import UNSET

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.roofline.cost import split_name, OpCost, is_modelled_name, noop_cost, op_cost
from aiprof.roofline.peaks import DevicePeaks, PeaksChoice, load_measured, resolve, scale_cpu_threads
from aiprof.roofline.section import RooflineInstance, RooflinePeaks, RooflineRowRecord, RooflineSection, UnmodelledOp
from aiprof.trace import links
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, OpInputs, Trace

LATENCY_PCT = 10.0  # below this % of the applicable roof an op is latency-bound
# Above this % of its roof a point is not a measurement: the timing and the cost model disagree (a call that
# did no work, work the trace attributed elsewhere). 100 % is the roof; the margin leaves room for what
# legitimately passes it a little: Winograd convolutions (fewer than the nominal FLOPs), data served
# from caches, datasheet clocks a boosted part exceeds.
ABOVE_ROOF_PCT = 200.0
NO_OP = "(no issuing op)"
# Classes of calls that are not measurements against a roof: never drawn, never evidence for a finding.
NOT_DRAWN = frozenset({"no-op", "above-roof", "unmodelled", "unknown-peaks"})
# Ops that return their input when no conversion or copy is needed: with no child op and no device work
# of their own, such a call did nothing (``x.to(torch.float32)`` of an fp32 tensor, ``contiguous()`` of a
# contiguous one), whatever its shapes say.
NOOP_WHEN_CHILDLESS = frozenset({"to", "contiguous"})


@dataclass
class RooflineRow:
    """One op name + input shapes (aggregated over its calls), or one call (``count == 1``)."""

    name: str
    input_dims: str
    input_types: str
    concrete_inputs: str
    count: int
    time_ns: int
    flops: int
    bytes_read: int
    bytes_written: int
    family: str | None
    unit: str | None
    dtype: str | None
    bound: str  # compute-bound | memory-bound | latency-bound | unmodelled | unknown-peaks
    roof_key: str | None = None
    roof_time_ns: int = 0
    pct_of_roof: float | None = None
    forward_op: str | None = None  # for backward ops: the forward op (name and input dims)
    assumed_dtype: bool = False
    ts_ns: int = -1  # per-call rows: start of the op
    assumed_fp32: bool = False  # the trace records no dtypes (legacy ``Input dims``): fp32 assumed
    expanded_inputs: bool = False  # an input is an expanded view (0 stride): its storage counted once
    math: str = ""  # fp32 matrix work: "tf32" / "fma" when its kernels' names say which units ran it

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes else None

    @property
    def achieved_flops_per_s(self) -> float | None:
        return self.flops / (self.time_ns * 1e-9) if self.time_ns > 0 and self.family else None

    @property
    def achieved_bytes_per_s(self) -> float | None:
        return self.bytes / (self.time_ns * 1e-9) if self.time_ns > 0 and self.family else None

    @property
    def saving_ns(self) -> int:
        if self.pct_of_roof is None or self.bound in NOT_DRAWN:
            return 0
        return max(0, self.time_ns - self.roof_time_ns)

    @property
    def drawn(self) -> bool:
        """Whether the row is a measurement to draw against its roof: modelled, with work and time, not a
        no-op and not above its roof (a disagreement between timing and cost model, see ``ABOVE_ROOF_PCT``)."""
        return (self.family is not None and self.bound not in NOT_DRAWN and self.time_ns > 0 and self.flops > 0
                and self.bytes > 0)

    @property
    def dtype_assumed(self) -> str | None:
        """Why the dtype is an assumption, when it is (None: the trace recorded it)."""
        if self.assumed_fp32:
            return "fp32 assumed: the trace records shapes without dtypes (legacy Input dims)"
        if self.assumed_dtype:
            return f"{self.dtype} assumed: the trace records no dtypes for TensorList inputs"
        return None

    def record(self) -> RooflineRowRecord:
        """The row as the report's ``roofline.rows`` hold it (derived numbers rounded)."""
        ai, fps, bps = self.arithmetic_intensity, self.achieved_flops_per_s, self.achieved_bytes_per_s
        return RooflineRowRecord(
            name=self.name,
            input_dims=self.input_dims,
            input_types=self.input_types,
            concrete_inputs=self.concrete_inputs,
            count=self.count,
            time_ns=self.time_ns,
            flops=self.flops,
            bytes_read=self.bytes_read,
            bytes_written=self.bytes_written,
            family=self.family,
            unit=self.unit,
            dtype=self.dtype,
            assumed_dtype=self.assumed_dtype or self.assumed_fp32,
            dtype_assumed=self.dtype_assumed,
            expanded_inputs=self.expanded_inputs,
            math=self.math or None,
            bound=self.bound,
            above_roof=self.bound == "above-roof",
            drawn=self.drawn,
            roof_key=self.roof_key,
            arithmetic_intensity_flops_per_byte=None if ai is None else round(ai, 4),
            achieved_flops_per_s=None if fps is None else int(fps),
            achieved_bytes_per_s=None if bps is None else int(bps),
            pct_of_roof=None if self.pct_of_roof is None else round(self.pct_of_roof, 2),
            roof_time_ns=self.roof_time_ns,
            saving_ns=self.saving_ns,
            forward_op=self.forward_op,
        )

    def instance(self) -> RooflineInstance:
        """The call as the report's ``roofline.instances`` hold it: the row and its start."""
        return RooflineInstance(**msgspec.structs.asdict(self.record()), ts_ns=self.ts_ns)


@dataclass
class _Calls:
    """Per-call rows, columnar (one entry per op call, in ascending op row; op -1: no issuing op). A
    :class:`RooflineRow` is built only for the calls someone asks for."""

    op: I64
    time_ns: I64
    ts_ns: I64
    name: I64  # string id of the op's name (-1 for no op)
    cost_id: I64  # index into ``costs`` (-1: unmodelled)
    text_id: I64  # index into ``texts``
    costs: list[OpCost]
    texts: list[tuple[str, str, str]]
    strings: list[str]
    forward_id: I64  # index into ``forward`` (-1: not inside a backward node)
    forward: list[str]  # ``name [input dims]`` of forward ops

    def __len__(self) -> int:
        return int(self.op.shape[0])

    def row(self, i: int, peaks: DevicePeaks | None) -> RooflineRow:
        op, time_ns = int(self.op[i]), int(self.time_ns[i])
        if op < 0:
            return RooflineRow(NO_OP, "", "", "", 1, time_ns, 0, 0, 0, None, None, None, "unmodelled")
        dims, types, concrete = self.texts[int(self.text_id[i])]
        k = int(self.forward_id[i])
        name, ts, forward = self.strings[int(self.name[i])], int(self.ts_ns[i]), self.forward[k] if k >= 0 else None
        k = int(self.cost_id[i])
        if k < 0:
            out = RooflineRow(name, dims, types, concrete, 1, time_ns, 0, 0, 0, None, None, None, "unmodelled",
                              forward_op=forward, ts_ns=ts)
        else:
            cost = self.costs[k]
            out = RooflineRow(name, dims, types, concrete, 1, time_ns, cost.flops, cost.bytes_read,
                              cost.bytes_written, cost.family, cost.unit, cost.dtype, "", forward_op=forward,
                              assumed_dtype=cost.assumed_dtype, ts_ns=ts, assumed_fp32=cost.assumed_fp32,
                              expanded_inputs=cost.expanded_inputs, math=cost.math)
        _classify(out, peaks)
        return out


@dataclass
class RooflineResult:
    """Roofline of one trace: the peaks used, aggregated rows (by time, descending) and per-call rows."""

    mode: str  # "gpu" (kernel time) or "cpu" (CPU self time)
    peaks: DevicePeaks | None
    peaks_note: str
    rows: list[RooflineRow]
    calls: _Calls
    total_time_ns: int
    device_name: str = ""
    notes: list[str] = field(default_factory=list)
    cpu_threads: int = 0  # CPU traces: intra-op threads the run used (run metadata), 0 unknown

    @property
    def instance_count(self) -> int:
        """How many op calls the roofline covers (``count == 1`` rows)."""
        return len(self.calls)

    @cached_property
    def instances(self) -> list[RooflineRow]:
        """Every op call as a row (built on first use; prefer :meth:`top_instances` / :meth:`instances_in`)."""
        return [self.calls.row(i, self.peaks) for i in range(len(self.calls))]

    def top_instances(self, n: int) -> list[RooflineRow]:
        """The ``n`` longest calls, longest first (ties: in op order)."""
        order = np.argsort(-self.calls.time_ns, kind="stable")[:n]
        return [self.calls.row(i, self.peaks) for i in order.tolist()]

    def instances_in(self, lo: int, hi: int, families: tuple[str, ...] | None = None) -> list[RooflineRow]:
        """Calls that start in ``[lo, hi)`` ns, optionally only those of the given op families."""
        return [self.calls.row(i, self.peaks) for i in self.calls_in(lo, hi, families).tolist()]

    def calls_in(self, lo: int, hi: int, families: tuple[str, ...] | None = None, *,
                 measured_only: bool = True) -> I64:
        """Indices into ``calls`` of the calls that start in ``[lo, hi)`` ns (of these op families). With
        ``measured_only`` (the default), calls that are not measurements are left out: no-ops and calls
        above their roof (timing and cost model disagree), so no finding is built on them."""
        calls = self.calls
        mask = (calls.ts_ns >= lo) & (calls.ts_ns < hi) & (calls.op >= 0)
        if families is not None:
            wanted = np.array([c.family in families for c in calls.costs] + [False], dtype=bool)
            mask &= wanted[calls.cost_id]  # cost id -1 picks the trailing False
        if measured_only and mask.any():
            codes, names = self.call_bounds
            excluded = np.array([n in ("no-op", "above-roof") for n in names], dtype=bool)
            mask &= ~excluded[codes]
        return np.flatnonzero(mask)

    @cached_property
    def call_bounds(self) -> tuple[I64, list[str]]:
        """The class of every call (what :func:`_classify` gives its row), without building the rows: a
        code per call and the class name of each code."""
        calls = self.calls
        per_cost = [_roof_of(cost, self.peaks) for cost in calls.costs]
        roof_ns = np.array([r[1] for r in per_cost] + [0], dtype=np.int64)
        compute = np.array([r[2] for r in per_cost] + [False], dtype=bool)
        # A class that does not depend on the call's time, per cost (the last one: unmodelled calls)
        names = ["latency-bound", "compute-bound", "memory-bound", "above-roof"]
        fixed_names = [r[0] for r in per_cost] + ["unmodelled"]
        for name in fixed_names:
            if name and name not in names:
                names.append(name)
        fixed = np.array([names.index(n) if n else -1 for n in fixed_names], dtype=np.int64)
        time = calls.time_ns
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = (100.0 * roof_ns[calls.cost_id]) / time
        latency = (time > 0) & (pct < LATENCY_PCT)
        above = (time > 0) & (pct > ABOVE_ROOF_PCT)
        timed = np.where(latency, 0, np.where(above, 3, np.where(compute[calls.cost_id], 1, 2)))
        own = fixed[calls.cost_id]
        return np.where(own >= 0, own, timed).astype(np.int64), names

    @property
    def modelled_time_ns(self) -> int:
        return sum(r.time_ns for r in self.rows if r.family is not None)

    @property
    def unmodelled(self) -> list[RooflineRow]:
        return [r for r in self.rows if r.family is None]

    def time_ns_by_dtype(self) -> dict[str, int]:
        """Modelled time by the dtype its ops computed in, largest first (the run's dtype mix)."""
        by: Counter[str] = Counter()
        for row in self.rows:
            if row.family is not None and row.dtype:
                by[row.dtype] += row.time_ns
        return dict(by.most_common())

    def share(self, row: RooflineRow) -> float:
        return row.time_ns / self.total_time_ns if self.total_time_ns else 0.0

    def ridge_point(self, key: str = "matrix_bf16") -> float | None:
        """FLOP per byte where the compute roof ``key`` meets the memory roof."""
        if self.peaks is None or not self.peaks.memory_bw_bytes_per_s:
            return None
        peak = self.peaks.flops_per_s.get(key)
        return peak / self.peaks.memory_bw_bytes_per_s if peak else None

    def section(self, *, max_instances: int = 200) -> RooflineSection:
        """The JSON report's ``roofline`` section: the ``max_instances`` longest calls with the rows."""
        by_class: Counter[str] = Counter()
        for row in self.rows:
            by_class[row.bound] += row.time_ns
        top_instances = self.top_instances(max_instances)
        return RooflineSection(
            mode=self.mode,
            time_basis="union of GPU activity per op" if self.mode == "gpu" else "CPU self time per op",
            device_name=self.device_name,
            peaks=None if self.peaks is None else _peaks_record(self.peaks),
            peaks_note=self.peaks_note,
            latency_bound_below_pct_of_roof=LATENCY_PCT,
            total_time_ns=self.total_time_ns,
            modelled_time_ns=self.modelled_time_ns,
            time_ns_by_bound=dict(sorted(by_class.items())),
            time_ns_by_dtype=self.time_ns_by_dtype(),
            notes=list(self.notes),
            above_roof_pct=ABOVE_ROOF_PCT,
            cpu_threads_used=self.cpu_threads or None,
            rows=[r.record() for r in self.rows],
            unmodelled=[
                UnmodelledOp(name=r.name, time_ns=r.time_ns, share_of_time=round(self.share(r), 6), count=r.count)
                for r in _merge_by_name(self.unmodelled)
            ],
            instances_total=self.instance_count,
            instances=[r.instance() for r in top_instances],
        )


def _peaks_record(peaks: DevicePeaks) -> RooflinePeaks:
    """The peaks as the section holds them: ints, the FLOP/s keys sorted, ``threads`` only when known."""
    return RooflinePeaks(
        name=peaks.name,
        device_type=peaks.device_type,
        provenance=peaks.provenance,
        source=peaks.source,
        matched_from=peaks.matched_from,
        measured_at=peaks.measured_at,
        threads=peaks.threads if peaks.threads else UNSET,
        memory_bw_bytes_per_s=int(peaks.memory_bw_bytes_per_s),
        flops_per_s={k: int(v) for k, v in sorted(peaks.flops_per_s.items())},
    )


def _merge_by_name(rows: list[RooflineRow]) -> list[RooflineRow]:
    merged: dict[str, RooflineRow] = {}
    for row in rows:
        have = merged.get(row.name)
        if have is None:
            merged[row.name] = RooflineRow(row.name, "", "", "", row.count, row.time_ns, 0, 0, 0, None, None,
                                           None, "unmodelled")
        else:
            have.count += row.count
            have.time_ns += row.time_ns
    return sorted(merged.values(), key=lambda r: -r.time_ns)


# ----- the analysis -----------------------------------------------------------------------------------


def roofline(
    trace: Trace,
    peaks: DevicePeaks | PeaksChoice | None = None,
    *,
    measured: dict[str, DevicePeaks] | None = None,
) -> RooflineResult:
    """Roofline of every op in ``trace``. ``peaks`` overrides the choice made from the trace's device
    name, the spec table and measured peaks (``measured``; default: the user's peaks file).

    With the defaults, the result is computed once per trace and cached on it (the report section and
    the diagnosis rules share it)."""
    if peaks is None and measured is None:
        cached = trace.cache.get("roofline.default")
        if cached is None:
            cached = _roofline(trace, None, None)
            trace.cache["roofline.default"] = cached
        return cached
    return _roofline(trace, peaks, measured)


def _roofline(
    trace: Trace, peaks: DevicePeaks | PeaksChoice | None, measured: dict[str, DevicePeaks] | None
) -> RooflineResult:
    mode = "gpu" if trace.has_device_activity else "cpu"
    device_name = _device_name(trace) if mode == "gpu" else "cpu"
    if isinstance(peaks, PeaksChoice):
        choice = peaks
    elif peaks is not None:
        choice = PeaksChoice(peaks, f"given peaks: {peaks.name}")
    else:
        choice = resolve(device_name, cpu=mode == "cpu", measured=load_measured() if measured is None else measured)
    cpu_threads = 0
    if mode == "cpu" and choice.peaks is not None and choice.peaks.device_type == "cpu":
        cpu_threads, threads_note = cpu_threads_used(trace)
        scaled = scale_cpu_threads(choice.peaks, cpu_threads)
        choice = PeaksChoice(scaled, f"{choice.note}; {_threads_note(choice.peaks, scaled, cpu_threads, threads_note, trace)}",
                             choice.notes)
    items, issuer, weights, starts, ends = _work_items(trace, mode)
    costs = _Costs(trace)
    target, leaf = _attribute(trace, issuer, costs)
    ops, times = _instances(mode, target, weights, starts, ends)
    calls = _calls(trace, ops, times, leaf, costs)
    if mode == "gpu":
        _mark_fp32_math(trace, calls, items, target)
    rows = _aggregate(calls)
    for row in rows:
        _classify(row, choice.peaks)
    rows.sort(key=lambda r: -r.time_ns)
    total = int(times.sum())
    notes = list(choice.notes) + _notes(rows, costs, total)
    result = RooflineResult(mode, choice.peaks, choice.note, rows, calls, total, device_name, notes)
    result.cpu_threads = cpu_threads
    return result


def _notes(rows: list[RooflineRow], costs: _Costs, total_ns: int) -> list[str]:
    """What the reader must know to trust the numbers: assumed dtypes, calls costed as no-ops, points
    left out for being above their roof."""
    notes: list[str] = []

    def share(selected: list[RooflineRow]) -> str:
        t = sum(r.time_ns for r in selected)
        return f"{len(selected)} op groups, {t / 1e6:.2f} ms, {100 * t / total_ns if total_ns else 0:.1f}% of time"

    legacy = [r for r in rows if r.assumed_fp32]
    if legacy:
        notes.append(
            "the trace records shapes without dtypes (legacy `Input dims`, no `Input type`): tensors are costed "
            f"as fp32, the default of that era's PyTorch ({share(legacy)}; rows flagged dtype_assumed); a "
            "half-precision model has half the bytes and a faster compute roof"
        )
    if costs.fallback_used:
        notes.append(f"TensorList ops (cat, _foreach_*) have no dtype in the trace: assumed {costs.fallback}")
    noops = [r for r in rows if r.bound == "no-op"]
    if noops:
        notes.append(
            "calls that return their input are costed as no work and not drawn: dropout with p=0 or in eval "
            f"mode, `to`/`contiguous` with nothing to convert or copy (no child op, no device work) ({share(noops)})"
        )
    above = [r for r in rows if r.bound == "above-roof"]
    if above:
        names = ", ".join(sorted({r.name for r in above})[:4])
        notes.append(
            f"ops measured above {ABOVE_ROOF_PCT:.0f}% of their roof are not measurements ({share(above)}: {names}): "
            "the timing and the cost model disagree (a call that did less than its shapes say, work the trace "
            "attributed to another op, peaks too low for this machine); flagged above_roof, left out of the "
            "chart and of findings"
        )
    if any(r.pct_of_roof is not None and 100 < r.pct_of_roof <= ABOVE_ROOF_PCT for r in rows):
        notes.append(
            "some ops run above 100% of their roof: either the library used an algorithm that needs fewer "
            "than the nominal FLOPs (e.g. Winograd or FFT for 3x3 convolutions; nominal FLOPs are reported, as "
            "FlopCounterMode and TraceLens count them), data came from caches rather than DRAM, or the peaks "
            "are too low (measured peaks taken on a busy machine: re-run `aiprof peaks` when it is idle)"
        )
    return notes


def _threads_note(measured: DevicePeaks, used: DevicePeaks, threads: int, source: str, trace: Trace) -> str:
    """Which thread count the CPU compute roofs are for, and why."""
    if measured.threads and threads and measured.threads != threads:
        return (f"compute roofs scaled to the {threads} intra-op thread(s) the run used ({source}): the "
                f"per-thread rate of the {measured.threads}-thread measurement × {threads}; memory bandwidth "
                "as measured")
    if measured.threads and threads:
        return f"peaks measured with {threads} thread(s), as the run used ({source})"
    concurrent = concurrent_op_threads(trace)
    seen = f"; ops ran on up to {concurrent} threads at once" if concurrent > 1 else ""
    if threads:
        return (f"the run used {threads} intra-op thread(s) ({source}), but the peaks do not say how many "
                "threads measured them: compute roofs as measured")
    count = f"{measured.threads} thread(s)" if measured.threads else "an unknown number of threads"
    return (f"peaks measured with {count}; the trace does not say how many intra-op threads the run used "
            f"(no aiprof run metadata beside it){seen}: with fewer, its compute roofs are lower than shown")


def cpu_threads_used(trace: Trace) -> tuple[int, str]:
    """Intra-op threads the profiled process used, from the aiprof run metadata beside the trace
    (``meta.json``: ``torch.get_num_threads()`` of this rank, else of rank 0, else ``OMP_NUM_THREADS``),
    and where that came from; ``(0, "")`` when unknown (Kineto traces do not record it)."""
    cached = trace.cache.get("roofline.cpu_threads")
    if cached is None:
        cached = trace.cache["roofline.cpu_threads"] = _read_run_threads(trace)
    return cached


def _read_run_threads(trace: Trace) -> tuple[int, str]:
    from aiprof.rundir import owner_of

    path = getattr(trace, "path", None)
    found = owner_of(path) if path is not None else None
    if found is None:
        return 0, ""
    meta = found.meta
    for value in [r.torch_threads for r in meta.ranks if r.rank == trace.rank] + [meta.torch_threads]:
        if isinstance(value, int) and value > 0:
            return value, "torch.get_num_threads() in the run's meta.json"
    text = meta.env.get("OMP_NUM_THREADS", "").strip()
    if text.isdecimal() and int(text) > 0:
        return int(text), "OMP_NUM_THREADS in the run's meta.json"
    return 0, ""


def concurrent_op_threads(trace: Trace) -> int:
    """The most threads of one process running top-level CPU ops at the same moment (inter-op
    parallelism; intra-op worker threads record no ops, so this is a lower bound on threads used)."""
    c = trace.columns
    rows = trace.rows_of(Kind.CPU_OP)
    if not rows.size:
        return 0
    par = links.parent(trace)
    top = rows[par[rows] < 0]
    if not top.size:
        return 0
    starts, ends = c.ts[top], c.ts[top] + c.dur[top]
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(top.size, dtype=np.int64), -np.ones(top.size, dtype=np.int64)])
    order = np.lexsort((steps, times))  # ends before starts at the same instant
    return int(np.cumsum(steps[order]).max())


def fp32_matrix_math(kernel_name: str) -> str:
    """Which units ran an FP32 GEMM/convolution kernel, from its name: ``"tf32"`` (TF32 tensor cores),
    ``"fma"`` (FP32 FMA / CUDA cores) or ``""`` (the name does not say: split-K reductions, vendor
    kernels with opaque names). The names are read by :func:`aiprof.analysis.kernels.math_class` (one
    classifier for the roofline and the rules); a GEMV is FMA work whatever its dtype."""
    from aiprof.analysis.kernels import MATH_FP32, MATH_TENSOR_CORE, math_class

    if _GEMV.search(kernel_name):
        return "fma"
    code = math_class(kernel_name)
    return "tf32" if code == MATH_TENSOR_CORE else "fma" if code == MATH_FP32 else ""


_GEMV = re.compile(r"(?i)gemv")


def _mark_fp32_math(trace: Trace, calls: _Calls, items: I64, target: I64) -> None:
    """Give FP32 matrix calls the math their kernels used (``OpCost.math``): a call with any TF32
    tensor-core kernel is TF32, else one with an FP32 FMA kernel is FMA; others keep the default."""
    fp32 = [i for i, cost in enumerate(calls.costs) if cost.unit == "matrix" and cost.dtype == "fp32"]
    if not fp32 or not items.size:
        return
    names = trace.columns.name[items].astype(np.int64)
    found: dict[int, str] = {}
    for n in unique(names).tolist():
        found[n] = fp32_matrix_math(trace.strings[n])
    rank = {"": 0, "fma": 1, "tf32": 2}
    ids = unique(names)
    code = np.zeros(int(ids.max()) + 1, dtype=np.int64)
    code[ids] = [rank[found[n]] for n in ids.tolist()]
    kind = code[names]
    hit = (kind > 0) & (target >= 0)
    if not hit.any():
        return
    per_op = np.zeros(len(trace.columns), dtype=np.int64)  # per op row: 2 TF32, 1 FMA, 0 unknown
    np.maximum.at(per_op, target[hit], kind[hit])
    wanted = np.isin(calls.cost_id, np.array(fp32, dtype=np.int64)) & (calls.op >= 0)
    wanted &= per_op[np.maximum(calls.op, 0)] > 0
    variants: dict[tuple[int, str], int] = {}
    for i in np.flatnonzero(wanted).tolist():
        math = "tf32" if per_op[int(calls.op[i])] == 2 else "fma"
        key = (int(calls.cost_id[i]), math)
        if key not in variants:
            variants[key] = len(calls.costs)
            calls.costs.append(replace(calls.costs[key[0]], math=math))
        calls.cost_id[i] = variants[key]


def _device_name(trace: Trace) -> str:
    ids = trace.device_ids
    for dev in trace.devices:
        if dev.name and (not ids or dev.index in ids):
            return dev.name
    return next((d.name for d in trace.devices if d.name), "")


def _work_items(trace: Trace, mode: str) -> tuple[I64, I64, I64, I64, I64]:
    """Rows of work, the op that issued each, its weight (CPU self time), and its interval."""
    c = trace.columns
    if mode == "gpu":
        rows = trace.rows_of(*GPU_WORK_KINDS)
        issuer = links.gpu_op(trace)[rows]
        return rows, issuer, c.dur[rows], c.ts[rows], c.ts[rows] + c.dur[rows]
    rows = trace.rows_of(Kind.CPU_OP)
    par = links.parent(trace)
    nest = np.flatnonzero(trace.kind_mask(*links.NEST_KINDS) & (par >= 0))
    child_time = np.zeros(len(c), dtype=np.int64)
    np.add.at(child_time, par[nest], c.dur[nest])
    self_time = np.maximum(c.dur[rows] - child_time[rows], 0)
    return rows, rows.copy(), self_time, c.ts[rows], c.ts[rows] + c.dur[rows]


class _Costs:
    """Op costs of CPU op rows, computed once per distinct (name, recorded inputs, output hint).

    :meth:`has_cost` computes every candidate row's cost at once (per signature, not per row) and keeps
    a cost id per row; :meth:`cost` then is one lookup."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.by_key: dict[tuple[int, int, tuple[int, ...]], int] = {}  # → index into ``table`` (-1: none)
        self.table: list[OpCost] = []
        self.fallback: str | None = None
        self.fallback_used = False
        self.noops = 0  # childless to/contiguous calls costed as no-ops
        self._known_names = {i for i, s in enumerate(trace.strings) if is_modelled_name(s)}
        self.cid = np.full(len(trace.columns), -1, dtype=np.int64)  # per row: index into ``table``

    @cached_property
    def hints(self) -> dict[int, list[int]]:
        """Output shapes of convolutions, read off their backward ops (see :func:`conv_output_hints`)."""
        return conv_output_hints(self.trace)

    def cost(self, row: int) -> OpCost | None:
        """The cost of a row (after :meth:`has_cost`)."""
        k = int(self.cid[row])
        return self.table[k] if k >= 0 else None

    def _cost_id(self, name: int, sig: int, hint: list[int] | None) -> int:
        key = (name, sig, tuple(hint or ()))
        found = self.by_key.get(key)
        if found is None:
            cost = self._compute(name, sig, hint)
            found = -1
            if cost is not None:
                found = len(self.table)
                self.table.append(cost)
                self.fallback_used |= cost.assumed_dtype and not cost.assumed_fp32
            self.by_key[key] = found
        return found

    def _compute(self, name: int, sig: int, hint: list[int] | None) -> OpCost | None:
        if name not in self._known_names or sig < 0:
            return None
        inputs = self.trace.signature_inputs(sig)
        if not inputs.dims:
            return None
        return op_cost(self.trace.strings[name], inputs.dims, inputs.types, inputs.concrete,
                       fallback_dtype=self.fallback, output_hint=hint, input_strides=inputs.strides)

    def has_cost(self) -> np.ndarray:
        """For every row, whether it is a CPU op with a cost model that its inputs satisfy. Ops without a
        dtype (TensorList inputs) are costed last, with the trace's dominant dtype as their fallback."""
        c = self.trace.columns
        known = np.array(sorted(self._known_names), dtype=np.int64)
        rows = np.flatnonzero((c.kind == int(Kind.CPU_OP)) & np.isin(c.name, known))
        sig = self.trace.op_signatures(rows)
        rows, sig = rows[sig >= 0], sig[sig >= 0]
        names = c.name[rows].astype(np.int64)
        store = self.trace.op_args
        used = unique(sig)
        is_list_sig = np.zeros(store.distinct, dtype=bool)
        is_list_sig[used] = [b"TensorList" in store.text(k) for k in used.tolist()]
        hints = self.hints
        hinted = arrays.isin(rows, np.fromiter(hints, dtype=np.int64, count=len(hints))) if hints else np.zeros(len(rows), bool)
        pair = names * (store.distinct + 1) + sig
        for list_pass in (False, True):
            if list_pass:
                self.fallback = self._dominant_dtype()
            take = (is_list_sig[sig] == list_pass)
            plain = take & ~hinted
            uniq, first, inverse = np.unique(pair[plain], return_index=True, return_inverse=True)
            plain_names, plain_sigs = names[plain][first].tolist(), sig[plain][first].tolist()
            ids = np.array([self._cost_id(n, k, None) for n, k in zip(plain_names, plain_sigs)], dtype=np.int64)
            self.cid[rows[plain]] = ids[inverse.reshape(-1)] if len(ids) else -1
            for i in np.flatnonzero(take & hinted).tolist():
                r = int(rows[i])
                self.cid[r] = self._cost_id(int(names[i]), int(sig[i]), hints.get(r))
        return self.cid >= 0

    def mark_childless_noops(self, issuer: I64) -> int:
        """Calls of ``NOOP_WHEN_CHILDLESS`` ops (``to``, ``contiguous``) with no child op and no device work
        of their own returned their input: their cost becomes :func:`noop_cost`. Returns how many."""
        c = self.trace.columns
        names = [i for i in self._known_names if split_name(self.trace.strings[i])[0] in NOOP_WHEN_CHILDLESS]
        if not names:
            return 0
        rows = np.flatnonzero((self.cid >= 0) & np.isin(c.name, np.array(names, dtype=np.int64)))
        if not rows.size:
            return 0
        par = links.parent(self.trace)
        nested = np.flatnonzero(self.trace.kind_mask(*links.NEST_KINDS) & (par >= 0))
        busy = np.zeros(len(c), dtype=bool)
        busy[par[nested]] = True  # a child op or runtime call (the copy, a memcpy launch)
        if self.trace.has_device_activity:  # device work attributed to the op itself (on CPU-only traces
            busy[issuer[issuer >= 0]] = True  # every op is its own work item: that says nothing)
        idle = rows[~busy[rows]]
        if not idle.size:
            return 0
        noop_id = len(self.table)
        self.table.append(noop_cost(self.table[int(self.cid[idle[0]])].dtype))
        self.cid[idle] = noop_id
        return int(idle.size)

    def _dominant_dtype(self) -> str | None:
        seen: Counter[str] = Counter()
        for k in self.by_key.values():
            cost = self.table[k] if k >= 0 else None
            if cost is not None and cost.family in ("gemm", "conv", "attention", "norm", "elementwise"):
                seen[cost.dtype] += 1
        floats = [(n, d) for d, n in seen.items() if d in ("fp32", "fp16", "bf16", "fp64", "fp8")]
        return max(floats)[1] if floats else None


_CONV_BACKWARD = r"convolution_backward"


def conv_output_hints(trace: Trace) -> dict[int, list[int]]:
    """Convolution row → its output shape, taken from the ``grad_output`` of its backward op.

    Traces without ``Concrete Inputs`` (Kineto before torch 1.13) record no stride or padding, so a
    convolution's output size cannot be computed from its inputs; assuming stride 1 over-counts a
    stride-2 convolution 4×. Its backward op's ``grad_output`` has exactly the output's shape. The
    backward op is linked to the forward convolution by autograd (``links.forward_of``), and the hint is
    given to the forward op and its convolution ancestors (``aten::conv2d`` → ``_convolution`` → …), and to
    the legacy ``*_convolution_backward_input`` op as the size of the input it produces."""
    bwd = trace.ops().where_name(_CONV_BACKWARD).rows
    if bwd.size == 0:
        return {}
    forward = links.forward_of(trace)
    parent = links.parent(trace)
    hints: dict[int, list[int]] = {}
    for row in bwd.tolist():
        node = row
        for _ in range(8):  # climb from the backward op to the autograd node linked to its forward op
            if node < 0 or forward[node] >= 0:
                break
            node = int(parent[node])
        if node < 0 or forward[node] < 0:
            continue
        name = trace.name_of(row)
        dims = trace.op_inputs(row).dims
        # aten::convolution_backward(grad_output, input, weight, …) puts grad_output first; the
        # backend ops (cudnn_/miopen_/mkldnn_convolution_backward[_input|_weight]) put it second.
        first = split_name(name)[0] in ("convolution_backward", "convolution_backward_overrideable")
        index = 0 if first else 1
        grad_output = dims[index] if len(dims) > index else None
        if not (isinstance(grad_output, list) and len(grad_output) >= 3):
            continue
        fwd = int(forward[node])
        fwd_dims = trace.op_inputs(fwd).dims
        if name.endswith("_backward_input") and fwd_dims and isinstance(fwd_dims[0], list):
            hints[row] = [int(v) for v in fwd_dims[0]]  # grad_input has the forward input's shape
        while fwd >= 0 and "conv" in trace.name_of(fwd):
            hints.setdefault(fwd, [int(v) for v in grad_output])
            fwd = int(parent[fwd])
    return hints


def _climb(par: I64, start: I64, stop: np.ndarray) -> I64:
    """For each start row, the first row at or above it (via ``par``) where ``stop`` is true, else -1."""
    cur = start.copy()
    for _ in range(128):
        moving = (cur >= 0) & ~stop[np.maximum(cur, 0)]
        if not moving.any():
            break
        cur[moving] = par[cur[moving]]
    cur[(cur >= 0) & ~stop[np.maximum(cur, 0)]] = -1
    return cur


# An op counts as composite (its work attributed to the ops inside it) only when it contains a modelled op
# of the same or a heavier family: addmm calling copy_ for its bias stays the GEMM; linear over addmm and
# the math SDPA over bmm and softmax hand their work to the inner ops.
FAMILY_RANK = {"gemm": 3, "conv": 3, "attention": 3, "norm": 2, "softmax": 2, "optimizer": 2, "reduce": 1,
               "elementwise": 1, "index": 1, "pool": 1, "copy": 0, "noop": 0}


def _attribute(trace: Trace, issuer: I64, costs: _Costs) -> tuple[I64, np.ndarray]:
    """Innermost modelled op around each issuing op; the issuing op itself when none (unmodelled: this
    includes a composite op's own time, e.g. ``aten::matmul`` dispatching to ``aten::mm`` on a CPU).
    Also returns the mask of the ops work is attributed to (modelled and not composite)."""
    par = links.parent(trace)
    has = costs.has_cost()
    costs.noops = costs.mark_childless_noops(issuer)
    rank = np.full(len(has), -1, dtype=np.int8)
    modelled = np.flatnonzero(has)
    family_rank = np.array([FAMILY_RANK.get(cost.family, 1) for cost in costs.table] + [-1], dtype=np.int8)
    rank[modelled] = family_rank[costs.cid[modelled]]
    covers = np.zeros(len(has), dtype=bool)
    cur, inner_rank = par[modelled], rank[modelled]
    for _ in range(128):
        keep = cur >= 0
        cur, inner_rank = cur[keep], inner_rank[keep]
        if cur.size == 0:
            break
        hit = has[cur] & (inner_rank >= rank[cur])
        covers[cur[hit]] = True
        cur = par[cur]
    leaf = has & ~covers
    target = _climb(par, issuer, leaf)
    return np.where(target >= 0, target, issuer), leaf


def _instances(mode: str, target: I64, weights: I64, starts: I64, ends: I64) -> tuple[I64, I64]:
    """Attributed op rows (ascending; -1: items with no issuing op) and the time of each."""
    if target.size == 0:
        none = np.zeros(0, dtype=np.int64)
        return none, none
    if mode == "cpu":
        uniq, inv = np.unique(target, return_inverse=True)
        totals = np.bincount(inv.reshape(-1), weights=weights.astype(np.float64))
        return uniq.astype(np.int64), totals.astype(np.int64)
    per_op = _union_per_group(target, starts, ends)
    ops = np.fromiter(per_op, dtype=np.int64, count=len(per_op))
    times = np.fromiter(per_op.values(), dtype=np.int64, count=len(per_op))
    order = np.argsort(ops, kind="stable")
    return ops[order], times[order]


def _union_per_group(group: I64, starts: I64, ends: I64) -> dict[int, int]:
    """Covered length of each group's intervals, vectorised: groups are laid end to end on one axis."""
    order = np.lexsort((starts, group))
    g, s, e = group[order], starts[order], ends[order]
    uniq, gid = np.unique(g, return_inverse=True)
    t0 = int(s.min())
    span = int(e.max()) - t0 + 1
    if span * (len(uniq) + 1) >= 2**62:
        return _union_per_group_slow(g, s, e)
    shift = gid.astype(np.int64) * span - t0
    s2, e2 = s + shift, e + shift
    prev = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e2)[:-1]))
    covered = np.maximum(0, e2 - np.maximum(s2, prev))
    totals = np.bincount(gid, weights=covered.astype(np.float64), minlength=len(uniq))
    return {int(k): int(v) for k, v in zip(uniq.tolist(), totals.tolist(), strict=True)}


def _union_per_group_slow(g: I64, s: I64, e: I64) -> dict[int, int]:
    out: dict[int, int] = {}
    last_group, reach = None, 0
    for gi, si, ei in zip(g.tolist(), s.tolist(), e.tolist(), strict=True):
        if gi != last_group:
            last_group, reach = gi, si
        out[gi] = out.get(gi, 0) + max(0, ei - max(si, reach))
        reach = max(reach, ei)
    return out


def cached_op_cost(trace: Trace, row: int) -> OpCost | None:
    """``op_cost`` of a CPU op row from its recorded inputs, computed once per (name, signature) and
    trace (the diagnosis rules ask for the same ops many times)."""
    sig = trace.op_args.signature(row)
    memo: dict[tuple[int, int], OpCost | None] = trace.cache.setdefault("roofline.op_cost", {})
    key = (int(trace.columns.name[row]), sig)
    if key not in memo:
        inputs = trace.signature_inputs(sig) if sig >= 0 else OpInputs()
        memo[key] = op_cost(trace.name_of(row), inputs.dims, inputs.types, inputs.concrete,
                            input_strides=inputs.strides)
    return memo[key]


def _dims_text(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _signature_texts(trace: Trace, signature: int) -> tuple[str, str, str]:
    """Compact JSON of the input dims, types and concrete values of a signature (-1: none recorded),
    made once per signature."""
    memo: dict[int, tuple[str, str, str]] = trace.cache.setdefault("roofline.input_texts", {})
    texts = memo.get(signature)
    if texts is None:
        inputs = trace.signature_inputs(signature) if signature >= 0 else OpInputs()
        texts = (_dims_text(inputs.dims), _dims_text(inputs.types), _dims_text(inputs.concrete))
        memo[signature] = texts
    return texts


def _forward_labels(trace: Trace, ops: I64) -> tuple[I64, list[str]]:
    """For ops inside a backward autograd node: ``name [input dims]`` of the forward op, as an index per op
    into a list of labels (-1: none), made once per distinct forward (name, recorded inputs)."""
    ids = np.full(ops.shape, -1, dtype=np.int64)
    if not ops.size:
        return ids, []
    fwd = links.forward_of(trace)
    node = _climb(links.parent(trace), ops, fwd >= 0)
    found = np.flatnonzero(node >= 0)
    forward = fwd[node[found]]
    key = trace.columns.name[forward].astype(np.int64) * (trace.op_args.distinct + 1) + trace.op_signatures(forward)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    labels = [f"{trace.name_of(f)} {_signature_texts(trace, trace.op_args.signature(f))[0]}"
              for f in forward[first].tolist()]
    ids[found] = inverse.reshape(-1)
    return ids, labels


def _calls(trace: Trace, ops: I64, times: I64, leaf: np.ndarray, costs: _Costs) -> _Calls:
    """The per-call table: each call's name, cost (leaf ops only) and input texts (one per signature)."""
    c = trace.columns
    real = ops >= 0
    safe = np.maximum(ops, 0)
    sig = np.where(real, trace.op_signatures(ops), -1)
    used = unique(sig)
    texts: list[tuple[str, str, str]] = []
    text_index: dict[tuple[str, str, str], int] = {}
    slot = np.zeros(trace.op_args.distinct + 1, dtype=np.int64)  # the last slot: no recorded inputs (-1)
    for k in used.tolist():
        found = _signature_texts(trace, k)
        slot[k] = text_index.setdefault(found, len(texts))
        if slot[k] == len(texts):
            texts.append(found)
    cost_id = np.where(real & leaf[safe], costs.cid[safe], -1)
    forward_id = np.full(ops.shape, -1, dtype=np.int64)
    forward_id[real], forward = _forward_labels(trace, ops[real])
    return _Calls(
        op=ops,
        time_ns=times,
        ts_ns=np.where(real, c.ts[safe], -1),
        name=np.where(real, c.name[safe].astype(np.int64), -1),
        cost_id=cost_id,
        text_id=slot[sig],
        costs=costs.table,
        texts=texts,
        strings=trace.strings,
        forward_id=forward_id,
        forward=forward,
    )


def _aggregate(calls: _Calls) -> list[RooflineRow]:
    """One row per (name, input dims, types, concrete inputs), in order of each group's first call; its
    cost fields are those of that call, its counts, times, FLOPs and bytes the sums over the group."""
    if not len(calls):
        return []
    key = calls.name * (len(calls.texts) + 1) + calls.text_id
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    order = np.argsort(first, kind="stable")  # groups in order of their first call
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    group = rank[group]
    first = first[order]
    counts = np.bincount(group, minlength=len(first))
    times = np.zeros(len(first), dtype=np.int64)
    np.add.at(times, group, calls.time_ns)
    rows = [calls.row(int(i), None) for i in first.tolist()]
    for row, n, t in zip(rows, counts.tolist(), times.tolist(), strict=True):
        row.count, row.time_ns, row.ts_ns = n, t, -1
        row.flops = row.bytes_read = row.bytes_written = 0
    # FLOPs and bytes: Python ints per (group, cost) pair (sums can pass int64)
    has_cost = calls.cost_id >= 0
    # Distinct (group, cost) pairs in (group, cost) order, as one int64 key each (np.unique(axis=1)
    # sorts rows as opaque bytes: 20 ms on a 0.3M-event trace)
    width = len(calls.costs) + 1
    pair_keys, n_pairs = np.unique(group[has_cost] * width + calls.cost_id[has_cost], return_counts=True)
    for g, k, n in zip((pair_keys // width).tolist(), (pair_keys % width).tolist(), n_pairs.tolist(), strict=True):
        cost = calls.costs[k]
        rows[g].flops += n * cost.flops
        rows[g].bytes_read += n * cost.bytes_read
        rows[g].bytes_written += n * cost.bytes_written
    return rows


def roof_for(row: RooflineRow, peaks: DevicePeaks) -> tuple[float, str] | None:
    """The compute roof for a row. FP32 matrix work: the TF32 tensor-core roof when its kernels ran on
    TF32 tensor cores (``row.math``, from the kernel names), the FP32 roof when they ran on FMA cores;
    when the names do not say, cuDNN's default (TF32 for convolutions where it exists) and PyTorch's
    (FP32 for matmuls)."""
    if row.unit is None or row.dtype is None:
        return None
    if row.math == "fma" and row.dtype == "fp32":
        return peaks.compute_peak(row.unit, "fp32")
    tf32_default = row.family == "conv" or row.math == "tf32"
    if tf32_default and row.unit == "matrix" and row.dtype == "fp32" and peaks.device_type == "gpu":
        tf32 = peaks.compute_peak("matrix", "tf32")
        if tf32 is not None and tf32[1] == "matrix_tf32":
            return tf32
    return peaks.compute_peak(row.unit, row.dtype)


def _roof_of(cost: OpCost, peaks: DevicePeaks | None) -> tuple[str, int, bool]:
    """For a call of this cost: its class when that does not depend on the call's time ("" when it
    does), its roof time in ns, and whether the compute roof is the higher one (as :func:`_classify`)."""
    row = RooflineRow("", "", "", "", 1, 0, cost.flops, cost.bytes_read, cost.bytes_written, cost.family,
                      cost.unit, cost.dtype, "", math=cost.math)
    _classify(row, peaks)
    if row.bound not in ("compute-bound", "memory-bound"):
        return row.bound, 0, False
    return "", row.roof_time_ns, row.bound == "compute-bound"


def _classify(row: RooflineRow, peaks: DevicePeaks | None) -> None:
    if row.family is None:
        row.bound = "unmodelled"
        return
    if row.family == "noop":  # the call returned its input: no work, no roof, nothing to save
        row.bound, row.roof_key, row.roof_time_ns, row.pct_of_roof = "no-op", None, 0, None
        return
    roof = roof_for(row, peaks) if peaks is not None else None
    if peaks is None or roof is None or not peaks.memory_bw_bytes_per_s:
        row.bound = "unknown-peaks"
        return
    peak, key = roof
    compute_s = row.flops / peak
    memory_s = row.bytes / peaks.memory_bw_bytes_per_s
    row.roof_key = key
    row.roof_time_ns = int(round(max(compute_s, memory_s) * 1e9))
    if row.time_ns <= 0:
        row.pct_of_roof = None
        row.bound = "compute-bound" if compute_s >= memory_s else "memory-bound"
        return
    row.pct_of_roof = 100.0 * row.roof_time_ns / row.time_ns
    if row.pct_of_roof < LATENCY_PCT:
        row.bound = "latency-bound"
    elif row.pct_of_roof > ABOVE_ROOF_PCT:
        row.bound = "above-roof"
    else:
        row.bound = "compute-bound" if compute_s >= memory_s else "memory-bound"
