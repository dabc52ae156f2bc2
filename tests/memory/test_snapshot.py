"""The shared allocator snapshot, with every number computed independently here, and planted OOMs."""

from __future__ import annotations

import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from snapshots import block, entry, segment, snapshot

from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.report import MemoryReport

MiB = 1 << 20


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError("no classes")


@pytest.fixture(scope="module")
def raw(traces_dir: Path) -> dict[str, Any]:
    with open(traces_dir / "memory" / "transformer_lm_snapshot.pickle", "rb") as fh:
        loaded: dict[str, Any] = _Plain(fh).load()
    return loaded


@pytest.fixture(scope="module")
def report(traces_dir: Path) -> MemoryReport:
    return analyze_memory(load_memory(traces_dir / "memory" / "transformer_lm_snapshot.pickle"))


def _independent(raw: dict[str, Any]) -> dict[str, Any]:
    """The seeded peak as memory_viz's initially_allocated does it: replay the trace with recorded sizes,
    letting frees of unknown blocks go negative, then add every block that predates recording."""
    trace = raw["device_traces"][0]
    live: dict[int, int] = {}
    running = peak = 0
    pre_freed = 0
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            running += e["size"]
        elif e["action"] == "free_requested":
            if e["addr"] in live:
                running -= live.pop(e["addr"])
            else:
                pre_freed += e["size"]
                running -= e["size"]
        peak = max(peak, running)
    active = [b for s in raw["segments"] for b in s["blocks"] if b["state"] != "inactive"]
    still_live_before = sum(b["size"] for b in active if b["address"] not in live)
    return {"unseeded": peak, "seed": pre_freed + still_live_before, "seeded": peak + pre_freed + still_live_before}


def test_segments_and_identity(report: MemoryReport, raw: dict[str, Any]) -> None:
    dev = report.devices[0]
    state = dev.snapshot
    assert state is not None
    segs = raw["segments"]
    assert state.segments == len(segs) == 216
    assert state.large_segments == sum(s["segment_type"] == "large" for s in segs)
    blocks = [b for s in segs for b in s["blocks"]]
    assert state.reserved_bytes == sum(s["total_size"] for s in segs)
    assert state.cached_free_bytes == sum(b["size"] for b in blocks if b["state"] == "inactive")
    # free (internal rounding + external cached) + allocated (requested) = reserved
    assert state.rounding_loss_bytes + state.cached_free_bytes + state.requested_bytes == state.reserved_bytes
    assert state.requested_bytes + state.rounding_loss_bytes == state.allocated_bytes


def test_peak_is_seeded_with_blocks_from_before_recording(report: MemoryReport, raw: dict[str, Any]) -> None:
    dev = report.devices[0]
    want = _independent(raw)
    # aiprof counts block sizes (each request rounded to the allocator's 512-byte blocks): within 512 B a block
    n_live = sum(1 for g in dev.live_at_peak_by_site for _ in range(g.count))
    assert want["unseeded"] <= dev.unseeded_peak_bytes <= want["unseeded"] + 512 * n_live
    assert want["seed"] <= dev.seed_bytes <= want["seed"] + 512 * n_live
    assert want["seeded"] <= dev.peak_allocated_bytes <= want["seeded"] + 512 * n_live
    assert abs(dev.peak_allocated_bytes - dev.unseeded_peak_bytes) > 0.09 * dev.peak_allocated_bytes
    assert dev.reserved_at_peak_bytes == sum(s["total_size"] for s in raw["segments"])  # no segment events
    assert dev.fragmentation_at_peak_bytes == dev.reserved_at_peak_bytes - dev.peak_allocated_bytes


def test_live_at_peak_sites(report: MemoryReport, raw: dict[str, Any]) -> None:
    # independent: the blocks live at the seeded peak, grouped by their first non-library frame
    trace = raw["device_traces"][0]
    live: dict[int, dict[str, Any]] = {}
    best: dict[int, dict[str, Any]] = {}
    running = peak = 0
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            running += e["size"]
        elif e["action"] == "free_requested":
            running -= live.pop(e["addr"])["size"] if e["addr"] in live else e["size"]
        if running > peak:
            peak, best = running, dict(live)
    by_site: dict[str, int] = defaultdict(int)
    for e in best.values():
        user = next(f for f in e["frames"] if "site-packages" not in f["filename"])
        name = user["filename"].replace("\\", "/").rsplit("/", 1)[-1]
        by_site[f"{name}:{user['line']} {user['name']}"] += e["size"]
    top = sorted(by_site.items(), key=lambda kv: -kv[1])[:5]
    got = {s.site: s.bytes for s in report.devices[0].live_at_peak_by_site}
    for site, size in top:
        assert site in got and size <= got[site] <= size + 512 * 64
    assert top[0][0] == "model.py:39 forward"


def test_activations_dominate_the_transformer_peak(report: MemoryReport) -> None:
    cats = {c.category: c.bytes for c in report.devices[0].live_at_peak_by_category}
    assert cats["activation"] > 0.5 * report.devices[0].peak_allocated_bytes
    assert cats.get("unknown", 0) < 0.05 * report.devices[0].peak_allocated_bytes


def _oom_snapshot(tmp_path: Path, request: int, device_free: int, free_blocks: list[int]) -> MemoryReport:
    base = 1 << 30
    blocks = []
    addr = base
    for i, size in enumerate(free_blocks):
        blocks.append(block(addr, 64 * MiB))
        addr += 64 * MiB
        blocks.append(block(addr, size, state="inactive"))
        addr += size
    trace = [entry("alloc", b["address"], b["size"], 10 + i) for i, b in enumerate(blocks) if b["state"] != "inactive"]
    trace.append(entry("oom", 0, request, 1000, device_free=device_free))
    path = tmp_path / "oom.pickle"
    path.write_bytes(pickle.dumps(snapshot([segment(base, blocks)], trace)))
    return analyze_memory(load_memory(path))


def test_oom_verdict_fragmentation(tmp_path: Path) -> None:
    # 4 × 32 MiB cached free between live blocks, 16 MiB free on the device: 144 MiB free, no block of 100 MiB
    report = _oom_snapshot(tmp_path, 100 * MiB, 16 * MiB, [32 * MiB] * 4)
    (oom,) = report.devices[0].ooms
    assert oom.verdict == "fragmentation"
    assert oom.cached_free_bytes == 128 * MiB and oom.largest_free_block_bytes == 32 * MiB
    assert oom.top_sites and oom.top_sites[0].site == "train.py:10 forward"
    assert "144.0 MiB was free (128.0 MiB cached" in oom.explanation and "100.0 MiB asked for" in oom.explanation


def test_oom_verdict_capacity(tmp_path: Path) -> None:
    report = _oom_snapshot(tmp_path, 1024 * MiB, 16 * MiB, [2 * MiB] * 4)
    (oom,) = report.devices[0].ooms
    assert oom.verdict == "capacity" and oom.request_bytes == 1024 * MiB
    assert "the request (1.00 GiB)" in oom.explanation and "16.00 MiB device free" in oom.explanation  # binary units


# --- the streaming reader (aiprof.memory.stream) gives exactly what the plain unpickler gives ---------------

import random  # noqa: E402

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aiprof.memory.model import MemoryData  # noqa: E402
from aiprof.memory.snapshot import read_snapshot  # noqa: E402
from aiprof.memory.stream import Run, load_streaming  # noqa: E402


def assert_same(a: MemoryData, b: MemoryData) -> None:
    for name in a.events.__dataclass_fields__:
        x, y = getattr(a.events, name), getattr(b.events, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.stacks == b.stacks
    for table in ("segments", "blocks"):
        ta, tb = getattr(a, table), getattr(b, table)
        for name in ta.__dataclass_fields__:
            assert np.array_equal(getattr(ta, name), getattr(tb, name)), (table, name)
    for name in ("source", "path", "snapshot_t_ns", "steps", "settings", "ooms", "seeded_blocks", "warnings"):
        assert getattr(a, name) == getattr(b, name), name


def _in_runs(path: Path) -> tuple[int, int]:
    """(entries the streaming reader read as columns, all entries)."""
    obj = load_streaming(path)
    runs = sum(e.t_ns.size for device in obj["device_traces"] for e in device if type(e) is Run)
    dicts = sum(1 for device in obj["device_traces"] for e in device if type(e) is not Run)
    return runs, runs + dicts


def test_streaming_reader_equals_the_plain_one_on_the_shared_snapshot(traces_dir: Path) -> None:
    path = traces_dir / "memory" / "transformer_lm_snapshot.pickle"
    assert_same(read_snapshot(path, stream=False), read_snapshot(path, stream=True))
    columns, entries = _in_runs(path)
    assert entries == 5163 and columns > 0.9 * entries  # torch's layout: the columns path, not a fallback


_ACTIONS = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
            "segment_unmap", "snapshot", "oom"]
_ODD_INTS = [0, 1, 255, 256, 65535, 65536, 2**31 - 1, 2**31, -1, -2**31, 2**40 + 512, 2**63 - 1, -2**63]


def _random_snapshot(rng: random.Random, n: int, odd: bool) -> dict[str, Any]:
    frames = [{"filename": f"/src/m{i % 5}.py" if i % 3 else f"D:\\\\w\\\\é{i}.py", "line": rng.choice([1, 300, 70000, i]),
               "name": f"f{i}"} for i in range(40)]
    lists = [[rng.choice(frames) for _ in range(rng.choice([0, 1, 2, 8, 30]))] for _ in range(12)]
    devices: list[list[dict[str, Any]]] = [[] for _ in range(rng.choice([1, 1, 2]))]
    t = 1_700_000_000_000_000
    addr = 1 << 40
    for i in range(n):
        t += rng.choice([0, 1, 3, 1000])
        action = rng.choice(_ACTIONS[:3]) if rng.random() < 0.9 else rng.choice(_ACTIONS)
        stack = rng.choice(lists) if rng.random() < 0.7 else [rng.choice(frames) for _ in range(rng.choice([0, 1, 3]))]
        e: dict[str, Any] = {"action": action, "addr": addr + 512 * rng.randrange(400), "size": 512 * rng.randrange(1, 5000),
                             "stream": rng.choice([0, 0, 7, 2**40]), "time_us": t, "frames": stack,
                             "compile_context": "N/A", "user_metadata": ""}
        if action == "oom":
            e["device_free"] = rng.randrange(1 << 30)
        if odd and rng.random() < 0.05:
            key = rng.choice(["addr", "size", "stream", "time_us", "frames", "action", "compile_context"])
            e[key] = rng.choice(_ODD_INTS + [None, True, 1.5, "x", [], (1, 2), {"a": 1}, "mystery"])
        if odd and rng.random() < 0.02:
            del e[rng.choice(list(e))]
        devices[rng.randrange(len(devices))].append(e)
    live = [block(addr + 512 * k, 512 * (k + 1), rng.choice(["active_allocated", "inactive"])) for k in range(5)]
    for b in live:
        b["frames"] = rng.choice(lists)
    snap = snapshot([segment(1 << 30, live)], [])
    snap["device_traces"] = devices
    return snap


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_streaming_reader_equals_the_plain_one_on_generated_snapshots(tmp_path: Path, seed: int, protocol: int) -> None:
    rng = random.Random(seed)
    snap = _random_snapshot(rng, [1, 2, 999, 1001, 3000, 5000, 5000, 3000][seed], odd=seed % 2 == 1)
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=protocol))
    try:
        plain = read_snapshot(path, stream=False)
    except Exception as err:  # the plain reader refuses it: so must the streaming one, with the same words
        with pytest.raises(type(err)) as got:
            read_snapshot(path, stream=True)
        assert str(got.value) == str(err)
        return
    assert_same(plain, read_snapshot(path, stream=True))
    if protocol >= 4 and seed % 2 == 0 and len(snap["device_traces"][0]) > 1000:
        columns, entries = _in_runs(path)
        assert columns > 0.5 * entries


@settings(max_examples=40, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "action": st.sampled_from(_ACTIONS + ["mystery"]),
    "addr": st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from(_ODD_INTS)),
    "size": st.integers(-2**40, 2**40),
    "stream": st.integers(0, 2**63 - 1),
    "time_us": st.one_of(st.integers(-2**54, 2**54), st.floats(0, 1e9, allow_nan=False)),
    "frames": st.lists(st.sampled_from([0, 1, 2]), max_size=4),
}), min_size=1, max_size=60))
def test_streaming_reader_equals_the_plain_one_on_any_values(tmp_path_factory: pytest.TempPathFactory,
                                                              entries: list[dict[str, Any]]) -> None:
    shared = [{"filename": "a.py", "line": 1, "name": "f"}, {"filename": "b.py", "line": 2, "name": "g"},
              {"filename": "c.py", "line": 3, "name": "h"}]
    for e in entries:
        e["frames"] = [shared[k] for k in e["frames"]]
    # the same entries many times over (copies; each frames list shared by its copies): the columns path
    # sees each layout in bulk
    snap = snapshot([segment(1 << 30, [block(1 << 30, 4096)])], [dict(e) for _ in range(40) for e in entries])
    path = tmp_path_factory.mktemp("h") / "s.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    try:
        plain = read_snapshot(path, stream=False)
    except Exception as err:
        with pytest.raises(type(err)):
            read_snapshot(path, stream=True)
        return
    assert_same(plain, read_snapshot(path, stream=True))


# --- the native window scan (_snapscan.c) gives exactly what the NumPy path gives ---------------------------

from aiprof.memory import stream as stream_mod  # noqa: E402


def _snapscan() -> Any:
    return pytest.importorskip("aiprof.memory._snapscan")


def _window_facts(w: Any) -> dict[str, Any]:
    """Everything a window hands to the run builder, stack ids as the reference tuples they stand for."""
    facts = {name: getattr(w, name).tolist() for name in
             ("starts", "ok", "chained", "ends", "shape_id", "memo_inc", "list_off", "frame_pos", "frame_len")}
    facts["ival"] = np.asarray(w.ival).tolist()
    facts["stacks"] = [w.stack_refs[s] if s >= 0 else None for s in w.stack_of.tolist()]
    facts["stack_max"] = [int(w.stack_max[s]) for s in w.stack_of.tolist()]
    # layouts: the same structure (the native scan may reuse an equal layout learned in an earlier window)
    facts["shapes"] = [(s.length, s.fixed, bytes(r if f else 0 for r, f in zip(s.raw, s.fixed)), s.slots, s.frames,
                        s.memo_inc, s.list_off, s.list_slot, s.frame_at) for s in w.shapes]
    return facts


def _windows_agree(monkeypatch: pytest.MonkeyPatch, data: bytes, starts: list[int]) -> None:
    known: list[Any] = []  # the native scan carries layouts from window to window, as in a read
    for start in starts:
        monkeypatch.setenv("AIPROF_NATIVE", "0")
        plain = _window_facts(stream_mod._Window(data, start, len(data)))
        monkeypatch.delenv("AIPROF_NATIVE")
        native = _window_facts(stream_mod._Window(data, start, len(data), known))
        for name in plain:
            assert native[name] == plain[name], (start, name)


def _both_paths(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """read_snapshot through the native scan and through the NumPy one: the same data, or the same error."""
    got: list[Any] = []
    for native in (False, True):
        if native:
            monkeypatch.delenv("AIPROF_NATIVE", raising=False)
        else:
            monkeypatch.setenv("AIPROF_NATIVE", "0")
        try:
            got.append(read_snapshot(path, stream=True))
        except Exception as err:
            got.append((type(err), str(err)))
    if isinstance(got[0], tuple):
        assert got[1] == got[0]
    else:
        assert_same(got[0], got[1])


def test_native_scan_is_used_and_agrees_on_the_shared_snapshot(traces_dir: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    native = _snapscan()
    monkeypatch.delenv("AIPROF_NATIVE", raising=False)
    path = traces_dir / "memory" / "transformer_lm_snapshot.pickle"
    calls = []
    real = native.scan
    monkeypatch.setattr(native, "scan", lambda *a: calls.append(a[1]) or real(*a))
    assert_same(read_snapshot(path, stream=False), read_snapshot(path, stream=True))
    assert calls  # the columns came from the native scan
    monkeypatch.undo()
    _both_paths(monkeypatch, path)
    data = path.read_bytes()
    _windows_agree(monkeypatch, data, [m.start() for m in __import__("re").finditer(b"}\x94\\(", data)][::97])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("protocol", [4, 5])
def test_native_scan_agrees_on_generated_snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int,
                                                   protocol: int) -> None:
    _snapscan()
    rng = random.Random(seed)
    snap = _random_snapshot(rng, [1, 2, 999, 1001, 3000, 5000, 5000, 3000][seed], odd=seed % 2 == 1)
    data = pickle.dumps(snap, protocol=protocol)
    path = tmp_path / "s.pickle"
    path.write_bytes(data)
    _both_paths(monkeypatch, path)
    # windows from anywhere, whole and cut short (the scan never reads past the end)
    starts = sorted({0, 1, len(data) // 3, len(data) - 9} | {rng.randrange(len(data)) for _ in range(6)})
    _windows_agree(monkeypatch, data, [s for s in starts if 0 <= s < len(data)])
    cut = data[: rng.randrange(1, len(data))]
    _windows_agree(monkeypatch, cut, [0, len(cut) // 2])


@pytest.mark.parametrize("seed", range(6))
def test_native_scan_agrees_on_truncated_and_corrupt_snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               seed: int) -> None:
    _snapscan()
    rng = random.Random(100 + seed)
    data = pickle.dumps(_random_snapshot(rng, 2000, odd=False), protocol=4)
    path = tmp_path / "s.pickle"
    for _ in range(4):
        if rng.random() < 0.5:
            broken = data[: rng.randrange(2, len(data))]
        else:
            raw = bytearray(data)
            for _ in range(rng.choice([1, 3, 20])):
                raw[rng.randrange(2, len(raw))] = rng.choice([0x7D, 0x94, 0x28, 0x68, 0x4A, 0x95, 0x00, 0xFF])
            broken = bytes(raw)
        path.write_bytes(broken)
        _both_paths(monkeypatch, path)
        _windows_agree(monkeypatch, broken, [0, rng.randrange(len(broken))])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "action": st.sampled_from(_ACTIONS + ["mystery"]),
    "addr": st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from(_ODD_INTS)),
    "size": st.integers(-2**40, 2**40),
    "time_us": st.integers(-2**54, 2**54),
    "frames": st.lists(st.sampled_from([0, 1, 2]), max_size=4),
}), min_size=1, max_size=40), st.integers(0, 2**20))
def test_native_scan_agrees_on_any_values(tmp_path_factory: pytest.TempPathFactory, entries: list[dict[str, Any]],
                                          cut: int) -> None:
    _snapscan()
    shared = [{"filename": "a.py", "line": 1, "name": "f"}, {"filename": "b.py", "line": 2, "name": "g"},
              {"filename": "c.py", "line": 3, "name": "h"}]
    for e in entries:
        e["frames"] = [shared[k] for k in e["frames"]]
        e["stream"] = 0
    snap = snapshot([segment(1 << 30, [block(1 << 30, 4096)])], [dict(e) for _ in range(30) for e in entries])
    data = pickle.dumps(snap, protocol=4)
    path = tmp_path_factory.mktemp("n") / "s.pickle"
    with pytest.MonkeyPatch.context() as mp:
        for body in (data, data[: max(2, len(data) - cut % len(data))]):
            path.write_bytes(body)
            _both_paths(mp, path)
            _windows_agree(mp, body, [0, cut % len(body)])
