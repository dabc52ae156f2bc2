"""Markdown renderer: the summary, for pasting into a pull request or an issue."""

from __future__ import annotations

from typing import Any

from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.report.document import mean_per_step
from aiprof.report.terminal import fmt_ms


def _cell(text: str) -> str:
    """Escape what would break a table cell or inject markup."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


class MarkdownRenderer:
    def render(self, doc: dict[str, Any]) -> str:
        s = doc["summary"]
        lines = [f"## aiprof: {s['rank_count']} rank(s), {s['step_count']} step(s)", ""]
        lines.append(
            f"Median step **{fmt_ms(s['median_step_ns'])}**, "
            f"{'GPU utilization' if s['device_kind'] == 'gpu' else 'CPU busy'} "
            f"**{100 * s['gpu_utilization']:.1f}%**"
            + (f", slowest rank {s['slowest_rank']}" if s["rank_count"] > 1 else "")
            + "."
        )
        lines.append("")
        lines.append("| rank | device | median step | " + " | ".join(BUCKETS) + " | top idle cause |")
        lines.append("|---:|---|---:|" + "---:|" * len(BUCKETS) + "---|")
        for r in doc["ranks"]:
            t = r["totals"]
            per = mean_per_step(t, "breakdown_ns")
            causes = mean_per_step(t, "idle_causes_ns")
            top = max(IDLE_CAUSES, key=lambda k: causes[k])
            cells = [str(r["rank"]), _cell(r["primary_device"]), fmt_ms(t["median_step_ns"])]
            cells += [fmt_ms(per[b]) for b in BUCKETS]
            cells.append(f"{top} ({fmt_ms(causes[top])})" if causes[top] > 0 else "-")
            lines.append("| " + " | ".join(cells) + " |")
        findings = doc.get("findings") or []
        if findings:
            lines += ["", "### Findings", ""]
            for f in findings:
                saving = f.get("est_saving_ns_per_step")
                tail = f" (saves ~{fmt_ms(saving)}/step)" if isinstance(saving, (int, float)) else ""
                lines.append(f"- **{_cell(str(f.get('title', f.get('id', ''))))}**{tail}")
        notes = doc.get("warnings", []) + [n for r in doc["ranks"] for n in r.get("notes", [])]
        if notes:
            lines += ["", "Notes:", ""] + [f"- {_cell(n)}" for n in notes]
        lines += ["", f"<sub>{_cell(doc['generator'])}, report schema {doc['schema_version']}</sub>", ""]
        return "\n".join(lines)
