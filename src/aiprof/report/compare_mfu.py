"""Model FLOPs utilisation in ``aiprof compare``: the MFU per op class and per ``nn.Module``, before → after,
with the peak each side was measured against.

Present in a :class:`~aiprof.report.compare.Comparison` (its ``mfu_detail`` field) only when both reports'
slowest ranks have an MFU (``RankReport.mfu`` available: FLOPs and a dense peak; :mod:`aiprof.roofline.mfu`).
Each side's numbers are against its own peak (a precision fix moves the run from, say, the tf32 peak to the
bf16 one: the peaks are printed beside the numbers, and ``same_peak`` says whether they are one rate).
Op classes are matched by name (``matmul``, ``conv``, ``attention``, ``elementwise``), modules by their path
in the module view (only when both traces recorded modules); a class or module on one side only has the
other side's numbers absent (``None``). MFU values are fractions of the peak (0.325 = 32.5 %).
"""

from __future__ import annotations

import textwrap
from typing import Literal

import msgspec

from aiprof.report.escape import html as _html
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import Report
from aiprof.roofline.mfu import OP_CLASSES, MfuReport

MAX_MODULES = 100  # modules kept in the comparison (each side lists at most 50)
TOP_MODULES = 8  # modules the terminal, Markdown and HTML show: the largest changes first


class MfuPeak(msgspec.Struct, kw_only=True):
    """The dense matrix peak one side's MFU is measured against."""

    flops_per_s: int
    key: str  # which rate: "matrix_bf16", "matrix_fp32"…
    device: str
    source: str  # where the rate comes from (a spec table, `aiprof peaks`)
    dtype: str  # the dtype of most of the side's matrix FLOPs


class MfuClassDelta(msgspec.Struct, kw_only=True):
    """One op class, before and after (``None``: the class did no FLOPs on that side)."""

    op_class: str
    before_mfu: float | None
    after_mfu: float | None
    delta: float | None  # after − before, in fractions of the peak (percentage points / 100); None unless both
    before_flops_per_step: int
    after_flops_per_step: int
    before_dtype: str | None
    after_dtype: str | None


class MfuModuleDelta(msgspec.Struct, kw_only=True):
    """One module (by path), before and after: its share of the step MFU and its MFU while it runs."""

    path: str
    status: Literal["matched", "added", "removed"]
    before_mfu: float | None
    after_mfu: float | None
    delta: float | None
    before_busy_mfu: float | None
    after_busy_mfu: float | None
    before_flops_per_step: int
    after_flops_per_step: int


class MfuComparison(msgspec.Struct, kw_only=True):
    """The MFU of both sides' slowest ranks: the total, per op class, per module, and the peaks used."""

    before_peak: MfuPeak
    after_peak: MfuPeak
    same_peak: bool  # one rate on both sides (same device and key): the numbers compare like for like
    before_mfu: float
    after_mfu: float
    delta: float
    by_op_class: list[MfuClassDelta]
    by_module: list[MfuModuleDelta]  # the largest |delta| first (added / removed by their one side's share)
    modules_note: str = ""  # why there are no module rows, when there are none


def _focus(doc: Report) -> MfuReport | None:
    rank = next((r for r in doc.ranks if r.rank == doc.summary.slowest_rank), doc.ranks[0] if doc.ranks else None)
    sec = rank.mfu if rank is not None else None
    return sec if isinstance(sec, MfuReport) and sec.available else None


def _peak(sec: MfuReport) -> MfuPeak:
    return MfuPeak(flops_per_s=int(sec.peak_flops_per_s or 0), key=str(sec.peak_key or ""),
                   device=str(sec.device or ""), source=str(sec.peak_source or ""), dtype=str(sec.dtype or ""))


def _diff(b: float | None, a: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _classes(b: MfuReport, a: MfuReport) -> list[MfuClassDelta]:
    before = {c.op_class: c for c in b.by_op_class or []}
    after = {c.op_class: c for c in a.by_op_class or []}
    out: list[MfuClassDelta] = []
    for name in [*OP_CLASSES, *sorted((set(before) | set(after)) - set(OP_CLASSES))]:
        cb, ca = before.get(name), after.get(name)
        if cb is None and ca is None:
            continue
        mb = float(cb.mfu or 0.0) if cb is not None else None
        ma = float(ca.mfu or 0.0) if ca is not None else None
        out.append(MfuClassDelta(op_class=name, before_mfu=mb, after_mfu=ma, delta=_diff(mb, ma),
                                 before_flops_per_step=cb.flops_per_step if cb is not None else 0,
                                 after_flops_per_step=ca.flops_per_step if ca is not None else 0,
                                 before_dtype=cb.dtype if cb is not None else None,
                                 after_dtype=ca.dtype if ca is not None else None))
    return out


def _modules(b: MfuReport, a: MfuReport) -> list[MfuModuleDelta]:
    before = {m.path: m for m in b.by_module or []}
    after = {m.path: m for m in a.by_module or []}
    out: list[MfuModuleDelta] = []
    for path in list(dict.fromkeys([*before, *after])):
        mb, ma = before.get(path), after.get(path)
        status: Literal["matched", "added", "removed"] = "matched" if mb and ma else ("removed" if mb else "added")
        sb = float(mb.mfu or 0.0) if mb is not None else None
        sa = float(ma.mfu or 0.0) if ma is not None else None
        out.append(MfuModuleDelta(
            path=path, status=status, before_mfu=sb, after_mfu=sa, delta=_diff(sb, sa),
            before_busy_mfu=float(mb.busy_mfu or 0.0) if mb is not None else None,
            after_busy_mfu=float(ma.busy_mfu or 0.0) if ma is not None else None,
            before_flops_per_step=mb.flops_per_step if mb is not None else 0,
            after_flops_per_step=ma.flops_per_step if ma is not None else 0))

    def size(m: MfuModuleDelta) -> float:
        return abs(m.delta) if m.delta is not None else float(m.before_mfu or m.after_mfu or 0.0)

    return sorted(out, key=lambda m: (-size(m), m.path))[:MAX_MODULES]


def compare_mfu(before: Report, after: Report) -> MfuComparison | None:
    """The MFU part of a comparison, or None unless both sides' slowest ranks have an MFU."""
    b, a = _focus(before), _focus(after)
    if b is None or a is None:
        return None
    pb, pa = _peak(b), _peak(a)
    modules = _modules(b, a) if b.by_module and a.by_module else []
    note = "" if modules else (
        "no module view on " + ("either side" if not b.by_module and not a.by_module
                                else "the before side" if not b.by_module else "the after side")
        + " (record with --with-stack for MFU per nn.Module)")
    mb, ma = float(b.mfu or 0.0), float(a.mfu or 0.0)
    return MfuComparison(
        before_peak=pb, after_peak=pa,
        same_peak=(pb.flops_per_s, pb.key, pb.device) == (pa.flops_per_s, pa.key, pa.device),
        before_mfu=mb, after_mfu=ma, delta=ma - mb,
        by_op_class=_classes(b, a), by_module=modules, modules_note=note)


# ---------------------------------------------------------------------------------------------------
# Rendering (compare_render calls these: one hook per format)
# ---------------------------------------------------------------------------------------------------
def rate_text(flops_per_s: float) -> str:
    """``989 TFLOP/s`` or ``57.3 GFLOP/s``."""
    if flops_per_s >= 1e12:
        return f"{flops_per_s / 1e12:,.0f} TFLOP/s"
    return f"{flops_per_s / 1e9:,.1f} GFLOP/s"


def peak_text(p: MfuPeak) -> str:
    """``matrix_bf16 989 TFLOP/s dense, NVIDIA H100 SXM (spec)``."""
    source = f" ({p.source})" if p.source else ""
    return f"{p.key or p.dtype} {rate_text(p.flops_per_s)} dense, {p.device or 'device'}{source}"


def peak_lines(cmp: MfuComparison) -> list[str]:
    """The peak(s) the numbers are against: one line when both sides used the same one."""
    if cmp.same_peak:
        return [f"peak: {peak_text(cmp.before_peak)} (both sides)"]
    return [f"peak before: {peak_text(cmp.before_peak)}", f"peak after: {peak_text(cmp.after_peak)}",
            "(each side against its own peak)"]


def pct_text(v: float | None) -> str:
    """A fraction of the peak as a percentage (4 decimals below 0.1 %); ``–`` for a side without it."""
    if v is None:
        return "–"
    pct = 100 * v
    return f"{pct:.2f}%" if abs(pct) >= 0.1 or pct == 0 else f"{pct:.4f}%"


def _pt(v: float | None) -> str:
    if v is None:
        return ""
    pt = 100 * v
    return f"{pt:+.2f} pt" if abs(pt) >= 0.1 or pt == 0 else f"{pt:+.4f} pt"


def _gflop(b: int, a: int) -> str:
    return f"{b / 1e9:,.3f} → {a / 1e9:,.3f}"


def _class_name(c: MfuClassDelta) -> str:
    return c.op_class + (" (vector work, not in MFU)" if c.op_class == "elementwise" else "")


def rows(cmp: MfuComparison) -> list[tuple[str, str, str, str, str]]:
    """(what, before, after, change, GFLOP per step before → after) for the total and each op class."""
    out = [("MFU (total)", pct_text(cmp.before_mfu), pct_text(cmp.after_mfu), _pt(cmp.delta), "")]
    return out + [(_class_name(c), pct_text(c.before_mfu), pct_text(c.after_mfu), _pt(c.delta),
                   _gflop(c.before_flops_per_step, c.after_flops_per_step)) for c in cmp.by_op_class]


def module_rows(cmp: MfuComparison) -> list[tuple[str, str, str, str, str, str]]:
    """(path, before, after, change, while it runs before → after, GFLOP per step) for the top modules."""
    out = []
    for m in cmp.by_module[:TOP_MODULES]:
        path = m.path + ("" if m.status == "matched" else f" ({m.status})")
        out.append((path, pct_text(m.before_mfu), pct_text(m.after_mfu), _pt(m.delta),
                    f"{pct_text(m.before_busy_mfu)} → {pct_text(m.after_busy_mfu)}",
                    _gflop(m.before_flops_per_step, m.after_flops_per_step)))
    return out


def _left_cut(text: str, width: int) -> str:
    """The end of a module path (its own name) when the whole does not fit."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


def terminal_text(cmp: MfuComparison | None) -> str:
    """Lines to append to the terminal comparison ("" unless both sides have an MFU), within 80 columns
    (module paths are cut from the left, so each keeps its own name; the peaks' lines are wrapped)."""
    if cmp is None:
        return ""
    lines = ["", "Model FLOPs utilisation (slowest rank; share of the step's peak, before → after)"]
    lines += [wrapped for line in peak_lines(cmp)
              for wrapped in textwrap.wrap(line, 78, initial_indent="  ", subsequent_indent="    ")]
    for what, b, a, change, gflop in rows(cmp):
        lines.append(f"  {_left_cut(what, 38):<38} {b:>9} → {a:>9} {change:>11}")
        if gflop:
            lines.append(f"  {'':<38} {gflop} GFLOP per step")
    mods = module_rows(cmp)
    if mods:
        lines.append("  per nn.Module (share of the step's peak; while the module runs):")
    for path, b, a, change, busy, _ in mods:
        lines.append(f"    {_left_cut(path, 36):<36} {b:>9} → {a:>9} {change:>11}")
        lines.append(f"    {'':<36} while it runs {busy}")
    if cmp.modules_note:
        lines.append(f"  {cmp.modules_note}")
    return "\n".join(terminal(line) for line in lines) + "\n"


def markdown_text(cmp: MfuComparison | None) -> str:
    """A ``### Model FLOPs utilisation`` section to append to the Markdown comparison: the peaks, a table
    of the op classes, one of the top modules."""
    if cmp is None:
        return ""
    lines = ["", "### Model FLOPs utilisation", ""] + [f"- {markdown(line)}" for line in peak_lines(cmp)]
    lines += ["", "| op class | before | after | change | GFLOP per step |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {markdown(w)} | {b} | {a} | {c} | {g} |" for w, b, a, c, g in rows(cmp)]
    mods = module_rows(cmp)
    if mods:
        lines += ["", "| nn.Module | before | after | change | while it runs | GFLOP per step |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {markdown(p)} | {b} | {a} | {c} | {r} | {g} |" for p, b, a, c, r, g in mods]
    if cmp.modules_note:
        lines += ["", f"- {markdown(cmp.modules_note)}"]
    return "\n".join(lines) + "\n"


def html(text: object) -> str:
    """Text for HTML: control and bidi characters made visible, then HTML-escaped."""
    return _html(terminal(text))


def _html_table(head: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html(v)}</td>" for v in row) + "</tr>" for row in body)
    return "<table><thead><tr>" + "".join(f"<th>{html(h)}</th>" for h in head) + f"</tr></thead><tbody>{cells}</tbody></table>"


def html_section(cmp: MfuComparison | None) -> str:
    """A ``<section id="mfu">`` for the HTML comparison ("" unless both sides have an MFU)."""
    if cmp is None:
        return ""
    peaks = "".join(f"<li>{html(line)}</li>" for line in peak_lines(cmp))
    classes = _html_table(("op class", "before", "after", "change", "GFLOP per step"), list(rows(cmp)))
    mods = module_rows(cmp)
    modules = _html_table(("nn.Module", "before", "after", "change", "while it runs", "GFLOP per step"),
                          list(mods)) if mods else ""
    note = f"<p>{html(cmp.modules_note)}</p>" if cmp.modules_note else ""
    return f'<section id="mfu"><h2>Model FLOPs utilisation</h2><ul>{peaks}</ul>{classes}{modules}{note}</section>'


def with_html_section(page: str, cmp: MfuComparison | None) -> str:
    """``page`` with the MFU section before its closing body tag."""
    section = html_section(cmp)
    if not section:
        return page
    at = page.rfind("</body>")
    return page[:at] + section + page[at:] if at >= 0 else page + section
