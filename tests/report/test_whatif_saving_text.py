"""A finding's saving line shows its replayed fix beside the formula when it carries one."""

from __future__ import annotations

from typing import Any

from aiprof.report.common import saving_text
from aiprof.rules.finding import FindingRecord


def _record(evidence: dict[str, Any]) -> FindingRecord:
    return FindingRecord(id="data_loading", title="t", severity="high", est_saving_ns_per_step=58_700_000,
                         share_of_step=0.331, saving_kind="upper_bound", confidence="high", evidence=evidence, fix="")


def test_the_replayed_fix_follows_the_formula() -> None:
    text = saving_text(_record({"predicted_step_ns": 118_611_500, "predicted_saving_ns_per_step": 59_129_500}))
    assert text == "saves up to 58.7 ms/step (33.1% of step); replayed fix: 59.1 ms/step (step → 119 ms)"


def test_no_prediction_no_replayed_text() -> None:
    assert saving_text(_record({})) == "saves up to 58.7 ms/step (33.1% of step)"
    assert "replayed" not in saving_text(_record({"predicted_step_ns": True, "predicted_saving_ns_per_step": 1}))
