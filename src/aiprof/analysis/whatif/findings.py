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

On a rank of a distributed run alone there is no prediction (:func:`predict_findings`): a fix that speeds the
rank up is held back by the other ranks at its next collective, which a one-rank replay cannot see. A run whose
every rank is loaded is replayed with its ranks joined at their collectives (:func:`predict_run_findings`,
:mod:`aiprof.analysis.whatif.ranks`): each finding's fix on the ranks it names, and the run-level fixes of
:data:`RUN_EDITS` (``straggler``, ``exposed_communication``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from aiprof.analysis.steps import StepWindow
from aiprof.analysis.whatif.edits import (
    CudaGraphs, Edit, OverlapComm, Prediction, RemoveDataLoading, RemoveSyncs, allocator_calls,
    FUSED_CHAINS, HOST_GAP_SPANS, fused_chains, host_gap_spans, host_overhead,
    predict, scalar_reads, script_syncs, touched,
)
from aiprof.analysis.whatif.graph import Graph, NodeKind, build_graph
from aiprof.analysis.whatif.ranks import OnRanks, RunGraph, build_run_graph, on_rank, predict_run, straggler_work
from aiprof.analysis.whatif.results import FixPrediction
from aiprof.trace.model import Trace

if TYPE_CHECKING:
    from aiprof.analysis.run import RunAnalysis

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
    "host_gaps": host_gap_spans,
    "fusion_opportunity": fused_chains,
    "host_bound": _host_overhead,
    "launch_bound": _cuda_graphs,
}
_EDIT_LABEL = {"data_loading": "remove data_loading", "sync": "remove syncs",
               "allocator_churn": "remove allocator calls", "decode_host_bound": "cuda graphs",
               "host_gaps": "remove host_gaps", "fusion_opportunity": "fuse elementwise chains",
               "host_bound": "remove host overhead", "launch_bound": "cuda graphs",
               "straggler": "remove the straggler's extra work", "exposed_communication": "overlap comm"}

RunEditsOf = Callable[[RunGraph, int], list[Edit]]


def _straggler(run: RunGraph, rank: int) -> list[Edit]:
    edit = straggler_work(run, rank)
    return [edit] if edit.nodes else []


def _overlap(run: RunGraph, rank: int) -> list[Edit]:
    comm = run.mask(rank) & (run.graph.kind == int(NodeKind.COMM))
    return [OnRanks((OverlapComm(),), run.mask(rank))] if comm.any() else []


# Fixes that only a replay of every rank together can see (a collective waits for its last rank), by finding id:
# straggler (its extra work goes: :func:`~aiprof.analysis.whatif.ranks.straggler_work`) and exposed_communication
# (the collectives move off the compute stream: :class:`OverlapComm`, bounded by the compute left to overlap;
# a CPU backend already runs them on its own threads, and gets none).
RUN_EDITS: dict[str, RunEditsOf] = {"straggler": _straggler, "exposed_communication": _overlap}
# The order of the leads of one cause (module doc): the rank's own causes first, then what the others see of them.
ORDER = (*FIX_EDITS, *RUN_EDITS)
RUN_REPLAY_MAX_EVENTS = 1_000_000  # a run with more events (all ranks) is not loaded again to be replayed whole


class ReplayedFixes(msgspec.Struct, kw_only=True):
    """The replayed fix of each mapped finding id of one rank, and the note on all of them together."""

    fixes: dict[str, FixPrediction] = msgspec.field(default_factory=dict)
    notes: list[str] = msgspec.field(default_factory=list)
    failed: bool = False  # the replay failed (its note says why)

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
    return _replayed(graph, edits, lambda chosen: predict(graph, chosen))


def _replayed(graph: Graph, edits: dict[str, list[Edit]], replay: Callable[[list[Edit]], Prediction]) -> ReplayedFixes:
    """The fixes ``edits`` (by finding id) replayed with ``replay``: alone, in groups of one cause, and their
    marginal claims (module doc)."""
    if not edits:
        return ReplayedFixes()
    alone = {i: replay(e) for i, e in edits.items()}
    groups = _groups(graph, edits)
    joint = {g[0]: alone[g[0]] if len(g) == 1 else replay([e for i in g for e in edits[i]]) for g in groups}
    rank = list(ORDER)
    groups.sort(key=lambda g: (-joint[g[0]].saving_ns, rank.index(g[0])))
    claims, together = _claims(replay, groups, edits, joint)
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


def fix_ranks(finding_id: str, ranks: Sequence[int], evidence: Mapping[str, object]) -> tuple[int, ...]:
    """The ranks a finding's fix is made on: a straggler finding names every rank (those that wait too), its
    fix is the stragglers' (``slow_ranks``); any other finding's, the ranks it names."""
    slow = evidence.get("slow_ranks") if finding_id == "straggler" else None
    if isinstance(slow, list) and all(isinstance(r, int) for r in slow):
        return tuple(int(r) for r in slow)
    return tuple(ranks)


FIX_INPUTS = (FUSED_CHAINS, HOST_GAP_SPANS)  # what rules leave in the trace's cache for their fix's edit


def fix_inputs(trace: Trace) -> dict[str, object]:
    """What the rules left in ``trace``'s cache for the edits of their fixes (:data:`FIX_INPUTS`): it travels
    with the rank's diagnosis to the joined replay of a run, which loads the trace again."""
    return {k: trace.cache[k] for k in FIX_INPUTS if k in trace.cache}


def whole_run(distributed: Sequence[Mapping[str, object]]) -> bool:
    """Whether ranks are every rank of one distributed run (each trace's ``world_size`` is their number): the
    ranks a joined replay needs (a collective waits for ranks that are not loaded too)."""
    return all(d.get("world_size") == len(distributed) for d in distributed)


def predict_loaded_run(run: RunAnalysis, findings: Sequence[tuple[str, Sequence[int]]]) -> ReplayedFixes:
    """:func:`predict_run_findings` on an analysed run: its ranks' traces are loaded again (the ranks were
    analysed one at a time), when there are at least two, each one file, and at most
    :data:`RUN_REPLAY_MAX_EVENTS` events in all (else nothing: the findings keep their formula)."""
    from aiprof.trace import load

    ranks = [r for r in run.ranks if r.windows]
    wanted = [(i, named) for i, named in findings if i in FIX_EDITS or i in RUN_EDITS]
    if len(ranks) < 2 or len(ranks) != len(run.ranks) or not wanted or not whole_run([r.distributed for r in ranks]):
        return ReplayedFixes()
    if sum(r.event_count for r in ranks) > RUN_REPLAY_MAX_EVENTS or len({r.path for r in ranks}) != len(ranks):
        return ReplayedFixes()
    traces: list[Trace] = []
    for r in ranks:
        try:
            loaded = load(r.path)
        except Exception:  # noqa: BLE001 - the file was read once; if it cannot be now, there is no replay
            return ReplayedFixes()
        if not isinstance(loaded, Trace):
            return ReplayedFixes()
        if r.diagnosis is not None:
            loaded.cache.update(r.diagnosis.fix_inputs)
        traces.append(loaded)
    return predict_run_findings(traces, [r.windows for r in ranks], [r.rank for r in ranks], wanted)


def predict_run_findings(traces: Sequence[Trace], windows: Sequence[list[StepWindow]], ranks: Sequence[int],
                         findings: Sequence[tuple[str, Sequence[int]]]) -> ReplayedFixes:
    """The fixes of a distributed run's findings replayed on every rank's graph joined at the collectives
    (:mod:`aiprof.analysis.whatif.ranks`): ``findings`` are (id, the ranks it names); each rank's fix is made on
    that rank (:data:`FIX_EDITS`, :data:`RUN_EDITS`), and a step is the slowest rank's. Claims as on one rank."""
    mapped = [(i, r) for i, r in findings if i in FIX_EDITS or i in RUN_EDITS]
    if not mapped or len(traces) < 2 or any(not w for w in windows):
        return ReplayedFixes()
    try:
        run = build_run_graph(list(traces), list(windows), list(ranks))
        edits: dict[str, list[Edit]] = {}
        for fid, named in mapped:
            for r in (list(ranks).index(x) for x in named if x in ranks):
                if fid in FIX_EDITS:
                    own = FIX_EDITS[fid](run.rank_graphs[r], traces[r])
                    found: list[Edit] = [on_rank(run, r, own)] if own else []
                else:
                    found = RUN_EDITS[fid](run, r)
                if found:
                    edits.setdefault(fid, []).extend(found)
        return _replayed(run.graph, edits, lambda chosen: predict_run(run, chosen))
    except Exception as err:  # noqa: BLE001 - as on one rank: the findings keep their formula, a note says why
        return ReplayedFixes(notes=[f"what-if replay of the ranks together failed: {type(err).__name__}: {err} "
                                    "(findings keep their formula; please report this trace)"], failed=True)


def _groups(graph: Graph, edits: dict[str, list[Edit]]) -> list[list[str]]:
    """The mapped ids in groups of one cause: connected by a node their edits both change; each group in
    :data:`FIX_EDITS` order (its lead first)."""
    ids = [i for i in ORDER if i in edits]
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


def _claims(replay: Callable[[list[Edit]], Prediction], groups: list[list[str]], edits: dict[str, list[Edit]],
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
        prediction = first if n == 0 else replay(list(done))
        saved = int(np.median(before - prediction.predicted_ns)) if before.size else 0
        claims[g[0]] = max(0, min(saved, remaining))
        remaining -= claims[g[0]]
        before = prediction.predicted_ns
    return claims, prediction


def _world_size(trace: Trace) -> int:
    size = trace.distributed.get("world_size", 1)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else 1
