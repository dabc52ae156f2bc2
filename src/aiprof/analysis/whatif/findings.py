"""Each rule's fix as a what-if edit, so a finding's saving is a replayed prediction beside its formula.

:data:`FIX_EDITS` maps a finding id to the edits that carry out its fix on this trace (none: the finding
keeps only its formula). :func:`predict_findings` replays each mapped finding's fix alone
(:class:`~aiprof.analysis.whatif.results.FixPrediction`), which the diagnosis writes into its evidence:

- ``predicted_step_ns``: the median step after the fix;
- ``predicted_saving_ns_per_step``: the median over the steps of (measured − predicted) step;
- ``predicted_by``: the edit replayed.

The findings keep their ranking by formula: ranked by prediction, 6 of the shared traces changed their
first finding, for reasons of the model, not of the traces (a one-rank replay sees neither the other
ranks a collective waits for nor the faster pinned copy the ``sync`` fix brings; docs/whatif.md).
Their savings overlap (removing a data-loading wait exposes the host overhead behind it), so they are never
summed: a note gives the step with every mapped fix replayed together.

Only single-rank traces get predictions: on a rank of a distributed run, a fix that speeds the rank up is
held back by the other ranks at its next collective, which a one-rank replay cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from aiprof.analysis.steps import StepWindow
from aiprof.analysis.whatif.edits import (
    CudaGraphs, Edit, RemoveDataLoading, RemoveHostGaps, RemoveSyncs, host_overhead,
    predict,
)
from aiprof.analysis.whatif.graph import Graph, NodeKind, build_graph
from aiprof.analysis.whatif.results import FixPrediction
from aiprof.trace.model import Trace

EditsOf = Callable[[Graph, Trace], list[Edit]]


def _syncs(graph: Graph, trace: Trace) -> list[Edit]:
    return [RemoveSyncs()] if graph.nodes_of(NodeKind.WAIT).size else []


def _host_overhead(graph: Graph, trace: Trace) -> list[Edit]:
    edit = host_overhead(graph, trace)
    return [edit] if edit.nodes else []


def _cuda_graphs(graph: Graph, trace: Trace) -> list[Edit]:
    return [CudaGraphs()] if graph.nodes_of(NodeKind.KERNEL).size else []


# The fix of each rule as the edit that carries it out. host_bound: the per-op overhead the formula counts
# goes (what torch.compile or vectorised code leaves is not in the trace: the replay is the bound, with the
# device's own work, the host time it hid and the ops that do the work still in the way); launch_bound: CUDA graphs (the host work inside the
# steps costs nothing, the device runs its queue back to back). fusion_opportunity keeps its formula (the
# fused kernel's bytes need the roofline per chain, which the rule has and the replay does not), and so do
# exposed_communication and straggler: a rank's collective waits for the other ranks, which a one-rank
# replay does not see (Megatron TP=8: most of its exposed all-reduce is the fast ranks waiting for a
# straggler, and a tensor-parallel all-reduce feeds the next GEMM).
FIX_EDITS: dict[str, EditsOf] = {
    "data_loading": lambda graph, trace: [RemoveDataLoading()],
    "sync": _syncs,
    "host_gaps": lambda graph, trace: [RemoveHostGaps()],
    "host_bound": _host_overhead,
    "launch_bound": _cuda_graphs,
}
_EDIT_LABEL = {"data_loading": "remove data_loading", "sync": "remove syncs",
               "host_gaps": "remove host_gaps", "host_bound": "remove host overhead",
               "launch_bound": "cuda graphs"}


class ReplayedFixes(msgspec.Struct, kw_only=True):
    """The replayed fix of each mapped finding id of one rank, and the note on all of them together."""

    fixes: dict[str, FixPrediction] = msgspec.field(default_factory=dict)
    notes: list[str] = msgspec.field(default_factory=list)

    def evidence(self, finding_id: str) -> dict[str, int | str]:
        """The evidence keys a finding of ``finding_id`` gains (none when its fix was not replayed)."""
        fix = self.fixes.get(finding_id)
        return fix.evidence() if fix is not None else {}


def predict_findings(trace: Trace, windows: list[StepWindow], finding_ids: Sequence[str]) -> ReplayedFixes:
    """Replay the fix of every finding id that maps to an edit (module doc); a note on all of them
    together when there are several."""
    mapped = sorted({i for i in finding_ids if i in FIX_EDITS}, key=list(finding_ids).index)
    if not mapped or not windows or _world_size(trace) > 1:
        return ReplayedFixes()
    try:
        return _predict(trace, windows, mapped)
    except Exception as err:  # noqa: BLE001 - like a failing rule: the diagnosis goes on, a note says why
        return ReplayedFixes(notes=[f"what-if replay failed on rank {trace.rank}: {type(err).__name__}: {err} "
                                    "(findings keep their formula; please report this trace)"])


def _predict(trace: Trace, windows: list[StepWindow], mapped: list[str]) -> ReplayedFixes:
    graph = build_graph(trace, windows)
    everything: list[Edit] = []
    out = ReplayedFixes()
    for finding_id in mapped:
        edits = FIX_EDITS[finding_id](graph, trace)
        if not edits:
            continue
        everything += edits
        prediction = predict(graph, edits)
        out.fixes[finding_id] = FixPrediction(predicted_step_ns=prediction.predicted_median_ns,
                                              predicted_saving_ns_per_step=prediction.saving_ns,
                                              predicted_by=_EDIT_LABEL[finding_id])
    if len(out.fixes) < 2:
        return out
    together = predict(graph, everything)
    claimed = sum(max(0, fix.predicted_saving_ns_per_step) for fix in out.fixes.values())
    out.notes.append(f"what-if: the fixes of {', '.join(sorted(out.fixes))} together: median step "
                     f"{together.baseline_median_ns / 1e6:.2f} -> {together.predicted_median_ns / 1e6:.2f} ms (saving "
                     f"{together.saving_ns / 1e6:.2f} ms; their savings one by one add up to {claimed / 1e6:.2f} ms, "
                     "but they overlap)")
    return out


def _world_size(trace: Trace) -> int:
    size = trace.distributed.get("world_size", 1)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else 1
