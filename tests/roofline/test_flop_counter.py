"""FLOPs equal torch.utils.flop_counter.FlopCounterMode: real CPU runs traced with record_shapes, the
trace analysed by aiprof (innermost modelled op per call), summed and compared, forward and backward."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from aiprof import load  # noqa: E402
from aiprof.roofline.analysis import roofline  # noqa: E402
from aiprof.roofline.peaks import DevicePeaks  # noqa: E402

CPU = DevicePeaks("test cpu", 10e9, {"matrix_fp32": 1e11, "vector_fp32": 1e11}, "test", "measured", "cpu")
MATRIX_FAMILIES = ("gemm", "conv", "attention")


def _ours(fn: Callable[[], object], tmp_path: Path) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = load(path)
    result = roofline(trace, CPU)  # type: ignore[arg-type]
    return sum(r.flops for r in result.rows if r.family in MATRIX_FAMILIES)


def _theirs(fn: Callable[[], object]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


# FLOPs we count that FlopCounterMode does not: the bias add of addmm / baddbmm / linear (one per output
# element of the forward op; docs/roofline.md), so ``add*`` GEMMs are costed alike.
BIAS_ADDS = {"addmm": 7 * 3, "baddbmm": 4 * 6 * 2, "linear-3d": 2 * 3 * 8}


def _gemm_cases() -> list[tuple[str, Callable[[], object]]]:
    a, b = torch.randn(7, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    bias = torch.randn(3, requires_grad=True)
    x3, y3 = torch.randn(4, 6, 5, requires_grad=True), torch.randn(4, 5, 2, requires_grad=True)
    lin = torch.nn.Linear(16, 8)
    xl = torch.randn(2, 3, 16, requires_grad=True)
    return [
        ("mm", lambda: (a @ b).sum().backward()),
        ("addmm", lambda: torch.addmm(bias, a, b).sum().backward()),
        ("bmm", lambda: torch.bmm(x3, y3).sum().backward()),
        ("baddbmm", lambda: torch.baddbmm(torch.randn(4, 6, 2), x3, y3).sum().backward()),
        ("matmul-broadcast", lambda: torch.matmul(x3, b).sum().backward()),
        ("linear-3d", lambda: lin(xl).sum().backward()),
        ("bf16 mm", lambda: torch.mm(a.detach().bfloat16(), b.detach().bfloat16())),
    ]


@pytest.mark.parametrize("case", range(7))
def test_gemm_flops_equal_flop_counter(case: int, tmp_path: Path) -> None:
    name, fn = _gemm_cases()[case]
    assert _ours(fn, tmp_path) == _theirs(fn) + BIAS_ADDS.get(name, 0), name


CONV_CASES = [
    # (dims, cin, cout, kernel, stride, padding, dilation, groups, transposed, batch, size)
    (1, 3, 4, 3, 1, 0, 1, 1, False, 2, 9),
    (2, 3, 8, 3, 2, 1, 1, 1, False, 2, 9),
    (2, 4, 8, 3, 1, 2, 2, 2, False, 1, 8),
    (2, 4, 4, 3, 1, 1, 1, 4, False, 2, 7),
    (3, 2, 4, 2, 1, 0, 1, 1, False, 1, 5),
    (2, 4, 6, 3, 2, 1, 1, 1, True, 2, 5),
    (1, 4, 2, 4, 3, 0, 1, 2, True, 1, 6),
]


@pytest.mark.parametrize("spec", CONV_CASES)
def test_conv_flops_forward_and_backward(spec: tuple[int, ...], tmp_path: Path) -> None:
    nd, cin, cout, k, stride, pad, dil, groups, transposed, batch, size = spec
    kind = {1: "1d", 2: "2d", 3: "3d"}[nd]
    cls = getattr(torch.nn, f"ConvTranspose{kind}" if transposed else f"Conv{kind}")
    conv = cls(cin, cout, k, stride=stride, padding=pad, dilation=dil, groups=groups)
    x = torch.randn(batch, cin, *([size] * nd), requires_grad=True)

    def fwd() -> object:
        return conv(x)

    def both() -> None:
        conv(x).sum().backward()

    assert _ours(fwd, tmp_path) == _theirs(fwd)
    out = conv(x)
    # FlopCounterMode counts the weight gradient of a grouped conv `groups` times over; we do not.
    spatial = x.shape[2:] if transposed else out.shape[2:]
    dw_theirs = 2 * k**nd * int(torch.tensor(spatial).prod()) * cin * cout * batch
    expected = _theirs(both) - dw_theirs + dw_theirs // groups
    assert _ours(both, tmp_path) == expected


def test_sdpa_math_backend_equals_flop_counter(tmp_path: Path) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    k = torch.randn(2, 4, 12, 8, requires_grad=True)
    v = torch.randn(2, 4, 12, 8, requires_grad=True)

    def fn() -> None:
        with sdpa_kernel(SDPBackend.MATH):
            torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()

    assert _ours(fn, tmp_path) == _theirs(fn)


@pytest.mark.parametrize(("h_q", "h_kv", "s_q", "s_k", "d_qk", "d_v"), [
    (8, 8, 64, 64, 32, 32), (8, 2, 48, 80, 64, 64), (4, 1, 1, 128, 128, 64),
])
def test_attention_formulas_equal_torch(h_q: int, h_kv: int, s_q: int, s_k: int, d_qk: int, d_v: int) -> None:
    """Every SDPA entry point, forward and backward, GQA included, against torch's own formulas."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from aiprof.roofline import op_cost

    b = 2
    q, kk, v = [b, h_q, s_q, d_qk], [b, h_kv, s_k, d_qk], [b, h_kv, s_k, d_v]
    fwd, bwd = sdpa_flop_count(q, kk, v), sdpa_backward_flop_count([b, h_q, s_q, d_v], q, kk, v)
    t = ["float"] * 3
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"):
        cost = op_cost(f"aten::{name}", [q, kk, v], t)
        assert cost is not None and cost.flops == fwd, name
    bshd = [[b, s_q, h_q, d_qk], [b, s_k, h_kv, d_qk], [b, s_k, h_kv, d_v]]
    for name in ("_flash_attention_forward", "_efficient_attention_forward"):
        cost = op_cost(f"aten::{name}", bshd, t)
        assert cost is not None and cost.flops == fwd, name
    go = [b, h_q, s_q, d_v]
    for name in ("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
                 "_scaled_dot_product_cudnn_attention_backward"):
        cost = op_cost(f"aten::{name}", [go, q, kk, v], ["float"] * 4)
        assert cost is not None and cost.flops == bwd, name
    cost = op_cost("aten::_flash_attention_backward", [[b, s_q, h_q, d_v], *bshd], ["float"] * 4)
    assert cost is not None and cost.flops == bwd
    if s_q == s_k:  # causal: half the score matrix (FlopCounterMode ignores causality)
        causal = op_cost("aten::_scaled_dot_product_flash_attention", [q, kk, v, [], []], t + ["Scalar"] * 2,
                         ["", "", "", "0.", "True"])
        assert causal is not None and causal.flops == fwd // 2
