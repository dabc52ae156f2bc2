"""torchtitan's and torchtune's profiling output folders, analysed as a run directly (``aiprof analyze <folder>``).

The layouts, as their trace handlers write them (torchtitan ``tools/profiling.py``; torchtune
``training/_profiler.py``)::

    torchtitan: <dump_folder>/profile_traces/iteration_<N>/rank<R>_trace.json       (export_chrome_trace)
                <dump_folder>/memory_snapshot/iteration_<N>[_exit]/rank<R>_memory_snapshot.pickle
    torchtune:  <output_dir>/iteration_<N>/rank<R>.<ns>.pt.trace.json.gz           (tensorboard_trace_handler)
                <output_dir>/iteration_<N>/rank<R>_key_averages.txt, rank0_memory-timeline.html, ...

One ``iteration_<N>`` folder per profiling cycle, one trace per rank in each: the cycles of a rank are one
rank (same process, one after the other), the ranks stay ranks, and the files beside the traces are not
read as traces. The frames name the framework."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiprof import app
from aiprof.rules.framework import trace_framework
from aiprof.trace import RunSet, load
from kineto_builder import TraceBuilder

BASE_NS = 1_700_000_000_000_000_000
STEP_US = 10_000


def _cycle(path: Path, rank: int, iteration: int, frame: str) -> None:
    """One rank's trace of one profiling cycle: the 2 active steps ending at ``iteration``, 100 ms per step
    of wall clock from the job's start (all ranks in step), the loader waiting 4 ms of each 10 ms step."""
    b = TraceBuilder(pid=1000 + rank, tid=1000 + rank, base_time_ns=BASE_NS + iteration * 100_000_000)
    b.distributed(rank=rank, world_size=2)
    for k, number in enumerate((iteration - 1, iteration)):
        t0 = k * STEP_US
        b.step(number, ts=t0, dur=STEP_US)
        b.python(frame, ts=t0 + 1, dur=STEP_US - 2)
        b.dataloader(ts=t0 + 2, dur=4000)
        op = b.cpu_op("aten::mm", ts=t0 + 4010, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 4040, kernel_dur=5800, grid=(264, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    b.write(path)


def _torchtitan(root: Path) -> Path:
    traces = root / "outputs" / "profile_traces"
    for iteration in (10, 20):
        for rank in (0, 1):
            _cycle(traces / f"iteration_{iteration}" / f"rank{rank}_trace.json", rank, iteration,
                   "/opt/torchtitan/torchtitan/train.py(612): train_step")
    snapshots = root / "outputs" / "memory_snapshot" / "iteration_10"
    snapshots.mkdir(parents=True)
    (snapshots / "rank0_memory_snapshot.pickle").write_bytes(b"\x80\x04N.")  # beside the traces: not a trace
    return root / "outputs"


def _torchtune(root: Path) -> Path:
    out = root / "profiling_outputs"
    for iteration in (5, 10):
        for rank in (0, 1):
            folder = out / f"iteration_{iteration}"
            _cycle(folder / f"rank{rank}.{1_700_000_000_000 + iteration}.pt.trace.json.gz", rank, iteration,
                   "/usr/lib/python3/site-packages/torchtune/training/_distributed.py(88): step")
            (folder / f"rank{rank}_key_averages.txt").write_text("--- table ---\n")
        (out / f"iteration_{iteration}" / "rank0_memory-timeline.html").write_text("<html></html>")
    return out


@pytest.mark.parametrize(("layout", "framework"), [(_torchtitan, "torchtitan"), (_torchtune, "torchtune")])
def test_a_profiling_folder_is_a_run(tmp_path: Path, layout: object, framework: str) -> None:
    assert callable(layout)
    folder = layout(tmp_path)
    report = app.analyze([folder])
    assert [r.rank for r in report.ranks] == [0, 1]
    for rank in report.ranks:
        # both cycles of the rank, in order, with the framework's own step numbers
        assert [s.number for s in rank.steps] == ([9, 10, 19, 20] if framework == "torchtitan" else [4, 5, 9, 10])
    assert report.findings[0].id == "data_loading"
    loaded = load(folder)
    assert isinstance(loaded, RunSet) and len(loaded.traces) == 2
    assert all(trace_framework(t) == framework for t in loaded.traces)
