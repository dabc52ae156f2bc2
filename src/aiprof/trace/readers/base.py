"""The reader interface: a reader recognises a file by its first bytes and turns it into one
:class:`~aiprof.trace.model.Trace` per rank, with the same columns, string table and side tables the
Kineto loader builds, so every analysis, rule and report runs unchanged on it.

:func:`assemble` builds a ``Trace`` from column blocks (any order); readers other than Kineto use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from aiprof.trace.limits import LoadLimits
from aiprof.trace.model import ArgsStore, Columns, DeviceInfo, Flows, Trace

# dtype and "absent" value of every column of :class:`Columns`.
_INT_COLUMNS = {name for name in Columns.__dataclass_fields__} - {"blocks_per_sm", "warps_per_sm", "occupancy_pct"}
_DTYPES: dict[str, Any] = {
    "kind": np.int8,
    "cat": np.int32,
    "name": np.int32,
    "device": np.int32,
    "mem_device": np.int32,
    **{f"{what}_{axis}": np.int32 for what in ("grid", "block") for axis in "xyz"},
    "blocks_per_sm": np.float32,
    "warps_per_sm": np.float32,
    "occupancy_pct": np.float32,
}


@dataclass(frozen=True)
class ReaderOptions:
    """What a user can tell a reader, passed to every read (never a process setting). ``step_range``: a
    regular expression; NVTX ranges whose name matches it become the steps (``ProfilerStep#N`` annotations
    over the same spans). ``limits``: how much one file may cost (``--max-trace-mb``, ``--max-events``)."""

    step_range: str | None = None
    limits: LoadLimits = field(default_factory=LoadLimits)


class Reader(Protocol):
    """One trace format. ``sniff`` looks at the file's first bytes (and its path); ``read`` returns one
    trace per rank the file holds (most formats: exactly one). Bad input raises
    :class:`aiprof.errors.TraceError` with a one-line message."""

    name: str

    def sniff(self, head: bytes, path: Path) -> bool: ...

    def read(self, path: Path, options: ReaderOptions) -> list[Trace]: ...


class Strings:
    """An interning string table (index 0 is the empty string)."""

    def __init__(self) -> None:
        self.table: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.table)
            self.table.append(text)
        return found


Block = dict[str, Any]  # column name → array of the block's length or a scalar; "ts" always an array


def block(n: int, **columns: Any) -> Block:
    """``n`` rows: the given columns (arrays of length ``n``, or scalars for every row); every other column
    is absent (-1 / NaN) on these rows."""
    unknown = set(columns) - set(Columns.__dataclass_fields__)
    if unknown:
        raise KeyError(f"no such column(s): {', '.join(sorted(unknown))}")
    out: Block = dict(columns)
    out["ts"] = np.broadcast_to(np.asarray(columns.get("ts", -1), dtype=np.int64), (n,))
    return out


@dataclass
class TraceParts:
    """What a reader hands :func:`assemble`: blocks of rows plus the trace's side facts."""

    blocks: list[Block] = field(default_factory=list)
    devices: list[DeviceInfo] = field(default_factory=list)
    distributed: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    op_rows: list[int] = field(default_factory=list)  # rows (in block order) with recorded inputs …
    op_texts: list[bytes] = field(default_factory=list)  # … and their canonical JSON
    warnings: list[str] = field(default_factory=list)
    base_time_ns: int = 0
    event_count: int = 0


def assemble(path: Path, parts: TraceParts, strings: Sequence[str], rank: int = 0) -> Trace:
    """Concatenate the blocks, put the rows in time order (stable: ties keep block order), and build the
    :class:`Trace`."""
    columns, order = _columns(parts.blocks)
    if parts.op_rows:
        inverse = np.empty_like(order)  # each block row's place in time order
        inverse[order] = np.arange(len(order))
        op_args = ArgsStore.build(inverse[np.asarray(parts.op_rows, dtype=np.int64)].tolist(), parts.op_texts)
    else:
        op_args = ArgsStore.empty()
    none = np.zeros(0, dtype=np.int64)
    flows = Flows(none, np.zeros(0, dtype=bool), np.zeros(0, dtype=bool), none, none, none)
    return Trace(
        path=path,
        rank=rank,
        rank_source="file order",
        columns=columns,
        strings=list(strings),
        flows=flows,
        base_time_ns=parts.base_time_ns,
        devices=parts.devices,
        distributed=parts.distributed,
        metadata=parts.metadata,
        process_names=parts.process_names,
        thread_names=parts.thread_names,
        op_args=op_args,
        warnings=parts.warnings,
        event_count=parts.event_count,
    )


def _columns(blocks: list[Block]) -> tuple[Columns, npt.NDArray[np.intp]]:
    """The blocks' rows in time order (stable: ties keep block order). Returns the columns and the order
    (``order[i]``: the block row, counted over the blocks in turn, that is row ``i``).

    One stable argsort of the concatenated timestamps (a merge of the blocks' sorted runs: timsort), then
    per column one concatenation (sequential) and one gather through that order (``np.take``: sequential
    writes, cheaper than scattering every block into a pre-filled column); scalar and absent columns are
    filled per block, and a column that is one scalar for every row is filled once."""
    sizes = [len(b["ts"]) for b in blocks]
    total = sum(sizes)
    ts = np.concatenate([b["ts"] for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
    order = np.argsort(ts, kind="stable")
    identity = bool(total == 0 or (order[1:] > order[:-1]).all())
    out: dict[str, npt.NDArray[Any]] = {"ts": ts if identity else ts[order]}
    kept = [(b, size) for b, size in zip(blocks, sizes) if size]
    block_of: npt.NDArray[np.int32] | None = None  # each row's block (among ``kept``), in time order
    for name in Columns.__dataclass_fields__:
        if name == "ts":
            continue
        dtype = _DTYPES.get(name, np.int64)
        absent = -1 if name in _INT_COLUMNS else np.nan
        values = [b.get(name, absent) for b, _ in kept]
        if all(np.ndim(v) == 0 for v in values):
            scalars = np.asarray(values if values else [absent], dtype=dtype)
            if (scalars == scalars[0]).all() or np.isnan(scalars.astype(np.float64)).all():
                out[name] = np.full(total, scalars[0], dtype=dtype)  # one value on every row
            else:  # one value per block: looked up by each row's block
                if block_of is None:
                    block_of = np.repeat(np.arange(len(kept), dtype=np.int32), [size for _, size in kept])
                    block_of = block_of if identity else block_of[order]
                out[name] = scalars[block_of]
            continue
        parts = [np.asarray(v, dtype=dtype) if np.ndim(v) else np.full(size, v, dtype=dtype)
                 for v, (_, size) in zip(values, kept)]
        if identity:
            out[name] = np.concatenate(parts) if len(parts) > 1 else np.array(parts[0], dtype=dtype)
        else:
            out[name] = np.take(np.concatenate(parts) if len(parts) > 1 else parts[0], order)
    return Columns(**out), order


__all__ = ["Block", "Reader", "ReaderOptions", "Strings", "TraceParts", "assemble", "block"]
