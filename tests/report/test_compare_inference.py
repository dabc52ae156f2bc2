"""report/compare_inference.py on the real H200 `aiprof run` of a generate() loop: against itself (unchanged,
each side's warm-up left out), and against a copy whose requests reach their first token 5 ms later (slower:
TTFT up, tokens/s down, ITL unchanged), in every format."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

import pytest

from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.compare import Comparison, compare_reports
from aiprof.report.compare_render import render_comparison
from aiprof.report.document import build_document
from aiprof.report.model import Report
from aiprof.rundir import Request, format_requests, read_requests

RUN = Path(__file__).resolve().parents[1] / "gpu" / "fixtures" / "h200" / "run-generate"
DELAY_NS = 5_000_000


@cache
def _report(path: Path) -> Report:
    return build_document(*analyze_and_diagnose([path], workers=1))


def _delayed(tmp_path: Path) -> Path:
    """The run with every request's tokens and end DELAY_NS later (the start unchanged)."""
    out = tmp_path / "delayed"
    shutil.copytree(RUN, out)
    rows = read_requests(out / "requests.rank0.csv") or []
    shifted = [Request(r.request, r.start_unix_ns, r.end_unix_ns + DELAY_NS, r.batch, r.prompt_tokens,
                       tuple(t + DELAY_NS for t in r.token_unix_ns)) for r in rows]
    (out / "requests.rank0.csv").write_bytes(format_requests(shifted))
    return out


def _metrics(cmp: Comparison) -> dict[str, str]:
    assert cmp.inference is not None
    return {m.metric: m.result for m in cmp.inference.metrics}


def test_a_run_against_itself_is_unchanged() -> None:
    doc = _report(RUN)
    cmp = compare_reports(doc, doc)
    assert cmp.inference is not None and cmp.inference.result == "unchanged"
    assert _metrics(cmp) == {"ttft": "unchanged", "itl": "unchanged", "tokens_per_s": "unchanged"}
    assert cmp.inference.warmup_left_out == ["before: request 0", "after: request 0"]
    ttft = cmp.inference.metrics[0]
    assert (ttft.requests_before, ttft.requests_after, ttft.ci_pct) == (4, 4, None)  # under 5 a side: no interval


def test_later_first_tokens_are_slower(tmp_path: Path) -> None:
    before, after = _report(RUN), _report(_delayed(tmp_path))
    cmp = compare_reports(before, after)
    assert _metrics(cmp) == {"ttft": "slower", "itl": "unchanged", "tokens_per_s": "slower"}
    assert cmp.inference is not None and cmp.inference.result == "slower"
    ttft = cmp.inference.metrics[0]
    assert ttft.after - ttft.before == pytest.approx(DELAY_NS, abs=1)  # the median request moved by the delay
    assert cmp.inference.text.startswith("AFTER serves requests slower (time to first token +")
    back = compare_reports(after, before)
    assert back.inference is not None and back.inference.result == "faster"
    assert _metrics(back) == {"ttft": "faster", "itl": "unchanged", "tokens_per_s": "faster"}
    for fmt in ("terminal", "md", "html"):
        text = render_comparison(cmp, fmt)
        assert "Inference requests" in text and "AFTER serves requests slower" in text
        assert "warm-up left out: before: request 0, after: request 0" in text


def test_shared_machine_makes_it_inconclusive(tmp_path: Path) -> None:
    from aiprof.report.compare_inference import compare_inference

    before, after = _report(RUN), _report(_delayed(tmp_path))
    inf = compare_inference(before, after, 2.0, shared=["after"])
    assert inf is not None and inf.result == "inconclusive" and {m.result for m in inf.metrics} == {"inconclusive"}


def test_no_requests_no_section(traces_dir: Path) -> None:
    path = traces_dir / "tracelens/inference/vllm_decode_full/graph_execution.json.gz"
    if not path.exists():
        pytest.skip("vLLM trace not in this copy of the shared traces")
    doc = _report(path)
    assert compare_reports(doc, doc).inference is None
    assert "Inference requests" not in render_comparison(compare_reports(doc, doc), "md")
