"""The HTML report's interactive timeline payload: every event where the trace has it, launch flows, ranks on
one clock, trace strings as escaped data, the cap, and no cost to the other outputs."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from kineto_builder import TraceBuilder
from test_escape import HOSTILE as ESCAPE_HOSTILE
from test_escape import HTML_EVIL

import aiprof
from aiprof import app
from aiprof.analysis.explore import Category, rank_timeline
from aiprof.analysis.steps import step_windows
from aiprof.report.escape import json_script
from aiprof.report.html_report import CSP
from aiprof.report.timeline import TimelineInput, csp, script_hash, script_text, section
from aiprof.report.timeline import payload as typed_payload
from aiprof.runmeta import RunTelemetry

# The house's hostile strings (tests/report/test_escape.py: controls, bidi, terminal sequences, markup,
# Markdown, HTML) and a few aimed at a script element: every one is a kernel and an op of one trace.
HOSTILE = tuple(dict.fromkeys((
    "<script>alert('k')</script>",
    "</script><img src=x onerror=alert(2)>",
    "<!-- \"quoted\" & 'single' -->",
    "evil\u202eoverride\u2066isolate\u2069",
    "line\u2028sep",
    *HTML_EVIL,
    *(s for s in ESCAPE_HOSTILE if len(s) < 1000),
)))
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def payload(doc: Any, data: Any, **kwargs: Any) -> dict[str, Any]:
    """The page payload as its JSON script block holds it (plain data)."""
    plain: dict[str, Any] = msgspec.to_builtins(typed_payload(doc, data, **kwargs))
    return plain

def build_trace(
    path: Path, *, base_time_ns: int = 1_700_000_000_000_000_000, rank: int | None = None, names: tuple[str, ...] = (),
    steps: int = 3,
) -> tuple[Path, list[dict[str, Any]]]:
    """A small trace: ``steps`` ProfilerSteps, each an op launching a GEMM (stream 7), a copy, an NCCL
    all-reduce (stream 13) and one kernel per extra name. Returns the path and the device activities (name,
    relative ns, stream) the payload must hold."""
    b = TraceBuilder(base_time_ns=base_time_ns)
    if rank is not None:
        b.distributed(rank, 2)
    expected: list[dict[str, Any]] = []
    for s in range(steps):
        t = 1000 * s
        b.step(s, ts=t, dur=900)
        op = b.cpu_op("aten::mm", ts=t + 10, dur=100)
        _, k = b.launch(op, kernel="sm90_xmma_gemm_f32f32", kernel_ts=t + 50, kernel_dur=200 + 10 * s)
        expected.append({"name": k["name"], "ts": b.ns(k), "stream": 7})
        cp = b.cpu_op("aten::copy_", ts=t + 120, dur=50)
        _, m = b.launch(cp, kind="memcpy", kernel="Memcpy HtoD (Pageable -> Device)", kernel_ts=t + 260, kernel_dur=30,
                        nbytes=4096)
        expected.append({"name": m["name"], "ts": b.ns(m), "stream": 7})
        ar = b.cpu_op("nccl:all_reduce", ts=t + 180, dur=40)
        _, c = b.launch(ar, kernel=NCCL, kernel_ts=t + 300, kernel_dur=150, stream=13)
        expected.append({"name": c["name"], "ts": b.ns(c), "stream": 13})
        for j, name in enumerate(names):
            op2 = b.cpu_op(name, ts=t + 500 + 40 * j, dur=30)
            _, k2 = b.launch(op2, kernel=name, kernel_ts=t + 600 + 40 * j, kernel_dur=20)
            expected.append({"name": name, "ts": b.ns(k2), "stream": 7})
    return b.write(path), expected


def decode(p: dict[str, Any]) -> dict[str, np.ndarray]:
    ev = p["events"]
    arrays = {key: np.frombuffer(base64.b64decode(ev[key]), dtype=dtype)
              for key, dtype in (("t", "<f8"), ("d", "<f4"), ("n", "<u4"), ("k", "u1"))}
    arrays["src"] = np.frombuffer(base64.b64decode(p["flows"]["src"]), dtype="<i4")
    arrays["dst"] = np.frombuffer(base64.b64decode(p["flows"]["dst"]), dtype="<i4")
    return arrays


def page_payload(paths: list[Path], max_events: int | None = None) -> dict[str, Any]:
    report, data = app.analyze_with_timeline([str(p) for p in paths], app.AnalyzeOptions(workers=1))
    assert data is not None
    return payload(report, data) if max_events is None else payload(report, data, max_events=max_events)


def track_of(p: dict[str, Any], index: int) -> dict[str, Any]:
    for track in p["tracks"]:
        if any(lo <= index < hi for lo, hi in track["rows"]):
            return track  # type: ignore[no-any-return]
    raise AssertionError(f"event {index} is in no track")


def test_every_device_activity_at_its_offset(tmp_path: Path) -> None:
    path, expected = build_trace(tmp_path / "t.json")
    p = page_payload([path])
    a = decode(p)
    trace = aiprof.load(path)
    assert isinstance(trace, aiprof.Trace)
    origin = trace.base_time_ns + int(trace.columns.ts[trace.columns.kind != 13].min())
    assert p["origin_ns"] == origin and p["clock"] == "unix"
    names = p["strings"]
    for want in expected:
        offset = trace.base_time_ns + want["ts"] - origin
        hits = [i for i in np.flatnonzero(a["t"] == offset).tolist() if names[a["n"][i]] == want["name"]]
        assert len(hits) == 1, want
        track = track_of(p, hits[0])
        assert track["kind"] == "stream" and track["label"].endswith(f"stream {want['stream']}")
    # Every kernel of the trace is there, none twice.
    kernels = trace.kernels()
    assert int(np.isin(a["k"], [Category.COMPUTE, Category.COMMUNICATION]).sum()) == len(kernels)
    # Collectives are communication, on the device and on the host.
    comm = {names[a["n"][i]] for i in np.flatnonzero(a["k"] == Category.COMMUNICATION).tolist()}
    assert comm == {NCCL}
    host_comm = {names[a["n"][i]] for i in np.flatnonzero(a["k"] == Category.CPU_COMMUNICATION).tolist()}
    assert host_comm == {"nccl:all_reduce"}
    # The steps band: one event per step window of the analysis, at its offset.
    steps = [t for t in p["tracks"] if t["kind"] == "steps"]
    assert len(steps) == 1
    lo, hi = steps[0]["rows"][0]
    windows = step_windows(trace)
    assert [names[i] for i in a["n"][lo:hi]] == [w.name for w in windows]
    assert a["t"][lo:hi].tolist() == [float(trace.base_time_ns + w.start_ns - origin) for w in windows]


def test_flows_link_each_launch_to_its_activity(tmp_path: Path) -> None:
    path, expected = build_trace(tmp_path / "t.json")
    p = page_payload([path])
    a = decode(p)
    names = p["strings"]
    assert len(a["src"]) == len(expected)
    launched = sorted(names[a["n"][d]] for d in a["dst"].tolist())
    assert launched == sorted(e["name"] for e in expected)
    for s, d in zip(a["src"].tolist(), a["dst"].tolist()):
        assert names[a["n"][s]] in ("cudaLaunchKernel", "cudaMemcpyAsync")
        assert track_of(p, s)["kind"] == "cpu" and track_of(p, d)["kind"] == "stream"
        assert a["t"][s] < a["t"][d]  # the launch comes first


def test_cpu_rows_are_nesting_depths(tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json")
    trace = aiprof.load(path)
    assert isinstance(trace, aiprof.Trace)
    tl = rank_timeline(trace, step_windows(trace))
    cpu = [i for i in range(len(tl)) if tl.track_kind[int(tl.track[i])] == "cpu"]
    depth = {tl.strings[int(tl.name[i])]: int(tl.row[i]) for i in cpu}
    assert depth["aten::mm"] == 0  # the step annotation has its own band: ops start at depth 0
    assert depth["cudaLaunchKernel"] == 1


def test_ranks_share_one_clock(tmp_path: Path) -> None:
    shift = 5_000_123  # rank 1 started 5 ms later on the unix clock
    p0, e0 = build_trace(tmp_path / "rank0.json", rank=0)
    p1, e1 = build_trace(tmp_path / "rank1.json", rank=1, base_time_ns=1_700_000_000_000_000_000 + shift)
    p = page_payload([p0, p1])
    a = decode(p)
    assert [r["rank"] for r in p["ranks"]] == [0, 1]
    names = p["strings"]
    gemm = names.index("sm90_xmma_gemm_f32f32")
    rank_of = np.array([track_of(p, i)["rank"] for i in range(len(a["t"]))])
    t0 = np.sort(a["t"][(a["n"] == gemm) & (rank_of == 0)])
    t1 = np.sort(a["t"][(a["n"] == gemm) & (rank_of == 1)])
    assert t0.size == t1.size == 3
    assert (t1 - t0).tolist() == [float(shift)] * 3


def test_trace_strings_are_escaped_data(tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json", names=HOSTILE)
    raw = json.loads(path.read_text())  # a thread named like markup, with an op on it
    raw["traceEvents"].append({"name": "thread_name", "ph": "M", "ts": 0, "pid": 4242, "tid": 77,
                               "args": {"name": HOSTILE[1]}})
    raw["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 4242, "tid": 77,
                               "ts": raw["traceEvents"][0]["ts"], "dur": 5, "args": {}})
    path.write_text(json.dumps(raw))
    report, data = app.analyze_with_timeline([str(path)], app.AnalyzeOptions(workers=1))
    assert data is not None
    assert HOSTILE[1] in [t["label"] for t in payload(report, data)["tracks"]]  # the label is data, unchanged
    html = section(report, data)
    start = html.index('id="aiprof-timeline">') + len('id="aiprof-timeline">')
    block = html[start : html.index("</script>", start)]
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in block
    assert set(HOSTILE) <= set(json.loads(block)["strings"])  # the names themselves, unchanged
    # The block ends where the page means it to: only two script elements, the data and the viewer.
    assert len(re.findall(r"<script\b", html)) == 2 and html.count("</script>") == 2
    assert json_script('"</script><!--\u2028"') == '"\\u003c/script\\u003e\\u003c!--\\u2028"'


def test_csp_pins_the_viewer_script(tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json")
    report, data = app.analyze_with_timeline([str(path)], app.AnalyzeOptions(workers=1))
    page = app.render(report, "html", app.RenderOptions(timeline=data))
    meta = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert meta is not None
    policy = meta.group(1)
    assert policy == csp(CSP, script_text()) == CSP + f"; script-src {script_hash(script_text())}"
    assert policy.startswith("default-src 'none';")
    assert "unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    inline = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert inline == [script_text()]
    # Without the timeline, the page has no script and forbids all.
    plain = app.render(report, "html")
    assert "<script>" not in plain and "script-src" not in plain


def test_cap_keeps_the_longest_and_covers_the_rest(tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json", steps=6, names=("k_a", "k_b", "k_c"))
    trace = aiprof.load(path)
    assert isinstance(trace, aiprof.Trace)
    windows = step_windows(trace)
    full = rank_timeline(trace, windows)
    capped = rank_timeline(trace, windows, max_events=40)
    assert len(capped) <= 40 < len(full) and capped.total_events == full.total_events
    steps = [i for i, k in enumerate(capped.track_kind) if k == "steps"][0]
    assert int((capped.track == steps).sum()) == len(windows)  # the steps band stays whole
    assert any("shortest events" in line for line in capped.left_out)
    for t in range(len(full.track_kind)):
        if full.track_kind[t] == "steps":
            continue
        kept = np.sort(capped.dur_ns[capped.track == t])[::-1]
        every = np.sort(full.dur_ns[full.track == t])[::-1]
        assert kept.tolist() == every[: kept.size].tolist()  # the longest of each track
        dropped = int(every.sum() - kept.sum())
        covered = sum(float(c.busy_ns.sum()) for c in capped.coverage if c.track == t)
        assert covered == pytest.approx(dropped)  # what is left out is drawn as coverage
    # Flows only between kept events, still launch -> activity.
    names = [capped.strings[i] for i in capped.name.tolist()]
    for s, d in zip(capped.flow_src.tolist(), capped.flow_dst.tolist()):
        assert names[s].startswith("cuda") and capped.start_ns[s] < capped.start_ns[d]
    # The page says what it left out.
    report, data = app.analyze_with_timeline([str(path)], app.AnalyzeOptions(workers=1))
    assert data is not None
    p = payload(report, data, max_events=40)
    assert p["events"]["count"] <= 40 and p["total_events"] == full.total_events
    assert p["coverage"] and any("shortest events" in line for line in p["left_out"])


def test_findings_point_at_their_evidence(tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json", names=("my_slow_kernel",))
    report, data = app.analyze_with_timeline([str(path)], app.AnalyzeOptions(workers=1))
    assert data is not None
    from aiprof.rules.finding import FindingRecord

    record = FindingRecord(id="planted", title="t", severity="high", est_saving_ns_per_step=1, share_of_step=0.1,
                           confidence="low", evidence={"top_kernels": [{"name": "my_slow_kernel", "total_ns": 5}]},
                           fix="")
    import msgspec

    doc = msgspec.structs.replace(report, findings=[record])
    p = payload(doc, data)
    (target,) = p["findings"]
    assert target["names"] == [p["strings"].index("my_slow_kernel")]
    slowest = max(doc.ranks[0].steps, key=lambda s: s.duration_ns)
    assert target["step"][2] == slowest.name and target["step"][1] - target["step"][0] == slowest.duration_ns


def test_other_outputs_do_not_pay(tmp_path: Path) -> None:
    """JSON, terminal and Markdown reports never build the timeline, and the JSON report is unchanged."""
    path, _ = build_trace(tmp_path / "t.json")
    from aiprof.pipeline import analyze_and_diagnose

    run, _ = analyze_and_diagnose([str(path)], workers=1)
    assert all(r.diagnosis is not None and r.diagnosis.timeline is None for r in run.ranks)
    run2, _ = analyze_and_diagnose([str(path)], workers=1, timeline=1000)
    assert all(r.diagnosis is not None and r.diagnosis.timeline is not None for r in run2.ranks)
    plain = app.analyze([str(path)], app.AnalyzeOptions(workers=1))
    with_tl, data = app.analyze_with_timeline([str(path)], app.AnalyzeOptions(workers=1))
    assert data is not None
    as_json = app.render(with_tl, "json", app.RenderOptions(timeline=data))
    assert "aiprof-timeline" not in as_json and '"timeline"' not in as_json
    strip = re.compile(r'"generated[^"]*":"[^"]*"')
    assert strip.sub("", as_json) == strip.sub("", app.render(plain, "json"))


def test_telemetry_counters_become_tracks(tmp_path: Path) -> None:
    path, _ = build_trace(tmp_path / "t.json")
    report, data = app.analyze_with_timeline([str(path)], app.AnalyzeOptions(workers=1))
    assert data is not None
    origin = payload(report, data)["origin_ns"]
    samples = [origin - 500_000 + 400_000 * i for i in range(12)]
    telemetry = RunTelemetry(path="", samples=12, t_unix_ns=samples, series={"cpu_pct": [float(10 * i) for i in range(12)]})
    p = payload(report, TimelineInput(data.ranks, telemetry))
    (counter,) = p["counters"]
    assert counter["label"] == "cpu_pct" and counter["unit"] == "%"
    assert counter["t"][0] < 0 <= counter["t"][1] and counter["t"][-1] >= p["span_ns"]  # one sample either side
    assert len(counter["t"]) < len(samples)  # only the samples of the shown span (and one each side)


def test_ranks_without_a_common_clock_each_start_at_zero(tmp_path: Path) -> None:
    """Traces on a clock of their own (no unix base time, small timestamps) cannot be aligned: each rank
    starts at 0 and the page says so."""
    p0, _ = build_trace(tmp_path / "rank0.json", rank=0, base_time_ns=0)
    p1, _ = build_trace(tmp_path / "rank1.json", rank=1, base_time_ns=0)
    p = page_payload([p0, p1])
    assert p["clock"] == "per-rank" and p["origin_ns"] is None
    assert any("not on one clock" in line for line in p["left_out"])
    a = decode(p)
    firsts = {r: min(a["t"][i] for i in range(len(a["t"])) if track_of(p, i)["rank"] == r) for r in (0, 1)}
    assert firsts == {0: 0.0, 1: 0.0}


def test_legacy_unix_timestamps_align_ranks(tmp_path: Path) -> None:
    """Kineto traces without baseTimeNanoseconds whose timestamps are unix µs are on one clock already."""
    paths = []
    for rank, origin in ((0, 1_623_142_623_000_000), (1, 1_623_142_623_002_000)):
        b = TraceBuilder("legacy", legacy_origin_us=origin)
        b.distributed(rank, 2)
        b.step(0, ts=0, dur=500)
        op = b.cpu_op("aten::mm", ts=10, dur=100)
        b.launch(op, kernel="gemm", kernel_ts=50, kernel_dur=200)
        paths.append(b.write(tmp_path / f"rank{rank}.json"))
    p = page_payload(paths)
    assert p["clock"] == "unix"
    a = decode(p)
    gemm = p["strings"].index("gemm")
    t = {track_of(p, i)["rank"]: float(a["t"][i]) for i in np.flatnonzero(a["n"] == gemm).tolist()}
    assert t[1] - t[0] == 2_000_000.0  # rank 1 started 2 ms later


def test_the_run_budget_is_shared_by_its_ranks() -> None:
    from aiprof.analysis.explore import MAX_RANKS, RUN_EVENTS, rank_budget

    assert rank_budget(1) == 250_000  # one rank: its own cap
    assert rank_budget(8) == RUN_EVENTS // 8
    assert rank_budget(MAX_RANKS) * MAX_RANKS <= RUN_EVENTS
    assert rank_budget(MAX_RANKS + 1) == 0  # thousands of ranks: not gathered at all


def test_run_directory_telemetry_reaches_the_page(tmp_path: Path) -> None:
    """An `aiprof run` directory's telemetry.csv becomes counter tracks, on the trace's clock."""
    import csv

    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"format": "aiprof-run"}))
    path, _ = build_trace(run / "rank0.pt.trace.json")
    base = 1_700_000_000_000_000_000
    with (run / "telemetry.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_unix_ns", "cpu_pct", "mem_used_bytes"])
        for k in range(-5, 40):
            w.writerow([base + k * 100_000, 5.0 + k, 1e9 + k])
    p = page_payload([path])
    counters = {c["label"]: c for c in p["counters"]}
    assert set(counters) == {"cpu_pct", "mem_used_bytes"}
    cpu = counters["cpu_pct"]
    assert p["origin_ns"] == base  # the first step starts at the trace's base time
    assert cpu["t"][0] == 0 and cpu["v"][0] == 5.0  # the sample at the run's start (none before it kept)
    assert cpu["t"][-2] < p["span_ns"] <= cpu["t"][-1]  # through the span's end, and one sample past it
    assert cpu["t"] == list(range(0, cpu["t"][-1] + 1, 100_000))
