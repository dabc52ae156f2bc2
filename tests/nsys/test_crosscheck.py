"""bench/nsys_crosscheck.py's comparison (the GPU capture needs a device session; the comparison does not):
a report agrees with itself and disagrees with another program's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NSYS = ROOT / ".." / "shared" / "traces" / "nsys"
OLD = NSYS / "extrap_con_kernel_old_schema.sqlite"
SAXPY = NSYS / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


@pytest.mark.skipif(not NSYS.is_dir(), reason="../shared/traces/nsys not present")
def test_the_crosscheck_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import nsys_crosscheck
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert nsys_crosscheck.compare(OLD, OLD)
    assert "FAIL" not in capsys.readouterr().out
    assert not nsys_crosscheck.compare(OLD, SAXPY)
    out = capsys.readouterr().out
    assert "FAIL kernel counts" in out and "FAIL top three findings" in out
    sys.modules.pop("nsys_crosscheck", None)
