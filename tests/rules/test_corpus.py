"""Runs every case of the diagnosis corpus (``tests/corpus/cases_*.py``) through ``aiprof analyze``'s
pipeline: the first finding, the ids that must and must not appear, and each case's own checks."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import corpus
from aiprof.pipeline import analyze_and_diagnose
from aiprof.report.document import build_document
from corpus import ANY, Case


def _all_cases() -> list[Case]:
    cases: list[Case] = []
    for info in sorted(pkgutil.iter_modules(corpus.__path__), key=lambda m: m.name):
        if info.name.startswith("cases_"):
            cases.extend(importlib.import_module(f"corpus.{info.name}").CASES)
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "corpus case names must be unique"
    return cases


CASES = _all_cases()


@pytest.mark.parametrize("case", [pytest.param(c, marks=(pytest.mark.torch, pytest.mark.slow) if c.real else ())
                                  for c in CASES], ids=[c.name for c in CASES])
def test_corpus_case(case: Case, tmp_path: Path) -> None:
    path = case.build(tmp_path)
    run, found = analyze_and_diagnose([path], workers=1)
    findings = [f.to_dict() for f in found]  # the cases check the findings as the JSON report holds them
    ids = [f["id"] for f in findings]
    actionable = [f["id"] for f in findings if f["severity"] != "info"]
    if case.top is None:
        shown = actionable if case.top_info_ok else ids
        assert shown == [], f"{case.name} ({case.reason}): expected no finding, got {ids}"
    elif case.top != ANY:
        assert ids[:1] == [case.top], f"{case.name} ({case.reason}): {ids}"
    assert case.present <= set(ids), f"{case.name}: missing {set(case.present) - set(ids)} in {ids}"
    assert not case.absent & set(ids), f"{case.name}: unexpected {case.absent & set(ids)} in {ids}"
    assert not [n for r in run.ranks for n in r.notes if "failed" in n]
    for f in findings:
        assert 0 <= f["share_of_step"] <= 1
    if case.check is not None:
        case.check(run, findings)
    build_document(run, found)
