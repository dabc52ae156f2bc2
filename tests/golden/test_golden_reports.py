"""The JSON report of every shared real trace is byte for byte what ``tests/golden/shared_reports.json``
recorded (section digests; see ``shared_reports.py`` for what is built and the two machine-dependent
inputs taken out). A refactor must keep it; a change meant to alter reports regenerates the file with
``.venv/bin/python -m tests.golden.regen`` (``make golden``) and says in its commit which traces and
sections changed and why."""

from __future__ import annotations

import json

import pytest

from .shared_reports import GOLDEN, INPUTS, REGENERATE, SHARED, changes, digests, report_bytes


def _golden() -> dict[str, dict[str, object]]:
    return json.loads(GOLDEN.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("rel", INPUTS)
def test_report_matches_the_golden_digests(rel: str) -> None:
    if not (SHARED / rel).exists():
        pytest.skip(f"{rel} not in this copy of the shared traces ({SHARED})")
    golden = _golden()
    assert rel in golden, f"{rel} has no golden entry: run {REGENERATE}"
    actual = digests(report_bytes(rel))
    diff = changes(rel, golden[rel], actual)
    assert not diff, "the JSON report changed:\n  " + "\n  ".join(diff) + (
        f"\nIf the change is meant, regenerate with {REGENERATE} and say why in the commit message.")
    assert actual == golden[rel]


def test_every_golden_entry_is_an_input() -> None:
    """No stale entry: the golden file lists exactly the inputs (a removed input is removed there too)."""
    assert sorted(_golden()) == sorted(INPUTS), f"regenerate with {REGENERATE}"


def test_digests_name_the_changed_section() -> None:
    """The comparison can fail, and names the section: one changed number in a rank section."""
    raw = b'{"summary":{"a":1},"ranks":[{"rank":0,"kernels":{"n":1}},{"rank":1,"kernels":{"n":2}}],"findings":[]}'
    edited = raw.replace(b'"n":2', b'"n":3')
    before, after = digests(raw), digests(edited)
    assert changes("x", before, after) == ["x: section ranks.kernels changed"]
    assert changes("x", before, digests(raw)) == []
    assert set(before["sections"]) == {"summary", "ranks", "ranks.rank", "ranks.kernels", "findings"}
