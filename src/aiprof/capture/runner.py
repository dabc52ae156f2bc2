"""``aiprof run``'s parent process: check the command, create the run directory, start the script
with profiling injected, sample telemetry, forward signals, and settle the run directory at the end.

The parent never imports torch. It samples telemetry for the whole process tree (so a torchrun
job's ranks and DataLoader workers count), and after the script exits it combines each process's
cycle files into ``rank<N>.pt.trace.json.gz`` with the telemetry counters on the trace's clock.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiprof.capture import bootstrap, procstate, rundir
from aiprof.capture.api import run_header, settle, telemetry_header
from aiprof.capture.options import CaptureOptions
from aiprof.capture.recorder import discard_empty_log
from aiprof.capture.session import finish_trace
from aiprof.capture.supervise import DEFAULT_GRACE_S, Supervisor
from aiprof.errors import EXIT_USAGE, AiprofError
from aiprof.rundir import RawMeta

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_FLAGS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}


@dataclass
class Command:
    """The command to run, and what we could tell about it before running it."""

    argv: list[str]
    python: str | None = None  # the interpreter, when the command is a Python one
    script: Path | None = None
    module: str | None = None
    label: str = "python"
    notes: list[str] = field(default_factory=list)


def parse_command(argv: list[str]) -> Command:
    """``train.py args`` runs with this Python; ``python ...`` and anything else run as given."""
    if not argv:
        raise AiprofError("no command given; usage: aiprof run [options] -- python train.py [args]")
    first = argv[0]
    if first.endswith(".py") or (Path(first).is_file() and not os.access(first, os.X_OK)):
        argv = [sys.executable, *argv]
    elif first == "-m":
        argv = [sys.executable, *argv]
    exe = argv[0]
    if not _PYTHON.match(Path(exe).name):
        return Command(argv, label=Path(exe).name)
    python = exe if os.sep in exe else shutil.which(exe)
    if python is None:
        raise AiprofError(f"{exe}: command not found; check the interpreter name or PATH")
    cmd = Command(argv, python=python)
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            cmd.module, cmd.label = argv[i + 1], argv[i + 1].rsplit(".", 1)[-1]
            return cmd
        if arg == "-c" or arg == "-":
            cmd.label = "python-c"
            return cmd
        if arg in _FLAGS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        cmd.script, cmd.label = Path(arg), Path(arg).stem
        return cmd
    raise AiprofError("the Python command names no script; usage: aiprof run -- python train.py [args]")


def preflight(cmd: Command) -> None:
    """Errors a user can fix before anything runs: missing script, syntax error, no torch."""
    if cmd.script is not None:
        if not cmd.script.is_file():
            raise AiprofError(f"{cmd.script}: no such script; check the path")
        try:
            source = cmd.script.read_bytes()
            compile(source, str(cmd.script), "exec", dont_inherit=True)
        except SyntaxError as err:
            raise AiprofError(f"{cmd.script}:{err.lineno}: syntax error: {err.msg}; fix the script and rerun") from None
        except (OSError, ValueError) as err:
            raise AiprofError(f"{cmd.script}: cannot read the script ({err})") from None
    if cmd.python is not None and not _has_torch(cmd.python):
        raise AiprofError(f"torch is not installed for {cmd.python}; install it (pip install torch) or run with the Python that has it")


def _has_torch(python: str) -> bool:
    # Not realpath: a venv's python is a symlink to the base interpreter, yet its packages differ.
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    probe = "import importlib.util,sys;sys.exit(0 if importlib.util.find_spec('torch') else 3)"
    try:
        return subprocess.run([python, "-c", probe], timeout=60, env=_clean_env()).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(bootstrap.ENV_OPTIONS, None)
    env.pop(bootstrap.ENV_RUN_DIR, None)
    env.pop(bootstrap.ENV_SUPERVISOR, None)
    return env


def inject_dir() -> Path:
    """A folder for PYTHONPATH with our sitecustomize and a link to this aiprof package, nothing else."""
    import aiprof

    folder = Path(tempfile.mkdtemp(prefix="aiprof-inject-"))
    package = Path(aiprof.__file__).resolve().parent
    os.symlink(package, folder / "aiprof")
    shutil.copyfile(package / "capture" / "_inject" / "sitecustomize.py", folder / "sitecustomize.py")
    return folder


@dataclass
class RunResult:
    run_dir: Path
    exit_code: int
    meta: dict[str, Any]


class Runner:
    """Runs one command under capture. ``run()`` returns the script's exit status (128+N for a signal)."""

    def __init__(self, command: list[str], options: CaptureOptions, out: Path | None,
                 *, kill_grace_s: float = DEFAULT_GRACE_S) -> None:
        self.cmd = parse_command(command)
        self.options = options
        self.out = out
        self.kill_grace_s = kill_grace_s
        self.supervisor: Supervisor | None = None
        self._unwritten: list[Callable[[RawMeta], None]] = []  # meta.json changes a full disk held back
        self._write_failures: list[str] = []  # writes of this process that failed (a full disk)
        self.failure: str | None = None  # the run's one-line error after a failed write, once settled

    @property
    def signals(self) -> list[int]:
        return self.supervisor.signals if self.supervisor is not None else []

    def run(self) -> RunResult:
        preflight(self.cmd)
        explicit = self.out is not None
        run_dir = rundir.create_new(self.out or rundir.default_run_dir(self.cmd.label), explicit=explicit).resolve()
        header = run_header(self.options, self.cmd.argv, mode="run")
        try:  # a disk full already: one line now, not after minutes of training
            rundir.reserve_space(run_dir)
            rundir.update_meta(run_dir, lambda m: m.update(header, status="running"))
        except rundir.RunDirError:
            _abandon(run_dir)
            raise
        print(f"aiprof: profiling into {run_dir}; {self.options.schedule.describe()}", file=sys.stderr, flush=True)
        folder = inject_dir()
        try:
            code = self._run_child(run_dir, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        try:
            meta = self._settle(run_dir, code)
        except rundir.RunDirError as err:  # even the reserved space did not hold meta.json: try once more
            rundir.release_reserve(run_dir)
            rundir.record_failure(run_dir, str(err))
            err.exit_code = code or EXIT_USAGE  # the script's own status when it failed too
            raise
        finally:
            rundir.release_reserve(run_dir)
        if self.failure is not None:  # a full disk: meta.json says so (the reserve made room); one line
            error = rundir.RunDirError(self.failure)
            error.exit_code = code or EXIT_USAGE
            raise error
        return RunResult(run_dir, code, meta)

    def _write_meta(self, run_dir: Path, change: Callable[[RawMeta], None], *, settling: bool) -> RawMeta | None:
        """Apply ``change`` (and any change that could not be written before) to ``meta.json``. While the
        script runs, a failed write (a full disk) is kept for later and the run goes on; once it has ended
        (``settling``), a full disk releases the space reserved for this moment and the write is retried."""
        changes = [*self._unwritten, change]

        def apply(meta: RawMeta) -> None:
            for each in changes:
                each(meta)

        try:
            meta = rundir.update_meta(run_dir, apply)
        except rundir.RunDirError as err:
            if not settling:
                self._unwritten = changes
                self._write_failures.append(str(err))
                return None
            if not (rundir.is_disk_full(err) and rundir.release_reserve(run_dir)):
                raise
            self._write_failures.append(str(err))
            meta = rundir.update_meta(run_dir, apply)
        self._unwritten = []
        return meta

    def _env(self, run_dir: Path, folder: Path) -> dict[str, str]:
        env = dict(os.environ)
        env[bootstrap.ENV_OPTIONS] = self.options.to_json()
        env[bootstrap.ENV_RUN_DIR] = str(run_dir)
        env[bootstrap.ENV_SUPERVISOR] = f"{os.getpid()}:{self.kill_grace_s:g}"
        env["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [env.get("PYTHONPATH")])])
        return env

    def _run_child(self, run_dir: Path, folder: Path) -> int:
        sampler: Any = None
        notes: dict[str, str] = {}
        self.supervisor = Supervisor(self.cmd.argv, self._env(run_dir, folder), grace_s=self.kill_grace_s, run_dir=run_dir)
        try:
            pid = self.supervisor.start()
        except OSError as err:
            raise AiprofError(f"{self.cmd.argv[0]}: cannot start ({err.strerror}); check the command") from None
        try:
            if self.options.telemetry:
                sampler, notes = self._start_sampler(run_dir, pid)
            header = telemetry_header(self.options, sampler, notes)
            self._write_meta(run_dir, lambda m: m.update(telemetry=header), settling=False)
            rc = self.supervisor.wait()
        finally:
            if sampler is not None:
                sampler.stop()
        if sampler is not None:  # written with the final meta.json
            samples, errors = sampler.samples, list(sampler.errors)
            self._unwritten.append(lambda m: m.setdefault("telemetry", {}).update(samples=samples, errors=errors))
            self._write_failures.extend(e for e in errors if "cannot write" in e)
        return 128 - rc if rc < 0 else rc

    def _start_sampler(self, run_dir: Path, pid: int) -> tuple[Any, dict[str, str]]:
        from aiprof.capture.telemetry import TelemetrySampler, default_probes

        try:
            probes, notes = default_probes(pid)
        except Exception as err:  # noqa: BLE001 - the child may already be gone
            return None, {"system": f"skipped: {err}"}
        if not probes:
            return None, notes
        sampler = TelemetrySampler(run_dir / rundir.TELEMETRY, probes, self.options.telemetry_interval_s)
        sampler.start()
        return sampler, notes

    def _settle(self, run_dir: Path, code: int) -> dict[str, Any]:
        """Combine every process's cycles into its rank trace (with telemetry); account for processes
        that ended without their own flush; set the final status. A write that failed on the way (a full
        disk, here or in the script's processes) leaves the cycle files where they are, marks the run
        incomplete and sets :attr:`failure`, the run's one-line error (the file, the disk, what is kept)."""
        meta = rundir.read_meta(run_dir)
        interval = self.options.telemetry_interval_s
        telemetry_dir = run_dir if self.options.telemetry else None
        claimed: set[str] = set()
        failures = list(self._write_failures)
        entries: list[dict[str, Any]] = [e for e in meta.get("ranks", []) if isinstance(e, dict)]
        for entry in entries:
            failures.extend(str(e) for e in entry.get("write_errors") or [])
            if entry.get("partial_cycle_files"):
                failures.extend(str(e).split(": ", 1)[-1] for e in entry.get("export_errors") or [])
            parts = [run_dir / name for name in entry.get("cycle_files", []) if (run_dir / name).exists()]
            claimed.update(p.name for p in parts)
            if parts:
                path = rundir.trace_path(run_dir, int(entry.get("rank", 0)), int(entry.get("pid", 0)))
                try:
                    entry["telemetry_rows"] = finish_trace(parts, path, telemetry_dir, interval)
                    entry["trace_files"] = [path.name]
                except _COMBINE_ERRORS as err:  # the cycle files stay: the run's data is not lost
                    entry.update(status="incomplete", reason=_not_combined(err), trace_files=[])
                    failures.append(str(err))
        states = procstate.read_all(run_dir)
        how = _how_it_ended(code)
        for pid, parts in self._orphans(run_dir, claimed).items():  # a process that could not write its metadata
            path = run_dir / f"pid{pid}{rundir.TRACE_SUFFIX}"
            unsaved = pid in states and states[pid].unsaved
            try:
                finish_trace(parts, path, telemetry_dir, interval)
                traces = [path.name]
            except _COMBINE_ERRORS as err:
                failures.append(str(err))
                traces = []
            entries.append(_unflushed_rank(pid, how, traces, unsaved=unsaved))
        known = {r.get("pid") for r in entries} | {p.get("pid") for p in meta.get("idle_processes", [])}
        idle: list[dict[str, Any]] = list(meta.get("idle_processes", []))
        for pid, state in sorted(states.items()):
            if pid in known or (state.flushed and not state.unsaved):
                continue
            if state.profiling or state.unsaved:  # it ran steps, so it is a rank; nothing of it was exported
                entries.append(_unflushed_rank(pid, how, [], unsaved=state.unsaved))
            elif state.imported_torch:
                idle.append({"pid": pid, "argv0": None, "flushed": False})
            if state.unsaved:
                # the state file says only that the entry could not be written (a full disk, procstate): the
                # same words as any write that met ENOSPC, naming the disk and what to do
                full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                failures.append(f"{rundir.write_failed(run_dir / rundir.META, full)} (process {pid} could not add its entry)")
        procstate.remove_all(run_dir)
        discard_empty_log(run_dir)
        for cut in run_dir.glob(f".pid*.cycle*{rundir.PART_SUFFIX}.tmp"):  # a write cut before its first byte
            with contextlib.suppress(OSError):
                if cut.stat().st_size == 0:
                    cut.unlink()
        escalated = self.supervisor.escalated if self.supervisor is not None else None
        kept = [p.name for p in rundir.leftover_cycles(run_dir) if p.name not in _combined_now(entries)]

        def final(m: dict[str, Any]) -> None:
            m["ranks"] = entries
            if idle:
                m["idle_processes"] = idle
            settle(m, time.time_ns())
            m["exit_code"] = code
            if code > 128 and code - 128 in _SIGNALS:
                m["exit_signal"] = signal.Signals(code - 128).name
            if self.signals:
                m["signals_received"] = [signal.Signals(s).name for s in self.signals]
            if escalated:
                m["escalation"] = escalated
            if kept:
                m["uncombined_cycle_files"] = kept
            if code != 0:
                m["status"] = "incomplete"
                first = f"the script {escalated}" if escalated else _exit_reason(code)
                m["reason"] = first + (f"; {m['reason']}" if m.get("reason") else "")
            if failures:
                m["status"] = "incomplete"
                m["reason"] = failures[0] + (f"; {m['reason']}" if m.get("reason") else "")
                m["write_errors"] = failures[:20]

        final_meta = self._write_meta(run_dir, final, settling=True)
        assert final_meta is not None
        if failures:
            what = (f"the recorded cycles are kept in {run_dir} ({_listed(kept)}; aiprof analyze {run_dir} salvages them)"
                    if kept else f"nothing recorded could be kept; what was written is in {run_dir} (meta.json says incomplete)")
            self.failure = f"{failures[0]}; {what}"
        return final_meta

    @staticmethod
    def _orphans(run_dir: Path, claimed: set[str]) -> dict[int, list[Path]]:
        found: dict[int, list[Path]] = {}
        for part in sorted(run_dir.glob(f".pid*{rundir.PART_SUFFIX}")):
            if part.name in claimed:
                continue
            match = re.match(r"\.pid(\d+)\.cycle", part.name)
            if match:
                found.setdefault(int(match.group(1)), []).append(part)
        return {pid: rundir.parts_of(run_dir, pid) for pid in found}


_SIGNALS = {s.value for s in signal.Signals}


def _how_it_ended(code: int) -> str:
    """How a process that never flushed most likely ended, from the script's exit status."""
    if code > 128 and code - 128 in _SIGNALS:
        return f"killed by {signal.Signals(code - 128).name}"
    return "killed, or ended by os._exit"


def _unflushed_rank(pid: int, how: str, traces: list[str], *, unsaved: bool = False) -> dict[str, Any]:
    """A rank entry for a process that ran steps and ended without its flush (SIGKILL, OOM, os._exit), or
    whose flush could not write its entry into ``meta.json`` (``unsaved``: a full disk)."""
    kept = "cycles exported before were kept" if traces else "no recorded cycle had been exported"
    if unsaved:
        kept = "its cycles were combined into " + traces[0] if traces else "its cycle files are kept as they are"
        reason = f"its flush could not write its entry into meta.json (a full disk); {kept}"
    else:
        reason = f"ended without its flush ({how}); {kept}"
    return {"rank": None, "pid": pid, "status": "incomplete", "reason": reason, "trace_files": traces}


# What combining a process's cycle files can fail with: a full disk (RunDirError), a cycle file that is
# unreadable or not the JSON torch.profiler writes.
_COMBINE_ERRORS = (OSError, ValueError, EOFError, zlib.error, RecursionError)


def _not_combined(err: BaseException) -> str:
    return f"its cycles could not be combined ({str(err)[:300]}); the cycle files are kept as they are"


def _combined_now(entries: list[dict[str, Any]]) -> set[str]:
    """Cycle file names of the ranks whose trace this settle wrote (their parts are removed, normally)."""
    return {str(n) for e in entries if e.get("trace_files") for n in e.get("cycle_files") or []}


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _abandon(run_dir: Path) -> None:
    """Remove a run directory that was claimed and never used (the claim, the lock, the folder if empty)."""
    for name in (rundir.CLAIM, rundir.LOCK, rundir.RESERVE, rundir.META):
        with contextlib.suppress(OSError):
            (run_dir / name).unlink()
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def _exit_reason(code: int) -> str:
    if code > 128 and code - 128 in _SIGNALS:
        return f"the script was stopped by {signal.Signals(code - 128).name}"
    return f"the script exited with status {code}"
