"""``aiprof run --memory``: allocator history around the recorded steps, dumped at the window's end and on
OOM, and ``torch.cuda.memory_stats()`` sampled once per step.

On CUDA (the session calls :meth:`MemoryCapture.on_step` at every step boundary):
- when the first recorded step begins, ``torch.cuda.memory._record_memory_history(enabled="all",
  context="all", stacks="python")`` starts, and an OOM observer is attached once;
- when the window ends (or the run does), the history is dumped to ``memory/snapshot.rank<N>.pickle``
  (pickle protocol 4, which every reader handles) and recording stops;
- on an out-of-memory error the observer dumps ``memory/oom.rank<N>.pickle`` before torch raises;
- every step appends a ``memory_stats()`` sample (allocated/reserved current and peak, ``num_alloc_retries``,
  ``num_ooms``, inactive split bytes) plus NVML used memory, when pynvml is present, to
  ``memory/memory_stats.jsonl``.
On CPU there is no allocator history: the profiler's ``profile_memory=True`` ``[memory]`` events (forced on
by ``--memory``) are the input. Everything here imports torch lazily and never raises into the script.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

from aiprof.capture.options import Schedule

MAX_ENTRIES = 1_000_000  # ring buffer of the allocator history: ~ a few hundred MB of stacks at most
STATS_FILE = "memory_stats.jsonl"
_STAT_KEYS = {
    "allocated_bytes": "allocated_bytes.all.current",
    "allocated_bytes_peak": "allocated_bytes.all.peak",
    "reserved_bytes": "reserved_bytes.all.current",
    "reserved_bytes_peak": "reserved_bytes.all.peak",
    "inactive_split_bytes": "inactive_split_bytes.all.current",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
    "num_device_alloc": "num_device_alloc",
    "num_device_free": "num_device_free",
}


class MemoryCapture:
    """Per-process memory capture state; all methods are safe to call when CUDA is absent (they do nothing)."""

    def __init__(self, run_dir: Path, schedule: Schedule, rank: int | None = None) -> None:
        self.dir = run_dir / "memory"
        self.schedule = schedule
        env_rank = os.environ.get("RANK", "0")
        self.rank = rank if rank is not None else (int(env_rank) if env_rank.isdigit() else 0)
        self.recording = False
        self.dumped: list[Path] = []
        self._observer = False
        self._cuda: bool | None = None
        self._nvml: Any = None

    def cuda(self) -> bool:
        if self._cuda is None:
            try:
                import torch

                cuda: Any = torch.cuda
                self._cuda = bool(cuda.is_available() and cuda.is_initialized())
            except Exception:
                self._cuda = False
        return self._cuda

    def on_step(self, step: int) -> None:
        """Step ``step`` (the N of ``ProfilerStep#N``) begins: sample the one that ended, start or stop history."""
        self._cuda = None  # CUDA may have been initialised since the last step
        if not self.cuda():
            return
        self.sample(step - 1)
        recorded = step in self.schedule.recorded_steps(step + 1)
        if recorded and not self.recording:
            self.start()
        elif not recorded and self.recording:
            self.dump("snapshot")
            self.stop()

    def start(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=MAX_ENTRIES)
        self.recording = True
        if not self._observer:
            getattr(torch._C, "_cuda_attach_out_of_memory_observer")(self._on_oom)
            self._observer = True

    def stop(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(enabled=None)
        self.recording = False

    def dump(self, kind: str) -> Path | None:
        """Write the allocator snapshot (segments + recorded history) with pickle protocol 4."""
        import torch

        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{kind}.rank{self.rank}.pickle"
        snap = torch.cuda.memory._snapshot()
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(snap, fh, protocol=4)
        tmp.replace(path)
        self.dumped.append(path)
        return path

    def _on_oom(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        try:
            self.dump("oom")
        except Exception:
            pass

    def sample(self, step: int) -> None:
        import torch

        stats = torch.cuda.memory_stats()
        row: dict[str, Any] = {"step": step, "t_ns": time.time_ns(), "device": torch.cuda.current_device()}
        row.update({k: int(stats.get(v, 0)) for k, v in _STAT_KEYS.items()})
        used = self._nvml_used(row["device"])
        if used is not None:
            row["nvml_used_bytes"] = used
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / STATS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

    def _nvml_used(self, device: int) -> int | None:
        try:
            import pynvml

            if self._nvml is None:
                pynvml.nvmlInit()
                self._nvml = pynvml
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(device)).used)
        except Exception:
            return None

    def finish(self, last_step: int) -> None:
        """The run ends: sample the last step, dump what is still recording."""
        if not self.cuda():
            return
        self.sample(last_step)
        if self.recording:
            self.dump("snapshot")
            self.stop()
