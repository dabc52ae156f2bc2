"""Rule ``mem_inference_budget``: the memory budget of an inference run limits how many requests run at once.

From the inference section's memory budget (:mod:`aiprof.analysis.inference_memory`): a finding when one more
request of the observed size does not fit in the headroom, or the weights and one request's KV cache take over
``BUDGET_FRACTION`` (90 %) of the device. A memory finding (it saves bytes, not time: ``est_saving_ns_per_step``
0, ranked with the ``mem_*`` findings): ``est_saving_bytes`` is what the fix for the largest part frees: half
the KV cache of the running request (an 8-bit KV cache in place of a 16-bit one) when the KV cache is the larger
share, else half the weights (8-bit weights), else the graph pool.
"""

from __future__ import annotations

from aiprof.analysis.inference_memory import BUDGET_FRACTION, MemoryBudget
from aiprof.memory.units import binary
from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.rules.spec import budget_rule

RULE_ID = "mem_inference_budget"
KV_FIX = ("Make each request's KV cache smaller: quantise it (Transformers `cache_implementation=\"quantized\"`, "
          "vLLM `kv_cache_dtype=\"fp8\"`, SGLang `--kv-cache-dtype fp8_e5m2`), cap the length (`max_new_tokens`, vLLM "
          "`max_model_len`), or let a paged KV cache (vLLM, SGLang, Transformers `cache_implementation=\"paged\"`) hold "
          "only the blocks each request uses.")
WEIGHTS_FIX = ("Make the weights smaller: 8-bit or 4-bit weights (bitsandbytes, torchao int8/fp8, AWQ/GPTQ "
               "checkpoints), or shard the model over more devices (tensor parallelism).")
POOL_FIX = ("Capture fewer CUDA graph sizes: vLLM `cudagraph_capture_sizes` / `max_cudagraph_capture_size`, SGLang "
            "`--cuda-graph-max-bs`; each size keeps its own memory.")


@budget_rule(ids=("mem_inference_budget",))
def memory_budget_findings(budget: MemoryBudget | None, options: RuleOptions = DEFAULT_OPTIONS) -> list[Finding]:
    """The finding when the budget limits concurrency (module doc), else none (``options``: no threshold of its
    own is configurable yet; the signature of every budget rule)."""
    if budget is None or not budget.capacity_bytes or budget.weights_bytes is None:
        return []
    per_request = budget.request_bytes if budget.request_bytes is not None else budget.kv_cache_bytes
    share = budget.weights_kv_share or 0.0
    no_room = budget.more_requests is not None and per_request is not None and budget.more_requests < 1
    if not no_room and share <= BUDGET_FRACTION:
        return []
    kv = budget.kv_cache_bytes or 0
    parts = {"kv": kv, "weights": budget.weights_bytes, "graph_pool": budget.graph_pool_bytes}
    largest = max(parts, key=lambda k: parts[k])
    fix = {"kv": KV_FIX, "weights": WEIGHTS_FIX, "graph_pool": POOL_FIX}[largest]
    saving = parts[largest] // 2 if largest != "graph_pool" else parts[largest]
    why = (f"no room for one more request of {binary(per_request)}" if no_room and per_request is not None
           else f"weights and one request's KV cache are {share:.0%} of the device")
    title = (f"{budget.device}: the memory budget limits concurrent requests: {why} "
             f"(weights {binary(budget.weights_bytes)}, KV cache {binary(kv)} per request, "
             f"headroom {binary(max(budget.headroom_bytes or 0, 0))} of {binary(budget.capacity_bytes)})")
    evidence: dict[str, object] = {
        "est_saving_bytes": int(max(saving, 0)),
        "saving_scope": {"kv": "of each request's KV cache", "weights": "of the weights",
                         "graph_pool": "of the graph pool"}[largest],
        "weights_bytes": budget.weights_bytes, "kv_cache_bytes": kv, "request_bytes": per_request,
        "graph_pool_bytes": budget.graph_pool_bytes, "headroom_bytes": budget.headroom_bytes,
        "more_requests": budget.more_requests, "capacity_bytes": budget.capacity_bytes,
        "weights_kv_share": share, "largest": largest,
    }
    return [Finding(
        id="mem_inference_budget", title=title, severity="medium", est_saving_ns_per_step=0, share_of_step=0.0,
        saving_kind="estimate",
        saving_formula="half the largest part (an 8-bit KV cache or 8-bit weights for 16-bit ones), or the graph pool",
        confidence="medium", evidence=evidence, fix=fix, device=budget.device,
    )]
