"""The run directory: the one module that knows what an aiprof run folder holds, how it is written, and
how to recognise one. Capture writes through it; rules, reports, discovery and export read through it.

Layout (``aiprof run`` / ``aiprof.profile``)::

    <run>/meta.json                      RunMeta: format marker, command (redacted), host, ranks, status
    <run>/telemetry.csv                  t_unix_ns, then one column per counter (empty cell: no value)
    <run>/rank<N>.pt.trace.json.gz       one Kineto trace per rank (rank<N>-pid<P>… for a second process)
    <run>/dataloader.rank<N>.csv         step,start_unix_ns,end_unix_ns,wait_ns,batches,samples,tokens: every step's
                                     loader wait and batch size (samples/tokens −1: unknown; older runs: no such columns)
    <run>/requests.rank<N>.csv           request,start_unix_ns,end_unix_ns,batch,prompt_tokens,token_unix_ns: every
                                     generate() call and the time each new token reached the host (space-separated)
    <run>/.aiprof.claim, .aiprof.lock    who owns the folder; the lock over meta.json
    <run>/.pid<P>.cycle<C>.part          one profiler cycle not yet combined (left only when the run could not
                                     combine it: aiprof run killed, a full disk; ``aiprof analyze`` salvages it)
    <run>/.pid<P>.cycle<C>.part.tmp      torch.profiler's cut-off write of a cycle (a full disk): salvaged too
    <run>/.aiprof.reserve                space set aside for the final meta.json (removed when the run ends)

Writing: a run never overwrites another (the folder is claimed atomically: an ``O_EXCL`` claim file);
every file a reader may mistake for a result is written to a temporary name and renamed into place, and a
failed write (a full disk) removes its temporary file and says so in one line; ``meta.json`` is updated
under a file lock because several ranks (and the ``aiprof run`` parent) write their part of it.

Reading: :func:`owner_of` is the one answer to "which run directory holds this trace". Only aiprof's own
``meta.json`` counts (``"format": "aiprof-run"``, at most :data:`MAX_META_BYTES`); a foreign or oversized one
is ignored with a note, and what is read is decoded into :class:`RunMeta`, whose fields are the allow-list
of what reports may show. Importing this module imports neither torch nor numpy (nor msgspec: the
profiled process writes through it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiprof.errors import AiprofError

if TYPE_CHECKING:
    from aiprof.runmeta import RankMeta, RunMeta

FORMAT = "aiprof-run"
FORMAT_VERSION = 1
META = "meta.json"
TELEMETRY = "telemetry.csv"
LOCK = ".aiprof.lock"
CLAIM = ".aiprof.claim"
# Disk space set aside when a run starts and given back only at its end, so that after the script filled
# the disk, ``aiprof run`` can still write its final ``meta.json`` (a full disk must not leave it "running").
RESERVE = ".aiprof.reserve"
RESERVE_BYTES = 512 << 10
TRACE_SUFFIX = ".pt.trace.json.gz"
# One profiler cycle, not yet combined; readers skip it (not *.json*). Uncompressed on purpose:
# torch's gzip export writes line by line in Python (~0.8 s per cycle of a small model, inside a
# training step); plain export is C++ and fast, and the combine step compresses anyway.
PART_SUFFIX = ".part"
WAITS_HEADER = "step,start_unix_ns,end_unix_ns,wait_ns,batches,samples,tokens"
WAITS_HEADER_V1 = "step,start_unix_ns,end_unix_ns,wait_ns,batches"  # before batch sizes were recorded
# aiprof's own meta.json is a few KB (a 1,000-rank job: a few hundred KB); anything larger is not ours.
REQUESTS_HEADER = "request,start_unix_ns,end_unix_ns,batch,prompt_tokens,token_unix_ns"
MAX_META_BYTES = 1 << 20

RawMeta = dict[str, Any]


class RunDirError(AiprofError):
    """The run directory cannot be created or written."""


# ---------------------------------------------------------------------------------------------------
# meta.json, typed (the Structs live in aiprof.runmeta: msgspec is imported only when a reader needs it)
# ---------------------------------------------------------------------------------------------------
def read_run_meta(path: Path) -> tuple[RunMeta | None, str]:
    """``meta.json`` decoded, or ``None`` and why it is ignored: too large, unreadable, not aiprof's."""
    try:
        size = path.stat().st_size
        if size > MAX_META_BYTES:
            return None, f"{path}: {size:,} bytes, more than aiprof's run metadata ever is: ignored"
        data = path.read_bytes()[:MAX_META_BYTES]
    except OSError as err:
        return None, f"{path}: unreadable ({err.strerror}): ignored"
    import msgspec

    from aiprof.runmeta import RunMeta

    raw = _decode_json(data)
    if not isinstance(raw, dict):
        return None, f"{path}: not a JSON object (cut mid-write?): ignored"
    if raw.get("format") != FORMAT:
        return None, f"{path}: not an aiprof run's metadata (no \"format\": \"{FORMAT}\"): ignored"
    try:
        meta = msgspec.convert(raw, RunMeta, strict=False)
    except (msgspec.ValidationError, RecursionError) as err:
        return None, f"{path}: does not match aiprof's run metadata ({err}): ignored"
    return _sanitised(meta), ""


def _decode_json(data: bytes) -> Any:
    """msgspec first; the stdlib for NaN/Infinity (which ``json.dumps`` may have written); None when
    neither reads it (cut mid-write, nested deeper than a decoder allows)."""
    import msgspec

    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _sanitised(meta: RunMeta) -> RunMeta:
    """Secrets out even of runs an older aiprof wrote: the command redacted again, the env allow-listed."""
    from aiprof.redact import redact_argv

    meta.command = redact_argv(meta.command)
    meta.env = {k: v for k, v in meta.env.items() if k in ENV_ALLOW_LIST}
    return meta


# Only variables that change performance and hold no secrets.
ENV_ALLOW_LIST: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "KMP_AFFINITY",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_DISTRIBUTED_DEBUG",
    "NCCL_DEBUG",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
)


# ---------------------------------------------------------------------------------------------------
# A run that wrote no trace: why (``aiprof run`` at its end, ``analyze`` and the others on the folder)
# ---------------------------------------------------------------------------------------------------
def why_no_trace(meta: RawMeta, schedule: str | None = None) -> str:
    """Why a run whose ``meta.json`` is ``meta`` (the writer's dict) left no trace, and what to do, in one
    clause: the script ended before torch or before the schedule recorded a step, no step was detected,
    the schedule never reached its active steps (``schedule``: its description, else ``meta.json``'s), or
    the run never finished (status still "running": aiprof itself was killed, or it is still going)."""
    errors = meta.get("write_errors")
    if isinstance(errors, list) and errors:
        return f"a write failed and nothing recorded could be kept: {str(errors[0])[:300]}"
    steps_seen = max((int(r.get("steps_seen") or 0) for r in _dicts(meta.get("ranks"))), default=0)
    ended = _how_it_ended(meta)
    if meta.get("status") == "running" and not meta.get("finished_unix_ns") and not ended:
        return ("the run never finished (meta.json still says \"running\"): it is still going, or aiprof run was "
                "killed before the profiler exported a cycle; wait for it to end, or record again")
    if not meta.get("ranks") and not meta.get("idle_processes"):
        if ended:
            return f"{ended} before any process imported torch; nothing was recorded"
        return "no profiled process imported torch (is it a PyTorch script?)"
    unflushed = [r for r in _dicts(meta.get("ranks"))
                 if r.get("status") == "incomplete" and "without its flush" in str(r.get("reason"))]
    if unflushed or ended:
        what = "while profiling, before any recorded cycle was exported" if unflushed else _progress(meta, steps_seen)
        return f"{ended or 'a profiled process ended without its flush'} {what}; no trace was written"
    if steps_seen == 0:
        return ("no steps detected: no optimizer.step() ran, no generate() call and no module run repeatedly "
                "without gradients; call aiprof.step() each iteration or pass --step-marker")
    described = schedule or str(meta.get("schedule_text") or "records steps after its wait and warm-up")
    return (f"no steps recorded: the script ran {steps_seen} step(s) but the schedule {described}; "
            "lower --wait/--warmup or run more steps")


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _dicts(value: Any) -> list[RawMeta]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _how_it_ended(meta: RawMeta) -> str:
    """"the script was killed by SIGKILL" / "... exited with status 3", or "" for a clean exit."""
    try:
        code = int(meta.get("exit_code") or 0)
    except (TypeError, ValueError):
        code = 0
    if meta.get("escalation"):
        return f"the script {meta['escalation']}"
    if meta.get("exit_signal"):
        return f"the script was killed by {meta['exit_signal']}"
    return f"the script exited with status {code}" if code else ""


def _progress(meta: RawMeta, steps_seen: int) -> str:
    if any(p.get("flushed") is False for p in _dicts(meta.get("idle_processes"))) and not meta.get("ranks"):
        return "after importing torch, before its first step"
    if steps_seen == 0:
        return "after importing torch, before any step was detected"
    return f"after {steps_seen} step(s), before the schedule recorded any"


def no_trace_message(folder: Path) -> str | None:
    """For a folder holding aiprof's own ``meta.json`` but no trace: one line naming the run, what is
    missing and what to do (:func:`why_no_trace`); None for any other folder."""
    meta, _ = read_run_meta(folder / META)
    if meta is None:
        return None
    raw = read_meta(folder)
    command = " ".join(meta.command)
    what = f"the aiprof run directory of `{command[:80]}`" if command else "an aiprof run directory"
    return f"{folder}: {what} has meta.json but no trace: {why_no_trace(raw)}"


# ---------------------------------------------------------------------------------------------------
# Which run directory holds a trace
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunDir:
    """An aiprof run directory and its decoded ``meta.json``."""

    path: Path
    meta: RunMeta

    @property
    def telemetry_path(self) -> Path | None:
        path = self.path / TELEMETRY
        return path if path.is_file() else None

    def rank_of(self, trace_path: Path) -> RankMeta | None:
        """The process entry that wrote ``trace_path`` (by file name), when ``meta.json`` lists it."""
        return next((r for r in self.meta.ranks if trace_path.name in r.trace_files), None)

    def waits_path(self, trace_path: Path) -> Path | None:
        """The per-step data-loader waits of the process that wrote ``trace_path``, when it wrote them."""
        return self._rank_file(trace_path, "dataloader")

    def requests_path(self, trace_path: Path) -> Path | None:
        """The requests (generate() calls, token times) of the process that wrote ``trace_path``, if any."""
        return self._rank_file(trace_path, "requests")

    def dynamo_path(self, trace_path: Path) -> Path | None:
        """Dynamo's compile records (:mod:`aiprof.capture.dynamo`) of the process that wrote ``trace_path``."""
        return self._rank_file(trace_path, "dynamo", ".json")

    def models_path(self, trace_path: Path) -> Path | None:
        """The weights of the models the requests of the process that wrote ``trace_path`` ran on
        (:func:`read_models`), if any."""
        return self._rank_file(trace_path, "models", ".json")

    def _rank_file(self, trace_path: Path, kind: str, suffix: str = ".csv") -> Path | None:
        """``<kind>.rank<N>[-pid<P>]<suffix>`` of the process that wrote ``trace_path``, when it exists."""
        entry = self.rank_of(trace_path)
        if entry is not None:
            rank = entry.rank if entry.rank is not None else 0
            names = [f"{kind}.rank{rank}-pid{entry.pid}{suffix}", f"{kind}.rank{rank}{suffix}"]
        else:
            stem = trace_path.name.removesuffix(TRACE_SUFFIX)
            names = [f"{kind}.{stem}{suffix}"] if re.fullmatch(r"rank\d+(-pid\d+)?", stem) else []
        return next((self.path / n for n in names if (self.path / n).is_file()), None)


def owner_of(trace_path: Path, notes: list[str] | None = None) -> RunDir | None:
    """The aiprof run directory holding ``trace_path``: the nearest of its folder and that folder's parent
    with a ``meta.json``, when that file is aiprof's own. A foreign, oversized or unreadable one makes the
    answer ``None`` and adds a note to ``notes``."""
    for folder in (trace_path.parent, trace_path.parent.parent):
        path = folder / META
        if not path.is_file():
            continue
        meta, why = read_run_meta(path)
        if meta is None:
            if notes is not None:
                notes.append(why)
            return None
        return RunDir(folder, meta)
    return None


@dataclass(frozen=True)
class RunContext:
    """The run directories of a set of traces, found once at the root of an analysis: each folder's
    ``meta.json`` read once, the traces' :class:`RunDir` handed to the rank workers, the rules and the report
    builder (none of which reads ``meta.json`` again). Keyed by the traces' resolved folders."""

    owners: dict[Path, RunDir | None]
    notes: dict[Path, list[str]]  # per folder: why its meta.json was ignored (a foreign or oversized one)

    @staticmethod
    def find(trace_paths: Iterable[Path]) -> RunContext:
        """The run directory of each trace's folder (:func:`owner_of`), each folder read once."""
        owners: dict[Path, RunDir | None] = {}
        notes: dict[Path, list[str]] = {}
        for folder in sorted({Path(p).resolve().parent for p in trace_paths}):
            notes[folder] = []
            owners[folder] = owner_of(folder / "trace", notes[folder])
        return RunContext(owners, notes)

    def of(self, trace_path: Path) -> RunDir | None:
        """The run directory holding ``trace_path`` (None: not in one, or its folder was not looked up)."""
        return self.owners.get(Path(trace_path).resolve().parent)

    def common(self, trace_paths: Iterable[Path], notes: list[str] | None = None) -> RunDir | None:
        """The run directory when every trace of ``trace_paths`` belongs to the same one, else None; why a
        ``meta.json`` beside them was ignored goes to ``notes`` (once each)."""
        folders = sorted({Path(p).resolve().parent for p in trace_paths})
        if notes is not None:
            notes.extend(dict.fromkeys(n for f in folders for n in self.notes.get(f, [])))
        owners = [self.owners.get(f) for f in folders]
        dirs = {o.path for o in owners if o is not None}
        if len(dirs) != 1 or None in owners:
            return None
        return next(o for o in owners if o is not None)


def find_run_dir(trace_paths: Iterable[Path], notes: list[str] | None = None) -> RunDir | None:
    """The run directory when every trace of ``trace_paths`` belongs to the same one (each folder read once)."""
    paths = list(trace_paths)
    return RunContext.find(paths).common(paths, notes)


# ---------------------------------------------------------------------------------------------------
# telemetry.csv and the data-loader waits
# ---------------------------------------------------------------------------------------------------
def read_telemetry(path: Path) -> dict[str, list[float]]:
    """``telemetry.csv`` as columns: ``t_unix_ns`` as exact ints, counters as floats (NaN where a probe had
    no value or a cell is not a number). A row cut short by a crash, or without a time, is skipped."""
    import csv

    columns: dict[str, list[float]] = {}
    try:
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header or header[0] != "t_unix_ns":
                return {}
            cells = [columns.setdefault(name, []) for name in header]
            width = len(header)
            for row in reader:
                if len(row) != width:
                    continue
                try:
                    t = int(row[0])  # an int: a float would round unix ns to ~256 ns
                except ValueError:
                    continue
                cells[0].append(t)
                for col, value in zip(cells[1:], row[1:]):
                    col.append(_float(value))
    except (OSError, csv.Error):
        return {}
    return columns


def _float(text: str) -> float:
    try:
        return float(text) if text else math.nan
    except ValueError:
        return math.nan


@dataclass(frozen=True)
class LoaderWaits:
    """One process's per-step time in ``DataLoader.__next__`` (the loader's own clock; step -1: setup), and
    the batches' size: ``samples`` (first dimension of the batch's first tensor) and ``tokens`` (batch ×
    sequence of its token-id tensor), summed over the step's batches; −1 where the batch did not tell,
    empty for a file written before aiprof recorded them."""

    steps: tuple[int, ...]
    starts_unix_ns: tuple[int, ...]
    ends_unix_ns: tuple[int, ...]
    waits_ns: tuple[int, ...]
    batches: tuple[int, ...]
    samples: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()

    def by_step(self) -> dict[int, int]:
        """Wait per step number (``ProfilerStep#N`` is step N)."""
        return dict(zip(self.steps, self.waits_ns))


def format_waits(rows: Iterable[tuple[int, ...]]) -> bytes:
    """The waits file's bytes, one line per step: ``step,start_unix_ns,end_unix_ns,wait_ns,batches,samples,
    tokens`` (rows of five values: the older header without the batch sizes)."""
    rows = list(rows)
    header = WAITS_HEADER_V1 if rows and len(rows[0]) == 5 else WAITS_HEADER
    lines = [header, *(",".join(str(v) for v in row) for row in rows)]
    return ("\n".join(lines) + "\n").encode()


def read_waits(path: Path) -> LoaderWaits | None:
    """The waits file (either header), or ``None`` when it is missing or is not one; malformed lines are
    skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    lines = text.splitlines()
    header = lines[0].strip() if lines else ""
    if header not in (WAITS_HEADER, WAITS_HEADER_V1):
        return None
    width = header.count(",") + 1
    rows: list[tuple[int, ...]] = []
    for line in lines[1:]:
        try:
            row = tuple(int(v) for v in line.split(","))
        except ValueError:
            continue
        if len(row) == width:
            rows.append(row)
    columns = [tuple(c) for c in zip(*rows)] if rows else [() for _ in range(width)]
    return LoaderWaits(*columns)


@dataclass(frozen=True)
class Request:
    """One ``generate()`` call: when it started and returned, its batch and prompt length, and when each new
    token reached the host (unix ns, the streamer's ``put``; empty when its tokens could not be observed)."""

    request: int
    start_unix_ns: int
    end_unix_ns: int
    batch: int
    prompt_tokens: int
    token_unix_ns: tuple[int, ...]


def format_requests(rows: Iterable[Request]) -> bytes:
    """The requests file's bytes (:data:`REQUESTS_HEADER`, token times space-separated)."""
    lines = [REQUESTS_HEADER]
    for r in rows:
        times = " ".join(str(t) for t in r.token_unix_ns)
        lines.append(f"{r.request},{r.start_unix_ns},{r.end_unix_ns},{r.batch},{r.prompt_tokens},{times}")
    return ("\n".join(lines) + "\n").encode()


def read_requests(path: Path) -> list[Request] | None:
    """The requests file, or ``None`` when it is missing or is not one; malformed lines are skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    lines = text.splitlines()
    if not lines or lines[0].strip() != REQUESTS_HEADER:
        return None
    out: list[Request] = []
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) != 6:
            continue
        try:
            n, start, end, batch, prompt = (int(v) for v in cells[:5])
            times = tuple(int(v) for v in cells[5].split())
        except ValueError:
            continue
        if end >= start:
            out.append(Request(n, start, end, batch, prompt, times))
    return out


@dataclass(frozen=True)
class ModelWeights:
    """The weights of a model requests ran on (``models.rank<N>.json``, written by capture/requests.py at the
    model's first ``generate()``): bytes of its parameters and of its buffers per device (``"cpu"``,
    ``"cuda:0"``, ...), each tensor counted once (tied weights are one parameter)."""

    model: str  # the class name (data: escape it)
    parameters: int  # how many parameter tensors
    parameter_bytes: dict[str, int]
    buffer_bytes: dict[str, int]

    def bytes_on(self, device: str) -> int:
        """Parameter and buffer bytes on ``device``."""
        return self.parameter_bytes.get(device, 0) + self.buffer_bytes.get(device, 0)


MODELS_FORMAT = "aiprof-models-1"
MAX_MODELS = 64


def format_models(models: Iterable[ModelWeights]) -> bytes:
    """The models file's bytes (JSON: ``format``, ``models``)."""
    rows = [{"model": m.model, "parameters": m.parameters, "parameter_bytes": m.parameter_bytes,
             "buffer_bytes": m.buffer_bytes} for m in models]
    return json.dumps({"format": MODELS_FORMAT, "models": rows[:MAX_MODELS]}).encode()


def _byte_map(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    out = {str(k): int(v) for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62}
    return out if len(out) == len(value) else None


def read_models(path: Path) -> list[ModelWeights]:
    """The models file (:func:`format_models`); empty when it is missing, oversized or not one (a malformed
    row is skipped)."""
    try:
        if path.stat().st_size > MAX_DYNAMO_BYTES:
            return []
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return []
    if not isinstance(doc, dict) or doc.get("format") != MODELS_FORMAT or not isinstance(doc.get("models"), list):
        return []
    out: list[ModelWeights] = []
    for row in doc["models"][:MAX_MODELS]:
        if not isinstance(row, dict):
            continue
        params, buffers, count = _byte_map(row.get("parameter_bytes")), _byte_map(row.get("buffer_bytes")), row.get("parameters")
        if params is None or buffers is None or not isinstance(count, int) or not isinstance(row.get("model"), str):
            continue
        out.append(ModelWeights(str(row["model"])[:200], count, params, buffers))
    return out


MAX_DYNAMO_BYTES = 4 << 20


def read_recompile_reasons(path: Path) -> dict[str, str]:
    """Compile id (``F/C``) -> the guard failure Dynamo gave for that recompile, from a ``dynamo.rank<N>.json``
    file (:mod:`aiprof.capture.dynamo`); empty when the file is missing, oversized or not one."""
    try:
        if path.stat().st_size > MAX_DYNAMO_BYTES:
            return {}
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != "aiprof-dynamo-1" or not isinstance(doc.get("compiles"), list):
        return {}
    out: dict[str, str] = {}
    for row in doc["compiles"]:
        if isinstance(row, dict) and isinstance(row.get("compile_id"), str) and isinstance(row.get("recompile_reason"), str):
            out[row["compile_id"]] = row["recompile_reason"]
    return out


# ---------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------
def default_run_dir(script: str | None, now: float | None = None, root: Path | None = None) -> Path:
    """``./aiprof-runs/<YYYYmmdd-HHMMSS>-<script>/``: sorts by time, says what ran."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    stem = Path(script).stem if script else "python"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)[:40] or "run"
    return (root or Path.cwd() / "aiprof-runs") / f"{stamp}-{stem}"


def create_new(path: Path, *, explicit: bool) -> Path:
    """Create and claim a fresh run directory. An explicit ``--out`` that exists and is not empty, or that
    another run claimed first, is an error; a default name that is taken (two runs in the same second) gets
    a numeric suffix. The claim is an ``O_EXCL`` file: of two runs racing for one folder, one wins."""
    candidates = [path] if explicit else [path] + [path.with_name(f"{path.name}-{i}") for i in range(2, 100)]
    for candidate in candidates:
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            if not candidate.is_dir() or any(p.name != CLAIM for p in candidate.iterdir()):
                continue
        except OSError as err:
            raise RunDirError(f"{candidate}: cannot create the run directory ({err.strerror}); pass --out to a writable folder") from None
        check_writable(candidate)
        if claim(candidate):
            return candidate
        if explicit:
            raise RunDirError(f"{candidate}: another aiprof run claimed this folder first; choose another --out")
    if explicit and path.exists() and not path.is_dir():
        raise RunDirError(f"{path}: not a folder; --out names the run directory aiprof creates, choose another --out")
    if explicit:
        raise RunDirError(f"{path}: already exists and is not empty; aiprof never overwrites a run, choose another --out")
    raise RunDirError(f"{path}: too many runs with this name; pass --out")


def claim(run_dir: Path) -> bool:
    """Create the claim file; False when it exists (another run owns the folder)."""
    try:
        fd = os.open(run_dir / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as err:
        raise RunDirError(f"{run_dir}: cannot claim the run directory ({err.strerror}); pass --out to a writable folder") from None
    with contextlib.suppress(OSError):
        os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    return True


def check_writable(path: Path) -> None:
    """Fail early, before the script runs for minutes, when the folder cannot take files."""
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".aiprof-probe-"):
            pass
    except OSError as err:
        raise RunDirError(f"{path}: not writable ({err.strerror}); pass --out to a writable folder") from None


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """An exclusive lock over the run directory's shared files (``meta.json``)."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunDirError(f"{run_dir}: cannot lock the run directory ({err.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary sibling, then rename (:func:`aiprof.fsutil.atomic_write`, without fsync: run
    files are rewritten often): readers see the old file or the whole new one. A failed write (disk full,
    quota, permissions) removes the temporary file and raises :class:`RunDirError`."""
    from aiprof.fsutil import atomic_write as write_atomically

    try:
        write_atomically(path, data, fsync=False)
    except OSError as err:
        raise RunDirError(write_failed(path, err)) from err


def write_failed(path: Path, err: OSError) -> str:
    """The one-line message for a failed write of ``path``; a full disk or quota names the disk (its mount
    point) and what to do."""
    why = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        from aiprof.fsutil import mount_point

        disk = f"the disk mounted at {mount_point(path.parent)}"
        what = f"your quota on {disk} is used up" if err.errno == errno.EDQUOT else f"{disk} is full"
        return f"{path}: cannot write ({why}): {what}; free space there or pass --out to another disk"
    return f"{path}: cannot write ({why})"


def is_disk_full(err: BaseException) -> bool:
    """Whether a failed write failed for want of space (a full disk, a quota), through any wrapping."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        err = err.__cause__  # type: ignore[assignment]
    return False


def cut_cycle_message(path: Path, cut: Path) -> str:
    """Why the cycle file ``path`` is missing after torch.profiler's export, which logs a failed write and
    returns: the disk's state, and what is kept of the write (``cut``, its temporary name)."""
    try:
        kept = cut.stat().st_size
    except OSError:
        kept = 0
    what = f"its cut-off write {cut.name} ({kept:,} bytes) is kept for aiprof analyze" if kept else "nothing of it was written"
    return f"{path}: torch.profiler could not write this cycle ({_disk_state(path.parent)}); {what}"


def _disk_state(folder: Path) -> str:
    from aiprof.fsutil import mount_point

    try:
        info = os.statvfs(folder)
    except OSError:
        return "its write failed; torch.profiler's message is in capture.log"
    if info.f_bavail * info.f_frsize < (64 << 10):
        return (f"{os.strerror(errno.ENOSPC)}: the disk mounted at {mount_point(folder)} is full; free space there "
                "or pass --out to another disk")
    return "its write failed; torch.profiler's message is in capture.log"


def reserve_space(run_dir: Path) -> None:
    """Set aside :data:`RESERVE_BYTES` in the run directory (:data:`RESERVE`), for the final ``meta.json``
    after a full disk (:func:`release_reserve`). Raises :class:`RunDirError` when the disk cannot hold it:
    it is full already, and the script should not run for minutes to record nothing."""
    path = run_dir / RESERVE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise RunDirError(write_failed(path, err)) from err
    try:
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            os.write(fd, bytes(RESERVE_BYTES))  # a file system without fallocate: real blocks, written
    except OSError as err:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise RunDirError(write_failed(path, err)) from err
    os.close(fd)


def release_reserve(run_dir: Path) -> bool:
    """Give the reserved space back; whether there was any to give."""
    try:
        (run_dir / RESERVE).unlink()
    except OSError:
        return False
    return True


def read_meta(run_dir: Path) -> RawMeta:
    """``meta.json`` as the writer's dict (every key kept); empty when missing or unreadable. For writers:
    readers use :func:`owner_of` / :func:`read_run_meta`."""
    try:
        data = (run_dir / META).read_bytes()
    except OSError:
        return {}
    raw = _decode_json(data)
    return raw if isinstance(raw, dict) else {}


def update_meta(run_dir: Path, change: Callable[[RawMeta], None]) -> RawMeta:
    """Read ``meta.json``, apply ``change`` in place, write it back, all under the lock."""
    with locked(run_dir):
        meta = read_meta(run_dir)
        change(meta)
        atomic_write(run_dir / META, (json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n").encode())
        return meta


def record_failure(run_dir: Path, reason: str) -> None:
    """Best effort, after a write failed: mark the run incomplete with the reason (on a full disk the small
    ``meta.json`` often still fits once the large file's temporary copy is gone). Never raises."""

    def change(meta: RawMeta) -> None:
        meta["status"] = "incomplete"
        meta["reason"] = reason
        meta.setdefault("finished_unix_ns", time.time_ns())

    with contextlib.suppress(RunDirError, OSError):
        update_meta(run_dir, change)


def trace_path(run_dir: Path, rank: int, pid: int) -> Path:
    """``rank<N>.pt.trace.json.gz``; a second process claiming the same rank gets its pid appended."""
    path = run_dir / f"rank{rank}{TRACE_SUFFIX}"
    if path.exists():
        path = run_dir / f"rank{rank}-pid{pid}{TRACE_SUFFIX}"
    return path


def part_path(run_dir: Path, pid: int, cycle: int) -> Path:
    return run_dir / f".pid{pid}.cycle{cycle}{PART_SUFFIX}"


def parts_of(run_dir: Path, pid: int) -> list[Path]:
    """This process's cycle files, in cycle order."""
    found = list(run_dir.glob(f".pid{pid}.cycle*{PART_SUFFIX}"))
    return sorted(found, key=lambda p: int(re.findall(r"cycle(\d+)", p.name)[0]))


_CYCLE_FILE = re.compile(r"^\.pid(\d+)\.cycle(\d+)\.part(\.tmp)?$")


def is_cycle_file(name: str) -> bool:
    """Whether ``name`` is a cycle file of a run (``.pid<P>.cycle<C>.part``, or its cut-off ``.part.tmp``)."""
    return _CYCLE_FILE.match(name) is not None


def why_uncombined(run_dir: Path) -> str:
    """Why a run's cycle files were left uncombined, from its ``meta.json``, in a few words."""
    meta = read_meta(run_dir)
    errors = meta.get("write_errors")
    if isinstance(errors, list) and errors:
        return f"a write failed: {str(errors[0])[:200]}"
    if meta.get("status") == "running":
        return "the run never finished: meta.json still says \"running\", aiprof run was killed or is still going"
    return f"the run ended {meta.get('status') or 'without a status'}: {str(meta.get('reason') or 'no reason given')[:200]}"


def leftover_cycles(run_dir: Path) -> list[Path]:
    """Cycle files a run left uncombined, in (pid, cycle) order: ``.pid<P>.cycle<C>.part`` (written whole)
    and ``.pid<P>.cycle<C>.part.tmp`` (torch.profiler's write, cut off by a full disk). Combining a process's
    cycles into its trace removes them, so what is left is in no trace (``aiprof run`` was killed, or the
    disk was full), except the parts of a rank whose trace was written and whose parts were not removed
    (``meta.json`` lists them with the trace): those are left out."""
    meta = read_meta(run_dir)
    combined: set[str] = set()
    for entry in _dicts(meta.get("ranks")):
        traces = _strings(entry.get("trace_files"))
        if traces and all((run_dir / Path(t).name).is_file() for t in traces):
            combined.update(_strings(entry.get("cycle_files")))
    found: list[tuple[int, int, str]] = []
    with contextlib.suppress(OSError):
        for item in os.scandir(run_dir):
            match = _CYCLE_FILE.match(item.name)
            if (match and item.name not in combined and item.is_file(follow_symlinks=False)
                    and item.stat(follow_symlinks=False).st_size > 0):  # an empty one holds nothing
                found.append((int(match.group(1)), int(match.group(2)), item.name))
    return [run_dir / name for _, _, name in sorted(found)]


def dataloader_path(run_dir: Path, rank: int, pid: int) -> Path:
    return _csv_path(run_dir, "dataloader", rank, pid)


def requests_path(run_dir: Path, rank: int, pid: int) -> Path:
    return _csv_path(run_dir, "requests", rank, pid)


def models_path(run_dir: Path, rank: int, pid: int) -> Path:
    return _csv_path(run_dir, "models", rank, pid, ".json")


def dynamo_path(run_dir: Path, rank: int, pid: int) -> Path:
    return _csv_path(run_dir, "dynamo", rank, pid, ".json")


def _csv_path(run_dir: Path, kind: str, rank: int, pid: int, suffix: str = ".csv") -> Path:
    """``<kind>.rank<N><suffix>``; a second process claiming the same rank gets its pid appended."""
    path = run_dir / f"{kind}.rank{rank}{suffix}"
    if path.exists():
        path = run_dir / f"{kind}.rank{rank}-pid{pid}{suffix}"
    return path
