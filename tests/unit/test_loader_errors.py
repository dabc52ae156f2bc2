"""Bad input: every failure is a TraceError/NoTracesError with one line saying what is wrong and what to
do; salvageable files load with an AiprofWarning that says what was dropped."""

from __future__ import annotations

import builtins
import gzip
import json
import os
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kineto_builder import TraceBuilder

import aiprof
from aiprof.errors import AiprofError, AiprofWarning, NoTracesError, TraceError
from aiprof.trace.model import Kind, Trace

ADVICE = ("re-record", "check", "pass", "expected", "make", "re-copy", "retry", "not a", "trace")


def assert_one_line(err: AiprofError, *fragments: str) -> None:
    text = str(err)
    assert "\n" not in text and 10 < len(text) < 400, text
    assert any(word in text for word in ADVICE), text
    for fragment in fragments:
        assert fragment in text, text


def load_error(path: Path | list[Path], kind: type[AiprofError] = TraceError) -> AiprofError:
    with pytest.raises(kind) as info:
        aiprof.load(path)
    assert info.value.exit_code == 2
    return info.value


def good_trace(n: int = 40) -> TraceBuilder:
    b = TraceBuilder()
    b.step(0, ts=0, dur=10 * n + 10)
    for i in range(n):
        op = b.cpu_op(f"aten::op{i}", ts=10 * i + 1, dur=5)
        b.launch(op, kernel=f"k{i}", kernel_ts=10 * i + 3, kernel_dur=4)
    return b


def load_warned(path: Path, match: str) -> Trace:
    with pytest.warns(AiprofWarning, match=match):
        trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    return trace


# ---------------------------------------------------------------------------------------------------
# Files that cannot be traces
# ---------------------------------------------------------------------------------------------------
def test_missing_path(tmp_path: Path) -> None:
    err = load_error(tmp_path / "nope.json", NoTracesError)
    assert_one_line(err, "nope.json", "no such file")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    assert_one_line(load_error(path), "empty")


def test_whitespace_file(tmp_path: Path) -> None:
    path = tmp_path / "blank.json"
    path.write_bytes(b"  \n\t ")
    assert_one_line(load_error(path), "empty")


@pytest.mark.parametrize("content", [b"hello world", b"\x00\x01\x02binary", b"<html></html>", "café".encode()])
def test_not_json(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    err = load_error(path)
    assert_one_line(err, "not a Kineto trace: does not start with a JSON object or list")
    assert content.decode("latin-1")[:5] not in str(err).replace(str(path), "")  # says what it is not, not what it holds


@pytest.mark.parametrize(
    "doc", [{"hello": 1}, {"traceEvents": 5}, {"traceEvents": "x"}, 42, "text", None, [1, 2, 3], {"nodes": []}]
)
def test_json_that_is_not_a_trace(tmp_path: Path, doc: Any) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    err = load_error(path)
    assert_one_line(err)
    assert "trace" in str(err).lower() or "event" in str(err).lower()


def test_empty_event_list(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"traceEvents": []}')
    assert_one_line(load_error(path), "no events")


def test_only_metadata_events(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    b = TraceBuilder()
    path.write_text(json.dumps({"traceEvents": b.metadata_events()}))
    assert_one_line(load_error(path), "no timed events")


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "x.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(64))
    assert_one_line(load_error(path), "gzip")


def test_truncated_gzip_before_any_data(tmp_path: Path) -> None:
    path = tmp_path / "x.json.gz"
    path.write_bytes(gzip.compress(good_trace().dumps().encode())[:12])
    assert_one_line(load_error(path), "truncated")


def test_truncated_gzip_is_salvaged(tmp_path: Path) -> None:
    full = good_trace(400).write(tmp_path / "full.json.gz")
    data = full.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = aiprof.load(cut)
    notes = " | ".join(str(w.message) for w in caught if issubclass(w.category, AiprofWarning))
    assert "gzip stream is truncated" in notes and "cut off mid-write" in notes
    assert isinstance(trace, Trace)
    complete = aiprof.load(full)
    assert isinstance(complete, Trace)
    assert 0 < len(trace) < len(complete)
    # what was salvaged is exactly a prefix of the real events, times intact
    names = {trace.name_of(i) for i in range(len(trace))}
    assert "ProfilerStep#0" in names and "aten::op0" in names


def test_trace_cut_off_mid_write_is_salvaged(tmp_path: Path) -> None:
    text = good_trace(100).dumps(metadata=False)
    cut_at = int(len(text) * 0.6)
    path = tmp_path / "cut.json"
    path.write_text(text[:cut_at])
    with pytest.warns(AiprofWarning, match=r"cut off mid-write; salvaged [\d,]+ complete events \([\d.]+% of"):
        trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    expected = json.loads(text)["traceEvents"]
    timed = [e for e in expected if e["ph"] in ("X", "i")]
    assert 0.4 * len(timed) < len(trace) < 0.8 * len(timed)
    assert trace.base_time_ns == 1_700_000_000_000_000_000  # header written before traceEvents survives


def test_bare_list_cut_off_is_salvaged(tmp_path: Path) -> None:
    text = good_trace(50).dumps(bare=True, metadata=False)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    trace = load_warned(path, "cut off")
    assert len(trace) > 10


def test_cut_before_the_first_event(tmp_path: Path) -> None:
    text = good_trace().dumps()
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index('"traceEvents"') + 20])
    assert_one_line(load_error(path))


# ---------------------------------------------------------------------------------------------------
# Bad events: skipped with a warning, error only when nothing usable remains
# ---------------------------------------------------------------------------------------------------
BAD_EVENTS: list[Any] = [
    {"ph": "X", "cat": "cpu_op", "name": "bad_ts", "pid": 1, "tid": 1, "ts": "soon", "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "bad_dur", "pid": 1, "tid": 1, "ts": 1, "dur": [1]},
    {"ph": "X", "cat": "cpu_op", "name": 123, "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "bad_pid", "pid": {"a": 1}, "tid": 1, "ts": 1, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "bad_args", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"External id": "x"}},
    "a string event",
    17,
    None,
]


@pytest.mark.parametrize("bad", BAD_EVENTS, ids=lambda e: str(e)[:30])
def test_malformed_event_is_skipped(tmp_path: Path, bad: Any) -> None:
    b = good_trace(5)
    b.raw(bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    good = aiprof.load(good_trace(5).write(tmp_path / "good.json"))
    assert isinstance(good, Trace)
    notes = [str(w.message) for w in caught if issubclass(w.category, AiprofWarning)]
    if isinstance(bad, dict) and bad["name"] == "bad_args":
        # a wrong-typed arg drops only that arg: the event stays, its External id is unknown
        row = int(np.flatnonzero(trace.columns.name == trace.string_id("bad_args"))[0])
        assert trace.columns.external_id[row] == -1
        assert len(trace) == len(good) + 1
    else:
        assert len(trace) == len(good)
        assert len(notes) == 1 and "skipped 1 malformed event" in notes[0], notes


def test_missing_fields_get_defaults(tmp_path: Path) -> None:
    b = good_trace(2)
    b.raw({"ph": "X", "name": "no_cat_no_pid", "ts": 5, "dur": 1})
    b.raw({"ph": "X", "cat": "cpu_op", "name": "no_dur", "pid": 1, "tid": 1, "ts": 6})
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    row = int(np.flatnonzero(trace.columns.name == trace.string_id("no_dur"))[0])
    assert trace.columns.dur[row] == 0 and trace.columns.kind[row] == Kind.CPU_OP


def test_all_events_malformed(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"traceEvents": ["a", 1, None, {"ph": "X", "ts": "x"}]}))
    err = load_error(path)
    assert_one_line(err)


def test_negative_durations(tmp_path: Path) -> None:
    b = good_trace(3)
    b.raw({"ph": "X", "cat": "kernel", "name": "negative", "pid": 0, "tid": 7, "ts": 5.0, "dur": -3.5,
           "args": {"stream": 7, "correlation": 1}})
    trace = load_warned(b.write(tmp_path / "t.json"), "negative duration")
    row = int(np.flatnonzero(trace.columns.name == trace.string_id("negative"))[0])
    assert trace.columns.dur[row] == 0
    assert (trace.columns.dur >= 0).all()


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinite_times(tmp_path: Path, value: str) -> None:
    text = good_trace(3).dumps()
    bad = f'{{"ph":"X","cat":"cpu_op","name":"weird","pid":1,"tid":1,"ts":{value},"dur":{value}}}'
    text = text.replace('"traceEvents":[', '"traceEvents":[' + bad + ",", 1)
    path = tmp_path / "t.json"
    path.write_text(text)
    trace = load_warned(path, "")
    assert trace.string_id("weird") == -1 or not np.any(
        (trace.columns.name == trace.string_id("weird")) & (trace.columns.kind != Kind.SPAN)
    )
    assert (trace.columns.dur >= 0).all()


@pytest.mark.parametrize("field", ["ts", "dur", "pid", "tid", "id"])
def test_huge_integers(tmp_path: Path, field: str) -> None:
    b = good_trace(3)
    event: dict[str, Any] = {"ph": "X", "cat": "cpu_op", "name": "huge", "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    event[field] = 10**30
    b.raw(event)
    b.raw({"ph": "X", "cat": "cpu_op", "name": "big_args", "pid": 1, "tid": 1, "ts": 6, "dur": 1,
           "args": {"External id": 10**25, "Sequence number": -(10**40)}})
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    c = trace.columns
    assert (c.dur >= 0).all()
    assert np.all(np.abs(c.ts[c.kind != Kind.SPAN]) < 2**62)
    big = np.flatnonzero(c.name == trace.string_id("big_args"))
    assert len(big) == 1 and c.external_id[big[0]] == -1


# ---------------------------------------------------------------------------------------------------
# Folders and permissions
# ---------------------------------------------------------------------------------------------------
def test_folder_without_traces(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    assert_one_line(load_error(tmp_path, NoTracesError), "no trace files")


def test_folder_where_no_json_is_a_trace(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"x": 1}')
    (tmp_path / "b.json").write_text("garbage")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        err = load_error(tmp_path, NoTracesError)
    assert_one_line(err, "2 JSON file(s)")


def test_empty_path_list() -> None:
    assert_one_line(load_error([], NoTracesError))


def test_named_non_trace_among_several_files_is_an_error(tmp_path: Path) -> None:
    good = good_trace().write(tmp_path / "good.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    assert_one_line(load_error([good, bad]), "bad.json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file; the monkeypatched test covers this")
def test_unreadable_file_real_permissions(tmp_path: Path) -> None:
    path = good_trace().write(tmp_path / "t.json")
    path.chmod(0)
    try:
        assert_one_line(load_error(path), "permission denied")
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = good_trace().write(tmp_path / "t.json")
    real_open = builtins.open

    def deny(file: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(str(file)) == path:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    assert_one_line(load_error(path), "permission denied")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_unreadable_folder(tmp_path: Path) -> None:
    good_trace().write(tmp_path / "runs" / "t.json")
    (tmp_path / "runs").chmod(0)
    try:
        assert_one_line(load_error(tmp_path / "runs", NoTracesError), "permission denied")
    finally:
        (tmp_path / "runs").chmod(stat.S_IRWXU)


def test_path_is_a_folder_inside_file_list(tmp_path: Path) -> None:
    good_trace().write(tmp_path / "a" / "rank0.json")
    good_trace().write(tmp_path / "rank1.json")
    runs = aiprof.load([tmp_path / "a", tmp_path / "rank1.json"])
    assert len(runs) == 2  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# Through the CLI: exit code 2, one line on stderr, no traceback
# ---------------------------------------------------------------------------------------------------
def _cli_cases(tmp: Path) -> list[Path]:
    empty = tmp / "empty.json"
    empty.write_bytes(b"")
    not_json = tmp / "not.json"
    not_json.write_text("hello")
    not_trace = tmp / "nodes.json"
    not_trace.write_text('{"nodes": []}')
    bad_gz = tmp / "bad.json.gz"
    bad_gz.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 30)
    folder = tmp / "nothing"
    folder.mkdir()
    return [empty, not_json, not_trace, bad_gz, folder, tmp / "missing.json"]


def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    for path in _cli_cases(tmp_path):
        proc = subprocess.run(
            [sys.executable, "-m", "aiprof", "analyze", str(path)], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, (path, proc.stderr)
        assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and path.name in lines[0], (path, proc.stderr)
