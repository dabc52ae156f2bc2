"""A 2-process DDP job on the CPU (gloo) under torchrun, launched by ``aiprof run``: one trace per rank."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from capture_helpers import EXAMPLE, FAST, meta_of, run_aiprof, step_names

pytestmark = pytest.mark.usefixtures("torch_available")


def test_ddp_gloo_two_ranks(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists() and shutil.which("torchrun") is None:
        pytest.skip("torchrun not found next to this Python")
    out = tmp_path / "run"
    res = run_aiprof(
        "run", "--out", str(out), *FAST, "--",
        str(torchrun), "--standalone", "--nproc-per-node", "2", str(EXAMPLE), "--steps", "5",
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    meta = meta_of(out)
    assert meta["status"] == "complete"
    assert sorted(meta["trace_files"]) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert sorted(r["rank"] for r in meta["ranks"]) == [0, 1]
    assert meta["env"].get("WORLD_SIZE") is None  # the parent's env: torchrun sets it only in the workers
    for rank in (0, 1):
        assert step_names(out / f"rank{rank}.pt.trace.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]
        assert (out / f"dataloader.rank{rank}.csv").exists()
    import aiprof

    runset = aiprof.load(out)
    ranks = sorted(t.rank for t in runset)  # type: ignore[union-attr]
    assert ranks == [0, 1]
    assert all(t.distributed.get("world_size") == 2 for t in runset)  # type: ignore[union-attr]
