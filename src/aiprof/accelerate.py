"""Hugging Face Accelerate: ``with aiprof.accelerate.profile(accelerator): ...`` profiles a training loop.

::

    import aiprof.accelerate
    accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision="bf16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    with aiprof.accelerate.profile(accelerator):        # → ./aiprof-runs/<time>-<script>/ and a summary
        for batch in loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()

A step ends at each real optimizer update: Accelerate's prepared optimizer skips ``step()`` on the
accumulation micro-batches, and aiprof's optimizer hook sees only the updates, so with
``gradient_accumulation_steps=K`` a step holds its K micro-batches. ``aiprof.step()`` inside the loop ends
steps explicitly instead. It adds what ``accelerator.profile()`` (``ProfileKwargs``) lacks: telemetry, the
per-step data-loader waits, the run directory and the settings (``mixed_precision``,
``gradient_accumulation_steps``, the distributed type and process count) in ``meta.json``; the fixes then
name ``Accelerator(...)`` arguments. What ``ProfileKwargs(output_trace_dir=DIR)`` writes
(``DIR/profile_<process_index>.json``) is read by ``aiprof analyze DIR`` as it is.

Needs ``accelerate`` (``pip install 'aiprof[hf]'``); the rest of aiprof never imports it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

try:
    import accelerate as _accelerate
except ImportError as err:  # pragma: no cover - only Accelerate users import this module
    raise ImportError(f"aiprof.accelerate needs accelerate ({err}); install it: pip install 'aiprof[hf]'") from None

from aiprof.capture.options import Schedule
from aiprof.integrations import FrameworkRun, scalar_settings

SETTINGS = ("mixed_precision", "gradient_accumulation_steps", "num_processes", "process_index", "distributed_type",
            "split_batches", "even_batches")


@contextlib.contextmanager
def profile(
    accelerator: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    schedule: Schedule | tuple[int, ...] | dict[str, int] | None = None,
    summary: bool = True,
    **profile_options: Any,
) -> Iterator[FrameworkRun]:
    """Profile the enclosed training loop of ``accelerator`` into an aiprof run directory; the options are
    :func:`aiprof.profile`'s, plus ``summary`` (print aiprof's end-of-run summary, default True). Yields the
    :class:`aiprof.integrations.FrameworkRun` (``run_dir``)."""
    run = FrameworkRun("accelerate", _accelerate.__version__, "aiprof.accelerate.profile", out=out, schedule=schedule,
                       profile_options=profile_options, summary=summary, auto_step=True)
    run.begin(settings=scalar_settings(accelerator, SETTINGS))
    try:
        yield run
    except BaseException as err:
        run.end(err)
        raise
    run.end()


__all__ = ["SETTINGS", "profile"]
