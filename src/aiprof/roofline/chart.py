"""The roofline chart as a self-contained SVG string (no plotting library): log-log axes, arithmetic
intensity (FLOP/byte) across, achieved FLOP/s up; the memory roof (bandwidth x intensity), compute roofs
(one per unit/dtype used by the ops shown), the ridge point, and one circle per op sized by its time.
A PNG is written only when cairosvg happens to be installed."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from aiprof.roofline.analysis import RooflineResult, RooflineRow, roof_for

WIDTH, HEIGHT = 760, 480
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 30, 50
COLOURS = {
    "compute-bound": "#1f77b4",
    "memory-bound": "#2ca02c",
    "latency-bound": "#d62728",
    "unknown-peaks": "#7f7f7f",
}


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:g}{prefix}{unit}"
    return f"{value:g}{unit}"


class _Axes:
    def __init__(self, x_lo: float, x_hi: float, y_lo: float, y_hi: float) -> None:
        self.x_lo, self.x_hi = math.floor(math.log10(x_lo)), math.ceil(math.log10(x_hi))
        self.y_lo, self.y_hi = math.floor(math.log10(y_lo)), math.ceil(math.log10(y_hi))
        self.x_hi = max(self.x_hi, self.x_lo + 1)
        self.y_hi = max(self.y_hi, self.y_lo + 1)

    def x(self, value: float) -> float:
        frac = (math.log10(value) - self.x_lo) / (self.x_hi - self.x_lo)
        return LEFT + frac * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        frac = (math.log10(value) - self.y_lo) / (self.y_hi - self.y_lo)
        return HEIGHT - BOTTOM - frac * (HEIGHT - TOP - BOTTOM)


def _points(result: RooflineResult, limit: int) -> list[RooflineRow]:
    """The rows drawn: measurements against a roof (no no-ops, nothing above its roof: ``RooflineRow.drawn``)."""
    rows = [r for r in result.rows if r.drawn]
    return sorted(rows, key=lambda r: -r.time_ns)[:limit]


def render_svg(result: RooflineResult, *, limit: int = 200, title: str = "Roofline") -> str:
    """The chart as an SVG document. Works without peaks too (points only, no roofs)."""
    points = _points(result, limit)
    peaks = result.peaks
    roofs: dict[str, float] = {}
    if peaks is not None:
        for row in points:
            roof = roof_for(row, peaks)
            if roof is not None:
                roofs[roof[1]] = roof[0]
    xs = [r.flops / r.bytes for r in points] or [1.0]
    ys = [r.flops / (r.time_ns * 1e-9) for r in points] or [1e9]
    bw = peaks.memory_bw_bytes_per_s if peaks is not None else 0.0
    top = max([*ys, *roofs.values()]) * 2
    ridge_xs = [p / bw for p in roofs.values()] if bw else []
    axes = _Axes(min([*xs, *ridge_xs, 1.0]) / 2, max([*xs, *ridge_xs]) * 2, min(ys) / 2, top)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    parts += _grid(axes)
    parts += _roofs(axes, roofs, bw)
    total = max((r.time_ns for r in points), default=1)
    for row in points:
        parts.append(_point(axes, row, total))
    parts += _legend(peaks.name if peaks is not None else result.peaks_note)
    parts.append("</svg>")
    return "\n".join(parts)


def _grid(axes: _Axes) -> list[str]:
    out = []
    x0, x1 = axes.x(10.0**axes.x_lo), axes.x(10.0**axes.x_hi)
    y0, y1 = axes.y(10.0**axes.y_lo), axes.y(10.0**axes.y_hi)
    for e in range(axes.x_lo, axes.x_hi + 1):
        x = axes.x(10.0**e)
        out.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{y0 + 14:.1f}" text-anchor="middle">{_si(10.0**e, "")}</text>')
    for e in range(axes.y_lo, axes.y_hi + 1):
        y = axes.y(10.0**e)
        out.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 4:.1f}" y="{y + 4:.1f}" text-anchor="end">{_si(10.0**e, "")}</text>')
    out.append(f'<rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{y0 - y1:.1f}" fill="none" '
               'stroke="#333"/>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{HEIGHT - 12}" text-anchor="middle">'
               "arithmetic intensity (FLOP/byte)</text>")
    out.append(f'<text transform="translate(16,{(y0 + y1) / 2:.1f}) rotate(-90)" text-anchor="middle">'
               "achieved FLOP/s</text>")
    return out


def _roofs(axes: _Axes, roofs: dict[str, float], bw: float) -> list[str]:
    if not bw:
        return []
    out = []
    x_lo, x_hi = 10.0**axes.x_lo, 10.0**axes.x_hi
    y_bottom = 10.0**axes.y_lo
    for key, peak in sorted(roofs.items(), key=lambda kv: -kv[1]):
        ridge = peak / bw
        x_start = max(x_lo, y_bottom / bw)
        xa, ya = axes.x(x_start), axes.y(max(bw * x_start, y_bottom))
        xr, yr = axes.x(min(ridge, x_hi)), axes.y(min(peak, bw * x_hi))
        out.append(f'<line x1="{xa:.1f}" y1="{ya:.1f}" x2="{xr:.1f}" y2="{yr:.1f}" stroke="#444" '
                   'stroke-width="1.5"/>')
        if ridge < x_hi:
            out.append(f'<line x1="{xr:.1f}" y1="{yr:.1f}" x2="{axes.x(x_hi):.1f}" y2="{yr:.1f}" stroke="#444" '
                       'stroke-width="1.5"/>')
            out.append(f'<circle cx="{xr:.1f}" cy="{yr:.1f}" r="3" fill="#444"><title>ridge {ridge:.1f} FLOP/B'
                       "</title></circle>")
            out.append(f'<text x="{axes.x(x_hi) + 4:.1f}" y="{yr + 4:.1f}">{escape(key)} {_si(peak, "FLOP/s")}'
                       "</text>")
            out.append(f'<text x="{xr:.1f}" y="{yr - 6:.1f}" text-anchor="middle" fill="#444">ridge '
                       f"{ridge:.0f}</text>")
    out.append(f'<text x="{axes.x(x_lo) + 6:.1f}" y="{axes.y(max(bw * x_lo, y_bottom)) - 6:.1f}" fill="#444">'
               f'{_si(bw, "B/s")}</text>')
    return out


def _point(axes: _Axes, row: RooflineRow, largest: int) -> str:
    x = axes.x(row.flops / row.bytes)
    y = axes.y(row.flops / (row.time_ns * 1e-9))
    radius = 3 + 14 * math.sqrt(row.time_ns / largest)
    colour = COLOURS.get(row.bound, "#7f7f7f")
    pct = f", {row.pct_of_roof:.0f}% of roof" if row.pct_of_roof is not None else ""
    tip = f"{row.name} {row.input_dims} x{row.count}: {row.time_ns / 1e3:.1f} us, {row.bound}{pct}"
    return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{colour}" fill-opacity="0.55" '
            f'stroke="{colour}"><title>{escape(tip)}</title></circle>')


def _legend(device: str) -> list[str]:
    x = WIDTH - RIGHT + 10
    out = [f'<text x="{x}" y="{TOP + 110}" font-weight="bold">{escape(device[:28])}</text>']
    for i, (label, colour) in enumerate(COLOURS.items()):
        y = TOP + 130 + 16 * i
        out.append(f'<circle cx="{x + 5}" cy="{y - 4}" r="5" fill="{colour}" fill-opacity="0.55"/>')
        out.append(f'<text x="{x + 15}" y="{y}">{label}</text>')
    out.append(f'<text x="{x}" y="{TOP + 210}" fill="#666">circle area ~ time</text>')
    return out


def write_chart(result: RooflineResult, path: Path, *, title: str = "Roofline") -> Path:
    """Write the chart; ``.png`` needs cairosvg (an optional extra), anything else gets SVG."""
    svg = render_svg(result, title=title)
    if path.suffix.lower() == ".png":
        try:
            import cairosvg  # type: ignore[import-not-found]
        except ImportError as err:
            from aiprof.errors import AiprofError

            raise AiprofError("PNG output needs cairosvg (pip install cairosvg): write .svg instead") from err
        cairosvg.svg2png(bytestring=svg.encode(), write_to=str(path))
        return path
    path.write_text(svg, encoding="utf-8")
    return path
