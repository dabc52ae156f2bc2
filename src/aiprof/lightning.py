"""Lightning: ``Trainer(profiler=aiprof.lightning.Profiler())`` profiles ``trainer.fit``.

::

    import aiprof.lightning
    trainer = Trainer(max_epochs=3, profiler=aiprof.lightning.Profiler())
    trainer.fit(model, datamodule)   # writes ./aiprof-runs/<time>-<script>/ and prints aiprof's summary

It is a Lightning ``Profiler``: Lightning calls ``start(action)`` / ``stop(action)`` around every hook, and
these drive the capture:

- The capture starts with the first training epoch (``run_training_epoch``), after setup and the
  validation sanity check.
- A step ends when a ``run_training_batch`` that stepped the optimizer ends (the LightningModule's
  ``optimizer_step`` hook, or ``optimizer_step`` under manual optimization): one step per
  ``trainer.global_step``, holding its ``accumulate_grad_batches`` batches and their fetches
  (``[_TrainingEpochLoop].train_dataloader_next``, which Lightning runs before each batch).
- Validation (``on_validation_start`` … ``on_validation_end`` of the LightningModule) is kept apart: its
  batches are not counted as the training step's data-loader waits, the span is annotated
  ``[aiprof] validation`` in the trace, and ``meta.json`` says after which global steps it ran and how long.
- Lightning's own actions for the fetch, ``training_step`` and validation are recorded as annotations of
  the same names, so the trace itself says it is Lightning's.

``trainer.validate`` / ``test`` / ``predict`` are not captured (no optimizer steps: use ``aiprof.profile``).
Each DDP rank writes into the same run directory when ``out=`` is given (the ranks of a torchrun job share
it); rank 0 prints the summary once every rank has flushed. Works with ``lightning`` (``lightning.pytorch``,
preferred when both are installed) or ``pytorch_lightning`` (``pip install 'aiprof[lightning]'``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

try:
    import lightning.pytorch as _pl
    from lightning.pytorch.profilers import Profiler as _LightningProfiler
except ImportError:
    try:
        import pytorch_lightning as _pl
        from pytorch_lightning.profilers import Profiler as _LightningProfiler
    except ImportError as err:  # pragma: no cover - only Lightning users import this module
        raise ImportError(f"aiprof.lightning needs lightning or pytorch_lightning ({err}); "
                          "install it: pip install 'aiprof[lightning]'") from None

from aiprof.capture import session as session_mod
from aiprof.capture.options import Schedule
from aiprof.integrations import FrameworkRun, scalar_settings

FETCH = "[_TrainingEpochLoop].train_dataloader_next"
VALIDATION = "[aiprof] validation"
# Lightning's actions worth an annotation of their own in the trace (a few per batch, not every hook).
_ANNOTATED = (FETCH, ".training_step")


class Profiler(_LightningProfiler):  # type: ignore[misc]  # whichever Lightning is installed
    """Profile ``trainer.fit`` into an aiprof run directory; the options are :func:`aiprof.profile`'s
    (``out``, ``schedule``, ``record_shapes``, ``profile_memory``, ``with_stack``, ``telemetry``,
    ``memory``), plus ``summary`` (print aiprof's end-of-run summary, default True)."""

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        schedule: Schedule | tuple[int, ...] | dict[str, int] | None = None,
        summary: bool = True,
        **profile_options: Any,
    ) -> None:
        super().__init__()
        self._args = (out, schedule, profile_options, summary)
        self.run: FrameworkRun | None = None
        self._fit = False
        self._optimizer_steps = 0
        self._stepped = False
        self._open: dict[str, list[Any]] = {}
        self._validation: tuple[float, int] | None = None  # (start, global step) of a running validation
        self._validations: list[int] = []
        self._validation_s = 0.0
        self._batches = 0
        self._trainer: Any = None
        self._first_step = 0

    @property
    def run_dir(self) -> Any:
        """The run directory, once training has begun."""
        return self.run.run_dir if self.run is not None else None

    # --- Lightning's Profiler interface ---------------------------------------------------------
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank=local_rank, log_dir=log_dir)
        self._fit = stage == "fit"
        self._trainer = _calling_trainer()

    def start(self, action_name: str) -> None:
        if action_name == "run_training_epoch" and self._fit and self.run is None:
            self._begin()
        if self.run is None or not self.run.active:
            return
        if action_name.endswith(".on_validation_start") and action_name.startswith("[LightningModule]"):
            self._validation_begins()
        elif action_name == FETCH or action_name.endswith(_ANNOTATED[1:]):
            self._annotate(action_name)

    def stop(self, action_name: str) -> None:
        if self.run is None or not self.run.active:
            return
        self._close(action_name)
        if action_name == "optimizer_step" or (
            action_name.startswith("[LightningModule]") and action_name.endswith(".optimizer_step")
        ):
            self._optimizer_steps += 1
            self._stepped = True
        elif action_name == "run_training_batch":
            self._batches += 1
            if self._stepped:
                self._stepped = False
                self.run.step(self._first_step + self._optimizer_steps)
        elif action_name.endswith(".on_validation_end") and action_name.startswith("[LightningModule]"):
            self._validation_ends()

    def teardown(self, stage: str | None) -> None:
        run = self.run
        if run is not None and run.active:
            for name in list(self._open):
                while self._open.get(name):
                    self._close(name)
            run.end(global_step=self._first_step + self._optimizer_steps, evaluations_after_steps=self._validations,
                    loops={"training_batches": self._batches, "validation_runs": len(self._validations),
                           "validation_ms": round(self._validation_s * 1e3)})
        super().teardown(stage)

    def summary(self) -> str:
        return ""  # aiprof prints its own summary at the end of the run

    # --- pieces -----------------------------------------------------------------------------------
    def _begin(self) -> None:
        out, schedule, options, summary = self._args
        self.run = FrameworkRun("lightning", getattr(_pl, "__version__", None), "aiprof.lightning.Profiler", out=out,
                                schedule=schedule, profile_options=options, summary=summary)
        self.run.begin(settings={"package": _pl.__name__, **trainer_settings(self._trainer)})
        self._first_step = int(getattr(self._trainer, "global_step", 0) or 0)
        self.run.note(first_global_step=self._first_step)

    def _annotate(self, name: str) -> None:
        from torch.autograd.profiler import record_function

        rf = record_function(name)
        rf.__enter__()  # type: ignore[no-untyped-call]
        self._open.setdefault(name, []).append(rf)

    def _close(self, name: str) -> None:
        stack = self._open.get(name)
        if stack:
            stack.pop().__exit__(None, None, None)
            if not stack:
                del self._open[name]

    def _validation_begins(self) -> None:
        if self._validation is not None:
            return
        self._validation = (time.perf_counter(), self._first_step + self._optimizer_steps)
        self._annotate(VALIDATION)
        _pause_loader_tracking(True)

    def _validation_ends(self) -> None:
        if self._validation is None:
            return
        started, after = self._validation
        self._validation = None
        self._close(VALIDATION)
        _pause_loader_tracking(False)
        self._validations.append(after)
        self._validation_s += time.perf_counter() - started


def _calling_trainer() -> Any:
    """The Trainer whose ``_run`` calls ``profiler.setup`` (its caller's ``self``); None if it is not one.
    Lightning hands its profiler no Trainer; its settings (precision, accumulation, strategy) are worth
    recording, and a missing one only leaves them out of meta.json."""
    frame = sys._getframe(2)  # setup <- Trainer._run
    candidate = frame.f_locals.get("self") if frame is not None else None
    return candidate if isinstance(candidate, _pl.Trainer) else None


def trainer_settings(trainer: Any) -> dict[str, Any]:
    """The Trainer's speed-relevant settings as plain scalars (empty without a Trainer)."""
    if trainer is None:
        return {}
    out: dict[str, Any] = scalar_settings(trainer, ("precision", "accumulate_grad_batches", "num_devices",
                                                    "num_nodes", "world_size", "max_epochs", "max_steps",
                                                    "val_check_interval", "check_val_every_n_epoch"))
    strategy = getattr(trainer, "strategy", None)
    out["strategy"] = type(strategy).__name__ if strategy is not None else None
    out["accelerator"] = type(getattr(trainer, "accelerator", None)).__name__
    return out


def _pause_loader_tracking(paused: bool) -> None:
    """Validation batches are not the training step's data-loader waits."""
    session = session_mod.current()
    if session is not None:
        session.tracker.paused = paused


__all__ = ["FETCH", "VALIDATION", "Profiler"]
