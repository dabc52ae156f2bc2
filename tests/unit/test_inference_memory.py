"""The inference memory budget (analysis/inference_memory.py) on hand-built allocator events, and on the real
H200 generate() run: the split (weights, KV cache, graph pool, activations), the headroom, and the finding."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

import aiprof
from aiprof.analysis.inference import InferenceStep
from aiprof.analysis.inference_memory import BudgetInputs, memory_budget, requests_of, trace_budget
from aiprof.memory import analyze_memory, load_memory
from aiprof.memory.model import Action, EventTable, MemoryData
from aiprof.rules.inference_memory import KV_FIX, POOL_FIX, memory_budget_findings
from aiprof.rundir import owner_of

H200_GENERATE = Path(__file__).resolve().parents[1] / "gpu" / "fixtures" / "h200" / "run-generate"
PER_TOKEN, PROMPT, WEIGHTS, POOL = 100, 4, 10_000, 300
CAPTURE = (np.array([100], dtype=np.int64), np.array([200], dtype=np.int64))  # _run's graph capture range


class _Events:
    """Allocator events on device 0, in time order, with fresh addresses."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int]] = []  # t, addr, size, action
        self.next = 0x1000

    def alloc(self, t: int, size: int) -> int:
        self.next += 0x10000
        self.rows.append((t, self.next, size, int(Action.ALLOC)))
        return self.next

    def free(self, t: int, addr: int) -> None:
        size = next(s for _, a, s, act in reversed(self.rows) if a == addr and act == int(Action.ALLOC))
        self.rows.append((t, addr, size, int(Action.FREE)))

    def data(self, seeded: int) -> MemoryData:
        t, addr, size, action = (list(c) for c in zip(*self.rows))
        table = EventTable.build(t, [0] * len(t), addr, size, action)
        out = MemoryData(source="kineto", path="synthetic", events=table)
        out.seeded_blocks = seeded
        return out


def _run(requests: int = 2, new: int = 5, free_cache: bool = True) -> tuple[MemoryData, list[InferenceStep]]:
    """Weights held before recording (the seeded block); a graph captured at t 100-200 (a 300 B block kept, a
    100 B one freed inside); then ``requests`` requests: a prefill of PROMPT tokens (a 2,000 B transient, the
    cache), then ``new`` - 1 decode steps (a 50 B transient; the cache re-allocated one token longer, as
    torch.cat does), the last step freeing the cache (the request's end); a step between requests."""
    ev = _Events()
    ev.alloc(0, WEIGHTS)
    ev.alloc(110, POOL)
    ev.free(130, ev.alloc(120, 100))
    steps: list[InferenceStep] = []
    t = 1000
    for _ in range(requests):
        act = ev.alloc(t + 10, 2000)
        cache = ev.alloc(t + 20, PER_TOKEN * PROMPT)
        ev.free(t + 30, act)
        steps.append(InferenceStep(len(steps), "prefill", t, 100, PROMPT, PROMPT, PROMPT))
        for k in range(1, new):
            t += 100
            kv = PROMPT + k
            act = ev.alloc(t + 10, 50)
            longer = ev.alloc(t + 20, PER_TOKEN * kv)
            ev.free(t + 21, cache)
            cache = longer
            ev.free(t + 30, act)
            if k == new - 1 and free_cache:
                ev.free(t + 90, cache)
            steps.append(InferenceStep(len(steps), "decode", t, 100, 1, 1, kv))
        t += 100
        steps.append(InferenceStep(len(steps), "between", t, 100, -1, -1, -1))
        t += 100
    return ev.data(seeded=1), steps


def test_the_split_by_hand() -> None:
    data, steps = _run()
    capacity = 1 << 20
    b = memory_budget(data, steps, BudgetInputs(capacity_bytes=capacity, capacity_from="test", batch=1,
                                                capture_ranges=CAPTURE))
    assert b is not None and b.device == "cuda:0"
    assert (b.weights_bytes, b.other_persistent_bytes, b.graph_pool_bytes) == (WEIGHTS, 0, POOL + 100)
    assert b.kv_bytes_per_token == PER_TOKEN and b.request_tokens == PROMPT + 4
    assert b.kv_cache_bytes == PER_TOKEN * (PROMPT + 4)
    # kept between steps at most: the cache after the 4th token's step (7 tokens), plus the last token's
    assert b.request_bytes == PER_TOKEN * (PROMPT + 3) + PER_TOKEN and b.request_freed_at_end is True
    # transients above the persistent set: the prefill's 2,000 B; a decode step's 50 B and, for an instant,
    # the old and the new cache together (torch.cat before the old one is freed): largest in the last step,
    # whose end frees the cache (50 + the 8-token cache above its end)
    assert b.prefill_activation_bytes == 2000 and b.decode_activation_bytes == 50 + PER_TOKEN * (PROMPT + 4)
    used = WEIGHTS + POOL + 100 + b.request_bytes + 2000
    assert b.headroom_bytes == capacity - used and b.more_requests == (capacity - used) // b.request_bytes
    assert memory_budget_findings(b) == []  # room for thousands more
    assert [len(r) for r in requests_of(steps)] == [5, 5]


def test_no_room_for_one_more_request_is_a_finding_with_the_fix_for_the_largest_part() -> None:
    data, steps = _run(new=120)  # a long request: its KV cache (12.3 KB) is the largest part, not the weights
    tight = memory_budget(data, steps, BudgetInputs(capacity_bytes=WEIGHTS + 12_000, capture_ranges=CAPTURE))
    assert tight is not None and tight.more_requests == 0 and (tight.kv_cache_bytes or 0) > WEIGHTS
    (finding,) = memory_budget_findings(tight)
    assert finding.id == "mem_inference_budget" and finding.fix == KV_FIX
    assert finding.evidence["est_saving_bytes"] == (tight.kv_cache_bytes or 0) // 2
    assert finding.est_saving_ns_per_step == 0 and "no room for one more request" in finding.title
    # weights + one request's KV cache over 90 % of the device: a finding even with room for one more
    share = memory_budget(data, steps, BudgetInputs(capacity_bytes=int((WEIGHTS + (tight.kv_cache_bytes or 0)) / 0.95),
                                                    capture_ranges=CAPTURE))
    assert share is not None and (share.weights_kv_share or 0) > 0.9
    assert [f.id for f in memory_budget_findings(share)] == ["mem_inference_budget"]
    # a graph pool larger than the rest: fewer graph sizes
    data2, steps2 = _run()
    big = (np.array([0], dtype=np.int64), np.array([5], dtype=np.int64))  # the 10 KB block at t 0 "captured"
    pool = memory_budget(data2, steps2, BudgetInputs(capacity_bytes=WEIGHTS + 1000, capture_ranges=big))
    assert pool is not None and pool.graph_pool_bytes == WEIGHTS
    assert [f.fix for f in memory_budget_findings(pool)] == [POOL_FIX]


def test_a_cache_kept_past_its_request_is_said() -> None:
    data, steps = _run(free_cache=False)
    b = memory_budget(data, steps)
    assert b is not None and b.request_freed_at_end is False
    assert any("not freed at its end" in n for n in b.notes)
    assert b.capacity_bytes is None and b.headroom_bytes is None and memory_budget_findings(b) == []


def test_a_recording_that_began_inside_a_request() -> None:
    """The first recorded steps are decode steps: the KV cache held then is estimated from the growth per token
    and taken out of what was live, so the weights are what they are."""
    data, steps = _run(requests=1, new=8)
    inside = [s for s in steps if s.number >= 3]  # from the 3rd decode step (7 tokens in the keys, 6 cached)
    b = memory_budget(data, inside, BudgetInputs(capture_ranges=CAPTURE))
    assert b is not None and b.weights_bytes == WEIGHTS and b.kv_bytes_per_token == PER_TOKEN
    assert b.request_bytes is None and b.request_freed_at_end is None  # no whole request recorded
    assert any("began inside a request (6 tokens cached)" in n for n in b.notes)


def test_the_h200_generate_run() -> None:
    """The real H200 `aiprof run` of generate_tiny.py (recorded steps 7-10: decode steps of the warm-up request,
    GPU memory events): the KV cache grows exactly 2 × 4 layers × 4 heads × 32 × 4 bytes = 4 KiB a token (the
    token ids' and the mask's few bytes a token stay inside their 512 B allocator blocks), the weights come
    from what was live (no models file then: the parameters and cuBLAS's workspace), 140 GiB of headroom."""
    trace = aiprof.load(H200_GENERATE / "rank0.pt.trace.json.gz")
    assert isinstance(trace, aiprof.Trace)
    data = load_memory(trace.path)
    for d in trace.devices:
        data.capacity_bytes.setdefault(d.index, d.total_memory_bytes)
    b = trace_budget(trace, data, owner_of(trace.path))
    assert b is not None and b.device == "cuda:0"
    # the recording (steps 7-10) ends at 42 tokens; the requests file's requests are 32 + 16 tokens (47 cached)
    assert b.kv_bytes_per_token == 2 * 4 * 4 * 32 * 4 and b.request_tokens == 32 + 16 - 1
    assert b.kv_cache_bytes == 4096 * 47 and b.request_bytes is None
    assert b.weights_bytes is not None and b.weights_from.startswith("live before the recording")
    seed = next(d.seed_bytes for d in analyze_memory(data).devices if d.device == "cuda:0")
    assert b.weights_bytes == seed - 38 * 4096  # held when recording began, less the 38 cached tokens
    assert b.capacity_bytes == 150_109_880_320 and b.capacity_from == "the device's memory"
    assert b.more_requests is not None and b.more_requests > 100_000 and memory_budget_findings(b) == []


def test_a_serving_engine_keeps_its_kv_cache_in_the_persistent_set() -> None:
    """vLLM / SGLang steps batch requests: no request, no growth per token is read from them; what was live
    before the first step (weights and the engine's preallocated KV blocks) is persistent, activations are
    still each step's transient peak."""
    data, steps = _run()
    engine_steps = [msgspec.structs.replace(s, kind="mixed" if s.kind == "prefill" else s.kind, kv_len=-1, query_len=-1)
                    for s in steps]
    b = memory_budget(data, engine_steps, BudgetInputs(engine="vLLM", capture_ranges=CAPTURE))
    assert b is not None and b.weights_bytes == WEIGHTS and b.graph_pool_bytes == POOL + 100
    assert (b.kv_bytes_per_token, b.kv_cache_bytes, b.request_bytes, b.request_freed_at_end) == (None, None, None, None)
    assert b.decode_activation_bytes is not None and b.decode_activation_bytes > 0
    assert any("preallocates its KV cache" in n for n in b.notes)
    assert b.prefill_activation_bytes == 2000  # the mixed steps (here the prefills) hold the prefill chunk's


def test_every_format_shows_the_budget_of_the_h200_run() -> None:
    """`aiprof analyze` of the H200 run directory: the budget is in the JSON report's inference section (valid
    against the schema) and in the terminal, Markdown and HTML reports."""
    import json

    import jsonschema

    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.report.document import build_document
    from aiprof.report.render import render

    doc = build_document(*analyze_and_diagnose([H200_GENERATE], workers=1))
    data = json.loads(render(doc, "json"))
    schema = json.loads((Path(aiprof.__file__).parent / "data" / "report.schema.json").read_text())
    jsonschema.validate(data, schema)
    budget = data["ranks"][0]["inference"]["memory_budget"]
    assert budget["kv_bytes_per_token"] == 4096 and budget["device"] == "cuda:0"
    for fmt in ("terminal", "md", "html"):
        flat = " ".join(render(doc, fmt, width=200).split())
        assert "memory budget on cuda:0" in flat and "4.00 KiB/token × 47 tokens" in flat, fmt
        assert "more concurrent request(s) of this size fit" in flat, fmt
