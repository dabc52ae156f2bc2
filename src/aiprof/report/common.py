"""What every renderer needs from the document: number formats and the views they all show.

Renderers differ in layout only; picking *which* rank, kernels, ops and findings to show happens here,
once, so the terminal, Markdown and HTML reports always agree.
"""

from __future__ import annotations

from typing import Any

from aiprof.analysis.timeline import BUCKETS

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


def is_cpu(doc_or_rank: dict[str, Any]) -> bool:
    """A CPU-only report (or rank): accounted on the CPU, so no device words (copies, memsets, GPU)."""
    if "summary" in doc_or_rank:
        return bool(doc_or_rank.get("summary", {}).get("device_kind") == "cpu")
    return str(doc_or_rank.get("primary_device", "")) == "cpu"


def buckets(doc_or_rank: dict[str, Any]) -> tuple[str, ...]:
    """The buckets worth a row: a CPU has no copy engines, so ``memcpy`` and ``memset`` (always 0 there)
    are left out of CPU-only reports."""
    if is_cpu(doc_or_rank):
        return tuple(b for b in BUCKETS if b not in ("memcpy", "memset"))
    return BUCKETS


def partial_note(doc: dict[str, Any]) -> str | None:
    """The summary's sentence for a partial run (None when the run is whole), with the steps left out."""
    note = doc.get("summary", {}).get("partial_note")
    if not note:
        return None
    names = [str(s.get("name")) for r in doc.get("ranks") or [] for s in r.get("incomplete_steps") or []]
    if names:
        note += " Left out: " + ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "") + "."
    return str(note)


def notes(doc: dict[str, Any], focus: dict[str, Any] | None = None) -> list[str]:
    """The run's warnings, then the rank notes (the focus rank's only when given), each once: a load
    warning is both a rank note and a run warning."""
    ranks = [focus] if focus is not None else list(doc.get("ranks") or [])
    multi = focus is None and len(ranks) > 1
    out: list[str] = []
    seen: set[str] = set()
    for note in doc.get("warnings") or []:
        if str(note) not in seen:
            seen.add(str(note))
            out.append(str(note))
    for r in ranks:
        for note in r.get("notes") or []:
            if str(note) not in seen:
                seen.add(str(note))
                out.append(f"rank {r['rank']}: {note}" if multi else str(note))
    return out


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
