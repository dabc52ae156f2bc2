"""Every renderer on real traces: the JSON validates against the schema, the terminal fits 80 columns,
Markdown and HTML carry the findings and the sections the document has, and nothing is invented."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import jsonschema
import msgspec
import numpy as np
import pytest
from report_docs import REAL, as_dict, as_report, document_of, shared_path

from aiprof.analysis.overview import TimelineOverview
from aiprof.analysis.timeline import BUCKETS
from aiprof.report.common import findings, focus_rank, top_kernels
from aiprof.report.escape import markdown
from aiprof.report.model import Report
from aiprof.report.render import render

FORMATS = ("terminal", "json", "md", "html")


def schema() -> dict[str, Any]:
    return json.loads(resources.files("aiprof").joinpath("data/report.schema.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_renderer_on_real_traces(real_doc: Report, fmt: str) -> None:
    text = render(real_doc, fmt)
    assert text.strip()
    if fmt == "json":
        doc = json.loads(text)
        jsonschema.validate(doc, schema())
        assert doc == as_dict(real_doc)
    elif fmt == "terminal":
        assert max(len(line) for line in text.splitlines()) <= 80
        assert "\x1b[" not in text
        assert f"{100 * real_doc.summary.gpu_utilization:.1f}%" in text
    elif fmt == "md":
        for f in findings(real_doc):
            assert markdown(f.title) in text
    else:
        assert 'id="aiprof-data"' in text and "http://" not in text.replace("http://www.w3.org", "")
        embedded = re.search(r'<script type="application/json" id="aiprof-data">(.*?)</script>', text, re.S)
        assert embedded is not None and json.loads(embedded.group(1)) == as_dict(real_doc)
        assert '<section id="steps">' in text and '<section id="timeline">' in text
        assert ('<section id="findings">' in text) == bool(findings(real_doc))
        assert ('<section id="ranks">' in text) == (len(real_doc.ranks) > 1)
        assert ('<section id="kernels">' in text) == bool(top_kernels(focus_rank(real_doc)))


def test_terminal_shows_findings_with_savings() -> None:
    doc = document_of("resnet50_nw0")
    text = render(doc, "terminal")
    top = findings(doc)
    if not top:
        pytest.skip("the diagnosis rules are not installed")
    assert top[0].title[:40] in text and "saves" in text


def test_ranks_view_for_eight_ranks() -> None:
    doc = document_of("dlrm_8rank")
    html = render(doc, "html")
    ranks = html.split('<section id="ranks">', 1)[1].split("</section>", 1)[0]
    for r in range(8):
        assert f"rank {r}" in ranks
    assert "all_to_all" in html.split('<section id="collectives">', 1)[1]
    assert "◀ slowest" in render(doc, "terminal")


def test_megatron_tp8_per_rank_view() -> None:
    doc = document_of("megatron_tp8")
    assert len(doc.ranks) == 8
    html = render(doc, "html")
    assert html.count("<svg class=\"chart strip\"") == 8  # one timeline strip per rank
    jsonschema.validate(json.loads(render(as_report(doc), "json")), schema())


@pytest.mark.parametrize("key", sorted(REAL))
def test_timeline_overview_bins_add_up(key: str) -> None:
    """Per bin, the buckets cover the bin exactly; summed over bins, compute equals the accounting's
    compute inside the steps plus the compute between steps (never less)."""
    shared_path(key)
    doc = document_of(key)
    for rank in doc.ranks:
        assert isinstance(rank.timeline_overview, TimelineOverview)
        ov = msgspec.to_builtins(rank.timeline_overview)
        edges = ov["start_ns"] + (np.arange(ov["bins"] + 1) * (ov["end_ns"] - ov["start_ns"])) // ov["bins"]
        for dev in ov["devices"]:
            total = sum(np.array(dev[f"{b}_ns"]) for b in BUCKETS)
            assert (total == np.diff(edges)).all()
            assert min(min(dev[f"{b}_ns"]) for b in ("compute", "idle")) >= 0
        primary = next(d for d in ov["devices"] if d["device"] == rank.primary_device)
        steps_compute = rank.totals.breakdown_ns["compute"]
        assert sum(primary["compute_ns"]) >= steps_compute


def test_html_escapes_trace_strings_everywhere() -> None:
    """A finding, an op, a kernel and metadata carrying markup come out as text."""
    doc = as_dict(document_of("resnet50_nw0"))
    evil = "<img src=x onerror=alert(1)>"
    rank = doc["ranks"][0]
    rank["kernels"]["devices"][0]["kernels"][0]["name"] = evil
    rank["ops"]["groups"][0]["name"] = evil
    rank["trace_metadata"]["evil"] = evil
    doc["findings"] = [
        {"id": "x", "title": evil, "severity": "high", "est_saving_ns_per_step": 1000, "share_of_step": 0.1,
         "confidence": "high", "evidence": {"kernel": evil, "rows": [{"name": evil}]}, "fix": evil, "docs": evil}
    ]
    for fmt in ("html", "md"):
        text = render(as_report(doc), fmt)
        assert evil not in text
    html = render(as_report(doc), "html")
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 5


def test_roofline_section_from_a_real_roofline() -> None:
    """The chart draws one circle per modelled op (at most 150) and one roof per distinct peak used."""
    roofline = pytest.importorskip("aiprof.roofline.analysis")
    import aiprof

    trace = aiprof.load(shared_path("resnet50_nw0"))
    roof = msgspec.to_builtins(roofline.roofline(trace).section())
    doc = as_dict(document_of("resnet50_nw0"))
    doc["ranks"][0]["roofline"] = roof
    html = render(as_report(doc), "html")
    section = html.split('<section id="roofline">', 1)[1].split("</section>", 1)[0]
    modelled = [r for r in roof["rows"] if (r.get("arithmetic_intensity_flops_per_byte") or 0) > 0 and (r.get("achieved_flops_per_s") or 0) > 0]
    assert section.count("<circle") == min(len(modelled), 150) > 0
    peaks = {roof["peaks"]["flops_per_s"][r["roof_key"]] for r in modelled if r.get("roof_key")}
    assert section.count('class="roofline"') == len(peaks)
    jsonschema.validate(json.loads(render(as_report(doc), "json")), schema())
