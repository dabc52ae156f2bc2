"""Damaged Nsight databases: the shared reports with bytes overwritten or cut short read either as a trace
or as one :class:`~aiprof.errors.AiprofError` line, never a crash or another exception. Covers the native
b-tree scan of ``_sqlcols.c`` (``make sanitize`` runs this file under AddressSanitizer) and the SQLite path.
Seeded: the same mutants every run."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest

import aiprof
from aiprof.errors import AiprofError

NSYS = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "nsys"
SHARED = sorted(NSYS.glob("*.sqlite")) if NSYS.is_dir() else []
pytestmark = pytest.mark.skipif(not SHARED, reason="shared Nsight databases not found")


def _mutant(data: bytes, rnd: random.Random) -> bytes:
    """Cut the file short (1 in 5) or overwrite 1–100 bytes past SQLite's 100-byte header."""
    if rnd.random() < 0.2:
        return data[: rnd.randrange(100, len(data))]
    out = bytearray(data)
    for _ in range(rnd.choice([1, 2, 5, 20, 100])):
        out[rnd.randrange(100, len(out))] = rnd.randrange(256)
    return bytes(out)


@pytest.mark.parametrize("seed", range(4))
def test_damaged_databases_read_or_fail_in_one_line(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    outcomes = {"read": 0, "error": 0}
    for i in range(15):
        source = rnd.choice(SHARED)
        path = tmp_path / f"m{i}.sqlite"
        path.write_bytes(_mutant(source.read_bytes(), rnd))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                aiprof.load(path)
                outcomes["read"] += 1
            except AiprofError as err:
                assert "\n" not in str(err) and str(path) in str(err), str(err)
                outcomes["error"] += 1
    assert sum(outcomes.values()) == 15
