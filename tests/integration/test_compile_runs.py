"""torch.compile seen through, on real CPU runs (torch 2.13 + Inductor's C++ backend): a model fed a new
shape every step recompiles every step (``recompilation`` first, cause ``shape``); padded to one shape it
never recompiles; an ``.item()`` branch in ``forward`` is a ``graph_break`` naming its line; a clean compiled
model has no compile finding after its first step, only the ``cold_start`` note. One subprocess records
the four runs (tests/integration/scripts/compiled_models.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof import app

SCRIPT = Path(__file__).resolve().parent / "scripts" / "compiled_models.py"
COMPILE_FINDINGS = {"recompilation", "graph_break"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("compiled")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor-cache")}
    env.pop("AIPROF_CAPTURE", None)
    env.pop("AIPROF_RUN_DIR", None)
    res = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=1500, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _findings(run: Path) -> list[dict[str, Any]]:
    doc = app.analyze([run])
    return [{"id": f.id, "evidence": f.evidence, "saving": f.est_saving_ns_per_step, "title": f.title}
            for f in doc.findings]


def test_a_new_shape_every_step_is_recompilation_first_with_its_cause(runs: Path) -> None:
    found = _findings(runs / "shape")
    first = found[0]
    assert first["id"] == "recompilation", [f["id"] for f in found]
    assert first["evidence"]["recompiles"] == 4  # steps 1-4 each compile frame 0 again
    assert first["evidence"]["causes"] == {"shape": 4}
    assert "[4, 16] -> [5, 16]" in str(first["evidence"]["recompilations"])
    # Dynamo's own words for the failed guard, from the run directory (aiprof.capture.dynamo). The model is
    # Dynamo's frame 0: aiprof's inference detector stands down before the first forward runs (it is a
    # grad-enabled forward of a model with parameters), so its hooks are no frames of their own (they were
    # frames 0 and 2 when they stayed installed, and the model frame 1).
    assert re.fullmatch(r"0/\d: tensor 'x' size mismatch at index 0\. expected (\d), actual (\d)", first["evidence"]["guard"])
    guards = [r["guard"] for r in first["evidence"]["recompilations"]]
    assert sorted(guards) == [f"0/{c - 1}: tensor 'x' size mismatch at index 0. expected {3 + c}, actual {4 + c}"
                              for c in range(1, 5)], guards
    doc = app.analyze([runs / "shape"])
    rank = doc.ranks[0]
    assert sum(s.breakdown_ns["compile"] for s in rank.steps[1:]) > sum(s.breakdown_ns["compute"] for s in rank.steps[1:])


def test_without_shapes_the_run_directory_names_the_cause_and_the_guard(runs: Path) -> None:
    """No input shapes in the trace: the trace alone cannot tell a shape change from any other failed guard;
    Dynamo's compile records that the capture saved in the run directory can."""
    from aiprof.trace.runset import find_trace_files

    assert (runs / "blind" / "dynamo.rank0.json").is_file()
    assert [p.name for p in find_trace_files(runs / "blind")] == ["rank0.pt.trace.json.gz"]  # not a trace
    first = _findings(runs / "blind")[0]
    assert first["id"] == "recompilation" and first["evidence"]["causes"] == {"shape": 4}
    guards = [r.get("guard", "") for r in first["evidence"]["recompilations"]]
    assert all("size mismatch at index 0" in g for g in guards) and len(guards) == 4, guards
    assert "size mismatch at index 0" in first["title"]
    doc = app.analyze([runs / "blind"])
    sec = doc.ranks[0].compile
    assert sec and sec.events and {e.cause for e in sec.events if e.recompile} == {"shape"}
    assert all("expected" in str(e.guard) for e in sec.events if e.recompile)


def test_the_padded_model_never_recompiles(runs: Path) -> None:
    found = _findings(runs / "padded")
    assert not COMPILE_FINDINGS & {f["id"] for f in found}
    doc = app.analyze([runs / "padded"])
    sec = doc.ranks[0].compile
    assert sec and sec.compiled and sec.events
    # No frame compiles twice (how many frames Dynamo compiles once, 1 to 3 here, depends on what it traced
    # into: every one is a first compile, F/0).
    assert sec.recompiles == 0
    assert {e.cause for e in sec.events} == {"first compile"}


def test_an_item_branch_in_forward_is_a_graph_break_at_its_line(runs: Path) -> None:
    found = {f["id"]: f for f in _findings(runs / "brk")}
    assert "graph_break" in found, list(found)
    boundary = found["graph_break"]["evidence"]["boundaries"][0]
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "BREAK-LINE" in text)
    assert boundary["break_at"] == f"compiled_models.py:{line} (forward)"
    assert "aten::item" in boundary["ops"]
    assert boundary["calls"] >= 4
    # The value .item() returned reaches the resume function as a Python float that Dynamo guards on: it
    # recompiles for every new value (TORCH_LOGS=recompiles: "___stack0 == 13.5"), with the same tensors.
    if "recompilation" in found:
        assert set(found["recompilation"]["evidence"]["causes"]) == {"guard"}


def test_a_clean_compiled_model_has_only_the_cold_start_note(runs: Path) -> None:
    found = {f["id"]: f for f in _findings(runs / "clean")}
    assert not COMPILE_FINDINGS & set(found)
    assert "compilation" in found["cold_start"]["evidence"]["kinds"]
    assert found["cold_start"]["saving"] == 0
