"""The report document as typed values: what ``build_document`` returns and every renderer reads.

The JSON a report file holds is these structs encoded by msgspec, field for field and in this order
(``docs/json-schema.md``); ``src/aiprof/data/report.schema.json`` is generated from them
(``python -m aiprof.report.schema``). Reading a report written by an older aiprof decodes into the same
types: fields added since have defaults. A field that is ``UNSET`` is left out of the JSON (a section
the analysis did not compute, run context of traces that are not in an ``aiprof run`` directory).

Each per-rank analysis section is the analysis' own msgspec Struct, defined in ``analysis/`` (or
``roofline/``, ``memory/``) and used here as is; the free-form trace metadata (``distributed``,
``trace_metadata``) stays ``dict[str, Any]``; the run directory's ``run_metadata`` and ``telemetry`` are
:mod:`aiprof.runmeta`'s types (a collective's raw Kineto args, ``communication.collectives[].metadata``, are
free-form trace metadata too).

Schema versions: 1.0 is the first typed report; 1.1 adds ``ranks[].memory`` (the rank's
:class:`~aiprof.memory.report.MemoryReport`, present when it has memory data). A 1.0 report decodes as is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from aiprof.analysis.arrival import CrossRank
from aiprof.analysis.comm import CommunicationSection
from aiprof.analysis.compat import Compat
from aiprof.analysis.compile import CompileReport
from aiprof.analysis.failures import FailedRank
from aiprof.analysis.graphs import GraphCaptureSection
from aiprof.analysis.health import Health
from aiprof.analysis.inference import InferenceReport
from aiprof.analysis.kernels import KernelStats
from aiprof.analysis.ops import OpStats
from aiprof.analysis.overview import TimelineOverview
from aiprof.analysis.timeline import Totals as Totals  # the report's totals are the analysis' (re-exported)
from aiprof.analysis.wholerun import WholeRun
from aiprof.analysis.modules import ModuleProfile
from aiprof.analysis.stacks import StackProfile
from aiprof.memory.report import MemoryReport
from aiprof.roofline.attention import AttentionReport
from aiprof.roofline.mfu import MfuReport
from aiprof.roofline.section import RooflineSection
from aiprof.report.runstatus import RunStatus
from aiprof.rules.finding import FindingRecord
from aiprof.runmeta import RunMeta, RunTelemetry
from aiprof.trace.model import DeviceInfo

SCHEMA_VERSION = "1.1"

NonNegative = Annotated[int, Meta(ge=0)]


class Step(msgspec.Struct, kw_only=True):
    """One step window on one device: every ns of it in exactly one bucket; idle split by cause."""

    name: str
    number: int
    start_ns: int
    duration_ns: NonNegative
    breakdown_ns: dict[str, int]  # compute, communication, memcpy, memset, compile, idle
    idle_causes_ns: dict[str, int]  # data_loading, host, sync, launch, collective_wait, unknown


class Device(msgspec.Struct, kw_only=True):
    """One device of a rank (``gpu:0``, ``cpu``…) with its steps and totals."""

    device: str
    index: int  # -1 for the CPU
    kind: str  # "gpu" or "cpu"
    name: str
    steps: list[Step]
    totals: Totals


class IncompleteStep(msgspec.Struct, kw_only=True):
    """A step of a partial trace left out of every number: its CPU side is there, its device side is not."""

    name: str
    number: int
    start_ns: int
    duration_ns: NonNegative
    incomplete: bool = True
    reason: str
    detail: str
    launches: NonNegative = 0
    launches_recorded: NonNegative = 0
    cpu_ops: NonNegative = 0


class Coverage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The span the device record covers and whether the trace is partial (only ``partial`` when the
    analysis had no coverage to report)."""

    partial: bool
    cut_off: bool | None = None
    device_start_ns: int | None = None
    device_end_ns: int | None = None
    clipped_ns: NonNegative | None = None
    complete_steps: NonNegative | None = None
    incomplete_steps: NonNegative | None = None


class RankReport(msgspec.Struct, kw_only=True):
    """Everything the report says about one rank; the detail sections are the analyses' own types."""

    rank: NonNegative
    rank_source: str  # "distributedInfo", "file name" or "file order"
    path: str
    event_count: NonNegative
    distributed: dict[str, Any] = msgspec.field(default_factory=dict)
    trace_metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    device_properties: list[DeviceInfo] = msgspec.field(default_factory=list)
    primary_device: str
    devices: list[Device]
    step_source: str = "ProfilerStep"
    steps: list[Step]
    totals: Totals
    notes: list[str]
    incomplete_steps: list[IncompleteStep] = msgspec.field(default_factory=list)
    coverage: Coverage = msgspec.field(default_factory=lambda: Coverage(partial=False))
    # Kernel statistics per device, the longest 50 names each (analysis/kernels.py).
    kernels: KernelStats | UnsetType = UNSET
    # Op statistics: the 50 longest op names by GPU time and by self CPU time (analysis/ops.py).
    ops: OpStats | UnsetType = UNSET
    # Collectives, their summary and overlap, and exposed vs hidden communication per group and phase.
    communication: CommunicationSection | UnsetType = UNSET
    # The peers' numbers of the rank: HTA, TraceLens, the TensorBoard plugin (analysis/compat; docs/peer-conventions.md).
    compat: Compat | UnsetType = UNSET
    # FLOPs and bytes per op from shapes against the device's peaks, the longest calls, and with ``analyze
    # --ncu`` the kernels Nsight Compute measured (roofline/section.py; docs/roofline.md).
    roofline: RooflineSection | UnsetType = UNSET
    # Each device's buckets in 240 time bins over the analysed span (analysis/overview.py): the HTML strips.
    timeline_overview: TimelineOverview | UnsetType = UNSET
    # CUDA/HIP graph capture in the trace (analysis/graphs.py): counts, and whether the trace is a capture.
    graph_capture: GraphCaptureSection | UnsetType = UNSET
    # torch.compile: compilations (recompiles and their causes), compiled-graph calls, guard checks, Inductor
    # kernels, CUDA graph replays (analysis/compile.py); only ``compiled: false`` without torch.compile. Schema 1.1.
    compile: CompileReport | UnsetType = UNSET
    # Model FLOPs utilisation: matrix FLOPs from shapes per step over the dense matrix peak of the dtype in
    # use (roofline/mfu.py); ``available: false`` with a ``reason`` when it cannot be computed. Schema 1.1.
    mfu: MfuReport | UnsetType = UNSET
    # Which attention path runs (FlashAttention, cuDNN, memory-efficient, CK, Triton, paged, unfused) from the
    # kernels' names, its share of kernel time per step and, with shapes, its TFLOP/s vs the dense matrix peak
    # (roofline/attention.py); ``available: false`` with a ``reason`` when no kernel is attention. Schema 1.1.
    attention: AttentionReport | UnsetType = UNSET
    # Inference steps by phase (prefill / decode / mixed) and requests' TTFT / ITL (analysis/inference.py).
    inference: InferenceReport | UnsetType = UNSET
    # Where the rank's memory went (``profile_memory`` events, or its allocator snapshot): schema 1.1.
    memory: MemoryReport | UnsetType = UNSET
    # Host time by Python frame (``with_stack``; else ``recorded: false`` and how to record it) and time per
    # nn.Module, forward and backward (analysis/stacks.py, analysis/modules.py): additive, schema 1.1.
    stacks: StackProfile | UnsetType = UNSET
    modules: ModuleProfile | UnsetType = UNSET


SECTIONS = ("kernels", "ops", "communication", "compat", "roofline", "timeline_overview", "graph_capture", "compile",
            "inference", "mfu", "attention")


class Summary(msgspec.Struct, kw_only=True):
    """Run-level facts: the median step over ranks and the slowest rank (the one the others wait for)."""

    rank_count: NonNegative = 0
    step_count: NonNegative = 0
    step_source: str = "ProfilerStep"
    median_step_ns: NonNegative = 0
    gpu_utilization: float = 0.0
    slowest_rank: int = 0
    device_kind: Literal["gpu", "cpu"] = "cpu"
    partial: bool = False
    incomplete_step_count: NonNegative = 0
    partial_note: str | None = None
    # "graph_capture" when every rank's trace records a CUDA/HIP graph capture phase (analysis/graphs.py),
    # described by ``capture_note`` and judged by no steady-state finding; both absent for any other trace.
    trace_kind: Literal["graph_capture"] | UnsetType = UNSET
    capture_note: str | UnsetType = UNSET
    # Rank files of the folder that are in no number (unreadable, analysis raised, worker died: analysis/failures.py),
    # counted and named; both absent when none failed. ``rank_count`` counts the ranks analysed. Schema 1.1.
    failed_rank_count: NonNegative | UnsetType = UNSET
    failed_ranks: list[FailedRank] | UnsetType = UNSET


class Report(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The versioned report of one run (one or more ranks)."""

    schema_version: str
    generator: str
    sources: list[str]
    summary: Summary
    ranks: Annotated[list[RankReport], Meta(min_length=1)]
    findings: list[FindingRecord]
    warnings: list[str]
    # Run context of an ``aiprof run`` directory (report.runcontext); absent for bare traces.
    run_metadata: RunMeta | None = None  # meta.json: the fields it sets (aiprof.runmeta)
    telemetry: RunTelemetry | None = None  # the run's counters over time, downsampled
    # A crashed, stopped or incomplete run, or a cut-off trace (report.runstatus): absent when it ended well.
    run_status: RunStatus | UnsetType = UNSET
    # Step time and throughput over every step of an ``aiprof run`` (analysis.wholerun): run directories only.
    whole_run: WholeRun | UnsetType = UNSET
    # Several ranks with shared collectives: who arrives last at them (analysis.arrival; docs/numbers.md).
    cross_rank: CrossRank | UnsetType = UNSET
    # What the trace cannot show, measured from it, and the findings dropped or downgraded because of it
    # (analysis.health, rules.health; docs/numbers.md "Trace health"). Every renderer shows it first. Schema 1.1.
    health: Health | UnsetType = UNSET
