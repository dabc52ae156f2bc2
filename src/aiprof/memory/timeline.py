"""Read ``export_memory_timeline`` raw output: a JSON list of ``[t_ns or -1, action, bytes, category]``.

torch's profiler writes it (``prof.export_memory_timeline("x.raw.json.gz")``) with its own categories,
inferred from the data-flow graph. Actions: 1 PREEXISTING, 2 CREATE, 3 INCREMENT_VERSION (a -bytes row in
the old category, then a +bytes row in the new one), 4 DESTROY (-bytes). Categories index
``PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL, unknown``. There are no
addresses or stacks: the rows are category-level deltas, each kept as one event with its category.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from aiprof.memory.model import Action, Category, EventTable, MemoryData, MemoryInputError

_RAW = msgspec.json.Decoder(list[tuple[int | float, int, int | float, int | None]])
_PLOT = msgspec.json.Decoder(tuple[list[int | float], list[list[int | float]]])
PREEXISTING = 1


def read_timeline(path: Path, data: bytes) -> MemoryData:
    what = str(path)
    try:
        rows = _RAW.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        try:
            return _plot(what, *_PLOT.decode(data))
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        raise MemoryInputError(f"{what}: not an export_memory_timeline raw file ({str(err)[:120]})") from None
    if not rows:
        raise MemoryInputError(f"{what}: the memory timeline is empty")
    t = np.asarray([r[0] for r in rows], dtype=np.int64)
    action = np.asarray([r[1] for r in rows], dtype=np.int64)
    delta = np.asarray([r[2] for r in rows], dtype=np.int64)
    cat = np.asarray([Category.UNKNOWN if r[3] is None or not 0 <= r[3] < 8 else r[3] for r in rows], dtype=np.int8)
    if np.any((action < 1) | (action > 4)):
        raise MemoryInputError(f"{what}: actions must be 1-4 (PREEXISTING, CREATE, INCREMENT_VERSION, DESTROY)")
    timed = t[t >= 0]
    t0 = int(timed.min()) if timed.size else 0
    t = np.where((t < 0) | (action == PREEXISTING), t0 - 1, t)
    events = EventTable.build(
        t, np.zeros(t.size, np.int32), np.full(t.size, -1, np.int64), np.abs(delta),
        np.where(delta >= 0, int(Action.ALLOC), int(Action.FREE)), category=cat,
    )
    data_ = MemoryData(source="timeline", path=what, events=events, torch_categories=True)
    data_.seeded_blocks = int(np.sum(action == PREEXISTING))
    return data_


def _plot(what: str, times: list[int | float], sizes: list[list[int | float]]) -> MemoryData:
    """The non-raw ``export_memory_timeline`` JSON: ``[times_us, sizes]`` where each ``sizes`` row is
    ``[0, bytes of category 0, …, bytes of unknown]`` (cumulative): turned back into per-category deltas."""
    if not times or len(times) != len(sizes) or any(len(row) != 9 for row in sizes):
        raise MemoryInputError(f"{what}: an export_memory_timeline JSON needs [times, sizes] with 9 sizes per time")
    grid = np.asarray(sizes, dtype=np.int64)[:, 1:]
    delta = np.diff(grid, axis=0, prepend=np.zeros((1, 8), np.int64))
    t = np.asarray(times, dtype=np.int64) * 1000
    t[0] = t[0] - 1 if t.size > 1 else t[0]  # the first row holds what existed before: it starts first
    rows, cats = np.nonzero(delta)
    values = delta[rows, cats]
    events = EventTable.build(
        t[rows], np.zeros(rows.size, np.int32), np.full(rows.size, -1, np.int64), np.abs(values),
        np.where(values >= 0, int(Action.ALLOC), int(Action.FREE)), category=cats.astype(np.int8),
    )
    return MemoryData(source="timeline", path=what, events=events, torch_categories=True)
