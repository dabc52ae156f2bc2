"""Kineto JSON in other encodings than plain UTF-8 (issue 27): a UTF-8 byte-order mark (what Windows
editors and some exporters write) is read, plain or inside gzip, on every read path (streaming with and
without helper processes, whole-file) with the same result as the file without it; UTF-16 and UTF-32
text, with or without a byte-order mark, and a mark anywhere but at the start get one line and exit 2.
The inputs come from :func:`encodings`, a generator over one small trace."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hostile_inputs import kineto_trace
from trace_compare import identical

from aiprof.cli import main
from aiprof.trace.kineto import loader, source, stream
from aiprof.trace.model import Trace

BOM = b"\xef\xbb\xbf"


def encodings(text: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(accepted, refused): the trace's text, encoded every way a tool may save JSON."""
    utf8 = text.encode()
    accepted = {"utf-8 bom": BOM + utf8, "utf-8 bom, blank after": BOM + b" \n\t" + utf8}
    refused = {name: text.encode(codec) for name, codec in [
        ("utf-16 bom", "utf-16"), ("utf-16-le", "utf-16-le"), ("utf-16-be", "utf-16-be"),
        ("utf-32 bom", "utf-32"), ("utf-32-le", "utf-32-le"), ("utf-32-be", "utf-32-be")]}
    refused["utf-16-le, blank first"] = " \n".encode("utf-16-le") + text.encode("utf-16-le")
    refused["bom after blanks"] = b"  " + BOM + utf8
    refused["two boms"] = BOM + BOM + utf8
    return accepted, refused


def _written(tmp_path: Path, name: str, data: bytes, gz: bool) -> Path:
    path = tmp_path / (name.replace(" ", "_").replace(",", "") + (".json.gz" if gz else ".json"))
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _every_path(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Trace]:
    """The trace as the streaming reader builds it alone and with two helpers (runs of 2 KiB, so the
    helpers decode most of it), and as the whole-file path does."""
    with monkeypatch.context() as m:
        m.setattr(stream, "CHUNK_BYTES", 2048)
        m.setattr(source, "PIECE_BYTES", 700)
        alone, helped = stream.stream_load(path, workers=0), stream.stream_load(path, workers=2)
    assert alone is not None and helped is not None, "the streaming reader gave the file to the whole-file path"
    with monkeypatch.context() as m:
        m.setattr(stream, "stream_load", lambda *a, **k: None)
        whole = loader.load_file(path)
    return [alone, helped, whole]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_utf8_byte_order_mark_is_read_on_every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool) -> None:
    plain = kineto_trace(tmp_path / "t.json")
    accepted, _ = encodings(plain.read_text())
    reference = stream.stream_load(plain, workers=0)
    assert reference is not None and reference.event_count > 0
    for name, data in accepted.items():
        for trace in _every_path(_written(tmp_path, name, data, gz), monkeypatch):
            identical(trace, reference)


def test_a_bare_event_list_after_a_mark_is_read(tmp_path: Path) -> None:
    events = kineto_trace(tmp_path / "t.json").read_text()
    start = events.index("[", events.index('"traceEvents"'))
    bare = events[start:events.rindex("]") + 1]
    path = tmp_path / "list.json"
    path.write_bytes(BOM + bare.encode())
    assert loader.load_file(path).event_count == loader.load_file(tmp_path / "t.json").event_count


@pytest.mark.parametrize("piece", [1, 2, 3, 5])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_the_mark_is_dropped_whatever_the_pieces(tmp_path: Path, piece: int, gz: bool) -> None:
    """The text every reader gets is the file's without its mark, even when the decompressor hands it out
    a byte or two at a time (the mark split across pieces)."""
    text = b'{"traceEvents": []}'
    path = _written(tmp_path, "small", BOM + text, gz)
    assert b"".join(source.pieces(path, piece_bytes=piece, block_bytes=piece)) == text


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_other_encodings_get_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], gz: bool) -> None:
    _, refused = encodings(kineto_trace(tmp_path / "t.json").read_text())
    for name, data in refused.items():
        path = _written(tmp_path, name, data, gz)
        code = main(["analyze", str(path)])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (name, err)
        expected = "byte-order mark after its first bytes" if "bom" in name and "utf-" not in name else "save the file as UTF-8"
        assert expected in err and str(path) in err, (name, err)
        if name.startswith(("utf-16", "utf-32")):
            assert name[:6].upper() in err, (name, err)


@pytest.mark.parametrize("data", [b"\x00" * 4096, BOM[:2], BOM], ids=["zeros", "part of a mark", "a mark alone"])
def test_no_text_is_not_called_an_encoding(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes) -> None:
    """Zeros (a preallocated file never written) are not UTF-16; a mark with nothing after is empty."""
    path = tmp_path / "x.json"
    path.write_bytes(data)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "UTF-16" not in err and len(err.strip().splitlines()) == 1, err
    assert ("empty" if data == BOM else "not a Kineto trace") in err, err
