"""``.item()`` where there is none to fix: the optimizer's own step counters (AdamW's single-tensor path reads
each parameter's ``step`` with ``.item()`` on a CPU run, no device involved), and one loop the scheduler
pre-empted; the real element-wise loop still is one. A real CPU AdamW run (``scripts/adamw_train.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import ANY, Case, case, run_script
from kineto_builder import TraceBuilder


def _steps(tmp: Path, name: str, body: Any) -> Path:
    b = TraceBuilder()
    t = 0.0
    for s in range(5):
        length = body(b, t, s)
        b.step(s, ts=t, dur=length)
        t += length + 10
    return b.write(tmp / name)


def _matmul(b: TraceBuilder, t0: float) -> float:
    b.cpu_op("aten::mm", ts=t0 + 5, dur=8_000, shapes=[[512, 512], [512, 512]], dtypes=["float", "float"])
    return t0 + 8_010


def _adamw_body(b: TraceBuilder, t0: float, s: int) -> float:
    """An 8 ms matmul, then AdamW.step over 200 parameters: per parameter a step counter .item() (3 µs)
    and the update (4 µs of ops), 12 µs apart."""
    t = _matmul(b, t0)
    b.annotation("Optimizer.step#AdamW.step", ts=t, dur=200 * 12 + 5)
    for i in range(200):
        b.cpu_op("aten::item", ts=t + 1 + i * 12, dur=3)
        b.cpu_op("aten::_local_scalar_dense", ts=t + 1.5 + i * 12, dur=2)
        b.cpu_op("aten::add_", ts=t + 6 + i * 12, dur=4)
    return t - t0 + 200 * 12 + 20


def _preempted_body(b: TraceBuilder, t0: float, s: int) -> float:
    """An 8 ms matmul and a loop of 6 .item() 10 µs apart; in one step the loop loses the CPU for 9 ms."""
    t = _matmul(b, t0)
    for i in range(6):
        pause = 9_000 if s == 2 and i == 3 else 0
        t += pause
        b.cpu_op("aten::item", ts=t, dur=5)
        b.cpu_op("aten::_local_scalar_dense", ts=t + 1, dur=3)
        t += 10
    return t - t0 + 10


def _check_no_sync(run: Any, findings: list[dict[str, Any]]) -> None:
    assert not [f for f in findings if "item()" in f["title"]], [f["title"] for f in findings]


def _real(tmp: Path) -> Path:
    return run_script("adamw_train.py", tmp / "run") / "trace.json"


CASES: list[Case] = [
    case("cpu_adamw_step_counters_are_not_sync", lambda tmp: _steps(tmp, "adamw.json", _adamw_body), ANY,
         "AdamW's own .item() of 200 step counters inside Optimizer.step on a CPU run: no device, no script "
         "loop to vectorise (the per-parameter optimizer is its own finding), never a sync finding",
         absent={"sync"}, check=_check_no_sync),
    case("cpu_one_preempted_item_loop_is_not_sync", lambda tmp: _steps(tmp, "preempted.json", _preempted_body), ANY,
         "6 .item() calls per step (60 µs) whose loop once lost the CPU for 9 ms: the median step's loop is "
         "under 1 % of the step, below the threshold; the pause is not the loop's cost", absent={"sync"}),
    case("real_cpu_adamw_no_item_sync", _real, ANY,
         "a real CPU AdamW loop with no .item() of its own: no sync finding", absent={"sync"},
         check=_check_no_sync, real=True),
]
