"""FLOPs and bytes of one op call, from the shapes, dtypes and concrete arguments ``record_shapes`` writes.

``op_cost(name, input_dims, input_types, concrete_inputs)`` returns an :class:`OpCost`, or None when no
model covers the op (the caller lists it as unmodelled with its share of time: never dropped silently).

Conventions (docs/roofline.md explains each formula and its source):
- FLOPs of GEMMs, convolutions and attention equal ``torch.utils.flop_counter.FlopCounterMode``
  (2 FLOPs per multiply-accumulate; bias epilogues not counted) except two documented corrections:
  causal attention counts only the unmasked score pairs (half when Sq == Sk), and the weight gradient of a
  grouped convolution is divided by ``groups`` (FlopCounterMode overcounts it ``groups`` times).
- Bytes are the ideal DRAM traffic: every input read once and every output written once, with the real
  dtype of each tensor (never an assumed 2 bytes). Backward GEMM/conv ops are counted as their two
  gradient kernels (each reads its own operands), as TraceLens does, but with bias terms in bytes.
- Elementwise, reduction and copy ops: one FLOP per output element (per input element for reductions),
  bytes of every tensor operand read plus the output written, broadcasting and dtype promotion applied.
- Bytes read count the storage an input really touches: a dimension of stride 0 in ``Input Strides`` (a
  view made by ``expand`` / broadcasting) contributes one element, not its size.
- Traces that record shapes but no dtypes (legacy ``Input dims`` without ``Input type``, the
  autograd-profiler era) are costed as fp32, that era's default, and the cost says so (``assumed_fp32``).
- A call that does no work (``dropout`` with ``p=0`` or ``train=False`` returns its input) costs zero:
  family ``noop``, never drawn.
- ``Concrete Inputs`` are strings (``'[-1]'``, ``'True'``); they are parsed by hand. Nothing from a
  trace is ever evaluated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from aiprof.roofline import dtypes as dt

Shape = list[int]


@dataclass(frozen=True)
class OpCost:
    """The work of one op call. ``unit`` is ``matrix`` (tensor cores / matrix cores) or ``vector``."""

    flops: int
    bytes_read: int
    bytes_written: int
    unit: str
    dtype: str
    family: str
    assumed_dtype: bool = False  # dtype not in the trace (TensorList inputs): the caller's fallback used
    assumed_fp32: bool = False  # the trace records no dtypes at all (legacy ``Input dims``): fp32 assumed
    expanded_inputs: bool = False  # some input is an expanded view (a 0 stride): its storage is read once
    # fp32 matrix work: "tf32" when its kernels ran on TF32 tensor cores, "fma" when on FP32 FMA (CUDA)
    # cores, "" when the kernel names do not say (set by the roofline from the kernels, never by the shapes)
    math: str = ""

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (0 when nothing moves)."""
        return self.flops / self.bytes if self.bytes else 0.0


# ----- parsing the recorded inputs --------------------------------------------------------------------


def _is_shape(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


class Args:
    """The inputs of one call, with typed accessors that return None instead of raising."""

    def __init__(
        self,
        dims: Sequence[object],
        types: Sequence[object],
        concrete: Sequence[object] | None,
        fallback_dtype: str | None,
        output_hint: Sequence[int] | None = None,
        strides: Sequence[object] | None = None,
    ) -> None:
        self.dims = list(dims)
        self.types = list(types)
        self.concrete = list(concrete or [])
        self.strides = list(strides or [])
        self.fallback_dtype = fallback_dtype
        self.used_fallback = False
        # Shapes without any dtype (legacy ``Input dims`` with no ``Input type``): tensors are assumed fp32.
        self.untyped = not self.types and any(_is_shape(d) and d for d in self.dims)
        self.assumed_fp32 = False
        # The op's output shape when known from elsewhere (a convolution's backward grad_output): used
        # where the trace has no stride/padding (Kineto before Concrete Inputs, e.g. 2021 traces).
        self.output_hint = list(output_hint) if output_hint is not None else None

    def __len__(self) -> int:
        return len(self.dims)

    def dtype(self, i: int) -> str | None:
        """Dtype of input ``i`` when it is a tensor. In a trace that records no dtypes, every non-empty
        shape is taken as an fp32 tensor (``[]`` is ambiguous there: a scalar or a 0-dim tensor; it is
        taken as a scalar)."""
        if self.untyped:
            value = self.dims[i] if i < len(self.dims) else None
            if _is_shape(value) and value:
                self.assumed_fp32 = True
                return LEGACY_DTYPE
            return None
        return dt.normalise(self.types[i]) if i < len(self.types) else None

    def touched(self, i: int) -> int | None:
        """Elements of input ``i``'s storage a kernel really reads when the input is an expanded view (a
        0 in its ``Input Strides``: ``expand``, ``expand_as``, broadcast views): a dimension of stride 0
        contributes one element. None when the input has no 0 stride (or no strides were recorded)."""
        shape = self.shape(i)
        stride = self.strides[i] if i < len(self.strides) else None
        if shape is None or not _is_shape(stride) or not isinstance(stride, list) or len(stride) != len(shape):
            return None
        if 0 not in stride:
            return None
        if 0 in shape:
            return 0
        return math.prod(size for size, step in zip(shape, stride, strict=True) if step != 0)

    def shape(self, i: int) -> Shape | None:
        """Shape of input ``i`` when it is a tensor (``[]`` for a 0-dim tensor), else None."""
        if i >= len(self.dims) or not _is_shape(self.dims[i]) or self.dtype(i) is None:
            return None
        value = self.dims[i]
        assert isinstance(value, list)
        return [int(v) for v in value]

    def tensor_list(self, i: int) -> list[Shape] | None:
        """Shapes of a ``TensorList`` input (None when absent or its shapes were not recorded)."""
        if i >= len(self.dims) or not isinstance(self.dims[i], list):
            return None
        value = self.dims[i]
        assert isinstance(value, list)
        shapes = [[int(x) for x in s] for s in value if _is_shape(s)]
        if not shapes or len(shapes) != len(value) or all(len(s) == 0 for s in shapes):
            return None
        return shapes

    def list_dtype(self) -> str:
        """Dtype for TensorList ops, whose element dtypes the trace does not record."""
        self.used_fallback = True
        return self.fallback_dtype or "fp32"

    def text(self, i: int) -> str:
        value = self.concrete[i] if i < len(self.concrete) else ""
        return value.strip() if isinstance(value, str) else ""

    def int_(self, i: int) -> int | None:
        text = self.text(i)
        return int(text) if re.fullmatch(r"-?\d+", text) else None

    def float_(self, i: int) -> float | None:
        try:
            return float(self.text(i))
        except ValueError:
            return None

    def bool_(self, i: int, default: bool = False) -> bool:
        text = self.text(i)
        return text == "True" if text in ("True", "False") else default

    def ints(self, i: int) -> list[int] | None:
        """A ``ScalarList`` like ``'[1, 1]'`` or a single int ``'-1'``; ``[]`` for ``'[]'``; else None."""
        text = self.text(i)
        if re.fullmatch(r"-?\d+", text):
            return [int(text)]
        match = re.fullmatch(r"\[\s*(-?\d+(\s*,\s*-?\d+)*)?\s*\]", text)
        if match is None:
            return None
        inner = match.group(1)
        return [int(x) for x in inner.split(",")] if inner else []

    def bools(self, i: int) -> list[bool] | None:
        text = self.text(i)
        match = re.fullmatch(r"\[((True|False)(\s*,\s*(True|False))*)\]", text)
        return [x.strip() == "True" for x in match.group(1).split(",")] if match else None


LEGACY_DTYPE = "fp32"  # what a trace without dtypes is assumed to hold (torch's default dtype)


def _bpe(dtype: str | None) -> int:
    return dt.bytes_per_element(dtype)


def _broadcast(shapes: Sequence[Shape]) -> Shape | None:
    """Broadcast result of several shapes (None when incompatible)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for j, size in enumerate(shape):
            k = ndim - len(shape) + j
            if out[k] == 1:
                out[k] = size
            elif size not in (1, out[k]):
                return None
    return out


# ----- GEMM --------------------------------------------------------------------------------------------


def _gemm_cost(
    batch: int, m: int, n: int, k: int, a: Args, ia: int, ib: int, bias_elems: int = 0, out_dtype: str | None = None,
    *, add: bool = False, read_a: int | None = None, read_b: int | None = None,
) -> OpCost:
    """``2·B·M·N·K`` FLOPs; operands, bias and output bytes. ``add``: a bias is added to the product
    (``beta·input + alpha·(A@B)``): one more FLOP per output element. ``read_a`` / ``read_b``: elements
    of an operand really read when it is shared across the batch (broadcast), default ``B·M·K`` / ``B·K·N``."""
    da, db = a.dtype(ia) or "fp32", a.dtype(ib) or "fp32"
    out = out_dtype or da
    elems_a = batch * m * k if read_a is None else read_a
    elems_b = batch * k * n if read_b is None else read_b
    read = elems_a * _bpe(da) + elems_b * _bpe(db) + bias_elems * _bpe(out)
    written = batch * m * n * _bpe(out)
    flops = 2 * batch * m * n * k + (batch * m * n if add else 0)
    return OpCost(flops, read, written, "matrix", da, "gemm")


def _beta_zero(a: Args, i: int) -> bool:
    """``beta=0``: torch ignores the input (``add*``(self, …, beta, alpha)): nothing read, nothing added."""
    beta = a.float_(i)
    return beta is not None and beta == 0.0


def _bias_elems(a: Args, bias: int | None, beta_at: int | None) -> tuple[int, bool]:
    """Elements of the bias input read and whether it is added (absent, or ``beta=0``: neither)."""
    if bias is None:
        return 0, False
    shape = a.shape(bias)
    if shape is None or (beta_at is not None and _beta_zero(a, beta_at)):
        return 0, False
    return _numel(shape), True


def _mm(a: Args, ia: int = 0, ib: int = 1, bias: int | None = None) -> OpCost | None:
    """mm; addmm(self, mat1, mat2, beta, alpha) = ``beta·self + alpha·(mat1@mat2)``: the bias add is
    counted (one FLOP per output element, the bias read), as for every ``add*`` GEMM."""
    x, w = a.shape(ia), a.shape(ib)
    if x is None or w is None or len(x) != 2 or len(w) != 2:
        return None
    elems, add = _bias_elems(a, bias, 3 if bias is not None else None)
    return _gemm_cost(1, x[0], w[1], x[1], a, ia, ib, elems, add=add)


def _bmm(a: Args, ia: int = 0, ib: int = 1, bias: int | None = None) -> OpCost | None:
    """bmm; baddbmm(self, batch1, batch2, beta, alpha): the bias add counted as for addmm."""
    x, w = a.shape(ia), a.shape(ib)
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return None
    elems, add = _bias_elems(a, bias, 3 if bias is not None else None)
    return _gemm_cost(x[0], x[1], w[2], x[2], a, ia, ib, elems, add=add)


def _addbmm(a: Args) -> OpCost | None:
    """addbmm(self, batch1, batch2, beta, alpha) = ``beta·self + alpha·Σ_b batch1[b]@batch2[b]``: the
    batch is summed into one M×N output (the sum is the GEMM's own accumulation over ``B·K``)."""
    x, w = a.shape(1), a.shape(2)
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return None
    elems, add = _bias_elems(a, 0, 3)
    b, m, k, n = x[0], x[1], x[2], w[2]
    da, out = a.dtype(1) or "fp32", a.dtype(1) or "fp32"
    read = b * m * k * _bpe(da) + b * k * n * _bpe(a.dtype(2) or "fp32") + elems * _bpe(out)
    return OpCost(2 * b * m * n * k + (m * n if add else 0), read, m * n * _bpe(out), "matrix", da, "gemm")


def _matmul(a: Args) -> OpCost | None:
    """matmul with broadcast batch dims: an operand shared across the batch is read once (torch folds
    ``[B, M, K] @ [K, N]`` into one GEMM; a broadcast batch operand is an expanded view)."""
    x, w = a.shape(0), a.shape(1)
    if x is None or w is None or not x or not w:
        return None
    xm = [1, *x] if len(x) == 1 else x
    wm = [*w, 1] if len(w) == 1 else w
    batch_shape = _broadcast([xm[:-2], wm[:-2]])
    if batch_shape is None:
        return None
    return _gemm_cost(_numel(batch_shape), xm[-2], wm[-1], xm[-1], a, 0, 1, read_a=_numel(x), read_b=_numel(w))


def _linear(a: Args) -> OpCost | None:
    """linear(input, weight, bias): ``input @ weight.T + bias``, the bias add counted as for addmm."""
    x, w = a.shape(0), a.shape(1)
    if x is None or w is None or not x or len(w) != 2:
        return None
    bias = a.shape(2)
    elems = _numel(bias) if bias is not None else 0
    return _gemm_cost(1, _numel(x[:-1]), w[0], x[-1], a, 0, 1, elems, add=bias is not None)


def _addmm_activation(a: Args) -> OpCost | None:
    """_addmm_activation(self, mat1, mat2, beta, alpha, use_gelu): addmm, then GELU/ReLU on the output
    (one more FLOP per output element)."""
    cost = _mm(a, 1, 2, bias=0)
    if cost is None:
        return None
    x, w = a.shape(1), a.shape(2)
    assert x is not None and w is not None
    return OpCost(cost.flops + x[0] * w[1], cost.bytes_read, cost.bytes_written, "matrix", cost.dtype, "gemm")


def _scaled_mm(a: Args) -> OpCost | None:
    x, w = a.shape(0), a.shape(1)
    if x is None or w is None or len(x) != 2 or len(w) != 2:
        return None
    out = dt.from_scalar_type_code(a.text(6)) or "bf16"
    bias = a.shape(4)
    scales = sum(_numel(s) * 4 for s in (a.shape(2), a.shape(3)) if s is not None)
    cost = _gemm_cost(1, x[0], w[1], x[1], a, 0, 1, _numel(bias) if bias is not None else 0, out,
                      add=bias is not None)
    return OpCost(cost.flops, cost.bytes_read + scales, cost.bytes_written, "matrix", a.dtype(0) or "fp8", "gemm")


def _int_mm(a: Args) -> OpCost | None:
    cost = _mm(a)
    if cost is None:
        return None
    x, w = a.shape(0), a.shape(1)
    assert x is not None and w is not None
    return OpCost(cost.flops, cost.bytes_read, x[0] * w[1] * 4, "matrix", "int8", "gemm")


def _mv(a: Args, ia: int = 0, ib: int = 1, bias: int | None = None) -> OpCost | None:
    """mv; addmv(self, mat, vec, beta, alpha): the bias (M elements) read and added, as for addmm."""
    x, v = a.shape(ia), a.shape(ib)
    if x is None or v is None or len(x) != 2 or len(v) != 1:
        return None
    d = a.dtype(ia) or "fp32"
    elems, add = _bias_elems(a, bias, 3 if bias is not None else None)
    flops = 2 * x[0] * x[1] + (x[0] if add else 0)
    return OpCost(flops, (x[0] * x[1] + x[1] + elems) * _bpe(d), x[0] * _bpe(d), "vector", d, "gemm")


def _addr(a: Args) -> OpCost | None:
    """addr(self, vec1, vec2, beta, alpha) = ``beta·self + alpha·(vec1 ⊗ vec2)``: one multiply per output
    element, plus the add; vectors and the M×N input read, M×N written (memory-bound, like mv)."""
    u, v = a.shape(1), a.shape(2)
    if u is None or v is None or len(u) != 1 or len(v) != 1:
        return None
    d = a.dtype(1) or "fp32"
    elems, add = _bias_elems(a, 0, 3)
    n = u[0] * v[0]
    return OpCost(n + (n if add else 0), (u[0] + v[0] + elems) * _bpe(d), n * _bpe(d), "vector", d, "gemm")


def _dot(a: Args) -> OpCost | None:
    x = a.shape(0)
    if x is None or len(x) != 1:
        return None
    d = a.dtype(0) or "fp32"
    return OpCost(2 * x[0], 2 * x[0] * _bpe(d), _bpe(d), "vector", d, "gemm")


# ----- convolution ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ConvSig:
    """Argument positions of one convolution overload (None: not an argument of it)."""

    bias: int | None
    stride: int | None
    padding: int | None
    dilation: int | None
    transposed: int | bool
    output_padding: int | None
    groups: int | None


_CONV_SIGS: dict[str, _ConvSig] = {
    "convolution": _ConvSig(2, 3, 4, 5, 6, 7, 8),
    "_convolution": _ConvSig(2, 3, 4, 5, 6, 7, 8),
    "convolution_overrideable": _ConvSig(2, 3, 4, 5, 6, 7, 8),
    "conv1d": _ConvSig(2, 3, 4, 5, False, None, 6),
    "conv2d": _ConvSig(2, 3, 4, 5, False, None, 6),
    "conv3d": _ConvSig(2, 3, 4, 5, False, None, 6),
    "conv_transpose1d": _ConvSig(2, 3, 4, 7, True, 5, 6),
    "conv_transpose2d": _ConvSig(2, 3, 4, 7, True, 5, 6),
    "conv_transpose3d": _ConvSig(2, 3, 4, 7, True, 5, 6),
    "cudnn_convolution": _ConvSig(None, 3, 2, 4, False, None, 5),
    "cudnn_convolution_transpose": _ConvSig(None, 4, 2, 5, True, 3, 6),
    "miopen_convolution": _ConvSig(2, 4, 3, 5, False, None, 6),
    "miopen_depthwise_convolution": _ConvSig(2, 4, 3, 5, False, None, 6),
    "miopen_convolution_transpose": _ConvSig(2, 5, 3, 6, True, 4, 7),
    "mkldnn_convolution": _ConvSig(2, 4, 3, 5, False, None, 6),
    "_slow_conv2d_forward": _ConvSig(3, 4, 5, None, False, None, None),
    "thnn_conv2d": _ConvSig(3, 4, 5, None, False, None, None),
    "slow_conv3d_forward": _ConvSig(3, 4, 5, None, False, None, None),
    "slow_conv3d": _ConvSig(3, 4, 5, None, False, None, None),
    "slow_conv_dilated2d": _ConvSig(3, 4, 5, 6, False, None, None),
    "slow_conv_dilated3d": _ConvSig(3, 4, 5, 6, False, None, None),
    "slow_conv_transpose2d": _ConvSig(3, 4, 5, 7, True, 6, None),
    "slow_conv_transpose3d": _ConvSig(3, 4, 5, 7, True, 6, None),
    "_nnpack_spatial_convolution": _ConvSig(2, 4, 3, None, False, None, None),
}


def _spatial(a: Args, i: int | None, nd: int, default: int) -> list[int] | None:
    """A per-spatial-dimension argument: a list, one int repeated, or the default when absent."""
    if i is None or not a.text(i):
        return [default] * nd
    values = a.ints(i)
    if values is None:
        return None
    if len(values) == 1:
        return values * nd
    return values if len(values) == nd else None


@dataclass(frozen=True)
class _ConvGeometry:
    x: Shape  # batched input [N, Cin, *spatial]
    w: Shape
    out: Shape
    transposed: bool
    groups: int


def _conv_geometry(a: Args, sig: _ConvSig, ix: int = 0, iw: int = 1) -> _ConvGeometry | None:
    x, w = a.shape(ix), a.shape(iw)
    if x is None or w is None or len(w) < 3:
        return None
    nd = len(w) - 2
    if len(x) == nd + 1:
        x = [1, *x]
    if len(x) != nd + 2:
        return None
    transposed = sig.transposed if isinstance(sig.transposed, bool) else a.bool_(sig.transposed)
    stride = _spatial(a, sig.stride, nd, 1)
    dilation = _spatial(a, sig.dilation, nd, 1)
    out_pad = _spatial(a, sig.output_padding, nd, 0)
    text_pad = a.text(sig.padding) if sig.padding is not None else ""
    padding = [0] * nd if text_pad in ("valid", "'valid'") else _spatial(a, sig.padding, nd, 0)
    groups = a.int_(sig.groups) if sig.groups is not None else None
    if transposed:
        groups = groups or 1
    else:
        groups = x[1] // w[1] if w[1] and x[1] % w[1] == 0 else (groups or 1)
    if stride is None or dilation is None or out_pad is None:
        return None
    kernel = w[2:]
    hint = a.output_hint
    geometry_recorded = sig.stride is not None and bool(a.text(sig.stride))
    if not geometry_recorded and not transposed and hint is not None and len(hint) == nd + 2:
        out_sp = [int(v) for v in hint[2:]]
    elif text_pad in ("same", "'same'"):
        out_sp = list(x[2:])
    elif padding is None:
        return None
    elif transposed:
        out_sp = [
            (i - 1) * s - 2 * p + d * (k - 1) + op + 1
            for i, s, p, d, k, op in zip(x[2:], stride, padding, dilation, kernel, out_pad, strict=True)
        ]
    else:
        out_sp = [
            (i + 2 * p - d * (k - 1) - 1) // s + 1
            for i, s, p, d, k in zip(x[2:], stride, padding, dilation, kernel, strict=True)
        ]
    c_out = w[1] * groups if transposed else w[0]
    return _ConvGeometry(x, w, [x[0], c_out, *out_sp], transposed, groups)


def _conv_fwd_flops(g: _ConvGeometry) -> int:
    spatial = g.x[2:] if g.transposed else g.out[2:]
    return 2 * _numel(g.w) * g.x[0] * _numel(spatial)


def _conv(a: Args, name: str) -> OpCost | None:
    sig = _CONV_SIGS[name]
    g = _conv_geometry(a, sig)
    if g is None or min(g.out) <= 0:
        return None
    d = a.dtype(0) or "fp32"
    bias = a.shape(sig.bias) if sig.bias is not None else None
    read = (_numel(g.x) + _numel(g.w) + (_numel(bias) if bias is not None else 0)) * _bpe(d)
    return OpCost(_conv_fwd_flops(g), read, _numel(g.out) * _bpe(d), "matrix", d, "conv")


def _conv_backward(a: Args, name: str) -> OpCost | None:
    """convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask); the mkldnn variant is (input, grad_output, weight, padding,
    stride, dilation, groups, output_mask)."""
    if name == "mkldnn_convolution_backward":
        ig, ix, sig, mask_i = 1, 0, _ConvSig(None, 4, 3, 5, False, None, 6), 7
    else:
        ig, ix, sig, mask_i = 0, 1, _ConvSig(None, 4, 5, 6, 7, 8, 9), 10
    g = _conv_geometry(a, sig, ix=ix, iw=2)
    go = a.shape(ig)
    if g is None or go is None:
        return None
    mask = a.bools(mask_i) or [True, True, name != "mkldnn_convolution_backward"]
    mask = (mask + [False] * 3)[:3]
    d = a.dtype(ig) or "fp32"
    n_go, n_x, n_w = _numel(go), _numel(g.x), _numel(g.w)
    flops, read, written = 0, 0, 0
    if mask[0]:  # grad_input: a transposed convolution of grad_output with the weight
        spatial = g.x[2:] if g.transposed else go[2:]
        flops += 2 * n_w * g.x[0] * _numel(spatial)
        read, written = read + n_go + n_w, written + n_x
    if mask[1]:  # grad_weight: input correlated with grad_output; 1/groups of the channel pairs
        spatial = g.x[2:] if g.transposed else go[2:]
        flops += 2 * _numel(g.w[2:]) * _numel(spatial) * g.x[1] * go[1] * g.x[0] // g.groups
        read, written = read + n_x + n_go, written + n_w
    if mask[2]:  # grad_bias: a reduction of grad_output
        read, written = read + n_go, written + go[1]
    return OpCost(flops, read * _bpe(d), written * _bpe(d), "matrix", d, "conv")


def _conv_backward_input_legacy(a: Args) -> OpCost | None:
    """cudnn/miopen_convolution_backward_input(self_size, grad_output, weight, padding, stride, …) of torch
    ≤ 1.9: grad_input is a transposed convolution of grad_output with the weight. The FLOPs follow from
    those two shapes alone; the input's size (an int list, not recorded) comes from ``output_hint``."""
    go, w = a.shape(1), a.shape(2)
    if go is None or w is None or len(w) < 3 or len(go) != len(w) or not w[0]:
        return None
    d = a.dtype(1) or "fp32"
    flops = 2 * _numel(go) * (_numel(w) // w[0])
    written = _numel(a.output_hint) if a.output_hint else 0
    return OpCost(flops, (_numel(go) + _numel(w)) * _bpe(d), written * _bpe(d), "matrix", d, "conv")


# ----- attention ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AttnSig:
    q: int
    causal: int | None
    layout: str  # "bhsd" (SDPA entry points) or "bshd" (flash/efficient kernels)
    backward: bool
    mask_type: bool = False  # causal argument is the efficient kernel's custom_mask_type int


_ATTN_SIGS: dict[str, _AttnSig] = {
    "scaled_dot_product_attention": _AttnSig(0, 5, "bhsd", False),
    "_scaled_dot_product_attention_math": _AttnSig(0, 5, "bhsd", False),
    "_scaled_dot_product_flash_attention": _AttnSig(0, 4, "bhsd", False),
    "_scaled_dot_product_flash_attention_for_cpu": _AttnSig(0, 4, "bhsd", False),
    "_scaled_dot_product_efficient_attention": _AttnSig(0, 6, "bhsd", False),
    "_scaled_dot_product_cudnn_attention": _AttnSig(0, 6, "bhsd", False),
    "_scaled_dot_product_fused_attention_overrideable": _AttnSig(0, 5, "bhsd", False),
    "_flash_attention_forward": _AttnSig(0, 8, "bshd", False),
    "_efficient_attention_forward": _AttnSig(0, 9, "bshd", False, mask_type=True),
    "_scaled_dot_product_flash_attention_backward": _AttnSig(1, 11, "bhsd", True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": _AttnSig(1, 7, "bhsd", True),
    "_scaled_dot_product_efficient_attention_backward": _AttnSig(1, 11, "bhsd", True),
    "_scaled_dot_product_cudnn_attention_backward": _AttnSig(1, 14, "bhsd", True),
    "_scaled_dot_product_fused_attention_overrideable_backward": _AttnSig(1, 12, "bhsd", True),
    "_flash_attention_backward": _AttnSig(1, 11, "bshd", True),
    "_efficient_attention_backward": _AttnSig(1, 14, "bshd", True, mask_type=True),
}


def causal_pairs(s_q: int, s_k: int) -> int:
    """Score pairs a causal kernel computes: half the matrix when Sq == Sk (the FlashAttention
    benchmark convention TraceLens follows), else the unmasked pairs of torch's top-left aligned mask."""
    if s_q == s_k:
        return s_q * s_k // 2
    full = min(s_q, s_k)
    return full * (full + 1) // 2 + max(0, s_q - s_k) * s_k


def _bhsd(shape: Shape, layout: str) -> tuple[int, int, int, int] | None:
    if len(shape) == 3 and layout == "bhsd":
        shape = [1, *shape]
    if len(shape) != 4:
        return None  # varlen (packed) layouts: sequence lengths are not in the trace
    b, x, y, d = shape
    return (b, x, y, d) if layout == "bhsd" else (b, y, x, d)


@dataclass(frozen=True)
class AttentionDims:
    """The shape of one attention call, read from an SDPA / flash / efficient op's inputs."""

    batch: int
    heads: int  # query heads (H)
    kv_heads: int
    q_len: int  # Sq
    kv_len: int  # Sk
    head_dim: int  # D of q and k
    v_dim: int  # D of v
    causal: bool
    backward: bool
    dtype: str


def attention_dims(name: str, input_dims: Sequence[object] | None, input_types: Sequence[object] | None,
                   concrete_inputs: Sequence[object] | None = None) -> AttentionDims | None:
    """B, H, Sq, Sk, D of an attention op call from its recorded inputs (None: not an attention op, or its
    shapes are not in the trace: no ``record_shapes``, packed varlen layouts)."""
    base, _ = split_name(name)
    if base not in _ATTN_SIGS or input_dims is None:
        return None
    try:
        return _attention_dims(Args(input_dims, input_types or [], concrete_inputs, None), base)
    except (ValueError, IndexError, TypeError):
        return None


def _attention_dims(a: Args, name: str) -> AttentionDims | None:
    sig = _ATTN_SIGS[name]
    shapes = [a.shape(sig.q + j) for j in range(3)]
    if any(s is None for s in shapes):
        return None
    dims = [_bhsd(s, sig.layout) for s in shapes if s is not None]
    if any(d is None for d in dims):
        return None
    (b, h_q, s_q, d_qk), (_, h_kv, s_k, _), (_, _, _, d_v) = (d for d in dims if d is not None)
    if h_kv == 0 or h_q % h_kv:
        return None
    if sig.causal is None:
        causal = False
    elif sig.mask_type:
        causal = (a.int_(sig.causal) or 0) > 0
    else:
        causal = a.bool_(sig.causal)
    return AttentionDims(b, h_q, h_kv, s_q, s_k, d_qk, d_v, causal, sig.backward, a.dtype(sig.q) or "fp32")


def _attention(a: Args, name: str) -> OpCost | None:
    found = _attention_dims(a, name)
    if found is None:
        return None
    sig = _ATTN_SIGS[name]
    b, h_q, h_kv, s_q, s_k = found.batch, found.heads, found.kv_heads, found.q_len, found.kv_len
    d_qk, d_v, causal = found.head_dim, found.v_dim, found.causal
    per_pair = 2 * (3 * d_qk + 2 * d_v) if sig.backward else 2 * (d_qk + d_v)
    flops = b * h_q * s_q * s_k * per_pair
    if causal:
        flops = flops // 2 if s_q == s_k else b * h_q * causal_pairs(s_q, s_k) * per_pair
    d = found.dtype
    bpe = _bpe(d)
    q_el, kv_el, o_el = b * h_q * s_q * d_qk, b * h_kv * s_k * (d_qk + d_v), b * h_q * s_q * d_v
    if sig.backward:  # read q, k, v, out, grad_out; write grad_q, grad_k, grad_v
        read, written = q_el + kv_el + 2 * o_el, q_el + kv_el
    else:
        read, written = q_el + kv_el, o_el
    return OpCost(flops, read * bpe, written * bpe, "matrix", d, "attention")


# ----- softmax and normalisation --------------------------------------------------------------------

SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide
SOFTMAX_BACKWARD_FLOPS_PER_ELEMENT = 4  # grad*y, row sum, subtract, multiply


def _softmax(a: Args, name: str) -> OpCost | None:
    x = a.shape(0)
    if x is None:
        return None
    d = a.dtype(0) or "fp32"
    out = d
    if name.startswith("_") and a.bool_(2):  # _softmax(self, dim, half_to_float)
        out = "fp32"
    elif not name.startswith("_"):
        out = dt.from_scalar_type_code(a.text(2)) or d
    n = _numel(x)
    return OpCost(SOFTMAX_FLOPS_PER_ELEMENT * n, n * _bpe(d), n * _bpe(out), "vector", d, "softmax")


def _softmax_backward(a: Args) -> OpCost | None:
    g, y = a.shape(0), a.shape(1)
    if g is None or y is None:
        return None
    d, dy = a.dtype(0) or "fp32", a.dtype(1) or "fp32"
    out = dt.from_scalar_type_code(a.text(3)) or d
    n = _numel(g)
    flops = SOFTMAX_BACKWARD_FLOPS_PER_ELEMENT * n
    return OpCost(flops, n * (_bpe(d) + _bpe(dy)), n * _bpe(out), "vector", d, "softmax")


def _norm_cost(flops: int, read_el: int, write_el: int, small_bytes: int, d: str, family: str = "norm") -> OpCost:
    return OpCost(flops, read_el * _bpe(d) + small_bytes, write_el * _bpe(d), "vector", d, family)


def _layer_norm(a: Args, name: str) -> OpCost | None:
    """native_layer_norm(input, normalized_shape, weight, bias, eps): FLOPs 5N + 6C (TraceLens);
    bytes: input, weight, bias read; output, and per-row mean and rstd (fp32) written."""
    x = a.shape(0)
    if x is None:
        return None
    normalized = a.ints(1)
    c = _numel(normalized) if normalized else (x[-1] if x else 1)
    n, d = _numel(x), a.dtype(0) or "fp32"
    params = sum(_numel(s) for s in (a.shape(2), a.shape(3)) if s is not None)
    rows = n // c if c else 0
    stats = 2 * rows * 4 if name == "native_layer_norm" else 0
    cost = _norm_cost(5 * n + 6 * c, n + params, n, 0, d)
    return OpCost(cost.flops, cost.bytes_read, cost.bytes_written + stats, "vector", d, "norm")


def _layer_norm_backward(a: Args) -> OpCost | None:
    """native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, mask)."""
    x = a.shape(1)
    if x is None:
        return None
    n, d = _numel(x), a.dtype(0) or "fp32"
    stats = sum(_numel(s) * 4 for s in (a.shape(3), a.shape(4)) if s is not None)
    weight = a.shape(5)
    params = _numel(weight) if weight is not None else 0
    return OpCost(9 * n, (2 * n + params) * _bpe(d) + stats, (n + 2 * params) * _bpe(d), "vector", d, "norm")


def _rms_norm(a: Args, name: str) -> OpCost | None:
    """rms_norm(input, normalized_shape, weight, eps): FLOPs (N/C)(2C+2) + N(2 if weight else 1)."""
    vllm = name.startswith("_C::")
    ix, iw = (1, 2) if name == "_C::rms_norm" else (0, 2 if vllm else 2)
    x = a.shape(ix)
    if x is None or not x:
        return None
    normalized = None if vllm else a.ints(1)
    c = _numel(normalized) if normalized else x[-1]
    n, d = _numel(x), a.dtype(ix) or "fp32"
    weight = a.shape(iw)
    w = _numel(weight) if weight is not None else 0
    flops = (n // c) * (2 * c + 2) + n * (2 if weight is not None else 1) if c else 0
    if name == "_C::fused_add_rms_norm":  # input += residual; residual = input; input = rms_norm(input)
        return OpCost(flops + n, (2 * n + w) * _bpe(d), 2 * n * _bpe(d), "vector", d, "norm")
    return OpCost(flops, (n + w) * _bpe(d), n * _bpe(d), "vector", d, "norm")


def _rms_norm_backward(a: Args) -> OpCost | None:
    """_fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask)."""
    x = a.shape(1)
    if x is None:
        return None
    n, d = _numel(x), a.dtype(0) or "fp32"
    weight = a.shape(4)
    w = _numel(weight) if weight is not None else 0
    return OpCost(7 * n, (2 * n + w) * _bpe(d), (n + w) * _bpe(d), "vector", d, "norm")


_BATCH_NORM_TRAINING_ARG = {
    "native_batch_norm": 5,
    "_native_batch_norm_legit": 5,
    "_native_batch_norm_legit_no_training": None,
    "cudnn_batch_norm": 5,
    "miopen_batch_norm": 5,
    "batch_norm": 5,
    "_batch_norm_impl_index": 5,
    "_batch_norm_with_update": None,
    "_batch_norm_no_update": None,
}


def _batch_norm(a: Args, name: str) -> OpCost | None:
    """2N to apply, 3N more for the statistics when training, 6C per-channel work (TraceLens)."""
    x = a.shape(0)
    if x is None or len(x) < 2:
        return None
    arg = _BATCH_NORM_TRAINING_ARG[name]
    training = name == "_batch_norm_with_update" or (arg is not None and a.bool_(arg))
    n, c, d = _numel(x), x[1], a.dtype(0) or "fp32"
    params = sum(_numel(s) for s in (a.shape(i) for i in range(1, 5)) if s is not None)
    saved = 4 * c * 4 if training else 0  # save_mean, save_invstd; running mean and var updated
    flops = (5 * n if training else 2 * n) + 6 * c
    return OpCost(flops, (n + params) * _bpe(d), n * _bpe(d) + saved, "vector", d, "norm")


def _batch_norm_backward(a: Args, name: str) -> OpCost | None:
    """native_batch_norm_backward(grad_out, input, weight, ...); cudnn/miopen: (input, grad_out, weight, ...)."""
    ix, ig = (0, 1) if name in ("cudnn_batch_norm_backward", "miopen_batch_norm_backward") else (1, 0)
    x = a.shape(ix)
    if x is None or len(x) < 2:
        return None
    n, c, d = _numel(x), x[1], a.dtype(ig) or "fp32"
    return OpCost(9 * n, (2 * n + 2 * c) * _bpe(d), (n + 2 * c) * _bpe(d), "vector", d, "norm")


def _group_norm(a: Args) -> OpCost | None:
    """native_group_norm(input, weight, bias, N, C, HxW, group, eps)."""
    x = a.shape(0)
    if x is None or len(x) < 2:
        return None
    n, c, d = _numel(x), x[1], a.dtype(0) or "fp32"
    groups = a.int_(6) or 1
    params = sum(_numel(s) for s in (a.shape(1), a.shape(2)) if s is not None)
    stats = 2 * x[0] * groups * 4
    return OpCost(5 * n + 6 * c, (n + params) * _bpe(d), n * _bpe(d) + stats, "vector", d, "norm")


def _group_norm_backward(a: Args) -> OpCost | None:
    """native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)."""
    x = a.shape(1)
    if x is None or len(x) < 2:
        return None
    n, c, d = _numel(x), x[1], a.dtype(0) or "fp32"
    return OpCost(9 * n, (2 * n + c) * _bpe(d), (n + 2 * c) * _bpe(d), "vector", d, "norm")


# ----- elementwise ---------------------------------------------------------------------------------------

UNARY = frozenset(
    """abs neg exp exp2 log log2 log10 log1p expm1 sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh
    sigmoid relu relu6 gelu silu mish elu selu celu leaky_relu hardtanh hardswish hardsigmoid softplus
    erf erfc erfinv reciprocal sign sgn floor ceil round trunc frac square logical_not bitwise_not isnan
    isinf isfinite nan_to_num clamp clamp_min clamp_max threshold pow logit native_dropout dropout
    _log_softmax_backward_data_unused positive signbit angle""".split()
)
BINARY = frozenset(
    """add sub rsub mul div true_divide floor_divide remainder fmod maximum minimum fmax fmin eq ne lt le gt
    ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor bitwise_left_shift
    bitwise_right_shift atan2 hypot copysign xlogy masked_fill where lerp addcmul addcdiv gelu_backward
    silu_backward threshold_backward sigmoid_backward tanh_backward hardtanh_backward leaky_relu_backward
    elu_backward softplus_backward hardswish_backward hardsigmoid_backward mish_backward mse_loss_backward
    native_dropout_backward heaviside""".split()
)
COMPARISONS = frozenset(
    "eq ne lt le gt ge logical_and logical_or logical_xor logical_not isnan isinf isfinite signbit".split()
)
FILLS = frozenset("fill zero uniform normal random bernoulli exponential geometric cauchy log_normal".split())
TWO_FLOP_OPS = frozenset({"addcmul", "addcdiv", "lerp"})


def _tensor_inputs(a: Args, skip: int | None = None) -> list[tuple[Shape, str]]:
    out = []
    for i in range(len(a)):
        shape, d = a.shape(i), a.dtype(i)
        if shape is not None and d is not None and i != skip:
            out.append((shape, d))
    return out


_SCALAR_TYPES = frozenset({"scalar", "int", "double", "float64_t", "bool", "long", "symint"})


def _out_argument(a: Args) -> int | None:
    """Index of an ``out=`` tensor (the ``.out`` overload, recorded under the plain name by older
    traces: ``aten::clamp_min(self, min, out)``): the last input, a tensor right after a scalar argument,
    at position 2 or later, shaped like the result of the tensors before it. It is written, not read."""
    last = len(a) - 1
    if last < 2 or a.shape(last) is None or a.shape(last - 1) is not None:
        return None
    before = a.types[last - 1] if last - 1 < len(a.types) else None
    if not isinstance(before, str) or before.strip().lower() not in _SCALAR_TYPES:
        return None
    shapes = [s for s, _ in _tensor_inputs(a, skip=last)]
    result = _broadcast(shapes) if shapes else None
    return last if result is not None and result == a.shape(last) else None


def _elementwise(a: Args, base: str, inplace: bool) -> OpCost | None:
    tensors = _tensor_inputs(a, skip=None if inplace else _out_argument(a))
    if not tensors:
        return None
    out_shape = tensors[0][0] if inplace else _broadcast([s for s, _ in tensors])
    if out_shape is None:
        return None
    dimensioned = [d for s, d in tensors if s]
    if inplace:
        out_dtype = tensors[0][1]
    elif base in COMPARISONS:
        out_dtype = "bool"
    else:
        out_dtype = dt.promote(dimensioned or [d for _, d in tensors]) or "fp32"
    n_out = _numel(out_shape)
    if base in FILLS:  # writes only (RNG fills read no tensor data)
        return OpCost(n_out if base not in ("fill", "zero") else 0, 0, n_out * _bpe(out_dtype), "vector",
                      out_dtype, "elementwise")
    read = sum(_numel(s) * _bpe(d) for s, d in tensors)
    flops = n_out * (2 if base in TWO_FLOP_OPS else 1)
    compute_dtype = dt.promote(dimensioned or [d for _, d in tensors]) or out_dtype
    return OpCost(flops, read, n_out * _bpe(out_dtype), "vector", compute_dtype, "elementwise")


# ----- reductions ----------------------------------------------------------------------------------------

# name -> (dim argument, keepdim argument, FLOPs per input element)
_REDUCTIONS: dict[str, tuple[int, int, int]] = {
    "sum": (1, 2, 1),
    "nansum": (1, 2, 1),
    "mean": (1, 2, 1),
    "nanmean": (1, 2, 1),
    "prod": (1, 2, 1),
    "amax": (1, 2, 1),
    "amin": (1, 2, 1),
    "max": (1, 2, 1),
    "min": (1, 2, 1),
    "argmax": (1, 2, 1),
    "argmin": (1, 2, 1),
    "any": (1, 2, 1),
    "all": (1, 2, 1),
    "count_nonzero": (1, 99, 1),
    "logsumexp": (1, 2, 3),
    "var": (1, 3, 3),
    "std": (1, 3, 3),
    "var_mean": (1, 3, 3),
    "std_mean": (1, 3, 3),
    "linalg_vector_norm": (2, 3, 2),
    "norm": (2, 3, 2),
    "aminmax": (1, 2, 2),
}
_INDEX_OUTPUT = frozenset({"argmax", "argmin", "count_nonzero"})
_TWO_OUTPUTS = frozenset({"var_mean", "std_mean", "aminmax"})


def _reduction(a: Args, base: str) -> OpCost | None:
    x = a.shape(0)
    if x is None:
        return None
    if base in ("max", "min") and a.shape(1) is not None:
        return _elementwise(a, "maximum", False)  # max(a, b) is elementwise
    dim_i, keep_i, per_el = _REDUCTIONS[base]
    dims = a.ints(dim_i) if a.text(dim_i) else None
    ndim = len(x)
    if dims is None or dims == [] or ndim == 0:
        kept: list[int] = []
    else:
        reduced = {d % ndim for d in dims if -ndim <= d < ndim}
        kept = [s for j, s in enumerate(x) if j not in reduced]
    n_in, n_out = _numel(x), _numel(kept)
    d = a.dtype(0) or "fp32"
    out_dtype = "int64" if base in _INDEX_OUTPUT else ("bool" if base in ("any", "all") else d)
    written = n_out * _bpe(out_dtype)
    if base in _TWO_OUTPUTS:
        written *= 2
    elif base in ("max", "min") and dims is not None and len(a.concrete) > 1:
        written += n_out * 8  # values and int64 indices
    return OpCost(per_el * n_in, n_in * _bpe(d), written, "vector", d, "reduce")


def _scan(a: Args) -> OpCost | None:
    x = a.shape(0)
    if x is None:
        return None
    d = a.dtype(0) or "fp32"
    out = dt.from_scalar_type_code(a.text(2)) or d
    n = _numel(x)
    return OpCost(n, n * _bpe(d), n * _bpe(out), "vector", d, "reduce")


# ----- dropout ---------------------------------------------------------------------------------------------

# dropout(input, p, train) and its variants: ATen returns the input itself when ``p == 0`` or ``not train``.
DROPOUTS = frozenset({"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"})


def noop_cost(dtype: str = "fp32") -> OpCost:
    """The cost of a call that does no work (it returns its input, or a view of it): nothing at all."""
    return OpCost(0, 0, 0, "vector", dtype, "noop")


def _dropout_is_noop(a: Args) -> bool:
    """``p == 0`` or ``train == False`` in the recorded concrete inputs (unknown values: not a no-op)."""
    p = a.float_(1)
    return (p is not None and p == 0.0) or a.text(2) == "False"


def _dropout(a: Args, base: str, inplace: bool) -> OpCost | None:
    """dropout/feature_dropout/alpha_dropout(input, p, train): the identity (``noop``) when ``p == 0`` or
    in eval mode; otherwise one elementwise pass (the mask and scaling run in child ops or one kernel)."""
    if _dropout_is_noop(a):
        x = a.shape(0)
        return noop_cost(a.dtype(0) or "fp32") if x is not None else None
    return _elementwise(a, base, inplace)


def _native_dropout(a: Args, base: str, inplace: bool) -> OpCost | None:
    """native_dropout(input, p, train): with ``train == False`` it clones the input and writes an
    all-ones bool mask (a copy, not dropout); in training it is one elementwise pass with a mask."""
    x = a.shape(0)
    if x is not None and a.text(2) == "False":
        d, n = a.dtype(0) or "fp32", _numel(x)
        return OpCost(n, n * _bpe(d), n * (_bpe(d) + 1), "vector", d, "copy")
    return _elementwise(a, base, inplace)


# ----- data movement -------------------------------------------------------------------------------------


def _copy(a: Args, base: str) -> OpCost | None:
    """copy_(self, src): src read, self written. Other copies: input read, output (maybe new dtype) written.
    One FLOP per element, as TraceLens counts conversions."""
    if base == "copy":
        dst, src = a.shape(0), a.shape(1)
        if dst is None or src is None:
            return None
        d_dst, d_src = a.dtype(0) or "fp32", a.dtype(1) or "fp32"
        n = _numel(dst)
        return OpCost(n, _numel(src) * _bpe(d_src), n * _bpe(d_dst), "vector", d_src, "copy")
    x = a.shape(0)
    if x is None:
        return None
    d = a.dtype(0) or "fp32"
    out = d
    if base in ("to", "_to_copy"):
        out = dt.from_scalar_type_code(a.text(1)) or dt.from_scalar_type_code(a.text(2)) or d
    n = _numel(x)
    return OpCost(n, n * _bpe(d), n * _bpe(out), "vector", d, "copy")


def _cat(a: Args) -> OpCost | None:
    shapes = a.tensor_list(0)
    if shapes is None:
        return None
    d = a.list_dtype()
    n = sum(_numel(s) for s in shapes if s and _numel(s) > 0)
    return OpCost(0, n * _bpe(d), n * _bpe(d), "vector", d, "copy", assumed_dtype=True)


def _embedding(a: Args) -> OpCost | None:
    """embedding(weight, indices, ...): index read, one row of the table read and written per index."""
    w, idx = a.shape(0), a.shape(1)
    if w is None or idx is None or len(w) != 2:
        return None
    d = a.dtype(0) or "fp32"
    rows = _numel(idx) * w[1]
    read = _numel(idx) * _bpe(a.dtype(1) or "int64") + rows * _bpe(d)
    return OpCost(0, read, rows * _bpe(d), "vector", d, "index")


def _embedding_backward(a: Args) -> OpCost | None:
    """embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)."""
    g, idx = a.shape(0), a.shape(1)
    vocab = a.int_(2)
    if g is None or idx is None or not g or vocab is None:
        return None
    d = a.dtype(0) or "fp32"
    n = _numel(g)
    read = n * _bpe(d) + _numel(idx) * _bpe(a.dtype(1) or "int64")
    return OpCost(n, read, vocab * g[-1] * _bpe(d), "vector", d, "index")


def _index_select(a: Args) -> OpCost | None:
    x, idx = a.shape(0), a.shape(2)
    dim = a.int_(1)
    if x is None or idx is None or dim is None or not x:
        return None
    out = list(x)
    out[dim % len(x)] = _numel(idx)
    d, n = a.dtype(0) or "fp32", _numel(out)
    read = n * _bpe(d) + _numel(idx) * _bpe(a.dtype(2))
    return OpCost(0, read, n * _bpe(d), "vector", d, "index")


def _gather(a: Args) -> OpCost | None:
    x, idx = a.shape(0), a.shape(2)
    if x is None or idx is None:
        return None
    d, n = a.dtype(0) or "fp32", _numel(idx)
    return OpCost(0, n * (_bpe(d) + _bpe(a.dtype(2))), n * _bpe(d), "vector", d, "index")


def _scatter(a: Args, base: str, inplace: bool) -> OpCost | None:
    """scatter/scatter_add(self, dim, index, src): index-shaped elements read and written; the
    out-of-place form also copies self."""
    x, idx = a.shape(0), a.shape(2)
    if x is None or idx is None:
        return None
    d, n = a.dtype(0) or "fp32", _numel(idx)
    read = n * (_bpe(d) + _bpe(a.dtype(2)))
    written = n * _bpe(d)
    if not inplace:
        read, written = read + _numel(x) * _bpe(d), written + _numel(x) * _bpe(d)
    return OpCost(n if base == "scatter_add" else 0, read, written, "vector", d, "index")


def _index(a: Args) -> OpCost | None:
    """index(self, indices): integer indices assumed (boolean masks select an unknown count)."""
    x, indices = a.shape(0), a.tensor_list(1)
    if x is None or indices is None:
        return None
    picked = _broadcast([s for s in indices if s])
    if picked is None:
        return None
    d = a.dtype(0) or "fp32"
    n = _numel(picked) * _numel(x[len(indices) :])
    return OpCost(0, n * _bpe(d) + _numel(picked) * 8, n * _bpe(d), "vector", d, "index")


def _index_put(a: Args) -> OpCost | None:
    """index_put_(self, indices, values, accumulate): values and indices read, values-count written."""
    values = a.shape(2)
    if values is None:
        return None
    d, n = a.dtype(0) or "fp32", _numel(values)
    return OpCost(n if a.bool_(3) else 0, n * (_bpe(d) + 8), n * _bpe(d), "vector", d, "index")


def _index_add(a: Args, base: str) -> OpCost | None:
    """index_add_/index_copy_(self, dim, index, source)."""
    src, idx = a.shape(3), a.shape(2)
    if src is None or idx is None:
        return None
    d, n = a.dtype(0) or "fp32", _numel(src)
    read = n * _bpe(d) + _numel(idx) * _bpe(a.dtype(2))
    return OpCost(n if base == "index_add" else 0, read, n * _bpe(d), "vector", d, "index")


# ----- pooling -------------------------------------------------------------------------------------------


def _pool(a: Args, base: str) -> OpCost | None:
    """max_pool/avg_pool(self, kernel_size, stride, padding, ...): FLOPs = output elements x window."""
    x = a.shape(0)
    kernel = a.ints(1)
    if x is None or kernel is None or len(x) < 3:
        return None
    nd = 3 if "3d" in base else (1 if "1d" in base else 2)
    kernel = kernel * nd if len(kernel) == 1 else kernel
    stride = a.ints(2) or kernel
    stride = stride * nd if len(stride) == 1 else stride
    padding = a.ints(3) or [0]
    padding = padding * nd if len(padding) == 1 else padding
    dilation = (a.ints(4) or [1]) if base.startswith("max") else [1]
    dilation = dilation * nd if len(dilation) == 1 else dilation
    if len(kernel) != nd or len(stride) != nd or len(padding) != nd or len(dilation) != nd:
        return None
    spatial = [
        (i + 2 * p - d * (k - 1) - 1) // s + 1
        for i, k, s, p, d in zip(x[-nd:], kernel, stride, padding, dilation, strict=True)
    ]
    out = _numel(x[:-nd]) * _numel(spatial)
    d = a.dtype(0) or "fp32"
    written = out * (_bpe(d) + (8 if "with_indices" in base else 0))
    return OpCost(out * _numel(kernel), _numel(x) * _bpe(d), written, "vector", d, "pool")


def _adaptive_pool(a: Args) -> OpCost | None:
    x, size = a.shape(0), a.ints(1)
    if x is None or size is None or len(x) <= len(size):
        return None
    d = a.dtype(0) or "fp32"
    out = _numel(x[: len(x) - len(size)]) * _numel(size)
    return OpCost(_numel(x), _numel(x) * _bpe(d), out * _bpe(d), "vector", d, "pool")


def _pool_backward(a: Args) -> OpCost | None:
    """*_pool*_backward(grad_output, self, ...): grad read, an input-shaped gradient written."""
    g, x = a.shape(0), a.shape(1)
    if g is None or x is None:
        return None
    d = a.dtype(0) or "fp32"
    return OpCost(_numel(g), _numel(g) * (_bpe(d) + 8), _numel(x) * _bpe(d), "vector", d, "pool")


# ----- optimizers (foreach / fused) ----------------------------------------------------------------------

# fused optimizer -> (tensor lists read, tensor lists written, FLOPs per parameter element)
_FUSED_OPTIMIZERS: dict[str, tuple[int, int, int]] = {
    "_fused_adam": (4, 3, 12),
    "_fused_adamw": (4, 3, 14),
    "_fused_adagrad": (3, 2, 6),
}


def _foreach(a: Args, base: str, inplace: bool) -> OpCost | None:
    """_foreach_<op>(lists...): every TensorList read, one list written; elements of the first list."""
    first = a.tensor_list(0)
    if first is None:
        return None
    lists = sum(1 for i in range(len(a)) if a.tensor_list(i) is not None)
    n = sum(_numel(s) for s in first)
    d = a.list_dtype()
    per_el = 2 if any(op in base for op in TWO_FLOP_OPS) else 1
    flops = 0 if base in ("_foreach_copy", "_foreach_zero") else per_el * n
    read = 0 if base == "_foreach_zero" else lists * n * _bpe(d)
    return OpCost(flops, read, n * _bpe(d), "vector", d, "optimizer", assumed_dtype=True)


def _fused_optimizer(a: Args, base: str) -> OpCost | None:
    params = a.tensor_list(0)
    if params is None:
        return None
    n = sum(_numel(s) for s in params)
    d = a.list_dtype()
    if base == "_fused_sgd":
        has_momentum = a.tensor_list(2) is not None
        reads, writes, per_el = (3, 2, 4) if has_momentum else (2, 1, 2)
    else:
        reads, writes, per_el = _FUSED_OPTIMIZERS[base]
    return OpCost(per_el * n, reads * n * _bpe(d), writes * n * _bpe(d), "vector", d, "optimizer", True)


# ----- torch.compile / Triton kernels -------------------------------------------------------------------


def _triton(a: Args, name: str) -> OpCost | None:
    """Inductor kernels record their buffers' shapes (inputs and outputs mixed): bytes = all buffers,
    FLOPs = one per element of the largest buffer for each arithmetic ATen op the kernel's name says it
    fused (``triton_poi_fused_add_mul_0``: 2; views, copies, pads and layout changes: 0; at least 1).
    Reads and writes cannot be told apart."""
    shapes = [s for s in a.dims if _is_shape(s) and s]
    if not shapes:
        return None
    typed = [dt.normalise(t) for t in a.types]
    dtype_ = next((t for t in typed if t is not None), None)
    if dtype_ is None:
        dtype_ = a.list_dtype()
    total = 0
    for i, s in enumerate(a.dims):
        if _is_shape(s) and s:
            assert isinstance(s, list)
            d = typed[i] if i < len(typed) and typed[i] is not None else dtype_
            total += _numel(s) * _bpe(d)
    largest = max(_numel(s) for s in shapes if isinstance(s, list))
    family = "reduce" if name.startswith(("triton_red", "triton_per")) else "elementwise"
    return OpCost(largest * _fused_arithmetic(name), total, 0, "vector", dtype_, family, assumed_dtype=a.used_fallback)


def _fused_arithmetic(name: str) -> int:
    """How many of the ATen ops an Inductor kernel fused compute (at least 1)."""
    from aiprof.analysis.inductor import arithmetic_ops, fused_ops_of_name

    found = fused_ops_of_name(name)
    return max(1, len(arithmetic_ops(found[1]))) if found else 1


# ----- dispatch ------------------------------------------------------------------------------------------

Model = Callable[[Args, str, bool], "OpCost | None"]

_EXACT: dict[str, Model] = {
    "mm": lambda a, n, i: _mm(a),
    "addmm": lambda a, n, i: _mm(a, 1, 2, bias=0),
    "_addmm_activation": lambda a, n, i: _addmm_activation(a),
    "bmm": lambda a, n, i: _bmm(a),
    "baddbmm": lambda a, n, i: _bmm(a, 1, 2, bias=0),
    "addbmm": lambda a, n, i: _addbmm(a),
    "addr": lambda a, n, i: _addr(a),
    "matmul": lambda a, n, i: _matmul(a),
    "linear": lambda a, n, i: _linear(a),
    "_scaled_mm": lambda a, n, i: _scaled_mm(a),
    "_int_mm": lambda a, n, i: _int_mm(a),
    "mv": lambda a, n, i: _mv(a),
    "addmv": lambda a, n, i: _mv(a, 1, 2, bias=0),
    "dot": lambda a, n, i: _dot(a),
    "vdot": lambda a, n, i: _dot(a),
    "convolution_backward": lambda a, n, i: _conv_backward(a, n),
    "cudnn_convolution_backward_input": lambda a, n, i: _conv_backward_input_legacy(a),
    "miopen_convolution_backward_input": lambda a, n, i: _conv_backward_input_legacy(a),
    "mkldnn_convolution_backward": lambda a, n, i: _conv_backward(a, n),
    "_softmax": lambda a, n, i: _softmax(a, n),
    "softmax": lambda a, n, i: _softmax(a, n),
    "_log_softmax": lambda a, n, i: _softmax(a, n),
    "log_softmax": lambda a, n, i: _softmax(a, n),
    "_softmax_backward_data": lambda a, n, i: _softmax_backward(a),
    "_log_softmax_backward_data": lambda a, n, i: _softmax_backward(a),
    "native_layer_norm": lambda a, n, i: _layer_norm(a, n),
    "layer_norm": lambda a, n, i: _layer_norm(a, n),
    "native_layer_norm_backward": lambda a, n, i: _layer_norm_backward(a),
    "rms_norm": lambda a, n, i: _rms_norm(a, n),
    "_fused_rms_norm": lambda a, n, i: _rms_norm(a, n),
    "_fused_rms_norm_backward": lambda a, n, i: _rms_norm_backward(a),
    "_C::rms_norm": lambda a, n, i: _rms_norm(a, n),
    "_C::fused_add_rms_norm": lambda a, n, i: _rms_norm(a, n),
    "native_batch_norm_backward": lambda a, n, i: _batch_norm_backward(a, n),
    "cudnn_batch_norm_backward": lambda a, n, i: _batch_norm_backward(a, n),
    "miopen_batch_norm_backward": lambda a, n, i: _batch_norm_backward(a, n),
    "native_group_norm": lambda a, n, i: _group_norm(a),
    "native_group_norm_backward": lambda a, n, i: _group_norm_backward(a),
    "cumsum": lambda a, n, i: _scan(a),
    "cumprod": lambda a, n, i: _scan(a),
    "copy": lambda a, n, i: _copy(a, "copy"),
    "clone": lambda a, n, i: _copy(a, "clone"),
    "contiguous": lambda a, n, i: _copy(a, "contiguous"),
    "_to_copy": lambda a, n, i: _copy(a, "_to_copy"),
    "to": lambda a, n, i: _copy(a, "to"),
    "cat": lambda a, n, i: _cat(a),
    "stack": lambda a, n, i: _cat(a),
    "embedding": lambda a, n, i: _embedding(a),
    "embedding_dense_backward": lambda a, n, i: _embedding_backward(a),
    "index_select": lambda a, n, i: _index_select(a),
    "gather": lambda a, n, i: _gather(a),
    "scatter": lambda a, n, i: _scatter(a, "scatter", i),
    "scatter_add": lambda a, n, i: _scatter(a, "scatter_add", i),
    "index": lambda a, n, i: _index(a),
    "index_put": lambda a, n, i: _index_put(a),
    "_index_put_impl": lambda a, n, i: _index_put(a),
    "index_add": lambda a, n, i: _index_add(a, "index_add"),
    "index_copy": lambda a, n, i: _index_add(a, "index_copy"),
    "_adaptive_avg_pool2d": lambda a, n, i: _adaptive_pool(a),
    "adaptive_avg_pool2d": lambda a, n, i: _adaptive_pool(a),
    "_adaptive_avg_pool3d": lambda a, n, i: _adaptive_pool(a),
    "_fused_sgd": lambda a, n, i: _fused_optimizer(a, "_fused_sgd"),
    "native_dropout": _native_dropout,
}
for _name in DROPOUTS:
    _EXACT[_name] = _dropout
for _name in _CONV_SIGS:
    _EXACT[_name] = lambda a, n, i: _conv(a, n)
for _name in _ATTN_SIGS:
    _EXACT[_name] = lambda a, n, i: _attention(a, n)
for _name in _BATCH_NORM_TRAINING_ARG:
    _EXACT[_name] = lambda a, n, i: _batch_norm(a, n)
for _name in _REDUCTIONS:
    _EXACT.setdefault(_name, lambda a, n, i: _reduction(a, n))
for _name in _FUSED_OPTIMIZERS:
    _EXACT[_name] = lambda a, n, i: _fused_optimizer(a, n)
for _name in UNARY | BINARY | FILLS:
    _EXACT.setdefault(_name, lambda a, n, i: _elementwise(a, n, i))
for _name in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
              "max_pool2d_with_indices", "max_pool3d_with_indices"):
    _EXACT[_name] = lambda a, n, i: _pool(a, n)
for _name in ("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward", "avg_pool2d_backward",
              "avg_pool3d_backward", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward"):
    _EXACT[_name] = lambda a, n, i: _pool_backward(a)


def split_name(name: str) -> tuple[str, bool]:
    """``aten::add_`` → (``add``, in-place). Other namespaces keep their prefix (``_C::rms_norm``)."""
    base = name[6:] if name.startswith("aten::") else name
    if "::" not in base and "." in base:
        base = base.split(".", 1)[0]  # an overload name (``add.Tensor``)
    if base.endswith("_") and not base.endswith("__") and len(base) > 1 and base not in _EXACT:
        return base[:-1], True
    return base, False


def _model_for(base: str, inplace: bool) -> Model | None:
    model = _EXACT.get(base)
    if model is not None:
        return model
    if base.startswith("_fused_") and base[:-1] in _FUSED_OPTIMIZERS:
        return _EXACT[base[:-1]]
    if base.startswith("_foreach_"):
        return lambda a, n, i: _foreach(a, n, i)
    if base.startswith(("triton_poi", "triton_red", "triton_per", "cpp_fused_")):
        return lambda a, n, i: _triton(a, n)
    return None


def is_modelled_name(name: str) -> bool:
    """Whether some model exists for this op name (its shapes may still be insufficient)."""
    base, inplace = split_name(name)
    return _model_for(base, inplace) is not None


def op_cost(
    name: str,
    input_dims: Sequence[object] | None,
    input_types: Sequence[object] | None,
    concrete_inputs: Sequence[object] | None = None,
    *,
    fallback_dtype: str | None = None,
    output_hint: Sequence[int] | None = None,
    input_strides: Sequence[object] | None = None,
) -> OpCost | None:
    """FLOPs and bytes of one call of op ``name`` with the recorded inputs; None when not modelled.

    ``fallback_dtype`` is used for TensorList inputs (``cat``, ``_foreach_*``), whose dtypes traces omit.
    ``output_hint`` is the output shape when known from elsewhere; convolutions use it when the trace
    records no stride/padding (otherwise stride 1 and no padding would be assumed).
    ``input_strides`` (the trace's ``Input Strides``): an input with a 0 stride (an expanded view) is
    read once per distinct element, not once per logical element.
    Without ``input_types`` (legacy traces record shapes only) tensors are taken as fp32 and the cost
    says so (``assumed_fp32``).
    """
    base, inplace = split_name(name)
    model = _model_for(base, inplace)
    if model is None or input_dims is None:
        return None
    args = Args(input_dims, input_types or [], concrete_inputs, fallback_dtype, output_hint, input_strides)
    try:
        cost = model(args, base, inplace)
        if cost is not None and args.strides and cost.family in STRIDE_AWARE_FAMILIES:
            cost = _expanded_correction(args, cost)
    except (ValueError, ZeroDivisionError, IndexError, TypeError, OverflowError):
        return None  # a malformed trace entry is unmodelled, never a crash
    if cost is None:
        return None
    if (args.used_fallback and not cost.assumed_dtype) or (args.assumed_fp32 and not cost.assumed_fp32):
        cost = replace(cost, assumed_dtype=cost.assumed_dtype or args.used_fallback,
                       assumed_fp32=args.assumed_fp32)
    return cost


# Families whose models read every tensor input once in full: an expanded input's untouched elements are
# taken back out of their bytes. Index ops read only what their indices pick; optimizers and Triton
# kernels record buffers, not views.
STRIDE_AWARE_FAMILIES = frozenset(
    {"gemm", "conv", "attention", "softmax", "norm", "elementwise", "reduce", "copy", "pool"}
)


def _expanded_correction(a: Args, cost: OpCost) -> OpCost:
    """Bytes read minus, for each input with a 0 stride, the elements it does not really hold."""
    saved = 0
    for i in range(len(a)):
        touched = a.touched(i)
        shape = a.shape(i)
        if touched is not None and shape is not None:
            saved += (_numel(shape) - touched) * _bpe(a.dtype(i))
    if saved <= 0:
        return cost
    return replace(cost, bytes_read=max(cost.bytes_read - saved, 0), expanded_inputs=True)
