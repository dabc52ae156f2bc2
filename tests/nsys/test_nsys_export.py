"""`aiprof export` of an Nsight Systems report: read through the reader interface (it used to fail with
"not a Kineto trace") and written as Chrome-trace events that load back with the same kernels, runtime
calls and step accounting as the report itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aiprof
from aiprof import app
from aiprof.analysis.run import analyze
from aiprof.trace.model import Kind, Trace

REPORTS = ["perlmutter-cloverleaf-cuda.sqlite", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"]


def _one(loaded: object) -> Trace:
    return loaded if isinstance(loaded, Trace) else loaded.traces[0]  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("name", REPORTS)
def test_an_nsight_report_exports_and_loads_back_the_same(name: str, traces_dir: Path, tmp_path: Path) -> None:
    source = traces_dir / "nsys" / name
    out = app.export([source], tmp_path / "merged.json")
    original, exported = _one(aiprof.load(source)), _one(aiprof.load(out))
    for kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.RUNTIME):
        a, b = original.rows_of(kind), exported.rows_of(kind)
        assert len(a) == len(b), kind
        assert int(original.columns.dur[a].sum()) == int(exported.columns.dur[b].sum()), kind
        assert sorted(original.name_of(int(r)) for r in a) == sorted(exported.name_of(int(r)) for r in b), kind
    before, after = analyze(original).ranks[0], analyze(exported).ranks[0]
    assert before.primary.totals.breakdown_ns == after.primary.totals.breakdown_ns
    # launches still reach their kernels: the correlation ids travelled
    assert np.count_nonzero(exported.columns.correlation[exported.rows_of(Kind.KERNEL)] >= 0) == len(
        exported.rows_of(Kind.KERNEL))
