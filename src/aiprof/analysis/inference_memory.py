"""Inference memory budget: what the memory of an inference run holds, and how many more requests fit.

From what a run records: the allocator events (Kineto ``[memory]`` events, ``profile_memory=True``; an allocator
snapshot's trace), the inference steps (:mod:`aiprof.analysis.inference`: prefill and decode steps on the
trace's clock, with their attention key length), the weights of the model (``models.rank<N>.json``, written by
``aiprof run`` at the model's first ``generate()``) and the device's memory. The live bytes (allocator block
sizes, as ``torch.cuda.memory_allocated``) are replayed on the device the steps run on, and split:

* **weights**: the model's parameters and buffers as the run recorded them; without that record, the memory
  live before the first recorded request (less the KV cache of the tokens a request already held when the
  recording began mid-request);
* **other persistent**: the rest of what is live between requests (the CUDA context is not allocator memory;
  the allocator's cached free blocks are not live);
* **KV cache**: the growth that persists across the decode steps of a request and is freed at its end:
  ``kv_bytes_per_token`` is the median, over consecutive decode steps, of the live bytes' growth at the step's
  end over the growth of its attention key length (it counts the request's other per-token state too: the
  token ids, the attention mask, a few bytes a token); ``kv_cache_bytes`` = ``kv_bytes_per_token`` ×
  ``request_tokens``, the longest request: its key length observed, or from the requests file (prompt + new
  tokens − 1: the last token is never cached) when longer (a recording that ended inside a request). ``request_bytes``: what the longest request recorded
  from its prefill kept between its steps at most, above the live bytes before it (its KV cache, plus the
  last logits and the like), and ``request_freed_at_end`` whether the live bytes were back within half of it
  after the request;
* **graph pool**: bytes allocated inside CUDA/HIP graph capture ranges (:mod:`aiprof.analysis.graphs`), at
  their highest (a graph's private pool keeps them while the graph lives);
* **activations**: per step, the peak above the larger of the live bytes at its start and at its end (the
  transient working set); the largest prefill (or mixed) step's and decode step's.

A serving engine's steps (vLLM, SGLang annotations) batch many requests in each step, and the engine preallocates
its KV cache blocks: there the KV cache is part of the persistent memory and no request is measured (a note says
so); the weights, activations and graph pool are measured as above.

**Headroom** = capacity − (weights + other persistent + graph pool + one request (``request_bytes``, else
``kv_cache_bytes``) + the larger activation peak); ``more_requests`` = headroom // that request: more requests of
the observed size running at once, each with its own KV cache, sharing the activations (a batched prefill's
grow with it: an upper bound). ``weights_kv_share`` = (weights + ``kv_cache_bytes``) / capacity.
Capacity: the device's total memory (trace device properties,
a snapshot's OOM record, ``--device-memory-gib``); on a CPU the host's memory from ``meta.json`` (shared with
everything else the host runs, and the CPU profiler sees only what torch allocated while it recorded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from aiprof import rundir
from aiprof.memory.model import CPU_DEVICE, Action
from aiprof.trace.model import I64

if TYPE_CHECKING:  # analysis.inference holds the budget in its section: imported where used, not at import
    from aiprof.analysis.inference import InferenceStep
    from aiprof.memory.model import MemoryData
    from aiprof.trace.model import Trace

# A request's KV cache is "freed at its end" when the live bytes after it are back within this share of the
# KV cache of where they were before it.
FREED_SHARE = 0.5
# The limit rule (rules/inference_memory.py): weights + KV cache over this share of the capacity.
BUDGET_FRACTION = 0.90


class MemoryBudget(msgspec.Struct, kw_only=True):
    """The inference section's ``memory_budget`` (module doc for each number; bytes; None: not known)."""

    device: str
    source: str  # the memory input: "kineto" or "snapshot"
    weights_bytes: int | None
    weights_from: str  # "model parameters and buffers (aiprof run)", "live before the first request", ...
    other_persistent_bytes: int | None
    kv_bytes_per_token: int | None
    kv_cache_bytes: int | None  # kv_bytes_per_token × request_tokens: one request's KV cache at its longest
    request_tokens: int | None  # the longest request: key length observed, or prompt + new − 1 (requests file)
    request_batch: int | None  # sequences per request (the requests file)
    request_bytes: int | None  # what a whole recorded request kept between its steps at most (its KV cache and more)
    request_freed_at_end: bool | None  # None: no whole request recorded
    graph_pool_bytes: int
    prefill_activation_bytes: int | None
    decode_activation_bytes: int | None
    peak_allocated_bytes: int
    capacity_bytes: int | None
    capacity_from: str | None
    headroom_bytes: int | None
    more_requests: int | None
    weights_kv_share: float | None  # (weights + one request's KV cache) / capacity
    notes: list[str] = []


def _live(data: MemoryData, device: int) -> tuple[I64, I64]:
    """Event times and the live bytes after each event on ``device`` (seeded: memory held before recording)."""
    ev = data.events
    rows = np.flatnonzero((ev.device == device) & (ev.action <= int(Action.FREE)))
    sign = np.where(ev.action[rows] == int(Action.ALLOC), 1, -1)
    live: I64 = np.cumsum(sign * ev.block_size[rows]).astype(np.int64)
    t: I64 = ev.t_ns[rows].copy()
    t[rows < data.seeded_blocks] = np.iinfo(np.int64).min  # held before recording began: live at any time
    return t, live


def _at(t: I64, live: I64, ns: int) -> int:
    """Live bytes at ``ns`` (after every event before it)."""
    i = int(np.searchsorted(t, ns, side="left"))
    return int(live[i - 1]) if i else 0


def _peak(t: I64, live: I64, start: int, end: int) -> int:
    lo, hi = np.searchsorted(t, [start, end], side="left")
    inside = int(live[lo:hi].max()) if hi > lo else 0
    return max(inside, _at(t, live, start))


def _model_device(data: MemoryData) -> int:
    """The device the model runs on: the GPU with the most allocations, else the host."""
    ev = data.events
    gpu = ev.device[(ev.device >= 0) & (ev.action == int(Action.ALLOC))]
    if gpu.size:
        values, counts = np.unique(gpu, return_counts=True)
        return int(values[int(np.argmax(counts))])
    return CPU_DEVICE


def requests_of(steps: Sequence[InferenceStep]) -> list[list[InferenceStep]]:
    """The steps grouped into requests: a prefill step begins one, the decode steps after it follow, any other
    step ends it. Decode steps before the first prefill (a recording that began mid-request) are a request of
    their own."""
    out: list[list[InferenceStep]] = []
    current: list[InferenceStep] | None = None
    for s in steps:
        if s.kind == "prefill":
            current = [s]
            out.append(current)
        elif s.kind == "decode":
            if current is None:
                current = []
                out.append(current)
            current.append(s)
        else:
            current = None
    return out


def _kv_per_token(t: I64, live: I64, requests: list[list[InferenceStep]]) -> int | None:
    growth: list[float] = []
    for req in requests:
        for a, b in zip(req, req[1:]):
            if b.kind == "decode" and a.kv_len > 0 and b.kv_len > a.kv_len:
                end_a, end_b = a.start_ns + a.duration_ns, b.start_ns + b.duration_ns
                growth.append((_at(t, live, end_b) - _at(t, live, end_a)) / (b.kv_len - a.kv_len))
    return int(round(float(np.median(growth)))) if growth else None


def _activations(t: I64, live: I64, steps: Sequence[InferenceStep], kinds: tuple[str, ...]) -> int | None:
    peaks = [_peak(t, live, s.start_ns, s.start_ns + s.duration_ns)
             - max(_at(t, live, s.start_ns), _at(t, live, s.start_ns + s.duration_ns)) for s in steps if s.kind in kinds]
    return max(max(peaks), 0) if peaks else None


def _graph_pool(data: MemoryData, device: int, ranges: tuple[I64, I64] | None, at_ns: int) -> tuple[int, int]:
    """The highest live bytes of the blocks allocated inside graph capture ranges on ``device``, and their live
    bytes at ``at_ns`` (part of what is live before the first request)."""
    if ranges is None or not ranges[0].size:
        return 0, 0
    from aiprof.memory.model import event_pairs

    ev = data.events
    starts, ends = ranges
    allocs = np.flatnonzero((ev.device == device) & (ev.action == int(Action.ALLOC)))
    k = np.searchsorted(starts, ev.t_ns[allocs], side="right") - 1
    inside = allocs[(k >= 0) & (ev.t_ns[allocs] < ends[np.maximum(k, 0)])]
    if not inside.size:
        return 0, 0
    free_of, _ = event_pairs(data)
    frees = free_of[inside]
    frees = frees[frees >= 0]
    rows = np.concatenate([inside, frees])
    delta = np.concatenate([ev.block_size[inside], -ev.block_size[frees]])
    order = np.argsort(rows, kind="stable")
    pool = np.cumsum(delta[order])
    t = ev.t_ns[rows[order]]
    return int(max(pool.max(), 0)), _at(t, pool, at_ns)


@dataclass(frozen=True)
class BudgetInputs:
    """What the budget is computed from besides the memory events (all optional)."""

    weights_bytes: int | None = None  # the run's record of the model's weights on the device
    capacity_bytes: int | None = None
    capacity_from: str | None = None
    batch: int | None = None  # sequences per request (the requests file)
    capture_ranges: tuple[I64, I64] | None = None  # graph capture ranges (start, end), trace clock
    engine: str | None = None  # a serving engine's steps (vLLM, SGLang): requests are batched together
    request_tokens: int | None = None  # the longest request of the requests file: prompt + new tokens − 1


def memory_budget(data: MemoryData, steps: Sequence[InferenceStep], inputs: BudgetInputs | None = None) -> MemoryBudget | None:
    """The budget (module doc), or None when the steps hold no request to measure."""
    opts = inputs or BudgetInputs()
    if opts.engine:  # continuous batching: no step belongs to one request; the engine's KV cache is preallocated
        served = [s for s in steps if s.kind in ("prefill", "decode", "mixed")]
        requests = [served] if served else []
    else:
        requests = [r for r in requests_of(steps) if r]
    if not requests:
        return None
    device = _model_device(data)
    t, live = _live(data, device)
    if not t.size:
        return None
    notes: list[str] = []
    first = requests[0][0]
    held = _at(t, live, first.start_ns)  # live at the first request's start (its tokens so far when mid-request)
    per_token = _kv_per_token(t, live, requests) if not opts.engine else None
    so_far = max(first.kv_len - max(first.query_len, 0), 0) if first.kind == "decode" and first.kv_len > 0 else 0
    kv_held = (per_token or 0) * so_far
    if first.kind == "decode" and not opts.engine:
        notes.append(f"the recording began inside a request ({so_far} tokens cached): the KV cache of those tokens "
                     "is estimated from the growth per token")
    seen_before = device not in data.seed_unknown  # the events count what was live before recording began
    graph_pool, pool_held = _graph_pool(data, device, opts.capture_ranges, first.start_ns)
    unseen = 0 if seen_before else (opts.weights_bytes or 0)  # a CPU profiler never saw the weights allocated
    persistent = held - kv_held - pool_held + unseen
    if not seen_before and opts.weights_bytes is None:
        notes.append("the CPU profiler's memory events do not see memory allocated before it recorded (the model's "
                     "weights): run under `aiprof run` so that the weights are recorded")
    weights, weights_from = _weights(opts.weights_bytes, persistent, seen_before, kv_held > 0)
    other = max(persistent - weights, 0) if weights is not None else None
    tokens = max([s.kv_len for r in requests for s in r] + [opts.request_tokens or -1])
    kv = per_token * tokens if per_token is not None and per_token > 0 and tokens > 0 else None
    request, freed = _request_bytes(t, live, requests, per_token) if not opts.engine else (None, None)
    if opts.engine:
        notes.append(f"{opts.engine} batches requests in every step and preallocates its KV cache blocks (vLLM "
                     "gpu_memory_utilization, SGLang mem_fraction_static): the KV cache is in the persistent memory, "
                     "no request of its own is measured")
    prefill_act = _activations(t, live, steps, ("prefill", "mixed"))  # a mixed step holds a prefill chunk
    decode_act = _activations(t, live, steps, ("decode",))
    if per_token is not None and per_token <= 0:
        notes.append("no growth per decoded token: the KV cache is preallocated (a static cache, a serving engine's "
                     "blocks) and counted in the persistent memory")
    if freed is False:
        notes.append("the request's memory was not freed at its end: kept past the request (a leak, or a cache "
                     "reused by the next request)")
    capacity = opts.capacity_bytes
    per_request = request if request is not None else kv
    headroom = more = share = None
    if capacity and weights is not None:
        used = weights + (other or 0) + graph_pool + (per_request or 0) + max(prefill_act or 0, decode_act or 0)
        headroom, share = capacity - used, round((weights + (kv or 0)) / capacity, 4)
        more = max(headroom, 0) // per_request if per_request else None
    return MemoryBudget(
        device="cpu" if device == CPU_DEVICE else f"cuda:{device}", source=data.source, weights_bytes=weights,
        weights_from=weights_from, other_persistent_bytes=other, kv_bytes_per_token=per_token, kv_cache_bytes=kv,
        request_tokens=tokens if tokens > 0 else None, request_batch=opts.batch, request_bytes=request,
        request_freed_at_end=freed,
        graph_pool_bytes=graph_pool, prefill_activation_bytes=prefill_act, decode_activation_bytes=decode_act,
        peak_allocated_bytes=int(live.max()) + unseen,
        capacity_bytes=capacity, capacity_from=opts.capacity_from if capacity else None, headroom_bytes=headroom,
        more_requests=more, weights_kv_share=share, notes=notes,
    )


def _weights(recorded: int | None, persistent: int, seen_before: bool, mid_request: bool) -> tuple[int | None, str]:
    """The weights and where they come from (module doc): the run's record, else what was live before."""
    if recorded is not None:
        return recorded, "model parameters and buffers (aiprof run)"
    if not seen_before:
        return None, "not recorded"
    what = "the weights and whatever else was held: library workspaces"
    if mid_request:
        return max(persistent, 0), f"live before the recording, less the KV cache so far ({what})"
    return max(persistent, 0), f"live before the first request ({what})"


def _request_bytes(t: I64, live: I64, requests: list[list[InferenceStep]], per_token: int | None) -> tuple[int | None, bool | None]:
    """What the longest whole request (recorded from its prefill) kept between its steps at most, above the
    live bytes before it, and whether that was freed at its end (None, None: no whole request recorded). Its
    last step ends with the request (its cache freed): its own token is counted as ``per_token``."""
    whole = [r for r in requests if r[0].kind == "prefill"]
    if not whole:
        return None, None
    req = max(whole, key=lambda r: (max(s.kv_len for s in r), len(r)))
    before = _at(t, live, req[0].start_ns)
    kept = [_at(t, live, s.start_ns + s.duration_ns) - before for s in req[:-1]]
    held = max(kept) + max(per_token or 0, 0) if kept else _at(t, live, req[0].start_ns + req[0].duration_ns) - before
    if held <= 0:
        return None, None
    after = _at(t, live, req[-1].start_ns + req[-1].duration_ns) - before
    return held, (after < FREED_SHARE * held) if kept else None


def _device_name(device: int) -> str:
    return "cpu" if device == CPU_DEVICE else f"cuda:{device}"


def _host_memory(run_dir: rundir.RunDir | None) -> int | None:
    host = run_dir.meta.host if run_dir is not None else None
    value: Any = getattr(host, "memory_bytes", None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trace_budget(trace: Trace, data: MemoryData, run_dir: rundir.RunDir | None = None) -> MemoryBudget | None:
    """The budget of a rank (its memory data read from its trace or snapshot; ``run_dir``: the ``aiprof run``
    directory holding it, for the model's weights, the requests' batch and, on a CPU, the host's memory).
    None when the trace shows no inference request, or is a graph capture trace (set-up, sized on purpose)."""
    from aiprof.analysis.graphs import capture_ranges, graph_role
    from aiprof.analysis.inference import inference_section

    section = inference_section(trace)
    if not section.detected or not section.steps or graph_role(trace) == "capture":
        return None
    device = _model_device(data)
    weights = batch = None
    if run_dir is not None:
        models = run_dir.models_path(trace.path)
        found = [m.bytes_on(_device_name(device)) for m in rundir.read_models(models)] if models is not None else []
        weights = sum(found) if found and any(found) else None
    longest = None
    if section.requests:
        batches = [r.batch for r in section.requests.requests if r.batch > 0]
        batch = int(np.median(batches)) if batches else None
        longest = max((r.prompt_tokens + r.new_tokens - 1 for r in section.requests.requests if r.new_tokens), default=None)
    capacity = data.capacity_bytes.get(device) if device != CPU_DEVICE else _host_memory(run_dir)
    capacity_from = ("the device's memory" if device != CPU_DEVICE else "the host's memory (meta.json)") if capacity else None
    # A snapshot's events are on the unix clock (µs); a Kineto trace's on the trace's (base_time_ns + ts is unix)
    shift = trace.base_time_ns if data.source == "snapshot" else 0
    steps = [msgspec.structs.replace(s, start_ns=s.start_ns + shift) for s in section.steps] if shift else section.steps
    t = data.events.t_ns
    if not t.size or steps[-1].start_ns + steps[-1].duration_ns < int(t.min()) or steps[0].start_ns > int(t.max()):
        return None  # the memory events and the steps are not on one clock, or do not overlap
    merged = capture_ranges(trace).merged
    return memory_budget(data, steps, BudgetInputs(
        weights_bytes=weights, capacity_bytes=capacity, capacity_from=capacity_from, batch=batch,
        capture_ranges=(merged[0] + shift, merged[1] + shift) if merged[0].size else None,
        engine=section.engine if isinstance(section.engine, str) else None, request_tokens=longest))
