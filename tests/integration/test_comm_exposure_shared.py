"""Exposed vs hidden communication per process group and phase (issue #26) on the shared multi-rank traces
(Megatron TP8, DLRM 8-rank: MANIFEST.md) and two traces that name their process groups (HTA's NCCL metadata
trace, the MI300X DDP ResNet), checked against an independent computation from the raw Kineto JSON: gzip +
json, the kernels' own intervals, the launch found by correlation id, the ops around it by time on its thread,
plain Python interval arithmetic. Nothing of aiprof's analysis is used on that side; only the step windows are
taken from the report (they are not what is tested here)."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from aiprof.report.document import build_document
from aiprof.report.model import Report
from tests.golden.shared_reports import analysed

MULTI_RANK = ("astra-sim/megatron_tp8", "param/dlrm_8rank")
NAMED_GROUPS = ("hta/nccl_parser_config/nccl_data.json.gz", "tracelens/mi300/resnet_act_checkpoint.json.gz")
Interval = tuple[int, int]


def _report(rel: str) -> Report:
    run, findings = analysed(rel)
    return build_document(run, findings)


def _ns(us: float) -> int:
    return round(us * 1000)


def _merge(spans: list[Interval]) -> list[Interval]:
    out: list[list[int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(xs: list[Interval]) -> int:
    return sum(b - a for a, b in xs)


def _phase_of_name(name: str) -> str | None:
    if re.match(r"Optimizer\.(step|zero_grad)", name):
        return "optimizer"
    if name.startswith("autograd::engine::evaluate_function") or "backward" in name.lower() or "ddp.reducer::" in name:
        return "backward"
    if name.startswith("nn.Module: ") or "forward" in name.lower():
        return "forward"
    return None


def independent(path: Path, windows: list[Interval]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per (process group, phase): (kernels, communication ns, hidden ns) inside ``windows``, from the raw JSON."""
    raw = json.loads(gzip.open(path).read())
    events = [e for e in (raw["traceEvents"] if isinstance(raw, dict) else raw) if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    comm = [k for k in kernels if re.match(r"(?i)(void )?(nccl|rccl)", k["name"])]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    host = defaultdict(list)
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            host[(e["pid"], e["tid"])].append(e)
    opt = _merge([(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for ops in host.values() for e in ops
                  if re.match(r"Optimizer\.(step|zero_grad)", e["name"])])
    backward = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for ops in host.values() for e in ops
                if e["name"].startswith("autograd::engine::evaluate_function")]
    steps = _merge(windows)
    out: dict[tuple[str, str], list[Any]] = {}
    for dev in {k["args"]["device"] for k in comm}:
        compute = _merge([(_ns(k["ts"]), _ns(k["ts"]) + _ns(k["dur"])) for k in kernels
                          if k["args"]["device"] == dev and k not in comm])
        for k in (k for k in comm if k["args"]["device"] == dev):
            span = (_ns(k["ts"]), _ns(k["ts"]) + _ns(k["dur"]))
            if not _intersect([span], steps):
                continue
            launch = launches.get(k["args"]["correlation"])
            around = sorted((e for e in host[(launch["pid"], launch["tid"])]
                             if e["ts"] <= launch["ts"] < e["ts"] + e["dur"]), key=lambda e: (e["ts"], -e["dur"])
                            ) if launch else []
            group = k["args"].get("Process Group Name")
            if group is None:
                group = next((e["args"]["Process Group Name"] for e in reversed(around)
                              if e["name"] == "record_param_comms" and "Process Group Name" in e.get("args", {})),
                             "default")
            named = [p for p in (_phase_of_name(e["name"]) for e in around) if p]
            phase = min(named, key=("optimizer", "backward", "forward").index) if named else None
            if phase is None:
                t = _ns(around[-1]["ts"]) if around else _ns(launch["ts"]) if launch else span[0]
                lo, hi = next(w for w in windows if w[0] <= t < w[1]) if any(w[0] <= t < w[1] for w in windows) \
                    else next(w for w in windows if w[0] <= span[0] < w[1])
                in_step = [(a, b) for a, b in backward if lo <= a < hi]  # the step's backward ops
                if _intersect([(t, t + 1)], opt):
                    phase = "optimizer"
                elif not in_step or t < min(a for a, _ in in_step):
                    phase = "forward"
                else:
                    phase = "backward" if t < max(b for _, b in in_step) else "other"
            row = out.setdefault((str(group), phase), [0, [], compute])
            row[0] += 1
            row[1].append(span)
    result = {}
    for key, (count, spans, compute) in out.items():
        inside = _intersect(_merge(spans), steps)
        result[key] = (count, _length(inside), _length(_intersect(inside, compute)))
    return result


def _checked(rel: str, traces_dir: Path) -> int:
    report = _report(rel)
    compared = 0
    for rank in report.ranks:
        windows = [(s.start_ns, s.start_ns + s.duration_ns) for s in rank.steps]
        expected = independent(Path(rank.path), windows)
        comm = rank.communication
        assert comm, rank.path
        (device,) = comm.exposure  # one GPU per rank in these traces
        got = {}
        for r in device.rows:
            count, c, h = got.get((r.group, r.phase), (0, 0, 0))
            got[(r.group, r.phase)] = (count + r.kernels, c, h)
        # Rows of one (group, phase) differ by collective only; their union is measured here from the groups
        # and phases: compare (group, phase) kernel counts from the rows, ns where one key is one row
        assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in expected.items()}, rank.path
        for r in device.rows:
            if sum(1 for x in device.rows if (x.group, x.phase) == (r.group, r.phase)) == 1:
                assert (r.comm_ns, r.hidden_ns) == expected[(r.group, r.phase)][1:], (rank.path, r)
                assert r.exposed_ns == r.comm_ns - r.hidden_ns
                compared += 1
        # Per phase and per group: the union over the (group, phase) keys of that phase or group
        for p in device.by_phase:
            keys = [k for k in expected if k[1] == p.phase]
            assert p.kernels == sum(expected[k][0] for k in keys)
            if len(keys) == 1:
                assert (p.comm_ns, p.hidden_ns) == expected[keys[0]][1:], (rank.path, p)
        for g in device.by_group:
            keys = [k for k in expected if k[0] == g.group]
            assert g.kernels == sum(expected[k][0] for k in keys)
            if len(keys) == 1:
                assert (g.comm_ns, g.hidden_ns) == expected[keys[0]][1:], (rank.path, g)
        # The device's exposed time is the timeline's communication bucket over the steps
        assert device.exposed_ns == sum(s.breakdown_ns["communication"] for s in rank.steps)
        assert device.steps == len(rank.steps)
        assert device.exposed_ns_per_step == device.exposed_ns // len(rank.steps)
    return compared


@pytest.mark.parametrize("rel", MULTI_RANK + NAMED_GROUPS)
def test_exposure_matches_an_independent_computation(rel: str, traces_dir: Path) -> None:
    assert _checked(rel, traces_dir) > 0


def test_phases_follow_the_training_step(traces_dir: Path) -> None:
    # Megatron TP8: a forward-only recording (no backward op): every tensor-parallel all-reduce is forward,
    # and none of it is hidden (the all-reduce sits between the matmuls that need it)
    for rank in _report("astra-sim/megatron_tp8").ranks:
        assert rank.communication
        (d,) = rank.communication.exposure
        assert [(p.phase, p.kernels) for p in d.by_phase] == [("forward", 84)]
        assert d.phase_from_time == 84 and d.hidden_ns == 0
    # DDP (HTA's NCCL trace, MI300X ResNet): buffers broadcast in forward, gradients all-reduced in backward,
    # on the named default group
    for rel in NAMED_GROUPS:
        rank = _report(rel).ranks[0]
        assert rank.communication
        (d,) = rank.communication.exposure
        kinds = {(r.group, r.phase, r.collective) for r in d.rows if r.group == "0"}
        assert {("0", "forward", "broadcast"), ("0", "backward", "all_reduce")} <= kinds, rel
        assert next(g for g in d.by_group if g.group == "0").group_desc == "default_pg"
        assert next(p for p in d.by_phase if p.phase == "backward").hidden_ns > 0  # DDP overlaps its buckets


def test_every_format_shows_it(traces_dir: Path) -> None:
    from aiprof import app

    report = _report("param/dlrm_8rank")
    focus = next(r for r in report.ranks if r.rank == report.summary.slowest_rank)
    assert focus.communication
    (d,) = focus.communication.exposure
    for fmt in ("terminal", "md", "html"):
        text = " ".join(app.render(report, fmt, app.RenderOptions(width=400)).split())
        assert "exposed vs hidden" in text.lower(), fmt
        assert f"rank {focus.rank} (the slowest)" in text, fmt
        assert "by phase: forward" in text, fmt
    doc = json.loads(app.render(report, "json"))
    exposure = doc["ranks"][0]["communication"]["exposure"][0]
    assert list(exposure)[:8] == ["device", "steps", "kernels", "comm_ns", "hidden_ns", "exposed_ns",
                                  "exposed_ns_per_step", "hidden_pct"]
    assert {p["phase"] for p in exposure["by_phase"]} <= {"forward", "backward", "optimizer", "other"}


def test_a_cpu_only_run_splits_its_gloo_all_reduces(traces_dir: Path) -> None:
    # HTA's CPU-only rank: gloo all-reduces on the host are its communication bucket, split the same way
    from aiprof import app

    report = _report("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    for fmt in ("terminal", "md", "html"):  # no kernel rows above it: the block still shows
        assert "exposed vs hidden" in app.render(report, fmt).lower(), fmt
    rank = report.ranks[0]
    assert rank.primary_device == "cpu" and rank.communication
    (d,) = rank.communication.exposure
    assert d.device == -1 and d.kernels > 0
    assert d.exposed_ns == sum(s.breakdown_ns["communication"] for s in rank.steps) > 0
    assert {r.collective for r in d.rows} == {"all_reduce"}
    assert sum(p.kernels for p in d.by_phase) == d.kernels
