"""Unit tests of the capture pieces that need no torch: schedule, run directory, metadata, commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from aiprof.capture import meta, rundir
from aiprof.capture.options import CaptureOptions, Schedule
from aiprof.capture.runner import parse_command
from aiprof.capture.steps import parse_marker
from aiprof.errors import AiprofError


def test_schedule_recorded_steps_match_torch_semantics() -> None:
    s = Schedule(wait=2, warmup=1, active=2, repeat=2, skip_first=1)
    assert s.recorded_steps(100) == [4, 5, 9, 10]
    assert s.steps_needed() == 6
    assert Schedule(wait=0, warmup=1, active=1, repeat=0).recorded_steps(6) == [1, 3, 5]
    assert "steps 7-10" in Schedule().describe()


def test_schedule_matches_torch_profiler_schedule() -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerAction, schedule

    for s in (Schedule(), Schedule(1, 1, 2, 3, 2), Schedule(0, 2, 1, 0)):
        fn = schedule(wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat, skip_first=s.skip_first)
        torch_recorded = [i for i in range(40) if fn(i) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]
        assert s.recorded_steps(40) == torch_recorded
    del torch


def test_schedule_rejects_nonsense() -> None:
    with pytest.raises(AiprofError):
        Schedule(active=0)
    with pytest.raises(AiprofError):
        Schedule(wait=-1)
    assert Schedule.coerce((1, 1, 2)) == Schedule(1, 1, 2)
    assert Schedule.coerce({"wait": 0, "warmup": 1, "active": 1}).wait == 0


def test_options_roundtrip_json() -> None:
    o = CaptureOptions(schedule=Schedule(1, 2, 3, 4), with_stack=True, step_marker="m:f")
    assert CaptureOptions.from_json(o.to_json()) == o


def test_env_allow_list_only() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "4", "HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    assert meta.allowed_env(env) == {"CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "4"}


def test_command_redaction() -> None:
    argv = ["python", "t.py", "--hf-token", "abc", "--api-key=xyz", "--lr", "3"]
    assert meta.redact_command(argv) == ["python", "t.py", "--hf-token", "<redacted>", "--api-key=<redacted>", "--lr", "3"]


def test_create_new_never_overwrites(tmp_path: Path) -> None:
    explicit = tmp_path / "run"
    assert rundir.create_new(explicit, explicit=True) == explicit
    (explicit / "meta.json").write_text("{}")
    with pytest.raises(rundir.RunDirError, match="never overwrites"):
        rundir.create_new(explicit, explicit=True)
    default = rundir.default_run_dir("train.py", now=0, root=tmp_path)
    first = rundir.create_new(default, explicit=False)
    (first / "x").write_text("")
    second = rundir.create_new(default, explicit=False)
    assert first != second and second.name.endswith("-2")


def test_unwritable_out_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(rundir.RunDirError, match="cannot create"):
        rundir.create_new(blocker / "run", explicit=True)


def test_update_meta_merges(tmp_path: Path) -> None:
    rundir.update_meta(tmp_path, lambda m: m.update(a=1))
    rundir.update_meta(tmp_path, lambda m: m.update(b=2))
    assert rundir.read_meta(tmp_path) == {"a": 1, "b": 2}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_parse_command_forms(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    bare = parse_command([str(script), "--lr", "1"])
    assert bare.argv[0] == sys.executable and bare.script == script and bare.label == "train"
    explicit = parse_command([sys.executable, "-u", "-X", "dev", str(script)])
    assert explicit.script == script
    module = parse_command([sys.executable, "-m", "pkg.train", "--x"])
    assert module.module == "pkg.train" and module.script is None
    other = parse_command(["torchrun", "--nproc-per-node", "2", str(script)])
    assert other.python is None and other.label == "torchrun"
    with pytest.raises(AiprofError):
        parse_command([])


def test_parse_marker() -> None:
    assert parse_marker("pkg.mod:Class.method") == ("pkg.mod", "Class.method")
    assert parse_marker("Net") == (None, "Net")
    with pytest.raises(AiprofError):
        parse_marker("not a name")
    with pytest.raises(AiprofError):
        parse_marker("mod:")


def test_import_aiprof_imports_no_torch() -> None:
    import subprocess

    code = "import sys, aiprof; aiprof.step; print(sorted(m for m in ('torch','numpy','msgspec') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ})
    assert out.stdout.strip() == "[]"


def test_profiler_start_skips_inductor_import_but_real_imports_still_work() -> None:
    """The saving (no torch._inductor import inside the profiler) and its guard (an import of
    inductor inside the guarded call still sees torch as usual). Fresh process: inductor not loaded."""
    import subprocess

    pytest.importorskip("torch")
    code = (
        "import sys, torch\n"
        "from aiprof.capture.recorder import _no_idle_inductor_import\n"
        "from torch.profiler import profile\n"
        "p = profile()\n"
        "with _no_idle_inductor_import():\n"
        "    p.start()\n"
        "assert 'torch._inductor' not in sys.modules, 'profiler start imported inductor'\n"
        "p.stop()\n"
        "with _no_idle_inductor_import():\n"
        "    import torch._dynamo\n"
        "assert '_inductor' in torch._lazy_modules and 'torch._inductor' in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
