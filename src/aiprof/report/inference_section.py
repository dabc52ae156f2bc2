"""The inference section (``ranks[].inference``, :mod:`aiprof.analysis.inference`) in each format: the phase
table (prefill / decode / mixed / between requests: steps, median and p90 step time, tokens per step, GPU
busy, host gap), the requests' time to first token and inter-token latency, and the memory budget (weights,
KV cache, graph pool, activations, headroom; analysis/inference_memory.py). Numbers are formatted here;
the only strings from a trace are file names and the engine's name, escaped per format."""

from __future__ import annotations

from msgspec import UNSET

from aiprof.analysis.inference import InferenceReport
from aiprof.memory.units import binary
from aiprof.report.common import fmt_ms, fmt_pct, focus_rank
from aiprof.report.escape import html as esc
from aiprof.report.escape import markdown as md
from aiprof.report.model import Report

_HEAD = ("phase", "steps", "median", "p90", "tokens/step", "GPU busy", "host gap")
_NAMES = {"between": "between requests"}


def _section(doc: Report) -> InferenceReport | None:
    section = focus_rank(doc).inference
    return section if isinstance(section, InferenceReport) and section.detected else None


def _cell(value: int | float | None, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "ns":
        return fmt_ms(int(value))
    if kind == "pct":
        return fmt_pct(float(value))
    return f"{value:,}" if isinstance(value, int) else str(value)


def phase_rows(section: InferenceReport) -> list[list[str]]:
    """The phase table's cells, one row per kind present."""
    rows = []
    for kind, p in (section.phases or {}).items():
        gap = p.host_gap_median_ns if p.host_gap_median_ns is not UNSET else None
        rows.append([_NAMES.get(kind, kind), _cell(p.count, ""), _cell(p.median_ns, "ns"), _cell(p.p90_ns, "ns"),
                     _cell(p.tokens_per_step, ""), _cell(p.gpu_busy_share, "pct"), _cell(gap, "ns")])
    return rows


def request_lines(section: InferenceReport) -> list[str]:
    """The requests' TTFT / ITL / throughput as sentences (none without a requests file)."""
    req = section.requests
    if not req:
        return []
    lines = [f"{req.count} request(s), {req.new_tokens:,} new tokens"
             + (f", {req.tokens_per_s:,.1f} tokens/s while serving" if req.tokens_per_s else "")]
    warm = req.warmup
    if warm is not None:
        lines.append(f"warm-up: request {warm.request}, time to first token {fmt_ms(warm.ttft_ns)} "
                     f"({warm.ttft_over_others_median:g}x the others' median: one-time costs), left out of "
                     "the TTFT, inter-token and tokens/s figures")
    for d, label in ((req.ttft, "time to first token"), (req.itl, "inter-token latency")):
        if d is not None:
            lines.append(f"{label}: median {fmt_ms(d.median_ns)}, p90 {fmt_ms(d.p90_ns)}, "
                         f"p99 {fmt_ms(d.p99_ns)}, max {fmt_ms(d.max_ns)}")
    return lines


def _bytes(value: int | None) -> str:
    return binary(value) if value is not None else "not known"


def budget_lines(section: InferenceReport) -> list[str]:
    """The memory budget (analysis/inference_memory.py) as sentences: the split, the headroom and how many more
    requests fit, and its notes (none without memory data)."""
    b = section.memory_budget
    if b is UNSET:
        return []
    split = [f"weights {_bytes(b.weights_bytes)} ({b.weights_from})"]
    if b.other_persistent_bytes:
        split.append(f"other persistent {binary(b.other_persistent_bytes)}")
    if b.kv_cache_bytes is not None and b.kv_bytes_per_token is not None:
        split.append(f"KV cache {binary(b.kv_cache_bytes)} per request ({binary(b.kv_bytes_per_token)}/token × "
                     f"{b.request_tokens:,} tokens" + (f", batch {b.request_batch}" if b.request_batch else "") + ")")
    if b.request_bytes is not None:
        split.append(f"a whole request kept {binary(b.request_bytes)}"
                     + ("" if b.request_freed_at_end is None else
                        (", freed at its end" if b.request_freed_at_end else ", not freed at its end")))
    if b.graph_pool_bytes:
        split.append(f"graph pool {binary(b.graph_pool_bytes)}")
    acts = [f"{kind} {binary(v)}" for kind, v in (("prefill", b.prefill_activation_bytes),
                                                   ("decode", b.decode_activation_bytes)) if v is not None]
    if acts:
        split.append("activations (per-step peak) " + ", ".join(acts))
    lines = [f"memory budget on {b.device}: " + "; ".join(split)]
    if b.capacity_bytes:
        room = (f"headroom {binary(b.headroom_bytes)} of {binary(b.capacity_bytes)} ({b.capacity_from})"
                if b.headroom_bytes is not None else f"capacity {binary(b.capacity_bytes)} ({b.capacity_from})")
        if b.more_requests is not None:
            room += f": {b.more_requests:,} more concurrent request(s) of this size fit"
        if b.weights_kv_share is not None:
            room += f"; weights + one request's KV cache are {fmt_pct(b.weights_kv_share)} of it"
        lines.append(room)
    lines += list(b.notes)
    return lines


def _title(section: InferenceReport) -> str:
    return f"Inference (steps by {section.source or 'shape'})"


def terminal_lines(doc: Report) -> list[str]:
    """Plain lines for the terminal (the renderer escapes and styles them); [] without inference."""
    section = _section(doc)
    if section is None:
        return []
    rows = [list(_HEAD)] + phase_rows(section)
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
    table = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    return [_title(section), *table, *request_lines(section), *budget_lines(section)]


def markdown_lines(doc: Report) -> list[str]:
    section = _section(doc)
    if section is None:
        return []
    lines = [f"## {md(_title(section))}", "", "| " + " | ".join(_HEAD) + " |", "|---|" + "---:|" * (len(_HEAD) - 1)]
    lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in phase_rows(section)]
    lines += [""] + [f"- {md(line)}" for line in request_lines(section) + budget_lines(section)] + [""]
    return lines


WATERFALL_ROWS = 50  # requests drawn in the HTML waterfall (the JSON lists 200)


def waterfall_rows(section: InferenceReport) -> tuple[list[tuple[str, list[tuple[str, int, int, str]], str]], int]:
    """The HTML request waterfall: per request (the first ``WATERFALL_ROWS``) its time to first token
    (prefill and the first token's selection) then its decode (first token to return), on one axis from the
    first request's start; returns the rows and the span (ns). Requests without tokens are one bar."""
    req = section.requests
    if not req or not req.requests:
        return [], 0
    shown = req.requests[:WATERFALL_ROWS]
    origin = min(r.start_unix_ns for r in shown)
    span = max(r.start_unix_ns + r.duration_ns for r in shown) - origin
    warm = req.warmup.request if req.warmup is not None else None
    rows = []
    for r in shown:
        start, end = r.start_unix_ns - origin, r.start_unix_ns - origin + r.duration_ns
        label = f"request {r.request}"
        tag = "warm-up · " if r.request == warm else ""
        if r.ttft_ns is None:
            rows.append((label, [("b-idle", start, end, f"{label}: {fmt_ms(r.duration_ns)}, tokens not observed")],
                         fmt_ms(r.duration_ns)))
            continue
        first = start + r.ttft_ns
        decode = (f"{label}: decode {fmt_ms(end - first)}, {r.new_tokens:,} token(s)"
                  + (f", median inter-token {fmt_ms(r.itl_median_ns)}" if r.itl_median_ns is not None else ""))
        rows.append((label, [("b-memcpy", start, first, f"{tag}{label}: to first token {fmt_ms(r.ttft_ns)} "
                                                         f"(prompt {r.prompt_tokens:,} tokens × {r.batch})"),
                             ("b-compute", first, end, decode)],
                     f"{tag}TTFT {fmt_ms(r.ttft_ns)} · {r.new_tokens:,} tok"))
    return rows, span


def _waterfall_html(section: InferenceReport) -> str:
    from aiprof.report import svg

    rows, span = waterfall_rows(section)
    if not rows:
        return ""
    req = section.requests
    more = f" (the first {WATERFALL_ROWS} of {req.count})" if req and req.count > WATERFALL_ROWS else ""
    return (f"<p class=mute>Requests over time{esc(more)}</p>" + svg.waterfall(rows, span)
            + svg.time_axis(span, label_w=110, right_w=230)
            + '<div class="legend"><span><i class="sw memcpy"></i>to the first token (prefill)</span>'
            '<span><i class="sw compute"></i>decoding (first token to return)</span>'
            '<span><i class="sw idle"></i>tokens not observed</span></div>')


def html_section(doc: Report) -> str:
    section = _section(doc)
    if section is None:
        return ""
    head = "".join(f"<th>{esc(h)}</th>" for h in _HEAD)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in phase_rows(section))
    reqs = "".join(f"<li>{esc(line)}</li>" for line in request_lines(section) + budget_lines(section))
    return (f"<p class=mute>{esc(_title(section))}</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
            f"</table>" + (f"<ul>{reqs}</ul>" if reqs else "") + _waterfall_html(section))
