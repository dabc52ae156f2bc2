"""The JSON report of every shared real trace the tests analyse, as section digests.

Each input is built as ``aiprof analyze --format json INPUT`` builds it (``pipeline.analyze_and_diagnose``
then ``report.document.build_document`` with the default options, encoded as ``JsonRenderer`` writes it)
and summarised as one short sha256 digest per top-level section and per rank section (over every rank:
``ranks.kernels`` covers ``ranks[i].kernels`` of each rank ``i``), plus the digest of the whole file and
the id of its first finding (to read a diff). ``tests/golden/shared_reports.json`` holds the expected
digests; ``tests/golden/test_golden_reports.py`` compares them and ``python -m tests.golden.regen`` (or
``make golden``) rewrites the file.

What is taken out because it depends on the machine, not on aiprof (nothing else is):

- the folder the shared traces are in (``sources``, ``ranks[].path`` and any note or warning naming the
  file): the checkout's absolute path, replaced by ``<shared>`` in the bytes;
- the measured-peaks file of the user running the tests (``~/.cache/aiprof/peaks.json``, or
  ``$AIPROF_PEAKS_FILE``), which the roofline prefers to the spec-sheet peaks: ignored while building
  (``AIPROF_PEAKS_FILE`` points to no file), so the roofline uses the spec sheets on every machine.

No field of the report depends on the timing of the analysis itself (no wall-clock stamp, duration of
the analysis, host name or core count is written): every number comes from the trace. The run context
(``run_metadata``, ``telemetry``, ``run_status``, ``whole_run``) of an ``aiprof run`` directory would
carry the capture's own times, but no shared trace is a run directory, so those sections are absent.

The session cache (:func:`analysed`) is shared with ``tests/rules/test_rules_real_traces.py``, which
analyses the same traces with the same pipeline: in ``make test`` each trace is analysed once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[2]
SHARED = (REPO / ".." / "shared" / "traces").resolve()
GOLDEN = Path(__file__).resolve().parent / "shared_reports.json"
REGENERATE = ".venv/bin/python -m tests.golden.regen  (or: make golden)"
DIGEST_CHARS = 16  # 64 bits of sha256: a change is never missed by chance, and the file stays readable

# Every shared input the tests analyse end to end: the diagnosis's real traces
# (tests/rules/test_rules_real_traces.py), the Nsight Systems databases (tests/nsys/), TraceLens's MoE
# micro-benchmarks (tests/integration/test_compat_tracelens.py), the kineto docs' before/after pair and
# HTA's critical-path input. Every reader (Kineto JSON and gzip, one file and a folder of ranks, Nsight
# SQLite) and every section the report has for a bare trace is in it.
INPUTS: tuple[str, ...] = (
    "astra-sim/megatron_tp8",
    "edge/zoology_a100_no_kernels.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/call_stack/backward_thread.json",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    "hta/critical_path/end_to_end/simple_add/input/trace.json.gz",
    "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz",
    "hta/execution_trace/benchmark_simple_add_trace.json.gz",
    "hta/mixed_files/rank_non_gpu.json.gz",
    "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/rank_non_gpu/rank_non_gpu.json.gz",
    "hta/rank_unavailable/rank_not_found.json.gz",
    "hta/timeline_analysis/sampled_rank-0.json.gz",
    "hta/trace_compare/base/base.json.gz",
    "hta/trace_compare/test/test.json.gz",
    "hta/trace_diff/control/control.json.gz",
    "hta/trace_diff/test/test.json.gz",
    "hta/trace_file_list/inference_rank_1.json.gz",
    "hta/trace_filter",
    "hta/triton_example/triton_example.json.gz",
    "kineto-tbplugin/docs/traces/after_fix_trace.json",
    "kineto-tbplugin/docs/traces/before_fix_trace.json",
    "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz",
    "kineto-tbplugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto-tbplugin/samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz",
    "nsys/extrap_con_kernel_old_schema.sqlite",
    "nsys/perlmutter-cloverleaf-cuda.sqlite",
    "nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "param/dlrm_8rank",
    "param/linear_kineto.json.gz",
    "param/resnet_kineto.json.gz",
    "tracelens/b200/eager_trace.json.gz",
    "tracelens/evals/unit_tests_nv/moe/moe_01_many_experts_few_tokens_analysis_output/moe_01_many_experts_few_tokens.json.gz",
    "tracelens/evals/unit_tests_nv/moe/moe_02_few_experts_many_tokens_analysis_output/moe_02_few_experts_many_tokens.json.gz",
    "tracelens/evals/unit_tests_nv/moe/moe_03_top1_sparse_analysis_output/moe_03_top1_sparse.json.gz",
    "tracelens/evals/unit_tests_nv/moe/moe_04_top2_dense_analysis_output/moe_04_top2_dense.json.gz",
    "tracelens/evals/unit_tests_nv/moe/moe_05_large_capacity_analysis_output/moe_05_large_capacity.json.gz",
    "tracelens/evals/unit_tests_nv/moe/moe_06_tiny_batch_many_experts_analysis_output/moe_06_tiny_batch_many_experts.json.gz",
    "tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "tracelens/inference/vllm_decode_full/graph_execution.json.gz",
    "tracelens/inference/vllm_prefilldecode_piecewise/capture_traces/graph_capture_rank_0.1773709679453551615.pt.trace.json.gz",
    "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
    "tracelens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz",
    "tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz",
    "tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz",
    "tracelens/mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "tracelens/mi300/resnet_act_checkpoint.json.gz",
    "tracelens/perf_model/normalization/normalization_layer_test.json.gz",
    "tracelens/torch_compile_triton/trace.json.gz",
)


@contextlib.contextmanager
def no_measured_peaks() -> Iterator[None]:
    """The roofline without the user's measured-peaks file (spec-sheet peaks, the same on every machine)."""
    saved = os.environ.get("AIPROF_PEAKS_FILE")
    os.environ["AIPROF_PEAKS_FILE"] = str(REPO / "build" / "golden-no-peaks" / "peaks.json")  # never written
    try:
        yield
    finally:
        if saved is None:
            del os.environ["AIPROF_PEAKS_FILE"]
        else:
            os.environ["AIPROF_PEAKS_FILE"] = saved


@functools.cache
def analysed(rel: str) -> tuple[Any, list[Any]]:
    """``(run, findings)`` of a shared input, as ``aiprof analyze`` computes them (once per session)."""
    from aiprof.pipeline import analyze_and_diagnose

    with no_measured_peaks():
        return analyze_and_diagnose([SHARED / rel])


def report_bytes(rel: str) -> bytes:
    """The JSON report file ``aiprof analyze --format json`` writes for ``rel``, the shared folder's
    absolute path replaced by ``<shared>``."""
    from aiprof.report.document import build_document
    from aiprof.report.json_report import JsonRenderer

    run, findings = analysed(rel)
    with no_measured_peaks():
        text = JsonRenderer().render(build_document(run, findings))
    return normalise(text.encode())


def normalise(raw: bytes) -> bytes:
    """``raw`` without what depends on the machine: the shared folder's absolute path."""
    return raw.replace(str(SHARED).encode(), b"<shared>")


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))  # framed: moving bytes between parts changes the digest
        h.update(part)
    return h.hexdigest()[:DIGEST_CHARS]


def digests(raw: bytes) -> dict[str, Any]:
    """The golden entry of one report file: its whole digest, its first finding's id and one digest per
    section (``ranks.<name>`` for each rank field, over every rank in order; absent where no rank has it)."""
    top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    sections: dict[str, str] = {}
    for key, value in top.items():
        if key != "ranks":
            sections[key] = _digest(bytes(value))
            continue
        ranks = msgspec.json.decode(bytes(value), type=list[dict[str, msgspec.Raw]])
        sections["ranks"] = _digest(str(len(ranks)).encode())
        names = list(dict.fromkeys(name for rank in ranks for name in rank))
        for name in names:
            sections[f"ranks.{name}"] = _digest(*(bytes(rank[name]) if name in rank else b"-" for rank in ranks))
    findings = msgspec.json.decode(bytes(top["findings"])) if "findings" in top else []
    return {"report": _digest(raw), "first_finding": findings[0]["id"] if findings else None, "sections": sections}


def available() -> list[str]:
    """The inputs present in this copy of the shared traces."""
    return [rel for rel in INPUTS if (SHARED / rel).exists()]


def changes(rel: str, expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """What differs between two golden entries of ``rel``, one line per section."""
    lines = []
    if expected.get("first_finding") != actual["first_finding"]:
        lines.append(f"{rel}: first finding {expected.get('first_finding')!r} -> {actual['first_finding']!r}")
    old, new = expected.get("sections", {}), actual["sections"]
    for name in list(dict.fromkeys([*old, *new])):
        if name not in new:
            lines.append(f"{rel}: section {name} is gone")
        elif name not in old:
            lines.append(f"{rel}: section {name} is new")
        elif old[name] != new[name]:
            lines.append(f"{rel}: section {name} changed")
    if not lines and expected.get("report") != actual["report"]:
        lines.append(f"{rel}: the file changed (section order or layout)")
    return lines
