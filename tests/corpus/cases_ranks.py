"""Multi-rank classes: one rank doing extra work is ONE finding (the culprit on that rank, the others' wait
in the collective as its evidence), not its Python + the victims' wait + a straggler; the straggler advice
on a CPU run names no GPU tool. A synthetic gloo pair and a real 2-process gloo DDP run
(``scripts/ddp_straggler.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import Case, case, run_script
from kineto_builder import TraceBuilder

STEP_US = 30_000.0


def _gloo_rank(folder: Path, rank: int, extra_us: float) -> Path:
    """A CPU gloo rank: 12 ms of ops, ``extra_us`` of Python outside any op, then the gradient all-reduce
    (2 ms of transfer), which on the rank without extra work starts with ~8 ms of waiting for the other."""
    b = TraceBuilder()
    b.distributed(rank=rank, world_size=2, backend="gloo")
    wait = 8_000.0 - extra_us
    for i in range(5):
        t0 = i * STEP_US
        b.step(i, ts=t0, dur=STEP_US - 10)
        for j in range(12):
            b.cpu_op("aten::mm", ts=t0 + 10 + j * 1_000, dur=990)
        t = t0 + 12_010
        if extra_us:
            frame = b.python("train.py(57): <module>", ts=t, dur=extra_us)
            b.python("train.py(31): log_stats", ts=t + 1, dur=extra_us - 2, parent=frame)
        t += extra_us
        b.cpu_op("c10d::allreduce_", ts=t, dur=30)
        b.annotation("gloo:all_reduce", ts=t + 30, dur=wait + 2_000, tid=77)
        b.cpu_op("aten::add_", ts=t + wait + 2_100, dur=STEP_US - 12_010 - 8_000 - 2_300)
    return b.write(folder / f"rank{rank}.json")


def _gloo_pair(tmp: Path) -> Path:
    folder = tmp / "gloo_pair"
    folder.mkdir()
    _gloo_rank(folder, 0, 0.0)
    _gloo_rank(folder, 1, 8_000.0)
    return folder


def _check_one_culprit(run: Any, findings: list[dict[str, Any]]) -> None:
    f = findings[0]
    assert f["ranks"] == [1] and f["title"].startswith("Rank 1:"), (f["ranks"], f["title"])
    straggler = f["evidence"]["straggler"]
    assert straggler["straggler_rank"] == 1 and straggler["waiting_ranks"] == [0]
    assert f["evidence"]["worst_rank"] == 1
    for g in findings:
        assert "nvidia-smi" not in g["fix"] and "GPU" not in g["fix"], (g["id"], g["fix"])
    # one problem, claimed once: the time findings together fit in a step
    steps = [s.duration_ns for r in run.ranks for s in r.primary.steps]
    total = sum(g["est_saving_ns_per_step"] for g in findings if g["severity"] != "info")
    assert total <= max(steps), (total, max(steps), [(g["id"], g["est_saving_ns_per_step"]) for g in findings])


def _real(tmp: Path) -> Path:
    folder = run_script("ddp_straggler.py", tmp / "run")
    (folder / "store").unlink(missing_ok=True)
    return folder


CASES: list[Case] = [
    case("gloo_rank_with_extra_python_is_one_finding", _gloo_pair, "host_gaps",
         "rank 1 runs 8 ms of Python per step and rank 0 waits 8 ms for it in the all-reduce: one finding on "
         "rank 1 (its Python), with rank 0's wait as evidence; not a straggler and a wait besides",
         absent={"straggler"}, check=_check_one_culprit),
    case("real_ddp_gloo_straggler", _real, "host_gaps",
         "a real 2-process gloo DDP run, rank 1 with a planted Python loop per step: the loop on rank 1 is "
         "the one finding, rank 0's wait in the all-reduce its evidence",
         absent={"straggler"}, check=_check_one_culprit, real=True),
]
