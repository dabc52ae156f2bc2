"""The whole-run section (``Report.whole_run``, :class:`aiprof.analysis.wholerun.WholeRun`) in each format:
one compact block in the terminal, a few lines in Markdown, an SVG chart of step time over the run in HTML
(the recorded window shaded, spikes marked, both axes labelled). Every number is formatted here; nothing
in this section comes from a trace's strings except file names, which are escaped per format.
"""

from __future__ import annotations

from aiprof.analysis.wholerun import WholeRun
from aiprof.report.common import fmt_ms, fmt_pct
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown as md
from aiprof.report.model import Report


def _section(doc: Report) -> WholeRun | None:
    return doc.whole_run if isinstance(doc.whole_run, WholeRun) else None


def _rate(value: float | None, unit: str) -> str | None:
    if value is None:
        return None
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {suffix}{unit}/s"
    return f"{value:.1f} {unit}/s"


def _steps_text(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    return f"{numbers[0]}" if len(numbers) == 1 else f"{numbers[0]}–{numbers[-1]}"


def summary_lines(w: WholeRun) -> list[str]:
    """The section as plain sentences (the terminal and Markdown both start from these)."""
    ranks = f" ({w.ranks} ranks: the slowest rank per step)" if w.ranks > 1 else ""
    lines = [
        f"{w.steps} steps timed ({w.first_step}–{w.last_step}){ranks}; "
        f"{len(w.warmup_steps)} warm-up step(s) {_steps_text(w.warmup_steps)} left out of the statistics"
        if w.warmup_steps
        else f"{w.steps} steps timed ({w.first_step}–{w.last_step}){ranks}; no warm-up step stands out",
        f"step time median {fmt_ms(w.median_ns)}, p90 {fmt_ms(w.p90_ns)}, p99 {fmt_ms(w.p99_ns)}, "
        f"mean {fmt_ms(w.mean_ns)} over {w.steady_steps} steady steps",
    ]
    rates = [r for r in (_rate(w.samples_per_s, "samples"), _rate(w.tokens_per_s, "tokens")) if r]
    if rates:
        per_step = f"{w.samples_per_step:g} samples" if w.samples_per_step is not None else ""
        if w.tokens_per_step is not None:
            per_step += (", " if per_step else "") + f"{w.tokens_per_step:g} tokens"
        lines.append("throughput " + ", ".join(rates) + (f" ({per_step} per step)" if per_step else ""))
    else:
        lines.append("throughput: the batches did not tell their size (no tensor in them)")
    lines.append(f"data-loader wait {fmt_pct(w.wait_share)} of the time (median {fmt_ms(w.wait_median_ns)} per step)")
    if w.one_time:
        by_cause: dict[str, list[str]] = {}
        for s in w.one_time:
            by_cause.setdefault(s.cause, []).append(f"{s.step} ({fmt_ms(s.duration_ns)}, {s.times_median:g}×)")
        listed = "; ".join(f"{cause}: step {', '.join(steps)}" for cause, steps in by_cause.items())
        lines.append(f"{len(w.one_time)} step(s) with a one-time cost left out of the statistics (not spikes of "
                     f"the script): {listed}")
    if w.spike_count:
        listed = ", ".join(f"{s.step} ({fmt_ms(s.duration_ns)}, {s.times_median:g}×)" for s in w.spikes[:6])
        more = f" and {w.spike_count - 6} more" if w.spike_count > 6 else ""
        lines.append(f"{w.spike_count} spike(s) above {fmt_ms(w.spike_threshold_ns)}: step {listed}{more}")
    else:
        lines.append(f"no spike (no steady step above {fmt_ms(w.spike_threshold_ns)})")
    if w.recorded is not None:
        lines.append(w.recorded.verdict)
    return lines


def terminal_lines(doc: Report) -> list[str]:
    """One compact block: a title and the sentences."""
    w = _section(doc)
    if w is None:
        return []
    return ["Whole run (every step aiprof run timed)"] + [f"  {line}" for line in summary_lines(w)]


def markdown_lines(doc: Report) -> list[str]:
    w = _section(doc)
    if w is None:
        return []
    return ["", "### Whole run", "", *(f"- {md(line)}" for line in summary_lines(w))]


def html_section(doc: Report) -> str:
    """The chart and the sentences, or empty when the report has no whole-run section."""
    w = _section(doc)
    if w is None:
        return ""
    items = "".join(f"<li>{esc(line)}</li>" for line in summary_lines(w))
    sources = ", ".join(w.sources[:4]) + (" …" if len(w.sources) > 4 else "")
    return (
        step_chart(w)
        + f"<ul>{items}</ul>"
        + f'<div class="mute">from {esc(sources)} (the loader\'s clock: wall time between step boundaries)</div>'
    )


def step_chart(w: WholeRun, width: int = 760, height: int = 180) -> str:
    """Step time (y, ms) over step number (x): the line of every step, the recorded window shaded, spikes as
    dots, the threshold dashed, axes labelled."""
    xs, ys = w.series_steps, w.series_ns
    if not xs:
        return ""
    left, right, top, bottom = 64, 12, 10, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    x0, x1 = xs[0], max(xs[-1], w.last_step)
    y_max = max(max(ys), max((s.duration_ns for s in w.spikes), default=0), w.spike_threshold_ns) * 1.05 or 1.0
    # A one-time step can be 1000x the median: the axis stops at 4x the threshold, its dot sits on the top edge.
    y_max = min(y_max, max(4 * w.spike_threshold_ns, max((s.duration_ns for s in w.spikes), default=0) * 1.05)) or 1.0

    def px(step: float) -> float:
        return left + plot_w * ((step - x0) / (x1 - x0) if x1 > x0 else 0.5)

    def py(ns: float) -> float:
        return top + plot_h * (1 - min(ns / y_max, 1.0))

    out = [
        f'<svg class="chart wholerun" viewBox="0 0 {width} {height}" role="img" width="100%" '
        f'aria-label="step time over the whole run">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="plot-bg"/>',
    ]
    rec = w.recorded
    if rec is not None and rec.steps:
        a, b = px(rec.steps[0] - 0.5), px(rec.steps[-1] + 0.5)
        a, b = max(a, left), min(b, left + plot_w)
        out.append(
            f'<rect x="{a:.1f}" y="{top}" width="{max(b - a, 2):.1f}" height="{plot_h}" class="b-communication" '
            f'fill-opacity="0.25"><title>recorded steps {esc(_steps_text(rec.steps))}</title></rect>'
        )
        out.append(f'<text x="{(a + b) / 2:.1f}" y="{top + 12}" text-anchor="middle" class="lbl">recorded</text>')
    if w.warmup_steps:
        b = px(w.warmup_steps[-1] + 0.5)
        out.append(f'<rect x="{left}" y="{top}" width="{max(b - left, 1):.1f}" height="{plot_h}" class="b-idle" '
                   f'fill-opacity="0.35"><title>warm-up steps {esc(_steps_text(w.warmup_steps))}</title></rect>')
    ty = py(w.spike_threshold_ns)
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{ty:.1f}" y2="{ty:.1f}" class="axis" '
               f'stroke="#888" fill="none" stroke-dasharray="4 3"><title>spike threshold {esc(fmt_ms(w.spike_threshold_ns))}</title></line>')
    path = "".join(f"{'M' if i == 0 else 'L'}{px(x):.1f} {py(y):.1f}" for i, (x, y) in enumerate(zip(xs, ys)))
    out.append(f'<path d="{path}" class="ln ln0" fill="none"><title>step time</title></path>')
    for s in w.one_time:
        out.append(f'<circle cx="{px(s.step):.1f}" cy="{py(s.duration_ns):.1f}" r="3.5" class="b-idle">'
                   f'<title>one-time: step {s.step}, {esc(fmt_ms(s.duration_ns))} ({s.times_median:g}× median): '
                   f'{esc(s.cause)}</title></circle>')
    for s in w.spikes:
        out.append(f'<circle cx="{px(s.step):.1f}" cy="{py(s.duration_ns):.1f}" r="3.5" class="b-host">'
                   f'<title>spike: step {s.step}, {esc(fmt_ms(s.duration_ns))} ({s.times_median:g}× median)</title></circle>')
    # axes: y in ms (0, half, max), x in step numbers (first, middle, last)
    out.append(f'<path d="M{left} {top}V{top + plot_h}H{left + plot_w}" class="axis" stroke="#888" fill="none"/>')
    for frac in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - frac)
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="lbl mute">{esc(fmt_ms(y_max * frac) if frac else "0")}</text>')
    for step in sorted({x0, (x0 + x1) // 2, x1}):
        out.append(f'<text x="{px(step):.1f}" y="{top + plot_h + 14}" text-anchor="middle" class="lbl mute">{step}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 3}" text-anchor="middle" class="lbl">step number</text>')
    out.append(f'<text x="12" y="{top + plot_h / 2:.1f}" text-anchor="middle" class="lbl" '
               f'transform="rotate(-90 12 {top + plot_h / 2:.1f})">step time</text>')
    out.append("</svg>")
    return "".join(out)
