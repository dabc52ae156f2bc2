"""Markdown renderer: the summary, for pasting into a pull request or an issue.

Every string from a trace goes through ``report.escape.markdown`` (no table break, heading, link, image,
raw HTML or @mention can come from a name); the per-rank table shows the first and last ranks of a large
run and one aggregate line for the rest (``common.cap_rows``).
"""

from __future__ import annotations


from aiprof.analysis.timeline import IDLE_CAUSES
from aiprof.report import common
from aiprof.report.common import fmt_ms
from aiprof.report.document import mean_per_step
from aiprof.report.escape import markdown as _cell
from aiprof.report.escape import markdown_code_line as _cell_code
from aiprof.report.memory_section import markdown_lines as memory_lines
from aiprof.report.arrival_section import markdown_lines as arrival_lines
from aiprof.report.exposure_section import markdown_lines as exposure_lines
from aiprof.report.inference_section import markdown_lines as inference_lines
from aiprof.report.replay_section import markdown_lines as replay_lines
from aiprof.report.wholerun_section import markdown_lines as whole_run_lines
from aiprof.report.compile_section import markdown_lines as compile_lines
from aiprof.report.modules_section import markdown_lines as modules_lines
from aiprof.report.stacks_section import markdown_lines as stacks_lines
from aiprof.report.health_section import markdown_lines as health_lines
from aiprof.report.model import RankReport, Report


class MarkdownRenderer:
    def render(self, doc: Report) -> str:
        s = doc.summary
        lines = [f"## aiprof: {s.rank_count} rank(s), {s.step_count} step(s)", ""]
        if doc.run_status:  # a crashed or incomplete run says so first (report.runstatus)
            lines += [f"> **⚠ {_cell(doc.run_status.banner)}**", ""]
        lines.append(
            f"Median step **{fmt_ms(s.median_step_ns)}**, "
            f"{common.util_label(doc)} "
            f"**{100 * s.gpu_utilization:.1f}%**"
            + (f", slowest rank {s.slowest_rank}" if s.rank_count > 1 else "")
            + "."
        )
        partial = common.partial_note(doc)
        if partial:
            lines += ["", f"> **{_cell(partial)}**"]
        failed = common.failed_note(doc)
        if failed:
            lines += ["", f"> **{_cell(failed)}**"]
        kind = common.capture_note(doc)
        if kind:
            lines += ["", f"> {_cell(kind)}"]
        lines += ["", *health_lines(doc)]  # what the trace cannot show, first (report.health_section)
        lines.append("")
        buckets = common.buckets(doc)
        heads = [common.per_step(common.bucket_label(doc, b)) for b in buckets]
        lines.append("| rank | device | median step | " + " | ".join(heads) + f" | {common.top_cause_label(doc)} /step |")
        lines.append("|---:|---|---:|" + "---:|" * len(buckets) + "---|")
        capped = common.cap_ranks(doc)
        lines += [_rank_row(r, buckets) for r in capped.head]
        if capped.hidden:
            lines.append("| … | " + _cell(common.hidden_ranks_text(capped.hidden)) + " |" + " |" * (len(buckets) + 2))
        lines += [_rank_row(r, buckets) for r in capped.tail]
        lines += whole_run_lines(doc)  # every step of an `aiprof run` (report.wholerun_section)
        lines += arrival_lines(doc)  # who arrives last at the collectives (report.arrival_section)
        lines += exposure_lines(doc)  # exposed vs hidden communication per phase and group (report.exposure_section)
        lines += inference_lines(doc)  # prefill / decode phases, TTFT / ITL (report.inference_section)
        lines += replay_lines(doc)  # graph replays attributed with their capture (report.replay_section)
        lines += _findings(doc)
        lines += memory_lines(doc)
        lines += host_time_lines(doc)
        lines += _top_tables(common.focus_rank(doc), len(doc.ranks) > 1)
        notes = common.notes(doc)
        if notes:
            lines += ["", "Notes:", ""] + [f"- {_cell(n)}" for n in notes]
        lines += ["", f"<sub>{_cell(doc.generator)}, report schema {_cell(doc.schema_version)}</sub>", ""]
        return "\n".join(lines)


def _rank_row(r: RankReport, buckets: tuple[str, ...]) -> str:
    t = r.totals
    per = mean_per_step(t, "breakdown_ns")
    causes = mean_per_step(t, "idle_causes_ns")
    top = max(IDLE_CAUSES, key=lambda k: causes[k])
    cells = [str(r.rank), _cell(r.primary_device), fmt_ms(t.median_step_ns)]
    cells += [fmt_ms(per[b]) for b in buckets]
    cells.append(f"{top} ({fmt_ms(causes[top])})" if causes[top] > 0 else "-")
    return "| " + " | ".join(cells) + " |"


def _findings(doc: Report) -> list[str]:
    """Each finding: severity, title, saving, then the fix as a quoted block (it often holds code)."""
    items = common.findings(doc)
    if not items:
        return []
    out = ["", "### Findings", ""]
    for i, f in enumerate(items, 1):
        saving = common.saving_text(f)
        facts = [x for x in (saving, f"confidence {f.confidence}" if f.confidence else "",
                             common.rank_text(f, doc.summary.rank_count)) if x]
        out.append(
            f"{i}. **{_cell(f.title or f.id)}** "
            f"`{f.severity}` " + (f"— {_cell(', '.join(facts))}" if facts else "")
        )
        fix = f.fix.strip()
        if fix:
            out.append("   <details><summary>Fix</summary>")
            out.append("")
            out += ["   " + "    " + _cell_code(line) for line in fix.splitlines()]
            out.append("")
            out.append("   </details>")
    return out


def _top_tables(rank: RankReport, multi: bool) -> list[str]:
    """The top kernels and ops of the focus rank, with their times summed over the whole trace."""
    out: list[str] = []
    who = f" (rank {rank.rank}, whole trace)" if multi else " (whole trace)"
    kernels = common.top_kernels(rank, 5)
    if kernels:
        out += ["", f"### Top kernels{who}", "", f"| kernel | calls | {common.total('time')} |", "|---|---:|---:|"]
        out += [f"| {_cell(_clip(k.name))} | {k.count:,} | {fmt_ms(k.total_ns)} |" for k in kernels]
    ops, key = common.top_ops(rank, 5)
    if ops:
        label = common.total("GPU time" if key == "gpu_total_ns" else "self CPU")
        out += ["", f"### Top ops{who}", "", f"| op | calls | {label} |", "|---|---:|---:|"]
        out += [f"| {_cell(_clip(o.name))} | {o.count:,} | {fmt_ms(getattr(o, key))} |" for o in ops]
    return out


def _clip(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def host_time_lines(doc: Report) -> list[str]:
    """torch.compile, host time by source line, then time per nn.Module (report.compile_section,
    report.stacks_section, report.modules_section)."""
    return compile_lines(doc) + stacks_lines(doc) + modules_lines(doc)
