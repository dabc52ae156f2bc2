"""Cost of aiprof's request hooks (capture/requests.py) against the inter-token latency they measure.

Workload: the tiny GPT-2 of ``examples/generate_tiny.py`` (4 layers, dim 128, prompt 32, greedy, one intra-op
thread), ``--requests`` requests of ``--new-tokens`` tokens, in one process, interleaved: a request with
``generate()`` as Transformers ships it, then one with a no-op streamer of the script's own (what Transformers'
streamer protocol costs by itself: ``generate`` copies each token to the host for it), then one through aiprof's
wrapper (which adds its recording streamer and times the call), and so on. Per request we take the thread's CPU time per new token (``time.thread_time``:
wall time on a shared 2-core machine is mostly waiting for a core). Also timed alone: the per-token cost of the
hook itself (``TeeStreamer.put`` on a one-token tensor, what ``generate`` calls once per token), over 100,000 calls,
and the wrapper's cost per ``generate()`` call (around a generate that returns at once), over 20,000 calls: the
hooks' own cost, which the paired end-to-end difference (within a shared machine's noise) bounds from above.

Usage:  python bench/request_hooks.py [--requests 40] [--new-tokens 32]
Target (issue #24): the hooks cost at most 1 % of the inter-token latency.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.generation import utils

from aiprof.capture.requests import RequestLog, TeeStreamer, patch_transformers, wrap_generate


class _NoOpStreamer:
    """A script's own streamer that does nothing: what Transformers' streamer protocol costs by itself."""

    def put(self, value: Any) -> None:
        pass

    def end(self) -> None:
        pass


def _per_token_cpu_ns(model: Any, prompt: torch.Tensor, new: int, streamer: Any = None) -> float:
    t0 = time.thread_time_ns()
    model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new,
                   do_sample=False, pad_token_id=0, streamer=streamer)
    return (time.thread_time_ns() - t0) / new


def _put_cost_ns(calls: int = 100_000) -> float:
    log = RequestLog()
    req = log.begin()
    tee = TeeStreamer(None, req)
    tee.put(torch.zeros((1, 4), dtype=torch.long))  # the prompt
    token = torch.zeros((1,), dtype=torch.long)
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        tee.put(token)
    return (time.perf_counter_ns() - t0) / calls


class _Model:
    """What ``wrap_generate`` asks of a model (its generation config, its tensors), with a generate that does
    nothing: the wrapper's own cost per call."""

    class generation_config:  # noqa: N801 - the attribute Transformers models have
        num_beams = 1

    def parameters(self) -> list[Any]:
        return []

    def buffers(self) -> list[Any]:
        return []


def _wrapper_cost_ns(calls: int = 20_000) -> float:
    """Per ``generate()`` call: aiprof's wrapper around a generate that returns at once (the request's start
    and end, its streamer, the model noted once, the depth guard)."""
    log = RequestLog()
    wrapped = wrap_generate(lambda self, *a, **k: None, log, lambda m: None, lambda: None)
    model = _Model()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        wrapped(model, None)
    return (time.perf_counter_ns() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=256, vocab_size=1000, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, 1000, (1, 32))
    for _ in range(3):
        _per_token_cpu_ns(model, prompt, args.new_tokens)  # warm-up
    plain: list[float] = []
    streamed: list[float] = []
    hooked: list[float] = []
    log = RequestLog()
    for _ in range(args.requests):
        plain.append(_per_token_cpu_ns(model, prompt, args.new_tokens))
        streamed.append(_per_token_cpu_ns(model, prompt, args.new_tokens, _NoOpStreamer()))
        uninstall = patch_transformers(utils, log, lambda m: None, lambda: None)
        try:
            hooked.append(_per_token_cpu_ns(model, prompt, args.new_tokens))
        finally:
            uninstall()
    itl = statistics.median(plain)
    put = _put_cost_ns()
    diff = statistics.median([h - p for h, p in zip(hooked, plain)])
    protocol = statistics.median([s - p for s, p in zip(streamed, plain)])
    own = statistics.median([h - s for h, s in zip(hooked, streamed)])
    print(f"requests {args.requests} x {args.new_tokens} tokens; tokens recorded {sum(len(r.token_unix_ns) for r in log.requests)}")
    print(f"CPU per token, plain generate: median {itl / 1e3:.1f} us")
    print(f"CPU per token, hooked - plain (median of pairs): {diff / 1e3:+.2f} us ({100 * diff / itl:+.2f} % of ITL)")
    print(f"CPU per token, no-op streamer of the script's - plain: {protocol / 1e3:+.2f} us ({100 * protocol / itl:+.2f} % of ITL)")
    print(f"CPU per token, hooked - no-op streamer (aiprof's own part): {own / 1e3:+.2f} us ({100 * own / itl:+.2f} % of ITL)")
    print(f"TeeStreamer.put alone: {put:.0f} ns per token ({100 * put / itl:.3f} % of ITL)")
    call = _wrapper_cost_ns()
    per_token = put + call / args.new_tokens
    print(f"the wrapper alone: {call:.0f} ns per generate() call; with put: {per_token:.0f} ns per token at "
          f"{args.new_tokens} tokens a request ({100 * per_token / itl:.3f} % of ITL)")


if __name__ == "__main__":
    main()
