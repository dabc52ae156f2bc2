"""Exposed vs hidden communication per process group and phase (``ranks[].communication.exposure``,
:mod:`aiprof.analysis.comm_exposure`) in each format, for the rank the detail sections describe (the slowest):
per step, what the step waited for against what compute hid, by phase (forward / backward / optimizer /
other), by process group, and the most exposed (group, phase, collective) rows. Group names come from the
trace: escaped per format here.
"""

from __future__ import annotations

from aiprof.analysis.comm_exposure import DeviceCommExposure
from aiprof.report import common
from aiprof.report.common import fmt_ms
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown as md
from aiprof.report.model import Report

TOP_GROUPS = 4
TOP_ROWS = 5


def _exposure(doc: Report) -> tuple[int, DeviceCommExposure] | None:
    """The focus rank and its device with the most communication, when it has any inside the steps."""
    rank = common.focus_rank(doc)
    comm = rank.communication
    if not comm or not comm.exposure:
        return None
    return rank.rank, max(comm.exposure, key=lambda e: e.comm_ns)


def _counted(e: DeviceCommExposure) -> str:
    """What ``kernels`` counts: communication kernels, or a CPU run's host-side collective ops."""
    return "collective ops" if e.device < 0 else "kernels"


def _amounts(exposed_ns: int, comm_ns: int, steps: int, hidden_pct: float) -> str:
    n = max(steps, 1)
    return f"{fmt_ms(exposed_ns / n)} exposed of {fmt_ms(comm_ns / n)} ({hidden_pct:.0f} % hidden)"


def _group_name(group: str, desc: str | None, size: int | None) -> str:
    extra = ", ".join(x for x in (desc, f"{size} ranks" if size else None) if x)
    return f"{group} ({extra})" if extra else group


def summary_lines(rank: int, e: DeviceCommExposure, multi: bool) -> list[str]:
    """The section as plain sentences (every format starts from these)."""
    where = "cpu" if e.device < 0 else f"gpu:{e.device}"
    who = f"rank {rank} (the slowest), {where}" if multi else where
    n = max(e.steps, 1)
    lines = [f"{who}, per step over {e.steps} step{'s' if e.steps != 1 else ''}: {fmt_ms(e.exposed_ns / n)} of "
             f"communication exposed of {fmt_ms(e.comm_ns / n)}, {e.hidden_pct:.0f} % hidden by compute "
             "(rows may overlap in time: their sums can exceed this)"]
    lines.append("by phase: " + "; ".join(
        f"{p.phase} {_amounts(p.exposed_ns, p.comm_ns, e.steps, p.hidden_pct)}" for p in e.by_phase))
    for g in e.by_group[:TOP_GROUPS]:
        lines.append(f"group {_group_name(g.group, g.group_desc, g.group_size)}: "
                     f"{_amounts(g.exposed_ns, g.comm_ns, e.steps, g.hidden_pct)}")
    if len(e.by_group) > TOP_GROUPS:
        lines.append(f"… and {len(e.by_group) - TOP_GROUPS} more groups (the JSON report lists them)")
    lines.append("most exposed: " + "; ".join(
        f"{r.collective} in {r.phase} on group {r.group} {fmt_ms(r.exposed_ns / max(e.steps, 1))}"
        for r in e.rows[:TOP_ROWS]))
    if e.phase_from_time:
        lines.append(f"{e.phase_from_time} of {e.kernels} {_counted(e)} placed in a phase by their launch time (their "
                     "ops name none)")
    return lines


def terminal_lines(doc: Report) -> list[str]:
    found = _exposure(doc)
    if found is None:
        return []
    rank, e = found
    return (["Communication exposed vs hidden, by phase and process group"]
            + [f"  {line}" for line in summary_lines(rank, e, len(doc.ranks) > 1)])


def markdown_lines(doc: Report) -> list[str]:
    found = _exposure(doc)
    if found is None:
        return []
    rank, e = found
    n = max(e.steps, 1)
    lines = ["", "### Communication exposed vs hidden", "",
             *(f"- {md(line)}" for line in summary_lines(rank, e, len(doc.ranks) > 1)), "",
             f"| group | phase | collective | {_counted(e)} | exposed /step | communication /step | hidden |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in e.rows[:8]:
        lines.append(f"| {md(r.group)} | {r.phase} | {md(r.collective)} | {r.kernels} | {fmt_ms(r.exposed_ns / n)} | "
                     f"{fmt_ms(r.comm_ns / n)} | {r.hidden_pct:.0f} % |")
    return lines


def html_section(doc: Report) -> str:
    """Sentences and the most exposed rows; empty without communication in the steps."""
    found = _exposure(doc)
    if found is None:
        return ""
    rank, e = found
    n = max(e.steps, 1)
    items = "".join(f"<li>{esc(line)}</li>" for line in summary_lines(rank, e, len(doc.ranks) > 1))
    rows = "".join(
        f"<tr><td>{esc(r.group)}</td><td>{esc(r.phase)}</td><td>{esc(r.collective)}</td><td>{r.kernels:,}</td>"
        f"<td>{esc(fmt_ms(r.exposed_ns / n))}</td><td>{esc(fmt_ms(r.comm_ns / n))}</td><td>{r.hidden_pct:.0f} %</td></tr>"
        for r in e.rows[:8])
    return ("<h3>Communication exposed vs hidden, by phase and process group</h3>"
            f"<ul>{items}</ul><table><thead><tr><th>group</th><th>phase</th><th>collective</th><th>{_counted(e)}</th>"
            "<th>exposed /step</th><th>communication /step</th><th>hidden</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")
