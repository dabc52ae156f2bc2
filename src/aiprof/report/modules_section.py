"""The ``nn.Module`` section of ``aiprof analyze``'s report, in each format: time per module, forward and
backward, as the TensorBoard plugin's module view showed it.

Shows the focus rank's :class:`~aiprof.analysis.modules.ModuleProfile` (``RankReport.modules``): per module
(indented under its parent) calls, forward time with and without its child modules, backward time (the
backward ops its forward ops caused, children included) and, on a GPU trace, device time of the work its
forward and backward ops launched. Times are per step (sums over the recorded steps / steps). Nothing is
shown when no module was recorded (the stacks section already says how to record them). Module names are
escaped for their sink.
"""

from __future__ import annotations

from aiprof.analysis.modules import ModuleProfile, ModuleStat
from aiprof.report import common
from aiprof.report.common import fmt_ms
from aiprof.report.escape import html as _html
from aiprof.report.escape import markdown, terminal
from aiprof.report.model import RankReport, Report
from aiprof.report.stacks_section import tail

TOP_TERMINAL = 10
TOP_TABLE = 60


def html(text: object) -> str:
    return _html(terminal(text))


def modules_rank(doc: Report) -> RankReport | None:
    """The focus rank when it has recorded modules, else the first rank that has; else None."""
    focus = common.focus_rank(doc)
    if isinstance(focus.modules, ModuleProfile) and focus.modules.recorded:
        return focus
    return next((r for r in doc.ranks if isinstance(r.modules, ModuleProfile) and r.modules.recorded), None)


def _profile(doc: Report) -> tuple[RankReport, ModuleProfile] | None:
    rank = modules_rank(doc)
    if rank is None or not isinstance(rank.modules, ModuleProfile) or not rank.modules.modules:
        return None
    return rank, rank.modules


def _ps(ns: int, p: ModuleProfile) -> str:
    return fmt_ms(ns / max(p.steps, 1))


def _label(p: ModuleProfile) -> str:
    return f"mean per step over {p.steps} steps" if p.steps > 1 else "per step (1 step)"


def _row(m: ModuleStat, p: ModuleProfile) -> list[str]:
    cells = [f"{m.calls / max(p.steps, 1):.1f}", _ps(m.forward_ns, p), _ps(m.forward_self_ns, p), _ps(m.backward_ns, p)]
    if p.has_device:
        cells += [_ps(m.device_forward_ns, p), _ps(m.device_backward_ns, p)]
    return cells


def _head(p: ModuleProfile) -> list[str]:
    head = ["module", "calls / step", "forward / step", "forward self / step", "backward / step"]
    return head + (["device fwd / step", "device bwd / step"] if p.has_device else [])


def _backward_note(p: ModuleProfile) -> str:
    if not p.backward_from:
        return "no backward ops recorded"
    note = f"backward paired with forward ops through {p.backward_from}"
    if p.backward_unattributed_ns:
        note += f"; {_ps(p.backward_unattributed_ns, p)} per step of backward ops has no forward module (AccumulateGrad, loss)"
    return note


def terminal_lines(doc: Report) -> list[str]:
    """The modules with the most forward + backward time (their path, forward, backward per step)."""
    found = _profile(doc)
    if found is None:
        return []
    rank, p = found
    who = f"rank {rank.rank}, " if len(doc.ranks) > 1 else ""
    top = sorted(p.modules, key=lambda m: -(m.forward_self_ns + m.backward_self_ns))[:TOP_TERMINAL]
    out = [f"Top nn.Modules ({who}{_label(p)})", "  by own time; fwd and bwd include child modules"]
    for m in top:
        out.append(f"  {_ps(m.forward_ns, p):>9} fwd {_ps(m.backward_ns, p):>9} bwd  {tail(m.path)}")
    out.append("")
    return [terminal(line) for line in out]


def markdown_lines(doc: Report) -> list[str]:
    """A ``### Modules`` table in hierarchy order (the path shows the parent)."""
    found = _profile(doc)
    if found is None:
        return []
    rank, p = found
    who = f" (rank {rank.rank})" if len(doc.ranks) > 1 else ""
    head = _head(p)
    out = ["", f"### Modules{who}", "", f"{markdown(_label(p)).capitalize()}; {markdown(_backward_note(p))}.", "",
           "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for m in p.modules[:TOP_TABLE]:
        out.append("| " + " | ".join([markdown(m.path), *_row(m, p)]) + " |")
    if len(p.modules) > TOP_TABLE:
        out.append(f"| … {len(p.modules) - TOP_TABLE} more | " + " |" * (len(head) - 1))
    return out


def html_section(doc: Report) -> str:
    """A table in hierarchy order, each module indented under its parent; the full path in its tooltip."""
    found = _profile(doc)
    if found is None:
        return ""
    rank, p = found
    who = f"Rank {rank.rank}: " if len(doc.ranks) > 1 else ""
    head = "".join(f"<th>{html(h)}</th>" for h in _head(p))
    rows = []
    for m in p.modules[:TOP_TABLE]:
        name = (f'<td class=name style="padding-left:{0.5 + 1.2 * min(m.depth, 12):.1f}em" title="{html(m.path)}">'
                f"{html(m.name)}</td>")
        rows.append("<tr>" + name + "".join(f"<td>{html(c)}</td>" for c in _row(m, p)) + "</tr>")
    more = f"<p class=mute>{len(p.modules) - TOP_TABLE} more modules in the JSON report.</p>" if len(p.modules) > TOP_TABLE else ""
    return (f"<p>{html(who)}Time per nn.Module, {html(_label(p))}; <i>forward</i> includes child modules, "
            f"<i>forward self</i> does not; <i>backward</i>: {html(_backward_note(p))}.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}")
