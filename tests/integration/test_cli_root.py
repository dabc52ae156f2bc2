"""The CLI's composition root and its checks on what a user passes: every verb goes through ``aiprof.app``,
every number is range-checked (one line, exit 2), a comparison without a baseline is refused, and the
errors a big or deep input causes are one line, not a traceback."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from kineto_builder import TraceBuilder

from aiprof import app
from aiprof.cli import main
from aiprof.errors import AiprofError

SRC = Path(__file__).resolve().parents[2] / "src" / "aiprof"


def tiny_trace(path: Path, *, op: str = "aten::mm", steps: int = 3, kernel_us: float = 300) -> Path:
    """A GPU trace of ``steps`` steps, one GEMM with shapes each (the roofline has a row)."""
    b = TraceBuilder()
    for i in range(steps):
        t = i * 1000
        b.step(i, ts=t, dur=900)
        cpu = b.cpu_op(op, ts=t + 10, dur=100, shapes=[[256, 256], [256, 256]], dtypes=["float", "float"])
        b.launch(cpu, kernel="sgemm_128x64_nn", kernel_ts=t + 150, kernel_dur=kernel_us)
    return b.write(path)


def one_line_error(capsys: pytest.CaptureFixture[str], code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("aiprof: error: ") and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


# ---------------------------------------------------------------------------------------------------
# One composition root
# ---------------------------------------------------------------------------------------------------
PIPELINE_MODULES = ("aiprof.pipeline", "aiprof.analysis", "aiprof.report", "aiprof.trace", "aiprof.rules.registry", "aiprof.memory")


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports at run time (names imported for type annotations only are types,
    not a way around the composition root)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("module", sorted(p.name for p in (SRC / "cli").glob("*.py")))
def test_no_verb_runs_the_pipeline_itself(module: str) -> None:
    """Analysis, diagnosis, report building and rendering are reached through ``aiprof.app`` only."""
    direct = {name for name in _imports(SRC / "cli" / module) if name.startswith(PIPELINE_MODULES)}
    assert not direct, f"cli/{module} imports {sorted(direct)}: call aiprof.app instead"


def test_every_analysing_verb_calls_app_analyze(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    trace = tiny_trace(tmp_path / "t.json")
    calls: list[list[str]] = []

    def recorded(paths: Any, options: Any = None) -> Any:
        calls.append([str(p) for p in paths])
        raise AiprofError("stop here")

    monkeypatch.setattr(app, "analyze", recorded)
    for argv in (["analyze", str(trace)], ["compare", str(trace), str(trace)],
                 ["export", str(trace), "-o", str(tmp_path / "m.json")]):
        assert main(argv) == 2
        assert "stop here" in capsys.readouterr().err
    assert calls == [[str(trace)]] * 3


def test_roofline_goes_through_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    def recorded(path: Any, options: Any = None) -> Any:
        raise AiprofError(f"roofline of {path} rank {options.rank}")

    monkeypatch.setattr(app, "roofline_measured", recorded)
    assert main(["roofline", str(tmp_path / "t.json"), "--rank", "3"]) == 2
    assert "rank 3" in capsys.readouterr().err


def test_help_stays_light() -> None:
    """`aiprof --help` imports no verb's machinery: not the composition root, not NumPy."""
    code = ("import sys; from aiprof.cli import main; main(['--help']); "
            "print('aiprof.app' in sys.modules, 'numpy' in sys.modules, 'aiprof.cli.analyze' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "False False True"  # analyze's module builds its parser; nothing more


def test_analyze_through_app_matches_the_cli(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "t.json")
    report = app.analyze([trace])
    out = tmp_path / "r.json"
    assert main(["analyze", str(trace), "-o", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["summary"] == msgspec.to_builtins(report.summary)
    assert [f["id"] for f in written["findings"]] == [f.id for f in report.findings]


# ---------------------------------------------------------------------------------------------------
# Every number a user passes
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [
    (["compare", "a", "b", "--fail-if-slower", "nan"], "--fail-if-slower"),
    (["compare", "a", "b", "--fail-if-slower", "inf"], "--fail-if-slower"),
    (["compare", "a", "b", "--fail-if-slower", "-1"], "--fail-if-slower"),
    (["compare", "a", "b", "--fail-if-slower", "5%"], "--fail-if-slower"),
    (["compare", "a", "b", "--width", "100000"], "--width"),
    (["analyze", "a", "--width", "5"], "--width"),
    (["analyze", "a", "--width", "wide"], "--width"),
    (["analyze", "a", "--jobs", "0"], "--jobs"),
    (["analyze", "a", "--rank", "-1"], "--rank"),
    (["roofline", "a", "--top", "0"], "--top"),
    (["roofline", "a", "--rank", "-2"], "--rank"),
    (["roofline", "a", "--width", "0"], "--width"),
    (["demo", "--steps", "1"], "at least 3"),
    (["demo", "--steps", "99999999"], "--steps"),
    (["analyze", "a", "--no-such-flag"], "--no-such-flag"),
])
def test_a_bad_number_is_one_line_and_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(capsys, main(argv), needle)


@pytest.mark.parametrize("option", [
    "data_loading_share=nan", "data_loading_share=inf", "data_loading_share=-0.1", "data_loading_share=1.5",
    "min_saving_ns=1e400", "min_saving_ns=-5", "min_saving_ns=2.5", "occupancy_lt_pct=101", "eta=0",
    "stall_factor=infinity", "high_share=", "roof_fraction_compute=1.01",
])
def test_rule_options_are_finite_and_in_range(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(capsys, main(["analyze", str(tmp_path / "missing.json"), "--rule-option", option]), option)


def test_rule_options_in_range_are_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tiny_trace(tmp_path / "t.json")
    for option in ("data_loading_share=0", "data_loading_share=1", "min_saving_ns=1e3", "occupancy_lt_pct=100", "eta=1"):
        assert main(["analyze", str(trace), "--rule-option", option, "-o", str(tmp_path / "r.json")]) == 0, option
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------------
# The CI gate
# ---------------------------------------------------------------------------------------------------
def _report(tmp_path: Path, name: str, kernel_us: float, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / f"{name}.json"
    assert main(["analyze", str(tiny_trace(tmp_path / f"{name}-trace.json", kernel_us=kernel_us)), "-o", str(out)]) == 0
    capsys.readouterr()
    return out


def _edit(path: Path, change: Any) -> Path:
    doc = json.loads(path.read_text())
    change(doc)
    edited = path.with_name("edited-" + path.name)
    edited.write_text(json.dumps(doc))
    return edited


def test_the_gate_trips_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fast = _report(tmp_path, "fast", 300, capsys)
    slow = _report(tmp_path, "slow", 850, capsys)
    assert main(["compare", str(fast), str(slow), "--fail-if-slower", "5"]) == 1
    assert "slower than BEFORE's (limit 5%)" in capsys.readouterr().err
    assert main(["compare", str(slow), str(fast), "--fail-if-slower", "0"]) == 0
    capsys.readouterr()


def _zero_median(doc: dict[str, Any]) -> None:
    doc["summary"]["median_step_ns"] = 0
    for rank in doc["ranks"]:
        rank["totals"]["median_step_ns"] = 0


@pytest.mark.parametrize("gate", [[], ["--fail-if-slower", "5"]])
def test_a_before_median_of_0_is_no_baseline(tmp_path: Path, gate: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    good = _report(tmp_path, "good", 300, capsys)
    zero = _edit(good, _zero_median)
    err = one_line_error(capsys, main(["compare", str(zero), str(good), *gate]), "no baseline", "BEFORE")
    assert "+0.0" not in err
    one_line_error(capsys, main(["compare", str(good), str(zero), *gate]), "AFTER")


def test_the_gate_fails_a_change_it_cannot_compute() -> None:
    def change(pct: float) -> Any:
        return SimpleNamespace(step_time_ns=SimpleNamespace(delta_pct=pct))

    assert app.slower_than(change(float("nan")), 5) is not None
    assert app.slower_than(change(4.9), 5) is None
    assert app.slower_than(change(5.1), 5) is not None


def _nan_utilization(doc: dict[str, Any]) -> None:
    doc["summary"]["gpu_utilization"] = float("nan")


def _no_totals(doc: dict[str, Any]) -> None:
    del doc["ranks"][0]["totals"]


def _text_median(doc: dict[str, Any]) -> None:
    doc["ranks"][0]["totals"]["median_step_ns"] = "fast"


def _findings_text(doc: dict[str, Any]) -> None:
    doc["findings"] = "none"


def _nan_deep(doc: dict[str, Any]) -> None:
    doc["ranks"][0]["steps"][0]["duration_ns"] = float("nan")


def _ops_text(doc: dict[str, Any]) -> None:
    doc["ranks"][0]["ops"] = {"groups": [1]}


@pytest.mark.parametrize("change", [_nan_utilization, _no_totals, _text_median, _findings_text, _nan_deep, _ops_text])
def test_compare_checks_a_json_report(tmp_path: Path, change: Any, capsys: pytest.CaptureFixture[str]) -> None:
    good = _report(tmp_path, "good", 300, capsys)
    bad = _edit(good, change)
    err = one_line_error(capsys, main(["compare", str(bad), str(good)]), str(bad))
    assert any(why in err for why in ("not a valid aiprof report", "not an aiprof report", "not readable JSON")), err


# ---------------------------------------------------------------------------------------------------
# Big and deep inputs
# ---------------------------------------------------------------------------------------------------
def test_memory_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import aiprof.pipeline

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(aiprof.pipeline, "analyze_and_diagnose", exhausted)
    trace = tiny_trace(tmp_path / "big.json")
    for argv in (["analyze", str(trace)], ["compare", str(trace), str(trace)],
                 ["export", str(trace), "-o", str(tmp_path / "m.json")]):
        one_line_error(capsys, main(argv), "too large for available memory: ", str(trace), "--rank")


def test_memory_error_in_a_worker_process_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two ranks are analysed in two worker processes; one runs out of memory (its hook raises)."""
    code = f"""
import sys
import aiprof.pipeline as p
def hook(trace, analysis):
    raise MemoryError
p.diagnose_hook = hook
from aiprof.cli import main
sys.exit(main(["analyze", {str(tmp_path)!r}, "--jobs", "2"]))
"""
    tiny_trace(tmp_path / "rank0.json")
    tiny_trace(tmp_path / "rank1.json")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("aiprof: error: too large for available memory")
    assert "Traceback" not in done.stderr


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_json_nested_too_deep_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "deep.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "args": '
                     + _deep(100_000) + "}]}")
    one_line_error(capsys, main(["analyze", str(trace)]), "nested deeper")
    report = tmp_path / "report.json"
    report.write_text('{"schema_version": ' + _deep(100_000) + "}")
    err = one_line_error(capsys, main(["compare", str(report), str(report)]), str(report))
    assert "nested deeper" in err or "not an aiprof report" in err, err


def test_a_recursion_bug_is_still_an_internal_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Only the decoders' RecursionError is bad input; one from aiprof's own code is a bug (exit 3)."""
    def runaway(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(app, "analyze", runaway)
    monkeypatch.delenv("AIPROF_DEBUG", raising=False)
    assert main(["analyze", str(tmp_path / "t.json")]) == 3
    assert "internal error: RecursionError" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------
# aiprof roofline -o / --format
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix, check", [
    (".json", lambda text: json.loads(text)["rows"]),
    (".md", lambda text: "| op and input shapes |" in text and "\\|" in text and "\\[" in text),
    (".html", lambda text: "<svg" in text and "<script" not in text and "&lt;script&gt;" in text),
    (".txt", lambda text: "Roofline" in text and "\x1b" not in text),
])
def test_roofline_writes_every_format(tmp_path: Path, suffix: str, check: Any, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tiny_trace(tmp_path / "t.json", op="aten::mm|[x](y)<script>")
    out = tmp_path / f"roofline{suffix}"
    assert main(["roofline", str(trace), "-o", str(out)]) == 0
    assert check(out.read_text())
    assert f"wrote the {app.output_format(out, None)} roofline to {out}" in capsys.readouterr().err


def test_roofline_format_on_stdout_and_bad_extension(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tiny_trace(tmp_path / "t.json")
    assert main(["roofline", str(trace), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == "gpu"
    one_line_error(capsys, main(["roofline", str(trace), "-o", str(tmp_path / "r.pdf")]), "r.pdf")
    one_line_error(capsys, main(["roofline", str(trace), "-o", str(tmp_path / "no" / "r.json")]), "no such folder")


MTIA = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "hta" / "mtia_trace_single_rank" / "mtia_rank_0.json.gz"
UNDER_A_MEMORY_LIMIT = """
import resource, sys
import aiprof.app, aiprof.pipeline, aiprof.report.document, msgspec, numpy  # imported before the limit
from aiprof.cli import main
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + 5 * 2**20, resource.RLIM_INFINITY))
sys.exit(main(["analyze", sys.argv[1], "-o", sys.argv[2]]))
"""


@pytest.mark.skipif(not MTIA.exists(), reason="shared traces not found")
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
def test_a_real_memory_error_is_one_line(tmp_path: Path) -> None:
    """An 87 MB trace with 5 MB of address space left: a real MemoryError, said in one line."""
    import os

    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-c", UNDER_A_MEMORY_LIMIT, str(MTIA), str(out)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, AIPROF_DECODE_WORKERS="0"))
    assert done.returncode == 2, done.stderr
    # Where the address space runs out decides who says it (the loader names the file; the CLI the inputs).
    assert done.stderr.strip().startswith("aiprof: error: "), done.stderr
    assert "too large for available memory" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_error_and_warning_lines_carry_no_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file name is data: an ESC sequence (clear screen, window title, OSC 52) in it prints visibly."""
    hostile = tmp_path / "t\x1b]0;owned\x07\x1b[2J\u202e.json"
    err = one_line_error(capsys, main(["analyze", str(hostile)]))
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert "\u241b]0;owned" in err
