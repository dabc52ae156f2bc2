"""The inference memory budget on a real CPU run (issue #24): `aiprof run` of a GPT-2 generate() loop with memory
events (on by default), its weights, KV cache, activations and headroom against a hand computation from the
model's config and parameters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import ROOT, run_aiprof

GENERATE = ROOT / "examples" / "generate_tiny.py"
LAYERS, WIDTH, HEADS, PROMPT, NEW = 4, 128, 4, 32, 16  # generate_tiny.py's model (--layers 4, --width 128)


def _hand_weights() -> int:
    """sum(p.numel() * p.element_size()) over the parameters and buffers of generate_tiny.py's model."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS, n_positions=256, vocab_size=1000,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def test_memory_budget_of_a_gpt2_generate_run(tmp_path: Path, torch_available: None) -> None:
    """Two requests of 16 tokens after a warm-up, recorded from the first measured request's prefill: weights
    are the model's parameters' bytes (the run's models file: the CPU profiler cannot see memory allocated
    before it recorded); the KV cache grows 2 × layers × heads × head_dim × batch × 4 bytes a token (K and V,
    fp32), plus a few bytes of token ids and mask; a request holds 32 + 15 tokens at its longest and frees
    them at its end; the headroom is the host's memory less the split, in the JSON report of `aiprof analyze`."""
    pytest.importorskip("transformers")
    import jsonschema

    out = tmp_path / "run"
    run = run_aiprof("run", "--out", str(out), "--wait", "16", "--warmup", "1", "--active", "40", "--no-telemetry",
                     "--no-summary", "--", "python", str(GENERATE), "--requests", "2", "--new-tokens", str(NEW),
                     "--layers", str(LAYERS), "--width", str(WIDTH), timeout=400)
    assert run.returncode == 0, run.stderr[-2000:]
    models = json.loads((out / "models.rank0.json").read_text())["models"]
    weights = _hand_weights()
    assert [m["model"] for m in models] == ["GPT2LMHeadModel"]
    assert sum(models[0]["parameter_bytes"].values()) + sum(models[0]["buffer_bytes"].values()) == weights
    report = tmp_path / "report.json"
    done = run_aiprof("analyze", str(out), "-o", str(report), timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(report.read_text())
    jsonschema.validate(doc, json.loads((ROOT / "src/aiprof/data/report.schema.json").read_text()))
    b: dict[str, Any] = doc["ranks"][0]["inference"]["memory_budget"]
    assert b["device"] == "cpu" and b["source"] == "kineto"
    assert b["weights_bytes"] == weights and b["weights_from"].startswith("model parameters")
    kv_per_token = 2 * LAYERS * HEADS * (WIDTH // HEADS) * 1 * 4  # K and V, every layer, batch 1, fp32
    assert b["kv_bytes_per_token"] == pytest.approx(kv_per_token, rel=0.01)
    assert b["kv_bytes_per_token"] >= kv_per_token  # the cache, plus the token ids' and the mask's growth
    tokens = PROMPT + NEW - 1  # the last token is sampled, never cached
    assert b["request_tokens"] == tokens and b["request_batch"] == 1
    assert b["kv_cache_bytes"] == pytest.approx(kv_per_token * tokens, rel=0.01)
    # what a request kept at most: its KV cache and its last logits, ids and mask (under 10 % more here)
    assert kv_per_token * tokens <= b["request_bytes"] <= 1.1 * kv_per_token * tokens
    assert b["request_freed_at_end"] is True
    assert b["prefill_activation_bytes"] > b["decode_activation_bytes"] > 0  # 32 tokens' logits vs 1 token's
    assert b["prefill_activation_bytes"] >= PROMPT * 1000 * 4  # the prompt's logits (vocabulary 1000, fp32)
    assert b["graph_pool_bytes"] == 0
    meta = json.loads((out / "meta.json").read_text())
    assert b["capacity_bytes"] == meta["host"]["memory_bytes"] and "host" in b["capacity_from"]
    used = (b["weights_bytes"] + b["other_persistent_bytes"] + b["graph_pool_bytes"] + b["request_bytes"]
            + max(b["prefill_activation_bytes"], b["decode_activation_bytes"]))
    assert b["headroom_bytes"] == b["capacity_bytes"] - used
    assert b["more_requests"] == b["headroom_bytes"] // b["request_bytes"]
    assert "mem_inference_budget" not in {f["id"] for f in doc["findings"]}  # gigabytes of room: no finding
    terminal = run_aiprof("analyze", str(out), timeout=400).stdout
    flat = " ".join(terminal.split())
    assert "memory budget on cpu: weights" in flat and "more concurrent request(s) of this size fit" in flat

    # The same run on a device with room for the split and less than one more request: the finding, whose fix
    # goes to the largest part (the weights: 3.6 MiB against a 188 KiB KV cache)
    _tight_budget_finds_the_limit(out, used + b["request_bytes"] - 1, weights)


def _tight_budget_finds_the_limit(out: Path, capacity: int, weights: int) -> None:
    import aiprof
    from aiprof.analysis.inference import inference_section
    from aiprof.analysis.inference_memory import BudgetInputs, memory_budget
    from aiprof.memory import load_memory
    from aiprof.rules.inference_memory import WEIGHTS_FIX, memory_budget_findings

    trace = aiprof.load(out / "rank0.pt.trace.json.gz")
    assert isinstance(trace, aiprof.Trace)
    steps = inference_section(trace).steps
    assert isinstance(steps, list)
    budget = memory_budget(load_memory(trace.path), steps, BudgetInputs(weights_bytes=weights, capacity_bytes=capacity,
                                                                        capacity_from="test", batch=1))
    assert budget is not None and budget.more_requests == 0 and budget.headroom_bytes is not None
    assert 0 <= budget.headroom_bytes < (budget.request_bytes or 0)
    (finding,) = memory_budget_findings(budget)
    assert finding.id == "mem_inference_budget" and finding.fix == WEIGHTS_FIX
    assert finding.evidence["largest"] == "weights" and finding.evidence["est_saving_bytes"] == weights // 2
    assert "no room for one more request" in finding.title
