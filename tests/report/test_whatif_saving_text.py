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


def test_one_cause_is_said_on_both_findings() -> None:
    """The lead names the fixes replayed with its own; the other names the lead and shows no saving of its own
    (docs/whatif.md 'Claims')."""
    lead = saving_text(_record({"predicted_step_ns": 3_530_000, "predicted_saving_ns_per_step": 49_220_000,
                                "claimed_saving_ns_per_step": 49_220_000, "claimed_with": ["launch_bound"]}))
    assert lead.endswith("replayed fix: 49.2 ms/step (step → 3.5 ms), with launch_bound's fix (one cause, counted here)")
    other = saving_text(_record({"predicted_step_ns": 3_530_000, "predicted_saving_ns_per_step": 49_220_000,
                                 "claimed_saving_ns_per_step": 0, "claimed_by": "host_bound"}))
    assert other.endswith("; replayed fix: the same time as host_bound's fix, counted there")


def test_a_marginal_claim_below_the_replay_is_said() -> None:
    text = saving_text(_record({"predicted_step_ns": 38_000_000, "predicted_saving_ns_per_step": 14_470_000,
                                "claimed_saving_ns_per_step": 10_000_000}))
    assert text.endswith("; 10.0 ms/step once the fixes ranked above it are made")
    same = saving_text(_record({"predicted_step_ns": 38_000_000, "predicted_saving_ns_per_step": 14_470_000,
                                "claimed_saving_ns_per_step": 14_000_000}))  # within 5 %: not said
    assert "once the fixes" not in same
