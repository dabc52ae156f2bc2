"""One process's capture: the recorder, step detection, data-loader tracking, optional telemetry,
and the flush that writes everything out whatever way the process ends.

Used by the Python API (``aiprof.profile``: the profiler starts on entry) and by the process that
``aiprof run`` injects into (the profiler starts at the first step marker, so a process that never
trains — a launcher, a worker — records nothing).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from aiprof.capture import dataloader as dl
from aiprof.capture import procstate, requests, rundir, steps
from aiprof.capture.memory import MemoryCapture
from aiprof.capture.options import CaptureOptions
from aiprof.capture.recorder import Recorder
from aiprof.capture.telemetry import TelemetrySampler, read_rows
from aiprof.capture.traces import add_telemetry, combine, write_trace
from aiprof.errors import AiprofWarning

SignalHandler = Callable[[int, FrameType | None], Any] | int | None
_FLUSH_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class CaptureSession:
    """State of the capture in this process. ``finalize`` is idempotent and safe from a signal handler."""

    def __init__(
        self,
        options: CaptureOptions,
        run_dir: Path,
        *,
        lazy_start: bool,
        write_traces: bool,
        sampler: TelemetrySampler | None = None,
    ) -> None:
        self.options = options
        self.run_dir = run_dir
        self.lazy_start = lazy_start
        self.write_traces = write_traces  # False under `aiprof run`: the parent combines and adds telemetry
        self.sampler = sampler
        self.pid = os.getpid()
        self.recorder = Recorder(options, run_dir)
        self.tracker = dl.DataLoaderTracker()
        self.markers = 0
        self.started_ns = time.time_ns()
        self.finished = False
        self.status = "running"
        self.reason: str | None = None
        self.rank: int | None = None
        self._rank_from_dist = False
        self._env_rank = env_rank()  # read again at the flush (a script may set $RANK itself)
        self._dist_initialized: Callable[[], bool] | None = None  # torch.distributed.is_initialized, once imported
        self.trace_files: list[str] = []
        self.write_errors: list[str] = []  # files of this process that could not be written (a full disk)
        self._pending = False
        self._explicit_seen = False
        self._last_source = ""
        self._first_optimizer: int | None = None
        self._next_forward: steps.NextForward | None = None  # made with the optimizer hook
        self._uninstall: list[Callable[[], None]] = []
        self._busy = False
        self._deferred_signal: int | None = None
        self._flushing = False
        self._signal_after_flush: int | None = None
        self._old_handlers: dict[int, SignalHandler] = {}
        self.memory = MemoryCapture(run_dir, options.schedule) if options.memory else None
        self.requests = requests.RequestLog()
        self._step_module = False  # an inference loop's model was found: its forwards begin steps
        self._forwards_since_mark = 0
        self._remove_detector: Callable[[], None] | None = None
        from aiprof.capture.dynamo import DynamoBaseline

        self._dynamo_before = DynamoBaseline.now()  # what an earlier session in this process already saw

    # --- lifecycle -------------------------------------------------------------------------
    def install_torch_hooks(self) -> None:
        """Hook the optimizer, the DataLoader and the step marker (torch must be importable now)."""
        dl.install()
        dl.set_tracker(self.tracker)
        self.tracker.before_next = self.apply_pending
        if self.options.auto_step:
            self._uninstall.append(steps.install_optimizer_hook(self.on_optimizer_step, self.apply_pending))
            if not self.options.step_marker:
                self._install_inference_hooks()
        marker = self.options.step_marker
        if marker:
            module, qualname = steps.parse_marker(marker)
            if module is None:
                self._uninstall.append(steps.install_module_class_marker(qualname, lambda: self.mark("marker")))
            else:
                self._patch_marker_when_imported(module, qualname)

    def _patch_marker_when_imported(self, module: str, qualname: str) -> None:
        def patch(mod: Any) -> None:
            try:
                steps.patch_function(mod, qualname, lambda: self.mark("marker"))
            except AttributeError:
                warnings.warn(f"--step-marker: {module} has no {qualname}; no steps will be marked by it", AiprofWarning, stacklevel=2)

        if module in sys.modules:
            patch(sys.modules[module])
        else:
            hooks = _post_import_hooks()
            hooks.when_imported(module, patch)

    def _install_inference_hooks(self) -> None:
        """Requests (``generate()`` calls) and decoding steps (capture/requests.py): the model a request runs
        on, or a module repeatedly run at the top level without gradients, marks the steps."""
        def patch(module: Any) -> None:
            if self.finished or os.getpid() != self.pid:
                return  # imported after this capture ended (the post-import hook outlives it)
            self._uninstall.append(requests.patch_transformers(module, self.requests, self.on_request_start,
                                                               self.on_request_end))

        _post_import_hooks().when_imported("transformers.generation.utils", patch)
        self._remove_detector = steps.install_inference_detector(self.adopt_step_module)
        self._uninstall.append(lambda: self._remove_detector() if self._remove_detector else None)

    def adopt_step_module(self, module: Any) -> None:
        """From now on each forward of ``module`` begins a step (once per process; not in a training loop)."""
        if self._step_module or self._first_optimizer is not None or self._explicit_seen:
            return
        self._step_module = True
        if self._remove_detector is not None:
            self._remove_detector()
        self._uninstall.append(steps.hook_forward_begins(module, self.on_forward_begin))

    def on_forward_begin(self) -> None:
        """The step model's forward begins: the previous step (a forward and its token selection) ends."""
        if self._first_optimizer is not None or self._explicit_seen:
            return
        self.mark("forward")
        self._forwards_since_mark = 1

    def on_request_start(self, model: Any) -> None:
        self.adopt_step_module(model)

    def on_request_end(self) -> None:
        """A request returned: its last step ends (what follows until the next forward is a step of its own)."""
        if self._forwards_since_mark and self._first_optimizer is None and not self._explicit_seen:
            self.mark("request")
        self._forwards_since_mark = 0

    def start(self) -> None:
        """API mode: the profiler starts now and step 0 begins."""
        self.install_torch_hooks()
        if not self.lazy_start:
            self.recorder.start()
            self.tracker.begin(0)

    # --- steps -----------------------------------------------------------------------------
    def mark(self, source: str) -> None:
        """A step ends here. ``source`` is "explicit" (aiprof.step / prof.step), "optimizer", "marker", or, in
        an inference loop, "forward" (the step model's forward begins) or "request" (a generate() returned)."""
        if self.finished or os.getpid() != self.pid:
            return
        if source == "explicit":
            first = not self._explicit_seen
            self._explicit_seen = True
            if self._pending:
                self._drop_pending()
            elif first and self._last_source == "optimizer":
                return  # the optimizer hook already ended this step; explicit calls take over from here
        self._last_source = source
        self._busy = True
        try:
            self.markers += 1
            if not self.recorder.started:
                if self.lazy_start:
                    procstate.note(self.run_dir, procstate.PROFILING)
                self.recorder.start()
                self.tracker.end_step(0)
            else:
                self.recorder.step()
                self.tracker.end_step(self.recorder.steps)
            self._note_rank()
            if self.memory is not None:
                _quietly(lambda: self.memory.on_step(self.recorder.steps) if self.memory else None)
        finally:
            self._busy = False
        if self._deferred_signal is not None:
            self._on_term(self._deferred_signal, None)

    def on_optimizer_step(self, optimizer: Any) -> None:
        if self._explicit_seen or self.finished or os.getpid() != self.pid:
            return
        if self._first_optimizer is None:
            self._first_optimizer = id(optimizer)
        if id(optimizer) != self._first_optimizer or self._pending:
            return
        self._pending = True
        if self._next_forward is None:
            self._next_forward = steps.NextForward(self.apply_pending)
        self._next_forward.arm()

    def apply_pending(self) -> None:
        if self._pending:
            self._drop_pending()
            self.mark("optimizer")

    def _close_last_step(self) -> None:
        """The last optimizer step ended a step; the process ends before the next one begins, so the
        step is closed by stopping the profiler, not by opening an empty ``ProfilerStep`` after it."""
        self._drop_pending()
        self.markers += 1
        if self.recorder.started:
            self.tracker.end_step(self.recorder.steps + 1)

    def _drop_pending(self) -> None:
        self._pending = False
        if self._next_forward is not None:
            self._next_forward.disarm()

    def _note_rank(self) -> None:
        """The rank, looked up at each step until torch.distributed gives it (it may be initialised after the
        first steps, and destroyed before the process ends); from then on it is this process's rank."""
        if self._rank_from_dist:
            return
        initialized = self._dist_initialized
        if initialized is None:
            dist = sys.modules.get("torch.distributed")
            try:
                if dist is not None and dist.is_available():
                    initialized = self._dist_initialized = dist.is_initialized
            except Exception:  # noqa: BLE001
                pass
        try:
            ready = initialized is not None and bool(initialized())
        except Exception:  # noqa: BLE001
            ready = False
        rank = distributed_rank() if ready else None
        if rank is not None:
            self.rank, self._rank_from_dist = rank, True
        elif self.rank is None or self.rank == 0:
            self.rank = self._env_rank

    # --- signals ---------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """Flush on SIGTERM (and SIGHUP), then die by that signal as the script would have; only for
        signals nobody else handles (a script's own SIGTERM handler, e.g. a checkpoint, wins). A forked child
        (a ``multiprocessing.Pool`` worker) gets the default action back at the fork (:func:`_default_in_child`)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in _FLUSH_SIGNALS:
            if signal.getsignal(sig) == signal.SIG_DFL:
                self._old_handlers[sig] = signal.signal(sig, self._on_term)
        if self._old_handlers:
            _reset_in_children(self)

    def restore_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, old in self._old_handlers.items():
            if signal.getsignal(sig) == self._on_term:
                signal.signal(sig, old)
        self._old_handlers.clear()

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.pid:  # a forked worker inherited the handler
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.lazy_start and not self.markers and not self.recorder.started and not self.recorder.cycles:
            # A helper that imported torch but never ran a step (a multiprocessing.Pool worker torn down by
            # terminate()): it has nothing to flush, and flushing in a handler could wait on a lock the
            # interrupted code holds (it hung pool.join()). It dies at once, as without aiprof; `aiprof
            # run` lists it from its state file.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self._busy:
            self._deferred_signal = signum  # inside our own bookkeeping: finish it first
            return
        if self._flushing:
            # A second signal during the flush (sent to the process group and forwarded by aiprof run,
            # or arriving during the flush at exit): finish writing, then die by it.
            self._signal_after_flush = signum
            return
        self.finalize("incomplete", f"terminated by {signal.Signals(signum).name}")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    # --- flush -----------------------------------------------------------------------------
    def finalize(self, status: str, reason: str | None = None) -> None:
        """Write everything this process has; never raises (it runs at exit and in signal handlers)."""
        if self.finished or os.getpid() != self.pid:
            return
        if self._pending and not self._busy:
            self._close_last_step()
        self.finished = True
        self._flushing = True
        if self.lazy_start:
            procstate.note(self.run_dir, procstate.FLUSHING)
        self.status, self.reason = status, reason
        self._drop_pending()
        dl.set_tracker(None)
        for uninstall in self._uninstall:
            _quietly(uninstall)
        if self.memory is not None:
            _quietly(lambda: self.memory.finish(self.recorder.steps) if self.memory else None)
        _quietly(self.recorder.stop)
        if not self._rank_from_dist:
            self._env_rank = env_rank()
        if self.rank is None or not self._rank_from_dist:
            self._note_rank()
        if self.sampler is not None:
            _quietly(self.sampler.stop)
        _quietly(self._write_outputs)
        if self.lazy_start:
            procstate.note(self.run_dir, procstate.FLUSHED)
        self._flushing = False
        if self._signal_after_flush is not None:
            signal.signal(self._signal_after_flush, signal.SIG_DFL)
            os.kill(os.getpid(), self._signal_after_flush)

    def is_rank(self) -> bool:
        """Whether this process is one of the run's ranks: it profiles (the API, or it ran steps under
        ``aiprof run``), exported a cycle, or torch.distributed gave it a rank. A helper that only
        imported torch or read a DataLoader (a ``multiprocessing.Pool`` worker) is not a rank."""
        return not self.lazy_start or self.markers > 0 or bool(self.recorder.cycles) or distributed_rank() is not None

    def _write_outputs(self) -> None:
        """Each file on its own (one that fails, a full disk, does not stop the others), ``meta.json`` last.
        When even that fails, the process says so in its state file (``unsaved``: a small append that
        needs no new disk block), so ``aiprof run`` knows its entry is missing and why."""
        rank = self.rank if self.rank is not None else 0
        writes: list[Callable[[], Any]] = []
        if self.is_rank() and (self.tracker.active or self.markers):
            writes.append(lambda: self.tracker.write_csv(rundir.dataloader_path(self.run_dir, rank, self.pid)))
        if self.requests.requests:
            writes.append(lambda: rundir.atomic_write(rundir.requests_path(self.run_dir, rank, self.pid),
                                                      rundir.format_requests(self.requests.requests)))
        if self.requests.models:
            writes.append(lambda: rundir.atomic_write(rundir.models_path(self.run_dir, rank, self.pid),
                                                      rundir.format_models(self.requests.models)))
        if self.is_rank():
            writes.append(lambda: _quietly(lambda: self._write_dynamo(rank)))  # best effort: provenance only
        if self.write_traces and self.recorder.cycles:
            writes.append(lambda: self._write_trace(rank))
        for write in writes:
            try:
                write()
            except (rundir.RunDirError, OSError, ValueError) as err:  # a full disk: the message names the file
                self.write_errors.append(str(err)[:500])
                print(f"aiprof: warning: {err}", file=sys.stderr)
        try:
            rundir.update_meta(self.run_dir, self._merge_rank)
        except rundir.RunDirError as err:
            if self.lazy_start:
                procstate.note(self.run_dir, procstate.UNSAVED)
            print(f"aiprof: warning: {err}", file=sys.stderr)

    def _write_trace(self, rank: int) -> None:
        path = rundir.trace_path(self.run_dir, rank, self.pid)
        finish_trace(self.recorder.cycles, path, self.run_dir if self.sampler is not None else None,
                     self.options.telemetry_interval_s)
        self.trace_files.append(path.name)

    def _write_dynamo(self, rank: int) -> None:
        """Dynamo's own compile records, when the program used torch.compile (:mod:`aiprof.capture.dynamo`)."""
        from aiprof.capture.dynamo import dynamo_record

        data = dynamo_record(self._dynamo_before)
        if data is not None:
            rundir.atomic_write(rundir.dynamo_path(self.run_dir, rank, self.pid), data)

    def rank_entry(self) -> dict[str, Any]:
        """This process's part of ``meta.json``."""
        import msgspec

        from aiprof.capture.meta import torch_info

        entry: dict[str, Any] = {
            "rank": self.rank if self.rank is not None else 0,
            "pid": self.pid,
            "status": self.status,
            "reason": self.reason,
            "steps_seen": self.markers,
            "profiler_steps": self.recorder.steps,
            "recorded_steps": self.recorder.recorded,
            "cycles": len(self.recorder.cycles),
            "cycle_files": [p.name for p in self.recorder.cycles],
            "trace_files": self.trace_files,
            "export_errors": self.recorder.export_errors,
            "partial_cycle_files": [p.name for p in self.recorder.partial],
            "write_errors": self.write_errors,
            "dataloader": self.tracker.summary(),
            "started_unix_ns": self.started_ns,
            "finished_unix_ns": time.time_ns(),
        }
        if "torch" in sys.modules:
            try:
                entry.update(msgspec.to_builtins(torch_info()))
            except Exception as err:  # noqa: BLE001 - metadata must not stop the flush
                entry["torch_info_error"] = str(err)
        return entry

    def _merge_rank(self, meta: dict[str, Any]) -> None:
        if not self.is_rank():
            # imported torch but never trained (a launcher, a pool worker): listed apart from the ranks
            idle = [p for p in meta.get("idle_processes", []) if p.get("pid") != self.pid]
            meta["idle_processes"] = idle + [{"pid": self.pid, "argv0": (sys.argv[:1] or [""])[0]}]
            return
        entry = self.rank_entry()
        ranks = [r for r in meta.get("ranks", []) if r.get("pid") != self.pid]
        meta["ranks"] = sorted(ranks + [entry], key=lambda r: (r.get("rank", 0), r.get("pid", 0)))


def finish_trace(parts: list[Path], path: Path, telemetry_dir: Path | None, interval_s: float) -> int:
    """Combine a process's cycle files into ``path`` with telemetry counters; remove the parts."""
    doc = combine(parts)
    rows = 0
    telemetry = telemetry_dir / rundir.TELEMETRY if telemetry_dir is not None else None
    if telemetry is not None and telemetry.exists():
        rows = add_telemetry(doc, lambda a, b: read_rows(telemetry, a, b), margin_us=2 * interval_s * 1e6)
    doc.setdefault("aiprof", {})["telemetry_rows"] = rows
    write_trace(doc, path)
    for part in parts:
        _quietly(part.unlink)
    return rows


_FORK_RESET: list[CaptureSession] = []  # the sessions whose handlers a forked child drops (registered once)


def _reset_in_children(session: CaptureSession) -> None:
    """Have every forked child drop ``session``'s flush handlers (registered with ``os.register_at_fork`` once
    per process). A child never records for its parent's session (``mark`` checks the pid): the handler could
    only re-raise the signal there, and a child blocked in C (a Pool worker waiting on its task queue's lock)
    may never run a Python-level handler at all, so ``terminate()`` left it alive and ``pool.join()`` hung."""
    if not _FORK_RESET and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_in_child)
    if session not in _FORK_RESET:
        _FORK_RESET.append(session)


def _default_in_child() -> None:
    """In a forked child: the default action again for each signal a parent session handles (the kernel's,
    set through libc: no Python-level handler left to run)."""
    sessions, _FORK_RESET[:] = list(_FORK_RESET), []
    for session in sessions:
        for sig in list(session._old_handlers):
            try:
                if signal.getsignal(sig) == session._on_term:
                    signal.signal(sig, signal.SIG_DFL)
            except (ValueError, OSError):  # not the main thread in Python's eyes: set it in libc
                _libc_default(sig)
        session._old_handlers.clear()


def _libc_default(sig: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None).signal(int(sig), ctypes.c_void_p(0))  # SIG_DFL
    except (OSError, AttributeError):
        pass


def distributed_rank() -> int | None:
    """torch.distributed's rank when it is initialised in this process, else None."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001
        pass
    return None


def current_rank() -> int:
    """torch.distributed's rank when initialised, else $RANK (torchrun), else 0."""
    rank = distributed_rank()
    return rank if rank is not None else env_rank()


def env_rank() -> int:
    """$RANK (torchrun), else 0."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - the flush must go on; say what failed
        print(f"aiprof: warning: {getattr(fn, '__qualname__', fn)}: {err}", file=sys.stderr)


_HOOKS: steps.PostImportHooks | None = None
_CURRENT: CaptureSession | None = None


def current() -> CaptureSession | None:
    """The live session of this process (API or injected), if any."""
    session = _CURRENT
    if session is None or session.finished or session.pid != os.getpid():
        return None
    return session


def set_current(session: CaptureSession | None) -> None:
    global _CURRENT
    _CURRENT = session


def _post_import_hooks() -> steps.PostImportHooks:
    global _HOOKS
    if _HOOKS is None:
        _HOOKS = steps.PostImportHooks()
    return _HOOKS
