"""Data-loader tracking: time the training loop spends waiting for each batch, per step, in every step
(not only the few the profiler records), and how each DataLoader is configured.

It patches ``_BaseDataLoaderIter.__next__`` (every DataLoader iterator inherits it) once per process.
The per-step table lives in int64 arrays: a million steps cost 56 MB.

Each batch's size is read from its shape only (never its values): ``samples`` is the first dimension of the
batch's first tensor, ``tokens`` is batch × sequence of its token ids — the ``input_ids`` entry of a dict
batch, else the first 2-D integer tensor (:func:`batch_size`). A batch without tensors counts −1 (unknown).
"""

from __future__ import annotations

import os
import threading
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiprof.rundir import atomic_write, format_waits

_PATCHED_FLAG = "_aiprof_patched"


class DataLoaderTracker:
    """Accumulates batch waits into the current step; the session closes steps with ``end_step``."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.thread = threading.get_ident()  # the training loop's thread; loaders read elsewhere are not its waits
        self.loaders: list[dict[str, Any]] = []
        self._seen: set[int] = set()
        self.step_index = -1  # -1: before the first step marker (setup, first batch)
        self._wait_ns = 0
        self._batches = 0
        self._samples = 0  # -1 once a batch of the step did not tell its size
        self._tokens = 0
        self._step_start_ns = time.time_ns()
        self.steps = array("q")
        self.starts = array("q")
        self.ends = array("q")
        self.waits = array("q")
        self.batches = array("q")
        self.samples = array("q")
        self.tokens = array("q")
        self.total_wait_ns = 0
        self.total_batches = 0
        self.before_next: Callable[[], None] | None = None  # the session applies a pending step boundary
        # Set while a framework runs a loop that is not training (Lightning's validation): its batches are
        # not the training step's waits (aiprof.lightning counts them apart).
        self.paused = False

    def begin(self, step_index: int) -> None:
        """Start counting step ``step_index`` now (capture start)."""
        self.step_index = step_index
        self._step_start_ns = time.time_ns()

    def end_step(self, next_index: int) -> None:
        """Close the current step's row and open the next one."""
        now = time.time_ns()
        self.steps.append(self.step_index)
        self.starts.append(self._step_start_ns)
        self.ends.append(now)
        self.waits.append(self._wait_ns)
        self.batches.append(self._batches)
        self.samples.append(self._samples if self._batches else -1)
        self.tokens.append(self._tokens if self._batches else -1)
        self.step_index, self._step_start_ns = next_index, now
        self._wait_ns = self._batches = self._samples = self._tokens = 0

    def note_loader(self, iterator: Any) -> None:
        """Record the configuration of the DataLoader behind ``iterator`` (once per loader)."""
        loader = getattr(iterator, "_aiprof_loader", None)
        key = id(loader) if loader is not None else id(type(iterator))
        if key in self._seen:
            return
        self._seen.add(key)
        self.loaders.append(describe_iterator(iterator))

    def record_wait(self, wait_ns: int, batch: bool = True, size: tuple[int, int] = (-1, -1)) -> None:
        """Add one ``__next__`` call: its wait, and the batch's (samples, tokens), −1 where unknown."""
        self._wait_ns += wait_ns
        self._batches += int(batch)
        if batch:
            samples, tokens = size
            self._samples = -1 if samples < 0 or self._samples < 0 else self._samples + samples
            self._tokens = -1 if tokens < 0 or self._tokens < 0 else self._tokens + tokens
        self.total_wait_ns += wait_ns
        self.total_batches += int(batch)

    @property
    def active(self) -> bool:
        return self.total_batches > 0

    def write_csv(self, path: Path) -> None:
        """``step,start_unix_ns,end_unix_ns,wait_ns,batches,samples,tokens``; the open step is closed first."""
        if self._batches or self._wait_ns:
            self.end_step(self.step_index + 1)
        rows = zip(self.steps, self.starts, self.ends, self.waits, self.batches, self.samples, self.tokens)
        atomic_write(path, format_waits(rows))

    def summary(self) -> dict[str, Any]:
        waits = sorted(w for s, w in zip(self.steps, self.waits) if s >= 0)
        return {
            "loaders": self.loaders,
            "batches": self.total_batches,
            "wait_total_ms": round(self.total_wait_ns / 1e6, 3),
            "wait_median_ms_per_step": round(waits[len(waits) // 2] / 1e6, 3) if waits else None,
        }


def describe_iterator(iterator: Any) -> dict[str, Any]:
    """The settings that decide data-loading speed, read from the iterator and its DataLoader."""
    loader = getattr(iterator, "_aiprof_loader", None)
    src = loader if loader is not None else iterator
    dataset = getattr(iterator, "_dataset", None) or getattr(loader, "dataset", None)
    try:
        length: int | None = len(dataset) if dataset is not None else None
    except TypeError:
        length = None
    context = getattr(src, "multiprocessing_context", None)
    return {
        "num_workers": getattr(iterator, "_num_workers", getattr(src, "num_workers", None)),
        "pin_memory": getattr(iterator, "_pin_memory", getattr(src, "pin_memory", None)),
        "prefetch_factor": getattr(iterator, "_prefetch_factor", getattr(src, "prefetch_factor", None)),
        "persistent_workers": getattr(iterator, "_persistent_workers", getattr(src, "persistent_workers", None)),
        "batch_size": getattr(src, "batch_size", None),
        "drop_last": getattr(iterator, "_drop_last", getattr(src, "drop_last", None)),
        "iterator": type(iterator).__name__,
        "dataset": type(dataset).__name__ if dataset is not None else None,
        "dataset_len": length,
        "multiprocessing_context": None if context is None else str(getattr(context, "_name", context)),
    }


def batch_size(batch: Any, tensor_type: type, max_items: int = 16) -> tuple[int, int]:
    """(samples, tokens) of a batch, from shapes only; −1 where the batch does not tell.

    The tensors are looked for in the batch itself, or the items of a tuple/list/dict batch and one level
    below (at most ``max_items`` each); a dict's ``input_ids`` comes first. ``samples``: the first
    dimension of the first tensor found. ``tokens``: batch × sequence (the first two dimensions) of the
    first 2-D integer tensor (token ids; a 1-D integer tensor is labels, not tokens)."""
    tensors: list[Any] = []
    pending: list[tuple[Any, int]] = [(batch, 0)]
    while pending and len(tensors) < max_items:
        item, depth = pending.pop(0)
        if isinstance(item, tensor_type):
            tensors.append(item)
        elif depth < 2 and isinstance(item, dict):
            keys = sorted(list(item)[:max_items], key=lambda k: k != "input_ids")
            pending += [(item[k], depth + 1) for k in keys]
        elif depth < 2 and isinstance(item, (list, tuple)):
            pending += [(x, depth + 1) for x in item[:max_items]]
    samples = tokens = -1
    for t in tensors:
        shape = tuple(t.shape)
        if samples < 0 and shape:
            samples = int(shape[0])
        if tokens < 0 and len(shape) == 2 and not (t.is_floating_point() or t.is_complex()) and str(t.dtype) != "torch.bool":
            tokens = int(shape[0]) * int(shape[1])
    return samples, tokens


_tracker: DataLoaderTracker | None = None


def set_tracker(tracker: DataLoaderTracker | None) -> None:
    global _tracker
    _tracker = tracker


def install() -> None:
    """Patch the DataLoader iterator base class once; the patch forwards to the current tracker."""
    import torch
    from torch.utils.data import dataloader as dl

    tensor_type = torch.Tensor
    base = dl._BaseDataLoaderIter
    if getattr(base.__next__, _PATCHED_FLAG, False):
        return
    original_next = base.__next__
    original_init = base.__init__

    def __init__(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, loader, *args, **kwargs)
        self._aiprof_loader = loader

    def __next__(self: Any) -> Any:
        tracker = _tracker
        if tracker is None or tracker.paused or tracker.pid != os.getpid() or tracker.thread != threading.get_ident():
            return original_next(self)
        if tracker.before_next is not None:
            tracker.before_next()
        tracker.note_loader(self)
        t0 = time.perf_counter_ns()
        try:
            batch = original_next(self)
        except StopIteration:
            tracker.record_wait(time.perf_counter_ns() - t0, batch=False)
            raise
        waited = time.perf_counter_ns() - t0
        try:
            size = batch_size(batch, tensor_type)
        except Exception:  # a batch type that breaks the inspection: its size is unknown, the run goes on
            size = (-1, -1)
        tracker.record_wait(waited, size=size)
        return batch

    setattr(__next__, _PATCHED_FLAG, True)
    base.__init__ = __init__  # type: ignore[method-assign]
    base.__next__ = __next__  # type: ignore[method-assign]
