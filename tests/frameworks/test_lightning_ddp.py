"""A 2-process DDP fit (gloo, CPU) under torchrun with ``aiprof.lightning.Profiler(out=...)``: two ranks in one
run directory, each with the Trainer's global steps, and the DDP fix in Lightning's words."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

from aiprof import app  # noqa: E402

SCRIPT = Path(__file__).parent / "scripts" / "lightning_ddp.py"
STEPS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_ranks_in_one_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port()}",
         str(SCRIPT), str(run), str(STEPS)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 global_step 8" in done.stdout and "rank 1 global_step 8" in done.stdout
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "complete"
    assert sorted(meta["trace_files"]) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert [(r["rank"], r["steps_seen"]) for r in meta["ranks"]] == [(0, STEPS), (1, STEPS)]
    assert meta["framework"]["settings"]["strategy"] == "DDPStrategy"
    assert meta["framework"]["settings"]["world_size"] == 2
    assert done.stdout.count("aiprof: run directory:") == 1  # rank 0 summarises, once both flushed
    report = app.analyze([run])
    assert [r.rank for r in report.ranks] == [0, 1]
    comm = [f for f in report.findings if f.id == "exposed_communication"]
    if comm:  # gloo's all-reduce is exposed on a loaded 2-core machine; its fix then names DDPStrategy
        assert "Trainer(strategy=DDPStrategy(bucket_cap_mb" in comm[0].fix
