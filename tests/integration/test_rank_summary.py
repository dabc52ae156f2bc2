"""Rank summaries (aiprof.analysis.summary): a file's results read back from one equal the results in memory,
field by field and type by type, with Arrow tables and without; the tables open with pyarrow alone; a result
the format cannot carry exactly is not written; nothing in the cache folder is ever unpickled."""

from __future__ import annotations

import dataclasses
import functools
import pickle
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from aiprof.analysis import summary
from aiprof.analysis.run import RankAnalysis, _load_and_analyze, _Loaded, analyze_paths
from aiprof.pipeline import diagnose_hook
from aiprof.rules.diagnosis import RankDiagnosis
from aiprof.trace.readers import ReaderOptions

KIND = summary.hook_result_type(diagnose_hook)

TRACES = ("param/dlrm_8rank", "astra-sim/megatron_tp8")


def _first(traces_dir: Path, folder: str) -> Path:
    return sorted((traces_dir / folder).iterdir())[0]


@pytest.fixture(params=["arrow", "msgpack"])
def encoding(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "arrow":
        pytest.importorskip("pyarrow")
    else:
        monkeypatch.setattr(summary, "arrow", lambda: None)
    return str(request.param)


def same(a: Any, b: Any, where: str = "result") -> None:
    """``a`` and ``b`` equal with the same types all the way down (an int is not a float, a tuple not a list,
    dict keys in the same order, arrays of the same dtype)."""
    assert type(a) is type(b), (where, type(a), type(b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, msgspec.Struct):
        for name in a.__struct_fields__:
            same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, (where, a, b)


@pytest.mark.parametrize("timeline", [0, 2_000, 20_000], ids=["report", "timeline-capped", "timeline-whole"])
@pytest.mark.parametrize("folder", TRACES)
def test_a_summary_reads_back_equal_to_the_result(traces_dir: Path, folder: str, encoding: str,
                                                  timeline: int) -> None:
    hook = functools.partial(diagnose_hook, timeline=timeline)
    results = _load_and_analyze((_first(traces_dir, folder), True, hook, None, ReaderOptions()))
    a = results[0].analysis
    assert a is not None and a.diagnosis is not None and a.diagnosis.findings and a.arrivals is not None
    assert (a.diagnosis.timeline is not None) == bool(timeline)
    assert len(a.arrivals) and a.sections["kernels"].devices[0].kernels  # the tables are not empty
    data = summary.encode(results, KIND)
    assert data is not None
    same(results, summary.decode(data, KIND))
    tables = msgspec.msgpack.decode(zlib.decompress(data), type=summary.SummaryFile).ranks[0].tables
    assert {t.encoding for t in tables.values()} == {"arrow-ipc" if encoding == "arrow" else "msgpack"}


def test_the_tables_open_with_pyarrow_alone(traces_dir: Path) -> None:
    """What another language sees: zlib, MessagePack, Arrow IPC streams; the rows are the rank's."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc

    results = _load_and_analyze((_first(traces_dir, "astra-sim/megatron_tp8"), True, diagnose_hook, None, ReaderOptions()))
    a = results[0].analysis
    assert a is not None and a.arrivals is not None
    data = summary.encode(results, KIND)
    assert data is not None
    plain = msgspec.msgpack.decode(zlib.decompress(data))  # no aiprof types
    assert (plain["format"], plain["version"]) == (summary.FORMAT, summary.VERSION)
    tables = {name: pyarrow.ipc.open_stream(t["data"]).read_all()
              for name, t in plain["ranks"][0]["tables"].items()}
    arrivals = tables["arrivals"].to_pydict()
    assert arrivals["group"] == a.arrivals.group_names()
    assert arrivals["arrive_ns"] == a.arrivals.arrive_ns.tolist()
    assert arrivals["message_bytes"] == a.arrivals.message_bytes.tolist()
    steps = tables["steps"].to_pylist()
    assert [(s["device"], s["number"], s["duration_ns"], dict(s["breakdown_ns"])) for s in steps] == \
        [(d.device, s.number, s.duration_ns, s.breakdown_ns) for d in a.devices for s in d.steps]
    kernels = tables["kernels"]
    assert kernels.schema.field("sm_efficiency_pct").type == pa.float64()
    assert kernels.num_rows == sum(len(d.kernels) for d in a.sections["kernels"].devices)


def test_the_diagnosis_is_decoded_as_the_hook_declares(traces_dir: Path) -> None:
    """The analysis layer never names the rules' types: a summary decodes the diagnosis as the type the rank
    hook returns; without one, a result with a diagnosis is not carried."""
    assert KIND is RankDiagnosis
    assert summary.hook_result_type(functools.partial(diagnose_hook, timeline=5)) is RankDiagnosis
    assert summary.hook_result_type(None) is None
    results = _load_and_analyze((_first(traces_dir, "param/dlrm_8rank"), True, diagnose_hook, None, ReaderOptions()))
    assert summary.encode(results) is None
    data = summary.encode(results, KIND)
    assert data is not None
    with pytest.raises(ValueError, match="no type"):
        summary.decode(data)
    other = msgspec.structs.replace(msgspec.msgpack.decode(zlib.decompress(data), type=summary.SummaryFile),
                                    version=summary.VERSION + 1)
    with pytest.raises(ValueError, match="not a version"):  # another version: a miss, never misread
        summary.decode(zlib.compress(msgspec.msgpack.encode(other)), KIND)


def test_every_field_is_carried() -> None:
    assert {f.name for f in dataclasses.fields(RankAnalysis)} == summary.ANALYSIS_FIELDS
    assert {f.name for f in dataclasses.fields(_Loaded)} == summary.LOADED_FIELDS


def test_a_result_it_cannot_carry_exactly_is_not_encoded(traces_dir: Path) -> None:
    results = _load_and_analyze((_first(traces_dir, "param/dlrm_8rank"), True, diagnose_hook, None, ReaderOptions()))
    a = results[0].analysis
    assert a is not None and summary.encode(results, KIND) is not None
    kernels = a.sections["kernels"]
    first = kernels.devices[0].kernels[0]
    as_int = msgspec.structs.replace(first, mean_ns=int(first.mean_ns))  # would read back as a float
    dev = msgspec.structs.replace(kernels.devices[0], kernels=(as_int, *kernels.devices[0].kernels[1:]))
    changed = dataclasses.replace(a, sections={**a.sections, "kernels": msgspec.structs.replace(
        kernels, devices=(dev, *kernels.devices[1:]))})
    assert summary.encode([dataclasses.replace(results[0], analysis=changed)], KIND) is None
    custom = dataclasses.replace(a, sections={**a.sections, "custom": object()})  # a section it does not know
    assert summary.encode([dataclasses.replace(results[0], analysis=custom)], KIND) is None


class _Planted:
    """A pickle that touches a file when it is loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_pickle_in_the_cache_is_never_loaded(traces_dir: Path, tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for f in sorted((traces_dir / "param" / "dlrm_8rank").iterdir())[:2]:
        (ranks / f.name).write_bytes(f.read_bytes())
    cache = tmp_path / "cache"
    analyze_paths([ranks], workers=1, cache_dir=cache)
    entries = sorted(cache.iterdir())
    assert len(entries) == 2
    marker = tmp_path / "ran"
    for entry in entries:
        entry.write_bytes(pickle.dumps(_Planted(marker)))
        entry.with_suffix(".pickle").write_bytes(pickle.dumps(_Planted(marker)))  # the old entries' name
    run = analyze_paths([ranks], workers=1, cache_dir=cache)
    assert len(run.ranks) == 2 and not marker.exists()
    assert all(summary.decode(e.read_bytes(), KIND) for e in entries)  # rewritten as summaries
