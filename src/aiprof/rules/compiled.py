"""Rules on torch.compile'd code: ``recompilation`` (compile time that comes back in the steady steps),
``graph_break`` (eager code between compiled graphs inside one call of a compiled frame) and
``cudagraphs_not_replayed`` (CUDA graphs set up again and again but not replayed: reduce-overhead that did
not take).

A frame's first compile (compile id F/0) is paid once per process: :mod:`aiprof.rules.coldstart` reports
it as a one-time cost (``cold_start``) and leaves its step out of the steady state. Everything else Dynamo
compiles during the steady steps is a recompile: its time is the saving, its cause what changed between
the graphs' recorded inputs (:mod:`aiprof.analysis.compile`).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.analysis import intervals as iv
from aiprof.analysis.compile import (Compilation, GraphBreak, GraphUse, compilations, graph_breaks, graph_launch_ns,
                                     compiled_call_set, graph_use, uses_graph_trees)
from aiprof.rules.context import RankContext
from aiprof.rules.evidence import ms_text
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.spec import Saving, rank_rule
from aiprof.trace.model import GPU_WORK_KINDS

_FIXES = {
    "shape": "the input shapes change between calls: compile for dynamic shapes (torch._dynamo.mark_dynamic(x, 0) "
             "on the varying dimension before the call, or torch.compile(model, dynamic=True)), or pad / bucket "
             "the inputs to a few fixed sizes (pad the last batch or use drop_last=True; bucket sequence lengths "
             "to multiples of 64)",
    "dtype": "the inputs' dtypes change between calls: cast them to one dtype before the compiled call",
    "guard": "the tensors are the same, so a guard on something else failed: a Python number or string "
             "argument, a global, a module attribute or grad mode that changes between calls. Pass changing "
             "numbers as tensors (torch.tensor(step)), move the Python value out of the compiled function, or "
             "set torch._dynamo.config.automatic_dynamic_shapes / mark the integer dynamic",
    "unknown": "the trace does not show what changed (record_shapes=True records the graphs' inputs): run "
               "once with TORCH_LOGS=recompiles (or torch._logging.set_logs(recompiles=True)) to print the guard "
               "that failed. A new input shape is the most common cause: then compile for dynamic shapes "
               "(torch.compile(model, dynamic=True), or torch._dynamo.mark_dynamic(x, 0) on the varying dimension "
               "before the call) or pad / bucket the inputs to a few fixed sizes (pad the last batch or use "
               "drop_last=True; bucket sequence lengths to multiples of 64); a Python number that changes: pass "
               "it as a tensor",
}
_LOGS_TAIL = "TORCH_LOGS=recompiles prints each failed guard. "
_FIX_TAIL = ("After torch._dynamo.config.recompile_limit (8) recompiles of a frame Dynamo stops compiling it and "
             "runs it eagerly.")


def _steady_compiles(ctx: RankContext) -> tuple[list[tuple[Compilation, int]], int]:
    """Compilations in the steady steps other than a frame's first compile, each with its compile time
    inside the steady steps, and the union of that time (compilations on several threads at once count
    once). A compilation seen as several spans (forward, backward, first-call autotuning) is one."""
    found = [k for k in compilations(ctx.trace) if k.attempt != 0]
    if not found or not ctx.steps:
        return [], 0
    steady = ctx.steady_set
    out = [(k, iv.total(iv.intersect(k.intervals(), steady))) for k in found]
    out = [(k, ns) for k, ns in out if ns > 0]
    together = iv.union(*(k.intervals() for k, _ in out)) if out else iv.as_set([], [])
    return out, iv.total(iv.intersect(together, steady))


class Recompile(Evidence, kw_only=True):
    """One steady-state recompilation: its compile id, compile time, cause, spans, and Dynamo's detail and
    guard when the run recorded them."""

    compile_id: str | None
    dur_ns: int
    cause: str
    spans: int
    detail: str | UnsetType = UNSET
    guard: str | UnsetType = UNSET


class RecompilationEvidence(Evidence, kw_only=True):
    """``recompilation``'s evidence: how many, their compile time per step, by cause and by frame, the eight
    longest, and Dynamo's guard for the longest."""

    recompiles: int
    compile_ns_per_step: int
    causes: dict[str, int]
    frames: dict[str, int]
    recompilations: list[Recompile]
    guard: str | UnsetType = UNSET


@rank_rule(saving=Saving.TIME, needs=("steps", "trace"))
def recompilation(ctx: RankContext) -> list[Finding]:
    """Dynamo compiles again in the steady steps: the compile time, how often, why, and the fix per cause."""
    found, total = _steady_compiles(ctx)
    if not found:
        return []
    saving = total / ctx.step_count
    causes = Counter(k.cause for k, _ in found)
    frames = Counter(str(k.frame) for k, _ in found if k.frame is not None)
    main = causes.most_common(1)[0][0]
    examples = [Recompile(compile_id=k.compile_id, dur_ns=ns, cause=k.cause, spans=len(k.spans),
                          detail=k.detail or UNSET, guard=k.guard or UNSET)
                for k, ns in sorted(found, key=lambda f: -f[1])[:8]]
    evidence = RecompilationEvidence(recompiles=len(found), compile_ns_per_step=int(saving),
                                     causes=dict(causes.most_common()), frames=dict(frames.most_common()),
                                     recompilations=examples)
    why = ", ".join(f"{n} {cause}" for cause, n in causes.most_common())
    title = (f"torch.compile recompiles in the steady steps: {len(found)} recompilation{'s' * (len(found) != 1)} "
             f"({why}), {ms_text(saving)} of compile time per step")
    guard = next((k.guard for k, _ in sorted(found, key=lambda f: -f[1]) if k.guard), "")
    if guard:
        evidence.guard = guard  # Dynamo's words for the longest recompile (the run's dynamo.rank<N>.json)
        title += f"; Dynamo: {guard}"
    text = "; ".join(_FIXES[c] for c, _ in causes.most_common() if c in _FIXES)
    tail = "" if "unknown" in causes or guard else _LOGS_TAIL
    fix = text[:1].upper() + text[1:] + ". " + tail + _FIX_TAIL
    return [ctx.finding("recompilation", title, saving, evidence=evidence, fix=fix,
                        formula="compile time (Dynamo/AOTAutograd/Inductor spans, every span of a compile id "
                        "counted once) of recompiles inside the steady steps / steps: none of it is paid once "
                        "the shapes and guards are stable",
                        kind="estimate", confidence="high" if main in ("shape", "dtype") else "medium")]


@rank_rule(saving=Saving.TIME, needs=("steps", "trace", "source_lines"))
def graph_break(ctx: RankContext) -> list[Finding]:
    """Eager code between compiled graphs inside calls of a compiled frame, per boundary."""
    breaks = _steady_breaks(ctx)
    if not breaks:
        return []
    busy = _device_busy(ctx)
    per_boundary: dict[tuple[str, int], list[GraphBreak]] = {}
    for b in breaks:
        per_boundary.setdefault((_region_name(ctx, b), b.index), []).append(b)
    rows = [_boundary(ctx, key, items, busy) for key, items in per_boundary.items()]
    rows.sort(key=lambda r: -int(r.saving_ns))
    saving = sum(int(r.saving_ns) for r in rows) / ctx.step_count
    top = rows[0]
    where = next((w for w in (top.break_at, top.source_line) if isinstance(w, str) and w),
                 f"at {top.ops[0]}" if top.ops else "")
    title = (f"torch.compile graph breaks: {len(per_boundary)} boundar{'y' if len(per_boundary) == 1 else 'ies'} "
             f"between compiled graphs run eager code, {ms_text(saving)} per step" + (f" ({where})" if where else ""))
    evidence = {"breaks_per_step": round(len(breaks) / ctx.step_count, 2), "boundaries": rows[:8],
                "ops": [op for r in rows[:3] for op in r.ops[:3]]}
    fix = ("Remove the break so Dynamo compiles one graph: .item() / .tolist() / a Python `if` on a tensor's value "
           "(use torch.where or torch.cond, or keep the value a tensor; torch._dynamo.config."
           "capture_scalar_outputs = True compiles .item()), print() / logging inside forward (move it out), an "
           "unsupported op or a call into a C extension (wrap it as a custom op: torch.library.custom_op). "
           "torch._dynamo.explain(model)(inputs) or TORCH_LOGS=graph_breaks lists every break with its reason; "
           "fullgraph=True makes a break an error.")
    return [ctx.finding("graph_break", title, saving, evidence=evidence, fix=fix,
                        formula="eager host time between consecutive compiled graphs inside one compiled-frame call"
                        + (", where the device is idle" if ctx.is_gpu else "") + " (compile time excluded), per step",
                        confidence="high" if top.break_at else "medium")]


def _steady_breaks(ctx: RankContext) -> list[GraphBreak]:
    if not ctx.steps:
        return []
    starts, ends = ctx.steady_set
    out = []
    for b in graph_breaks(ctx.trace):
        i = int(np.searchsorted(starts, b.start_ns, side="right")) - 1
        if i >= 0 and b.start_ns < int(ends[i]):
            out.append(b)
    return out


def _device_busy(ctx: RankContext) -> iv.IntervalSet | None:
    if not ctx.is_gpu:
        return None
    c = ctx.trace.columns
    rows = ctx.trace.rows_of(*GPU_WORK_KINDS)
    rows = rows[c.device[rows] == ctx.device.device_index]
    return iv.merge(c.ts[rows], c.ts[rows] + c.dur[rows])


def _region_name(ctx: RankContext, b: GraphBreak) -> str:
    return ctx.trace.name_of(b.region_row)


class GraphBoundary(Evidence, kw_only=True):
    """One boundary between compiled graphs of a compiled frame (``graph_break``'s evidence): its calls, the
    eager time at it and what the fix saves, the ops run there, where Dynamo broke and the user's line."""

    region: str
    boundary: int
    calls: int
    eager_ns: int
    saving_ns: int
    ops: list[str]
    break_at: str | UnsetType = UNSET
    source_line: str | UnsetType = UNSET


def _boundary(ctx: RankContext, key: tuple[str, int], items: list[GraphBreak], busy: iv.IntervalSet | None) -> GraphBoundary:
    """One boundary over its calls: count, time, the ops run at it, where it broke."""
    region, index = key
    lo = np.array([b.start_ns for b in items], dtype=np.int64)
    hi = np.array([b.end_ns for b in items], dtype=np.int64)
    eager = sum(b.eager_ns for b in items)
    saving = eager - (int(iv.overlap_per_window(busy, lo, hi).sum()) if busy is not None else 0)
    names = Counter(ctx.trace.name_of(op) for b in items for op in b.ops)
    out = GraphBoundary(region=region, boundary=index + 1, calls=len(items), eager_ns=eager, saving_ns=max(saving, 0),
                        ops=[n for n, _ in names.most_common(5)])
    if items[0].resume_at:
        out.break_at = items[0].resume_at
    first_op = next((op for b in items for op in b.ops), None)
    line = ctx.source_line(first_op) if first_op is not None else None
    if line:
        out.source_line = line
    return out


# ---------------------------------------------------------------------------------------------------
# CUDA graphs that do not replay
# ---------------------------------------------------------------------------------------------------
_GRAPH_FIXES = {
    "dynamic shapes": (
        "A CUDA graph replays only the shapes it recorded: CUDA graph trees keep one graph per distinct input "
        "shape, run it eagerly on its first call (warm-up) and record and replay it from the second, so a "
        "shape seen once is never replayed (and each new shape recompiles). Keep the shapes static: pad or "
        "bucket the inputs to a few fixed sizes (pad the batch, drop_last=True, bucket sequence lengths to "
        "multiples of 64), so each size records once and replays after; torch.compile(dynamic=True) / "
        "torch._dynamo.mark_dynamic stops the recompiles but graph trees still record one graph per distinct "
        "size (torch._inductor.config.triton.cudagraph_skip_dynamic_graphs=True runs such graphs without CUDA "
        "graphs instead)"),
    "re-recording": (
        "The graphs are recorded again instead of replayed: a manual torch.cuda.graph capture inside the loop "
        "(capture once, then copy new data into the static inputs: static_x.copy_(x); graph.replay()), or CUDA "
        "graph trees re-recording because a recorded graph's static inputs changed (parameters replaced, "
        "inputs mutated in place) or outputs of the previous iteration are still alive (call "
        "torch.compiler.cudagraph_mark_step_begin() before each iteration)"),
    "not replayed": (
        "CUDA graph trees set the graphs up but do not replay them: a graph replays from its second call with "
        "the same shapes, and Inductor falls back to running it without CUDA graphs for CPU tensors in the "
        "graph, inputs mutated in place, or dynamic shapes it skips"),
}
_GRAPH_FIX_TAIL = ("TORCH_LOGS=perf_hints prints why Inductor skipped CUDA graphs ('skipping cudagraphs due to …'), "
                   "TORCH_LOGS=recompiles why Dynamo compiled a new graph.")


class GraphStep(Evidence, kw_only=True):
    """One steady step of ``cudagraphs_not_replayed``'s evidence: its graph replays, eager launches, new graphs."""

    step: str
    graph_replays: int
    eager_launches: int
    new_graphs: int


class GraphReplayEvidence(Evidence, kw_only=True):
    """``cudagraphs_not_replayed``'s evidence: why (dynamic shapes, re-recording, not replayed), the steps
    without a replay or with a new graph, replays and eager launches per step, the host time of the launches
    in compiled graphs and the exposed graph-call time, what a replay costs, the recompiles behind it, and
    the first 20 steps."""

    cause: str
    graph_trees: bool
    steps_without_replay: int
    steps_with_new_graph: int
    graph_replays_per_step: float
    eager_launches_per_step: float
    eager_launches_in_compiled_graphs_per_step: float
    launch_host_ns_per_step: int
    exposed_graph_call_ns_per_step: int
    graph_calls_per_step: float
    replay_cost_ns: int
    recompiles: int
    recompile_causes: dict[str, int]
    steps: list[GraphStep]


@rank_rule(saving=Saving.TIME, needs=("steps", "trace"))
def cudagraphs_not_replayed(ctx: RankContext) -> list[Finding]:
    """CUDA graphs are set up (CUDA graph trees, stream captures) but the steady steps do not replay them:
    ``mode="reduce-overhead"`` that did not take. The saving is the launch overhead the replays would
    remove: the time inside compiled-graph calls with the device idle (Inductor's wrapper, the kernel
    launchers and launch calls running while nothing runs on the device), less one graph launch per call."""
    if not ctx.is_gpu or len(ctx.steps) < 2:
        return []
    trace = ctx.trace
    use = graph_use(trace, [(s.start_ns, s.start_ns + s.duration_ns) for s in ctx.steps])
    trees = uses_graph_trees(trace)
    n = len(use)
    no_replay = sum(1 for u in use if u.replays == 0 and u.eager > 0)
    new_graphs = sum(1 for u in use if u.setups)
    if not (trees or new_graphs) or 2 * max(no_replay, new_graphs) <= n or not any(u.eager_in_compiled for u in use):
        return []
    recompiles, _ = _steady_compiles(ctx)
    causes = Counter(k.cause for k, _ in recompiles)
    if 2 * len(recompiles) >= n and causes.most_common(1)[0][0] in ("shape", "unknown"):
        cause = "dynamic shapes"
    elif 2 * new_graphs > n:
        cause = "re-recording"
    else:
        cause = "not replayed"
    replay_ns = graph_launch_ns(trace) or _median_launch_ns(use)
    # What the graph calls cost the step: their time with the device idle (the host running Inductor's
    # wrapper, the launchers and the launch calls while nothing runs). A replay stands in for all of it.
    busy = _device_busy(ctx)
    calls = compiled_call_set(trace)
    exposed = iv.subtract(calls, busy) if busy is not None else calls
    starts = np.array([s.start_ns for s in ctx.steps], dtype=np.int64)
    exposed_ns = iv.overlap_per_window(exposed, starts, starts + np.array([s.duration_ns for s in ctx.steps],
                                                                          dtype=np.int64)).tolist()
    saving = sum(max(int(x) - u.region_calls * replay_ns, 0) for x, u in zip(exposed_ns, use)) / n
    replays = sum(u.replays for u in use)
    eager = sum(u.eager for u in use)
    what = (f"a new CUDA graph set up (re-recorded) in {new_graphs} of {n} steps" if new_graphs
            else f"CUDA graphs set up but not replayed in {no_replay} of {n} steps")
    replayed = "never replayed" if not replays else f"replayed {replays / n:.1f} times per step"
    because = {"dynamic shapes": f": dynamic shapes, {len(recompiles)} recompile{'s' * (len(recompiles) != 1)} "
                                 "for new input shapes, one graph per shape",
               "re-recording": ": graphs recorded again instead of replayed", "not replayed": ""}[cause]
    title = (f"CUDA graphs do not replay (reduce-overhead did not take): {what}, {replayed}; "
             f"{eager / n:,.0f} eager kernel launches per step{because}")
    evidence = GraphReplayEvidence(
        cause=cause,
        graph_trees=trees,
        steps_without_replay=no_replay,
        steps_with_new_graph=new_graphs,
        graph_replays_per_step=round(replays / n, 2),
        eager_launches_per_step=round(eager / n, 2),
        eager_launches_in_compiled_graphs_per_step=round(sum(u.eager_in_compiled for u in use) / n, 2),
        launch_host_ns_per_step=int(sum(u.eager_in_compiled_ns for u in use) / n),
        exposed_graph_call_ns_per_step=int(sum(exposed_ns) / n),
        graph_calls_per_step=round(sum(u.region_calls for u in use) / n, 2),
        replay_cost_ns=int(replay_ns),
        recompiles=len(recompiles),
        recompile_causes=dict(causes.most_common()),
        steps=[GraphStep(step=s.name, graph_replays=u.replays, eager_launches=u.eager, new_graphs=u.setups)
               for s, u in list(zip(ctx.steps, use))[:20]],
    )
    fix = _GRAPH_FIXES[cause] + ". " + _GRAPH_FIX_TAIL
    return [ctx.finding("cudagraphs_not_replayed", title, saving, evidence=evidence, fix=fix,
                        formula="per step: the time inside compiled-graph calls (Torch-Compiled Region, "
                        "CompiledFunctionBackward; compile work excluded) with the device idle, less one graph "
                        "launch (median cudaGraphLaunch, else mean launch call) per call: a replay stands in for "
                        "the wrapper, launchers and launch calls (compile time is recompilation's)",
                        kind="estimate", confidence="high" if trees else "medium")]


def _median_launch_ns(use: list[GraphUse]) -> float:
    """A launch call's mean host time over the steps' eager launches in compiled graphs (the replay cost
    when the trace holds no graph launch: one call, like a kernel launch)."""
    calls = sum(u.eager_in_compiled for u in use)
    return sum(u.eager_in_compiled_ns for u in use) / calls if calls else 0.0
