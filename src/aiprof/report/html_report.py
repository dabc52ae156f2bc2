"""HTML renderer: one self-contained file (no CDN, no network request), embedding the JSON document.

Every string that comes from a trace is escaped with ``html.escape``; the embedded JSON escapes ``<`` so
that no kernel name can close the script element.
"""

from __future__ import annotations

import html
import json
from typing import Any

from aiprof.analysis.timeline import BUCKETS, IDLE_CAUSES
from aiprof.report.document import mean_per_step
from aiprof.report.terminal import fmt_ms

_COLORS = {
    "compute": "#2e9e44",
    "communication": "#a03fb5",
    "memcpy": "#1c8fb0",
    "memset": "#3a5fcd",
    "idle": "#d64545",
}
_CSS = """
:root{color-scheme:light dark;--fg:#1d1d1f;--bg:#fff;--mute:#666;--line:#ddd}
@media (prefers-color-scheme:dark){:root{--fg:#e8e8e8;--bg:#16181c;--mute:#9a9a9a;--line:#333}}
body{font:14px/1.45 system-ui,sans-serif;color:var(--fg);background:var(--bg);max-width:1100px;margin:2em auto;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid var(--line)}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:3px 10px;border-bottom:1px solid var(--line);text-align:right}
td:first-child,th:first-child{text-align:left}.mute{color:var(--mute)}
.bar{display:flex;height:14px;width:360px;border-radius:3px;overflow:hidden;background:var(--line)}
.legend span{display:inline-block;margin-right:1em}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
code{font-size:12px;word-break:break-all}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _bar(parts: dict[str, float], total: float) -> str:
    cells = "".join(
        f'<div style="width:{100 * v / total:.3f}%;background:{_COLORS[k]}" title="{_e(k)} {fmt_ms(v)}"></div>'
        for k, v in parts.items()
        if total > 0 and v > 0
    )
    return f'<div class="bar">{cells}</div>'


class HtmlRenderer:
    def render(self, doc: dict[str, Any]) -> str:
        data = json.dumps(doc, ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")
        body = [self._summary(doc)]
        for rank in doc["ranks"]:
            body.append(self._rank(rank, len(doc["ranks"]) > 1))
        notes = doc.get("warnings", [])
        if notes:
            body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
        return (
            "<!doctype html><html lang=en><head><meta charset=utf-8>"
            '<meta name=viewport content="width=device-width,initial-scale=1">'
            "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>aiprof report</title><style>{_CSS}</style></head><body>"
            + "".join(body)
            + f'<script type="application/json" id="aiprof-data">{data}</script>'
            + f'<p class=mute>{_e(doc["generator"])} · report schema {_e(doc["schema_version"])}</p>'
            + "</body></html>\n"
        )

    def _summary(self, doc: dict[str, Any]) -> str:
        s = doc["summary"]
        util = "GPU utilization" if s["device_kind"] == "gpu" else "CPU busy"
        sources = "".join(f"<div><code>{_e(p)}</code></div>" for p in doc["sources"][:8])
        legend = "".join(
            f'<span><i class=sw style="background:{c}"></i>{_e(k)}</span>' for k, c in _COLORS.items()
        )
        return (
            f"<h1>aiprof: {s['rank_count']} rank(s), {s['step_count']} step(s)</h1>{sources}"
            f"<p>Median step <b>{fmt_ms(s['median_step_ns'])}</b> · {util} "
            f"<b>{100 * s['gpu_utilization']:.1f}%</b></p><p class=legend>{legend}</p>"
        )

    def _rank(self, rank: dict[str, Any], multi: bool) -> str:
        t = rank["totals"]
        title = f"Rank {rank['rank']} · " if multi else ""
        rows = []
        for step in rank["steps"]:
            parts = {b: float(step["breakdown_ns"][b]) for b in BUCKETS}
            step_causes = ", ".join(
                f"{_e(k)} {fmt_ms(v)}" for k, v in step["idle_causes_ns"].items() if v > 0
            )
            rows.append(
                f"<tr><td>{_e(step['name'])}</td><td>{fmt_ms(step['duration_ns'])}</td>"
                f"<td>{_bar(parts, float(step['duration_ns']))}</td><td class=mute>{step_causes}</td></tr>"
            )
        per = mean_per_step(t, "breakdown_ns")
        causes = mean_per_step(t, "idle_causes_ns")
        bucket_rows = "".join(f"<tr><td>{b}</td><td>{fmt_ms(per[b])}</td></tr>" for b in BUCKETS)
        cause_rows = "".join(
            f"<tr><td>{c}</td><td>{fmt_ms(causes[c])}</td></tr>" for c in IDLE_CAUSES if causes[c] > 0
        )
        return (
            f"<h2>{title}{_e(rank['primary_device'])}</h2>"
            f"<p>Median step {fmt_ms(t['median_step_ns'])} · utilization {100 * t['gpu_utilization']:.1f}%</p>"
            "<table><tr><th>step</th><th>duration</th><th>breakdown</th><th>idle causes</th></tr>"
            + "".join(rows)
            + "</table><table><tr><th>mean per step</th><th></th></tr>"
            + bucket_rows
            + "</table><table><tr><th>idle cause</th><th>per step</th></tr>"
            + cause_rows
            + "</table>"
        )
