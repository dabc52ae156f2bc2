"""Typed evidence rows (``Evidence`` Structs) become the plain dicts a finding holds when it is built: the
same keys in the same order as a dict written by hand, unset fields left out, so the JSON report is the same
bytes whichever way a rule wrote its evidence."""

from __future__ import annotations

import json

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.rules.coldstart import OneTimeCall
from aiprof.rules.evidence import OpRow
from aiprof.rules.finding import Evidence, Finding, unstruct


class _Row(Evidence, kw_only=True):
    name: str
    count: int
    line: str | UnsetType = UNSET


def _finding(evidence: dict[str, object]) -> Finding:
    return Finding(id="x", title="t", severity="low", est_saving_ns_per_step=1, share_of_step=0.1,
                   saving_kind="estimate", saving_formula="", confidence="low", evidence=evidence, fix="")


def test_a_row_is_held_as_the_dict_of_its_set_fields() -> None:
    typed = _finding({"rows": [_Row(name="a", count=np.int64(2)), _Row(name="b", count=1, line="x.py:3")], "n": 1})
    plain = _finding({"rows": [{"name": "a", "count": np.int64(2)}, {"name": "b", "count": 1, "line": "x.py:3"}],
                      "n": 1})
    assert typed.evidence == plain.evidence
    assert [list(r) for r in typed.evidence["rows"]] == [["name", "count"], ["name", "count", "line"]]
    assert json.dumps(typed.to_dict()) == json.dumps(plain.to_dict())
    assert msgspec.json.encode(typed.to_record()) == msgspec.json.encode(plain.to_record())


def test_evidence_without_rows_is_kept_as_it_is() -> None:
    evidence = {"a": [1, 2], "b": (3, {"c": 4})}
    assert unstruct(evidence) is evidence
    nested = {"a": (OpRow(name="mm", calls_per_step=1.5, ns_per_step=10),)}
    assert unstruct(nested) == {"a": ({"name": "mm", "calls_per_step": 1.5, "ns_per_step": 10},)}


def test_the_field_order_is_the_evidence_key_order() -> None:
    call = OneTimeCall(name="cudaFree", kind="context creation", dur_ns=5, median_ns_of_name=1, at_ns=0)
    call.source_line = "train.py:7"
    assert list(unstruct(call)) == ["name", "kind", "dur_ns", "median_ns_of_name", "at_ns", "source_line"]
