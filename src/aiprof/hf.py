"""Hugging Face Transformers: ``Trainer(..., callbacks=[aiprof.hf.Callback()])`` profiles the training run.

::

    import aiprof.hf
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[aiprof.hf.Callback()])
    trainer.train()          # writes ./aiprof-runs/<time>-<script>/ and prints aiprof's summary

One step is one optimizer update (``on_step_end``: the Trainer's ``global_step``), so with
``gradient_accumulation_steps=K`` a step holds its K micro-batches, and the batches of a step are fetched
inside it (the Trainer fetches them before ``on_step_begin``). ``meta.json``'s ``framework`` records
``transformers`` and its version, the data-loader, precision, compile, checkpointing, accumulation and DDP
settings of the ``TrainingArguments`` (the rules word their fixes in these arguments), the evaluations run
and ``step_offset``: the trace's ``ProfilerStep#N`` is global step ``N + step_offset``.

Under ``aiprof run`` the callback joins the running capture (its steps become the Trainer's steps) and
``aiprof run`` prints the summary. Needs ``transformers`` (``pip install 'aiprof[hf]'``); the rest of
aiprof never imports it.
"""

from __future__ import annotations

import os
from typing import Any

try:
    import transformers
    from transformers import TrainerCallback
except ImportError as err:  # pragma: no cover - the module is only imported by Trainer users
    raise ImportError(f"aiprof.hf needs transformers ({err}); install it: pip install 'aiprof[hf]'") from None

from aiprof.capture.options import Schedule
from aiprof.integrations import FrameworkRun, scalar_settings

# The TrainingArguments that decide the speed of a step, as the rules' fixes name them.
SETTINGS: tuple[str, ...] = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "dataloader_prefetch_factor",
    "dataloader_drop_last",
    "bf16",
    "fp16",
    "tf32",
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
    "activation_checkpointing",
    "gradient_checkpointing",
    "optim",
    "max_steps",
    "logging_steps",
    "eval_strategy",
    "eval_steps",
    "save_strategy",
    "save_steps",
    "ddp_backend",
    "ddp_bucket_cap_mb",
    "ddp_find_unused_parameters",
    "world_size",
    "n_gpu",
)


class Callback(TrainerCallback):
    """Profile a ``Trainer.train()`` run into an aiprof run directory; the options are
    :func:`aiprof.profile`'s (``out``, ``schedule``, ``record_shapes``, ``profile_memory``, ``with_stack``,
    ``telemetry``, ``memory``), plus ``summary`` (print aiprof's end-of-run summary, default True)."""

    def __init__(
        self,
        out: str | os.PathLike[str] | None = None,
        *,
        schedule: Schedule | tuple[int, ...] | dict[str, int] | None = None,
        summary: bool = True,
        **profile_options: Any,
    ) -> None:
        self._args = (out, schedule, profile_options, summary)
        self.run: FrameworkRun | None = None
        self._evaluations: list[int] = []

    @property
    def run_dir(self) -> Any:
        """The run directory, once training has begun."""
        return self.run.run_dir if self.run is not None else None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        out, schedule, options, summary = self._args
        self.run = FrameworkRun("transformers", transformers.__version__, "aiprof.hf.Callback", out=out,
                                schedule=schedule, profile_options=options, summary=summary)
        self._evaluations = []
        self.run.begin(settings=scalar_settings(args, SETTINGS))
        self.run.note(first_global_step=int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.step(int(state.global_step))

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Evaluation runs after on_step_end, so its time is inside the next step: say which steps hold one.
        self._evaluations.append(int(state.global_step))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.end(global_step=int(state.global_step), evaluations_after_steps=self._evaluations)


__all__ = ["SETTINGS", "Callback"]
