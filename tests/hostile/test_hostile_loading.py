"""Hostile trace files: every case ends in a correct result or a one-line TraceError (exit 2), within
bounded memory and linear work. Inputs are generated here (hostile_inputs.py), small."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import numpy as np
import pytest
from hostile_inputs import (
    deep_json,
    deep_nesting,
    gzip_bomb,
    huge_event,
    long_name,
    many_names,
    normal_trace,
    padded_trace_bomb,
    spaces_run,
)

import aiprof
from aiprof.errors import TraceError
from aiprof.trace.kineto import loader, source, stream
from aiprof.trace.kineto.builder import MAX_NAME_CHARS, cap_name, is_capped
from aiprof.trace.kineto.loader import load_file, read_bytes


def one_line_error(path: Path, limits: source.LoadLimits | None = None) -> str:
    """The one-line error of loading ``path`` under ``limits`` (an argument of the load: None, the defaults)."""
    with pytest.raises(TraceError) as info:
        load_file(path, limits=limits)
    text = str(info.value)
    assert "\n" not in text and info.value.exit_code == 2, text
    return text


# --- gzip bombs, sniffing ------------------------------------------------------------------------
class CountingPieces:
    """Wraps source.pieces: counts the decompressed bytes every reader asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.total = 0
        real = source.pieces

        def counting(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            for piece in real(*args, **kwargs):  # type: ignore[arg-type]
                self.total += len(piece)
                yield piece

        monkeypatch.setattr(source, "pieces", counting)


def test_gzip_bomb_of_zeros_stops_at_the_sniff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """18.7 MB of gzipped zeros inflated to 4 GB before anything looked at it. Now the first piece says
    it is no trace: every path (stream and whole-file) stops after about one piece."""
    counter = CountingPieces(monkeypatch)
    path = gzip_bomb(tmp_path / "bomb.json.gz", 16 << 20)
    text = one_line_error(path)
    assert "not a Kineto trace: does not start with a JSON object or list" in text
    assert counter.total <= 2 * source.PIECE_BYTES


def test_bomb_that_passes_the_sniff_stops_at_the_ratio_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = padded_trace_bomb(tmp_path / "pad.json.gz", 24 << 20)  # ~1000x: 24 MB from ~25 kB
    limits = source.LoadLimits(ratio_floor_bytes=4 << 20)  # the default floor scaled down for a small test
    counter = CountingPieces(monkeypatch)
    text = one_line_error(path, limits)
    assert "--max-trace-mb" in text and "x the" in text
    allowed = limits.allowed_bytes(path.stat().st_size)
    assert allowed == 4 << 20
    # Each reader that tried stopped right after the limit (the stream, then the whole-file path).
    assert counter.total <= 2 * (allowed + source.PIECE_BYTES)
    assert load_file(path, limits=source.LoadLimits.with_max_mb(32)).event_count == 2  # the flag raises it: it loads


def test_size_limit_applies_to_plain_files_and_the_whole_file_path(tmp_path: Path) -> None:
    path = normal_trace(tmp_path / "t.json", 2000)
    small = source.LoadLimits.with_max_mb(0.05)
    assert "larger than" in one_line_error(path, small)
    assert load_file(path).event_count > 2000  # the limits are the load's, not the process's: the defaults load it
    with pytest.raises(TraceError, match="larger than"):
        read_bytes(path, small)  # the whole-file reader (export's salvage path too) is bounded the same way


def test_limits_from_options_are_validated() -> None:
    from aiprof.errors import AiprofError

    assert source.LoadLimits.from_options(None, 0) == source.LoadLimits()
    assert source.LoadLimits.from_options(10, 5).max_bytes == 10 << 20
    for bad in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(AiprofError):
            source.LoadLimits.from_options(bad, 0)
    with pytest.raises(AiprofError):
        source.LoadLimits.from_options(None, -1)


@pytest.mark.parametrize("content", [b"\x00" * 64, b"\x1b]52;c;c2VjcmV0\x07", b"secret-token=abc", b"  42", b"PK\x03\x04"])
def test_non_trace_files_are_named_by_what_they_are_not(tmp_path: Path, content: bytes) -> None:
    """The note says what the file is not, never what it holds (its bytes could be a secret or
    terminal escapes) — as a named file and as a file skipped in a folder."""
    path = tmp_path / "x.json"
    path.write_bytes(content)
    text = one_line_error(path)
    assert "does not start with a JSON object or list" in text
    assert "secret" not in text and "\x1b" not in text and "42" not in text.replace(str(path), "")
    gz = tmp_path / "y.json.gz"
    gz.write_bytes(gzip.compress(content))
    assert "does not start with a JSON object" in one_line_error(gz)
    normal_trace(tmp_path / "good.json", 200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aiprof.load(tmp_path)
    notes = " ".join(str(w.message) for w in caught)
    assert "does not start with a JSON object" in notes and "secret" not in notes and "\x1b" not in notes


# --- linear scanning -----------------------------------------------------------------------------
def _stream_work(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(bytes the stream's scans faced, decompressed text size) for a load in this process."""
    monkeypatch.setattr(source, "PIECE_BYTES", 4096)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    s = stream._Stream(path, 0)
    s.load(0, "file order")
    return s.work, path.stat().st_size


@pytest.mark.parametrize("make", [spaces_run, huge_event], ids=["spaces run", "one huge event"])
def test_stream_scanning_is_linear_without_event_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: object
) -> None:
    """With no decodable cut for megabytes, the old reader rescanned its whole buffer at every piece
    (256 MB of spaces: 7.7 s; 4 GB: never). The bytes all scans face now stay a few times the text."""
    size = 2 << 20
    arg = size if make is spaces_run else size // 8
    path = make(tmp_path / "x.json", arg)  # type: ignore[operator]
    work, text = _stream_work(path, monkeypatch)
    assert work <= 4 * text, (work, text)  # quadratic would be ~text² / (2 * 4096): ~250x the text here


def test_stream_scanning_is_linear_in_a_long_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = normal_trace(tmp_path / "b.json", 10).read_bytes()
    path = tmp_path / "x.json"
    path.write_bytes(b'{"pad": "' + b"x" * (2 << 20) + b'", ' + body[1:])
    work, text = _stream_work(path, monkeypatch)
    assert work <= 4 * text, (work, text)


@pytest.mark.parametrize("make", [spaces_run, huge_event, long_name], ids=["spaces", "huge event", "long name"])
def test_hostile_layouts_load_the_same_events_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: object
) -> None:
    path = make(tmp_path / "x.json", 300_000)  # type: ignore[operator]
    streamed = load_file(path)
    monkeypatch.setattr(stream, "stream_load", lambda *a, **k: None)  # the whole-file path
    whole = load_file(path)
    assert streamed.event_count == whole.event_count == 3
    assert [streamed.strings[i] for i in streamed.columns.name] == [whole.strings[i] for i in whole.columns.name]


# --- names, events, nesting ----------------------------------------------------------------------
def test_long_names_are_capped_and_stay_distinct(tmp_path: Path) -> None:
    base = "x" * (MAX_NAME_CHARS * 3)
    a, b = cap_name(base + "a"), cap_name(base + "b")
    assert a != b and len(a) == len(b) == MAX_NAME_CHARS and is_capped(a)
    assert cap_name("short") == "short" and not is_capped("short")
    path = long_name(tmp_path / "x.json", 1 << 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = aiprof.load(path)
    assert max(len(s) for s in trace.strings) <= MAX_NAME_CHARS
    assert any("shortened 1 name" in str(w.message) for w in caught)


def test_max_events_fails_cleanly_on_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = many_names(tmp_path / "x.json", 5000)
    few = source.LoadLimits(max_events=1000)
    assert "more than 1,000 events" in one_line_error(path, few)
    monkeypatch.setattr(stream, "stream_load", lambda *a, **k: None)
    assert "--max-events" in one_line_error(path, few)
    assert load_file(path, limits=source.LoadLimits(max_events=5000)).event_count == 5000


def test_json_nested_deeper_than_the_decoder_allows_is_one_line(tmp_path: Path) -> None:
    assert "nested deeper" in one_line_error(deep_json(tmp_path / "x.json", 200_000))


def test_memory_error_while_loading_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = normal_trace(tmp_path / "x.json", 100)

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(loader, "_load_file", exhausted)
    assert "too large for available memory" in one_line_error(path)


def test_deep_nesting_completes_and_links_every_level(tmp_path: Path) -> None:
    """160k nested spans took 16-30 s (one pass per depth level); now one sort."""
    from aiprof.trace import links

    depth = 160_000
    trace = load_file(deep_nesting(tmp_path / "x.json", depth))
    parent = links.parent(trace)
    order = np.argsort(trace.columns.ts, kind="stable")
    assert parent[order[0]] == -1
    assert (parent[order[1:]] == order[:-1]).all()


# --- the command line ----------------------------------------------------------------------------
def _cli(*args: str | Path) -> tuple[int, list[str]]:
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(Path(aiprof.__file__).resolve().parents[1]))
    run = subprocess.run(
        [sys.executable, "-m", "aiprof", "analyze", *map(str, args)], capture_output=True, text=True, timeout=120, env=env
    )
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, [line for line in run.stderr.splitlines() if line.strip()]


def test_cli_limits_end_in_one_line_and_exit_2(tmp_path: Path) -> None:
    path = normal_trace(tmp_path / "t.json", 2000)
    code, lines = _cli(path, "--max-events", "100")
    assert code == 2 and len(lines) == 1 and "more than 100 events" in lines[0], lines
    code, lines = _cli(path, "--max-trace-mb", "0.01")
    assert code == 2 and len(lines) == 1 and "--max-trace-mb" in lines[0], lines
    code, lines = _cli(path, "--max-trace-mb", "nan")
    assert code == 2 and len(lines) == 1, lines
    code, lines = _cli(gzip_bomb(tmp_path / "bomb.json.gz", 4 << 20))
    assert code == 2 and len(lines) == 1 and "not a Kineto trace" in lines[0], lines
