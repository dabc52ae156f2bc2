"""The report's ``roofline`` section as types (``RankReport.roofline``): what :meth:`RooflineResult.section
<aiprof.roofline.analysis.RooflineResult.section>` builds and every renderer (the HTML report, the chart,
``aiprof roofline -o X.json``) reads. Field order is the JSON's key order (``docs/json-schema.md``).

Only msgspec here: the report model imports this module, the analysis (numpy) is not loaded with it. Every
field has a default, so a report written before a field existed decodes (``time_ns_by_dtype`` came after
schema 1.0: left out when absent). Ints for bytes, FLOPs and ns; units in the field names.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

Num = int | float


class RooflinePeaks(msgspec.Struct, kw_only=True):
    """The device peaks the roofline measured against (:class:`aiprof.roofline.peaks.DevicePeaks`):
    ``threads`` only for CPU peaks that name the threads they were measured (or scaled) with."""

    name: str
    device_type: str = "gpu"
    provenance: str = "spec"  # "spec", "measured" or "spec+measured"
    source: str = ""
    matched_from: str = ""
    measured_at: str = ""
    threads: int | UnsetType = UNSET
    memory_bw_bytes_per_s: int = 0
    flops_per_s: dict[str, int] = msgspec.field(default_factory=dict)  # ``{matrix|vector}_{dtype}``, sorted


class RooflineRowRecord(msgspec.Struct, kw_only=True):
    """One op name + input shapes, aggregated over its calls (:class:`aiprof.roofline.analysis.RooflineRow`
    with its derived numbers)."""

    name: str
    input_dims: str = ""
    input_types: str = ""
    concrete_inputs: str = ""
    count: int = 0
    time_ns: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    family: str | None = None
    unit: str | None = None
    dtype: str | None = None
    assumed_dtype: bool = False  # the dtype is an assumption (``dtype_assumed`` says why)
    dtype_assumed: str | None = None
    expanded_inputs: bool = False  # an input is an expanded view (0 stride): its storage counted once
    math: str | None = None  # fp32 matrix work: "tf32" / "fma" when its kernels' names say which units ran it
    bound: str = "unmodelled"  # compute-bound | memory-bound | latency-bound | above-roof | no-op | unmodelled | unknown-peaks
    above_roof: bool = False
    drawn: bool = True  # a measurement to draw against its roof (RooflineRow.drawn)
    roof_key: str | None = None
    arithmetic_intensity_flops_per_byte: float | None = None
    achieved_flops_per_s: int | None = None
    achieved_bytes_per_s: int | None = None
    pct_of_roof: float | None = None
    roof_time_ns: int = 0
    saving_ns: int = 0
    forward_op: str | None = None  # backward ops: the forward op (name and input dims)


class RooflineInstance(RooflineRowRecord, kw_only=True):
    """One op call (``count == 1``) with its start."""

    ts_ns: int = -1


class UnmodelledOp(msgspec.Struct, kw_only=True):
    """Time of ops without a cost model (merged by name), and their share of the roofline's time."""

    name: str
    time_ns: int
    share_of_time: float
    count: int


class MeasuredPointRecord(msgspec.Struct, kw_only=True):
    """One kernel measured by Nsight Compute (``analyze --ncu``;
    :class:`aiprof.trace.readers.ncu.MeasuredPoint`) beside the launching op's estimate from shapes. Counters are ints or floats as ncu wrote them."""

    kernel: str
    row: int = -1  # timeline kernel row, -1 unmatched
    op: str | None = None  # the CPU op that launched it (None: no op, e.g. plain CUDA programs)
    duration_ns: Num | None = None
    flops: Num | None = None
    dram_bytes: Num | None = None
    sm_sol_pct: Num | None = None
    memory_sol_pct: Num | None = None
    achieved_flops_per_s: Num | None = None
    achieved_bytes_per_s: Num | None = None
    flop_per_byte: Num | None = None
    est_flops: int | None = None  # the roofline's estimate for the whole op (all its kernels)
    est_bytes: int | None = None


class RooflineSection(msgspec.Struct, kw_only=True):
    """Roofline of one rank: the peaks used, the ops by name and shapes (time descending), the longest
    calls, and (``analyze --ncu``) the kernels Nsight Compute measured."""

    mode: str = "gpu"  # "gpu" (kernel time) or "cpu" (CPU self time)
    time_basis: str = ""
    device_name: str = ""
    peaks: RooflinePeaks | None = None
    peaks_note: str = ""
    latency_bound_below_pct_of_roof: float = 10.0
    total_time_ns: int = 0
    modelled_time_ns: int = 0
    time_ns_by_bound: dict[str, int] = msgspec.field(default_factory=dict)
    time_ns_by_dtype: dict[str, int] | UnsetType = UNSET  # modelled time by dtype, largest first (after 1.0)
    notes: list[str] = msgspec.field(default_factory=list)
    above_roof_pct: float = 200.0
    cpu_threads_used: int | None = None  # CPU traces: intra-op threads the run used (run metadata)
    rows: list[RooflineRowRecord] = msgspec.field(default_factory=list)
    unmodelled: list[UnmodelledOp] = msgspec.field(default_factory=list)
    instances_total: int = 0
    instances: list[RooflineInstance] = msgspec.field(default_factory=list)  # the longest calls
    # ``analyze --ncu``: Nsight Compute's measurements, which file they came from, and what each list is.
    measured: list[MeasuredPointRecord] | UnsetType = UNSET
    measured_source: str | UnsetType = UNSET
    basis: dict[str, str] | UnsetType = UNSET
