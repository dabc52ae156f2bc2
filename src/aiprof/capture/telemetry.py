"""System telemetry: a sampler thread that reads CPU, memory, disk, network (psutil) and GPU (NVML)
every ~100 ms and streams the rows to ``telemetry.csv``.

Memory stays bounded: rows go to disk as they come and only the last few are kept in memory. The
clock is injectable (unix ns, the same clock Kineto's ``baseTimeNanoseconds`` is on), so tests can
drive ``sample_once`` without sleeping. psutil and NVML are imported here, lazily; NVML is skipped
cleanly when ``nvidia-ml-py`` or a GPU is missing, and the reason is kept for the metadata.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from aiprof.rundir import read_telemetry, write_failed

Clock = Callable[[], int]
Row = list[float | int | None]

_CHILDREN_REFRESH = 10  # rescan the process tree every N samples: scanning /proc is the costly part
_FLUSH_EVERY = 10
_KEEP_ROWS = 64


class Probe(Protocol):
    """One source of columns. ``read`` returns one value per column, ``None`` when unavailable."""

    columns: list[str]

    def read(self) -> Row: ...

    def close(self) -> None: ...


class SystemProbe:
    """CPU (system and per core), memory, disk and network I/O, and the profiled process tree."""

    def __init__(self, root_pid: int | None = None) -> None:
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(root_pid if root_pid is not None else os.getpid())
        self._cores = psutil.cpu_count() or 1
        self._procs: dict[int, Any] = {}
        self._ticks = 0
        psutil.cpu_percent(percpu=True)  # starts psutil's interval; the first real sample is then meaningful
        self._disk0 = self._disk()
        self._net0 = self._net()
        self.columns = (
            ["cpu_pct"]
            + [f"cpu{i}_pct" for i in range(self._cores)]
            + ["mem_used_bytes", "mem_available_bytes"]
            + ["disk_read_bytes", "disk_write_bytes", "net_recv_bytes", "net_sent_bytes"]
            + ["proc_cpu_pct", "proc_rss_bytes", "tree_rss_bytes", "tree_processes"]
        )

    def _disk(self) -> tuple[int, int] | None:
        try:
            io_ = self._psutil.disk_io_counters()
        except (OSError, RuntimeError):
            return None
        return (int(io_.read_bytes), int(io_.write_bytes)) if io_ else None

    def _net(self) -> tuple[int, int] | None:
        try:
            io_ = self._psutil.net_io_counters()
        except (OSError, RuntimeError):
            return None
        return (int(io_.bytes_recv), int(io_.bytes_sent)) if io_ else None

    def read(self) -> Row:
        raw: list[float | None] = list(self._psutil.cpu_percent(percpu=True))
        per_core = (raw + [None] * self._cores)[: self._cores]
        known = [c for c in per_core if c is not None]
        vm = self._psutil.virtual_memory()
        row: Row = [sum(known) / len(known) if known else None, *per_core]
        row += [int(vm.total - vm.available), int(vm.available)]
        row += _delta(self._disk(), self._disk0) + _delta(self._net(), self._net0)
        row += self._tree()
        return row

    def _tree(self) -> Row:
        """CPU % (100 = one core, as in top) and RSS summed over the root and its descendants."""
        psutil = self._psutil
        if self._ticks % _CHILDREN_REFRESH == 0:
            try:
                current = [self._root, *self._root.children(recursive=True)]
            except psutil.Error:
                current = []
            self._procs = {p.pid: self._procs.get(p.pid, p) for p in current}
        self._ticks += 1
        cpu = 0.0
        rss_root: int | None = None
        rss_tree = 0
        for pid, proc in list(self._procs.items()):
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss = int(proc.memory_info().rss)
            except psutil.Error:
                del self._procs[pid]
                continue
            rss_tree += rss
            if pid == self._root.pid:
                rss_root = rss
        return [cpu, rss_root, rss_tree, len(self._procs)]

    def close(self) -> None:
        self._procs.clear()


def _delta(now: tuple[int, int] | None, start: tuple[int, int] | None) -> Row:
    if now is None or start is None:
        return [None, None]
    return [now[0] - start[0], now[1] - start[1]]


class GpuProbe:
    """NVML: utilisation, memory, SM clock, power and clock-event (throttle) reasons per visible GPU."""

    def __init__(self, nvml: Any, indices: Sequence[int]) -> None:
        self._nvml = nvml
        self._handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        self.columns = [
            f"gpu{i}_{name}"
            for i, _ in self._handles
            for name in ("util_pct", "mem_util_pct", "mem_used_bytes", "sm_clock_mhz", "power_w", "throttle_reasons")
        ]
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read(self) -> Row:
        row: Row = []
        for _, handle in self._handles:
            util = self._call(self._nvml.nvmlDeviceGetUtilizationRates, handle)
            mem = self._call(self._nvml.nvmlDeviceGetMemoryInfo, handle)
            clock = self._call(self._nvml.nvmlDeviceGetClockInfo, handle, self._nvml.NVML_CLOCK_SM)
            power = self._call(self._nvml.nvmlDeviceGetPowerUsage, handle)
            reasons = self._call(self._reasons, handle)
            row += [
                None if util is None else int(util.gpu),
                None if util is None else int(util.memory),
                None if mem is None else int(mem.used),
                None if clock is None else int(clock),
                None if power is None else power / 1000.0,  # NVML reports milliwatts
                None if reasons is None else int(reasons),
            ]
        return row

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None  # e.g. power on a GPU that does not report it

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_gpu_probe() -> tuple[GpuProbe | None, str]:
    """The NVML probe for the GPUs this process may use, or ``None`` and the reason it is skipped."""
    try:
        import pynvml
    except ImportError:
        return None, "skipped: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
        count = int(pynvml.nvmlDeviceGetCount())
    except Exception as err:  # noqa: BLE001 - NVMLError subclasses, or a missing driver library
        return None, f"skipped: NVML unavailable ({err})"
    indices = visible_gpus(count, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if not indices:
        pynvml.nvmlShutdown()
        return None, "skipped: no NVIDIA GPU visible"
    return GpuProbe(pynvml, indices), f"NVML, {len(indices)} GPU(s)"


def visible_gpus(count: int, visible: str | None) -> list[int]:
    """NVML indices of the GPUs named by CUDA_VISIBLE_DEVICES (integers only; UUIDs mean all)."""
    if visible is None:
        return list(range(count))
    out: list[int] = []
    for part in visible.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.lstrip("-").isdecimal():
            return list(range(count))
        index = int(part)
        if index < 0:
            break  # CUDA stops at the first invalid entry
        if index < count:
            out.append(index)
    return out


class TelemetrySampler:
    """Samples the probes every ``interval_s`` on a daemon thread and streams rows to a CSV file."""

    def __init__(
        self,
        path: Path | None,
        probes: Sequence[Probe],
        interval_s: float = 0.1,
        clock: Clock = time.time_ns,
    ) -> None:
        self.path = path
        self.probes = list(probes)
        self.interval_s = interval_s
        self.clock = clock
        self.columns = ["t_unix_ns"] + [c for p in self.probes for c in p.columns]
        self.recent: deque[Row] = deque(maxlen=_KEEP_ROWS)
        self.samples = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._fh: io.TextIOWrapper | None = None
        self._writer: Any = None
        self._whole = 0  # bytes of the CSV known written whole (the last successful flush)

    def start(self) -> None:
        if self.path is not None:
            self._fh = open(self.path, "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed in stop()
            self._writer = csv.writer(self._fh)
            try:
                self._writer.writerow(self.columns)
                self._fh.flush()
                self._whole = os.lseek(self._fh.fileno(), 0, os.SEEK_CUR)
            except OSError as err:  # a full disk already: no telemetry, the run goes on
                self._close_file(err)
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name="aiprof-telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def sample_once(self) -> Row:
        """Read every probe once and append the row; a failing probe gives empty cells, not a crash."""
        row: Row = [self.clock()]
        for probe in self.probes:
            try:
                values = probe.read()
            except Exception as err:  # noqa: BLE001 - telemetry must never break the profiled run
                if len(self.errors) < 5:
                    self.errors.append(f"{type(probe).__name__}: {err}")
                values = [None] * len(probe.columns)
            row += values
        with self._lock:
            self.recent.append(row)
            self.samples += 1
            if self._writer is not None:
                try:
                    self._writer.writerow(["" if v is None else v for v in row])
                    if self.samples % _FLUSH_EVERY == 0 and self._fh is not None:
                        self._fh.flush()
                        self._whole = os.lseek(self._fh.fileno(), 0, os.SEEK_CUR)
                except OSError as err:  # a full disk: stop writing, keep the run going, say why
                    self._close_file(err)
        return row

    def _close_file(self, error: OSError | None = None) -> None:
        """Close the CSV (under ``self._lock``); a write that fails (disk full) is recorded, not raised."""
        fh, self._fh, self._writer = self._fh, None, None
        try:
            if fh is not None:
                fh.close()
        except OSError as err:
            error = error or err
        if error is not None and self.path is not None:  # drop a row cut by the failed write: whole rows only
            with contextlib.suppress(OSError):
                os.truncate(self.path, self._whole)
        if error is not None and len(self.errors) < 5:
            self.errors.append(f"{write_failed(Path(self.path or 'telemetry.csv'), error)}; telemetry stopped there")

    def stop(self) -> None:
        """Stop the thread, take one last sample and close the file. Safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=max(2.0, 5 * self.interval_s))
            self.sample_once()
        with self._lock:
            self._close_file()
        for probe in self.probes:
            probe.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def default_probes(root_pid: int | None = None) -> tuple[list[Probe], dict[str, str]]:
    """psutil (when installed) and NVML (when a GPU is present), with a note on what was skipped."""
    probes: list[Probe] = []
    notes: dict[str, str] = {}
    try:
        probes.append(SystemProbe(root_pid))
        notes["system"] = "psutil"
    except ImportError:
        notes["system"] = "skipped: psutil is not installed (pip install psutil)"
    gpu, note = open_gpu_probe()
    notes["gpu"] = note
    if gpu is not None:
        probes.append(gpu)
    return probes, notes


def read_rows(path: Path, start_ns: int | None = None, end_ns: int | None = None) -> Iterator[dict[str, float]]:
    """Rows back from ``telemetry.csv`` (through :func:`aiprof.rundir.read_telemetry`, the one reader),
    empty cells dropped, optionally within a unix-ns time window."""
    columns = read_telemetry(path)
    times = columns.pop("t_unix_ns", [])
    named = list(columns.items())
    for i, t in enumerate(times):
        if (start_ns is not None and t < start_ns) or (end_ns is not None and t > end_ns):
            continue
        row = {name: col[i] for name, col in named if not math.isnan(col[i])}
        row["t_unix_ns"] = t
        yield row
