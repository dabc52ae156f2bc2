"""Each rule's fix as a what-if edit, so a finding's saving is a replayed prediction beside its formula,
and the saving it claims in the ranking is never claimed twice.

:data:`FIX_EDITS` maps a finding id to the edits that carry out its fix on this trace (none: the finding
keeps only its formula). :func:`predict_findings` returns a
:class:`~aiprof.analysis.whatif.results.FixPrediction` per mapped finding, which the diagnosis writes into
its evidence:

- ``predicted_step_ns``: the median step after the fix;
- ``predicted_saving_ns_per_step``: the median over the steps of (measured − predicted) step;
- ``predicted_by``: the edit(s) replayed;
- ``claimed_saving_ns_per_step``: what the finding claims; the findings are ranked by it
  (:func:`aiprof.rules.registry.rank_findings`), and the claims of a rank add up to at most its step;
- ``claimed_with`` / ``claimed_by``: fixes of one cause (below).

**One cause, one claim.** Two fixes whose edits change a common node of the graph
(:func:`~aiprof.analysis.whatif.edits.touched`) remove the same time: a Python loop of tiny ops is
``host_bound`` (the host's per-op overhead) and ``launch_bound`` (the device waiting for the launches of
those ops), and an ``.item()`` loop is ``sync`` and ``launch_bound``; each fix alone removes much of the
same idle and neither alone says what the cause costs. Such findings form a group (connected by shared
nodes); the group's fixes are replayed together, once, and the group's *lead*, its first member in
:data:`FIX_EDITS` order (cause before symptom: the loader, the syncs, the host's own work, then the launches
waiting for it), carries that prediction and claims it, with the others in ``claimed_with``; each other
member keeps its own fix's replay, claims 0 and names the lead in ``claimed_by``.

**Claims are marginal.** Groups are taken in order of their replayed saving (largest first; ties by the
lead's place in :data:`FIX_EDITS`); each claims the median over the steps of what its fixes take off the step
once the groups before it are fixed (the first: its own replayed saving; never below 0, never more than the
claims before it left of the measured median step): removing a data-loading wait first leaves less host
overhead exposed, and the claims add up to at most the step.

Only single-rank traces get predictions: on a rank of a distributed run, a fix that speeds the rank up is
held back by the other ranks at its next collective, which a one-rank replay cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from aiprof.analysis.steps import StepWindow
from aiprof.analysis.whatif.edits import (
    CudaGraphs, Edit, Prediction, RemoveDataLoading, RemoveHostGaps, RemoveSyncs, allocator_calls, host_overhead,
    predict, scalar_reads, script_syncs, touched,
)
from aiprof.analysis.whatif.graph import Graph, NodeKind, build_graph
from aiprof.analysis.whatif.results import FixPrediction
from aiprof.trace.model import Trace

EditsOf = Callable[[Graph, Trace], list[Edit]]


def _syncs(graph: Graph, trace: Trace) -> list[Edit]:
    rows = script_syncs(graph, trace)  # the allocator's blocking frees are allocator_churn's
    if not rows:
        return []
    reads = scalar_reads(graph, trace)
    return [RemoveSyncs(rows), reads] if reads.nodes else [RemoveSyncs(rows)]


def _host_overhead(graph: Graph, trace: Trace) -> list[Edit]:
    edit = host_overhead(graph, trace)
    return [edit] if edit.nodes else []


def _cuda_graphs(graph: Graph, trace: Trace) -> list[Edit]:
    return [CudaGraphs()] if graph.nodes_of(NodeKind.KERNEL).size else []


# The fix of each rule as the edit that carries it out, in the order of the leads of one cause (module doc).
# - sync: the blocking calls go (not the allocator's: those go with allocator_churn's fix, the caching allocator
#   keeping its blocks, with the allocator's other calls), and the .item() ops that blocked go whole (the values
#   read in one batch).
# - decode_host_bound: the decode steps captured in a CUDA graph (its fix), the same edit as launch_bound's; it
#   leads the host-side findings of a decoding loop.
# - host_bound: the per-op overhead the formula counts goes (what torch.compile or vectorised code leaves is not
#   in the trace: the replay is the bound, with the device's own work, the host time it hid and the ops that do
#   the work still in the way); launch_bound: CUDA graphs (the host work inside the steps costs nothing, the
#   device runs its queue back to back).
# fusion_opportunity keeps its formula (the fused kernel's bytes need the roofline per chain, which the rule has
# and the replay does not), and so do exposed_communication and straggler: a rank's collective waits for the
# other ranks, which a one-rank replay does not see (Megatron TP=8: most of its exposed all-reduce is the fast
# ranks waiting for a straggler, and a tensor-parallel all-reduce feeds the next GEMM).
FIX_EDITS: dict[str, EditsOf] = {
    "data_loading": lambda graph, trace: [RemoveDataLoading()],
    "sync": _syncs,
    "allocator_churn": allocator_calls,
    "decode_host_bound": _cuda_graphs,
    "host_gaps": lambda graph, trace: [RemoveHostGaps()],
    "host_bound": _host_overhead,
    "launch_bound": _cuda_graphs,
}
_EDIT_LABEL = {"data_loading": "remove data_loading", "sync": "remove syncs",
               "allocator_churn": "remove allocator calls", "decode_host_bound": "cuda graphs",
               "host_gaps": "remove host_gaps", "host_bound": "remove host overhead", "launch_bound": "cuda graphs"}


class ReplayedFixes(msgspec.Struct, kw_only=True):
    """The replayed fix of each mapped finding id of one rank, and the note on all of them together."""

    fixes: dict[str, FixPrediction] = msgspec.field(default_factory=dict)
    notes: list[str] = msgspec.field(default_factory=list)

    def evidence(self, finding_id: str) -> dict[str, object]:
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
    edits = {i: e for i in mapped if (e := FIX_EDITS[i](graph, trace))}
    if not edits:
        return ReplayedFixes()
    alone = {i: predict(graph, e) for i, e in edits.items()}
    groups = _groups(graph, edits)
    joint = {g[0]: alone[g[0]] if len(g) == 1 else predict(graph, [e for i in g for e in edits[i]]) for g in groups}
    rank = list(FIX_EDITS)
    groups.sort(key=lambda g: (-joint[g[0]].saving_ns, rank.index(g[0])))
    claims, together = _claims(graph, groups, edits, joint)
    out = ReplayedFixes()
    for g in groups:
        lead = joint[g[0]]
        out.fixes[g[0]] = FixPrediction(predicted_step_ns=lead.predicted_median_ns,
                                        predicted_saving_ns_per_step=lead.saving_ns,
                                        predicted_by=" + ".join(dict.fromkeys(_EDIT_LABEL[i] for i in g)),
                                        claimed_saving_ns_per_step=claims[g[0]], claimed_with=g[1:])
        for i in g[1:]:
            out.fixes[i] = FixPrediction(predicted_step_ns=alone[i].predicted_median_ns,
                                         predicted_saving_ns_per_step=alone[i].saving_ns,
                                         predicted_by=_EDIT_LABEL[i], claimed_saving_ns_per_step=0, claimed_by=g[0])
    if len(out.fixes) < 2:
        return out
    parts = [f"{g[0]} {claims[g[0]] / 1e6:.2f} ms" + (f" (with {', '.join(g[1:])}: the same time)" if g[1:] else "")
             for g in groups]
    out.notes.append(f"what-if: the fixes of {', '.join(sorted(out.fixes))} together: median step "
                     f"{together.baseline_median_ns / 1e6:.2f} -> {together.predicted_median_ns / 1e6:.2f} ms (saving "
                     f"{together.saving_ns / 1e6:.2f} ms), claimed once, in ranking order: {'; '.join(parts)}")
    return out


def _groups(graph: Graph, edits: dict[str, list[Edit]]) -> list[list[str]]:
    """The mapped ids in groups of one cause: connected by a node their edits both change; each group in
    :data:`FIX_EDITS` order (its lead first)."""
    ids = [i for i in FIX_EDITS if i in edits]
    masks = {i: touched(graph, edits[i]) for i in ids}
    parent = {i: i for i in ids}

    def root(i: str) -> str:
        while parent[i] != i:
            i = parent[i]
        return i

    for a, i in enumerate(ids):
        for j in ids[a + 1:]:
            if bool(np.any(masks[i] & masks[j])):
                parent[root(j)] = root(i)
    groups: dict[str, list[str]] = {}
    for i in ids:
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _claims(graph: Graph, groups: list[list[str]], edits: dict[str, list[Edit]],
            joint: dict[str, Prediction]) -> tuple[dict[str, int], Prediction]:
    """Each group's marginal claim in the groups' order (module doc): the median over the steps of what its
    fixes take off each step once the groups before it are fixed (the first group's claim is its own
    replayed saving), never below 0 and never more than what the claims before it left of the measured median
    step, so they add up to at most the step. Also the replay of every fix together."""
    first = joint[groups[0][0]]
    remaining = first.baseline_median_ns
    claims: dict[str, int] = {}
    done: list[Edit] = []
    before, prediction = first.baseline_ns, first
    for n, g in enumerate(groups):
        done += [e for i in g for e in edits[i]]
        prediction = first if n == 0 else predict(graph, list(done))
        saved = int(np.median(before - prediction.predicted_ns)) if before.size else 0
        claims[g[0]] = max(0, min(saved, remaining))
        remaining -= claims[g[0]]
        before = prediction.predicted_ns
    return claims, prediction


def _world_size(trace: Trace) -> int:
    size = trace.distributed.get("world_size", 1)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else 1
