"""What-if for one trace: edits named on the command line (or by a finding) → predicted steps, each edit
alone and all together, and the critical path of the median step. Results: the Structs of :mod:`aiprof.analysis.whatif.results`."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from aiprof.analysis.whatif.edits import (
    CudaGraphs, Edit, Fuse, OverlapComm, RemoveDataLoading, RemoveHostGaps, RemoveSyncs, ScaleHost, ScaleKernels,
    kernels_matching, predict,
)
from aiprof.analysis.whatif.graph import EdgeKind, Graph, NodeKind, build_graph
from aiprof.analysis.whatif.results import CriticalPath, EditOutcome, WhatIf
from aiprof.analysis.whatif.replay import Replay, StepTimes, critical_path, replay, step_times
from aiprof.errors import AiprofError
from aiprof.trace.model import I64, Trace

REMOVABLE = ("data_loading", "syncs", "host_gaps")
# Elementwise kernels a fuser (torch.compile, a fused op) would merge with their neighbours.
ELEMENTWISE = re.compile(r"elementwise|vectorized_|unrolled_|triton_poi|_foreach_|fill_kernel|copy_kernel", re.I)


@dataclass(frozen=True)
class EditSpec:
    """One edit as a user names it: ``kind`` and its arguments (see :func:`make_edits`)."""

    kind: str  # remove | scale_host | cuda_graphs | scale_kernels | fuse_elementwise | overlap_comm
    what: str = ""  # remove: data_loading | syncs; scale_kernels: a kernel-name regex ("" = all)
    factor: float = 1.0

    @property
    def label(self) -> str:
        if self.kind == "remove":
            return f"remove {self.what}"
        if self.kind in ("scale_host", "scale_kernels"):
            target = f" /{self.what}/" if self.what else ""
            return f"{self.kind.replace('_', ' ')}{target} x{self.factor:g}"
        if self.kind == "overlap_comm" and self.factor != 1.0:
            return f"overlap comm (interference x{self.factor:g})"
        return self.kind.replace("_", " ")


def make_edits(graph: Graph, trace: Trace, spec: EditSpec) -> list[Edit]:
    """The graph edits that carry out ``spec`` on this trace."""
    if spec.kind == "remove":
        if spec.what not in REMOVABLE:
            raise AiprofError(f"--remove {spec.what!r}: choose one of {', '.join(REMOVABLE)}")
        removal: dict[str, Edit] = {"data_loading": RemoveDataLoading(), "syncs": RemoveSyncs(),
                                    "host_gaps": RemoveHostGaps()}
        return [removal[spec.what]]
    if spec.kind == "scale_host":
        return [ScaleHost(spec.factor)]
    if spec.kind == "cuda_graphs":
        return [CudaGraphs()]
    if spec.kind == "scale_kernels":
        nodes = kernels_matching(graph, trace, spec.what) if spec.what else ()
        if spec.what and not nodes:
            raise AiprofError(f"--kernels {spec.what!r} matches no kernel of {trace.path.name}")
        return [ScaleKernels(spec.factor, nodes)]
    if spec.kind == "fuse_elementwise":
        return [Fuse(chain) for chain in elementwise_chains(graph, trace)]
    if spec.kind == "overlap_comm":
        return [OverlapComm(spec.factor)]
    raise AiprofError(f"unknown what-if edit {spec.kind!r}")


def elementwise_chains(graph: Graph, trace: Trace) -> list[tuple[int, ...]]:
    """Runs of two or more elementwise kernels back to back on one stream."""
    nodes = graph.nodes_of(NodeKind.KERNEL)
    if nodes.size == 0:
        return []
    hit = np.zeros(len(graph), dtype=bool)
    hit[nodes] = trace.name_matches(graph.row[nodes], ELEMENTWISE.pattern)
    same = np.zeros(len(graph), dtype=bool)
    same[1:] = hit[1:] & hit[:-1] & (graph.resource[1:] == graph.resource[:-1])
    chains: list[tuple[int, ...]] = []
    run: list[int] = []
    for node in np.flatnonzero(hit).tolist():
        if run and same[node] and node == run[-1] + 1:
            run.append(node)
            continue
        if len(run) >= 2:
            chains.append(tuple(run))
        run = [node]
    if len(run) >= 2:
        chains.append(tuple(run))
    return chains


def whatif(trace: Trace, specs: list[EditSpec]) -> WhatIf:
    """Replay ``trace`` with each edit of ``specs`` alone and, when there are several, all together."""
    graph = build_graph(trace)
    base = replay(graph)
    times = step_times(graph, base)
    steps = times.duration_ns.tolist()
    result = WhatIf(trace=str(trace.path), rank=trace.rank,
                    step_source=graph.windows[0].source if graph.windows else "none", steps=len(steps),
                    baseline_step_ns=steps, baseline_median_step_ns=int(np.median(steps)) if steps else 0,
                    notes=list(graph.notes))
    everything: list[Edit] = []
    for spec in specs:
        edits = make_edits(graph, trace, spec)
        everything += edits
        result.edits.append(EditOutcome.of(spec.label, predict(graph, edits)))
    if len(specs) > 1:
        result.combined = EditOutcome.of("all together", predict(graph, everything))
    result.critical_path = median_step_path(graph, base, times)
    return result


def median_step_path(graph: Graph, result: Replay, times: StepTimes) -> CriticalPath | None:
    """The critical path of the median step: its length and where the time on it goes (ns by kind)."""
    if times.duration_ns.size == 0:
        return None
    step = int(np.argsort(times.duration_ns, kind="stable")[times.duration_ns.size // 2])
    if times.end_node[step] < 0:
        return None
    path = critical_path(graph, result, int(times.end_node[step]), int(times.start_ns[step]))
    return CriticalPath(step_index=step, length_ns=int(times.duration_ns[step]), nodes=int(path.size),
                        breakdown_ns=path_breakdown(graph, result, path, int(times.start_ns[step])))


def path_breakdown(graph: Graph, result: Replay, path: I64, start_ns: int) -> dict[str, int]:
    """Time along ``path`` by what held it: each node's own time until the next node starts, and the
    delay between (launch latency, sync return, stream gap) by the edge that links them. Sums to the path's
    span from ``start_ns``."""
    out: dict[str, int] = {}
    starts = np.maximum(result.start[path], start_ns)
    ends = result.end[path]
    for i, node in enumerate(path.tolist()):
        nxt = int(starts[i + 1]) if i + 1 < path.size else int(ends[i])
        own = max(0, min(int(ends[i]), nxt) - int(starts[i]))
        kind = NodeKind(int(graph.kind[node])).name.lower()
        out[kind] = out.get(kind, 0) + own
        if i + 1 < path.size:
            gap = nxt - max(int(starts[i]) + own, int(starts[i]))
            if gap > 0:
                edge = int(result.binding[int(path[i + 1])])
                label = _EDGE_DELAY[EdgeKind(int(graph.edge_kind[edge]))] if edge >= 0 else "wait"
                out[label] = out.get(label, 0) + gap
    return dict(sorted(out.items(), key=lambda item: -item[1]))


_EDGE_DELAY = {EdgeKind.ORDER: "gap", EdgeKind.LAUNCH: "launch_latency", EdgeKind.SYNC: "sync_return",
               EdgeKind.COLLECTIVE: "collective_wait"}
