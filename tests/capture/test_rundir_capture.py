"""The run directory end to end, with real ``aiprof run`` subprocesses on the CPU: the data-loader waits the
capture writes are what ``data_loading`` reports; a full disk ends in one line and an honest meta.json;
a claimed ``--out`` is refused; secrets on the command line never reach meta.json or a report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import FAST, ROOT, SCRIPTS, child_env, meta_of, run_aiprof

from aiprof import rundir
from aiprof.pipeline import analyze_and_diagnose
from aiprof.rules.context import load_run_inputs

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("torch_available")]

SLOW = str(SCRIPTS / "slow_loader.py")
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"


def _data_loading(trace: Path) -> dict[str, object]:
    _, findings = analyze_and_diagnose([trace], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    return next(f for f in findings if f["id"] == "data_loading")


def test_data_loading_reads_the_loaders_own_waits(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_aiprof("run", "--out", str(out), "--no-summary", *FAST, "--", "python", SLOW, "--steps", "6",
                     "--token", "tok-value-1", f"wandb.api_key={HF}")
    assert res.returncode == 0, res.stderr
    trace = out / "rank0.pt.trace.json.gz"
    waits = rundir.read_waits(out / "dataloader.rank0.csv")
    assert waits is not None
    per_step = waits.by_step()
    assert load_run_inputs(trace).loader_waits == per_step
    recorded = meta_of(out)["ranks"][0]["recorded_steps"]
    # The steady steps are the recorded ones, or all but a first one dropped as warm-up.
    candidates = {sum(per_step[s] for s in recorded[k:]) // len(recorded[k:]) for k in (0, 1)}

    finding = _data_loading(trace)
    evidence = finding["evidence"]
    assert isinstance(evidence, dict) and evidence["loader_wait_ns_per_step"] in candidates
    assert "loader's own clock" in str(evidence["loader_wait_source"])
    assert finding["est_saving_ns_per_step"] == evidence["loader_wait_ns_per_step"]  # CPU: the wait is the loss
    assert "timed by the loader" in str(finding["saving_formula"])

    # Without the waits file, the rule infers the wait from the trace as before.
    (out / "dataloader.rank0.csv").unlink()
    inferred = _data_loading(trace)
    assert "loader_wait_ns_per_step" not in inferred["evidence"]  # type: ignore[operator]

    # Secrets on the command line: in neither meta.json nor the report.
    text = (out / "meta.json").read_text()
    assert "tok-value-1" not in text and HF not in text and "wandb.api_key=<redacted>" in text
    report = run_aiprof("analyze", str(out), "--format", "json")
    assert report.returncode == 0, report.stderr
    assert "tok-value-1" not in report.stdout and HF not in report.stdout


_FULL_DISK = """
import errno, os, sys
real = os.write
def full(fd, data):  # the disk fills up while the trace is written (every atomic write goes through os.write)
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        target = ""
    if ".pt.trace.json.gz." in target:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(fd, data)
os.write = full
from aiprof.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_full_disk_is_one_line_and_meta_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", _FULL_DISK, "run", "--out", str(out), "--no-summary", *FAST,
           "--", "python", str(SCRIPTS / "tiny_train.py"), "--steps", "5"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env(), cwd=ROOT)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("aiprof: error")]
    assert len(errors) == 1 and "No space left on device" in errors[0], res.stderr
    meta = meta_of(out)
    assert meta["status"] == "incomplete" and "No space left on device" in meta["reason"]
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))
    assert list(out.glob(".pid*.part"))  # what the profiler recorded is kept


def test_a_claimed_out_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / rundir.CLAIM).write_text("123\n")  # another run got here first
    res = run_aiprof("run", "--out", str(out), *FAST, "--", "python", str(SCRIPTS / "tiny_train.py"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "claimed this folder first" in res.stderr and not (out / "meta.json").exists()
