"""MFU per op class and per ``nn.Module`` on a real torch.profiler CPU trace (a tiny model with stacks, so
modules are recorded): each Linear's FLOPs checked against a hand computation from its shapes."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

torch = pytest.importorskip("torch")

import aiprof  # noqa: E402
from aiprof.analysis.steps import step_windows  # noqa: E402
from aiprof.roofline.mfu import MfuReport, mfu_detail_lines, mfu_section  # noqa: E402
from aiprof.roofline.peaks import DevicePeaks  # noqa: E402

from test_stacks_torch import _record  # noqa: E402

BATCH, FEAT, OUT = 4, 16, 2  # test_stacks_torch.Net: Linear(16, 16) -> ReLU -> Linear(16, 2), x [4, 16]
CPU_PEAKS = DevicePeaks(name="test CPU", memory_bw_bytes_per_s=20e9,
                        flops_per_s={"matrix_fp32": 100e9, "vector_fp32": 50e9}, source="test")


def test_mfu_per_module_and_op_class_on_a_real_cpu_run(tmp_path: Path) -> None:
    trace = aiprof.load(_record(tmp_path, with_stack=True))
    windows = step_windows(trace)
    sec = mfu_section(trace, windows, CPU_PEAKS)
    assert sec.by_module, sec
    by = {m.path: m for m in sec.by_module}
    steps = len(windows)
    # Hand computation: a Linear [B, I] -> [B, O] is aten::addmm, 2·B·I·O multiply-adds plus B·O for the
    # bias forward; backward adds the weight gradient mm (2·O·B·I) and the input gradient mm (2·B·O·I, not
    # for the first Linear, whose input needs none). The bias gradient is a sum: vector work, not here.
    fc = 2 * BATCH * FEAT * FEAT
    head = 2 * BATCH * FEAT * OUT
    assert by["Net_0/Block_0/Linear_0"].flops_per_step == (fc + BATCH * FEAT) + fc == 4160
    assert by["Net_0/Linear_1"].flops_per_step == (head + BATCH * OUT) + 2 * head == 776
    assert by["Net_0"].flops_per_step == 4160 + 776 == sec.flops_per_step
    assert by["Net_0/Block_0"].flops == by["Net_0/Block_0/Linear_0"].flops
    assert "Net_0/Block_0/ReLU_0" not in by  # no matrix work
    classes = {c.op_class: c for c in sec.by_op_class or []}
    assert classes["matmul"].flops == sec.flops_per_step * steps and classes["matmul"].dtype == "fp32"
    assert "elementwise" in classes and classes["elementwise"].flops > 0  # relu, sum, the SGD update
    # The classes and modules against the same dense matrix peak (fp32 here)
    assert sec.available and sec.peak_key == "matrix_fp32"
    total_s = sum(s.duration_ns for s in sec.steps or []) / 1e9
    rate = float(sec.peak_flops_per_s or 0)
    assert classes["matmul"].mfu == pytest.approx(sec.mfu)
    assert by["Net_0"].mfu == pytest.approx(by["Net_0"].flops / (total_s * rate))
    assert 0 < by["Net_0/Linear_1"].time_ns <= by["Net_0"].time_ns
    assert by["Net_0"].busy_mfu == pytest.approx(by["Net_0"].flops / (by["Net_0"].time_ns / 1e9 * rate))
    lines = mfu_detail_lines(sec)
    assert lines[0].startswith("matmul: ") and any(line.startswith("module Net_0: ") for line in lines)
    back = msgspec.json.decode(msgspec.json.encode(sec), type=MfuReport)
    assert back == sec


def test_without_modules_there_is_no_module_mfu(tmp_path: Path) -> None:
    trace = aiprof.load(_record(tmp_path, with_stack=False))
    sec = mfu_section(trace, step_windows(trace))
    assert sec.by_module is msgspec.UNSET and sec.by_op_class
