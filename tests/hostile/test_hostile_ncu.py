"""Nsight Compute CSV exports with every numeric field replaced by an extreme, huge fields, other encodings
and more rows than allowed: results (the bad value absent) or one line with exit 2, never an internal error.
Inputs: hostile_inputs.ncu_csv."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_inputs import EXTREMES, NCU_HEADER, ncu_csv

from aiprof.errors import TraceError
from aiprof.trace.kineto import source
from aiprof.trace.readers.ncu import MAX_VALUE, number, read_ncu

NUMERIC = [i for i, name in enumerate(NCU_HEADER) if name in ("ID", "Device", "Block Size", "Grid Size") or "__" in name]


def test_the_number_parser() -> None:
    assert number("1,000,000") == 1e6 and number(" 12.5 ") == 12.5 and number("-3") == -3
    for text in ("1e400", "-1e400", "nan", "NaN", "inf", "-Infinity", "9" * 5000, "", "n/a", "text", "1e31"):
        assert number(text) is None, text
    assert number("1e30") == MAX_VALUE


@pytest.mark.parametrize("column", NUMERIC, ids=lambda c: NCU_HEADER[c])
def test_an_extreme_in_any_numeric_field_is_a_result_or_one_line(column: int, tmp_path: Path) -> None:
    for k, value in enumerate(EXTREMES):
        path = ncu_csv(tmp_path / f"{k}.csv", 3, {(1, column): value})
        try:
            results = read_ncu(path)
        except TraceError as err:
            assert "\n" not in str(err) and err.exit_code == 2
            assert NCU_HEADER[column] == "ID" and "line 5" in str(err), (value[:20], err)
            continue
        assert len(results) == 3
        bad = results[1]
        name = NCU_HEADER[column]
        parsed = number(value)
        if "__" in name:
            assert (name in bad.metrics) == (parsed is not None), (name, value[:20])
            assert all(abs(v) <= MAX_VALUE * 1e9 for r in results for v in r.metrics.values())
        elif name == "Device":
            assert bad.device == (int(parsed) if parsed is not None and parsed >= 0 and parsed == int(parsed)
                                  and parsed < 2**31 else -1)
        elif name in ("Block Size", "Grid Size"):
            whole = parsed is not None and 0 <= parsed < 2**31 and parsed == int(parsed)
            assert (bad.block if name == "Block Size" else bad.grid) == (int(parsed) if whole else -1)


def test_an_id_that_is_no_index_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"line 5: ID '1e400' is not a kernel's index"):
        read_ncu(ncu_csv(tmp_path / "t.csv", 3, {(1, 0): "1e400"}))


def test_a_field_past_the_csv_limit_is_one_line(tmp_path: Path) -> None:
    path = ncu_csv(tmp_path / "t.csv", 3, {(2, 4): "k" * (200 << 10)})
    with pytest.raises(TraceError, match=r"line 6: not the CSV ncu writes \(field larger than field limit"):
        read_ncu(path)


@pytest.mark.parametrize("encoding,bom", [("utf-8", True), ("utf-16", False), ("utf-16-le", False), ("utf-16-be", False)])
def test_bom_marked_exports_read_as_utf8(encoding: str, bom: bool, tmp_path: Path) -> None:
    want = read_ncu(ncu_csv(tmp_path / "plain.csv", 4))
    path = ncu_csv(tmp_path / "other.csv", 4, encoding=encoding, bom=bom)
    if encoding in ("utf-16-le", "utf-16-be"):  # what Windows tools write: the BOM, then the text
        path.write_bytes((b"\xff\xfe" if encoding.endswith("le") else b"\xfe\xff") + path.read_bytes())
    assert read_ncu(path) == want


def test_max_events_caps_the_rows(tmp_path: Path) -> None:
    path = ncu_csv(tmp_path / "t.csv", 50)
    with pytest.raises(TraceError, match="more than 49 rows"):
        read_ncu(path, source.LoadLimits(max_events=49))
    assert len(read_ncu(path, source.LoadLimits(max_events=50))) == 50
    with pytest.raises(TraceError, match="--max-trace-mb"):
        read_ncu(path, source.LoadLimits.with_max_mb(0.001))


def test_no_header_within_the_preamble(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"x" * (3 << 20) + b'\n"ID","Kernel Name"\n"0","k"\n')  # one 3 MiB line, then a header
    with pytest.raises(TraceError, match='no "ID" header row'):
        read_ncu(path)
