"""Thresholds of every rule, as one typed options object (defaults follow the peers' published ones,
see ``docs/findings.md``). Users change them with ``dataclasses.replace(DEFAULT_OPTIONS, ...)``."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from aiprof.analysis.health import PROFILER_NS_PER_EVENT


@dataclass(frozen=True)
class RuleOptions:
    """Thresholds. Shares are fractions of the mean step; times in ns."""

    # A finding needs at least this share of the step to be reported at all (tiny savings are noise).
    min_share: float = 0.01
    min_saving_ns: int = 10_000  # and at least 10 µs per step
    # Severity by share of step: >= high_share → high, >= medium_share → medium, else low.
    high_share: float = 0.15
    medium_share: float = 0.05
    data_loading_share: float = 0.05  # TensorBoard plugin: DataLoader > 5 % of the step
    decode_busy_share: float = 0.5  # decode steps whose device is busy under this share: host-bound decoding
    host_bound_share: float = 0.05  # exposed CPU-only time (catalogue A9)
    launch_bound_share: float = 0.10  # kernel-wait share (HTA / catalogue A4)
    tiny_kernel_ns: int = 10_000  # GPU kernels shorter than this are launch-latency dominated
    launch_bound_min_kernels: int = 20  # per step: a few long-queued kernels are not "launch-bound"
    tiny_cpu_op_ns: int = 20_000  # CPU ops shorter than this are dispatch-overhead dominated
    tiny_op_share: float = 0.05  # CPU traces: tiny ops (+ short Python gaps between them) → host_bound;
    # long gaps outside any op above this share → host_gaps
    # What torch.profiler itself adds to each recorded op on the host (record_shapes on): subtracted from
    # host-overhead savings, which the profiler inflates (measured 0.3-1.2 µs per recorded op on a shared
    # 2-core EPYC with torch 2.13, record_shapes + profile_memory; DESIGN §4 says ~1-4 µs with stacks).
    profiler_ns_per_op: int = PROFILER_NS_PER_EVENT  # the trace-health overhead estimate uses the same number
    # A rule's evidence must be spread over the step: when one event (an idle gap, a call) holds more than
    # this share of its time, that event is a stall with its own cause, not "many small things".
    concentrated_share: float = 0.5
    # An idle gap is long (a stall, or Python outside any op) from max(stall_min_ns, stall_factor x the
    # median gap of its kind): launch and dispatch overhead are µs per op, a sleep or a 600 ms call is not.
    stall_min_ns: int = 1_000_000
    stall_factor: float = 20.0
    sync_share: float = 0.01
    # What a view / scalar op (select, item) costs torch.profiler, as a share of profiler_ns_per_op (which
    # is calibrated on allocating ops): 0.57 and 0.60 measured on the shared 2-core EPYC, torch 2.x CPU,
    # medians of 9 interleaved rounds of a select+item loop vs the calibration loop.
    sync_profiler_cost_share: float = 0.6
    sync_cluster_gap_ns: int = 50_000  # sync ops closer than this form one host round-trip episode
    memcpy_exposed_share: float = 0.05  # catalogue A7
    pageable_min_bytes: int = 64 * 1024  # small pageable H2D copies are exempt (nsys)
    allocator_calls_per_step: float = 1.0  # cudaMalloc/cudaFree after the first step
    attention_share: float = 0.02
    # The FLOP rate a fused attention kernel reaches, as a fraction of the fastest GEMM in the trace:
    # FlashAttention-2 reaches 50-73 % of an A100's GEMM peak (Dao 2023); PyTorch's CPU flash kernel ran at
    # 82-86 GFLOP/s vs ~90-95 for MKL's GEMMs on our 2-core EPYC (fp32, S=512 and 2048, D=32, one thread).
    attention_efficiency_gpu: float = 0.6
    attention_efficiency_cpu: float = 0.9
    fusion_chain_min: int = 3  # at least 3 memory-bound elementwise ops in a row
    fusion_share: float = 0.02
    precision_share: float = 0.05
    alignment_share: float = 0.01
    launch_config_share: float = 0.02
    occupancy_lt_pct: float = 25.0  # estimated achieved occupancy below this → low occupancy
    # kernel_efficiency: an op holding ≥ this share of the step whose time would at least halve at a realistic
    # fraction of its roof: `eta` for memory-bound work, roof_fraction_compute for compute-bound GEMMs and
    # convolutions (cuBLAS/cuDNN reach ~70-80 % of the dense peak on large shapes), roof_fraction_attention for
    # attention and other compute-bound families (FlashAttention-2: 50-73 % of an A100's peak, Dao 2023)
    kernel_efficiency_share: float = 0.10
    roof_fraction_compute: float = 0.7
    roof_fraction_attention: float = 0.5
    # attention_efficiency: a fused attention path holding ≥ kernel_efficiency_share of the step whose fraction of
    # the matrix peak is below this share of the attainable one (roof_fraction_attention, × 0.6 on AMD)
    attention_efficiency_gap: float = 0.75
    # kernel_variance: one kernel (same name, grid, block and op shapes) whose calls' p90 / p10 ≥ this
    kernel_variance_ratio: float = 3.0
    kernel_variance_min_calls: int = 10
    kernel_variance_share: float = 0.02
    comm_exposed_share: float = 0.10  # TensorBoard plugin: communication > 10 %
    straggler_share: float = 0.05  # a rank's extra step time vs the median rank
    comm_bandwidth_fraction: float = 0.5  # busbw below half the link's peak
    memory_pressure_fraction: float = 0.90  # TensorBoard plugin: peak > 90 % of device memory
    step_outlier_sigma: float = 3.0  # smdebug StepOutlier
    step_outlier_ratio: float = 1.5  # an outlier is also at least this × the median (robust on few steps)
    optimizer_kernels_per_step: int = 40  # per-parameter optimizer kernels (foreach/fused launch a few)
    cpu_saturation_pct: float = 90.0  # smdebug CPUBottleneck
    cpu_saturation_time_share: float = 0.5
    io_wait_pct: float = 50.0  # smdebug IOBottleneck (iowait); without iowait: disk reads + idle CPU
    io_read_bytes_per_s: float = 50e6
    # Telemetry verdicts need this many samples inside the steady steps (4 samples at 100 ms are a guess).
    telemetry_min_samples: int = 10
    # Processes outside the profiled tree using at least this % of the machine's CPU (mean over the steps'
    # samples): the timings are perturbed (noisy_neighbour) and saturation is not the run's own.
    noisy_neighbour_pct: float = 20.0
    eta: float = 0.8  # attainable fraction of a peak (roofline gains)
    # Memory rules (rules/memory_findings.py: they read the rank's memory report, docs/findings.md "Memory")
    mem_near_capacity_fraction: float = 0.90  # reserved peak / device memory (the TensorBoard plugin's 90 %)
    mem_fragmentation_fraction: float = 0.20  # (reserved − allocated) at the peak / reserved …
    mem_fragmentation_min_bytes: int = 256 << 20  # … and at least this much
    mem_activation_fraction: float = 0.50  # activations / peak
    mem_optimizer_fraction: float = 0.30  # optimizer state / peak
    mem_leak_min_growth_run: int = 3  # consecutive steps whose end-of-step allocated grew
    mem_non_pytorch_bytes: int = 1 << 30  # device memory outside PyTorch's allocator
    mem_underused_fraction: float = 0.50  # peak reserved / device memory

    def severity(self, share: float) -> str:
        """high / medium / low from the share of the step a fix would save."""
        if share >= self.high_share:
            return "high"
        if share >= self.medium_share:
            return "medium"
        return "low"

    @staticmethod
    def from_dict(values: dict[str, Any]) -> RuleOptions:
        """Options from a mapping (a config file); unknown keys are an error, not a silent no-op."""
        known = {f.name for f in fields(RuleOptions)}
        unknown = sorted(set(values) - known)
        if unknown:
            from aiprof.errors import AiprofError

            raise AiprofError(f"unknown rule option(s) {unknown}; known: {sorted(known)}")
        return RuleOptions(**values)

    @staticmethod
    def from_assignments(assignments: list[str]) -> RuleOptions:
        """Options from ``NAME=VALUE`` strings (the CLI's ``--rule-option``), each value parsed as the
        field's type; a bad name or value is a one-line error."""
        from aiprof.errors import AiprofError

        types = {f.name: type(getattr(DEFAULT_OPTIONS, f.name)) for f in fields(RuleOptions)}
        values: dict[str, Any] = {}
        for item in assignments:
            name, sep, text = item.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in types:
                raise AiprofError(
                    f"--rule-option {item!r}: expected NAME=VALUE with NAME one of {', '.join(sorted(types))}"
                )
            try:
                values[name] = types[name](float(text)) if types[name] is int else types[name](text)
            except ValueError:
                raise AiprofError(f"--rule-option {item!r}: {text!r} is not a {types[name].__name__}") from None
        return RuleOptions.from_dict(values)


DEFAULT_OPTIONS = RuleOptions()
