"""Memory in ``aiprof compare``: peak deltas per device and the memory findings resolved or new.

Present in a :class:`~aiprof.report.compare.Comparison` (its ``memory`` field) only when both reports have a
memory section (``RankReport.memory``, schema 1.1). Devices are matched by rank number and device name;
findings of the memory family (``mem_*``, ``allocator_churn``, ``memory_pressure``) by id and device. Sizes
are bytes; the renderers show them in binary units (KiB, MiB, GiB).
"""

from __future__ import annotations

import msgspec

from aiprof.memory.report import MemoryReport
from aiprof.memory.units import binary
from aiprof.report.escape import html as _html
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import Report
from aiprof.rules.finding import FindingRecord

TIME_SIDE_RULES = ("allocator_churn", "memory_pressure")


class BytesDelta(msgspec.Struct, kw_only=True):
    """BEFORE and AFTER in bytes; ``delta_pct`` is None when BEFORE is 0 (no baseline)."""

    before: int
    after: int
    delta: int
    delta_pct: float | None


class PeakDelta(msgspec.Struct, kw_only=True):
    """One device of one rank: its peak allocated and, where both sides know it, its peak reserved."""

    rank: int
    device: str
    peak_allocated_bytes: BytesDelta
    peak_reserved_bytes: BytesDelta | None = None


class MemoryComparison(msgspec.Struct, kw_only=True):
    """Peak deltas and the memory findings (``id (device)``) resolved, new and unchanged."""

    peaks: list[PeakDelta]
    resolved: list[str]
    new: list[str]
    unchanged: list[str]


def html(text: object) -> str:
    """Text for HTML: control and bidi characters made visible, then HTML-escaped."""
    return _html(terminal(text))


def _delta(before: int, after: int) -> BytesDelta:
    pct = 100.0 * (after - before) / before if before > 0 else None
    return BytesDelta(before=before, after=after, delta=after - before, delta_pct=pct)


def _memories(doc: Report) -> dict[int, MemoryReport]:
    return {r.rank: r.memory for r in doc.ranks if isinstance(r.memory, MemoryReport)}


def _findings(doc: Report) -> list[str]:
    def key(f: FindingRecord) -> str:
        return f"{f.id} ({f.device})" if f.device else f.id

    return list(dict.fromkeys(key(f) for f in doc.findings if f.id.startswith("mem_") or f.id in TIME_SIDE_RULES))


def compare_memory(before: Report, after: Report) -> MemoryComparison | None:
    """The memory part of a comparison, or None unless both sides have memory data."""
    b, a = _memories(before), _memories(after)
    if not b or not a:
        return None
    peaks: list[PeakDelta] = []
    for rank in sorted(set(b) & set(a)):
        after_devices = {d.device: d for d in a[rank].devices}
        for dev in b[rank].devices:
            other = after_devices.get(dev.device)
            if other is None:
                continue
            reserved = None
            if dev.peak_reserved_bytes is not None and other.peak_reserved_bytes is not None:
                reserved = _delta(dev.peak_reserved_bytes, other.peak_reserved_bytes)
            peaks.append(PeakDelta(rank=rank, device=dev.device,
                                   peak_allocated_bytes=_delta(dev.peak_allocated_bytes, other.peak_allocated_bytes),
                                   peak_reserved_bytes=reserved))
    fb, fa = _findings(before), _findings(after)
    return MemoryComparison(
        peaks=peaks,
        resolved=[f for f in fb if f not in fa],
        new=[f for f in fa if f not in fb],
        unchanged=[f for f in fb if f in fa],
    )


# ---------------------------------------------------------------------------------------------------
# Rendering (compare_render calls these: one hook per format)
# ---------------------------------------------------------------------------------------------------
def _signed(d: BytesDelta) -> str:
    sign = "+" if d.delta > 0 else ("−" if d.delta < 0 else "±")
    pct = f" ({d.delta_pct:+.1f}%)" if d.delta_pct is not None else ""
    return f"{sign}{binary(abs(d.delta))}{pct}"


def _rows(mem: MemoryComparison, multi: bool) -> list[tuple[str, str, str, str]]:
    """(what, before, after, change) per device and measure."""
    out = []
    for p in mem.peaks:
        who = f"rank {p.rank} {p.device}" if multi else p.device
        measures = [("peak allocated", p.peak_allocated_bytes), ("peak reserved", p.peak_reserved_bytes)]
        out += [(f"{who} {name}", binary(d.before), binary(d.after), _signed(d)) for name, d in measures if d is not None]
    return out


def _finding_rows(mem: MemoryComparison) -> list[tuple[str, str]]:
    return [(status, f) for status, items in (("resolved", mem.resolved), ("new", mem.new)) for f in items]


def _multi(mem: MemoryComparison) -> bool:
    return len({p.rank for p in mem.peaks}) > 1


def terminal_text(mem: MemoryComparison | None) -> str:
    """Lines to append to the terminal comparison ("" without memory data on both sides): one heading per
    device, then one line per measure, each within 80 columns."""
    if mem is None:
        return ""
    multi = _multi(mem)
    lines = ["", "Memory"]
    for p in mem.peaks:
        lines.append(f"  {p.device}" + (f" (rank {p.rank})" if multi else ""))
        for name, d in (("peak allocated", p.peak_allocated_bytes), ("peak reserved", p.peak_reserved_bytes)):
            if d is not None:
                lines.append(f"    {name:<15} {binary(d.before):>10} → {binary(d.after):>10}  {_signed(d)}")
    lines += [f"  {status}: {f}" for status, f in _finding_rows(mem)]
    return "\n".join(terminal(line) for line in lines) + "\n"


def markdown_text(mem: MemoryComparison | None) -> str:
    """A ``### Memory`` table to append to the Markdown comparison."""
    if mem is None:
        return ""
    lines = ["", "### Memory", "", "| measure | before | after | change |", "|---|---:|---:|---:|"]
    lines += [f"| {markdown(w)} | {b} | {a} | {markdown(c)} |" for w, b, a, c in _rows(mem, _multi(mem))]
    found = _finding_rows(mem)
    if found:
        lines += [""] + [f"- {status}: {markdown(f)}" for status, f in found]
    return "\n".join(lines) + "\n"


def html_section(mem: MemoryComparison | None) -> str:
    """A ``<section id="memory">`` for the HTML comparison ("" without memory data on both sides)."""
    if mem is None:
        return ""
    rows = "".join(f"<tr><td>{html(w)}</td><td>{html(b)}</td><td>{html(a)}</td><td>{html(c)}</td></tr>"
                   for w, b, a, c in _rows(mem, _multi(mem)))
    found = "".join(f"<li>{html(status)}: {html(f)}</li>" for status, f in _finding_rows(mem))
    return ('<section id="memory"><h2>Memory</h2><table><thead><tr><th>measure</th><th>before</th><th>after</th>'
            f"<th>change</th></tr></thead><tbody>{rows}</tbody></table>" + (f"<ul>{found}</ul>" if found else "")
            + "</section>")


def with_html_section(page: str, mem: MemoryComparison | None) -> str:
    """``page`` with the memory section before its closing body tag."""
    section = html_section(mem)
    if not section:
        return page
    at = page.rfind("</body>")
    return page[:at] + section + page[at:] if at >= 0 else page + section
