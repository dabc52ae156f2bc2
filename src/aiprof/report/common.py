"""What every renderer needs from the document: number formats and the views they all show.

Renderers differ in layout only; picking *which* rank, kernels, ops and findings to show happens here,
once, so the terminal, Markdown and HTML reports always agree.
"""

from __future__ import annotations

from typing import Any

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def fmt_ms(ns: float) -> str:
    """A duration for people: ms above 1 ms, else µs."""
    ms = ns / 1e6
    if abs(ms) >= 100:
        return f"{ms:,.0f} ms"
    if abs(ms) >= 1:
        return f"{ms:.1f} ms"
    return f"{ns / 1e3:.1f} µs"


def fmt_pct(fraction: float, digits: int = 1) -> str:
    return f"{100 * fraction:.{digits}f}%"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def util_label(doc: dict[str, Any]) -> str:
    """CPU-only traces are accounted on the CPU: say "CPU busy", not "GPU utilization"."""
    return "GPU utilization" if doc.get("summary", {}).get("device_kind") == "gpu" else "CPU busy"


def focus_rank(doc: dict[str, Any]) -> dict[str, Any]:
    """The rank the detail sections describe: the slowest (the one the others wait for)."""
    ranks: list[dict[str, Any]] = doc["ranks"]
    slowest = doc.get("summary", {}).get("slowest_rank")
    return next((r for r in ranks if r["rank"] == slowest), ranks[0])


def findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings, most useful first: severity, then the saving per step."""
    items = [f for f in doc.get("findings") or [] if isinstance(f, dict)]
    return sorted(
        items,
        key=lambda f: (SEVERITY_ORDER.get(str(f.get("severity")), 9), -_num(f.get("est_saving_ns_per_step"))),
    )


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def primary_index(rank: dict[str, Any]) -> int | None:
    """The device index of the rank's primary device (``gpu:3`` → 3), None for the CPU."""
    device = str(rank.get("primary_device", ""))
    if device.startswith("gpu:"):
        try:
            return int(device[4:])
        except ValueError:
            return None
    return None


def top_kernels(rank: dict[str, Any], n: int = 10) -> list[dict[str, Any]]:
    """The primary device's kernels by total time (the ``kernels`` section), longest first."""
    section = rank.get("kernels")
    if not isinstance(section, dict):
        return []
    devices = [d for d in section.get("devices") or [] if isinstance(d, dict)]
    if not devices:
        return []
    index = primary_index(rank)
    device = next((d for d in devices if d.get("device") == index), devices[0])
    rows = [k for k in device.get("kernels") or [] if isinstance(k, dict)]
    return sorted(rows, key=lambda k: -_num(k.get("total_ns")))[:n]


def top_ops(rank: dict[str, Any], n: int = 10) -> tuple[list[dict[str, Any]], str]:
    """Ops by GPU time when the trace has GPU work, else by self CPU time; and the key used."""
    section = rank.get("ops")
    if not isinstance(section, dict):
        return [], ""
    rows = [g for g in section.get("groups") or [] if isinstance(g, dict)]
    key = "gpu_total_ns" if any(_num(r.get("gpu_total_ns")) > 0 for r in rows) else "cpu_self_ns"
    return sorted(rows, key=lambda r: -_num(r.get(key)))[:n], key


def mean_step_ns(totals: dict[str, Any]) -> float:
    return float(totals.get("duration_ns", 0)) / max(int(totals.get("steps", 0)), 1)


def saving_text(f: dict[str, Any]) -> str:
    """"saves ≈ 58.7 ms/step (33.1% of step)", or "" when the finding has no saving."""
    saving = _num(f.get("est_saving_ns_per_step"))
    if saving <= 0:
        return ""
    share = _num(f.get("share_of_step"))
    bound = "up to " if f.get("saving_kind") == "upper_bound" else "≈ "
    return f"saves {bound}{fmt_ms(saving)}/step" + (f" ({fmt_pct(share)} of step)" if share > 0 else "")
