"""The typed result of the memory analysis: :class:`MemoryReport` (msgspec Structs, JSON as-is).

All sizes are bytes (rendered in binary units: KiB, MiB, GiB); all times are ns on the source's clock.
"""

from __future__ import annotations

import msgspec


class Site(msgspec.Struct):
    """A source site (first user frame, else the op) and the bytes it holds."""

    site: str
    bytes: int
    count: int = 0


class CategoryBytes(msgspec.Struct):
    category: str
    bytes: int


class LiveGroup(msgspec.Struct):
    """Bytes live at the peak for one category and site (the icicle's leaves)."""

    category: str
    site: str
    bytes: int
    count: int = 0  # blocks (0 in reports written before it was recorded)


class StepMemory(msgspec.Struct):
    """One step on one device."""

    index: int
    start_ns: int
    end_ns: int
    peak_allocated_bytes: int
    end_allocated_bytes: int
    allocations: int
    allocated_bytes: int
    segment_allocs: int
    segment_frees: int
    # where the source has reserved bytes (a snapshot, GPU Kineto): the step's highest reserved, and
    # reserved − allocated at the step's allocated peak
    peak_reserved_bytes: int | None = None
    fragmentation_at_peak_bytes: int | None = None
    # from the capture's memory_stats() samples (one after each step): num_alloc_retries during the step
    alloc_retries: int | None = None


class LeakTrend(msgspec.Struct):
    """Allocated bytes at the end of each step, and what later steps left live."""

    end_of_step_bytes: list[int]
    growth_bytes_per_step: int  # mean growth after the first step
    longest_growth_run: int  # most consecutive steps whose end-of-step allocated grew
    sites: list[Site]  # allocations made after the first step that are still live at the last step's end
    # blocks made in a recorded step before the peak's step and still live at the last step's end (not
    # parameters, optimizer state or gradients): what the leak adds to the peak, and what fixing it frees
    held_at_peak_bytes: int = 0


class SnapshotState(msgspec.Struct):
    """The allocator's segments when the snapshot was dumped: ``requested + rounding + cached free = reserved``."""

    segments: int
    large_segments: int
    small_segments: int
    expandable_segments: int
    reserved_bytes: int
    allocated_bytes: int  # active blocks, block sizes
    requested_bytes: int  # what the active blocks' callers asked for
    rounding_loss_bytes: int  # allocated − requested (internal free)
    cached_free_bytes: int  # inactive blocks (external free)
    largest_free_block_bytes: int


class OomVerdict(msgspec.Struct):
    """Why an allocation failed: ``capacity`` (live memory plus the request exceed the device) or
    ``fragmentation`` (the cached free memory and the device's free memory would hold the request, but no free
    block is large enough)."""

    t_ns: int
    verdict: str
    request_bytes: int
    device_free_bytes: int
    allocated_bytes: int
    reserved_bytes: int
    cached_free_bytes: int
    largest_free_block_bytes: int | None
    top_sites: list[Site]
    explanation: str


class Timeline(msgspec.Struct):
    """Allocated bytes over time, per category, downsampled (each bin keeps its highest point)."""

    t_ns: list[int]
    categories: list[str]
    bytes: list[list[int]]  # one series per category, aligned with t_ns
    reserved_bytes: list[int] | None = None


class DeviceMemory(msgspec.Struct):
    """Memory of one device over the recording."""

    device: str
    device_index: int
    capacity_bytes: int | None
    peak_allocated_bytes: int
    peak_t_ns: int
    peak_step: int | None
    unseeded_peak_bytes: int  # the peak counting only recorded allocations (what a naive replay reports)
    seed_bytes: int  # memory allocated before recording started
    peak_reserved_bytes: int | None
    reserved_at_peak_bytes: int | None
    fragmentation_at_peak_bytes: int | None  # reserved − allocated at the peak
    rounding_loss_at_peak_bytes: int | None  # Σ (block − requested) of the blocks live at the peak
    allocations: int
    allocated_bytes_total: int
    segment_allocs: int
    segment_frees: int
    live_at_peak_by_category: list[CategoryBytes]
    live_at_peak_by_site: list[Site]
    live_at_peak: list[LiveGroup]
    steps: list[StepMemory]
    leak: LeakTrend | None
    snapshot: SnapshotState | None
    ooms: list[OomVerdict]
    timeline: Timeline
    # CPU Kineto only: bytes the profiler's "Total Allocated" counted before this trace that it never frees,
    # left out of every figure (see docs/memory.md, "Peak allocated"); 0 elsewhere
    carried_over_bytes: int = 0
    # False: ``seed_bytes`` is only a lower bound (the blocks the trace frees without having seen them
    # allocated). CPU Kineto traces: the profiler's CPU counter starts at 0, whatever was live before
    seed_known: bool = True


class AllocatorStats(msgspec.Struct):
    """From ``torch.cuda.memory_stats()`` samples taken during capture (per step)."""

    samples: int
    num_alloc_retries: int
    num_ooms: int
    inactive_split_bytes_peak: int
    non_pytorch_bytes: int | None  # NVML used − reserved, at its largest


class MemoryReport(msgspec.Struct):
    """Everything ``aiprof memory`` reports."""

    source: str
    path: str
    categories_from: str  # "torch" (export_memory_timeline) or "inferred"
    expandable_segments: bool
    settings: dict[str, str]
    devices: list[DeviceMemory]
    stats: AllocatorStats | None
    warnings: list[str]
