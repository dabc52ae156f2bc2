"""Bad pickles: a clear one-line error or a salvaged result with a warning, never code execution."""

from __future__ import annotations

import copyreg
import os
import pickle
from pathlib import Path

import pytest
from snapshots import block, entry, segment, snapshot

from aiprof.memory.load import load_memory
from aiprof.memory.model import MemoryInputError
from aiprof.memory.snapshot import read_snapshot
from aiprof.memory.unpickle import loads_plain


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_reduce_to_os_system_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Exploit(marker)]]}, protocol=4))
    assert not marker.exists()
    with pytest.raises(MemoryInputError) as err:
        load_memory(bad)
    assert "refused class" in str(err.value) and "\n" not in str(err.value)
    assert "system" in str(err.value)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_every_protocol_refuses_classes(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(MemoryInputError):
        loads_plain(pickle.dumps(_Exploit(marker), protocol=protocol), "x")
    assert not marker.exists()


def test_extension_code_goes_through_find_class(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    copyreg.add_extension("os", "system", 0xAB)
    try:
        data = pickle.dumps(_Exploit(marker), protocol=2)
    finally:
        copyreg.remove_extension("os", "system", 0xAB)
    copyreg.add_extension("os", "system", 0xAB)  # registered while loading: still refused
    try:
        with pytest.raises(MemoryInputError):
            loads_plain(data, "x")
    finally:
        copyreg.remove_extension("os", "system", 0xAB)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_plain_snapshot_loads_in_protocols_up_to_5(tmp_path: Path, protocol: int) -> None:
    snap = snapshot([segment(1 << 20, [block(1 << 20, 4096)])], [entry("alloc", 1 << 21, 512, 10), entry("free_requested", 1 << 21, 512, 20)])
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=protocol))
    data = read_snapshot(path)
    assert data.segments is not None and data.segments.total.tolist() == [4096]


def test_protocol_above_5_is_one_line(tmp_path: Path) -> None:
    data = bytearray(pickle.dumps({"segments": []}, protocol=5))
    data[1] = 6
    with pytest.raises(MemoryInputError, match="protocol 6"):
        loads_plain(bytes(data), "x")


def test_truncated_pickle_is_one_line(traces_dir: Path, tmp_path: Path) -> None:
    whole = (traces_dir / "memory" / "transformer_lm_snapshot.pickle").read_bytes()
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(MemoryInputError, match="truncated|not a readable") as err:
        load_memory(cut)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("obj", [[1, 2, 3], {"a": 1}, "text", None])
def test_not_a_snapshot_is_one_line(tmp_path: Path, obj: object) -> None:
    path = tmp_path / "x.pickle"
    path.write_bytes(pickle.dumps(obj))
    with pytest.raises(MemoryInputError, match="not an allocator snapshot"):
        load_memory(path)


def test_garbage_bytes_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.pickle"
    path.write_bytes(b"\x80\x04\x95garbage" * 10)
    with pytest.raises(MemoryInputError):
        load_memory(path)


def test_old_torch_snapshot_is_salvaged_with_a_warning(tmp_path: Path) -> None:
    # torch 1.13: a bare list of segments, blocks with an "allocated" boolean and no requested_size
    old = [{"device": 0, "address": 4096, "total_size": 2048, "allocated_size": 1024, "active_size": 1024,
            "stream": 0, "segment_type": "large",
            "blocks": [{"size": 1024, "allocated": True, "active": True}, {"size": 1024, "allocated": False, "active": False}]}]
    path = tmp_path / "old.pickle"
    path.write_bytes(pickle.dumps(old, protocol=2))
    data = load_memory(path)
    assert any("old-style" in w for w in data.warnings)
    assert data.blocks is not None and data.blocks.addr.tolist() == [4096, 5120]
    # entries with no time_us (an older torch): order is used, with a warning
    snap = snapshot([], [{"action": "alloc", "addr": 8192, "size": 512}, {"action": "free_requested", "addr": 8192, "size": 512},
                         {"action": "mystery", "addr": 1, "size": 1}])
    path.write_bytes(pickle.dumps(snap))
    data = load_memory(path)
    assert any("no time_us" in w for w in data.warnings) and any("skipped" in w for w in data.warnings)


# --- the streaming reader keeps the same guarantees ----------------------------------------------------------

def _big_trace(n: int, extra: object = None) -> dict[str, object]:
    frames = [{"filename": "/a.py", "line": k, "name": "f"} for k in range(4)]
    trace = [entry(("alloc", "free_requested", "free_completed")[i % 3], (1 << 30) + 512 * (i // 3), 512, i,
                   frames=list(frames)) for i in range(n)]
    if extra is not None:
        trace[n // 2]["user_metadata"] = extra
    return snapshot([segment(1 << 20, [block(1 << 20, 4096)])], trace)


@pytest.mark.parametrize("protocol", [4, 5])
def test_streaming_reader_refuses_a_class_deep_in_the_trace(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(_big_trace(6000, _Exploit(marker)), protocol=protocol))
    with pytest.raises(MemoryInputError) as err:
        read_snapshot(path, stream=True)
    assert "refused class" in str(err.value) and "system" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_streaming_reader_on_truncated_pickles_says_what_the_plain_one_says(tmp_path: Path) -> None:
    whole = pickle.dumps(_big_trace(3000), protocol=4)
    path = tmp_path / "cut.pickle"
    for cut in (3, 100, len(whole) // 3, len(whole) // 2 + 7, len(whole) - 40, len(whole) - 1):
        path.write_bytes(whole[:cut])
        with pytest.raises(MemoryInputError) as plain:
            read_snapshot(path, stream=False)
        with pytest.raises(MemoryInputError) as streamed:
            read_snapshot(path, stream=True)
        assert str(streamed.value) == str(plain.value) and "\n" not in str(streamed.value)


def test_streaming_reader_never_trusts_bytes_that_only_look_like_entries(tmp_path: Path) -> None:
    # an address and a string whose bytes spell an entry's opening ("}\x94(") and a key reference
    snap = _big_trace(3000)
    trace = snap["device_traces"][0]  # type: ignore[index]
    for i in range(0, 3000, 7):
        trace[i]["addr"] = int.from_bytes(b"\x00}\x94(h\x05K\x01", "little")
        trace[i]["compile_context"] = "}\x94(h\x05K\x01u"
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    plain, streamed = read_snapshot(path, stream=False), read_snapshot(path, stream=True)
    assert streamed.events.addr.tolist() == plain.events.addr.tolist()
    assert streamed.stacks == plain.stacks and len(streamed.events) == len(plain.events)


def test_a_large_snapshot_is_streamed_and_a_gzip_one_is_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    import aiprof.memory.snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "STREAM_MIN_BYTES", 1)
    calls: list[Path] = []
    real = snapshot_module.load_streaming

    def spy(p: Path) -> object:
        calls.append(p)
        return real(p)

    monkeypatch.setattr(snapshot_module, "load_streaming", spy)
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(_big_trace(3000), protocol=4))
    streamed = load_memory(path)
    (tmp_path / "s.pickle.gz").write_bytes(gzip.compress(path.read_bytes()))
    plain = load_memory(tmp_path / "s.pickle.gz")
    assert streamed.events.t_ns.tolist() == plain.events.t_ns.tolist() and streamed.stacks == plain.stacks
    assert calls == [path]


def test_streaming_reader_falls_back_where_opcodes_edit_entries(tmp_path: Path) -> None:
    # hand-edited pickles a pickler never writes: entries popped, memoized or referenced after the fact.
    # The streaming reader must give the plain reader's answer (it hands such files over).
    import pickletools

    snap = _big_trace(2500)
    data = pickletools.optimize(pickle.dumps(snap, protocol=4))  # drops unused MEMOIZEs, keeps it plain
    base = pickle.dumps(snap, protocol=4)
    cases = [data]
    end = base.rindex(b"uea")  # the last entry's SETITEMS, then the batch's APPENDS: edit in between
    for edit in (b"0", b"\x94", b"\x94h\x01"):
        cases.append(base[: end + 1] + edit + base[end + 1:])
    for k, raw in enumerate(cases):
        path = tmp_path / f"e{k}.pickle"
        path.write_bytes(raw)
        try:
            plain = read_snapshot(path, stream=False)
        except MemoryInputError as err:
            with pytest.raises(MemoryInputError) as got:
                read_snapshot(path, stream=True)
            assert str(got.value) == str(err)
            continue
        streamed = read_snapshot(path, stream=True)
        assert streamed.events.t_ns.tolist() == plain.events.t_ns.tolist()
        assert streamed.events.addr.tolist() == plain.events.addr.tolist() and streamed.stacks == plain.stacks
