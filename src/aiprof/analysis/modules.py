"""Time per ``nn.Module``, forward and backward, as the TensorBoard plugin's module view showed it.

Where modules come from: the ``nn.Module: Linear_0`` spans torch.profiler's Python tracer writes around
every module call when stacks are recorded (``with_stack``; the suffix numbers instances of a class);
else ``record_function`` annotations named ``nn.Module: …`` (some wrappers emit them).

- **Hierarchy**: a module's parent is the nearest enclosing module span (through ``Python parent id``, or
  time nesting for annotations). Modules are merged by their path from the outermost module
  (``Net_0/Block_1/Linear_0``): the same instance called at the same place is one row.
- **Forward** (``forward_ns``): the time of the module's calls, clipped to the step windows and summed over
  them; ``forward_self_ns`` leaves out its child modules' calls.
- **Backward** (``backward_ns``): autograd runs a backward op (``AddmmBackward0`` and its
  ``autograd::engine::evaluate_function:`` wrapper) for each forward op that recorded a node. The backward
  op is paired with its forward op (Kineto's ``fwdbwd`` flow, else ``Sequence number`` + ``Fwd thread id``:
  :func:`aiprof.trace.links.forward_of`), and the forward op's innermost enclosing module gets the
  backward op's time (outermost linked backward ops only, so a wrapper and its node count once).
  ``backward_self_ns`` is what the module's own forward ops caused; ``backward_ns`` adds its children's.
  Backward ops with no forward module (``AccumulateGrad``, the loss) are ``backward_unattributed_ns``.
- **Device** (``device_forward_ns`` / ``device_backward_ns``): kernels, copies and sets launched by ops
  under the module (through the launching op: :func:`aiprof.trace.links.gpu_op`), summed (not merged:
  kernels of one module on two streams add up), children included.

All ``*_ns`` are summed over ``steps`` steps: divide by ``steps`` for a per-step mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from aiprof.arrays import isin, unique
from aiprof.analysis.stacks import (
    MODULE_PREFIX,
    NOT_RECORDED,
    WITH_STACK_OVERHEAD_PCT,
    Windows,
    codes_like,
    depth_of,
    forward_op,
    innermost,
    levels_of,
    parents_by_time,
    path_nodes,
    python_forest,
    thread_codes,
)
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

MAX_MODULES = 200
_PATTERN = r"^nn\.Module: "


class ModuleStat(msgspec.Struct, kw_only=True):
    """One module (a path of module names from the outermost one) over the recorded steps."""

    path: str
    name: str
    parent: int  # index of the parent module in ModuleProfile.modules, -1 at a root
    depth: int
    calls: int
    forward_ns: int
    forward_self_ns: int
    backward_ns: int = 0
    backward_self_ns: int = 0
    device_forward_ns: int = 0
    device_backward_ns: int = 0


class ModuleProfile(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Time per ``nn.Module`` (``RankReport.modules``): ``modules`` in depth-first order, biggest first."""

    recorded: bool
    hint: str = ""
    source: str = ""  # "python_function" (with_stack) or "annotation"
    steps: int = 0
    window_ns: int = 0
    backward_from: str = ""  # "fwdbwd flows", "sequence numbers", or "" (no backward ops recorded)
    backward_unattributed_ns: int = 0
    has_device: bool = False
    module_count: int = 0  # modules before the cap of MAX_MODULES
    modules: list[ModuleStat] = msgspec.field(default_factory=list)


def not_recorded() -> ModuleProfile:
    return ModuleProfile(recorded=False, hint=NOT_RECORDED.format(pct=WITH_STACK_OVERHEAD_PCT))


class _Spans(msgspec.Struct):
    """Module spans: trace rows, thread codes, start/end, parent (index among them), how found."""

    rows: Any
    codes: Any
    start: Any
    end: Any
    parent: Any
    source: str


def module_profile(trace: Trace, windows: Sequence[Any] | None = None) -> ModuleProfile:
    """Time per ``nn.Module`` over the step windows (``StepWindow``s; None: the whole trace)."""
    if not len(trace.rows_of(Kind.PYTHON)) and not _annotations(trace).size:
        return not_recorded()  # checked first: the common case costs two cached lookups
    win = Windows.of(windows, trace)
    spans = _module_spans(trace, win)
    if spans is None:
        return not_recorded()
    c = trace.columns
    names = c.name[spans.rows].astype(np.int64)
    levels = levels_of(depth_of(spans.parent))
    node, node_parent, head = path_nodes(spans.parent, names, np.zeros(names.size, dtype=np.int64), levels,
                                         len(trace.strings) + 1)
    count = int(node_parent.size)
    clipped = win.clip(spans.start, spans.end)
    calls = np.bincount(node[clipped > 0], minlength=count)
    forward = np.bincount(node, weights=clipped, minlength=count).astype(np.int64)
    child = node_parent >= 0
    children_fwd = np.bincount(node_parent[child], weights=forward[child], minlength=count).astype(np.int64)
    bwd_self, unattributed, how = _backward(trace, spans, node, win, count)
    dev_fwd, dev_bwd = _device(trace, spans, node, win, count)
    totals = [_subtree(node_parent, x) for x in (bwd_self, dev_fwd, dev_bwd)]
    stats = [
        ModuleStat(path="", name=_short(trace.strings[int(names[head[k]])]), parent=int(node_parent[k]), depth=0,
                   calls=int(calls[k]), forward_ns=int(forward[k]), forward_self_ns=max(int(forward[k] - children_fwd[k]), 0),
                   backward_ns=int(totals[0][k]), backward_self_ns=int(bwd_self[k]),
                   device_forward_ns=int(totals[1][k]), device_backward_ns=int(totals[2][k]))
        for k in range(count)
    ]
    return ModuleProfile(
        recorded=True,
        source=spans.source,
        steps=win.count,
        window_ns=win.total_ns,
        backward_from=how,
        backward_unattributed_ns=unattributed,
        has_device=trace.has_device_activity,
        module_count=count,
        modules=_depth_first(stats),
    )


def _short(name: str) -> str:
    return name[len(MODULE_PREFIX):] if name.startswith(MODULE_PREFIX) else name


def _module_spans(trace: Trace, win: Windows) -> _Spans | None:
    """The module spans: ``nn.Module:`` python_function events (parents through the Python call tree),
    else ``nn.Module:`` annotations (parents by time nesting); None when there are neither."""
    c = trace.columns
    py = trace.rows_of(Kind.PYTHON)
    if py.size:
        forest = python_forest(trace, win)
        mask = trace.name_matches(forest.rows, _PATTERN)
        if mask.any():
            pos, parent = forest.restrict(mask)
            return _Spans(forest.rows[pos], forest.thread[pos], forest.start[pos], forest.end[pos], parent, "python_function")
    rows = _annotations(trace)
    if rows.size == 0:
        return None
    codes = thread_codes(c.pid[rows], c.tid[rows])
    start, end = c.ts[rows], c.ts[rows] + c.dur[rows]
    return _Spans(rows, codes, start, end, parents_by_time(codes, start, end), "annotation")


def _annotations(trace: Trace) -> I64:
    """The ``nn.Module:`` annotation rows (names checked once per distinct annotation name)."""
    ann = trace.rows_of(Kind.USER_ANNOTATION)
    names = unique(trace.columns.name[ann])
    module_names = np.array([i for i in names.tolist() if trace.strings[i].startswith(MODULE_PREFIX)], dtype=np.int32)
    if module_names.size == 0:
        return np.zeros(0, dtype=np.int64)
    rows: I64 = ann[isin(trace.columns.name[ann], module_names)]
    return rows


def _module_of(trace: Trace, spans: _Spans, rows: I64) -> I64:
    """For each CPU row, the innermost module span (index) containing its start on its thread, else -1."""
    codes = codes_like(trace, spans.rows, spans.codes, rows)
    found = innermost(spans.codes, spans.start, spans.end, spans.parent, codes, trace.columns.ts[rows])
    found[codes < 0] = -1
    return found


def _backward(trace: Trace, spans: _Spans, node: I64, win: Windows, count: int) -> tuple[I64, int, str]:
    """Backward time per module node (self), the unattributed backward time, and how ops were paired."""
    from aiprof.trace import links

    out = np.zeros(count, dtype=np.int64)
    fwd_of = links.forward_of(trace)
    linked = fwd_of >= 0
    if not linked.any():
        return out, 0, ""
    par = links.parent(trace)
    rows = np.flatnonzero(linked)
    up = par[rows]
    top = rows[~((up >= 0) & linked[np.maximum(up, 0)])]
    c = trace.columns
    ns = win.clip(c.ts[top], c.ts[top] + c.dur[top])
    mod = _module_of(trace, spans, fwd_of[top])
    has = mod >= 0
    out += np.bincount(node[mod[has]], weights=ns[has], minlength=count).astype(np.int64)
    how = "fwdbwd flows" if bool(trace.flows.is_fwdbwd.any()) else "sequence numbers"
    return out, int(ns[~has].sum()), how


def _device(trace: Trace, spans: _Spans, node: I64, win: Windows, count: int) -> tuple[I64, I64]:
    """Device time (self) per module node of the work launched by its forward ops and by its backward ops."""
    fwd = np.zeros(count, dtype=np.int64)
    bwd = np.zeros(count, dtype=np.int64)
    if not trace.has_device_activity:
        return fwd, bwd
    from aiprof.trace import links

    c = trace.columns
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    op = links.gpu_op(trace)[gpu]
    gpu, op = gpu[op >= 0], op[op >= 0]
    ns = win.clip(c.ts[gpu], c.ts[gpu] + c.dur[gpu])
    mod = _module_of(trace, spans, op)
    has = mod >= 0
    fwd += np.bincount(node[mod[has]], weights=ns[has], minlength=count).astype(np.int64)
    # The rest: launched under a backward op (eager, or a compiled graph's CompiledFunctionBackward running
    # Inductor's kernels); its forward op's module.
    b = forward_op(trace, op[~has])
    ok = b >= 0
    bmod = np.full(b.size, -1, dtype=np.int64)
    bmod[ok] = _module_of(trace, spans, b[ok])
    got = bmod >= 0
    bwd += np.bincount(node[bmod[got]], weights=ns[~has][got], minlength=count).astype(np.int64)
    return fwd, bwd


def _subtree(parent: I64, values: I64) -> I64:
    """Each node's value plus its descendants' (nodes are numbered parents first)."""
    out = values.copy()
    for k in range(parent.size - 1, -1, -1):
        if parent[k] >= 0:
            out[parent[k]] += out[k]
    return out


def _depth_first(stats: list[ModuleStat]) -> list[ModuleStat]:
    """The modules in depth-first order, the biggest (forward + backward) sibling first, with paths and
    depths filled in; at most ``MAX_MODULES`` (the biggest, parents kept before children)."""
    children: dict[int, list[int]] = {}
    for k, s in enumerate(stats):
        children.setdefault(s.parent, []).append(k)
    size = [s.forward_ns + s.backward_ns for s in stats]
    keep = set(range(len(stats)))
    if len(stats) > MAX_MODULES:
        threshold = sorted(size, reverse=True)[MAX_MODULES - 1]
        keep = {k for k in keep if size[k] >= threshold}
    out: list[ModuleStat] = []
    index: dict[int, int] = {}
    stack = [(k, "", 0, -1) for k in sorted(children.get(-1, []), key=lambda k: size[k])]
    while stack:
        k, prefix, depth, parent = stack.pop()
        if k not in keep:
            continue
        s = stats[k]
        path = f"{prefix}/{s.name}" if prefix else s.name
        index[k] = len(out)
        out.append(msgspec.structs.replace(s, path=path, depth=depth, parent=parent))
        stack += [(ch, path, depth + 1, index[k]) for ch in sorted(children.get(k, []), key=lambda ch: size[ch])]
    return out


def module_sums(trace: Trace, windows: Sequence[Any] | None, rows: I64, values: Any) -> dict[str, float]:
    """``values`` of CPU op ``rows`` summed per module path, children included: a forward op counts in its
    innermost enclosing module, a backward op (itself or an op under it) in its forward op's module (as the
    module view attributes backward time). Empty when no module spans were recorded; rows in no module are
    left out."""
    if not len(trace.rows_of(Kind.PYTHON)) and not _annotations(trace).size:
        return {}
    win = Windows.of(windows, trace)
    spans = _module_spans(trace, win)
    if spans is None or rows.size == 0:
        return {}
    names = trace.columns.name[spans.rows].astype(np.int64)
    levels = levels_of(depth_of(spans.parent))
    node, node_parent, head = path_nodes(spans.parent, names, np.zeros(names.size, dtype=np.int64), levels,
                                         len(trace.strings) + 1)
    count = int(node_parent.size)
    weights = np.asarray(values, dtype=np.float64)
    mod = _module_of(trace, spans, rows)
    rest = np.flatnonzero(mod < 0)
    if rest.size:
        fwd = forward_op(trace, rows[rest])
        ok = fwd >= 0
        mod[rest[ok]] = _module_of(trace, spans, fwd[ok])
    has = mod >= 0
    own = np.bincount(node[mod[has]], weights=weights[has], minlength=count)
    total = own.copy()
    for k in range(count - 1, -1, -1):  # nodes are numbered parents first
        if node_parent[k] >= 0:
            total[node_parent[k]] += total[k]
    paths: list[str] = []
    for k in range(count):
        name = _short(trace.strings[int(names[head[k]])])
        parent = int(node_parent[k])
        paths.append(f"{paths[parent]}/{name}" if parent >= 0 else name)
    return {paths[k]: float(total[k]) for k in range(count) if total[k] > 0}
