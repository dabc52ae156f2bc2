"""Compiled kernels back to their ops on every shared trace with Inductor kernels: aiprof's attribution
(aiprof.analysis.inductor) against an independent parse of the raw JSON (json module, External id /
correlation joins written here). Where the trace names the fused ops (the kernel's own name, or the CPU op
Inductor wraps its launch in), >= 95 % of the Triton GPU time must be attributed to ops; where it names
none (pre-2.1 numbered kernels launched straight from CompiledFunction), every kernel must at least be
attributed to its compiled graph."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import aiprof
from aiprof.analysis.inductor import compiled_kernels, compiled_kernels_section

WITH_OPS = [
    "tracelens/torch_compile_triton/trace.json.gz",
    "tracelens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz",
    "tracelens/inference/vllm_decode_full/graph_execution.json.gz",
    "hta/triton_example/triton_example.json.gz",
    *(f"astra-sim/megatron_tp8/megatron_kineto_{i}.json.gz" for i in range(8)),
]
GRAPH_ONLY = ["hta/negative_queue_length_values_check/rank0.json.gz"]
_NAMED = re.compile(r"^(triton_(poi|red|per|tem|for|mix)_fused_|cpp_fused_)(.+?)_\d+$")


def _raw(path: Path) -> dict[str, Any]:
    """Per Inductor kernel name, parsed here: device time (ns), calls, and the op-bearing name (its own,
    else that of the ``triton_*`` CPU op its launch call ran in: same External id, else around the launch
    on its thread) or None."""
    data = json.load(gzip.open(path, "rt"))
    events = [e for e in (data if isinstance(data, list) else data["traceEvents"]) if e.get("ph") == "X"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("triton")]
    op_by_ext = {str(e.get("args", {}).get("External id")): e["name"] for e in ops}
    launches = {str(e["args"]["correlation"]): e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}

    def launching_op(kernel: dict[str, Any]) -> str:
        args = kernel.get("args", {})
        if str(args.get("External id")) in op_by_ext:
            return op_by_ext[str(args.get("External id"))]
        call = launches.get(str(args.get("correlation")))
        if call is None:
            return ""
        around = [o for o in ops if (o["pid"], o["tid"]) == (call["pid"], call["tid"])
                  and float(o["ts"]) <= float(call["ts"]) < float(o["ts"]) + float(o["dur"])]
        return around[-1]["name"] if around else ""

    out: dict[str, Any] = defaultdict(lambda: {"ns": 0, "calls": 0, "named": None})
    for e in events:
        if e.get("cat") != "kernel" or not str(e["name"]).startswith(("triton", "cpp_fused")):
            continue
        row = out[e["name"]]
        row["ns"] += round(float(e["dur"]) * 1000)
        row["calls"] += 1
        for candidate in (e["name"], launching_op(e)):
            m = _NAMED.match(candidate)
            if m and not m.group(3).isdigit():
                row["named"] = m.group(3)
                break
    return dict(out)


@pytest.mark.parametrize("rel", WITH_OPS)
def test_inductor_kernels_are_attributed_to_their_fused_ops(traces_dir: Path, rel: str) -> None:
    path = traces_dir / rel
    raw = _raw(path)
    trace = aiprof.load(path)
    assert isinstance(trace, aiprof.Trace)
    ours = {k.name: k for k in compiled_kernels(trace)}
    assert set(ours) == set(raw)
    total = sum(r["ns"] for r in raw.values())
    for name, r in raw.items():
        k = ours[name]
        assert k.calls == r["calls"] and abs(k.gpu_ns - r["ns"]) <= r["calls"], name
        if r["named"]:
            assert "_".join(k.ops) == r["named"], name  # the split is lossless: the ops join back to the name
        else:
            assert not k.ops, name
    section = compiled_kernels_section(trace)
    assert section.gpu_ns == sum(k.gpu_ns for k in ours.values())
    named_ns = sum(r["ns"] for r in raw.values() if r["named"])
    assert named_ns >= 0.95 * total
    assert section.attributed_share >= 0.95


@pytest.mark.parametrize("rel", GRAPH_ONLY)
def test_numbered_kernels_without_op_names_are_attributed_to_their_compiled_graph(traces_dir: Path, rel: str) -> None:
    path = traces_dir / rel
    raw = _raw(path)
    assert raw and not any(r["named"] for r in raw.values())  # the trace names no fused op anywhere
    trace = aiprof.load(path)
    assert isinstance(trace, aiprof.Trace)
    section = compiled_kernels_section(trace)
    assert section.attributed_share == 0.0
    assert section.in_graph_gpu_ns == section.gpu_ns == sum(k.gpu_ns for k in compiled_kernels(trace))
    assert all(set(k.graphs) <= {"CompiledFunction", "CompiledFunctionBackward"} for k in compiled_kernels(trace))
