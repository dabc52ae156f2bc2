"""Inference: steps classified as prefill, decode or mixed, and requests' time to first token and
inter-token latency.

**Steps.** Where a serving engine annotates its steps, each annotation span is one engine step:

* vLLM (detailed trace annotations): ``execute_<tokens>_context_<P>(…)_generation_<D>(…)`` — P requests in
  prefill (context), D in decode: prefill when D = 0, decode when P = 0, else mixed; ``<tokens>`` tokens.
* SGLang: ``step[DECODE bs=N]``, ``step[EXTEND …]`` / ``PREFILL`` (prefill), ``MIXED``, ``IDLE``.

Otherwise the steps are the trace's step windows (``aiprof run`` of a ``generate()`` loop: one forward per
step), classified from the shapes of their attention ops (``scaled_dot_product_attention`` and friends, query
``[B, H, Sq, D]``, keys ``[B, H, Sk, D]``): decode when every query has one token (Sq = 1), prefill when
queries are longer (Sk > Sq: a chunk after cached context), mixed when a step has both; a step with no
attention op is ``between`` (time between requests, or work that is no model step). Tokens per step: B × Sq of its largest attention query (or the engine's count).

Per kind: ``count``, ``median_ns``, ``p90_ns`` (step durations), ``tokens_per_step`` (median),
``gpu_busy_share`` (union of device activity inside the steps over their time; an engine step's span runs
to the next step's start, its device work follows its host side), ``host_gap_median_ns`` (the
idle host time between one engine step's end and the next one's start: scheduler, sampler, detokenise;
engine annotations only).

**Requests** (``requests.rank<N>.csv`` of an ``aiprof run`` directory, capture/requests.py): time to first
token (first token's arrival − the ``generate()`` call), inter-token latency (between consecutive tokens of a
request, pooled over requests), median / p90 / p99 of each, and tokens per second (new tokens × batch over the
requests' summed time). A first request that paid one-time costs (CUDA context, library handles, allocator
growth, first kernels) is the **warm-up**: the first request is one when at least ``WARMUP_MIN_OTHERS`` other
requests have tokens and its time to first token exceeds ``WARMUP_RATIO`` × their median. It is reported
apart (``warmup``) and left out of every statistic (TTFT, ITL, tokens per second); ``count`` and
``new_tokens`` still count it.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof import rundir
from aiprof.analysis import intervals as iv
from aiprof.analysis.inference_memory import MemoryBudget
from aiprof.analysis.steps import step_windows
from aiprof.trace.model import GPU_WORK_KINDS, I64, Kind, Trace

# Attention ops whose inputs are [B, H, S, D] (aten's SDPA and its backends; not flash_attn's [B, S, H, D], not
# a Triton kernel named after a fused SDPA).
ATTENTION = r"^aten::_?scaled_dot_product"
_VLLM = re.compile(r"^execute_(\d+)_context_(\d+)\(.*?\)_generation_(\d+)")
_SGLANG = re.compile(r"^step\[(DECODE|EXTEND|PREFILL|MIXED|IDLE)\b([^\]]*)\]", re.I)
_BS = re.compile(r"\bbs=(\d+)")
_SGLANG_KIND = {"DECODE": "decode", "EXTEND": "prefill", "PREFILL": "prefill", "MIXED": "mixed", "IDLE": "idle"}
KINDS = ("prefill", "decode", "mixed", "between", "idle")
_CACHE_KEY = "analysis.inference"
MAX_STEPS = 2000  # steps listed in the section (the phase statistics use all)


class InferenceStep(msgspec.Struct, frozen=True):
    """One step, classified (``steps[]``)."""

    number: int
    kind: str
    start_ns: int
    duration_ns: int
    tokens: int  # -1: unknown
    query_len: int  # largest attention query (tokens per sequence this step); -1: unknown
    kv_len: int  # largest key length (cached + new); -1: unknown


class PhaseStats(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The steps of one kind (``phases[kind]``): module doc. ``gpu_busy_ns`` / ``span_ns`` on a GPU only,
    ``host_gap_median_ns`` for engine steps only."""

    count: int
    median_ns: int
    p90_ns: int
    total_ns: int
    tokens_per_step: int | None
    gpu_busy_share: float | None
    gpu_busy_ns: int | UnsetType = UNSET
    span_ns: int | UnsetType = UNSET
    host_gap_median_ns: int | None | UnsetType = UNSET


class Distribution(msgspec.Struct, kw_only=True):
    """Median / p90 / p99 (linear interpolation) and max of a latency, over ``count`` values."""

    median_ns: int
    p90_ns: int
    p99_ns: int
    max_ns: int
    count: int


class Warmup(msgspec.Struct, kw_only=True):
    """The first request when it paid one-time costs (module doc), left out of every statistic."""

    request: int
    ttft_ns: int
    duration_ns: int
    new_tokens: int
    itl_median_ns: int | None
    ttft_over_others_median: float


class RequestRow(msgspec.Struct, kw_only=True):
    """One request as the requests file records it (``requests.requests[]``)."""

    request: int
    start_unix_ns: int
    duration_ns: int
    batch: int
    prompt_tokens: int
    new_tokens: int
    ttft_ns: int | None
    itl_median_ns: int | None = None  # the median gap between its tokens (None under 2 tokens; older reports)


class RequestStats(msgspec.Struct, kw_only=True):
    """The requests of a run directory's requests file (``requests``): counts over every request, latency and
    throughput over those after the warm-up."""

    source: str
    count: int
    with_tokens: int
    new_tokens: int
    warmup: Warmup | None = None  # (defaults: a report of an older aiprof has neither)
    ttft: Distribution | None
    itl: Distribution | None
    tokens_per_s: float | None
    note: str | None = None
    requests: list[RequestRow]


class InferenceReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The rank's ``inference`` section: only ``detected: false`` when the trace shows no inference."""

    detected: bool
    source: str | UnsetType = UNSET
    engine: str | None | UnsetType = UNSET
    phases: dict[str, PhaseStats] | UnsetType = UNSET
    steps: list[InferenceStep] | UnsetType = UNSET
    step_count: int | UnsetType = UNSET
    requests: RequestStats | None | UnsetType = UNSET
    # weights, KV cache, graph pool, activations and how many more requests fit (analysis/inference_memory.py;
    # only with memory data: computed by the diagnosis, where the memory events are read)
    memory_budget: MemoryBudget | UnsetType = UNSET


def _pct(values: list[int], q: float) -> int:
    return int(np.percentile(np.array(values, dtype=np.float64), q)) if values else 0


def _engine_steps(trace: Trace) -> tuple[str, list[InferenceStep]]:
    """Steps from vLLM / SGLang step annotations ('' and [] when the trace has none)."""
    c = trace.columns
    rows = trace.rows_of(Kind.USER_ANNOTATION)
    out: list[InferenceStep] = []
    engine = ""
    for r in rows[trace.name_matches(rows, r"^execute_\d+_context_|^step\[")].tolist():
        name = trace.strings[c.name[r]]
        if (m := _VLLM.match(name)) is not None:
            engine = "vLLM"
            prefill, decode = int(m.group(2)), int(m.group(3))
            kind = "mixed" if prefill and decode else ("prefill" if prefill else "decode")
            tokens = int(m.group(1))
        elif (s := _SGLANG.match(name)) is not None:
            engine = engine or "SGLang"
            kind = _SGLANG_KIND[s.group(1).upper()]
            bs = _BS.search(s.group(2))
            tokens = int(bs.group(1)) if bs is not None and kind == "decode" else -1  # decode: a token per request
        else:
            continue
        out.append(InferenceStep(len(out), kind, int(c.ts[r]), int(c.dur[r]), tokens, -1, -1))
    return engine, out


def _attention_shapes(trace: Trace) -> tuple[I64, I64, I64, I64]:
    """Attention ops with recorded 4-D query/key shapes: start ns, query length, key length, B × Sq (the
    shapes decoded once per distinct signature)."""
    rows = trace.rows_of(Kind.CPU_OP)
    rows = rows[trace.name_matches(rows, ATTENTION)]
    sigs = trace.op_signatures(rows)
    unique, inverse = np.unique(sigs, return_inverse=True)
    per_sig = np.full((unique.size, 3), -1, dtype=np.int64)  # Sq, Sk, B × Sq
    for i, sig in enumerate(unique.tolist()):
        if sig < 0:
            continue
        inputs = trace.signature_inputs(sig)
        dims = inputs.dims_new or inputs.dims_legacy or []
        if len(dims) >= 2 and len(dims[0]) == 4 and len(dims[1]) == 4:
            q, k = dims[0], dims[1]
            per_sig[i] = (int(q[2]), int(k[2]), int(q[0]) * int(q[2]))
    shapes = per_sig[inverse.reshape(-1)] if rows.size else per_sig[:0]
    keep = shapes[:, 0] >= 0
    return trace.columns.ts[rows][keep], shapes[keep, 0], shapes[keep, 1], shapes[keep, 2]


def _i64(values: list[int]) -> I64:
    return np.array(values, dtype=np.int64)


def _window_steps(trace: Trace) -> list[InferenceStep]:
    """The trace's step windows classified from their attention ops' shapes (module doc)."""
    windows = step_windows(trace)
    ts, sq, sk, tok = _attention_shapes(trace)
    order = np.argsort(ts, kind="stable")
    ts, sq, sk, tok = ts[order], sq[order], sk[order], tok[order]
    out: list[InferenceStep] = []
    for w in windows:
        lo, hi = np.searchsorted(ts, [w.cpu_start_ns, w.cpu_end_ns], side="left")
        if hi > lo:
            q = sq[lo:hi]
            kind = "mixed" if (q == 1).any() and (q > 1).any() else ("decode" if (q == 1).all() else "prefill")
            out.append(InferenceStep(w.number, kind, w.start_ns, w.end_ns - w.start_ns, int(tok[lo:hi].max()),
                                     int(q.max()), int(sk[lo:hi].max())))
        else:  # no forward of the model: between two requests (or work that is no model step)
            out.append(InferenceStep(w.number, "between", w.start_ns, w.end_ns - w.start_ns, -1, -1, -1))
    return out


def _gpu_busy(trace: Trace, steps: list[InferenceStep], engine: bool) -> tuple[I64, I64]:
    """Union of device activity inside each step's span (per step, ns). An engine step's annotation covers
    its host side only: its device work runs after it, so its span runs to the next step's start (the last
    one's to the end of the device record). Returns the busy ns and the spans' lengths."""
    c = trace.columns
    gpu = trace.rows_of(*GPU_WORK_KINDS)
    lengths = _i64([s.duration_ns for s in steps])
    if not gpu.size or not steps:
        return np.zeros(len(steps), dtype=np.int64), lengths
    busy = iv.merge(c.ts[gpu], c.ts[gpu] + c.dur[gpu])
    ws = np.array([s.start_ns for s in steps], dtype=np.int64)
    we = ws + np.array([s.duration_ns for s in steps], dtype=np.int64)
    if engine:
        we = np.maximum(we, np.append(ws[1:], int(busy[1][-1])))
    return iv.overlap_per_window(busy, ws, we), we - ws


def _phases(trace: Trace, steps: list[InferenceStep], engine: bool) -> dict[str, PhaseStats]:
    busy, spans = _gpu_busy(trace, steps, engine)
    has_gpu = bool(trace.device_ids)
    gaps = [steps[i + 1].start_ns - (steps[i].start_ns + steps[i].duration_ns) for i in range(len(steps) - 1)]
    out: dict[str, PhaseStats] = {}
    for kind in KINDS:
        idx = [i for i, s in enumerate(steps) if s.kind == kind]
        if not idx:
            continue
        durations = [steps[i].duration_ns for i in idx]
        tokens = [steps[i].tokens for i in idx if steps[i].tokens >= 0]
        total = sum(durations)
        entry = PhaseStats(
            count=len(idx),
            median_ns=_pct(durations, 50),
            p90_ns=_pct(durations, 90),
            total_ns=total,
            tokens_per_step=int(np.median(tokens)) if tokens else None,
            gpu_busy_share=round(float(busy[idx].sum()) / max(int(spans[idx].sum()), 1), 4) if has_gpu else None,
        )
        if has_gpu:  # the device time the share is of (an engine step's span runs to the next step)
            entry.gpu_busy_ns, entry.span_ns = int(busy[idx].sum()), int(spans[idx].sum())
        if engine:
            after = [max(gaps[i], 0) for i in idx if i < len(gaps)]
            entry.host_gap_median_ns = _pct(after, 50) if after else None
        out[kind] = entry
    return out


# The warm-up rule (module doc): a steady generate() loop's TTFT varies by tens of percent from request to
# request; a first request paying one-time costs takes several times as long (an H200's first request: 65x).
WARMUP_RATIO = 3.0
WARMUP_MIN_OTHERS = 2


def _dist(values: list[int]) -> Distribution | None:
    if not values:
        return None
    return Distribution(median_ns=_pct(values, 50), p90_ns=_pct(values, 90), p99_ns=_pct(values, 99),
                        max_ns=max(values), count=len(values))


def _ttft(r: rundir.Request) -> int | None:
    return r.token_unix_ns[0] - r.start_unix_ns if r.token_unix_ns else None


def _itl_median(r: rundir.Request) -> int | None:
    gaps = [b - a for a, b in zip(r.token_unix_ns, r.token_unix_ns[1:])]
    return _pct(gaps, 50) if gaps else None


def warmup_of(requests: list[rundir.Request]) -> Warmup | None:
    """The first request when it is a warm-up outlier (module doc: its TTFT over ``WARMUP_RATIO`` × the
    median of at least ``WARMUP_MIN_OTHERS`` others), else None."""
    if not requests:
        return None
    first = min(requests, key=lambda r: (r.start_unix_ns, r.request))
    first_ttft = _ttft(first)
    others = [t for r in requests if r is not first and (t := _ttft(r)) is not None]
    if first_ttft is None or len(others) < WARMUP_MIN_OTHERS:
        return None
    median = float(np.median(np.array(others, dtype=np.float64)))
    if first_ttft <= WARMUP_RATIO * median:
        return None
    return Warmup(request=first.request, ttft_ns=first_ttft, duration_ns=first.end_unix_ns - first.start_unix_ns,
                  new_tokens=len(first.token_unix_ns), itl_median_ns=_itl_median(first),
                  ttft_over_others_median=round(first_ttft / max(median, 1.0), 1))


def request_stats(path: Path) -> RequestStats | None:
    """TTFT, ITL and tokens per second of a requests file (None when there is none or it holds no request);
    a warm-up first request (:func:`warmup_of`) is reported apart and left out of the statistics."""
    requests = rundir.read_requests(path)
    if not requests:
        return None
    warmup = warmup_of(requests)
    measured = [r for r in requests if warmup is None or r.request != warmup.request]
    ttft = [t for r in measured if (t := _ttft(r)) is not None]
    itl = [b - a for r in measured for a, b in zip(r.token_unix_ns, r.token_unix_ns[1:])]
    tokens = sum(len(r.token_unix_ns) * max(r.batch, 1) for r in measured)
    busy = sum(r.end_unix_ns - r.start_unix_ns for r in measured)
    note = None
    if warmup is not None:
        note = (f"request {warmup.request} is the warm-up (time to first token "
                f"{warmup.ttft_over_others_median:g}x the others' median: one-time costs), left out of the "
                "TTFT, inter-token and tokens/s statistics")
    return RequestStats(
        source=path.name,
        count=len(requests),
        with_tokens=sum(1 for r in requests if r.token_unix_ns),
        new_tokens=sum(len(r.token_unix_ns) * max(r.batch, 1) for r in requests),
        warmup=warmup,
        ttft=_dist(ttft),
        itl=_dist(itl),
        tokens_per_s=round(tokens / (busy / 1e9), 2) if busy and tokens else None,
        note=note,
        requests=[
            RequestRow(request=r.request, start_unix_ns=r.start_unix_ns, duration_ns=r.end_unix_ns - r.start_unix_ns,
                       batch=r.batch, prompt_tokens=r.prompt_tokens, new_tokens=len(r.token_unix_ns), ttft_ns=_ttft(r),
                       itl_median_ns=_itl_median(r))
            for r in requests[:200]
        ],
    )


def _requests_of(trace: Trace) -> RequestStats | None:
    found = rundir.owner_of(Path(trace.path))
    path = found.requests_path(Path(trace.path)) if found is not None else None
    return request_stats(path) if path is not None else None


def inference_section(trace: Trace) -> InferenceReport:
    """The report section (``ranks[].inference``): ``detected`` false when the trace shows no inference.
    Computed once per trace (cached: the rules read it too)."""
    cached = trace.cache.get(_CACHE_KEY)
    if not isinstance(cached, InferenceReport):
        cached = trace.cache[_CACHE_KEY] = _inference(trace)
    return cached


def _inference(trace: Trace) -> InferenceReport:
    engine, steps = _engine_steps(trace)
    source = f"{engine} step annotations" if engine else "attention shapes per step"
    if not steps:
        steps = _window_steps(trace)
    requests = _requests_of(trace)
    served = [s for s in steps if s.kind in ("prefill", "decode", "mixed")]
    decoding = any(s.kind in ("decode", "mixed") for s in served) or engine
    if not (decoding or requests):
        return InferenceReport(detected=False)
    return InferenceReport(detected=True, source=source, engine=engine or None, phases=_phases(trace, steps, bool(engine)),
                           steps=steps[:MAX_STEPS], step_count=len(steps), requests=requests)
