"""Host time by Python frame: the call tree of the ``python_function`` events (``with_stack``).

torch.profiler's Python tracer writes one ``python_function`` span per Python call it sees, named
``file.py(12): function`` (the line is where the function is *defined*: the tracer records the code object,
not the call site), ``<built-in method …>`` for C functions, and ``nn.Module: Linear_0`` for a module call.
Each span carries ``Python id`` and ``Python parent id``: the call tree, per thread.

:func:`stack_profile` turns them into

- the **call tree** per thread: one node per distinct path of frames from the thread's outermost frame;
  ``total_ns`` is the time spent in the node's calls (their spans), ``self_ns`` that time less the time of
  the node's child calls. Times are clipped to the step windows and summed over them (the recorded
  steps); divide by ``steps`` for a per-step mean.
- the **frames**: the same per frame name (``file(line): fn``) wherever it occurs; a frame that recurses
  (``module.py(1782): _call_impl`` calls itself through every nested module) counts its outermost calls
  only, so ``total_ns`` never exceeds the thread's time.
- the **user source lines**: frames of the user's own code (:func:`is_user_frame`), with ``own_ns`` =
  their self time plus the self time of the library frames they call, down to the next user frame: every
  ns of Python time is charged to the innermost user frame above it.

No ``python_function`` events: ``StackProfile(recorded=False, hint=...)`` says how to record them.
Everything is computed over numpy columns: a few passes per nesting level, no Python loop per event.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from aiprof import arrays
from aiprof.arrays import unique, unique_inverse
from aiprof.trace.model import I64, Kind, Trace

# Median slowdown of a training step with ``with_stack=True`` against the same profiler without it, on the
# demo workload (``aiprof.workloads``, CPU), measured by bench/with_stack_overhead.py (see bench/RESULTS.md).
WITH_STACK_OVERHEAD_PCT = 4.6
# CPU time the Python tracer adds per Python call (one ``python_function`` event each): +203 ns measured by
# bench/with_stack_overhead.py (100k calls of a trivial function with and without with_stack, torch 2.13 CPU;
# bench/RESULTS.md). A step's stack-recording cost is about this times its Python events.
WITH_STACK_NS_PER_CALL = 203
NOT_RECORDED = (
    "Source lines and modules: no Python stacks in this trace; record them with `aiprof run --with-stack` "
    "(overhead: measured {pct:.0f} % CPU per recorded step on the demo workload)"
)
MODULE_PREFIX = "nn.Module: "
TREE_MIN_SHARE = 0.005  # call-tree nodes under this share of the window time are left out of the report
TREE_MAX_NODES = 400
TOP_FRAMES = 50

# Where library code lives. Kineto shortens paths relative to sys.path, so ``torch/nn/modules/module.py``
# and ``typing.py`` both arrive relative: the first path component is compared with the standard library's
# module names and these well-known packages.
_LIBRARY_ROOTS = frozenset(
    {"torch", "torchvision", "torchaudio", "torchtext", "torchdata", "triton", "numpy", "functorch", "apex",
     "transformers", "accelerate", "deepspeed", "lightning", "pytorch_lightning", "timm", "importlib",
     "_pytest", "pytest", "pluggy", "tqdm", "scipy", "pandas", "PIL", "runpy", "typing_extensions",
     "_distutils_hack", "setuptools", "pkg_resources", "six", "packaging", "sympy", "filelock", "fsspec",
     "networkx", "jinja2", "einops", "safetensors", "tokenizers", "datasets", "huggingface_hub", "sklearn",
     "diffusers", "peft", "xfuser", "aiter", "vllm", "flash_attn", "xformers", "megatron", "fairscale", "torchrec",
     "fbgemm_gpu", "torch_xla", "onnx", "onnxruntime", "jax", "tensorflow", "keras", "wandb", "mlflow"}
)
_LIBRARY_HINTS = ("site-packages", "dist-packages", "/lib/python", "<frozen", "<string>", "torchinductor")


def is_user_frame(name: str) -> bool:
    """Whether a ``python_function`` name is a frame of the user's own code: ``file.py(N): fn`` whose file
    is not in site-/dist-packages or the Python installation, and whose first path component is neither a
    standard-library module (``sys.stdlib_module_names``) nor a well-known ML library (torch, numpy…).
    ``<built-in …>`` and ``nn.Module: …`` spans are never user frames."""
    head, sep, _ = name.partition(".py(")
    if not sep or name.startswith("<") or name.startswith(MODULE_PREFIX):
        return False
    if any(h in name for h in _LIBRARY_HINTS):
        return False
    path = head.replace("\\", "/").lstrip("./")
    root = path.split("/", 1)[0]
    if root == "aiprof":  # aiprof's capture hooks are library code; its demo workloads stand for the user's
        return path.startswith("aiprof/workloads/")
    return root not in _LIBRARY_ROOTS and root not in sys.stdlib_module_names


class FrameStat(msgspec.Struct, kw_only=True):
    """One Python frame name over the recorded steps (ns summed over them)."""

    name: str
    user: bool
    calls: int
    self_ns: int
    total_ns: int  # outermost calls only: recursion is not counted twice
    own_ns: int = 0  # user frames: self time plus the library frames below, down to the next user frame


class StackNode(msgspec.Struct, kw_only=True):
    """A node of a thread's call tree (one path of frames). ``parent`` is an index into the tree, -1 at a
    thread's outermost frames."""

    id: int
    parent: int
    name: str
    tid: int
    calls: int
    total_ns: int
    self_ns: int


class StackProfile(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Host time by Python frame (``RankReport.stacks``). Every ``*_ns`` is summed over ``steps`` steps."""

    recorded: bool
    hint: str = ""
    steps: int = 0
    step_source: str = ""
    window_ns: int = 0  # the steps' total time (the sum of their windows)
    python_ns: int = 0  # time under an outermost Python frame, summed over threads
    events: int = 0  # python_function events inside the steps
    parents_from: str = ""  # "Python parent id" or "time nesting"
    main_tid: int = -1  # the thread with the most Python time (the flame graph's)
    main_python_ns: int = 0  # that thread's time under an outermost Python frame
    no_user_frame_ns: int = 0  # Python self time with no user frame above it (profiler, library threads)
    user_lines: list[FrameStat] = msgspec.field(default_factory=list)  # by own_ns
    frames: list[FrameStat] = msgspec.field(default_factory=list)  # by self_ns
    tree: list[StackNode] = msgspec.field(default_factory=list)  # pruned: nodes ≥ tree_min_ns
    tree_min_ns: int = 0
    tree_nodes: int = 0  # nodes before pruning


def not_recorded() -> StackProfile:
    """The result for a trace without ``python_function`` events: how to get them."""
    return StackProfile(recorded=False, hint=NOT_RECORDED.format(pct=WITH_STACK_OVERHEAD_PCT))


# ---------------------------------------------------------------------------------------------------
# The Python span forest (shared with aiprof.analysis.modules)
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Windows:
    """Step windows as sorted, disjoint intervals, with the time each interval clips (vectorised)."""

    starts: I64
    ends: I64
    count: int
    source: str

    @staticmethod
    def of(windows: Sequence[Any] | None, trace: Trace) -> Windows:
        """From ``StepWindow``s (``start_ns``/``end_ns``/``source``); None: one window over the trace."""
        if not windows:
            lo, hi = trace.time_range_ns
            return Windows(np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64), 1, "whole trace")
        ws = sorted(windows, key=lambda w: w.start_ns)
        starts = np.array([w.start_ns for w in ws], dtype=np.int64)
        ends = np.maximum(np.array([w.end_ns for w in ws], dtype=np.int64), starts)
        ends[:-1] = np.minimum(ends[:-1], starts[1:])  # disjoint, so no ns is counted twice
        return Windows(starts, ends, len(ws), str(getattr(ws[0], "source", "")))

    @property
    def total_ns(self) -> int:
        return int((self.ends - self.starts).sum())

    def before(self, t: I64) -> I64:
        """Window time before each instant ``t``."""
        lengths = self.ends - self.starts
        cum = np.concatenate(([0], np.cumsum(lengths)))
        k = np.searchsorted(self.starts, t, side="right") - 1
        inside = np.clip(t - self.starts[np.maximum(k, 0)], 0, lengths[np.maximum(k, 0)])
        out: I64 = np.where(k >= 0, cum[np.maximum(k, 0)] + inside, 0)
        return out

    def clip(self, start: I64, end: I64) -> I64:
        """The part of each interval inside the windows, ns."""
        out: I64 = self.before(end) - self.before(start)
        return out


@dataclass(frozen=True)
class PyForest:
    """The ``python_function`` spans as a forest: ``rows`` (trace rows, time order), ``parent`` (position in
    ``rows``, -1 at a root), ``depth``, ``clipped`` (ns inside the windows), ``self_ns`` (clipped less the
    children's), ``thread`` (dense thread code), ``levels`` (positions per depth)."""

    rows: I64
    parent: I64
    depth: I64
    clipped: I64
    self_ns: I64
    thread: I64
    start: I64
    end: I64
    levels: list[I64]
    parents_from: str

    def nearest(self, marked: np.ndarray[Any, np.dtype[np.bool_]]) -> I64:
        """For each span, the nearest marked span among itself and its ancestors (position), else -1."""
        out = np.full(self.rows.size, -1, dtype=np.int64)
        for level in self.levels:
            par = self.parent[level]
            above = np.where(par >= 0, out[np.maximum(par, 0)], -1)
            out[level] = np.where(marked[level], level, above)
        return out

    def restrict(self, marked: np.ndarray[Any, np.dtype[np.bool_]]) -> tuple[I64, I64]:
        """The forest of the marked spans alone: their positions, and each one's parent among them (its
        nearest marked ancestor, as an index into those positions; -1 at a root)."""
        pos = np.flatnonzero(marked)
        owner = self.nearest(marked)
        up = self.parent[pos]
        above = np.where(up >= 0, owner[np.maximum(up, 0)], -1)
        index = np.full(self.rows.size, -1, dtype=np.int64)
        index[pos] = np.arange(pos.size)
        return pos.astype(np.int64), np.where(above >= 0, index[np.maximum(above, 0)], -1)


def thread_codes(pid: I64, tid: I64) -> I64:
    """Dense codes of (pid, tid) pairs."""
    key = (pid.astype(np.int64) << 32) ^ (tid.astype(np.int64) & 0xFFFFFFFF)
    codes: I64 = unique_inverse(key)[2]
    return codes


def python_forest(trace: Trace, windows: Windows) -> PyForest:
    """The Python span forest of a trace (cached on it per window set)."""
    key = f"stacks.forest:{hash((windows.starts.tobytes(), windows.ends.tobytes()))}"
    found: PyForest | None = trace.cache.get(key)
    if found is None:
        found = _build_forest(trace, windows)
        trace.cache[key] = found
    return found


def _build_forest(trace: Trace, windows: Windows) -> PyForest:
    c = trace.columns
    rows = trace.rows_of(Kind.PYTHON)
    codes = thread_codes(c.pid[rows], c.tid[rows])
    start, end = c.ts[rows], c.ts[rows] + c.dur[rows]
    parent, how = _parents_by_id(trace, rows, codes, start, end)
    if parent is None:
        parent, how = parents_by_time(codes, start, end), "time nesting"
    depth = depth_of(parent)
    levels = levels_of(depth)
    start, end = _nested(parent, levels, codes, start, end)
    clipped = windows.clip(start, end)
    has = parent >= 0
    child_ns = np.bincount(parent[has], weights=clipped[has], minlength=rows.size).astype(np.int64)
    return PyForest(rows, parent, depth, clipped, np.maximum(clipped - child_ns, 0), codes, start, end, levels, how)


def _nested(parent: I64, levels: list[I64], codes: I64, start: I64, end: I64) -> tuple[I64, I64]:
    """The spans made properly nested, top down: each cut to its parent's (cut) span, and to start where its
    earlier siblings end. Real traces hold a few spans that outlive their parent or overlap a sibling (spans
    closed late when the profiler stopped); cut, every ns lies in one frame at each depth, so the self times
    of a subtree add up to its root's time."""
    start, end = start.copy(), end.copy()
    for depth, level in enumerate(levels):
        if depth:
            p = parent[level]
            start[level] = np.maximum(start[level], start[p])
            end[level] = np.maximum(np.minimum(end[level], end[p]), start[level])
        group = codes[level] if depth == 0 else parent[level]
        order = np.lexsort((start[level], group))
        sel, g = level[order], group[order]
        base, span = int(start[sel].min()), int(end[sel].max() - start[sel].min()) + 2
        offset = unique_inverse(g)[2] * span
        running = np.maximum.accumulate(offset + (end[sel] - base))
        prev_end = np.concatenate(([0], running[:-1])) - offset + base
        first = np.concatenate(([True], g[1:] != g[:-1]))
        lo = np.where(first, start[sel], np.maximum(start[sel], prev_end))
        start[sel] = lo
        end[sel] = np.maximum(end[sel], lo)
    return start, end


def _parents_by_id(trace: Trace, rows: I64, codes: I64, start: I64, end: I64) -> tuple[I64 | None, str]:
    """Parents from ``Python id`` / ``Python parent id``; None when the ids are missing. A parent that is on
    another thread or does not contain its child in time is dropped (the child becomes a root)."""
    c = trace.columns
    ids, pids = c.python_id[rows], c.python_parent_id[rows]
    if rows.size == 0 or (ids < 0).mean() > 0.01:
        return None, ""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.minimum(np.searchsorted(sorted_ids, pids), sorted_ids.size - 1)
    hit = (pids >= 0) & (sorted_ids[pos] == pids)
    parent = np.where(hit, order[pos], -1).astype(np.int64)
    p = np.maximum(parent, 0)
    ok = (parent >= 0) & (codes[p] == codes) & (start[p] <= start) & (end[p] >= start) & (p != np.arange(rows.size))
    parent[~ok] = -1
    return parent, "Python parent id"


def parents_by_time(codes: I64, start: I64, end: I64) -> I64:
    """Parents by time nesting on each thread (traces without Python ids): the innermost earlier span that
    contains the span's start."""
    order = np.lexsort((-(end - start), start, codes))
    out = np.full(start.size, -1, dtype=np.int64)
    if start.size == 0:
        return out
    base, span = int(start.min()), int(end.max() - start.min()) + 2
    skey = codes[order] * span + (start[order] - base)
    ekey = codes[order] * span + (end[order] - base)
    # Each span's candidate starts at the previous span in (thread, start) order and jumps up the
    # candidates' own pointers while it does not contain the start: a span skipped this way ends before
    # the start it was skipped for, so it cannot contain any later start either.
    p = np.arange(start.size, dtype=np.int64) - 1
    for _ in range(4096):
        q = np.maximum(p, 0)
        bad = (p >= 0) & (ekey[q] <= skey)
        if not bad.any():
            break
        p[bad] = p[q[bad]]
    out[order] = np.where(p >= 0, order[np.maximum(p, 0)], -1)
    return out


def path_nodes(parent: I64, names: I64, group: I64, levels: list[I64], nbase: int) -> tuple[I64, I64, I64]:
    """Merge a forest's elements into path nodes: one node per (group, path of names from a root). Returns
    each element's node, each node's parent node (-1 at a root) and one element of each node. Nodes are
    numbered level by level, so a parent's number is below its children's."""
    node = np.full(parent.size, -1, dtype=np.int64)
    groups = int(group.max()) + 1 if group.size else 1
    parents: list[I64] = []
    firsts: list[I64] = []
    next_id = 0
    for depth, level in enumerate(levels):
        pkey = group[level] if depth == 0 else node[parent[level]] + groups
        uniq, first, inverse = unique_inverse(pkey * nbase + names[level])
        node[level] = next_id + inverse
        head = level[first]
        parents.append(np.full(head.size, -1, dtype=np.int64) if depth == 0 else node[parent[head]])
        firsts.append(head)
        next_id += uniq.size
    empty = np.zeros(0, dtype=np.int64)
    return node, np.concatenate(parents) if parents else empty, np.concatenate(firsts) if firsts else empty


def depth_of(parent: I64) -> I64:
    """Each element's number of ancestors, by pointer jumping (O(n log depth))."""
    depth = (parent >= 0).astype(np.int64)
    jump = parent.copy()
    for _ in range(64):  # 2**64 levels: bounded even for ids that form a cycle
        live = np.flatnonzero(jump >= 0)
        if live.size == 0:
            break
        up = jump[live]
        depth[live] += depth[up]  # fancy-index reads happen before the writes: one synchronous round
        jump[live] = jump[up]
    return depth


def levels_of(depth: I64) -> list[I64]:
    if depth.size == 0:
        return []
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    return [order[bounds[d] : bounds[d + 1]] for d in range(int(depth.max()) + 1)]


def innermost(
    span_code: I64, span_start: I64, span_end: I64, span_parent: I64, q_code: I64, q_ts: I64
) -> I64:
    """For each query (thread code, instant), the innermost span of the given properly nested set that
    contains it on the same thread (index into the spans), else -1. ``span_parent`` indexes the spans."""
    out = np.full(q_ts.size, -1, dtype=np.int64)
    if span_start.size == 0 or q_ts.size == 0:
        return out
    base = int(min(span_start.min(), q_ts.min()))
    span = int(max(span_end.max(), q_ts.max()) - base) + 2
    order = np.lexsort((-(span_end - span_start), span_start, span_code))
    skey = span_code[order] * span + (span_start[order] - base)
    ekey = span_code[order] * span + (span_end[order] - base)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    sorted_parent = np.where(span_parent[order] >= 0, rank[np.maximum(span_parent[order], 0)], -1)
    qkey = q_code * span + (q_ts - base)
    cand = np.searchsorted(skey, qkey, side="right") - 1
    for _ in range(4096):
        bad = (cand >= 0) & (ekey[np.maximum(cand, 0)] <= qkey)
        if not bad.any():
            break
        cand[bad] = sorted_parent[cand[bad]]
    hit = cand >= 0
    out[hit] = order[cand[hit]]
    return out


# ---------------------------------------------------------------------------------------------------
# The profile
# ---------------------------------------------------------------------------------------------------
def stack_profile(trace: Trace, windows: Sequence[Any] | None = None) -> StackProfile:
    """Host time by Python frame over the step windows (``StepWindow``s; None: the whole trace)."""
    if not len(trace.rows_of(Kind.PYTHON)):
        return not_recorded()
    win = Windows.of(windows, trace)
    forest = python_forest(trace, win)
    inside = forest.clipped > 0
    names = trace.columns.name[forest.rows].astype(np.int64)
    user_of_name = _user_names(trace, names)
    user = user_of_name[names]
    paths = path_nodes(forest.parent, names, forest.thread, forest.levels, len(trace.strings) + 1)
    frames = _frames(trace, forest, names, user, paths)
    owner = forest.nearest(user)
    has_owner = (owner >= 0) & inside
    own = np.bincount(names[owner[has_owner]], weights=forest.self_ns[has_owner], minlength=len(trace.strings))
    user_lines = sorted((f for f in frames if f.user), key=lambda f: -own[trace.string_id(f.name)])
    for f in user_lines:
        f.own_ns = int(own[trace.string_id(f.name)])
    tree, total_nodes, min_ns = _tree(trace, forest, names, paths, win.total_ns)
    roots = forest.parent < 0
    by_thread = np.bincount(forest.thread[roots], weights=forest.clipped[roots]) if roots.any() else np.zeros(1)
    main = int(np.argmax(by_thread)) if by_thread.size else 0
    main_rows = forest.rows[forest.thread == main]
    return StackProfile(
        recorded=True,
        steps=win.count,
        step_source=win.source,
        window_ns=win.total_ns,
        python_ns=int(forest.clipped[roots].sum()),
        events=int(inside.sum()),
        parents_from=forest.parents_from,
        main_tid=int(trace.columns.tid[main_rows[0]]) if main_rows.size else -1,
        main_python_ns=int(by_thread[main]) if by_thread.size else 0,
        no_user_frame_ns=int(forest.self_ns[(owner < 0) & inside].sum()),
        user_lines=[f for f in user_lines if f.own_ns > 0 or f.total_ns > 0][:TOP_FRAMES],
        frames=sorted(frames, key=lambda f: -f.self_ns)[:TOP_FRAMES],
        tree=tree,
        tree_min_ns=min_ns,
        tree_nodes=total_nodes,
    )


def _user_names(trace: Trace, names: I64) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """For every string id, whether it names a user frame (only the ids in ``names`` are looked at)."""
    out = np.zeros(len(trace.strings), dtype=bool)
    for i in unique(names).tolist():
        out[i] = is_user_frame(trace.strings[i])
    return out


def _frames(
    trace: Trace, forest: PyForest, names: I64, user: np.ndarray[Any, np.dtype[np.bool_]], paths: tuple[I64, I64, I64]
) -> list[FrameStat]:
    """Per frame name: calls, self time, and total time of its outermost calls (recursion counted once)."""
    inside = forest.clipped > 0
    n = len(trace.strings)
    calls = np.bincount(names[inside], minlength=n)
    self_ns = np.bincount(names, weights=forest.self_ns, minlength=n)
    outer = _outermost(names, paths)
    total = np.bincount(names[outer], weights=forest.clipped[outer], minlength=n)
    ids = np.flatnonzero(calls > 0)
    return [
        FrameStat(name=trace.strings[i], user=bool(user_i), calls=int(calls[i]), self_ns=int(self_ns[i]), total_ns=int(total[i]))
        for i, user_i in zip(ids.tolist(), arrays.isin(ids, names[user]).tolist(), strict=True)
    ]


def _outermost(names: I64, paths: tuple[I64, I64, I64]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Spans with no enclosing span of the same name: a property of their call-tree path (node), found by
    climbing the nodes' ancestors, one level per pass over the (few) nodes."""
    node, parent, head = paths
    if head.size == 0:
        return np.zeros(names.size, dtype=bool)
    name = names[head]
    repeated = np.zeros(head.size, dtype=bool)
    anc = parent.copy()
    for _ in range(head.size):
        live = np.flatnonzero(anc >= 0)
        if live.size == 0:
            break
        repeated[live] |= name[anc[live]] == name[live]
        anc[live] = parent[anc[live]]
    out: np.ndarray[Any, np.dtype[np.bool_]] = ~repeated[node]
    return out


def _tree(
    trace: Trace, forest: PyForest, names: I64, paths: tuple[I64, I64, I64], window_ns: int
) -> tuple[list[StackNode], int, int]:
    """The call tree per thread (nodes = distinct paths of frame names), pruned to the nodes holding at
    least ``TREE_MIN_SHARE`` of the window time (at most ``TREE_MAX_NODES``); with the node count before
    pruning and the threshold used. A node's total never exceeds its parent's, so pruning keeps a tree."""
    node, parent, head = paths
    next_id = int(parent.size)
    if next_id == 0:
        return [], 0, 0
    inside = forest.clipped > 0
    calls = np.bincount(node[inside], minlength=next_id)
    total = np.bincount(node, weights=forest.clipped, minlength=next_id).astype(np.int64)
    self_ns = np.bincount(node, weights=forest.self_ns, minlength=next_id).astype(np.int64)
    min_ns = max(int(TREE_MIN_SHARE * window_ns), 1)
    if int((total >= min_ns).sum()) > TREE_MAX_NODES:
        min_ns = int(np.sort(total)[::-1][TREE_MAX_NODES - 1]) + 1
    kept = np.flatnonzero(total >= min_ns)
    kept = kept[(parent[kept] < 0) | (total[np.maximum(parent[kept], 0)] >= min_ns)]
    index = np.full(next_id, -1, dtype=np.int64)
    index[kept] = np.arange(kept.size)
    tids = trace.columns.tid[forest.rows[head]]
    nodes = [
        StackNode(id=i, parent=int(index[parent[k]]) if parent[k] >= 0 else -1,
                  name=trace.strings[int(names[head[k]])], tid=int(tids[k]), calls=int(calls[k]),
                  total_ns=int(total[k]), self_ns=int(self_ns[k]))
        for i, k in enumerate(kept.tolist())
    ]
    return nodes, next_id, min_ns


# ---------------------------------------------------------------------------------------------------
# Source lines of ops (findings)
# ---------------------------------------------------------------------------------------------------
OP_KEYS = ("name", "op", "ops", "top_ops", "attention_ops", "kernel", "kernels", "top_kernels")
TOP_LINES = 3


def op_source_lines(trace: Trace, windows: Windows, op_rows: I64, limit: int = TOP_LINES) -> list[str]:
    """The innermost user frames (``file(line): fn``) the given CPU ops run under, most time first. An op
    under no user frame that runs inside a backward op (the autograd engine's thread: an eager
    ``MulBackward0``, a compiled graph's ``CompiledFunctionBackward`` launching Inductor's kernels) takes
    the line of the forward op that created that backward node."""
    forest = python_forest(trace, windows)
    c = trace.columns
    names = c.name[forest.rows].astype(np.int64)
    user = _user_names(trace, names)[names]
    if not user.any() or op_rows.size == 0:
        return []
    spans, span_parent = forest.restrict(user)

    def lines_of(rows: I64) -> I64:
        return innermost(forest.thread[spans], forest.start[spans], forest.end[spans], span_parent,
                         _codes_like(trace, forest, rows), c.ts[rows])

    found = lines_of(op_rows)
    miss = np.flatnonzero(found < 0)
    if miss.size:  # a backward op on the autograd thread (eager, or a compiled CompiledFunctionBackward)
        fwd = forward_op(trace, op_rows[miss])  # has no user frame: its forward op's line
        ok = fwd >= 0
        if ok.any():
            found[miss[ok]] = lines_of(fwd[ok])
    hit = found >= 0
    if not hit.any():
        return []
    weight = windows.clip(c.ts[op_rows][hit], c.ts[op_rows][hit] + c.dur[op_rows][hit]) + 1
    line_ids = names[spans[found[hit]]]
    tally = np.bincount(line_ids, weights=weight)
    best = np.argsort(-tally, kind="stable")[:limit]
    return [trace.strings[int(i)] for i in best.tolist() if tally[i] > 0]


def forward_op(trace: Trace, rows: I64, max_depth: int = 64) -> I64:
    """For each row, the forward op of the innermost backward op it runs in (itself included; climbing the
    CPU span tree: :func:`aiprof.trace.links.forward_of`), -1 outside any backward op."""
    from aiprof.trace import links

    fwd_of, par = links.forward_of(trace), links.parent(trace)
    b = rows.astype(np.int64).copy()
    for _ in range(max_depth):
        climb = (b >= 0) & (fwd_of[np.maximum(b, 0)] < 0)
        if not climb.any():
            break
        b[climb] = par[b[climb]]
    out: I64 = np.where(b >= 0, fwd_of[np.maximum(b, 0)], -1)
    return out


def _codes_like(trace: Trace, forest: PyForest, rows: I64) -> I64:
    return codes_like(trace, forest.rows, forest.thread, rows)


def codes_like(trace: Trace, known_rows: I64, known_codes: I64, rows: I64) -> I64:
    """The thread codes ``known_codes`` gives ``known_rows``, for other rows (-1 on another thread)."""
    """The forest's thread codes for other rows (-1 on a thread without Python spans)."""
    c = trace.columns
    if known_rows.size == 0:
        return np.full(rows.size, -1, dtype=np.int64)
    key_py = (c.pid[known_rows].astype(np.int64) << 32) ^ (c.tid[known_rows].astype(np.int64) & 0xFFFFFFFF)
    keys, first, _ = unique_inverse(key_py)
    codes = known_codes[first]
    key_q = (c.pid[rows].astype(np.int64) << 32) ^ (c.tid[rows].astype(np.int64) & 0xFFFFFFFF)
    pos = np.minimum(np.searchsorted(keys, key_q), keys.size - 1)
    out: I64 = np.where(keys[pos] == key_q, codes[pos], -1)
    return out


def named_strings(evidence: Any, keys: Iterable[str] = OP_KEYS) -> set[str]:
    """Every string held (at any depth) under one of ``keys`` in a finding's evidence."""
    wanted = set(keys)
    found: set[str] = set()

    def walk(value: Any, named: bool) -> None:
        if isinstance(value, str):
            if named:
                found.add(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, named or k in wanted)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, named)

    walk(evidence, False)
    return found


def source_lines_of(trace: Trace, windows: Sequence[Any] | None, evidences: Sequence[Mapping[str, object]]) -> list[list[str]]:
    """For each finding's evidence, the user source lines the ops it names (or kernels: through the op that
    launched them) run under, most time first; ``[]`` for evidence that names no op or already carries
    ``source_line(s)``. Needs Python stacks (all ``[]`` without). The findings are not touched: the diagnosis
    adds the lines to their evidence as ``source_lines``."""
    out: list[list[str]] = [[] for _ in evidences]
    if not len(trace.rows_of(Kind.PYTHON)) or not evidences:
        return out
    from aiprof.trace import links

    win = Windows.of(windows, trace)
    c = trace.columns
    ops = trace.rows_of(Kind.CPU_OP, Kind.USER_ANNOTATION)
    kernels = trace.rows_of(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
    for k, evidence in enumerate(evidences):
        if "source_line" in evidence or "source_lines" in evidence:
            continue
        ids = np.array([i for s in named_strings(evidence) if (i := trace.string_id(s)) >= 0], dtype=np.int32)
        if ids.size == 0:
            continue
        rows = ops[arrays.isin(c.name[ops], ids)]
        launched = kernels[arrays.isin(c.name[kernels], ids)]
        if launched.size:
            by = links.gpu_op(trace)[launched]
            rows = unique(np.concatenate((rows, by[by >= 0])))
        rows = rows[win.clip(c.ts[rows], c.ts[rows] + c.dur[rows] + 1) > 0]
        out[k] = op_source_lines(trace, win, rows)
    return out
