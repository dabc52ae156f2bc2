"""The snapshot reader's pairing of frees to allocations (carried over the seeded rows without a second sort)
equals pairing the final event table from scratch."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import snapshots as S

from aiprof.memory.load import load_memory
from aiprof.memory.model import event_pairs, pair_rows


def _check(tmp_path: Path, segments: list, trace: list) -> None:
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(S.snapshot(segments, trace), protocol=4))
    data = load_memory(path)
    assert data.pairs is not None
    ev = data.events
    want_free, want_alloc = pair_rows(ev.device, ev.addr, ev.action)
    got_free, got_alloc = event_pairs(data)
    np.testing.assert_array_equal(got_free, want_free)
    np.testing.assert_array_equal(got_alloc, want_alloc)


def test_seeds_pair_with_the_first_recorded_free(tmp_path: Path) -> None:
    trace = [
        S.entry("free_requested", 0x1000, 512, 1),  # allocated before recording: seeded, paired with this
        S.entry("free_requested", 0x1000, 512, 2),  # a second free of it: no allocation left
        S.entry("alloc", 0x2000, 1024, 3),
        S.entry("free_requested", 0x2000, 1024, 4),
        S.entry("free_requested", 0x3000, 512, 5),  # seeded twice: as freed and as still held at the dump
        S.entry("alloc", 0x4000, 512, 6),
        S.entry("free_requested", -1, 512, 7),  # no address: never paired
        S.entry("alloc", 0x5000, 512, 8),
        S.entry("free_requested", 0x5000, 512, 9),
        S.entry("free_requested", 0x5000, 512, 10),
    ]
    segments = [S.segment(0x3000, [S.block(0x3000, 512)]), S.segment(0x4000, [S.block(0x4000, 512)]),
                S.segment(0x6000, [S.block(0x6000, 512), S.block(0x6200, 512, "inactive")]),
                S.segment(0x1000, [S.block(0x1000, 512)], device=1)]
    _check(tmp_path, segments, trace)


def test_without_seeds_the_pairing_is_the_readers(tmp_path: Path) -> None:
    trace = [S.entry("alloc", 0x2000, 1024, 3), S.entry("free_requested", 0x2000, 1024, 4)]
    _check(tmp_path, [], trace)


def test_a_changed_table_is_paired_again(tmp_path: Path) -> None:
    path = tmp_path / "s.pickle"
    trace = [S.entry("free_requested", 0x1000, 512, 1), S.entry("alloc", 0x1000, 512, 2)]
    path.write_bytes(pickle.dumps(S.snapshot([], trace), protocol=4))
    data = load_memory(path)
    data.events = data.events.take(np.arange(len(data.events))[::-1].copy())
    free_of, alloc_of = event_pairs(data)
    want = pair_rows(data.events.device, data.events.addr, data.events.action)
    np.testing.assert_array_equal(free_of, want[0])
    np.testing.assert_array_equal(alloc_of, want[1])
