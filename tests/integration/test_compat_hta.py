"""HTA's temporal breakdown reproduced on HTA's own test traces (reference: traces/MANIFEST.md)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

import aiprof
from aiprof.analysis.compat import compat_for_trace, hta_temporal_breakdown
from aiprof.trace.model import RunSet, Trace

# (trace, idle %, compute %, non-compute %) as HTA 0.5.0 reports them, copied from the HTA table in
# ../shared/traces/MANIFEST.md ("Reference numbers from peer tools" -> "Holistic Trace Analysis").
MANIFEST_ROWS = [
    ("hta/mtia_trace_single_rank/mtia_rank_0.json.gz", 42.39, 54.81, 2.80),
    ("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", 2.63, 96.75, 0.62),
    ("hta/negative_queue_length_values_check/rank0.json.gz", 69.44, 14.15, 16.41),
    ("hta/trace_diff/control/control.json.gz", 16.20, 61.23, 22.57),
    ("hta/df_index_resolver/df_index_resolver.json.gz", 46.08, 35.55, 18.37),
    ("hta/trace_filter/sampled_rank-0.json.gz", 53.56, 17.71, 28.74),
]
TOLERANCE_PP = 0.05


def load_trace(path: Path) -> Trace:
    if not path.exists():
        pytest.skip(f"{path} not found")
    loaded = aiprof.load(path)
    return loaded.traces[0] if isinstance(loaded, RunSet) else loaded


@pytest.mark.parametrize(("trace", "idle", "compute", "non_compute"), MANIFEST_ROWS, ids=[r[0].split("/")[1] for r in MANIFEST_ROWS])
def test_temporal_breakdown_matches_hta(traces_dir: Path, trace: str, idle: float, compute: float, non_compute: float) -> None:
    result = hta_temporal_breakdown(load_trace(traces_dir / trace))
    assert result.defined
    assert result.idle_pct == pytest.approx(idle, abs=TOLERANCE_PP)
    assert result.compute_pct == pytest.approx(compute, abs=TOLERANCE_PP)
    assert result.non_compute_pct == pytest.approx(non_compute, abs=TOLERANCE_PP)
    assert result.idle_us + result.compute_us + result.non_compute_us == result.total_us


def test_mtia_microseconds_match_hta(traces_dir: Path) -> None:
    """MANIFEST gives µs for MTIA: compute 7,305,597 exactly; span 13,328,071 and idle 5,649,476 differ
    by the 137 device rows without ``args.stream`` that HTA skips (docs/peer-conventions.md)."""
    result = hta_temporal_breakdown(load_trace(traces_dir / MANIFEST_ROWS[0][0]))
    assert result.compute_us == 7_305_597
    assert abs(result.total_us - 13_328_071) < 0.001 * 13_328_071
    assert abs(result.idle_us - 5_649_476) < 0.002 * 5_649_476


def test_rank_1_of_trace_filter_is_independent(traces_dir: Path) -> None:
    """Each rank is analysed alone; rank 1's numbers (HTA 0.5.0: 54.72 / 22.57 / 22.72) are its own."""
    result = hta_temporal_breakdown(load_trace(traces_dir / "hta/trace_filter/sampled_rank-1.json.gz"))
    assert (result.idle_pct, result.compute_pct, result.non_compute_pct) == pytest.approx((54.72, 22.57, 22.72), abs=TOLERANCE_PP)


@pytest.mark.parametrize("trace", ["hta/cpu_only", "edge/zoology_a100_no_kernels.json.gz"])
def test_traces_without_device_work_are_undefined_not_errors(traces_dir: Path, trace: str) -> None:
    path = traces_dir / trace
    if path.is_dir():
        files = sorted(path.glob("*.json*"))
        if not files:
            pytest.skip(f"no trace in {path}")
        path = files[0]
    t = load_trace(path)
    result = hta_temporal_breakdown(t)
    assert not result.defined and result.total_us == 0
    block = msgspec.to_builtins(compat_for_trace(t))
    assert set(block) == {"hta", "tracelens", "tbplugin"}
    assert {"idle_pct", "compute_pct", "non_compute_pct"} <= set(block["hta"])
