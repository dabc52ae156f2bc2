"""Nsight Systems: ``nsys export --type sqlite`` databases onto the trace model, with Kineto's semantics.

- kernels, copies, memsets on ``pid = device``, ``tid = stream`` (Kineto's GPU lanes); copies named as
  Kineto names them (``Memcpy HtoD (Pageable -> Device)``), memsets ``Memset (Device)``;
- CUDA runtime (and driver) calls on their CPU thread, names without nsys's version suffix
  (``cudaLaunchKernel_v7000`` → ``cudaLaunchKernel``); nsys may store one call twice under the same
  correlation id (the call and its versioned inner entry point): one row per (correlation id, thread) is
  kept, the outermost; GPU work links to its launch by correlation id, as in Kineto;
- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` rows as ``cuda_sync`` events (``Event Sync``, ``Stream Sync`` …);
- NVTX push/pop and start/end ranges as user annotations on their thread (``ProfilerStep#N`` ranges are the
  steps); with ``--pytorch=autograd-nvtx`` the op ranges (``aten::mm, seq = 3, op_id = 7, sizes = …``)
  become CPU ops with their sequence number and recorded shapes;
- ``TARGET_INFO_GPU`` → device properties (the roofline's peaks come from the device name);
- ``CUDA_GPU_MEMORY_USAGE_EVENTS`` → ``[memory]`` events with the running total per device.

One trace per process that ran GPU work (an MPI job profiled as one report gives one rank per process).
Tables are read whole and joined in numpy (nsys creates no indexes). The schema is told apart by the
columns present, never by the version number. ``META_DATA_CAPTURE``, ``EXPORT_META_DATA`` /
``META_DATA_EXPORT`` and ``TARGET_INFO_SYSTEM_ENV`` hold the whole process environment, the user, host
and paths: nothing is read from them but an allow-list of version fields, selected in SQL.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from aiprof.arrays import unique
from aiprof.errors import TraceError
from aiprof.trace.cores import fork_safe, thread_count
from aiprof.trace.limits import LoadLimits
from aiprof.trace.model import I64, DeviceInfo, Kind, Trace
from aiprof.trace.readers.base import Block, ReaderOptions, Strings, TraceParts, assemble, block

SQLITE_MAGIC = b"SQLite format 3\x00"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX = "NVTX_EVENTS"
MEMORY = "CUDA_GPU_MEMORY_USAGE_EVENTS"
_ACTIVITY = (KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER)
# Version fields of the export metadata: the only rows ever selected from those tables.
_VERSION_FIELDS = {
    "EXPORT_PRODUCT_VERSION": "nsys_version",
    "EXPORT_SCHEMA_VERSION": "nsys_schema_version",
}
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
              10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static"}
_SYNC_NAME = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_NVTX_RANGES = (59, 60)  # push/pop, start/end
_NVTX_MARK = 34
_NVTX_THREAD_NAME = 39
# emit_nvtx (nsys --pytorch=autograd-nvtx) range names: "aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], []]".
_NVTX_OP_FIELDS = re.compile(r", (seq|op_id|sizes|input_op_ids) = ")
_NVTX_OP_NAME = re.compile(r"::|Backward\d*$")
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")
_RANK_IN_NAME = re.compile(r"(?:rank[-_.]?|[._-])(\d+)$", re.IGNORECASE)
_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class SqliteFile:
    """One database file, opened once: ``fd`` (read-only, held for the whole read) and the ``file:`` URI
    SQLite opens it by. The URI is the absolute path with every byte outside ``[A-Za-z0-9_.~/-]``
    percent-encoded (``%``, ``#``, ``?``, ``&`` included), then ``mode=ro&immutable=1``: a file name is
    only ever a name (``real%41.sqlite`` never opens ``realA.sqlite``, ``x#.sqlite`` never drops
    ``mode=ro``), and SQLite neither writes, locks, creates a ``-shm``/``-wal`` file nor rolls back a
    journal. The native b-tree scan reads ``fd``; SQLite's file is checked to be the same inode
    (:meth:`check`)."""

    path: Path  # as the user named it (messages)
    resolved: Path  # absolute, links resolved: the name SQLite opens
    fd: int
    uri: str
    identity: tuple[int, int]  # st_dev, st_ino of ``fd``

    @staticmethod
    def open(path: Path) -> SqliteFile:
        """Raises :class:`TraceError` for a file that cannot be opened, is not a regular file, or does not
        start with SQLite's magic (the file read is the file sniffed)."""
        resolved = Path(os.path.abspath(path)).resolve()
        try:  # O_NONBLOCK: a FIFO given as a database is refused below, never waited on
            fd = os.open(resolved, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except OSError as err:
            raise TraceError(f"{path}: cannot open the SQLite database ({err.strerror or err})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise TraceError(f"{path}: not a regular file (a database must be a file)")
            if os.pread(fd, len(SQLITE_MAGIC), 0) != SQLITE_MAGIC:
                raise TraceError(f"{path}: not an SQLite database (it changed since it was recognised as one?)")
        except BaseException:
            os.close(fd)
            raise
        return SqliteFile(path, resolved, fd, resolved.as_uri() + "?mode=ro&immutable=1", (info.st_dev, info.st_ino))

    def connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.uri, uri=True)
        con.text_factory = lambda raw: raw.decode("utf-8", "replace")  # Windows exports hold Latin-1 text
        return con

    def check(self) -> None:
        """The file SQLite opened by name is still the one held open (nobody renamed another over it)."""
        try:
            info = os.stat(self.resolved)
        except OSError:
            info = None
        if info is None or (info.st_dev, info.st_ino) != self.identity:
            raise TraceError(f"{self.path}: the file was replaced while it was being read; read it again")

    def sidecars(self) -> list[str]:
        """Non-empty ``-wal`` / ``-journal`` files beside the database: not read (the file is read as it is)."""
        base = os.fsencode(self.resolved)
        found = []
        for suffix in (b"-wal", b"-journal"):
            try:
                if os.stat(base + suffix).st_size > 0:
                    found.append(os.fsdecode(suffix))
            except OSError:
                pass
        return found

    def close(self) -> None:
        os.close(self.fd)

    def tree_rows(self, root: int) -> int:
        """The rows of the rowid table whose b-tree starts at page ``root``, counted from the file's pages
        (the cells of its leaves): the most rows any reader of this file can get from that table. Raises
        :class:`TraceError` for a page reached twice: a b-tree is a tree, and a page referenced from two
        places (a crafted or damaged file) would be read once per reference, by SQLite too, a few hundred
        KB giving millions of rows. A page that does not parse stops the count there (SQLite then gives its
        own error, or reads what it can)."""
        import mmap

        size = os.fstat(self.fd).st_size
        if size < 512:
            return 0
        with mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ) as data:
            page_size = int.from_bytes(data[16:18], "big")
            page_size = 65536 if page_size == 1 else page_size
            if page_size < 512 or page_size & (page_size - 1):
                return 0
            pages = size // page_size
            usable = page_size - data[20]
            seen: set[int] = set()
            stack, rows = [root], 0
            while stack:
                pgno = stack.pop()
                if not 1 <= pgno <= pages:
                    continue
                if pgno in seen:
                    raise TraceError(f"{self.path}: the database is damaged: b-tree page {pgno} is referenced "
                                     "twice (its rows would be read again and again); re-export it")
                seen.add(pgno)
                at = (pgno - 1) * page_size + (100 if pgno == 1 else 0)
                kind, cells = data[at], int.from_bytes(data[at + 3:at + 5], "big")
                if kind == 0x0D:
                    rows += cells
                elif kind == 0x05 and 12 + 2 * cells <= usable:
                    stack.append(int.from_bytes(data[at + 8:at + 12], "big"))
                    base = (pgno - 1) * page_size
                    for i in range(cells):
                        ptr = at + 12 + 2 * i
                        offset = int.from_bytes(data[ptr:ptr + 2], "big")
                        if offset + 4 <= usable:
                            stack.append(int.from_bytes(data[base + offset:base + offset + 4], "big"))
            return rows


@dataclass
class _Db:
    path: Path
    con: sqlite3.Connection
    file: SqliteFile  # the open file (the scan reads its fd; other connections open its URI)
    columns: dict[str, set[str]]  # table → its columns (tables with rows or not)
    names: dict[int, str]  # StringIds
    native: Any = None  # the native column reader (_sqlcols), or None: Python's sqlite3 reads everything
    counts: dict[str, int] = field(default_factory=dict)  # table → its checked row count (:meth:`bounded`)
    notes: list[str] = field(default_factory=list)  # warnings about the file (rows left out), for the first trace
    trees: set[str] = field(default_factory=set)  # tables whose b-tree was walked (:meth:`walked`)

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    def ints(self, table: str, exprs: list[str], order: str = "") -> I64:
        """Integer expressions over a whole table, one column each (NULL → -1), as an (n, k) array.

        Reading SQLite from Python costs one Python int per value fetched, so a long table is read packed:
        one aggregate pass (in SQLite, C speed) finds each expression's range, the expressions are packed
        into as few 62-bit words as their ranges allow (a kernel row: 11 fields in 3 words), and the words
        are unpacked in numpy. A table this long is also read in rowid ranges by forked helpers (each with
        its own connection)."""
        # CAST: SQLite's own conversion of a REAL/TEXT/BLOB value (what sqlite3_column_int64 gives the native
        # reader), so that a text where an integer belongs reads the same on every path
        sql_exprs = [f"coalesce(CAST(({e}) AS INTEGER), -1)" for e in exprs]
        self.bounded(table)  # before anything is allocated: a b-tree that claims more rows than it holds
        if self.native is not None and not order:  # the table's b-tree read directly, the expressions in numpy
            scanned = self._scan(table, exprs)
            if scanned is not None:
                return scanned
        self.walked(table)
        if self.native is not None:  # C reads the values straight into int64 rows, NULL as -1 (the coalesce)
            last = 0 if order else self._rows(table)
            sql = f"SELECT {', '.join(f'({e})' for e in exprs)} FROM {table}"
            rows = self._native_rows(f"{sql} {order}" if order else sql, last, len(exprs))
            if last >= _PACK_ROWS:  # the packed read's clamp at -1 (below), in numpy rather than per value in SQL
                np.maximum(rows[:, 1:], -1, out=rows[:, 1:])
            return rows
        if order or self._rows(table) < _PACK_ROWS:
            return _fetch(self.con, f"SELECT {', '.join(sql_exprs)} FROM {table} {order}", (), len(exprs))
        # The first expression (a timestamp) gets a word of its own, unbounded; the others are ids, sizes and
        # durations, non-negative or NULL (-1): clamped at -1 in SQL, so a corrupt negative value can never
        # spill into its neighbours, and only their maximum is needed.
        packed = [f"max({e}, -1)" for e in sql_exprs[1:]]
        highs = self.con.execute(f"SELECT {', '.join(f'max({e})' for e in packed)} FROM {table}").fetchone()
        ranges = [(-1, int(h) if h is not None else -1) for h in highs]
        layout = _Layout.plan([sql_exprs[0], *packed], [(-(1 << 62), 1 << 62), *ranges])
        return layout.unpack(self._words(table, layout.words))

    def _scan(self, table: str, exprs: list[str]) -> I64 | None:
        """``ints`` through the native b-tree scan (:func:`_sqlcols.scan`): the columns the expressions name
        are read raw (no SQLite stepping) and the expressions evaluated in numpy with SQL's NULL rules.
        None where the scan does not apply (a rollback journal or WAL beside the file, generated or
        primary-key columns, defaults, a value SQLite would convert): the caller then asks SQLite. SQLite
        reads the file immutable, as the scan does: neither sees a ``-wal`` or ``-journal`` beside it."""
        parsed = [_SqlExpr.parse(e) for e in exprs]
        if not _SCAN or any(p is None for p in parsed) or not hasattr(self.native, "scan"):
            return None
        layout = self._layout(table)
        if layout is None:
            return None
        root, positions = layout
        names = sorted({n for p in parsed if p is not None for n in p.columns})
        if any(n not in positions for n in names) or not names:
            return None
        count = self.bounded(table)
        try:
            found = self.native.scan(self.file.fd, root, tuple(positions[n] for n in names), count)
        except self.native.Error as err:  # a page reached twice: the walk names it, as on every path
            self.walked(table)
            raise sqlite3.DatabaseError(err.args[0]) from None
        if found is None or found[0] != count:
            return None
        rows, values, nulls, _ = found
        raw = np.frombuffer(values, dtype=np.int64).reshape(len(names), rows)  # column-major
        null = np.frombuffer(nulls, dtype=np.bool_).reshape(len(names), rows)
        bounds = {n: max(abs(int(raw[i].min())), abs(int(raw[i].max()))) if rows else 0 for i, n in enumerate(names)}
        if not all(p is not None and p.fits(bounds) for p in parsed):
            return None  # an operation could overflow int64: SQLite computes it (as a REAL, then clamped)
        env = {n: (raw[i], null[i]) for i, n in enumerate(names)}
        out = np.empty((len(exprs), rows), dtype=np.int64)
        for i, p in enumerate(parsed):
            assert p is not None
            value, missing = p.evaluate(env, rows)
            out[i] = value
            if missing is not None:
                out[i][missing] = -1  # the coalesce(…, -1) of the SQL path
        if count >= _PACK_ROWS:  # the packed read's clamp at -1, as on the other paths
            np.maximum(out[1:], -1, out=out[1:])
        return out.T  # (rows, k) like the other paths, each column contiguous

    def _layout(self, table: str) -> tuple[int, dict[str, int]] | None:
        """A plain rowid table's root page and each stored column's record position; None for anything
        else (WITHOUT ROWID, generated/hidden columns, an INTEGER PRIMARY KEY, defaults)."""
        found = self.con.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                                 (table,)).fetchone()
        if not found or not isinstance(found[0], int) or "WITHOUT ROWID" in str(found[1]).upper():
            return None
        positions: dict[str, int] = {}
        for cid, name, _type, _notnull, default, pk, hidden in self.con.execute(f'PRAGMA table_xinfo("{table}")'):
            if hidden or pk or default is not None:
                return None
            positions[str(name)] = int(cid)
        return int(found[0]), positions

    def _native_rows(self, sql: str, last: int, width: int) -> I64:
        """``sql`` through the native reader; a long table (``last``: its largest rowid, 0 = read it whole)
        in rowid ranges on threads (the reader steps SQLite without the GIL), concatenated in rowid order."""
        parts = _helpers(last)
        if parts < 2:
            return _native_fetch(self.native, self.file.uri, sql, width)
        bounds = np.linspace(0, last, parts + 1).astype(np.int64).tolist()
        where = f"{sql} WHERE rowid BETWEEN ? AND ?"
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(parts) as pool:
            chunks = list(pool.map(lambda r: _native_fetch(self.native, self.file.uri, where, width, (r[0] + 1, r[1])),
                                   zip(bounds[:-1], bounds[1:])))
        return np.concatenate(chunks)

    def bounded(self, table: str) -> int:
        """The table's row count (``count(*)``), checked before anything is allocated for it against what
        a file of this size can hold (a row takes at least 5 bytes: its cell pointer, payload size, rowid
        and record header); cached. A b-tree made a DAG (one page referenced many times) claims more."""
        if table not in self.counts:
            count = int(self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            size = os.fstat(self.file.fd).st_size
            if count > size // 5:
                raise TraceError(f"{self.path}: the database is damaged: table {table} claims {count:,} rows, "
                                 f"more than a file of {size:,} bytes can hold; re-export it")
            self.counts[table] = count
        return self.counts[table]

    def walked(self, table: str) -> None:
        """Before SQLite reads ``table`` (the b-tree scan checks its pages itself): no page of its b-tree
        is referenced twice (:meth:`SqliteFile.tree_rows`), so that every path reads each row once or
        gives the same error."""
        if table in self.trees:
            return
        found = self.con.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?",
                                 (table,)).fetchone()
        if found and isinstance(found[0], int):
            self.file.tree_rows(found[0])
        self.trees.add(table)

    def _rows(self, table: str) -> int:
        last = self.con.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
        return int(last or 0)

    def _words(self, table: str, words: list[str]) -> I64:
        if not words:
            return np.zeros((self.bounded(table), 0), dtype=np.int64)
        sql = f"SELECT {', '.join(words)} FROM {table}"
        last = self._rows(table)
        helpers = _helpers(last)
        if not helpers or not fork_safe():  # not safe under a sanitizer runtime (cores.fork_safe): read here
            return _fetch(self.con, sql, (), len(words))
        bounds = np.linspace(0, last, helpers + 2).astype(np.int64).tolist()
        ranges = [(lo + 1, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        where = f"{sql} WHERE rowid BETWEEN ? AND ?"
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        jobs = [(self.file.uri, where, lo, hi, len(words)) for lo, hi in ranges[1:]]
        with ProcessPoolExecutor(helpers, multiprocessing.get_context("fork")) as pool:
            pending = [pool.submit(_fetch_range, job) for job in jobs]
            first = _fetch(self.con, where, ranges[0], len(words))
            return np.concatenate([first, *(f.result() for f in pending)])

    def name(self, string_id: int) -> str:
        return self.names.get(string_id, "")


class _SqlExpr:
    """The integer SQL expressions the reader asks for (``end - start``, ``(globalPid >> 24) & 16777215``,
    ``gridX * gridY * gridZ``, ``coalesce(correlationId, 0)``, ``-1``), evaluated over numpy columns with
    SQL's NULL rules (an operator over a NULL is NULL; ``coalesce`` takes its first non-NULL argument).
    They are parsed as Python expressions (the syntax they share); anything else is not handled here."""

    _OPS: dict[type, Any] = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply,
                             ast.RShift: np.right_shift, ast.LShift: np.left_shift, ast.BitAnd: np.bitwise_and,
                             ast.BitOr: np.bitwise_or}
    _cache: dict[str, _SqlExpr | None] = {}

    def __init__(self, tree: ast.expr, columns: set[str]) -> None:
        self.tree = tree
        self.columns = columns

    @classmethod
    def parse(cls, text: str) -> _SqlExpr | None:
        if text not in cls._cache:
            try:
                tree = ast.parse(text, mode="eval").body
            except SyntaxError:
                cls._cache[text] = None
                return None
            calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
            names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}
            cls._cache[text] = cls(tree, names) if cls._supported(tree) else None
        return cls._cache[text]

    @classmethod
    def _supported(cls, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return True
        if isinstance(node, ast.Constant):
            return type(node.value) is int and abs(node.value) < 1 << 62
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, ast.USub) and cls._supported(node.operand)
        if isinstance(node, ast.BinOp):
            shift = isinstance(node.op, (ast.RShift, ast.LShift))  # by a constant 0..63 only
            by = node.right.value if isinstance(node.right, ast.Constant) else None
            if shift and not (type(by) is int and 0 <= by < 64):
                return False
            return type(node.op) in cls._OPS and cls._supported(node.left) and cls._supported(node.right)
        if isinstance(node, ast.Call):
            return (isinstance(node.func, ast.Name) and node.func.id == "coalesce" and not node.keywords
                    and len(node.args) >= 2 and all(cls._supported(a) for a in node.args))
        return False

    def evaluate(self, env: dict[str, tuple[I64, npt.NDArray[np.bool_]]], rows: int
                 ) -> tuple[I64 | int, npt.NDArray[np.bool_] | None]:
        """(values, NULL mask or None when no row is NULL)."""
        return self._eval(self.tree, env, rows)

    def fits(self, bounds: dict[str, int]) -> bool:
        """Whether every intermediate value stays inside int64, given each column's largest magnitude
        (``bounds``). SQLite turns an overflowing integer operation into a REAL, numpy wraps it: where an
        operation could overflow the scan gives way to SQLite, so every path gives SQLite's value."""
        return self._bound(self.tree, bounds) < 1 << 63

    def _bound(self, node: ast.expr, bounds: dict[str, int]) -> int:
        """A magnitude no value of ``node`` exceeds (interval arithmetic; an operand past int64 spreads)."""
        if isinstance(node, ast.Name):
            return bounds[node.id]
        if isinstance(node, ast.Constant):
            assert type(node.value) is int
            return abs(node.value)
        if isinstance(node, ast.UnaryOp):
            return self._bound(node.operand, bounds) + 1  # -(-2^63) overflows
        if isinstance(node, ast.Call):
            return max(self._bound(a, bounds) for a in node.args)
        assert isinstance(node, ast.BinOp)
        a, b = self._bound(node.left, bounds), self._bound(node.right, bounds)
        op = type(node.op)
        if op in (ast.Add, ast.Sub):
            return a + b
        if op is ast.Mult:
            return a * b
        if op is ast.LShift:
            return a << b
        if op is ast.RShift:
            return max(a, 1 << 63) if a >= 1 << 63 else (a >> b) + 1
        if max(a, b) >= 1 << 63:
            return max(a, b)
        mask = node.right.value if isinstance(node.right, ast.Constant) else None
        if op is ast.BitAnd and type(mask) is int and mask >= 0:
            return mask  # x & 16777215 is in 0..16777215
        return (1 << 63) - 1  # & and | of two int64 values: an int64

    def _eval(self, node: ast.expr, env: dict[str, tuple[I64, npt.NDArray[np.bool_]]], rows: int
              ) -> tuple[Any, npt.NDArray[np.bool_] | None]:
        if isinstance(node, ast.Name):
            values, where = env[node.id]
            return values, where if where.any() else None
        if isinstance(node, ast.Constant):
            assert type(node.value) is int
            return node.value, None
        if isinstance(node, ast.UnaryOp):
            operand, missing = self._eval(node.operand, env, rows)
            return -operand, missing
        if isinstance(node, ast.BinOp):
            (a, na), (b, nb) = self._eval(node.left, env, rows), self._eval(node.right, env, rows)
            if isinstance(a, int) and isinstance(b, int):
                return int(self._OPS[type(node.op)](np.int64(a), np.int64(b))), None
            value = self._OPS[type(node.op)](np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
            return value, na if nb is None else nb if na is None else na | nb
        assert isinstance(node, ast.Call)  # coalesce
        value, null = self._eval(node.args[0], env, rows)
        for arg in node.args[1:]:
            if null is None:
                break
            other, other_null = self._eval(arg, env, rows)
            value = np.where(null, other, value)
            null = None if other_null is None else null & other_null
        return value, null


_SCAN = True  # the native reader walks the table's b-tree itself (False: every read is an SQLite query)
_PARALLEL_ROWS = 200_000  # a table this long is read by helpers too
_PACK_ROWS = 20_000  # a table this long is read packed (one extra pass in SQLite finds the ranges)
_WORD_BITS = 62  # SQLite integers are signed 64-bit: the packed words stay clear of the sign


@dataclass
class _Layout:
    """Where each expression lives in the packed words: ``(word, shift, bits, offset)``; bits 0 = constant
    (``offset`` is then its value) and never fetched; word -1 with bits 64: a word of its own, unshifted."""

    words: list[str]
    fields: list[tuple[int, int, int, int]]

    @staticmethod
    def plan(exprs: list[str], ranges: list[tuple[int, int]]) -> _Layout:
        words: list[list[str]] = []
        used: list[int] = []
        fields: list[tuple[int, int, int, int]] = []
        for expr, (low, high) in zip(exprs, ranges):
            span = high - low
            if span == 0:
                fields.append((-1, 0, 0, low))
                continue
            bits = span.bit_length()
            if bits > _WORD_BITS - 2:  # too wide to pack: fetched as is
                words.append([expr])
                used.append(_WORD_BITS)
                fields.append((len(words) - 1, 0, 64, 0))
                continue
            slot = next((i for i, u in enumerate(used) if u + bits <= _WORD_BITS), None)
            if slot is None:
                words.append([])
                used.append(0)
                slot = len(words) - 1
            words[slot].append(f"(({expr} - ({low})) << {used[slot]})")
            fields.append((slot, used[slot], bits, low))
            used[slot] += bits
        return _Layout([" | ".join(w) for w in words], fields)

    def unpack(self, words: I64) -> I64:
        columns = np.ascontiguousarray(words.T)  # one contiguous row per word: fast shifts and masks
        out = np.empty((len(self.fields), len(words)), dtype=np.int64)
        for i, (word, shift, bits, offset) in enumerate(self.fields):
            if bits == 0:
                out[i] = offset
            elif bits == 64:
                out[i] = columns[word]
            else:
                np.right_shift(columns[word], shift, out=out[i])
                np.bitwise_and(out[i], (1 << bits) - 1, out=out[i])
                if offset:
                    out[i] += offset
        return out.T


def _helpers(rows: int) -> int:
    if rows < _PARALLEL_ROWS:
        return 0
    return min(thread_count(), rows // _PARALLEL_ROWS)


def _fetch(con: sqlite3.Connection, sql: str, params: tuple[int, ...], width: int) -> I64:
    flat = np.fromiter(itertools.chain.from_iterable(con.execute(sql, params)), dtype=np.int64)
    return flat.reshape(-1, width)


def native_reader() -> Any:
    """The native column reader (``_sqlcols.c``), or None: not built, or ``AIPROF_NATIVE=0``."""
    from aiprof.native import optional

    return optional("aiprof.trace.readers._sqlcols")


def _native_fetch(native: Any, uri: str, sql: str, width: int, params: tuple[int, ...] = ()) -> I64:
    """One query through the native reader (its own read-only connection to ``uri``, a
    :class:`SqliteFile` URI), as an (n, width) array; its errors become sqlite3's, with SQLite's own
    message, so they read as on the Python path."""
    try:
        rows, buffer = native.query(uri.encode("ascii"), sql, width, -1, params)
    except native.Error as err:
        raise sqlite3.DatabaseError(err.args[0]) from None
    return np.frombuffer(buffer, dtype=np.int64).reshape(rows, width)


def _fetch_range(job: tuple[str, str, int, int, int]) -> I64:
    """In a helper: one rowid range of a query, on a connection of its own (``job[0]``: the URI)."""
    uri, sql, lo, hi, width = job
    con = sqlite3.connect(uri, uri=True)
    try:
        return _fetch(con, sql, (lo, hi), width)
    finally:
        con.close()


class NsysReader:
    """Nsight Systems reports: SQLite exports, and ``.nsys-rep`` through ``nsys export``."""

    name = "nsys"

    def sniff(self, head: bytes, path: Path) -> bool:
        return head.startswith(SQLITE_MAGIC) or path.name.lower().endswith(".nsys-rep")

    def read(self, path: Path, options: ReaderOptions) -> list[Trace]:
        if path.name.lower().endswith(".nsys-rep"):
            return _read_report(path, options)
        return read_sqlite(path, options)


def _read_report(path: Path, options: ReaderOptions) -> list[Trace]:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError(
            f"{path}: reading a .nsys-rep needs Nsight Systems' nsys on PATH; or export it yourself with "
            f"`nsys export --type sqlite {path.name}` and pass the .sqlite file"
        )
    with tempfile.TemporaryDirectory(prefix="aiprof-nsys-") as tmp:
        out = Path(tmp) / "report.sqlite"
        done = subprocess.run(  # an absolute path: a name starting with "-" is never read as an option
            [nsys, "export", "--type", "sqlite", "--lazy", "false", "--output", str(out), os.path.abspath(path)],
            capture_output=True, text=True, errors="replace",
        )
        if done.returncode != 0 or not out.exists():
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise TraceError(f"{path}: `nsys export --type sqlite` failed ({last[0][:200]}); export it by hand")
        traces = read_sqlite(out, options)
    for trace in traces:
        trace.path = path
    return traces


def read_sqlite(path: Path, options: ReaderOptions | None = None) -> list[Trace]:
    """Read an ``nsys export --type sqlite`` database: one trace per process that ran GPU work."""
    options = options or ReaderOptions()
    file = SqliteFile.open(path)
    try:
        try:
            con = file.connect()
        except sqlite3.Error as err:
            raise TraceError(f"{path}: cannot open the SQLite database ({err})") from None
        try:
            db = _open(path, con, file, options.limits)
            traces = _read(db, options)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:  # a damaged schema page: undecodable text
            raise TraceError(
                f"{path}: the SQLite database cannot be read ({err}); is the file complete? re-export it with "
                "`nsys export --type sqlite`"
            ) from None
        finally:
            con.close()
        file.check()
        for sidecar in file.sidecars():
            traces[0].warnings.append(f"a {sidecar} file beside the database was not read (aiprof reads the "
                                      "database file as it is and never changes it; checkpoint it first to include it)")
        return traces
    finally:
        file.close()


def _open(path: Path, con: sqlite3.Connection, file: SqliteFile, limits: LoadLimits) -> _Db:
    tables = [row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    file.check()  # SQLite has opened the file by now: the one held open
    columns = {t: {row[1] for row in con.execute(f'PRAGMA table_info("{t}")')} for t in tables
               if t in (*_ACTIVITY, SYNC, NVTX, MEMORY, "StringIds", "TARGET_INFO_GPU", "ThreadNames", "PROCESSES",
                        "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT", "EXPORT_META_DATA", "META_DATA_CAPTURE")}
    if not any(t in columns for t in (KERNEL, MEMCPY, MEMSET, RUNTIME, NVTX)):
        if "StringIds" not in columns:
            raise TraceError(
                f"{path}: an SQLite database, but not an Nsight Systems export (no StringIds, no "
                f"CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS table); export a report with `nsys export --type sqlite`"
            )
        raise TraceError(
            f"{path}: this Nsight Systems export holds no CUDA or NVTX activity; profile with "
            "`nsys profile --trace=cuda,nvtx` and export again"
        )
    if "StringIds" not in columns:
        raise TraceError(f"{path}: the Nsight Systems export has no StringIds table (names of every event); "
                         "re-export it with `nsys export --type sqlite`")
    _require(path, columns)
    db = _Db(path, con, file, columns, {}, native_reader())
    _check_limits(db, limits)
    db.names = {int(i): str(v) for i, v in con.execute(  # an id that is not an integer names nothing
        "SELECT id, CAST(value AS TEXT) FROM StringIds WHERE typeof(id) = 'integer' AND value IS NOT NULL")}
    return db


def _check_limits(db: _Db, limits: LoadLimits) -> None:
    """Before any table is read: every table's rows within what its pages hold (:meth:`_Db.bounded`), the
    file within ``--max-trace-mb`` and the events within ``--max-events``, as the Kineto reader applies
    them (the same one-line errors)."""
    from aiprof.trace import limits as source

    size = os.fstat(db.file.fd).st_size
    if size > limits.max_bytes:
        raise source.too_large(db.path, limits, size)
    tables = [t for t in (*_ACTIVITY, SYNC, NVTX, MEMORY, "StringIds") if db.has(t)]
    events = sum(db.bounded(t) for t in tables if t != "StringIds")
    db.bounded("StringIds")
    if limits.max_events and events > limits.max_events:
        raise source.too_many_events(db.path, limits.max_events)


_REQUIRED = {
    KERNEL: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"),
    MEMCPY: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"),
    MEMSET: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"),
    SYNC: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "syncType"),
    RUNTIME: ("start", "end", "globalTid", "correlationId", "nameId"),
    DRIVER: ("start", "end", "globalTid", "correlationId", "nameId"),
    NVTX: ("start", "end", "eventType", "globalTid"),
}


def _require(path: Path, columns: dict[str, set[str]]) -> None:
    for table, needed in _REQUIRED.items():
        missing = [c for c in needed if table in columns and c not in columns[table]]
        if missing:
            raise TraceError(f"{path}: table {table} lacks column(s) {', '.join(missing)}; this is not an "
                             "nsys export aiprof knows (re-export with a current `nsys export --type sqlite`)")
    if KERNEL in columns and not columns[KERNEL] & {"demangledName", "shortName"}:
        raise TraceError(f"{path}: table {KERNEL} has no kernel name column (demangledName/shortName)")


# ---------------------------------------------------------------------------------------------------
# Reading every table once, then one trace per process
# ---------------------------------------------------------------------------------------------------
@dataclass
class _Tables:
    kernels: I64  # start, end, pid, stream, device, correlation, name, grid, block, registers, smem
    memcpy: I64  # start, end, pid, stream, device, correlation, bytes, copy, src, dst
    memset: I64  # start, end, pid, stream, device, correlation, bytes, memkind
    sync: I64  # start, end, pid, stream, device, correlation, type
    runtime: I64  # start, end, pid, tid, correlation, name
    driver: I64
    nvtx: _Nvtx  # start, end, type, pid, tid, label
    memory: I64  # start, pid, device, bytes, operation


def _pid(expr: str) -> str:
    return f"(({expr} >> 24) & 16777215)"


# A time (ns) or a duration past ±2^61 (73 years) is no recording's: such a row is left out (with a warning),
# so that no sum or difference of times can overflow int64 downstream. Bytes of one memory event: ±2^44.
MAX_TIME_NS = 1 << 61
MAX_EVENT_BYTES = 1 << 44


def _in_range(db: _Db, table: str, rows: I64, limits: dict[int, int]) -> I64:
    """``rows`` without those whose column ``c`` is past ±``limits[c]``; how many were left out goes to
    ``db.notes``."""
    bad = np.zeros(len(rows), dtype=bool)
    for column, limit in limits.items():
        bad |= (rows[:, column] < -limit) | (rows[:, column] > limit)
    if not bad.any():
        return rows
    db.notes.append(f"{int(bad.sum())} rows of {table} with a time or size out of range (past 2^61 ns or "
                    "2^44 bytes) were left out")
    return rows[~bad]


def _device_rows(db: _Db, table: str, extra: list[str]) -> I64:
    """start, end, pid, stream, device, correlation, then ``extra`` (one column each)."""
    if not db.has(table):
        return np.zeros((0, 6 + len(extra)), dtype=np.int64)
    rows = db.ints(table, ["start", "end - start", _pid("globalPid"), "streamId", "deviceId",
                           "coalesce(correlationId, 0)", *extra])
    rows = _in_range(db, table, rows, {0: MAX_TIME_NS, 1: MAX_TIME_NS})
    rows[:, 1] += rows[:, 0]
    rows[rows[:, 3] == _U32, 3] = -1  # 0xFFFFFFFF: no stream (context-wide)
    _correlation(rows[:, 5])
    return rows


def _correlation(values: I64) -> None:
    """Correlation id 0 (none) → -1, in place."""
    values[values == 0] = -1


def _kernels(db: _Db) -> I64:
    """start, end, pid, stream, device, correlation, name, grid, block, registers, shared memory, then
    grid x, y, z and block x, y, z (-1 where the table lacks them)."""
    if not db.has(KERNEL):
        return np.zeros((0, 17), dtype=np.int64)
    name = "demangledName" if db.has(KERNEL, "demangledName") else "shortName"
    smem = " + ".join(c for c in ("staticSharedMemory", "dynamicSharedMemory") if db.has(KERNEL, c)) or "-1"
    grid = "gridX * gridY * gridZ" if db.has(KERNEL, "gridZ") else "-1"
    threads = "blockX * blockY * blockZ" if db.has(KERNEL, "blockZ") else "-1"
    regs = "registersPerThread" if db.has(KERNEL, "registersPerThread") else "-1"
    dims = [c if db.has(KERNEL, c) else "-1" for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")]
    return _device_rows(db, KERNEL, [name, grid, threads, regs, smem, *dims])


def _api_rows(db: _Db, table: str) -> I64:
    """start, end, pid, tid, correlation, name."""
    if not db.has(table):
        return np.zeros((0, 6), dtype=np.int64)
    rows = db.ints(table, ["start", "end - start", _pid("globalTid"), "globalTid & 16777215",
                           "coalesce(correlationId, 0)", "nameId"])
    rows = _in_range(db, table, rows, {0: MAX_TIME_NS, 1: MAX_TIME_NS})
    rows[:, 1] += rows[:, 0]
    _correlation(rows[:, 4])
    return rows


@dataclass
class _Nvtx:
    """NVTX events (marks, ranges, thread names), in table order: ``rows`` = start, end (-1: none), event
    type, pid, tid, label (an index into ``labels``: the inline text, else the StringIds text, else "")."""

    rows: I64
    labels: list[str]

    @staticmethod
    def empty() -> _Nvtx:
        return _Nvtx(np.zeros((0, 6), dtype=np.int64), [""])


_NVTX_KINDS = (_NVTX_MARK, _NVTX_THREAD_NAME, *_NVTX_RANGES)


def _int(column: str) -> str:
    """A column as SQLite converts it to an integer (what the native reader's sqlite3_column_int64 gives)."""
    return f"CAST({column} AS INTEGER)"


def _nvtx_rows(db: _Db) -> _Nvtx:
    if not db.has(NVTX):
        return _Nvtx.empty()
    scanned = _nvtx_scan(db)
    if scanned is not None:
        return scanned
    db.walked(NVTX)
    text = "text" if db.has(NVTX, "text") else "NULL"
    text_id = "textId" if db.has(NVTX, "textId") else "NULL"
    sql = (f"SELECT {_int('start')}, coalesce({_int('end')}, -1), {_int('eventType')}, "
           f"coalesce({_int('globalTid')}, 0), {text}, {_int(text_id)} FROM {NVTX} WHERE {_int('eventType')} IN "
           f"(34, 39, 59, 60) AND start IS NOT NULL")
    out = []
    labels: dict[str, int] = {"": 0}
    for start, end, kind, gtid, inline, tid_ref in db.con.execute(sql):
        label = inline if isinstance(inline, str) else db.name(int(tid_ref)) if tid_ref is not None else ""
        out.append((int(start), int(end), int(kind), (int(gtid) >> 24) & 0xFFFFFF, int(gtid) & 0xFFFFFF,
                    labels.setdefault(label, len(labels))))
    rows = np.array(out, dtype=np.int64).reshape(-1, 6)
    return _Nvtx(_in_range(db, NVTX, rows, {0: MAX_TIME_NS, 1: MAX_TIME_NS}), list(labels))


def _nvtx_scan(db: _Db) -> _Nvtx | None:
    """NVTX through the native b-tree scan, its inline texts interned in C (one Python string per distinct
    text, not per row); None where the scan does not apply (the SQL above then reads it)."""
    if not _SCAN or db.native is None or not hasattr(db.native, "scan"):
        return None
    layout = db._layout(NVTX)
    if layout is None:
        return None
    root, positions = layout
    names = ["start", "end", "eventType", "globalTid", "textId", "text"]
    present = [n for n in names if n in positions]
    if present[:3] != ["start", "end", "eventType"]:
        return None
    count = db.bounded(NVTX)
    text_slot = (present.index("text"),) if "text" in present else ()
    try:
        found = db.native.scan(db.file.fd, root, tuple(positions[n] for n in present), count, text_slot)
    except db.native.Error as err:
        db.walked(NVTX)
        raise sqlite3.DatabaseError(err.args[0]) from None
    if found is None or found[0] != count:
        return None
    rows, values, nulls, texts = found
    raw = dict(zip(present, np.frombuffer(values, dtype=np.int64).reshape(len(present), rows)))
    null = dict(zip(present, np.frombuffer(nulls, dtype=np.bool_).reshape(len(present), rows)))
    if null["start"].any():
        return None
    kind = np.where(null["eventType"], -1, raw["eventType"])
    keep = np.isin(kind, _NVTX_KINDS)
    end = np.where(null["end"], -1, raw["end"])
    gtid = np.where(null["globalTid"], 0, raw["globalTid"]) if "globalTid" in raw else np.zeros(rows, dtype=np.int64)
    # labels: the inline text, else the StringIds text of textId, else ""
    labels = [""] + [t.decode("utf-8", "replace") for t in texts]
    label = np.zeros(rows, dtype=np.int64)
    if "text" in raw:
        label = np.where(null["text"], 0, raw["text"] + 1)
    if "textId" in raw:
        by_id = keep & (label == 0) & ~null["textId"]
        if by_id.any():
            ids = raw["textId"][by_id]
            distinct, inverse = np.unique(ids, return_inverse=True)
            index = {text: i for i, text in enumerate(labels)}
            mapped = np.array([index.setdefault(db.name(int(i)), len(index)) for i in distinct.tolist()], dtype=np.int64)
            labels = list(index)
            label[by_id] = mapped[inverse.reshape(-1)]
    out = np.stack([raw["start"], end, kind, (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF, label], axis=1)[keep]
    return _Nvtx(_in_range(db, NVTX, out, {0: MAX_TIME_NS, 1: MAX_TIME_NS}), labels)


def _memory_rows(db: _Db) -> I64:
    needed = ("start", "globalPid", "deviceId", "bytes", "memoryOperationType")
    if not all(db.has(MEMORY, c) for c in needed):
        return np.zeros((0, 5), dtype=np.int64)
    rows = db.ints(MEMORY, ["start", _pid("globalPid"), "deviceId", "bytes", "memoryOperationType"],
                   order="ORDER BY start")
    return _in_range(db, MEMORY, rows, {0: MAX_TIME_NS, 3: MAX_EVENT_BYTES})


def _tables(db: _Db) -> _Tables:
    return _Tables(
        kernels=_kernels(db),
        memcpy=_device_rows(db, MEMCPY, ["bytes", "copyKind",
                                         "srcKind" if db.has(MEMCPY, "srcKind") else "-1",
                                         "dstKind" if db.has(MEMCPY, "dstKind") else "-1"]),
        memset=_device_rows(db, MEMSET, ["bytes", "memKind" if db.has(MEMSET, "memKind") else "-1"]),
        sync=_device_rows(db, SYNC, ["syncType"]),
        runtime=_api_rows(db, RUNTIME),
        driver=_api_rows(db, DRIVER),
        nvtx=_nvtx_rows(db),
        memory=_memory_rows(db),
    )


def _read(db: _Db, options: ReaderOptions) -> list[Trace]:
    tables = _tables(db)
    # The ranks: processes with GPU work; else processes with CUDA calls; else with NVTX ranges.
    with_work = unique(np.concatenate([tables.kernels[:, 2], tables.memcpy[:, 2], tables.memset[:, 2]])).tolist()
    with_calls = unique(np.concatenate([tables.runtime[:, 2], tables.driver[:, 2]])).tolist()
    nvtx = tables.nvtx.rows
    pids = with_work or with_calls or unique(nvtx[np.isin(nvtx[:, 2], _NVTX_RANGES), 3]).tolist()
    if not pids:
        raise TraceError(f"{db.path}: the Nsight Systems export holds no CUDA or NVTX activity; profile with "
                         "`nsys profile --trace=cuda,nvtx` and export again")
    shared = _shared_facts(db)
    traces = [_process_trace(db, tables, int(pid), shared, options) for pid in pids]
    idle = sorted(set(with_calls) - set(pids))
    if idle:
        traces[0].warnings.append(f"{len(idle)} process(es) made CUDA calls but ran no GPU work (left out: "
                                  f"pid {', '.join(map(str, idle[:5]))})")
    _number_ranks(db, traces)
    traces[0].warnings.extend(db.notes)
    return traces


@dataclass
class _Shared:
    devices: list[DeviceInfo]
    metadata: dict[str, Any]
    base_time_ns: int
    thread_names: dict[tuple[int, int], str]
    process_names: dict[int, str]
    sm_count: dict[int, int]


def _shared_facts(db: _Db) -> _Shared:
    devices: list[DeviceInfo] = []
    sm_count: dict[int, int] = {}
    if db.has("TARGET_INFO_GPU", "id"):
        wanted = ["id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor", "maxWarpsPerSm",
                  "threadsPerWarp", "maxRegistersPerSm", "maxShmemPerSm"]
        cols = [c if db.has("TARGET_INFO_GPU", c) else "NULL" for c in wanted]
        for row in db.con.execute(f"SELECT {', '.join(cols)} FROM TARGET_INFO_GPU ORDER BY id"):
            devices.append(_device_info(dict(zip(wanted, row))))
            sm_count[devices[-1].index] = devices[-1].num_sms
    metadata: dict[str, Any] = {"source": "nsys"}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table, "name") and db.has(table, "value"):
            marks = ", ".join("?" * len(_VERSION_FIELDS))
            for name, value in db.con.execute(f"SELECT name, value FROM {table} WHERE name IN ({marks})",
                                              list(_VERSION_FIELDS)):
                metadata[_VERSION_FIELDS[name]] = str(value)
    base = 0
    if db.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        found = db.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        base = int(found[0]) if found and isinstance(found[0], int) else 0
    threads: dict[tuple[int, int], str] = {}
    if db.has("ThreadNames", "nameId") and db.has("ThreadNames", "globalTid"):
        for name_id, gtid in db.con.execute(f"SELECT {_int('nameId')}, {_int('globalTid')} FROM ThreadNames "
                                            "WHERE nameId IS NOT NULL AND globalTid IS NOT NULL"):
            threads[((int(gtid) >> 24) & 0xFFFFFF, int(gtid) & 0xFFFFFF)] = db.name(int(name_id))
    processes: dict[int, str] = {}
    if db.has("PROCESSES", "pid") and db.has("PROCESSES", "name"):
        for pid, name in db.con.execute("SELECT pid, name FROM PROCESSES"):
            if isinstance(pid, int) and isinstance(name, str) and name:
                processes[pid] = name.rsplit("/", 1)[-1]  # the program, never its directory
    return _Shared(devices, metadata, base, threads, processes, sm_count)


def _device_info(row: dict[str, Any]) -> DeviceInfo:
    def num(key: str) -> int:
        value = row.get(key)
        return int(value) if isinstance(value, int) else 0

    major = row.get("computeMajor")
    warp = num("threadsPerWarp") or 32
    return DeviceInfo(
        index=num("id"),
        name=str(row.get("name") or ""),
        total_memory_bytes=num("totalMemory"),
        num_sms=num("smCount"),
        compute_capability=f"{major}.{row.get('computeMinor')}" if isinstance(major, int) and major else "",
        max_threads_per_sm=num("maxWarpsPerSm") * warp,
        regs_per_sm=num("maxRegistersPerSm"),
        shared_mem_per_sm=num("maxShmemPerSm"),
        warp_size=warp,
    )


# ---------------------------------------------------------------------------------------------------
# One process → one trace
# ---------------------------------------------------------------------------------------------------
def _process_trace(db: _Db, tables: _Tables, pid: int, shared: _Shared, options: ReaderOptions) -> Trace:
    strings = Strings()
    parts = TraceParts(
        devices=list(shared.devices),
        metadata=dict(shared.metadata),
        base_time_ns=shared.base_time_ns,
        thread_names={k: v for k, v in shared.thread_names.items() if k[0] == pid},
        process_names={pid: shared.process_names[pid]} if pid in shared.process_names else {},
    )
    runtime, dropped = _dedupe_calls(_of(tables.runtime, 2, pid))
    driver, dropped_driver = _dedupe_calls(_of(tables.driver, 2, pid))
    parts.blocks.append(_api_block(db, runtime, Kind.RUNTIME, "cuda_runtime", strings))
    parts.blocks.append(_api_block(db, driver, Kind.DRIVER, "cuda_driver", strings))
    kernels = _of(tables.kernels, 2, pid)
    parts.blocks.append(_kernel_block(db, kernels, shared.sm_count, strings))
    parts.blocks.append(_memcpy_block(_of(tables.memcpy, 2, pid), strings))
    parts.blocks.append(_memset_block(_of(tables.memset, 2, pid), strings))
    parts.blocks.append(_sync_block(_of(tables.sync, 2, pid), strings))
    _nvtx_blocks(tables.nvtx, pid, parts, strings, options)
    parts.blocks.append(_memory_block(_of(tables.memory, 1, pid), pid, strings))
    parts.event_count = sum(len(b["ts"]) for b in parts.blocks) + dropped + dropped_driver
    parts.metadata["nsys_duplicate_calls_dropped"] = dropped + dropped_driver
    orphans = _orphans(kernels, runtime, driver)
    parts.metadata["nsys_kernels_without_launch"] = orphans
    if orphans:
        parts.warnings.append(
            f"{orphans} of {len(kernels)} kernels have no launch call in the report (kept; launch-based "
            "attribution skips them: was the CUDA API trace started after they were launched?)"
        )
    return assemble(db.path, parts, strings.table)


def _of(rows: I64, column: int, pid: int) -> I64:
    """The rows of process ``pid`` (``column`` holds the pid); all of them without a copy when they all are."""
    mine = rows[:, column] == pid
    return rows if mine.all() else rows[mine]


def _dedupe_calls(rows: I64) -> tuple[I64, int]:
    """One call per (correlation id, thread): the outermost (earliest start, then longest). Calls without a
    correlation id are all kept. Returns the rows kept (in start order) and how many were dropped."""
    if not len(rows):
        return rows, 0
    corr = np.sort(rows[:, 4])
    if not ((corr[1:] == corr[:-1]) & (corr[1:] >= 0)).any():  # no correlation id twice: nothing to drop
        if bool((rows[1:, 0] >= rows[:-1, 0]).all()):  # already in start order (the usual export): no copy
            return rows, 0
        return rows[np.argsort(rows[:, 0], kind="stable")], 0
    order = np.lexsort((rows[:, 0] - rows[:, 1], rows[:, 0], rows[:, 3], rows[:, 4]))
    ordered = rows[order]
    corr, tid = ordered[:, 4], ordered[:, 3]
    first = np.ones(len(ordered), dtype=bool)
    first[1:] = (corr[1:] != corr[:-1]) | (tid[1:] != tid[:-1])
    keep = first | (corr < 0)
    kept = ordered[keep]
    return kept[np.argsort(kept[:, 0], kind="stable")], int((~keep).sum())


def _orphans(kernels: I64, runtime: I64, driver: I64) -> int:
    launched = np.concatenate([runtime[:, 4], driver[:, 4]])
    return int((~np.isin(kernels[:, 5], launched[launched >= 0])).sum())


def _names(db: _Db, ids: I64, strings: Strings, clean: Any = None) -> npt.NDArray[np.int32]:
    """nsys string ids → our string ids (one lookup per distinct id)."""
    if not len(ids):
        return np.zeros(0, dtype=np.int32)
    distinct, inverse = _distinct(ids)
    texts = [db.name(int(i)) for i in distinct.tolist()]
    mapped = np.array([strings(clean(t) if clean else t) for t in texts], dtype=np.int32)
    return mapped[inverse]


def _distinct(values: I64) -> tuple[I64, npt.NDArray[np.intp]]:
    """``np.unique(values, return_inverse=True)``; small non-negative values (string ids, codes) by a
    counting table, in linear time instead of a sort of every row."""
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= max(1 << 16, 4 * len(values)):
        distinct, inverse = np.unique(values, return_inverse=True)
        return distinct, inverse.reshape(-1)
    distinct = np.flatnonzero(np.bincount(values, minlength=high + 1)).astype(np.int64)
    place = np.zeros(high + 1, dtype=np.intp)
    place[distinct] = np.arange(len(distinct))
    return distinct, place[values]


def _api_block(db: _Db, rows: I64, kind: Kind, cat: str, strings: Strings) -> Block:
    return block(
        len(rows), kind=int(kind), cat=strings(cat), ts=rows[:, 0], dur=rows[:, 1] - rows[:, 0],
        pid=rows[:, 2], tid=rows[:, 3], correlation=rows[:, 4],
        name=_names(db, rows[:, 5], strings, lambda t: _VERSION_SUFFIX.sub("", t)),
    )


def _device_columns(rows: I64) -> dict[str, Any]:
    return {"ts": rows[:, 0], "dur": rows[:, 1] - rows[:, 0], "pid": rows[:, 4], "tid": rows[:, 3],
            "device": rows[:, 4], "correlation": rows[:, 5]}


def _kernel_block(db: _Db, rows: I64, sm_count: dict[int, int], strings: Strings) -> Block:
    table = np.zeros(max([*sm_count, 0]) + 1, dtype=np.float64)
    for device, count in sm_count.items():
        table[device] = count
    devices = rows[:, 4]
    sms = np.where((devices >= 0) & (devices < len(table)), table[np.clip(devices, 0, len(table) - 1)], 0.0)
    grid, threads = rows[:, 7].astype(np.float64), rows[:, 8].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # Kineto's "blocks per SM" / "warps per SM"
        blocks_per_sm = np.where((sms > 0) & (grid >= 0), grid / sms, np.nan)
        warps_per_sm = np.where((sms > 0) & (grid >= 0), grid * np.ceil(threads / 32) / sms, np.nan)
    return block(
        len(rows), kind=int(Kind.KERNEL), cat=strings("kernel"), name=_names(db, rows[:, 6], strings),
        grid=rows[:, 7], block=rows[:, 8], registers=rows[:, 9], shared_memory=rows[:, 10],
        blocks_per_sm=blocks_per_sm, warps_per_sm=warps_per_sm, **_device_columns(rows),
        **{f"{what}_{axis}": _int32(rows[:, 11 + i]) for i, (what, axis) in enumerate(
            (w, a) for w in ("grid", "block") for a in "xyz")},
    )


def _int32(values: I64) -> npt.NDArray[np.int32]:
    """Grid / block sizes as int32; outside [0, 2^31) (corrupt rows) -1."""
    return np.where((values >= 0) & (values < 1 << 31), values, -1).astype(np.int32)


def _labels(codes: I64, label: Any, strings: Strings) -> npt.NDArray[np.int32]:
    if not len(codes):
        return np.zeros(0, dtype=np.int32)
    distinct, inverse = _distinct(codes)
    return np.array([strings(label(int(c))) for c in distinct.tolist()], dtype=np.int32)[inverse]


def _memcpy_block(rows: I64, strings: Strings) -> Block:
    def label(code: int) -> str:
        copy, src, dst = code >> 16, (code >> 8) & 0xFF, code & 0xFF
        return (f"Memcpy {_COPY_KIND.get(copy, 'Unknown')} "
                f"({_MEM_KIND.get(src, 'Unknown')} -> {_MEM_KIND.get(dst, 'Unknown')})")

    codes = (rows[:, 7] << 16) | ((rows[:, 8] & 0xFF) << 8) | (rows[:, 9] & 0xFF)
    return block(len(rows), kind=int(Kind.MEMCPY), cat=strings("gpu_memcpy"), name=_labels(codes, label, strings),
                 nbytes=rows[:, 6], **_device_columns(rows))


def _memset_block(rows: I64, strings: Strings) -> Block:
    names = _labels(rows[:, 7], lambda k: f"Memset ({_MEM_KIND.get(k, 'Unknown')})", strings)
    return block(len(rows), kind=int(Kind.MEMSET), cat=strings("gpu_memset"), name=names, nbytes=rows[:, 6],
                 **_device_columns(rows))


def _sync_block(rows: I64, strings: Strings) -> Block:
    names = _labels(rows[:, 6], lambda k: _SYNC_NAME.get(k, "Unknown Sync"), strings)
    return block(len(rows), kind=int(Kind.SYNC), cat=strings("cuda_sync"), name=names, **_device_columns(rows))


def _memory_block(rows: I64, pid: int, strings: Strings) -> Block:
    signed = np.where(rows[:, 4] == 1, -rows[:, 3], rows[:, 3])  # operation 1: deallocation
    total = np.zeros(len(rows), dtype=np.int64)
    for device in unique(rows[:, 2]).tolist():
        on = rows[:, 2] == device
        total[on] = np.cumsum(signed[on])
    return block(len(rows), kind=int(Kind.MEMORY), cat=strings("cpu_instant_event"), name=strings("[memory]"),
                 ts=rows[:, 0], dur=0, pid=pid, tid=pid, nbytes=signed, total_allocated=total,
                 mem_device=rows[:, 2])


def _nvtx_blocks(nvtx: _Nvtx, pid: int, parts: TraceParts, strings: Strings, options: ReaderOptions) -> None:
    """Ranges → annotations or (emit_nvtx) CPU ops; marks → instants; thread names → thread names.

    In numpy over the rows; each distinct label is parsed once (autograd-nvtx repeats the same op names and
    shapes), and names are interned in the order of their first row, as a row-by-row pass would."""
    rows = nvtx.rows[nvtx.rows[:, 3] == pid]
    kind = rows[:, 2]
    for tid, label in rows[(kind == _NVTX_THREAD_NAME), :][:, [4, 5]].tolist():
        if nvtx.labels[label]:
            parts.thread_names[(pid, tid)] = nvtx.labels[label]
    is_mark = kind == _NVTX_MARK
    rows = rows[is_mark | (np.isin(kind, _NVTX_RANGES) & (rows[:, 1] >= rows[:, 0]))]
    is_mark = rows[:, 2] == _NVTX_MARK
    first_row = sum(len(b["ts"]) for b in parts.blocks)  # this block's first row among all the blocks
    # Per distinct (label, mark?): its name, sequence number, kind and recorded inputs.
    keys = rows[:, 5] * 2 + is_mark
    distinct, inverse = np.unique(keys, return_inverse=True) if len(keys) else (np.zeros(0, np.int64), np.zeros(0, np.intp))
    inverse = inverse.reshape(-1)
    parsed = []
    for key in distinct.tolist():
        text = nvtx.labels[key // 2]
        parsed.append((text, -1, int(Kind.INSTANT), None) if key % 2 else _nvtx_range(text))
    names = [p[0] for p in parsed]
    seqs = np.array([p[1] for p in parsed], dtype=np.int64)
    kinds = np.array([p[2] for p in parsed], dtype=np.int64)
    has_inputs = np.array([p[3] is not None for p in parsed], dtype=bool)
    ranges_kind = kinds[inverse] if len(parsed) else np.zeros(0, dtype=np.int64)
    op_at = np.flatnonzero(has_inputs[inverse]) if len(parsed) else np.zeros(0, dtype=np.intp)
    parts.op_rows.extend((op_at + first_row).tolist())
    parts.op_texts.extend(parsed[int(inverse[i])][3] for i in op_at.tolist())  # type: ignore[misc]
    starts = rows[:, 0]
    ends = np.where(is_mark, starts, rows[:, 1])
    tids = rows[:, 4]
    seq = seqs[inverse] if len(parsed) else np.zeros(0, dtype=np.int64)
    # each row's name (an index into ``names``, merged by text), interned in order of first appearance
    text_index: dict[str, int] = {}
    name_of_parsed = np.array([text_index.setdefault(n, len(text_index)) for n in names], dtype=np.int64)
    row_name = name_of_parsed[inverse] if len(parsed) else np.zeros(0, dtype=np.int64)
    texts = list(text_index)
    if options.step_range:
        ranges = [(s, e, t, k, texts[n], q) for s, e, t, k, n, q in zip(
            starts.tolist(), ends.tolist(), tids.tolist(), ranges_kind.tolist(), row_name.tolist(), seq.tolist())]
        extra = _step_ranges(ranges, options.step_range)
        if extra:
            starts = np.concatenate([starts, np.array([r[0] for r in extra], dtype=np.int64)])
            ends = np.concatenate([ends, np.array([r[1] for r in extra], dtype=np.int64)])
            tids = np.concatenate([tids, np.array([r[2] for r in extra], dtype=np.int64)])
            ranges_kind = np.concatenate([ranges_kind, np.array([r[3] for r in extra], dtype=np.int64)])
            seq = np.concatenate([seq, np.array([r[5] for r in extra], dtype=np.int64)])
            row_name = np.concatenate([row_name, np.array([text_index.setdefault(r[4], len(text_index))
                                                           for r in extra], dtype=np.int64)])
            texts = list(text_index)
    if not len(starts):
        return
    cats = {int(Kind.CPU_OP): strings("cpu_op"), int(Kind.USER_ANNOTATION): strings("user_annotation"),
            int(Kind.INSTANT): strings("nvtx_mark")}
    order_seen, first = np.unique(row_name, return_index=True)
    ids = np.zeros(len(texts), dtype=np.int64)
    for n in order_seen[np.argsort(first, kind="stable")].tolist():
        ids[n] = strings(texts[n])
    cat_of = np.zeros(max(cats) + 1, dtype=np.int64)
    for k, v in cats.items():
        cat_of[k] = v
    parts.blocks.append(block(
        len(starts), kind=ranges_kind, cat=cat_of[ranges_kind], name=ids[row_name], ts=starts, dur=ends - starts,
        pid=pid, tid=tids, seq=seq,
    ))


def _nvtx_range(text: str) -> tuple[str, int, int, bytes | None]:
    """A range's name, sequence number, kind (CPU op or annotation) and recorded inputs (canonical JSON).

    autograd-nvtx makes every op range's text distinct (its seq and op_id), but names and shapes repeat:
    the shapes' JSON and the name's test are cached, so each text costs a few regex searches."""
    found = _NVTX_OP_FIELDS.search(text)
    if found is None:
        return text, -1, int(Kind.USER_ANNOTATION), None
    name, rest = text[: found.start()], text[found.start():]
    seq_found = _SEQ.search(rest)
    seq = int(seq_found.group(1)) if seq_found else -1
    sizes = _SIZES.search(rest) or _SIZES_EMPTY.search(rest)
    inputs = _inputs_json(sizes.group(1)) if sizes else None
    is_op = inputs is not None or _op_like(name)  # name != text here: the fields were found
    return name, seq, int(Kind.CPU_OP if is_op else Kind.USER_ANNOTATION), inputs


_SEQ = re.compile(r", seq = (\d+)")
_SIZES = re.compile(r", sizes = (\[.*?\]\])(?:, input_op_ids|$)")
_SIZES_EMPTY = re.compile(r", sizes = (\[\])")


@functools.lru_cache(maxsize=65536)
def _op_like(name: str) -> bool:
    return bool(_NVTX_OP_NAME.search(name))


@functools.lru_cache(maxsize=65536)
def _inputs_json(sizes: str) -> bytes | None:
    """``[[2, 3], [3, 4]]`` → the op's recorded inputs as canonical JSON; None when it is not a JSON list."""
    shapes = _shapes(sizes)
    return None if shapes is None else json.dumps({"Input Dims": shapes}, separators=(",", ":")).encode()


def _shapes(sizes: str) -> list[Any] | None:
    try:
        decoded = json.loads(sizes)
    except ValueError:
        return None
    return decoded if isinstance(decoded, list) else None


def _nvtx_op(text: str) -> tuple[str, int, list[Any] | None]:
    """``aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], [3, 4]]`` → (``aten::mm``, 3, shapes)."""
    found = _NVTX_OP_FIELDS.search(text)
    if found is None:
        return text, -1, None
    name, rest = text[: found.start()], text[found.start():]
    seq = _SEQ.search(rest)
    sizes = _SIZES.search(rest) or _SIZES_EMPTY.search(rest)
    return name, int(seq.group(1)) if seq else -1, _shapes(sizes.group(1)) if sizes else None


def _step_ranges(ranges: list[tuple[int, int, int, int, str, int]], pattern: str) -> list[tuple[int, int, int, int, str, int]]:
    """``--step-range REGEX``: each matching range also becomes ``ProfilerStep#i`` over the same span."""
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise TraceError(f"--step-range {pattern!r} is not a regular expression ({err})") from None
    hits = sorted(r for r in ranges if r[3] != int(Kind.INSTANT) and regex.search(r[4]))
    if not hits:
        raise TraceError(f"--step-range {pattern!r} matches no NVTX range in the report; check the range names")
    return [(s, e, tid, int(Kind.USER_ANNOTATION), f"ProfilerStep#{i}", -1) for i, (s, e, tid, *_) in enumerate(hits)]


# Launchers' rank variables, by priority. Only these rows of the captured environment are ever selected
# (in SQL), and only the number is kept.
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID", "RANK")


def _env_rank(db: _Db) -> int | None:
    """The launched process's rank from its captured environment (``PMI_RANK="3"``), else None."""
    if not (db.has("META_DATA_CAPTURE", "name") and db.has("META_DATA_CAPTURE", "value")):
        return None
    wanted = " OR ".join("value LIKE ?" for _ in _RANK_VARIABLES)
    found: dict[str, set[int]] = {}
    for (value,) in db.con.execute(
        f"SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE' AND ({wanted})",
        [f"{v}=%" for v in _RANK_VARIABLES],
    ):
        key, _, number = str(value).partition("=")
        number = number.strip().strip('"').strip("'")
        if key in _RANK_VARIABLES and number.isdigit():
            found.setdefault(key, set()).add(int(number))
    for key in _RANK_VARIABLES:
        if len(found.get(key, ())) == 1:
            return found[key].pop()
    return None


def _number_ranks(db: _Db, traces: list[Trace]) -> None:
    """MPI rank from nsys's ``MPI Rank N`` thread name; else, for a report of one process, from the rank
    variable of its captured environment (``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``SLURM_PROCID`` …), else
    from the file name's trailing number (``report.3.sqlite``, ``rank3``); otherwise left to the run's
    numbering (file/process order)."""
    for trace in traces:
        for name in trace.thread_names.values():
            found = _MPI_RANK.match(name)
            if found:
                trace.distributed = {"rank": int(found.group(1)), "backend": "mpi"}
                break
    if len(traces) != 1 or "rank" in traces[0].distributed:
        return
    rank = _env_rank(db)
    if rank is None:
        stem = db.path.name.split(".sqlite")[0].split(".nsys-rep")[0]
        named = _RANK_IN_NAME.search(stem)
        rank = int(named.group(1)) if named else None
    if rank is not None:
        traces[0].distributed = {"rank": rank}


__all__ = ["NsysReader", "SQLITE_MAGIC", "read_sqlite"]
