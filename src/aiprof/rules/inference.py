"""Rules on inference steps (analysis/inference.py): ``decode_host_bound``, decoding whose device idles
between and inside its steps because the host cannot issue one token's work fast enough."""

from __future__ import annotations

from aiprof.rules.context import RankContext
from aiprof.rules.evidence import ms_text
from aiprof.rules.finding import Finding
from aiprof.rules.spec import ReplayPolicy, Saving, rank_rule

MIN_DECODE_STEPS = 3


@rank_rule(saving=Saving.IDLE, options=("decode_busy_share",), needs=("inference", "steps"),
           graph_replays=ReplayPolicy.UNLESS_HIDDEN)
def decode_host_bound(ctx: RankContext) -> list[Finding]:
    """Decode steps on a GPU that is busy under ``decode_busy_share`` of their time: each step makes one token
    per sequence, a few small kernels whose launches the host issues one by one, so the device waits for the
    host. Saving: the device idle inside decode steps, per steady step (an upper bound: the host's own work per
    token remains). Not reported where graph replays hide kernels (their busy time is not in the trace)."""
    section = ctx.views.inference
    decode = section.get("phases", {}).get("decode") if section.get("detected") else None
    if not ctx.is_gpu or not decode or decode["count"] < MIN_DECODE_STEPS or decode.get("gpu_busy_share") is None:
        return []
    share = float(decode["gpu_busy_share"])
    if share >= ctx.options.decode_busy_share or not ctx.steps:
        return []
    idle = max(int(decode["span_ns"]) - int(decode["gpu_busy_ns"]), 0)
    saving = idle / len(ctx.steps)
    engine = section.get("engine")
    return [
        ctx.finding(
            "decode_host_bound",
            f"Decoding is host-bound: the GPU is busy {share:.0%} of {decode['count']} decode steps "
            f"(median {ms_text(decode['median_ns'])} each)",
            saving,
            evidence={
                "decode_steps": decode["count"],
                "decode_gpu_busy_share": share,
                "decode_median_ns": decode["median_ns"],
                "decode_idle_ns": idle,
                "tokens_per_decode_step": decode.get("tokens_per_step"),
                "source": section.get("source"),
            },
            fix=(
                "Take the host out of each token: capture the decode step in a CUDA graph ("
                + ("vLLM: leave CUDA graphs on — no enforce_eager — and cover the batch sizes you serve with "
                   "cudagraph_capture_sizes; SGLang: keep CUDA graphs on and raise cuda_graph_max_bs"
                   if engine else
                   "Transformers: generate(..., cache_implementation=\"static\") with model.forward = "
                   "torch.compile(model.forward, mode=\"reduce-overhead\"); a hand-written loop: torch.cuda.graphs "
                   "around one decode step with static KV-cache buffers")
                + "), and give each step more work: batch more concurrent requests per step (a larger batch "
                "costs the host the same per step)."
            ),
            formula="Σ over decode steps of (step span − device busy) / steady steps; decode steps are "
            "analysis/inference.py's (attention query of one token, or the engine's annotation)",
            confidence="medium",
        )
    ]
