"""The views several rules read, named and typed, each computed once per rank on first use.

``ctx.views.roofline`` is the same value whichever rule asks first, so rules never depend on their order
in the list. A view is built by a function next to the rules that own its meaning (this module only names
and caches them); it depends on the trace, the windows and the steady span, never on the steps' idle
causes, so a capture-adjusted context (:func:`aiprof.rules.views.graphs.without_capture`) shares its base's views.
A rule lists the views it reads in its spec's ``needs`` (:mod:`aiprof.rules.spec`).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from aiprof.trace.model import I64

if TYPE_CHECKING:
    from aiprof.analysis.inference import InferenceReport
    from aiprof.analysis import intervals as iv
    from aiprof.analysis.comm import CommStats
    from aiprof.roofline.analysis import RooflineResult
    from aiprof.roofline.attention import AttentionReport
    from aiprof.rules.context import RankContext
    from aiprof.rules.views.shaped import Attention, ShapedOps
    from aiprof.rules.views.host import HostSplit
    from aiprof.rules.views.kernels import Fp32Facts
    from aiprof.rules.views.machine import MachineFacts
    from aiprof.rules.views.graphs import GraphCapture, GraphReplays
    from aiprof.rules.views.telemetry import CpuView


class RankViews:
    """The shared views of one rank (``ctx.views``)."""

    def __init__(self, ctx: RankContext) -> None:
        self._ctx = ctx

    @cached_property
    def roofline(self) -> RooflineResult:
        """Per-op roofline of the trace (the same cached result as the report's roofline section)."""
        from aiprof.roofline.analysis import roofline

        return roofline(self._ctx.trace)

    @cached_property
    def comm(self) -> CommStats:
        """Every collective, a summary per kind/group/size, and the comm/compute overlap per device."""
        from aiprof.analysis.comm import comm_stats

        return comm_stats(self._ctx.trace)

    @cached_property
    def fp32_matrix_calls(self) -> tuple[I64, Fp32Facts]:
        """Roofline calls of FP32/FP64 matrix work not on tensor cores, and facts about them
        (:func:`aiprof.rules.views.kernels.find_fp32_matrix_calls`): ``precision``'s, left to it by others."""
        from aiprof.rules.views.kernels import find_fp32_matrix_calls

        return find_fp32_matrix_calls(self._ctx)

    @cached_property
    def shaped_ops(self) -> ShapedOps:
        """Outermost shaped aten ops of the steady steps, per thread in time order, with their time."""
        from aiprof.rules.views.shaped import ShapedOps

        return ShapedOps(self._ctx)

    @cached_property
    def attention(self) -> Attention:
        """Unfused attentions (matmul → softmax → matmul on [.., Sq, Sk] scores): ``unfused_attention``'s
        evidence; other rules leave GEMMs on these scores to it."""
        from aiprof.rules.views.shaped import find_attention

        return find_attention(self._ctx)

    @cached_property
    def attention_paths(self) -> AttentionReport:
        """The fused and unfused attention paths that ran, their time, shapes and fraction of peak (the
        report's ``attention`` section, :func:`aiprof.roofline.attention.attention_section`)."""
        from aiprof.roofline.attention import attention_section

        return attention_section(self._ctx.trace)

    @cached_property
    def idle_sets(self) -> dict[str, iv.IntervalSet]:
        """Each idle cause of the primary device as an interval set clipped to the steady time (plus
        ``launch_stall``)."""
        from aiprof.rules.views.idle import find_idle_sets

        return find_idle_sets(self._ctx)

    @cached_property
    def host_split(self) -> HostSplit:
        """The host's share of the steady steps: short gaps / tiny ops, stalls inside one call, long gaps."""
        from aiprof.rules.views.host import find_host_split

        return find_host_split(self._ctx)

    @cached_property
    def uninflated_step(self) -> float:
        """The mean steady step less what with_stack's recording added to it (ns)."""
        from aiprof.rules.views.host import find_uninflated_step

        return find_uninflated_step(self._ctx)

    @cached_property
    def long_calls(self) -> I64:
        """CPU ops and runtime calls long enough to cover a host stall, by start time."""
        from aiprof.rules.views.host import find_long_calls

        return find_long_calls(self._ctx)

    @cached_property
    def machine(self) -> MachineFacts:
        """What the rules may assume about the machine (device kind, usable cores, torch threads)."""
        from aiprof.rules.views.machine import find_machine_facts

        return find_machine_facts(self._ctx)

    @cached_property
    def cpu_view(self) -> CpuView | None:
        """The steady steps' telemetry CPU samples split between the run and other processes (None without
        enough samples)."""
        from aiprof.rules.views.telemetry import find_cpu_view

        return find_cpu_view(self._ctx)

    @cached_property
    def graph_capture(self) -> GraphCapture:
        """CUDA/HIP graph capture ranges in the trace, and whether they cover enough of the steps to report."""
        from aiprof.rules.views.graphs import find_graph_capture

        return find_graph_capture(self._ctx)

    @cached_property
    def graph_replays(self) -> GraphReplays | None:
        """CUDA/HIP graph replays in the trace and how many kernels the trace attributes to them."""
        from aiprof.rules.views.graphs import find_graph_replays

        return find_graph_replays(self._ctx)

    @cached_property
    def inference(self) -> InferenceReport:
        """The trace's inference steps by phase and its requests (analysis/inference.py; computed once per
        trace, shared with the report's section)."""
        from aiprof.analysis.inference import inference_section

        return inference_section(self._ctx.trace)


__all__ = ["RankViews"]
