"""What each allocation holds, when torch did not say: inferred from stacks and lifetimes.

Checked in order, for every allocation (its phase is the step's forward / backward / optimizer window it
falls in — from the trace's autograd and ``Optimizer.step#`` spans, else from its stack's frames):
1. torch's own category (``export_memory_timeline`` raw) when present;
2. allocated outside every step before the first one: live to the end → ``parameter``; freed later → ``input``;
3. allocated in the optimizer step: live past it → ``optimizer_state``, else ``temporary``;
4. allocated in backward: live past the backward → ``gradient``; freed in the same op → ``temporary``;
   else ``autograd_detail``;
5. allocated in forward: live past the forward (freed in backward, the optimizer step or the step's tail, or
   kept past the step) → ``activation``; freed in the same op or in forward → ``temporary``;
6. allocated inside a step but in none of its phase windows (after the optimizer step: a kept output, a
   metric): kept past the step → ``activation`` (it derives from the forward, as torch's data flow says),
   freed within the step → ``temporary``;
7. anything else → ``unknown``.
"""

from __future__ import annotations

import numpy as np

from aiprof.memory.model import Action, Category, Frame, MemoryData, NO_CATEGORY, Window

NONE, FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2, 3
_PHASE = {"forward": FORWARD, "backward": BACKWARD, "optimizer": OPTIMIZER}


def _norm(filename: str) -> str:
    return filename.replace("\\", "/")


def stack_phase(frames: tuple[Frame, ...]) -> int:
    """The phase a stack shows: optimizer (``torch/optim``), backward (``torch/autograd``), else forward."""
    paths = [_norm(f.filename) for f in frames]
    if any("/optim/" in p for p in paths) or any(f.name.startswith("Optimizer.step") for f in frames):
        return OPTIMIZER
    if any("/autograd/" in p or p.endswith("/_tensor.py") and f.name == "backward" for p, f in zip(paths, frames)):
        return BACKWARD
    if any(f.name.startswith(("autograd::engine", "torch::autograd")) for f in frames):
        return BACKWARD
    return FORWARD if frames else NONE


def _window_phase(t: np.ndarray, phases: list[Window]) -> tuple[np.ndarray, np.ndarray]:
    """Phase and phase-window end of each time (the innermost: optimizer and backward win over forward)."""
    phase = np.zeros(t.size, np.int8)
    end = np.full(t.size, np.iinfo(np.int64).max, np.int64)
    for kind in ("forward", "backward", "optimizer"):
        for w in (p for p in phases if p.kind == kind):
            inside = (t >= w.start_ns) & (t <= w.end_ns)
            phase[inside] = _PHASE[kind]
            end[inside] = w.end_ns
    return phase, end


def _fill_forward(phase: np.ndarray) -> np.ndarray:
    """Rows without a Python stack (the autograd engine's thread records none) take the phase of the last
    row that had one: after ``loss.backward()`` they are backward until a forward or optimizer frame shows."""
    at = np.flatnonzero(phase != NONE)
    if at.size == phase.size:
        return phase.astype(np.int8)
    out = np.full(phase.size, NONE, np.int8)
    if at.size:  # each known row's phase repeats until the next known row
        out[at[0]:] = np.repeat(phase[at].astype(np.int8), np.diff(np.append(at, phase.size)))
    return out


def step_of(t: np.ndarray, steps: list[Window]) -> np.ndarray:
    """The step index each time falls in (-1 outside every step)."""
    out = np.full(t.size, -1, np.int32)
    for w in steps:
        out[(t >= w.start_ns) & (t <= w.end_ns)] = w.index
    return out


def infer_categories(data: MemoryData, free_of: np.ndarray) -> None:
    """Fill ``data.events.category`` for allocation rows (and copy it to their frees)."""
    ev = data.events
    alloc = np.flatnonzero(ev.action == int(Action.ALLOC))
    if data.torch_categories:
        ev.category[ev.category == NO_CATEGORY] = int(Category.UNKNOWN)
        return
    t = ev.t_ns
    freed_by = free_of[alloc]
    freed = freed_by >= 0
    free_row = np.maximum(freed_by, 0)  # each allocation's free (row 0 where none: masked by ``freed``)
    t_free = np.where(freed, t[free_row], np.iinfo(np.int64).max)
    if data.phases:
        phase_all, phase_end_all = _window_phase(t, data.phases)
    else:  # a snapshot: the stacks say which phase
        by_stack = np.asarray([stack_phase(s) for s in data.stacks] + [NONE], dtype=np.int8)
        phase_all = _fill_forward(by_stack[ev.stack])
        phase_end_all = np.full(t.size, -1, np.int64)
    pa = phase_all[alloc]
    pf = np.where(freed, phase_all[free_row], NONE)
    step_all = ev.step
    sa = step_all[alloc]
    sf = np.where(freed, step_all[free_row], -2)
    op_a = ev.op[alloc]
    same_op = freed & (op_a >= 0) & (op_a == ev.op[free_row])
    first_step = min((w.start_ns for w in data.steps), default=None)
    cat = np.full(alloc.size, int(Category.UNKNOWN), np.int8)
    windowed = bool(data.phases)
    # outside every step, before the first: parameters, inputs
    if first_step is not None:
        before = (t[alloc] < first_step) & (sa < 0)
        cat[before & ~freed] = Category.PARAMETER
        cat[before & freed] = Category.INPUT
    else:
        before = np.zeros(alloc.size, np.bool_)
    rest = ~before
    past_phase = (t_free > phase_end_all[alloc]) if windowed else (pf != pa) | ~freed
    # optimizer
    m = rest & (pa == OPTIMIZER)
    cat[m & past_phase] = Category.OPTIMIZER_STATE
    cat[m & ~past_phase] = Category.TEMPORARY
    # backward
    m = rest & (pa == BACKWARD)
    cat[m & past_phase & ((pf != BACKWARD) | (sf != sa))] = Category.GRADIENT
    cat[m & ~(past_phase & ((pf != BACKWARD) | (sf != sa)))] = Category.AUTOGRAD_DETAIL
    cat[m & same_op] = Category.TEMPORARY
    # forward
    m = rest & (pa == FORWARD)
    if windowed:  # live past the forward window (through backward, to the optimizer or the step's tail, or on)
        kept = m & past_phase
    else:
        kept = m & ((pf == BACKWARD) | (pf == OPTIMIZER) | ~freed)
    cat[kept] = Category.ACTIVATION
    cat[m & ~kept] = Category.TEMPORARY
    if windowed:  # inside a step, outside its forward / backward / optimizer windows: the step's tail
        m = rest & (pa == NONE) & (sa >= 0)
        tail_kept = m & (~freed | (sf != sa))
        cat[tail_kept] = Category.ACTIVATION
        cat[m & ~tail_kept] = Category.TEMPORARY
    # a snapshot's blocks that predate recording and stay live: parameters (or optimizer state, by stack)
    seed = alloc < data.seeded_blocks
    cat[seed & ~freed & (pa != OPTIMIZER) & (ev.stack[alloc] < 0)] = Category.PARAMETER
    if not windowed:  # no step spans: a forward block never freed is persistent (a parameter or a buffer)
        cat[seed & ~freed & (pa == FORWARD)] = Category.PARAMETER
    ev.category[alloc] = cat
    ev.category[freed_by[freed]] = cat[freed]
