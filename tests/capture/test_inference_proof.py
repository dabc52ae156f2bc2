"""Issue #24's proof: `aiprof run` of a GPT-2 generate() loop, analysed: the phases counted exactly and the
requests' time to first token and inter-token latency as the script's own streamer saw them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_helpers import ROOT, run_aiprof

GENERATE = ROOT / "examples" / "generate_tiny.py"

def test_proof_ttft_itl_and_phases_of_a_gpt2_generate_loop(tmp_path: Path, torch_available: None) -> None:
    """Issue #24's proof: a 4-layer GPT-2 from GPT2Config, a warm-up request and 6 requests of 16 tokens under
    `aiprof run`. TTFT and ITL (medians) within 10 % of the script's own streamer timestamps; the recorded
    steps (the 6 requests) are exactly 1 prefill + 15 decode per request, and 5 steps between them."""
    pytest.importorskip("transformers")
    import statistics

    import msgspec

    from aiprof.analysis.inference import WARMUP_RATIO
    from aiprof.pipeline import analyze_and_diagnose

    out, stamps = tmp_path / "run", tmp_path / "stamps.jsonl"
    # request 0 is steps 0-15 and 16 (after it); request k (1-6) steps 17k..17k+15, then one step between.
    run = run_aiprof("run", "--out", str(out), "--wait", "16", "--warmup", "1", "--active", "101", "--no-telemetry",
                     "--no-summary", "--", "python", str(GENERATE), "--requests", "6", "--new-tokens", "16",
                     "--layers", "4", "--stamps", str(stamps), timeout=400)
    assert run.returncode == 0, run.stderr[-2000:]
    analysis, _ = analyze_and_diagnose([out], workers=1)
    section = msgspec.to_builtins(analysis.ranks[0].sections["inference"])  # as the JSON report holds it
    phases = section["phases"]
    assert (phases["prefill"]["count"], phases["decode"]["count"], phases["between"]["count"]) == (6, 90, 5)
    assert phases["prefill"]["tokens_per_step"] == 32 and phases["decode"]["tokens_per_step"] == 1
    script = [json.loads(line) for line in stamps.read_text().splitlines()]
    first = [s["token_unix_ns"][0] - s["start_unix_ns"] for s in script]
    # the warm-up rule (analysis/inference.py) applied to the script's own stamps: request 0 is left out of
    # the statistics when its TTFT is over 3x the others' median (on a CPU it may or may not be)
    warm = first[0] > WARMUP_RATIO * statistics.median(first[1:])
    req = section["requests"]
    assert (req["warmup"] is not None) is warm, (first, req["warmup"])
    measured = script[1:] if warm else script
    ttft = statistics.median(s["token_unix_ns"][0] - s["start_unix_ns"] for s in measured)
    itl = statistics.median(b - a for s in measured for a, b in zip(s["token_unix_ns"], s["token_unix_ns"][1:]))
    assert req["count"] == 7 and req["new_tokens"] == 7 * 16 and req["ttft"]["count"] == len(measured)
    assert req["itl"]["count"] == 15 * len(measured)
    assert req["ttft"]["median_ns"] == pytest.approx(ttft, rel=0.10)
    assert req["itl"]["median_ns"] == pytest.approx(itl, rel=0.10)
