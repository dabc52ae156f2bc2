"""Hand-written inline SVG charts for the HTML report: no plotting library, no script, works offline.

Colours come from CSS classes (``b-compute`` …) so the light and dark themes restyle every chart.
Every label that comes from a trace goes through ``esc``; numbers are formatted here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from aiprof.report.common import fmt_ms
from aiprof.report.escape import html as esc


def _n(x: float) -> str:
    """Compact coordinates: two decimals, no trailing zeros."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


def stacked_rows(
    rows: Sequence[tuple[str, dict[str, float], float, str]],
    order: Sequence[str],
    width: int = 760,
    row_h: int = 20,
    label_w: int = 150,
    value_w: int = 80,
    names: Mapping[str, str] | None = None,
) -> str:
    """One horizontal stacked bar per row: (label, parts, row total, right-hand text).

    Bars share one scale (the largest total) so longer steps look longer. ``names`` renames parts in
    the tooltips (a CPU's ``compute`` is "CPU busy in ops")."""
    if not rows:
        return ""
    scale_max = max(total for _, _, total, _ in rows) or 1.0
    bar_w = width - label_w - value_w
    out = [f'<svg class="chart" viewBox="0 0 {width} {len(rows) * row_h + 4}" role="img" width="100%">']
    for i, (label, parts, total, right) in enumerate(rows):
        y = i * row_h + 2
        fit = int((label_w - 6) / CHAR_W)
        out.append(f'<text x="{label_w - 6}" y="{y + row_h * 0.65:.1f}" text-anchor="end" class="lbl">{esc(_clip(label, fit))}</text>')
        x = float(label_w)
        for key in order:
            value = parts.get(key, 0.0)
            if value <= 0:
                continue
            w = bar_w * value / scale_max
            out.append(
                f'<rect x="{_n(x)}" y="{y}" width="{_n(w)}" height="{row_h - 5}" class="b-{esc(key)}">'
                f"<title>{esc(label)}: {esc((names or {}).get(key, key))} {fmt_ms(value)} ({100 * value / max(total, 1):.1f}%)</title></rect>"
            )
            x += w
        fit = int((value_w - 6) / CHAR_W)
        out.append(f'<text x="{width - value_w + 6}" y="{y + row_h * 0.65:.1f}" class="lbl">{esc(_clip(right, fit))}</text>')
    out.append("</svg>")
    return "".join(out)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def occupancy_strip(
    series: Mapping[str, Sequence[int]],
    order: Sequence[str],
    bin_ns: int,
    marks: Sequence[float],
    label: str,
    width: int = 760,
    height: int = 46,
    label_w: int = 90,
) -> str:
    """Stacked columns per time bin: the share of each bin spent in each bucket (idle is the rest).

    ``marks`` are step boundaries as fractions of the span, drawn as thin lines."""
    bins = len(next(iter(series.values()), []))
    if bins == 0 or bin_ns <= 0:
        return ""
    plot_w = width - label_w
    bw = plot_w / bins
    out = [
        f'<svg class="chart strip" viewBox="0 0 {width} {height}" role="img" width="100%">',
        f'<text x="{label_w - 6}" y="{height / 2 + 4:.1f}" text-anchor="end" class="lbl">{esc(_clip(label, int((label_w - 6) / CHAR_W)))}</text>',
        f'<rect x="{label_w}" y="0" width="{plot_w}" height="{height}" class="b-idle-bg"><title>{esc(label)}</title></rect>',
    ]
    base = [0.0] * bins
    for key in order:
        values = series.get(key)
        if not values:
            continue
        path: list[str] = []
        for i, v in enumerate(values):
            if v <= 0:
                continue
            frac = min(v / bin_ns, 1.0)
            y1 = height * (1 - base[i])
            h = height * frac
            base[i] += frac
            path.append(f"M{_n(label_w + i * bw)} {_n(y1)}h{_n(bw)}v{_n(-h)}h{_n(-bw)}z")
        if path:
            out.append(f'<path d="{"".join(path)}" class="b-{esc(key)}"><title>{esc(key)}</title></path>')
    for m in marks:
        x = label_w + plot_w * m
        out.append(f'<line x1="{_n(x)}" x2="{_n(x)}" y1="0" y2="{height}" class="mark"/>')
    out.append("</svg>")
    return "".join(out)


def time_axis(span_ns: int, width: int = 760, label_w: int = 90, ticks: int = 6, right_w: int = 0) -> str:
    """Milliseconds from the start of the span, under the strips (``right_w``: a right-hand column they keep)."""
    if span_ns <= 0:
        return ""
    plot_w = width - label_w - right_w
    out = [f'<svg class="chart axis" viewBox="0 0 {width} 16" width="100%">']
    for i in range(ticks + 1):
        x = label_w + plot_w * i / ticks
        anchor = "start" if i == 0 else "end" if i == ticks else "middle"
        tick = fmt_ms(span_ns * i / ticks) if i else "0"
        out.append(f'<text x="{_n(x)}" y="12" text-anchor="{anchor}" class="lbl">{esc(tick)}</text>')
    out.append("</svg>")
    return "".join(out)


# Text metrics for laying out labels without a browser: the chart's font is 11 px (``.chart`` in the
# page's CSS), whose glyphs average about 6 px for the text charts print (digits, lower-case words, "%",
# "/", "·"); ``CHAR_W`` adds a margin, and labels are clipped to the room they have at that width.
# tests/report/test_telemetry_charts.py measures the real boxes in Chromium.
FONT_PX = 11
CHAR_W = 7.0
TITLE_H = 15  # the row above a line chart's plot that holds its title


def text_width(text: str) -> float:
    """``text``'s width in the chart font (px), with a margin: what the layout reserves for it."""
    return CHAR_W * len(text)


def line_chart(
    xs: Sequence[float],
    lines: Mapping[str, Sequence[float | None]],
    title: str,
    fmt: str,
    axis: str = "",
    width: int = 760,
    height: int = 60,
    label_w: int = 90,
    y_max: float | None = None,
) -> str:
    """Counters over the span: ``xs`` are fractions of the span in [0, 1] (samples outside it are not
    drawn and do not set the scale); ``None`` breaks a line. The y-axis is labelled: ``title`` and what
    the numbers are (``axis``, e.g. "% of one core") above the plot, 0 and the top of the scale in
    ``fmt``'s unit beside it. Every label fits inside the viewBox: none is cut at the edge."""
    inside = [i for i, x in enumerate(xs) if 0 <= x <= 1]
    values = [v for vs in lines.values() for i in inside if i < len(vs) and (v := vs[i]) is not None]
    if not values:
        return ""
    top = y_max if y_max is not None else _nice_top(max(values), fmt)
    plot_w = width - label_w
    y0 = TITLE_H
    heading = title + (f" ({axis})" if axis else "")
    out = [
        f'<svg class="chart line" viewBox="0 0 {width} {y0 + height + 4}" role="img" width="100%">',
        f'<text x="0" y="{FONT_PX}" class="lbl">{esc(_clip(heading, int(width / CHAR_W)))}</text>',
        f'<rect x="{label_w}" y="{y0}" width="{plot_w}" height="{height}" class="plot-bg"/>',
        f'<line x1="{label_w}" x2="{label_w}" y1="{y0}" y2="{y0 + height}" class="mark"/>',
    ]
    for value, y in ((top, y0 + FONT_PX - 2), (0.0, y0 + height)):  # baselines: the scale's top and 0
        tick = _clip(_fmt_value(value, fmt), int((label_w - 6) / CHAR_W))
        out.append(f'<text x="{label_w - 4}" y="{y}" text-anchor="end" class="lbl mute">{esc(tick)}</text>')
    for k, (name, vs) in enumerate(lines.items()):
        path: list[str] = []
        pen_up = True
        for x, v in zip(xs, vs):
            if v is None or not 0 <= x <= 1:
                pen_up = True
                continue
            px = label_w + plot_w * x
            py = y0 + height * (1 - max(0.0, min(v / top, 1.0)))
            path.append(f"{'M' if pen_up else 'L'}{_n(px)} {_n(py)}")
            pen_up = False
        if path:
            shown = [v for x, v in zip(xs, vs) if v is not None and 0 <= x <= 1]
            tip = f"{esc(name)} (peak {esc(_fmt_value(max(shown), fmt))} in the span)"
            out.append(f'<path d="{"".join(path)}" class="ln ln{k % 4}"><title>{tip}</title></path>')
    out.append("</svg>")
    return "".join(out)


def _nice_top(peak: float, fmt: str) -> float:
    """The top of a y scale: the peak rounded up to 1, 2 or 5 × a power of ten (100 % steps for shares
    of a core: 168 % reads as 200 %); bytes, shown in binary units, to 1, 2 or 5 × a power of 1024
    times 1, 10 or 100 (3.2 GiB reads as 5.00 GiB, not 4.66 GiB)."""
    if peak <= 0:
        return 1.0
    if fmt == "pct" and peak > 100:
        return 100.0 * -(-peak // 100)
    if fmt == "pct":
        return 100.0
    unit = 1024.0 ** min(4, int(math.log(peak, 1024))) if fmt == "bytes" and peak >= 1024 else 1.0
    peak /= unit
    return unit * _nice_decimal(peak)


def _nice_decimal(peak: float) -> float:
    scale = 10 ** math.floor(math.log10(peak))
    for step in (1, 2, 5, 10):
        if peak <= step * scale:
            return float(step * scale)
    return peak


def _fmt_value(v: float, fmt: str) -> str:
    if fmt == "pct":
        return f"{v:.0f}%"
    if fmt == "bytes":
        from aiprof.report.common import fmt_bytes

        return fmt_bytes(v)
    if fmt == "bytes_per_s":
        from aiprof.report.common import fmt_rate

        return fmt_rate(v)
    return f"{v:.1f}"


def waterfall(
    rows: Sequence[tuple[str, Sequence[tuple[str, int, int, str]], str]],
    span_ns: int,
    width: int = 760,
    row_h: int = 18,
    label_w: int = 110,
    value_w: int = 230,
) -> str:
    """One row per item on one shared time axis: (label, segments, right-hand text), each segment
    (class, start ns, end ns from the span's start, tooltip). A segment too short to see is drawn 1 px
    wide so it is never lost."""
    if not rows or span_ns <= 0:
        return ""
    plot_w = width - label_w - value_w
    out = [f'<svg class="chart waterfall" viewBox="0 0 {width} {len(rows) * row_h + 4}" role="img" width="100%">']
    for i, (label, segments, right) in enumerate(rows):
        y = i * row_h + 2
        out.append(f'<text x="{label_w - 6}" y="{y + row_h * 0.65:.1f}" text-anchor="end" class="lbl">'
                   f"{esc(_clip(label, int((label_w - 6) / CHAR_W)))}</text>")
        for cls, start, end, tip in segments:
            x = label_w + plot_w * max(start, 0) / span_ns
            w = max(plot_w * max(end - start, 0) / span_ns, 1.0)
            out.append(f'<rect x="{_n(x)}" y="{y}" width="{_n(w)}" height="{row_h - 5}" class="{esc(cls)}">'
                       f"<title>{esc(tip)}</title></rect>")
        out.append(f'<text x="{width - value_w + 6}" y="{y + row_h * 0.65:.1f}" class="lbl">'
                   f"{esc(_clip(right, int((value_w - 6) / CHAR_W)))}</text>")
    out.append("</svg>")
    return "".join(out)
