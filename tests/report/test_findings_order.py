"""Findings come in one order in every format (the JSON's: highest saving per step first, the replayed
claim where a finding has one, else its formula, as the README says), and a note that saves nothing is never above a finding that saves time. Checked on
shared real traces, every case of the diagnosis corpus, and a report whose severities disagree with its
savings (a rule may fix its severity, e.g. ``cpu_saturation`` is always ``low``)."""

from __future__ import annotations

import html
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest
from report_docs import as_dict, as_report, document_for_paths, document_of

import corpus
from aiprof.report.common import ranking_saving_ns
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import Report
from aiprof.report.render import render


def _json_ids(doc: Report) -> list[str]:
    return [f["id"] for f in json.loads(render(doc, "json"))["findings"]]


def _html_ids(doc: Report) -> list[str]:
    page = render(doc, "html")
    return [html.unescape(i) for i in re.findall(r'<article class="finding [^"]*"><h3>.*?<span class=mute>\((.*?)\)</span></h3>', page)]


def _markdown_titles(doc: Report) -> list[str]:
    return re.findall(r"^\d+\. \*\*(.*?)\*\* `", render(doc, "md"), flags=re.M)


def _terminal_positions(doc: Report, titles: list[str]) -> list[int]:
    out = render(doc, "terminal", width=400)  # wide: every title on one line
    return [out.find(terminal(t)) for t in titles]


def assert_one_order(doc: Report, what: str) -> None:
    """The JSON's order is the ranking; Markdown, HTML and the terminal's top findings follow it."""
    ids = _json_ids(doc)
    by_id = {f.id: f for f in doc.findings}
    titles = [by_id[i].title or i for i in ids]
    assert _html_ids(doc) == ids, what
    assert _markdown_titles(doc) == [markdown(t) for t in titles], what
    shown = _terminal_positions(doc, titles[:3])
    assert -1 not in shown and shown == sorted(shown), f"{what}: terminal order {shown}"
    # the saving ranked by: the replayed claim where a finding has one, else its formula (docs/whatif.md 'Claims')
    savings = [ranking_saving_ns(by_id[i]) for i in ids if not i.startswith("mem_")]
    assert savings == sorted(savings, reverse=True), f"{what}: {ids} not by saving"
    zero = [k for k, s in enumerate(savings) if s <= 0]
    assert not zero or all(s <= 0 for s in savings[zero[0]:]), f"{what}: a zero-saving note above a saving"


@pytest.mark.parametrize("key", ["resnet50_nw0", "resnet50_nw4", "dlrm_8rank", "cpu_only", "megatron_tp8"])
def test_shared_traces_findings_in_one_order(key: str) -> None:
    doc = document_of(key)
    assert doc.findings
    assert_one_order(doc, key)


def _corpus_cases() -> list[corpus.Case]:
    cases: list[corpus.Case] = []
    for info in sorted(pkgutil.iter_modules(corpus.__path__), key=lambda m: m.name):
        if info.name.startswith("cases_"):  # the synthetic ones: real runs are tests/rules/test_corpus.py's
            cases.extend(c for c in importlib.import_module(f"corpus.{info.name}").CASES if not c.real)
    return cases


def test_corpus_findings_in_one_order(tmp_path: Path) -> None:
    checked = 0
    for i, case in enumerate(_corpus_cases()):
        (tmp_path / str(i)).mkdir()
        path = case.build(tmp_path / str(i))
        doc = document_for_paths((str(path),))
        if len(doc.findings) >= 2:
            checked += 1
        assert_one_order(doc, case.name)
    assert checked >= 5


def test_severity_never_outranks_saving() -> None:
    """A finding of lower severity that saves more comes first in every format, and a zero-saving note
    (here a second copy of a finding with its saving removed) comes after every finding that saves time."""
    data = as_dict(document_of("resnet50_nw0"))
    findings = [f for f in data["findings"] if not f["id"].startswith("mem_")]  # those save bytes: last anyway
    assert len(findings) >= 3 and findings[0]["est_saving_ns_per_step"] > findings[1]["est_saving_ns_per_step"]
    findings[0]["severity"] = "low"  # the largest saving, the lowest severity
    note = dict(findings[1], id="zero_note", title="A note with no saving", severity="low",
                est_saving_ns_per_step=0, share_of_step=0.0)
    data["findings"] = findings + [note]
    doc = as_report(data)
    assert_one_order(doc, "edited")
    assert _json_ids(doc)[0] == findings[0]["id"] and _json_ids(doc)[-1] == "zero_note"
