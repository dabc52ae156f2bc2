"""The torch.compile section of the report, in each format: how much of the run went into compiling, how
many compilations (and recompilations, with their causes), the compiled graphs and the guard checks.

Reads the focus rank's ``compile`` section (:func:`aiprof.analysis.compile.compile_section`). Nothing is
shown for a trace without torch.compile. Strings from the trace (compile ids, what changed) are escaped
for their sink.
"""

from __future__ import annotations

from collections import Counter

from aiprof.analysis.compile import CompileReport
from aiprof.report import common
from aiprof.report.common import fmt_ms
from aiprof.report.escape import html as _html
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import RankReport, Report

TOP_EVENTS = 12


def html(text: object) -> str:
    return _html(terminal(text))


def _section(doc: Report) -> tuple[RankReport, CompileReport] | None:
    """The focus rank's compile section when it compiled or ran compiled code, else the first rank's that did."""
    focus = common.focus_rank(doc)
    for rank in [focus, *doc.ranks]:
        sec = rank.compile
        if sec and sec.compiled:
            return rank, sec
    return None


def summary(sec: CompileReport) -> str:
    """One sentence: compile time, compilations and recompilations by cause, compiled-graph calls."""
    return "; ".join(summary_parts(sec))


def summary_parts(sec: CompileReport) -> list[str]:
    """The summary's clauses (the terminal prints one per line)."""
    compiles, recompiles = sec.compiles or 0, sec.recompiles or 0
    causes = Counter(e.cause for e in sec.events or [] if e.recompile)
    why = ", ".join(f"{n} {cause}" for cause, n in causes.most_common())
    parts = [f"{fmt_ms(sec.compile_ns or 0)} compiling in {compiles} compilation{'s' * (compiles != 1)}"
             if compiles else "no compilation in the trace"]
    if recompiles:
        parts.append(f"{recompiles} recompilation{'s' * (recompiles != 1)}" + (f" ({why})" if why else ""))
    if sec.regions and sec.regions.calls:
        parts.append(f"{sec.regions.calls:,} compiled-graph calls ({fmt_ms(sec.regions.total_ns)})")
    if sec.cache_lookups and sec.cache_lookups.calls:
        parts.append(f"{sec.cache_lookups.calls:,} guard checks ({fmt_ms(sec.cache_lookups.total_ns)})")
    graphs = sec.cuda_graphs
    if graphs and (graphs.graph_replays or graphs.captures):
        steps = max(len(graphs.steps), 1)
        text = (f"CUDA graphs: {graphs.graph_replays / steps:,.1f} replays and "
                f"{graphs.eager_launches / steps:,.1f} eager kernel launches per step "
                f"({100 * graphs.replay_share:.0f}% of launches replayed)")
        if graphs.recaptured_steps:
            text += (f", graphs captured again in {graphs.recaptured_steps} later step(s): CUDA graphs "
                     "re-recorded (reduce-overhead with new shapes or inputs)")
        parts.append(text)
    kernels = sec.kernels
    if kernels and kernels.kernel_names:
        parts.append(f"{kernels.kernel_names:,} Inductor kernels ({fmt_ms(kernels.gpu_ns)} "
                     f"on the device, {100 * kernels.attributed_share:.0f}% with fused ops known)")
    return parts


def kernel_rows(sec: CompileReport) -> list[list[str]]:
    """The compiled kernels with the most device time: name, kind, the ATen ops fused, time."""
    kernels = sec.kernels.kernels if sec.kernels else []
    return [[k.name, k.kind or "?", ", ".join(k.ops) or "unknown", fmt_ms(k.gpu_ns)] for k in kernels[:TOP_EVENTS]]


_KERNEL_HEAD = ["compiled kernel", "kind", "fused ATen ops", "device time"]


def _rows(sec: CompileReport) -> list[list[str]]:
    events = sorted(sec.events or [], key=lambda e: -e.dur_ns)[:TOP_EVENTS]
    return [[e.compile_id or "?", fmt_ms(e.dur_ns), e.cause, e.detail] for e in events]


_HEAD = ["compile id", "time", "cause", "what changed"]


def mfu_line(doc: Report) -> str:
    """The focus rank's MFU sentence ('' when it has none)."""
    from aiprof.roofline.mfu import mfu_text

    sec = common.focus_rank(doc).mfu
    return mfu_text(sec) if sec else ""


def mfu_details(doc: Report) -> list[str]:
    """The focus rank's MFU per op class and per module, one line each ([] when it has no MFU)."""
    from aiprof.roofline.mfu import mfu_detail_lines

    sec = common.focus_rank(doc).mfu
    return mfu_detail_lines(sec) if sec else []


def terminal_lines(doc: Report) -> list[str]:
    from aiprof.report import attention_section

    line = mfu_line(doc)
    details = [terminal(f"  {d}") for d in mfu_details(doc)]
    return ([terminal(line), *details, ""] if line else []) + attention_section.terminal_lines(doc) + _compile_terminal_lines(doc)


def _compile_terminal_lines(doc: Report) -> list[str]:
    found = _section(doc)
    if found is None:
        return []
    _, sec = found
    out = ["torch.compile", *(f"  {part}" for part in summary_parts(sec))]
    for cid, dur, cause, detail in _rows(sec):
        out.append(f"  {dur:>9}  {cid:<8} {cause}" + (f": {detail}" if detail else ""))
    for name, _, ops, dur in kernel_rows(sec)[:5]:
        out.append(f"  {dur:>9}  {_clip(name, 40)} = {ops}")
    out.append("")
    return [terminal(line) for line in out]


def markdown_lines(doc: Report) -> list[str]:
    from aiprof.report import attention_section

    line = mfu_line(doc)
    details = [f"- {markdown(d)}" for d in mfu_details(doc)]
    return ((["", markdown(line) + ".", *([""] + details if details else [])] if line else [])
            + attention_section.markdown_lines(doc) + _compile_markdown_lines(doc))


def _compile_markdown_lines(doc: Report) -> list[str]:
    found = _section(doc)
    if found is None:
        return []
    _, sec = found
    out = ["", "### torch.compile", "", markdown(summary(sec)) + "."]
    rows = _rows(sec)
    if rows:
        out += ["", "| " + " | ".join(_HEAD) + " |", "|---|---:|---|---|"]
        out += ["| " + " | ".join(markdown(cell) for cell in row) + " |" for row in rows]
    kernels = kernel_rows(sec)
    if kernels:
        out += ["", "| " + " | ".join(_KERNEL_HEAD) + " |", "|---|---|---|---:|"]
        out += ["| " + " | ".join(markdown(cell) for cell in row) + " |" for row in kernels]
    return out


def html_section(doc: Report) -> str:
    found = _section(doc)
    if found is None:
        return ""
    _, sec = found
    rows = "".join("<tr>" + "".join(f"<td>{html(cell)}</td>" for cell in row) + "</tr>" for row in _rows(sec))
    table = (f"<table><thead><tr>{''.join(f'<th>{h}</th>' for h in _HEAD)}</tr></thead><tbody>{rows}</tbody></table>"
             if rows else "")
    kernels = "".join("<tr>" + "".join(f"<td>{html(cell)}</td>" for cell in row) + "</tr>" for row in kernel_rows(sec))
    if kernels:
        table += (f"<table><thead><tr>{''.join(f'<th>{h}</th>' for h in _KERNEL_HEAD)}</tr></thead>"
                  f"<tbody>{kernels}</tbody></table>")
    return f"<p>{html(summary(sec))}.</p>{table}"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
