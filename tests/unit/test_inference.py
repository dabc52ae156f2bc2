"""analysis/inference.py on synthetic traces: steps classified from attention shapes and from vLLM / SGLang
step annotations, the phase statistics, the requests' TTFT / ITL from a requests file, and the section in
every format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kineto_builder import TraceBuilder

import aiprof

from aiprof.analysis.inference import InferenceReport, request_stats
from aiprof.analysis.inference import inference_section as typed_section
from aiprof.rundir import Request, format_requests

SDPA = "aten::scaled_dot_product_attention"


def inference_section(trace: aiprof.Trace) -> dict[str, Any]:
    """The section as the JSON report holds it."""
    section: dict[str, Any] = msgspec.to_builtins(typed_section(trace))
    return section


def stats_of(path: Path) -> dict[str, Any] | None:
    stats: dict[str, Any] | None = msgspec.to_builtins(request_stats(path))
    return stats


def _generate_trace(requests: int = 2, new: int = 4, prompt: int = 9) -> TraceBuilder:
    """Steps as `aiprof run` marks a generate() loop: one forward per step (2 layers of attention), and a step
    between requests with no forward."""
    b = TraceBuilder()
    n = 0
    t = 0.0
    for _ in range(requests):
        for i in range(new):
            b.step(n, ts=t, dur=100)
            q = prompt if i == 0 else 1
            for layer in range(2):
                b.cpu_op(SDPA, ts=t + 10 + 40 * layer, dur=30, shapes=[[1, 4, q, 16], [1, 4, prompt + i, 16],
                                                                      [1, 4, prompt + i, 16]],
                         dtypes=["float", "float", "float"])
            n += 1
            t += 100
        b.step(n, ts=t, dur=50)
        b.cpu_op("aten::ones", ts=t + 5, dur=5)
        n += 1
        t += 50
    return b


def test_steps_by_attention_shapes(tmp_path: Path) -> None:
    section = inference_section(aiprof.load(_generate_trace().write(tmp_path / "t.json")))
    assert section["detected"] and section["source"] == "attention shapes per step"
    kinds = [s["kind"] for s in section["steps"]]
    assert kinds == (["prefill"] + ["decode"] * 3 + ["between"]) * 2  # 1 prefill + N-1 decode per request
    phases = section["phases"]
    assert (phases["prefill"]["count"], phases["decode"]["count"], phases["between"]["count"]) == (2, 6, 2)
    assert phases["prefill"]["tokens_per_step"] == 9 and phases["decode"]["tokens_per_step"] == 1
    assert phases["decode"]["median_ns"] == 100_000 and phases["prefill"]["gpu_busy_share"] is None  # CPU only
    decode_kv = [s["kv_len"] for s in section["steps"] if s["kind"] == "decode"]
    assert decode_kv[:3] == [10, 11, 12]  # the KV cache grows by one token per decode step
    assert section["requests"] is None


def test_a_training_trace_is_no_inference(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(3):
        b.step(i, ts=i * 100, dur=100)
        b.cpu_op(SDPA, ts=i * 100 + 5, dur=30, shapes=[[8, 4, 64, 16]] * 3, dtypes=["float"] * 3)
    assert inference_section(aiprof.load(b.write(tmp_path / "t.json"))) == {"detected": False}


@pytest.mark.parametrize("name, kind, tokens", [
    ("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)", "mixed", 8192),
    ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)", "decode", 32),
    ("execute_512_context_2(sq512sk512sqsq1sqsk1)_generation_0(sq0sk0sqsq0sqsk0)", "prefill", 512),
    ("step[DECODE bs=16]", "decode", 16),
    ("step[EXTEND bs=2]", "prefill", -1),
])
def test_engine_step_annotations(tmp_path: Path, name: str, kind: str, tokens: int) -> None:
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    for i in range(3):
        b.annotation(name, ts=i * 1000, dur=200)
        op = b.cpu_op("aten::mm", ts=i * 1000 + 10, dur=20)
        b.launch(op, kernel_ts=i * 1000 + 300, kernel_dur=500)  # the device work follows the host side
    section = inference_section(aiprof.load(b.write(tmp_path / "t.json")))
    assert section["engine"] in ("vLLM", "SGLang") and [s["kind"] for s in section["steps"]] == [kind] * 3
    phase = section["phases"][kind]
    assert phase["count"] == 3 and phase["host_gap_median_ns"] == 800_000
    assert phase["tokens_per_step"] == (tokens if tokens >= 0 else None)
    assert phase["gpu_busy_share"] == pytest.approx(1500 / 2800, abs=1e-3)  # to the next step's start


def test_request_statistics(tmp_path: Path) -> None:
    rows = [Request(0, 0, 100, 1, 8, (30, 40, 50, 60)), Request(1, 200, 300, 2, 8, (220, 230, 260))]
    path = tmp_path / "requests.rank0.csv"
    path.write_bytes(format_requests(rows))
    stats = stats_of(path)
    assert stats is not None and stats["count"] == 2 and stats["new_tokens"] == 4 + 2 * 3
    assert stats["ttft"]["median_ns"] == 25 and stats["ttft"]["max_ns"] == 30
    assert stats["itl"]["count"] == 5 and stats["itl"]["median_ns"] == 10 and stats["itl"]["max_ns"] == 30
    assert stats["tokens_per_s"] == pytest.approx(10 / 200e-9)


def _request(n: int, start: int, ttft: int, itl: int, tokens: int = 4) -> Request:
    times = tuple(start + ttft + i * itl for i in range(tokens))
    return Request(n, start, times[-1] + 1, 1, 8, times)


@pytest.mark.parametrize("first_ttft, others, warm", [
    (400, 3, True),  # 4x the others' median: the warm-up
    (300, 3, False),  # 3x: not over the ratio, it counts
    (400, 1, False),  # one other request: no median to judge by
])
def test_warmup_request(tmp_path: Path, first_ttft: int, others: int, warm: bool) -> None:
    rows = [_request(0, 0, first_ttft, 50)] + [_request(i, 1000 * i, 100, 10) for i in range(1, others + 1)]
    path = tmp_path / "requests.rank0.csv"
    path.write_bytes(format_requests(rows))
    stats = stats_of(path)
    assert stats is not None and stats["count"] == others + 1 and stats["new_tokens"] == 4 * (others + 1)
    if not warm:
        assert stats["warmup"] is None and stats["note"] is None and stats["ttft"]["count"] == others + 1
        return
    assert stats["warmup"] == {"request": 0, "ttft_ns": 400, "duration_ns": 551, "new_tokens": 4,
                               "itl_median_ns": 50, "ttft_over_others_median": 4.0}
    assert "request 0 is the warm-up" in stats["note"]
    assert stats["ttft"] == {"median_ns": 100, "p90_ns": 100, "p99_ns": 100, "max_ns": 100, "count": 3}
    assert stats["itl"]["count"] == 9 and stats["itl"]["max_ns"] == 10  # its 50 ns gaps are left out too
    assert stats["tokens_per_s"] == pytest.approx(12 / (3 * 131e-9))


def test_warmup_line_in_every_format(tmp_path: Path) -> None:
    from aiprof.report.inference_section import request_lines

    path = tmp_path / "requests.rank0.csv"
    path.write_bytes(format_requests([_request(0, 0, 5_000_000, 10)] + [_request(i, 10**9 * i, 1_000_000, 10)
                                                                            for i in (1, 2)]))
    lines = request_lines(InferenceReport(detected=True, requests=request_stats(path)))
    assert lines[1].startswith("warm-up: request 0, time to first token 5.0 ms (5x the others' median")
    assert "time to first token: median 1.0 ms" in lines[2]


@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_every_format_shows_the_phases(tmp_path: Path, fmt: str) -> None:
    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.report.document import build_document
    from aiprof.report.render import render

    doc = build_document(*analyze_and_diagnose([_generate_trace().write(tmp_path / "t.json")], workers=1))
    text = render(doc, fmt)
    if fmt == "json":
        assert json.loads(text)["ranks"][0]["inference"]["phases"]["decode"]["count"] == 6
        return
    assert "Inference" in text and "prefill" in text and "decode" in text and "between requests" in text


def _gpu_decode_trace(tmp_path: Path, kernel_us: float) -> Path:
    """A GPU generate() loop as `aiprof run` records it: 1 prefill + 7 decode steps of 1 ms, each launching
    four kernels of ``kernel_us``."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    for i in range(8):
        t0 = i * 1000
        b.step(i, ts=t0, dur=1000)
        q = 16 if i == 0 else 1
        b.cpu_op(SDPA, ts=t0 + 5, dur=20, shapes=[[1, 8, q, 64], [1, 8, 16 + i, 64], [1, 8, 16 + i, 64]],
                 dtypes=["c10::BFloat16"] * 3)
        for j in range(4):
            op = b.cpu_op("aten::mm", ts=t0 + 30 + 200 * j, dur=150)
            b.launch(op, kernel_ts=t0 + 40 + 200 * j, kernel_dur=kernel_us)
    return b.write(tmp_path / "decode.json")


@pytest.mark.parametrize("kernel_us, expected", [(20, True), (190, False)])
def test_decode_host_bound(tmp_path: Path, kernel_us: float, expected: bool) -> None:
    from aiprof.pipeline import analyze_and_diagnose

    _, findings = analyze_and_diagnose([_gpu_decode_trace(tmp_path, kernel_us)], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    found = [f for f in findings if f["id"] == "decode_host_bound"]
    assert bool(found) is expected, [f["id"] for f in findings]
    if found:
        ev = found[0]["evidence"]
        assert ev["decode_steps"] == 7 and ev["decode_gpu_busy_share"] == pytest.approx(0.08, abs=0.005)
        # 7 decode steps × (1,000 − 80) µs idle, over the steady steps the rules judge
        assert found[0]["est_saving_ns_per_step"] * ev["steps_used"] == pytest.approx(7 * 920_000, rel=0.01)


@pytest.mark.parametrize("rel, kind, count, tokens", [
    ("tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz", "mixed", 1, 8192),
    ("tracelens/inference/vllm_decode_full/graph_execution.json.gz", "decode", 1, 32),
    ("tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "decode", 2, 32),
])
def test_shared_serving_traces(traces_dir: Path, rel: str, kind: str, count: int, tokens: int) -> None:
    path = traces_dir / rel
    if not path.exists():
        pytest.skip(f"{rel} not in this copy of the shared traces")
    section = inference_section(aiprof.load(path))
    phase = section["phases"][kind]
    assert section["engine"] == "vLLM" and list(section["phases"]) == [kind]  # SGLang writes vLLM's format too
    assert (phase["count"], phase["tokens_per_step"]) == (count, tokens)
    assert 0 < phase["gpu_busy_share"] <= 1


def test_a_diffusion_trace_is_no_inference(traces_dir: Path) -> None:
    """SD-3.5 runs flash attention ([B, S, H, D]) and a Triton kernel named after SDPA: no decode step."""
    path = traces_dir / "tracelens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz"
    if not path.exists():
        pytest.skip("xdit trace not in this copy of the shared traces")
    assert inference_section(aiprof.load(path)) == {"detected": False}


DECODE = "execute_16_context_0(sq0sk0sqsq0sqsk0)_generation_16(sq16sk4096sqsq16sqsk4096)"
MIXED = "execute_2064_context_1(sq2048sk2048sqsq1sqsk1)_generation_16(sq16sk4096sqsq16sqsk4096)"


@pytest.mark.parametrize("mixed_us, expected", [(5000, True), (1500, False)])
def test_prefill_starves_decode(tmp_path: Path, mixed_us: float, expected: bool) -> None:
    from aiprof.pipeline import analyze_and_diagnose

    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    t = 0.0
    for i in range(8):
        dur = mixed_us if i == 4 else 1000
        b.annotation(MIXED if i == 4 else DECODE, ts=t, dur=dur)
        op = b.cpu_op("aten::mm", ts=t + 5, dur=10)
        b.launch(op, kernel_ts=t + 20, kernel_dur=dur - 40)
        t += dur + 50
    _, findings = analyze_and_diagnose([b.write(tmp_path / "vllm.json")], workers=1)
    findings = [f.to_dict() for f in findings]  # as the JSON report holds them
    found = [f for f in findings if f["id"] == "prefill_starves_decode"]
    assert bool(found) is expected, [f["id"] for f in findings]
    if found:
        ev = found[0]["evidence"]
        assert (ev["slow_steps"], ev["decode_median_ns"], ev["worst_step_ns"]) == (1, 1_000_000, 5_000_000)
        assert found[0]["est_saving_ns_per_step"] * ev["steps_used"] == pytest.approx(4_000_000, rel=0.01)


def test_html_request_waterfall_of_the_h200_run() -> None:
    """The HTML report draws each request of the H200 generate run on one time axis: to its first token, then
    decoding; the warm-up is tagged; the bars' lengths are the requests' own times."""
    import re

    from aiprof.pipeline import analyze_and_diagnose
    from aiprof.report.document import build_document
    from aiprof.report.inference_section import waterfall_rows
    from aiprof.report.render import render

    run = Path(__file__).resolve().parents[1] / "gpu" / "fixtures" / "h200" / "run-generate"
    doc = build_document(*analyze_and_diagnose([run], workers=1))
    section = doc.ranks[0].inference
    assert isinstance(section, InferenceReport) and section.requests is not None
    rows, span = waterfall_rows(section)
    reqs = section.requests.requests
    assert len(rows) == len(reqs) == 5 and span == reqs[-1].start_unix_ns + reqs[-1].duration_ns - reqs[0].start_unix_ns
    for (label, segments, right), r in zip(rows, reqs):
        (_, s0, e0, _), (_, s1, e1, _) = segments
        assert (e0 - s0, e1 - s0) == (r.ttft_ns, r.duration_ns) and s1 == e0  # to the first token, then decoding
        assert right.startswith("warm-up · ") is (r.request == 0)
    html = render(doc, "html")
    svg = re.search(r'<svg class="chart waterfall".*?</svg>', html)
    assert svg is not None and svg.group(0).count("<rect ") == 10
    assert "warm-up · TTFT 335 ms · 16 tok" in svg.group(0)
    assert "waterfall" not in render(doc, "md")
