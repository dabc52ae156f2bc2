"""A graph replay analysed with its capture (``ranks[].graph_capture.replay_attribution``,
:func:`aiprof.analysis.graphs.attach_capture`) in each format: the capture file, the share of replayed kernel
time attributed to the captured ops (and the share left unattributed), then the ops that replayed the most
time. Numbers are formatted here; the file and op names come from traces and are escaped per format."""

from __future__ import annotations

from dataclasses import dataclass
from msgspec import UNSET, UnsetType

from aiprof.analysis.graphs import GraphCaptureSection
from aiprof.report.common import fmt_ms, focus_rank
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown as md
from aiprof.report.model import Report

TOP = 8  # ops listed in each format (the JSON keeps analysis.graphs.TOP_OPS)
TITLE = "CUDA/HIP graph replays, attributed to ops with the capture trace"


@dataclass(frozen=True)
class _Replay:
    capture: str
    summary: str
    rows: list[tuple[str, str, str]]  # time, share of replayed time, op name


def _replay(doc: Report) -> _Replay | None:
    section = focus_rank(doc).graph_capture
    a = section.replay_attribution if isinstance(section, GraphCaptureSection) else UNSET
    if isinstance(a, UnsetType):
        return None
    replayed = a.replayed_ns
    summary = (f"{100 * a.attributed_share:.1f}% of the replayed kernel time ({fmt_ms(replayed)}, "
               f"{a.replayed_kernels:,} kernels of {a.graph_launches} graph launches, "
               f"{a.matched_launches} matched to a captured graph) attributed to {a.op_count} ops; "
               f"{100 * a.unattributed_share:.1f}% unattributed ({fmt_ms(a.unattributed_ns)})")
    rows = [(fmt_ms(ns), f"{100 * ns / replayed:.1f}%" if replayed else "–", name)
            for name, ns in list(a.by_op.items())[:TOP]]
    return _Replay(a.capture, summary, rows)


def terminal_lines(doc: Report) -> list[str]:
    """Plain lines for the terminal (the renderer escapes and styles them); [] unless a replay was paired."""
    r = _replay(doc)
    if r is None:
        return []
    width = max([len(t) for t, _, _ in r.rows] + [4])
    return [TITLE, f"  capture: {r.capture}", f"  {r.summary}",
            *(f"  {t.rjust(width)}  {s.rjust(6)}  {name}" for t, s, name in r.rows)]


def markdown_lines(doc: Report) -> list[str]:
    r = _replay(doc)
    if r is None:
        return []
    lines = [f"## {TITLE}", "", f"Capture: `{md(r.capture)}`. {md(r.summary)}.", "",
             "| replayed time | share | op |", "|---:|---:|---|"]
    lines += [f"| {t} | {s} | {md(name)} |" for t, s, name in r.rows]
    return lines + [""]


def html_section(doc: Report) -> str:
    r = _replay(doc)
    if r is None:
        return ""
    body = "".join(f"<tr><td>{esc(t)}</td><td>{esc(s)}</td><td>{esc(name)}</td></tr>" for t, s, name in r.rows)
    return (f"<p class=mute>capture: {esc(r.capture)}</p><p>{esc(r.summary)}</p><table><thead><tr>"
            f"<th>replayed time</th><th>share</th><th>op</th></tr></thead><tbody>{body}</tbody></table>")
