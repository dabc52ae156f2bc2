"""Fixes in the training framework's words (:mod:`aiprof.rules.framework`): a Hugging Face Trainer run's
data-loading fix names ``TrainingArguments(dataloader_num_workers=…)``, a Lightning run's its
``train_dataloader()``; the framework comes from ``meta.json`` (the integrations write it) or from the
trace's own frames and annotations; a plain PyTorch trace keeps the PyTorch words."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.rules import DEFAULT_OPTIONS, Finding, diagnose_rank
from aiprof.rules.framework import (ACCELERATE, FIX_KINDS, FRAMEWORK_FIXES, LIGHTNING, TRANSFORMERS, framework_words,
                                    run_framework, trace_framework)
from aiprof.rules.views.machine import MachineFacts
from aiprof.rules.registry import DEFAULT_RANK_RULES
from aiprof.rules.spec import spec_of
from aiprof.rules.context import RunInputs, load_run_inputs
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

HF_FRAME = "/venv/lib/python3.11/site-packages/transformers/trainer.py(1894): _inner_training_loop"
PL_ANNOTATION = "[_TrainingEpochLoop].train_dataloader_next"


def _loader_bound(marker: str | None) -> TraceBuilder:
    """Four GPU steps, each idle 300 µs waiting for a single-process loader; ``marker``: a Python frame
    (a path) or a Lightning annotation (``[...]``) inside every step."""
    b = TraceBuilder()
    for i in range(4):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        op = b.cpu_op("aten::mm", ts=t0 + 10, dur=20)
        b.launch(op, kernel="ampere_sgemm_128x64_nn", kernel_ts=t0 + 40, kernel_dur=600, grid=(264, 1, 1))
        b.dataloader(ts=t0 + 650, dur=300)
        if marker is not None and marker.startswith("["):
            b.annotation(marker, ts=t0 + 649, dur=302)
        elif marker is not None:
            b.python(marker, ts=t0 + 1, dur=990)
    return b


def _findings(path: Path, extras: RunInputs | None = None) -> dict[str, Finding]:
    trace = aiprof.load(path)
    assert isinstance(trace, Trace)
    found, notes = diagnose_rank(trace, analyze_trace(trace), DEFAULT_OPTIONS, inputs=extras)
    assert notes == []
    return {f.id: f for f in found}


def test_the_trace_names_its_framework(tmp_path: Path) -> None:
    for marker, expected in ((HF_FRAME, TRANSFORMERS), (PL_ANNOTATION, LIGHTNING), (None, None)):
        trace = aiprof.load(_loader_bound(marker).write(tmp_path / f"{expected}.json"))
        assert isinstance(trace, Trace)
        assert trace_framework(trace) == expected


def test_a_trainer_trace_gets_the_training_arguments(tmp_path: Path) -> None:
    fix = _findings(_loader_bound(HF_FRAME).write(tmp_path / "hf.json"))["data_loading"].fix
    # A trace found in the wild: the host's cores are unknown, so no number is invented.
    assert fix.startswith("Load batches in background workers: TrainingArguments(dataloader_num_workers=N, ")
    assert "dataloader_pin_memory=True" in fix  # a GPU run
    assert "DataLoader(dataset" not in fix


def test_a_lightning_trace_gets_its_data_module(tmp_path: Path) -> None:
    fix = _findings(_loader_bound(PL_ANNOTATION).write(tmp_path / "pl.json"))["data_loading"].fix
    assert "DataLoader(dataset, batch_size=..., num_workers=N" in fix and "train_dataloader()" in fix
    assert "TrainingArguments" not in fix


def test_plain_pytorch_keeps_the_pytorch_words(tmp_path: Path) -> None:
    fix = _findings(_loader_bound(None).write(tmp_path / "plain.json"))["data_loading"].fix
    assert fix.startswith("Load batches in background workers: DataLoader(dataset, batch_size=..., num_workers=N")
    assert "TrainingArguments" not in fix and "Lightning" not in fix


def test_the_run_directory_names_the_framework_and_the_cores(tmp_path: Path) -> None:
    """meta.json's framework wins over the trace's frames, and its host sizes the worker count."""
    run = tmp_path / "run"
    run.mkdir()
    meta = {"format": "aiprof-run", "host": {"cores_available": 2},
            "framework": {"name": "transformers", "version": "5.23.0", "settings": {"dataloader_num_workers": 0}}}
    (run / "meta.json").write_text(json.dumps(meta))
    path = _loader_bound(PL_ANNOTATION).write(run / "rank0.pt.trace.json")
    fix = _findings(path, extras=load_run_inputs(path))["data_loading"].fix
    assert "TrainingArguments(dataloader_num_workers=1, " in fix and "1 worker for 2 cores" in fix


def test_run_framework_reads_only_a_name() -> None:
    assert run_framework({"framework": {"name": "pytorch_lightning"}}) == LIGHTNING
    assert run_framework({"framework": {"name": "transformers"}}) == TRANSFORMERS
    for meta in (None, {}, {"framework": None}, {"framework": {"name": 3}}, {"framework": "x"}):
        assert run_framework(meta) is None


def test_the_table_is_consistent() -> None:
    """Every fix kind is one a rule gives, every rule named exists, and every entry formats."""
    rule_ids = {i for rule in DEFAULT_RANK_RULES for i in spec_of(rule).ids}
    assert set(FIX_KINDS) <= rule_ids
    kinds = set(FIX_KINDS.values()) | {"data_loading.workers"}
    values = {"fix": "F.", "workers": "2", "why": "w", "pin": "", "half": "bf16", "lightning_half": "bf16-mixed"}
    for (framework, kind), template in FRAMEWORK_FIXES.items():
        assert framework in (TRANSFORMERS, LIGHTNING, ACCELERATE) and kind in kinds, (framework, kind)
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f}
        assert fields <= set(values), (framework, kind, fields)
        assert template.format_map(values)


GPU = MachineFacts(device_kind="gpu", device_name="NVIDIA H100", cores=16, cores_source="meta.json")
CPU2 = MachineFacts(device_kind="cpu", device_name="cpu", cores=2, cores_source="meta.json")


@pytest.mark.parametrize(("framework", "expected", "ampere_words"), [
    (TRANSFORMERS, "TrainingArguments(fp16=True)", "TrainingArguments(bf16=True)"),
    (LIGHTNING, 'Trainer(precision="16-mixed")', 'Trainer(precision="bf16-mixed")'),
])
def test_precision_follows_the_gpu(framework: str, expected: str, ampere_words: str) -> None:
    """precision_fix's Volta/Turing wording (FP16 with a GradScaler) asks for fp16; Ampere's for bf16."""
    volta = "with torch.autocast('cuda', dtype=torch.float16): ... scaler = torch.amp.GradScaler('cuda')."
    ampere = "with torch.autocast('cuda', dtype=torch.bfloat16): around the forward pass."
    assert expected in framework_words(framework, "precision", volta, {}, GPU)
    words = framework_words(framework, "precision", ampere, {}, GPU)
    assert words.startswith(ampere) and ampere_words in words


def test_the_loader_fix_follows_the_workers_and_the_cores() -> None:
    more = framework_words(TRANSFORMERS, "data_loading", "The workers cannot keep up.", {"workers": "multi-process"}, GPU)
    assert more.startswith("The workers cannot keep up.") and "dataloader_prefetch_factor=4, dataloader_pin_memory=True" in more
    one_core = MachineFacts(device_kind="cpu", device_name="cpu", cores=1, cores_source="meta.json")
    assert framework_words(TRANSFORMERS, "data_loading", "Only 1 core.", {"workers": "single"}, one_core) == "Only 1 core."
    cpu = framework_words(LIGHTNING, "data_loading", "x", {"workers": "single"}, CPU2)
    assert "num_workers=1, persistent_workers=True, prefetch_factor=2)" in cpu and "pin_memory" not in cpu
    assert framework_words("torchtitan", "data_loading", "x", {}, GPU) == "x"  # no words for it: the rule's
    assert framework_words(TRANSFORMERS, "sync", "x", {}, GPU) == "x"  # no framework argument for a sync
