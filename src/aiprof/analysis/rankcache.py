"""The rank cache (``aiprof analyze --cache``): a rerun of a many-rank analysis skips the ranks already done.

Each file's result (what the worker sends back: the rank's analysis, findings and arrival rows) is stored as
a rank summary (:mod:`aiprof.analysis.summary`: MessagePack of aiprof's typed records and Arrow IPC tables,
zlib-compressed, tens of kB to a few MB; the rank cache is handed its encoder and decoder) under a key made of

- the file's absolute path, size and modification time (ns): a rewritten or replaced trace is a miss;
- aiprof's version and a fingerprint of its own code (size and mtime of every module): a changed analysis
  never serves an old result, in an editable install too;
- what the work depends on besides the file: the rank hook and its options (rule thresholds, memory mode,
  timeline budget), the reader settings in force.

Lookups and stores happen where ``aiprof analyze`` runs, not on the workers, so one cache serves every
executor. Nothing is unpickled: decoding an entry only builds typed records. Still, an entry someone else
planted would put their numbers in the user's report: the cache folder must belong to the user and be
writable by nobody else (checked on every use; a folder that is not is refused, never read). A damaged entry,
one of another summary version, or one whose tables need pyarrow where it is not installed, is a miss (and
rewritten); a result the summary cannot carry exactly is not stored. Writes are atomic
(``fsutil.atomic_write``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiprof.errors import AiprofError
from aiprof.fsutil import atomic_write

J = TypeVar("J", bound=tuple[Any, ...])
O = TypeVar("O")

ENV = "AIPROF_CACHE_DIR"
SUFFIX = ".summary"


def default_dir() -> Path:
    """``$AIPROF_CACHE_DIR``, else ``$XDG_CACHE_HOME/aiprof/ranks``, else ``~/.cache/aiprof/ranks``."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aiprof" / "ranks"


class RankCache:
    """Results of per-file work by file and context (see the module's docstring)."""

    def __init__(self, folder: Path, context: str, traces: Sequence[Path] = (), *,
                 encode: Callable[[Any], bytes | None], decode: Callable[[bytes], Any]) -> None:
        self.folder = folder
        self.encode, self.decode = encode, decode
        self.context = context
        self.hits = 0
        self.stored = 0
        self._traces = {p.resolve() for p in traces}
        self._beside: dict[Path, str] = {}
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_private(folder)

    def key(self, path: Path) -> str | None:
        """The entry name of a file in this context; None when the file cannot be stat'ed (not cached). The
        files beside it that are not traces of this analysis (a run directory's meta.json, requests, telemetry,
        data-loader tables, memory/ dumps: the rank hook reads them) are part of it."""
        try:
            resolved = path.resolve()
            st = resolved.stat()
        except OSError:
            return None
        beside = self._beside_files(resolved.parent)
        text = "\0".join((str(resolved), str(st.st_size), str(st.st_mtime_ns), self.context, beside))
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()

    def _beside_files(self, folder: Path) -> str:
        """(name, size, mtime) of the non-trace files in ``folder`` and its ``memory/``, once per folder."""
        found = self._beside.get(folder)
        if found is None:
            parts = []
            for sub in (folder, folder / "memory"):
                try:
                    entries = sorted(os.scandir(sub), key=lambda e: e.name)
                except OSError:
                    continue
                for e in entries:
                    try:
                        if e.is_file() and Path(e.path).resolve() not in self._traces:
                            st = e.stat()
                            parts.append(f"{sub.name}/{e.name}:{st.st_size}:{st.st_mtime_ns}")
                    except OSError:
                        continue
            found = self._beside[folder] = "\n".join(parts)
        return found

    def get(self, path: Path) -> Any | None:
        key = self.key(path)
        if key is None:
            return None
        try:
            value = self.decode((self.folder / f"{key}{SUFFIX}").read_bytes())
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - a damaged or foreign entry is a miss, rewritten below
            return None
        self.hits += 1
        return value

    def put(self, path: Path, value: Any) -> None:
        key = self.key(path)
        if key is None:
            return
        data = self.encode(value)
        if data is None:
            return
        atomic_write(self.folder / f"{key}{SUFFIX}", data)
        self.stored += 1


def _check_private(folder: Path) -> None:
    st = folder.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise AiprofError(f"--cache {folder}: the folder belongs to another user; use a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise AiprofError(f"--cache {folder}: the folder is writable by others; chmod go-w it or use another")


def code_fingerprint() -> str:
    """aiprof's version and the size and mtime of each of its modules (cheap: one stat per file)."""
    from aiprof import __version__

    root = Path(__file__).resolve().parents[1]
    parts = [__version__]
    for path in sorted(root.rglob("*.py")) + sorted(root.rglob("*.so")):
        try:
            st = path.stat()
        except OSError:
            continue
        parts.append(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def describe(fn: Any) -> str:
    """A stable description of a worker function (a module-level function or a ``functools.partial`` of
    one): its qualified name and arguments, never an address."""
    import functools

    if fn is None:
        return "none"
    if isinstance(fn, functools.partial):
        keywords = ", ".join(f"{k}={v!r}" for k, v in sorted(fn.keywords.items()))
        return f"partial({describe(fn.func)}, {fn.args!r}, {keywords})"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def cached_map(
    cache: RankCache | None,
    mapper: Callable[[Callable[[J], O], list[J]], list[O]],
    fn: Callable[[J], O],
    jobs: Sequence[J],
    keep: Callable[[O], bool],
) -> list[O]:
    """``mapper(fn, jobs)`` for the jobs ``cache`` has no result for, the cached results for the others, in
    job order; new results for which ``keep`` is true are stored (a file that failed to read is not)."""
    if cache is None:
        return mapper(fn, list(jobs))
    found: list[O | None] = [cache.get(job[0]) for job in jobs]
    todo = [i for i, value in enumerate(found) if value is None]
    fresh = mapper(fn, [jobs[i] for i in todo]) if todo else []
    for i, value in zip(todo, fresh):
        found[i] = value
        if keep(value):
            cache.put(jobs[i][0], value)
    return [value for value in found if value is not None]


__all__ = ["ENV", "SUFFIX", "RankCache", "cached_map", "code_fingerprint", "default_dir", "describe"]
