"""Convolutions in traces without stride/padding (2021 Kineto) take their output shape from autograd."""

from __future__ import annotations

from pathlib import Path

import pytest

import aiprof
from aiprof.roofline.analysis import conv_output_hints, roofline
from aiprof.roofline.cost import op_cost
from aiprof.trace import Trace

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
RESNET = SHARED / "kineto-tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def test_output_hint_sets_the_geometry_only_when_stride_is_not_recorded() -> None:
    dims = [[32, 256, 56, 56], [512, 256, 1, 1], [], [], [], [], [], [], []]
    types = ["float", "float"] + [""] * 7
    assumed = op_cost("aten::cudnn_convolution", dims, types)
    hinted = op_cost("aten::cudnn_convolution", dims, types, output_hint=[32, 512, 28, 28])
    assert assumed is not None and hinted is not None
    assert assumed.flops == 2 * 512 * 256 * 32 * 56 * 56  # stride 1 assumed
    assert hinted.flops == 2 * 512 * 256 * 32 * 28 * 28  # the stride-2 downsample it really is
    concrete = ["", "", "[0, 0]", "[1, 1]", "[1, 1]", "1", "False", "False", "False"]
    recorded = op_cost("aten::cudnn_convolution", dims, types, concrete, output_hint=[32, 512, 28, 28])
    assert recorded is not None and recorded.flops == assumed.flops  # recorded geometry wins


def test_legacy_backward_input_is_modelled() -> None:
    cost = op_cost(
        "aten::cudnn_convolution_backward_input",
        [[], [32, 64, 56, 56], [64, 64, 3, 3]],
        ["", "float", "float"],
        output_hint=[32, 64, 56, 56],
    )
    assert cost is not None and cost.flops == 2 * 32 * 64 * 56 * 56 * 64 * 9


@pytest.mark.skipif(not RESNET.is_file(), reason="../shared/traces not present")
def test_resnet_downsample_convolutions_get_their_real_output() -> None:
    trace = aiprof.load(RESNET)
    assert isinstance(trace, Trace)
    hints = conv_output_hints(trace)
    downsample = [
        r
        for r in trace.ops().where_name("^aten::cudnn_convolution$").rows.tolist()
        if trace.op_inputs(r).dims[:2] == [[32, 256, 56, 56], [512, 256, 1, 1]]
    ]
    assert downsample and all(hints[r] == [32, 512, 28, 28] for r in downsample)
    result = roofline(trace)
    convs = [r for r in result.rows if r.name == "aten::cudnn_convolution" and r.pct_of_roof is not None]
    # 1x1 convolutions (no Winograd) stay under the fp32 roof once their stride is right.
    one_by_one = [r for r in convs if ",1,1]" in r.input_dims]
    assert one_by_one and max(r.pct_of_roof for r in one_by_one) <= 100
