"""The one roofline chart, as a self-contained SVG string (no plotting library, no script): log-log axes,
arithmetic intensity (FLOP/byte) across, achieved FLOP/s up; the memory roof and the compute roofs of the
units the ops use (equal roofs share one line), and one circle per op sized by its time.

It draws from the ``roofline`` section of the report (:class:`~aiprof.roofline.section.RooflineSection`), so the HTML report
(``chart_svg``, styled by the page's CSS classes and themes) and ``aiprof roofline --chart`` (``render_svg``
/ ``write_chart``: a standalone file with its own light style and a title) show the same picture. Every
string from a trace is escaped. A PNG is written only when cairosvg happens to be installed.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from aiprof.fsutil import GENERATOR_COMMENT
from aiprof.roofline.analysis import RooflineResult
from aiprof.roofline.section import RooflineRowRecord, RooflineSection

W, H, L, R, T, B = 760, 420, 70, 40, 20, 44
CLASSES = ("compute-bound", "memory-bound", "latency-bound")

# The standalone file has no page around it: the classes the HTML report styles, styled here.
_STANDALONE_STYLE = (
    "text{font:11px sans-serif;fill:#1d1d1f}.grid{stroke:#e4e4e4}.axis{stroke:#666;fill:none}"
    ".roofline{stroke:#1d1d1f;stroke-width:1.5;fill:none}.pt{fill-opacity:.55;stroke-width:1}"
    ".compute-bound{fill:#1f77b4;stroke:#1f77b4}.memory-bound{fill:#2ca02c;stroke:#2ca02c}"
    ".latency-bound{fill:#d62728;stroke:#d62728}.other{fill:#7f7f7f;stroke:#7f7f7f}"
)
_LEGEND_VARS = (("compute-bound", "--ln0"), ("memory-bound", "--ln2"), ("latency-bound", "--high"), ("other", "--mute"))


def _si(value: float) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:g}{prefix}"
    return f"{value:g}"


def _points(roof: RooflineSection, limit: int) -> list[tuple[RooflineRowRecord, float, float]]:
    """The rows drawn, each with its arithmetic intensity and achieved FLOP/s: measurements against a roof
    (no no-ops, nothing above its roof), longest first."""
    pts = [
        (r, float(r.arithmetic_intensity_flops_per_byte), float(r.achieved_flops_per_s))
        for r in roof.rows
        if r.drawn
        and r.arithmetic_intensity_flops_per_byte is not None
        and r.achieved_flops_per_s is not None
        and r.arithmetic_intensity_flops_per_byte > 0
        and r.achieved_flops_per_s > 0
    ]
    return sorted(pts, key=lambda p: -p[0].time_ns)[:limit]


def _roofs(roof: RooflineSection, pts: list[RooflineRowRecord]) -> tuple[float, dict[str, float]]:
    """Memory bandwidth and the compute roofs the drawn ops use (keys of equal peaks joined)."""
    peaks = roof.peaks
    bw = float(peaks.memory_bw_bytes_per_s or 0) if peaks else 0.0
    flops = peaks.flops_per_s if peaks else {}
    used = {str(r.roof_key) for r in pts if r.roof_key}
    by_peak: dict[float, list[str]] = {}
    for k, v in flops.items():
        if k in used and v:
            by_peak.setdefault(float(v), []).append(str(k))
    return bw, {" / ".join(sorted(keys)): peak for peak, keys in by_peak.items()}


def chart_svg(roof: RooflineSection, limit: int = 150, *, standalone: bool = False, title: str = "") -> str:
    """The chart of a ``roofline`` section; "" when no op is modelled. ``standalone`` makes a file of it
    (namespace, size, its own style, ``title`` on top) instead of an element of the HTML report."""
    drawn = _points(roof, limit)
    if not drawn:
        return ""
    pts = [r for r, _, _ in drawn]
    bw, roofs = _roofs(roof, pts)
    xs = [x for _, x, _ in drawn]
    ys = [y for _, _, y in drawn]
    ridge = [p / bw for p in roofs.values()] if bw else []
    x_lo = math.floor(math.log10(min(xs + ridge) / 2))
    x_hi = max(math.ceil(math.log10(max(xs + ridge) * 2)), x_lo + 1)
    y_lo = math.floor(math.log10(min(ys) / 2))
    y_hi = max(math.ceil(math.log10(max(ys + list(roofs.values())) * 2)), y_lo + 1)
    pw, ph = W - L - R, H - T - B

    def px(v: float) -> float:
        return L + pw * (math.log10(v) - x_lo) / (x_hi - x_lo)

    def py(v: float) -> float:
        return T + ph * (1 - (math.log10(v) - y_lo) / (y_hi - y_lo))

    top = 24 if standalone and title else 0
    if standalone:
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + top}" viewBox="0 {-top} {W} {H + top}" '
            f'class="chart roof"><style>{_STANDALONE_STYLE}</style>',
            f'<rect x="0" y="{-top}" width="{W}" height="{H + top}" fill="white"/>',
        ]
        if title:
            out.append(f'<text x="{L}" y="-6" font-weight="bold">{escape(title)}</text>')
    else:
        out = [f'<svg class="chart roof" viewBox="0 0 {W} {H}" role="img" width="100%">']
    for e in range(x_lo, x_hi + 1):
        out.append(f'<line class="grid" x1="{px(10.0**e):.1f}" x2="{px(10.0**e):.1f}" y1="{T}" y2="{T + ph}"/>')
        out.append(f'<text class="lbl" x="{px(10.0**e):.1f}" y="{T + ph + 14}" text-anchor="middle">{_si(10.0**e)}</text>')
    for e in range(y_lo, y_hi + 1):
        out.append(f'<line class="grid" x1="{L}" x2="{L + pw}" y1="{py(10.0**e):.1f}" y2="{py(10.0**e):.1f}"/>')
        out.append(f'<text class="lbl" x="{L - 4}" y="{py(10.0**e) + 4:.1f}" text-anchor="end">{_si(10.0**e)}</text>')
    out.append(f'<rect class="axis" x="{L}" y="{T}" width="{pw}" height="{ph}"/>')
    out.append(f'<text class="lbl" x="{L + pw / 2}" y="{H - 8}" text-anchor="middle">arithmetic intensity (FLOP/byte)</text>')
    out.append(f'<text class="lbl" transform="translate(14,{T + ph / 2}) rotate(-90)" text-anchor="middle">achieved FLOP/s</text>')
    lo_x, hi_x = 10.0**x_lo, 10.0**x_hi
    for key, peak in sorted(roofs.items(), key=lambda kv: -kv[1]):
        knee = min(max(peak / bw, lo_x), hi_x)
        start = max(lo_x, 10.0**y_lo / bw)
        out.append(
            f'<path class="roofline" d="M{px(start):.1f} {py(bw * start):.1f}L{px(knee):.1f} {py(min(bw * knee, peak)):.1f}'
            f'L{px(hi_x):.1f} {py(peak):.1f}"><title>{escape(key)}: {escape(_si(peak))}FLOP/s, ridge {peak / bw:.1f} FLOP/B</title></path>'
        )
        out.append(f'<text class="lbl" x="{px(hi_x) - 4:.1f}" y="{py(peak) - 4:.1f}" text-anchor="end">{escape(key)} {escape(_si(peak))}FLOP/s</text>')
    largest = max(float(r.time_ns or 1) for r in pts)
    for r, x, y in zip(pts, xs, ys):
        radius = 2.5 + 12 * math.sqrt(float(r.time_ns) / largest)
        bound = r.bound
        cls = bound if bound in CLASSES else "other"
        tip = f"{r.name} {r.input_dims or ''} ×{r.count}: {_ms(float(r.time_ns))}, {bound}"
        out.append(f'<circle class="pt {cls}" cx="{px(x):.1f}" cy="{py(y):.1f}" r="{radius:.1f}"><title>{escape(tip)}</title></circle>')
    device = roof.peaks.name if roof.peaks else roof.device_name
    if standalone:
        out.append(f'<text x="{L + 6}" y="{T + 14}">{escape(str(device or roof.peaks_note or ""))[:60]} · circle area ~ time</text>')
        out.append("</svg>")
        return "\n".join(out)
    out.append("</svg>")
    legend = "".join(f'<span><i class="sw" style="background:var({v})"></i>{k}</span>' for k, v in _LEGEND_VARS)
    return (
        "".join(out)
        + f'<div class="legend">{legend}<span>circle area ~ time</span>'
        + (f"<span>peaks: {escape(str(device))}</span>" if device else "")
        + "</div>"
    )


def _ms(ns: float) -> str:
    """As the reports write durations (``report.common.fmt_ms``, which this layer does not import)."""
    ms = ns / 1e6
    if abs(ms) >= 100:
        return f"{ms:,.0f} ms"
    return f"{ms:.1f} ms" if abs(ms) >= 1 else f"{ns / 1e3:.1f} µs"


def render_svg(result: RooflineResult, *, limit: int = 200, title: str = "Roofline") -> str:
    """The chart of ``result`` as an SVG document (empty axes-free file when no op is modelled)."""
    return GENERATOR_COMMENT + (chart_svg(result.section(), limit, standalone=True, title=title) or (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="40"><text x="10" y="24">'
        f"{escape(title)}: no modelled op to draw</text></svg>"
    ))


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
