"""Terminal rendering of a roofline result: the peaks used, then the top ops by time with their class and
% of roof. Rich table on a TTY (fits 80 columns), plain text otherwise.

Op names, notes and device names come from traces: every line passes through ``report.escape.terminal``
(no control character reaches the terminal) and the rich table gets them as ``Text``, never as markup."""

from __future__ import annotations

import io
import json
from collections import Counter

from aiprof.report.escape import terminal
from aiprof.roofline.analysis import RooflineResult, RooflineRow

SHORT_BOUND = {
    "compute-bound": "compute",
    "memory-bound": "memory",
    "latency-bound": "latency",
    "unmodelled": "unmodelled",
    "unknown-peaks": "no peaks",
    "no-op": "no-op",
    "above-roof": "above roof",
}


LABEL_WIDTH = 36  # the op column: the table fits 80 columns


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _op_label(row: RooflineRow, width: int) -> str:
    """``name shape×shape`` with the non-tensor (empty) inputs left out."""
    name = row.name[6:] if row.name.startswith("aten::") else row.name
    try:
        dims = json.loads(row.input_dims) if row.input_dims else []
    except ValueError:
        dims = []
    shapes = [json.dumps(d, separators=(",", ":")) for d in dims if isinstance(d, list) and d]
    return _shorten(f"{name} {'·'.join(shapes)}" if shapes else name, width)


def _fmt_rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= factor:
            return f"{value / factor:.1f}{prefix}{unit}"
    return f"{value:.0f}{unit}"


def header_lines(result: RooflineResult) -> list[str]:
    lines = [f"Roofline ({'GPU kernel time' if result.mode == 'gpu' else 'CPU self time'}), "
             f"{result.total_time_ns / 1e6:.2f} ms over {result.instance_count} op calls"]
    lines.append(f"Peaks: {result.peaks_note}")
    key = main_roof_key(result)
    if result.peaks is not None and key is not None and result.peaks.memory_bw_bytes_per_s:
        bw = result.peaks.memory_bw_bytes_per_s
        peak = result.peaks.flops_per_s[key]
        lines.append(f"  memory {_fmt_rate(bw, 'B/s')}; {key} {_fmt_rate(peak, 'FLOP/s')}, ridge {peak / bw:.0f} FLOP/B")
    modelled = result.modelled_time_ns / result.total_time_ns * 100 if result.total_time_ns else 0.0
    lines.append(f"Modelled: {modelled:.1f}% of time")
    mix = dtype_line(result)
    if mix:
        lines.append(mix)
    legend = []
    if any(r.dtype_assumed for r in result.rows):
        legend.append("* dtype assumed (not in the trace)")
    if any(r.bound == "above-roof" for r in result.rows):
        legend.append("! above roof: not drawn")
    if legend:
        lines.append("; ".join(legend))
    lines += [f"Note: {n}" for n in result.notes]
    return [terminal(line) for line in lines]


def dtype_line(result: RooflineResult) -> str:
    """``Time by dtype: fp64 74.1%, fp32 20.0%`` over the modelled rows (empty with one dtype or none)."""
    by = result.time_ns_by_dtype()
    if not result.total_time_ns or not by or set(by) == {"fp32"}:
        return ""
    parts = [f"{d} {t / result.total_time_ns * 100:.1f}%" for d, t in by.items()]
    return "Time by dtype: " + ", ".join(parts)


def main_roof_key(result: RooflineResult) -> str | None:
    """The matrix roof most modelled time is measured against (the vector one if no matrix work)."""
    time_by_key: Counter[str] = Counter()
    for row in result.rows:
        if row.roof_key is not None and result.peaks is not None and row.roof_key in result.peaks.flops_per_s:
            time_by_key[row.roof_key] += row.time_ns
    matrix = [k for k, _ in time_by_key.most_common() if k.startswith("matrix")]
    return matrix[0] if matrix else (time_by_key.most_common(1)[0][0] if time_by_key else None)


def table_rows(result: RooflineResult, top: int) -> list[tuple[str, str, str, str, str, str]]:
    out = []
    for row in result.rows[:top]:
        pct = f"{row.pct_of_roof:.0f}%" if row.pct_of_roof is not None else "-"
        flags = ("*" if row.dtype_assumed else "") + ("!" if row.bound == "above-roof" else "")
        out.append((
            terminal(_op_label(row, LABEL_WIDTH - len(flags))) + flags,
            row.dtype or "-",
            f"{row.time_ns / 1e3:,.0f}",
            f"{result.share(row) * 100:.1f}",
            SHORT_BOUND.get(row.bound, row.bound),
            pct,
        ))
    return out


def render_plain(result: RooflineResult, top: int = 15) -> str:
    lines = header_lines(result)
    lines.append("")
    lines.append(f"{'op and input shapes':{LABEL_WIDTH}} {'dtype':>5} {'time us':>10} {'%':>5} {'bound':>10} {'roof':>6}")
    for label, dtype, t, share, bound, pct in table_rows(result, top):
        lines.append(f"{label:{LABEL_WIDTH}} {dtype:>5} {t:>10} {share:>5} {bound:>10} {pct:>6}")
    unmodelled = result.unmodelled
    if unmodelled:
        total = sum(r.time_ns for r in unmodelled)
        unmodelled_pct = total / result.total_time_ns * 100 if result.total_time_ns else 0.0
        names = ", ".join(sorted({r.name for r in unmodelled})[:4])
        lines.append("")
        lines.append(_shorten(terminal(f"Unmodelled: {unmodelled_pct:.1f}% of time ({names})"), 80))
    return "\n".join(lines) + "\n"


def render_rich(result: RooflineResult, top: int = 15, width: int = 80) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=width, record=True, file=io.StringIO(), emoji=False)
    for line in header_lines(result):
        console.print(line, highlight=False, markup=False)
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("op and input shapes", overflow="ellipsis", no_wrap=True, max_width=LABEL_WIDTH)
    table.add_column("dtype")
    table.add_column("time µs", justify="right")
    table.add_column("%", justify="right")
    table.add_column("bound")
    table.add_column("roof", justify="right")
    styles = {"compute": "blue", "memory": "green", "latency": "red"}
    for label, dtype, t, share, bound, pct in table_rows(result, top):
        table.add_row(Text(label), dtype, t, share, Text(bound, style=styles.get(bound, "dim")), pct)
    console.print(table)
    if result.unmodelled:
        total = sum(r.time_ns for r in result.unmodelled)
        unmodelled_pct = total / result.total_time_ns * 100 if result.total_time_ns else 0.0
        console.print(f"Unmodelled: {unmodelled_pct:.1f}% of time", highlight=False, markup=False)
    return console.export_text(styles=True)
