"""The kind of program a trace records, so that a fix speaks the program's language.

Most fix texts are written for PyTorch (``.item()``, ``.to(device, non_blocking=True)``,
``pin_memory=True``). An Nsight Systems report of a CUDA C++ program (or MPI+CUDA, or any CUDA code that
is not PyTorch) shows the same symptoms — a ``cudaDeviceSynchronize`` after every kernel, pageable
``cudaMemcpy`` — but the PyTorch advice means nothing there. The kind is a fact of the trace, never of its
file name::

    from aiprof.rules.framework import fix_text

    fix = fix_text(ctx.trace, "sync", PYTORCH_TEXT)   # PYTORCH_TEXT, or the CUDA wording for a CUDA program

:func:`program_kind` is ``"pytorch"`` when the trace records PyTorch ops (``CPU_OP`` rows: aten ops,
autograd nodes — an nsys report of ``--pytorch=autograd-nvtx`` has them too — or Python frames), or when
it comes from torch.profiler (a Kineto trace: no other source is named in its metadata); ``"cuda"`` for a
report of another profiler (``trace.metadata["source"]``, e.g. ``"nsys"``) with no PyTorch op: a CUDA
program, whose fixes name CUDA API calls. :data:`CUDA_FIXES` maps a rule's fix key to its CUDA wording; a
key without one keeps the rule's own (PyTorch) text.

The training framework around the model is a second fact: a Hugging Face ``Trainer`` user sets
``TrainingArguments(dataloader_num_workers=N)``, not ``DataLoader(num_workers=N)``. :func:`training_framework`
names it (``meta.json``'s ``framework``, written by ``aiprof.hf.Callback`` / ``aiprof.lightning.Profiler``,
else the trace's own frames and annotations: ``transformers/trainer.py`` in a Python frame, Lightning's
``[LightningModule]…`` / ``[_TrainingEpochLoop]…`` annotations or its module paths), and
:func:`framework_words` words a finding's fix in that framework's arguments, from one table:
:data:`FRAMEWORK_FIXES`, keyed by (framework, fix kind); :data:`FIX_KINDS` says which kind each rule's fix
is. The diagnosis applies it to every rank's findings after the rules (:func:`in_framework_words`), so no
rule spells a framework's arguments itself.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from aiprof.trace.model import Kind

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext
    from aiprof.rules.finding import Finding
    from aiprof.rules.views.machine import MachineFacts
    from aiprof.trace.model import Trace

PYTORCH = "pytorch"
CUDA = "cuda"

# A rule's fix (or title) key → its wording for a CUDA program.
CUDA_FIXES: dict[str, str] = {
    "sync.title": "Host round trips (synchronize / blocking copies) cost {saving} per step",
    "sync": (
        "Keep the host from waiting on the device inside the loop: kernels launched on one stream already run "
        "in order, so drop the cudaDeviceSynchronize() / cudaStreamSynchronize() between them; order work "
        "across streams with cudaEventRecord + cudaStreamWaitEvent (no host wait); synchronise once per "
        "iteration, or only before the host reads a result; check launch errors with cudaGetLastError() "
        "instead of a synchronise (or only in debug builds); copy with cudaMemcpyAsync from pinned host memory "
        "(cudaMallocHost / cudaHostRegister) instead of cudaMemcpy; keep values the host reads every iteration "
        "(norms, residuals) on the device and read them back every N iterations."
    ),
    "sync.free": (
        "cudaFree synchronises the whole device: allocate the buffers once outside the loop and reuse them, or "
        "use the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync)."
    ),
    "sync.copy": (
        "A blocking copy: cudaMemcpy from pageable memory waits for the device and stages through a driver "
        "buffer; allocate the host buffer pinned (cudaMallocHost, or cudaHostRegister an existing one) and use "
        "cudaMemcpyAsync on a stream, waiting (cudaStreamSynchronize or an event) only where the host needs "
        "the data; or move the copy out of the loop."
    ),
    "sync.event": (
        "An event wait: cudaEventSynchronize blocks the host until the event's work is done; wait only where "
        "the host needs the result, and order streams with cudaStreamWaitEvent (the device waits, not the host)."
    ),
    "sync.explicit": (
        "One explicit synchronisation (cudaDeviceSynchronize / cudaStreamSynchronize): remove it from the "
        "loop, or do it every N iterations; work on one stream runs in order without it."
    ),
    "sync.once": (
        "Seen once in the profiled window, it may be a one-time cost instead (CUDA context creation or "
        "module loading on first use): profile after a warm-up iteration (cudaProfilerStart/Stop around the "
        "steady loop, with nsys profile --capture-range=cudaProfilerApi)."
    ),
    "pageable_memcpy": (
        "Copy from pinned memory: allocate host buffers with cudaMallocHost (or cudaHostRegister existing "
        "ones) and copy with cudaMemcpyAsync on a stream, so copies overlap kernels and run at full bandwidth."
    ),
    "memcpy_exposed": (
        "Overlap copies with compute: pin the host buffers (cudaMallocHost / cudaHostRegister), issue copies "
        "with cudaMemcpyAsync on a stream other than the kernels' (cudaStreamCreate) and order them with "
        "events (cudaEventRecord + cudaStreamWaitEvent) so the next chunk copies while the current one "
        "computes; keep device-to-host reads out of the loop."
    ),
    "cold_start": (
        "Nothing to fix in the program's loop: these costs are paid once per process (CUDA context creation, "
        "module loading, library handles). Profile the steady state instead: bracket the loop with "
        "cudaProfilerStart() / cudaProfilerStop() after a warm-up iteration and run nsys profile "
        "--capture-range=cudaProfilerApi (or --delay SECONDS). CUDA_MODULE_LOADING=LAZY (the default since "
        "CUDA 11.7) moves module loading to each kernel's first launch, where it shows as a long first "
        "cudaLaunchKernel; create handles (cuBLAS, cuFFT) and allocate buffers once, before the loop."
    ),
    "launch_config": (
        "Give the GPU more parallel work per kernel: launch at least as many blocks as SMs (several per SM: "
        "size the grid from cudaOccupancyMaxActiveBlocksPerMultiprocessor × SM count, with grid-stride loops), "
        "process several small problems per launch (batched kernels, cuBLAS batched/strided GEMM), or run "
        "independent small kernels concurrently on several streams; block sizes should be multiples of 32."
    ),
}


def program_kind(trace: Trace) -> str:
    """``"pytorch"`` or ``"cuda"`` (see the module's docstring)."""
    kinds = trace.columns.kind
    if bool(np.isin(kinds, (int(Kind.CPU_OP), int(Kind.PYTHON))).any()):
        return PYTORCH
    source = trace.metadata.get("source") if isinstance(trace.metadata, dict) else None
    return CUDA if isinstance(source, str) and source not in ("", "kineto") else PYTORCH


def fix_text(trace: Trace, key: str, default: str) -> str:
    """The fix (or title) ``key`` for the program ``trace`` records: ``default`` (the PyTorch wording) unless
    the trace is of a CUDA program and :data:`CUDA_FIXES` has a wording for ``key``."""
    if key in CUDA_FIXES and program_kind(trace) == CUDA:
        return CUDA_FIXES[key]
    return default


# ---------------------------------------------------------------------------------------------------
# The training framework's words
# ---------------------------------------------------------------------------------------------------
TRANSFORMERS = "transformers"
LIGHTNING = "lightning"
ACCELERATE = "accelerate"
TORCHTITAN = "torchtitan"  # recognised (the report's metadata); no wording of its own yet: PyTorch's
TORCHTUNE = "torchtune"

# A finding id → the kind of fix it gives (the second key of FRAMEWORK_FIXES).
FIX_KINDS: dict[str, str] = {
    "data_loading": "data_loading",
    "precision": "precision",
    "fusion_opportunity": "compile",
    "host_bound": "compile",
    "launch_bound": "compile",
    "memory_pressure": "checkpointing",
    "exposed_communication": "ddp",
    "optimizer_unfused": "optimizer",
}

# (framework, fix kind) → the fix in the framework's words. ``{fix}`` is the rule's own (PyTorch) text,
# kept where the framework's argument only adds to it; without it the entry replaces the text. The loader
# sizing fills ``{workers}`` (a number, or N when the host's cores are unknown), ``{why}`` and ``{pin}``
# (``, …pin_memory=True`` on a GPU run); ``{half}`` is the 16-bit type the GPU's tensor cores take.
FRAMEWORK_FIXES: dict[tuple[str, str], str] = {
    (TRANSFORMERS, "data_loading"): (
        "Load batches in background workers: TrainingArguments(dataloader_num_workers={workers}, "
        "dataloader_persistent_workers=True, dataloader_prefetch_factor=2{pin}) ({why}); the Trainer builds "
        "its DataLoader from these."
    ),
    (TRANSFORMERS, "data_loading.workers"): (
        "{fix} With the Trainer these are TrainingArguments(dataloader_num_workers=..., "
        "dataloader_persistent_workers=True, dataloader_prefetch_factor=4{pin})."
    ),
    (TRANSFORMERS, "precision"): (
        "{fix} With the Trainer: TrainingArguments({half}=True) (autocast and, for fp16, the gradient scaler "
        "are the Trainer's); tf32=True for what stays FP32."
    ),
    (TRANSFORMERS, "compile"): "{fix} With the Trainer: TrainingArguments(torch_compile=True) compiles the model.",
    (TRANSFORMERS, "checkpointing"): (
        "{fix} With the Trainer: TrainingArguments(activation_checkpointing=True) (gradient_checkpointing=True "
        "before transformers 5) recomputes activations instead of keeping them, and a smaller "
        "per_device_train_batch_size with gradient_accumulation_steps=N keeps the effective batch."
    ),
    (TRANSFORMERS, "ddp"): (
        "{fix} With the Trainer: TrainingArguments(ddp_bucket_cap_mb=25-100) sizes DDP's buckets, "
        "gradient_accumulation_steps=N all-reduces once per N micro-batches (the Trainer skips the sync in "
        "between), and ddp_find_unused_parameters=False avoids the extra graph walk."
    ),
    (TRANSFORMERS, "optimizer"): "{fix} With the Trainer: TrainingArguments(optim=\"adamw_torch_fused\").",
    (ACCELERATE, "data_loading"): (
        "Load batches in background workers: accelerator.prepare(DataLoader(dataset, batch_size=..., "
        "num_workers={workers}, persistent_workers=True, prefetch_factor=2{pin})) ({why}); Accelerate shards "
        "the loader you give it and keeps its workers."
    ),
    (ACCELERATE, "precision"): (
        "{fix} With Accelerate: Accelerator(mixed_precision=\"{half}\") (it runs autocast and, for fp16, the "
        "gradient scaler)."
    ),
    (ACCELERATE, "compile"): "{fix} With Accelerate: Accelerator(dynamo_backend=\"inductor\") compiles the prepared model.",
    (ACCELERATE, "checkpointing"): (
        "{fix} With Accelerate: a smaller batch with Accelerator(gradient_accumulation_steps=N) and "
        "`with accelerator.accumulate(model):` keeps the effective batch."
    ),
    (ACCELERATE, "ddp"): (
        "{fix} With Accelerate: Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(bucket_cap_mb=25-100, "
        "gradient_as_bucket_view=True)]), and gradient_accumulation_steps=N with accelerator.accumulate(model) "
        "all-reduces once per N micro-batches."
    ),
    (LIGHTNING, "data_loading"): (
        "Load batches in background workers: return DataLoader(dataset, batch_size=..., num_workers={workers}, "
        "persistent_workers=True, prefetch_factor=2{pin}) from your LightningDataModule's train_dataloader() "
        "(or the LightningModule's) ({why})."
    ),
    (LIGHTNING, "data_loading.workers"): (
        "{fix} In Lightning these are the DataLoader(...) arguments your LightningDataModule's "
        "train_dataloader() returns."
    ),
    (LIGHTNING, "precision"): (
        "{fix} With Lightning: Trainer(precision=\"{lightning_half}\") (Lightning runs autocast and the "
        "scaler); torch.set_float32_matmul_precision(\"high\") for what stays FP32."
    ),
    (LIGHTNING, "compile"): (
        "{fix} With Lightning: compile the LightningModule before fitting: model = torch.compile(model); "
        "trainer.fit(model, datamodule)."
    ),
    (LIGHTNING, "checkpointing"): (
        "{fix} With Lightning: wrap the heavy blocks of your LightningModule in "
        "torch.utils.checkpoint.checkpoint (or FSDPStrategy(activation_checkpointing_policy={{Block}})), and "
        "a smaller batch with Trainer(accumulate_grad_batches=N) keeps the effective batch."
    ),
    (LIGHTNING, "ddp"): (
        "{fix} With Lightning: Trainer(strategy=DDPStrategy(bucket_cap_mb=25-100, gradient_as_bucket_view=True, "
        "static_graph=True)), and Trainer(accumulate_grad_batches=N) all-reduces once per N batches."
    ),
    (LIGHTNING, "optimizer"): (
        "{fix} With Lightning: build that optimizer in configure_optimizers() (return "
        "torch.optim.AdamW(self.parameters(), lr=..., foreach=True), or fused=True on a GPU)."
    ),
}

# Whose code a trace's frames and annotations are: Python frames carry file paths, Lightning's own
# profiler annotations are "[LightningModule]Model.training_step", "[_TrainingEpochLoop].train_dataloader_next".
_FRAMES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (LIGHTNING, re.compile(r"(?:pytorch_lightning|lightning[/\\]pytorch)[/\\]|^\[(?:LightningModule|_TrainingEpochLoop|"
                           r"_EvaluationLoop|_FitLoop|Strategy|LightningDataModule)\]")),
    (TRANSFORMERS, re.compile(r"transformers[/\\](?:trainer|trainer_callback|training_args)\.py")),
    (ACCELERATE, re.compile(r"accelerate[/\\](?:accelerator|data_loader|optimizer)\.py")),
    (TORCHTITAN, re.compile(r"(?:^|[/\\])torchtitan[/\\]")),
    (TORCHTUNE, re.compile(r"(?:^|[/\\])torchtune[/\\]")),
)


def run_framework(meta: Any) -> str | None:
    """The framework ``meta.json`` names (``framework.name``: aiprof's integrations write it), else None."""
    entry = meta.get("framework") if isinstance(meta, dict) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    if not isinstance(name, str):
        return None
    return LIGHTNING if name in ("lightning", "pytorch_lightning", "lightning.pytorch") else name


def trace_framework(trace: Trace) -> str | None:
    """The framework the trace's own strings (Python frames, annotations, recorded stacks) show, else None."""
    texts = [*trace.strings, *trace.stacks.values()]
    for name, pattern in _FRAMES:
        if any(pattern.search(text) for text in texts):
            return name
    return None


def training_framework(ctx: RankContext) -> str | None:
    """The training framework of ``ctx``'s run: ``meta.json``'s, else the trace's (see the module docstring)."""
    return run_framework(ctx.inputs.meta) or trace_framework(ctx.trace)


def in_framework_words(ctx: RankContext, findings: list[Finding]) -> list[Finding]:
    """The rank's findings with their fixes in the words of the run's training framework
    (:func:`framework_words`); unchanged for plain PyTorch. The diagnosis applies it after the rules."""
    framework = training_framework(ctx)
    if framework is None or not any(f.id in FIX_KINDS for f in findings):
        return findings
    facts = ctx.views.machine
    return [
        dataclasses.replace(f, fix=framework_words(framework, f.id, f.fix, f.evidence, facts)) if f.id in FIX_KINDS else f
        for f in findings
    ]


def framework_words(framework: str, finding_id: str, default: str, evidence: dict[str, Any], facts: MachineFacts) -> str:
    """``default`` in ``framework``'s words when :data:`FRAMEWORK_FIXES` has them for the finding's kind
    (``facts``: the machine, for the loader's worker count and GPU-only arguments); else ``default``."""
    kind = FIX_KINDS.get(finding_id)
    if kind == "data_loading":
        if str(evidence.get("workers", "")).startswith("multi"):
            kind = "data_loading.workers"  # workers exist but cannot keep up: the rule's advice, then the names
        elif facts.loader_workers == 0:
            return default  # a single core: no worker to add
    template = FRAMEWORK_FIXES.get((framework, kind or ""))
    if template is None:
        return default
    return template.format_map(_fix_values(framework, default, facts))


def _fix_values(framework: str, default: str, facts: MachineFacts) -> dict[str, str]:
    from aiprof.rules.views.machine import loader_workers_reason

    workers = facts.loader_workers
    fp16_only = "GradScaler" in default and "bfloat16" not in default  # precision_fix's Volta/Turing wording
    pin = "dataloader_pin_memory" if framework == TRANSFORMERS else "pin_memory"
    return {
        "fix": default.rstrip(),
        "workers": "N" if workers is None else str(workers),
        "why": loader_workers_reason(facts),
        "pin": f", {pin}=True" if facts.is_gpu else "",
        "half": "fp16" if fp16_only else "bf16",
        "lightning_half": "16-mixed" if fp16_only else "bf16-mixed",
    }


__all__ = [
    "ACCELERATE",
    "CUDA",
    "CUDA_FIXES",
    "FIX_KINDS",
    "FRAMEWORK_FIXES",
    "LIGHTNING",
    "PYTORCH",
    "TORCHTITAN",
    "TORCHTUNE",
    "TRANSFORMERS",
    "fix_text",
    "in_framework_words",
    "framework_words",
    "program_kind",
    "run_framework",
    "trace_framework",
    "training_framework",
]
