"""``aiprof analyze`` as a user runs it: a real process, real traces, every output format."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kineto_builder import TraceBuilder

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
RESNET0 = SHARED / "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces not present")


def aiprof(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def schema() -> dict[str, Any]:
    text = resources.files("aiprof").joinpath("data/report.schema.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


@needs_shared
def test_terminal_summary_fits_80_columns_and_names_the_top_cause() -> None:
    out = aiprof("analyze", RESNET0)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "GPU utilization 55.5%" in out.stdout
    assert "data_loading" in out.stdout
    assert "\x1b[" not in out.stdout  # plain text when not a TTY


@needs_shared
@pytest.mark.parametrize(
    "trace",
    [
        "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        "param/dlrm_8rank",
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        "tracelens/mi300/resnet_act_checkpoint.json.gz",
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    ],
)
def test_json_report_follows_the_schema(tmp_path: Path, trace: str) -> None:
    out_file = tmp_path / "report.json"
    run = aiprof("analyze", SHARED / trace, "-o", out_file)
    assert run.returncode == 0, run.stderr
    doc = json.loads(out_file.read_text())
    jsonschema.validate(doc, schema())
    for rank in doc["ranks"]:
        for step in rank["steps"]:
            assert sum(step["breakdown_ns"].values()) == step["duration_ns"]
            assert sum(step["idle_causes_ns"].values()) == step["breakdown_ns"]["idle"]


@needs_shared
def test_a_folder_of_ranks_is_read_as_ranks(tmp_path: Path) -> None:
    out_file = tmp_path / "r.json"
    assert aiprof("analyze", SHARED / "param/dlrm_8rank", "-o", out_file).returncode == 0
    doc = json.loads(out_file.read_text())
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert {r["rank_source"] for r in doc["ranks"]} == {"distributedInfo"}
    assert [r["primary_device"] for r in doc["ranks"]] == [f"gpu:{i}" for i in range(8)]
    one = tmp_path / "one.json"
    assert aiprof("analyze", SHARED / "param/dlrm_8rank", "--rank", "3", "-o", one).returncode == 0
    assert [r["rank"] for r in json.loads(one.read_text())["ranks"]] == [3]


@needs_shared
def test_two_captures_of_one_worker_are_its_cycles_not_two_ranks(tmp_path: Path) -> None:
    """Same host and pid, no distributedInfo, one after the other in time: profiler cycles of one process
    (aiprof.trace.cycles), one rank with the steps of both, never two ranks."""
    out_file = tmp_path / "r.json"
    run = aiprof("analyze", RESNET0.parent, "-o", out_file)
    assert run.returncode == 0
    assert "profiler cycles of one process" in run.stderr and "cycle 2" in run.stderr
    ranks = json.loads(out_file.read_text())["ranks"]
    assert len(ranks) == 1 and len(ranks[0]["steps"]) == 12


@needs_shared
@pytest.mark.parametrize("suffix,marker", [(".md", "| rank |"), (".html", 'id="aiprof-data"')])
def test_markdown_and_html_follow_the_extension(tmp_path: Path, suffix: str, marker: str) -> None:
    out_file = tmp_path / f"report{suffix}"
    assert aiprof("analyze", RESNET0, "-o", out_file).returncode == 0
    assert marker in out_file.read_text()


def test_names_from_a_trace_are_escaped_in_html_and_markdown(tmp_path: Path) -> None:
    evil = "<img src=x onerror=alert(1)>"
    b = TraceBuilder()
    b.step(0, ts=0, dur=50)
    op = b.cpu_op(evil, ts=1, dur=10)
    b.launch(op, kernel=evil, kernel_ts=5, kernel_dur=10)
    trace = b.write(tmp_path / f"{'x'}.json")
    for suffix in (".html", ".md"):
        out_file = tmp_path / f"r{suffix}"
        assert aiprof("analyze", trace, "-o", out_file).returncode == 0
        assert evil not in out_file.read_text()
    html = (tmp_path / "r.html").read_text()
    # The inert JSON data blocks (report, timeline) and the timeline viewer, which the CSP pins by hash.
    assert html.count('<script type="application/json"') == 2 and html.count("<script>") == 1
    assert html.count("<script") == 3 and "script-src 'sha256-" in html
    assert "http://" not in html and "https://" not in html


@pytest.mark.parametrize(
    "content,expected",
    [
        (b"", "empty"),
        (b"hello", "not a Kineto trace"),
        (b'{"foo": 1}', "not a Kineto"),
        (b"[1, 2", "not valid JSON"),
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(tmp_path: Path, content: bytes, expected: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    run = aiprof("analyze", bad)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], run.stderr


def test_missing_path_and_bad_output_extension(tmp_path: Path) -> None:
    run = aiprof("analyze", tmp_path / "missing.json.gz")
    assert run.returncode == 2 and "no such file" in run.stderr and "Traceback" not in run.stderr
    b = TraceBuilder()
    b.kernel("k", ts=0, dur=1)
    trace = b.write(tmp_path / "t.json")
    run = aiprof("analyze", trace, "-o", tmp_path / "report.xyz")
    assert run.returncode == 2 and "format" in run.stderr


def test_truncated_trace_is_salvaged_with_a_warning(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, ts=0, dur=100)
    for i in range(20):
        op = b.cpu_op("aten::mm", ts=1 + i * 4, dur=3)
        b.launch(op, kernel_ts=2 + i * 4, kernel_dur=2)
    data = b.dumps().encode()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(data[: int(len(data) * 0.7)]))
    run = aiprof("analyze", cut, "-o", tmp_path / "r.json")
    assert run.returncode == 0, run.stderr
    assert "cut off" in run.stderr and "salvaged" in run.stderr


@needs_shared
def test_rule_thresholds_are_options(tmp_path: Path) -> None:
    out_file = tmp_path / "r.json"
    assert aiprof("analyze", RESNET0, "-o", out_file).returncode == 0
    assert "data_loading" in [f["id"] for f in json.loads(out_file.read_text())["findings"]]
    raised = aiprof("analyze", RESNET0, "--rule-option", "data_loading_share=0.5", "-o", out_file)
    assert raised.returncode == 0
    assert "data_loading" not in [f["id"] for f in json.loads(out_file.read_text())["findings"]]
    for bad in ("nope=1", "min_saving_ns=abc", "data_loading_share"):
        run = aiprof("analyze", RESNET0, "--rule-option", bad)
        assert run.returncode == 2 and "Traceback" not in run.stderr and "--rule-option" in run.stderr


def test_digits_that_int_rejects_are_text_not_a_crash(tmp_path: Path) -> None:
    """``"²".isdigit()`` is True but ``int("²")`` fails: a pid, a step number or a collective's count
    written that way is text (a string pid, an unnumbered step), never a traceback."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#²", "pid": "²", "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": "²", "tid": 1, "ts": 10, "dur": 50,
         "args": {"Collective name": "allreduce", "In msg nelems": "²", "Group size": "²"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": "²", "ts": 60, "dur": 20},
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    done = aiprof("analyze", path, "-o", tmp_path / "out.json")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["ranks"][0]["steps"]
    from aiprof.analysis.comm import _int
    from aiprof.roofline.dtypes import from_scalar_type_code

    assert _int("²") is None and _int("12") == 12
    assert from_scalar_type_code("²") is None
