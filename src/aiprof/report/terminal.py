"""Terminal renderer: a one-screen summary that fits 80 columns; plain text when not a TTY."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from aiprof.analysis.kernels import KernelNameStats
from aiprof.analysis.ops import OpGroupStats
from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.analysis.run import RunAnalysis
from aiprof.report import common
from aiprof.report.common import fmt_ms
from aiprof.report.document import build_document, mean_per_step
from aiprof.report.escape import terminal, terminal_text
from aiprof.report.health_section import terminal_lines as health_lines
from aiprof.report.exposure_section import terminal_lines as exposure_lines
from aiprof.report.model import RankReport, Report, Summary
from aiprof.report.replay_section import terminal_lines as replay_lines

__all__ = ["TerminalRenderer", "fmt_ms", "render_summary"]

_BUCKET_STYLE = {
    "compute": "green",
    "communication": "magenta",
    "memcpy": "cyan",
    "memset": "blue",
    "compile": "yellow",
    "idle": "red",
}
_BAR_WIDTH = 24
_FINDING_INDENT = 9  # columns before a finding's title, saving and fix


def _bar(share: float, style: str) -> Text:
    filled = round(max(0.0, min(1.0, share)) * _BAR_WIDTH)
    return Text("█" * filled, style=style)


class TerminalRenderer:
    """``render(document) -> str``. ``color=None`` decides from ``is_tty``. Every string from a trace is
    printed as ``Text`` with its control characters made visible (``report.escape``), never as markup."""

    def __init__(self, width: int = 80, is_tty: bool = False, color: bool | None = None) -> None:
        if width < 60:
            raise ValueError("terminal width must be at least 60 columns")
        self.width = width
        self.is_tty = is_tty
        self.color = is_tty if color is None else color

    def render(self, doc: Report) -> str:
        buf = io.StringIO()
        console = Console(
            file=buf,
            width=self.width,
            force_terminal=self.color,
            no_color=not self.color,
            color_system="standard" if self.color else None,
            highlight=False,
            emoji=False,
        )
        self._render(console, doc)
        return buf.getvalue()

    def _render(self, console: Console, doc: Report) -> None:
        ranks = doc.ranks
        summary = doc.summary
        console.print(terminal_text(self._headline(doc), style="bold"))
        if doc.run_status:  # a crashed or incomplete run says so first (report.runstatus)
            console.print(terminal_text(doc.run_status.banner, style="bold red"))
        for source in doc.sources[:3]:
            console.print(terminal_text(f"  {_short_path(source)}", style="dim"))
        if len(doc.sources) > 3:
            console.print(Text(f"  … and {len(doc.sources) - 3} more", style="dim"))
        partial = common.partial_note(doc)
        if partial:
            console.print(terminal_text(partial, style="bold yellow"))
        failed = common.failed_note(doc)
        if failed:
            console.print(terminal_text(failed, style="bold red"))
        kind = common.capture_note(doc)
        if kind:
            console.print(terminal_text(kind, style="bold cyan"))
        _block(console, health_lines(doc))  # what the trace cannot show, first (report.health_section)
        if len(ranks) > 1:
            console.print()
            console.print(Text(
                f"Run: median step {fmt_ms(summary.median_step_ns)} (median of ranks), "
                f"{common.util_label(doc)} {100 * summary.gpu_utilization:.1f}% (mean of ranks)"
            ))
            table, hidden = self._ranks_table(doc, common.cap_ranks(doc), summary)
            console.print(table)
            if hidden:
                console.print(Text(hidden, style="dim"))
        focus = common.focus_rank(doc)
        console.print()
        self._rank_detail(console, focus, len(ranks) > 1)
        self._whole_run(console, doc)
        self._arrivals(console, doc)
        _block(console, exposure_lines(doc))  # exposed vs hidden communication (report.exposure_section)
        self._inference(console, doc)
        _block(console, replay_lines(doc))  # graph replays attributed with their capture (report.replay_section)
        console.print()
        self._findings(console, doc)
        self._memory(console, doc)
        _host_time(console, doc)
        self._sections(console, focus)
        for note in common.notes(doc, focus):
            console.print(terminal_text(f"note: {note}", style="yellow"))

    @staticmethod
    def _whole_run(console: Console, doc: Report) -> None:
        """Every step of an ``aiprof run`` (report.wholerun_section), when the run directory timed them."""
        from aiprof.report.wholerun_section import terminal_lines as whole_run_lines

        _block(console, whole_run_lines(doc))

    @staticmethod
    def _arrivals(console: Console, doc: Report) -> None:
        """Who arrives last at the collectives (report.arrival_section), when several ranks share them."""
        from aiprof.report.arrival_section import terminal_lines

        _block(console, terminal_lines(doc))

    @staticmethod
    def _inference(console: Console, doc: Report) -> None:
        """Prefill / decode phases and the requests' TTFT / ITL (report.inference_section)."""
        from aiprof.report.inference_section import terminal_lines as inference_lines

        _block(console, inference_lines(doc))

    @staticmethod
    def _memory(console: Console, doc: Report) -> None:
        """The memory summary (report.memory_section), when a rank has memory data."""
        from aiprof.report.memory_section import terminal_lines

        for line in terminal_lines(doc):
            console.print(Text(line))  # already escaped for a terminal; Text is never read as markup
        if any(r.memory for r in doc.ranks):
            console.print()

    def _headline(self, doc: Report) -> str:
        s = doc.summary
        rank = doc.ranks[0]
        device = rank.primary_device
        names = [d.name for d in rank.devices if d.name]
        where = f"{names[0]} ({device})" if names else device
        ranks = f"{s.rank_count} ranks" if s.rank_count > 1 else "1 rank"
        steps = f"{s.step_count} step" + ("s" if s.step_count != 1 else "")
        source = s.step_source
        if source != "ProfilerStep":  # say where steps came from when torch.profiler did not mark them
            steps += f" ({source})" if source == "whole trace" else f" (from {source})"
        return f"aiprof · {ranks} · {steps} · {where}" + _framework(doc)

    def _ranks_table(self, doc: Report, capped: common.Capped[RankReport], summary: Summary) -> tuple[Table, str]:
        """One row per rank (shares of the rank's analysed time); past ``common.ROW_CAP_FIRST +
        ROW_CAP_LAST`` ranks, the first and last ones and an aggregate line (returned) for those between
        (the slowest rank is always shown). A CPU-only run says "busy"/"between ops", not util/idle."""
        shown: list[str] = [b for b in ("compute", "communication", "idle") if b in common.buckets(doc)]
        short = {"compute": "compute", "communication": "comm", "idle": "idle"}
        heads = [("rank", "right"), ("median step", "right"), ("busy" if common.is_cpu(doc) else "util", "right")]
        heads += [(common.bucket_label(doc, b, short=True) if common.is_cpu(doc) else short[b], "right") for b in shown]
        heads.append((common.top_cause_label(doc), "left"))
        table = Table(title="Ranks (shares of each rank's analysed time)", title_justify="left", box=None, pad_edge=False)
        for col, justify in heads:
            table.add_column(col, justify=justify)  # type: ignore[arg-type]
        for r in capped.head:
            self._rank_row(table, r, summary, shown)
        if capped.hidden:
            table.add_row(*["…"] * len(heads))
        for r in capped.tail:
            self._rank_row(table, r, summary, shown)
        return table, common.hidden_ranks_text(capped.hidden) if capped.hidden else ""

    @staticmethod
    def _rank_row(table: Table, r: RankReport, summary: Summary, shown: list[str]) -> None:
        t = r.totals
        dur = max(t.duration_ns, 1)
        causes = t.idle_causes_ns
        top = max(IDLE_CAUSES, key=lambda k: causes.get(k, 0))
        marker = " ◀ slowest" if r.rank == summary.slowest_rank else ""
        table.add_row(
            f"{r.rank}",
            fmt_ms(t.median_step_ns),
            f"{100 * t.gpu_utilization:.1f}%",
            *[f"{100 * t.breakdown_ns[b] / dur:.1f}%" for b in shown],
            (f"{top} {100 * causes[top] / dur:.1f}%" if causes.get(top) else "-") + marker,
        )

    def _rank_detail(self, console: Console, rank: RankReport, multi: bool) -> None:
        t = rank.totals
        label = f"rank {rank.rank}, " if multi else ""
        util_name = common.util_label(rank)
        console.print(
            Text.assemble(
                ("Step time ", "bold"),
                f"median {fmt_ms(t.median_step_ns)}, mean {fmt_ms(t.mean_step_ns)} "
                f"over {t.steps} step(s)   ",
                (f"{util_name} {100 * t.gpu_utilization:.1f}%", "bold"),
            )
        )
        per_step = mean_per_step(t, "breakdown_ns")
        mean = max(t.duration_ns / max(t.steps, 1), 1.0)
        console.print(_stacked_bar(per_step, mean, self.width - 2))
        table = Table(title=Text(f"Where a step goes ({label}{terminal(rank.primary_device)})"),
                      title_justify="left", box=None, pad_edge=False)
        table.add_column("")
        table.add_column("time /step", justify="right")
        table.add_column("of step", justify="right")
        table.add_column("")
        for bucket in common.buckets(rank):
            share = per_step[bucket] / mean
            table.add_row(common.bucket_label(rank, bucket), fmt_ms(per_step[bucket]), f"{100 * share:.1f}%",
                          _bar(share, _BUCKET_STYLE[bucket]))
        console.print(table)
        causes = mean_per_step(t, "idle_causes_ns")
        idle = per_step["idle"]
        if idle > 0:
            table = Table(title=common.idle_title(rank), title_justify="left", box=None, pad_edge=False)
            table.add_column("")
            table.add_column("time /step", justify="right")
            table.add_column("of step", justify="right")
            table.add_column("")
            for cause in sorted(IDLE_CAUSES, key=lambda k: -causes[k]):
                if causes[cause] <= 0:
                    continue
                share = causes[cause] / mean
                table.add_row(cause, fmt_ms(causes[cause]), f"{100 * share:.1f}%", _bar(share, "red"))
            console.print(table)

    def _findings(self, console: Console, doc: Report, limit: int = 3) -> None:
        """The top findings (in the JSON's order, ``common.findings``) with their savings and their whole
        fix: what to do next. Long lines wrap to the console's width under a hanging indent, never cut."""
        items = common.findings(doc)
        if not items:
            return
        console.print(Text("Findings", style="bold"))
        grid = Table.grid(padding=(0, 1), pad_edge=False)
        grid.add_column(width=_FINDING_INDENT - 1, no_wrap=True)
        grid.add_column(overflow="fold")
        for f in items[:limit]:
            sev = f.severity
            style = {"high": "bold red", "medium": "yellow"}.get(sev, "")
            grid.add_row(Text(f"  {sev.upper()}", style=style), terminal_text(f.title or f.id))
            saving = common.saving_text(f)
            who = common.rank_text(f, doc.summary.rank_count)
            if saving or who:
                facts = Text(saving, style="green")
                if who:
                    facts.append((" · " if saving else "") + who)
                grid.add_row("", facts)
            lines = [line.rstrip() for line in f.fix.strip().splitlines()]
            for i, line in enumerate(lines):
                grid.add_row("", terminal_text(("fix: " if i == 0 else "     ") + line) if line else Text(""))
        console.print(grid)
        if len(items) > limit:
            console.print(Text(f"  … {len(items) - limit} more finding(s) in the HTML or Markdown report", style="dim"))
        console.print()

    def _sections(self, console: Console, rank: RankReport) -> None:
        kernels = common.top_kernels(rank, 5)
        if kernels:
            console.print(Text("Top kernels (whole trace)"))  # a line of its own: a table title wraps to the table's width
            console.print(self._top_table(kernels, "total_ns", common.total("time")))
        ops, key = common.top_ops(rank, 5)
        if ops:
            label = "GPU time" if key == "gpu_total_ns" else "self CPU"
            console.print(Text("Top ops (whole trace)"))
            console.print(self._top_table(ops, key, common.total(label)))

    def _top_table(self, rows: Sequence[KernelNameStats | OpGroupStats], key: str, label: str) -> Table:
        table = Table(box=None, pad_edge=False)
        table.add_column("name", overflow="ellipsis", no_wrap=True, max_width=self.width - 24)
        table.add_column("calls", justify="right")
        table.add_column(label, justify="right")
        for row in rows:
            table.add_row(terminal_text(row.name), f"{row.count:,}", fmt_ms(getattr(row, key)))
        return table


_BUCKET_CHAR = {"compute": "█", "communication": "▓", "memcpy": "▒", "memset": "▒", "compile": "▚", "idle": "░"}


def _stacked_bar(parts: dict[str, float], total: float, width: int) -> Text:
    """The mean step as one bar, a character per bucket so it reads without colour too."""
    text = Text()
    used = 0
    cumulative = 0.0
    for bucket in BUCKETS:
        cumulative += parts[bucket]
        end = round(width * min(cumulative / total, 1.0))
        if end > used:
            text.append(_BUCKET_CHAR[bucket] * (end - used), style=_BUCKET_STYLE[bucket])
            used = end
    return text


def _short_path(path: str) -> str:
    p = Path(path)
    return str(p) if len(str(p)) < 74 else "…/" + "/".join(p.parts[-2:])


def _framework(doc: Report) -> str:
    """`` · transformers 5.23.0`` when a framework integration captured the run (meta.json's framework)."""
    entry = doc.run_metadata.framework if doc.run_metadata is not None else None
    if entry is None or not entry.name:
        return ""
    return f" · {entry.name} {entry.version or ''}".rstrip()


def render_summary(result: Report | RunAnalysis, width: int = 80, is_tty: bool = False) -> str:
    """The terminal summary of a report document or of analysis results (``aiprof run`` uses this)."""
    doc = result if isinstance(result, Report) else build_document(result)
    return TerminalRenderer(width=width, is_tty=is_tty).render(doc)


def _block(console: Console, lines: list[str]) -> None:
    """A titled block of plain lines (a section's ``terminal_lines``): a blank line, the title in bold."""
    if lines:
        console.print()
        console.print(terminal_text(lines[0], style="bold"))
        for line in lines[1:]:
            console.print(terminal_text(line))


def _host_time(console: Console, doc: Report) -> None:
    """torch.compile, host time by source line and the top nn.Modules (report.compile_section,
    report.stacks_section, report.modules_section)."""
    from aiprof.report import compile_section, modules_section, stacks_section

    for line in compile_section.terminal_lines(doc) + stacks_section.terminal_lines(doc) + modules_section.terminal_lines(doc):
        console.print(Text(line))  # already escaped for a terminal; Text is never read as markup
