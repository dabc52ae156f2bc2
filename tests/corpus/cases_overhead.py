"""The profiler's own work is overhead, never the user's: a step in which torch.profiler stops (its
``__exit__``; on a machine with CUDA and a CPU model, a long ``cudaDeviceSynchronize`` inside
``torch/profiler/profiler.py`` that is CUDA initialisation) is not "Python outside any op" at the user's line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import ANY, Case, case
from kineto_builder import TraceBuilder


def _profiler_stop(tmp: Path) -> Path:
    """5 CPU steps of 10 ms of matmuls under a user frame; the last one ends in torch.profiler's __exit__
    (600 ms, a 590 ms cudaDeviceSynchronize in it)."""
    b = TraceBuilder()
    t = 0.0
    for s in range(5):
        last = s == 4
        length = 10_000 + (600_000 if last else 0)
        b.step(s, ts=t, dur=length)
        user = b.python("train.py(31): <module>", ts=t + 1, dur=length - 2)
        for j in range(10):
            b.cpu_op("aten::mm", ts=t + 5 + j * 999, dur=990, shapes=[[256, 256], [256, 256]], dtypes=["float", "float"])
        if last:
            frame = b.python("torch/profiler/profiler.py(747): __exit__", ts=t + 10_000, dur=599_990, parent=user)
            stop = b.python("torch/profiler/profiler.py(790): stop", ts=t + 10_005, dur=599_980, parent=frame)
            b.runtime("cudaDeviceSynchronize", ts=t + 10_010, dur=590_000)
            del stop
        t += length + 10
    return b.write(tmp / "profiler_stop.json")


def _check(run: Any, findings: list[dict[str, Any]]) -> None:
    for f in findings:
        text = f["title"] + f["fix"] + str(f["evidence"].get("longest_gaps", ""))
        assert "train.py(31)" not in text and "profiler.py" not in text, (f["id"], text[:300])


CASES: list[Case] = [
    case("profiler_exit_is_not_user_python", _profiler_stop, ANY,
         "the last step's 600 ms are torch.profiler stopping (a CUDA sync in its __exit__): the profiler's "
         "overhead, left out of the steady state, never host_gaps at the user's line nor a sync",
         absent={"host_gaps", "sync", "step_variance", "host_stall"}, check=_check),
]
