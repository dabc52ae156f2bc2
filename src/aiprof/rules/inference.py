"""Rules on inference steps (analysis/inference.py): ``decode_host_bound``, decoding whose device idles
between and inside its steps because the host cannot issue one token's work fast enough, and
``prefill_starves_decode``, a serving engine's prefill chunks that make the running decodes wait."""

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
    decode = section.phases.get("decode") if section.detected and section.phases else None
    if not ctx.is_gpu or decode is None or decode.count < MIN_DECODE_STEPS or decode.gpu_busy_share is None:
        return []
    share = float(decode.gpu_busy_share)
    if share >= ctx.options.decode_busy_share or not ctx.steps:
        return []
    idle = max(int(decode.span_ns or 0) - int(decode.gpu_busy_ns or 0), 0)
    saving = idle / len(ctx.steps)
    engine = section.engine or None
    return [
        ctx.finding(
            "decode_host_bound",
            f"Decoding is host-bound: the GPU is busy {share:.0%} of {decode.count} decode steps "
            f"(median {ms_text(decode.median_ns)} each)",
            saving,
            evidence={
                "decode_steps": decode.count,
                "decode_gpu_busy_share": share,
                "decode_median_ns": decode.median_ns,
                "decode_idle_ns": idle,
                "tokens_per_decode_step": decode.tokens_per_step,
                "source": section.source or None,
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


PREFILL_STALL_RATIO = 2.0


@rank_rule(saving=Saving.TIME, options=(), needs=("inference", "steps"))
def prefill_starves_decode(ctx: RankContext) -> list[Finding]:
    """A serving engine batches prefill chunks with the running decodes (vLLM / SGLang annotations: mixed or
    prefill steps beside decode steps), and those steps take more than ``PREFILL_STALL_RATIO`` × the median
    decode step: every request decoding meanwhile waits the whole chunk for its next token (inter-token
    latency spikes aligned with prefill steps). Saving: what those steps take beyond a decode step, per
    steady step (an upper bound: the prefill work itself remains, spread over smaller chunks)."""
    section = ctx.views.inference
    if not section.detected or not section.engine or not ctx.steps:
        return []
    decode = section.phases.get("decode") if section.phases else None
    if decode is None or decode.count < MIN_DECODE_STEPS:
        return []
    steps = [s for s in (section.steps or []) if s.kind in ("mixed", "prefill")]
    base = int(decode.median_ns)
    slow = [s for s in steps if s.duration_ns > PREFILL_STALL_RATIO * base]
    if not slow:
        return []
    excess = sum(s.duration_ns - base for s in slow)
    worst = max(s.duration_ns for s in slow)
    return [
        ctx.finding(
            "prefill_starves_decode",
            f"Prefill chunks stall decoding: {len(slow)} prefill/mixed step(s) take up to {worst / base:.1f}× a "
            f"decode step ({ms_text(worst)} vs {ms_text(base)}); requests decoding meanwhile wait for their next token",
            excess / len(ctx.steps),
            evidence={"slow_steps": len(slow), "decode_median_ns": base, "worst_step_ns": worst,
                      "excess_ns": excess, "engine": section.engine},
            fix=("Bound the prefill work per step so decodes keep their pace: vLLM chunked prefill with a smaller "
                 "max_num_batched_tokens (or long_prefill_token_threshold); SGLang a smaller chunked_prefill_size; "
                 "or disaggregate prefill and decode onto separate instances."),
            formula=f"Σ over prefill/mixed engine steps longer than {PREFILL_STALL_RATIO:g} × the median decode "
            "step of (step − median decode step) / steady steps",
            confidence="medium",
        )
    ]
