"""The ``shaped_ops`` and ``attention`` views: the steady steps' outermost shaped aten ops (per thread, in
time order, with their time), and the unfused attentions among them (matmul → softmax → matmul on
[.., Sq, Sk] scores), with the shape helpers the fusion and kernel rules share.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from aiprof.trace import links
from aiprof.trace.model import I64, Kind

if TYPE_CHECKING:
    from aiprof.rules.context import RankContext

GEMM_OPS = {"aten::bmm", "aten::matmul", "aten::baddbmm", "aten::einsum", "aten::mm"}
_SOFTMAX = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax"}
_MIN_SCORE_DIM = 32  # Sq, Sk below this are not worth a fused kernel


@dataclass
class ShapedOp:
    row: int
    name: str
    shapes: list[Any]
    time_ns: int


class ShapedOps:
    """Outermost shaped ops of the steady steps, in time order per thread, with their time."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx

    @cached_property
    def rows(self) -> I64:
        ctx = self.ctx
        c = ctx.trace.columns
        ops = ctx.cpu_ops
        if ops.size == 0:
            return ops
        par = links.parent(ctx.trace)
        p = par[ops]
        # Outermost aten op: the parent is not an aten op (autograd wrappers and annotations are fine).
        parent_aten = (p >= 0) & ctx.trace.name_matches(np.maximum(p, 0), r"^aten::") & (c.kind[np.maximum(p, 0)] == int(Kind.CPU_OP))
        rows = ops[~parent_aten & ctx.trace.name_matches(ops, r"^aten::")]
        order = np.lexsort((c.ts[rows], c.tid[rows], c.pid[rows]))
        kept: I64 = rows[order]
        return kept

    @cached_property
    def names(self) -> list[str]:
        """The name of each row of ``rows``."""
        return self.ctx.names(self.rows)

    @cached_property
    def time_ns(self) -> I64:
        """Per row of ``rows``: GPU time of the kernels it launched (GPU), else its CPU duration."""
        c = self.ctx.trace.columns
        if self.ctx.is_gpu:
            from aiprof.analysis.ops import gpu_ns_per_op

            return gpu_ns_per_op(self.ctx.trace)[1][self.rows]
        out: I64 = c.dur[self.rows]
        return out

    def op(self, i: int) -> ShapedOp:
        row = int(self.rows[i])
        return ShapedOp(row, self.ctx.trace.name_of(row), self.shapes(i), int(self.time_ns[i]))

    def shapes(self, i: int) -> list[Any]:
        return list(self.ctx.trace.op_inputs(int(self.rows[i])).dims)

    def thread(self, i: int) -> tuple[int, int]:
        c = self.ctx.trace.columns
        row = int(self.rows[i])
        return int(c.pid[row]), int(c.tid[row])


def gemm_out(name: str, shapes: list[Any]) -> list[int] | None:
    """Output shape of a batched GEMM from its input shapes (None when not a [.., M, K] @ [.., K, N])."""
    tensors = [s for s in shapes if isinstance(s, list) and len(s) >= 2]
    if name == "aten::baddbmm" and len(tensors) >= 3:
        tensors = tensors[1:]
    if len(tensors) < 2:
        return None
    a, b = tensors[0], tensors[1]
    if a[-1] != b[-2]:
        return None
    batch = a[:-2] if len(a) >= len(b) else b[:-2]
    return [*batch, a[-2], b[-1]]


@dataclass(frozen=True)
class Attention:
    """Unfused attentions of the steady steps (``ctx.views.attention``): softmaxes over [.., Sq, Sk] scores
    between the GEMM that made them and the GEMM that consumes them."""

    scores: Counter[tuple[int, ...]]  # score shapes, calls of each
    fwd_flops: float  # QK^T and PV of every call: 4·Sq·Sk·D per batch·head
    lines: Counter[str]  # user source lines of the softmaxes

    @cached_property
    def score_dims(self) -> frozenset[tuple[int, ...]]:
        """The (Sq, Sk) of every score shape: GEMMs on these are unfused_attention's, other rules skip them."""
        return frozenset(tuple(sc[-2:]) for sc in self.scores)


def find_attention(ctx: RankContext) -> Attention:
    """The steady steps' matmul → softmax → matmul chains (what :attr:`RankViews.attention` holds)."""
    view = ctx.views.shaped_ops
    names = view.names
    scores: Counter[tuple[int, ...]] = Counter()
    lines: Counter[str] = Counter()
    fwd_flops = 0.0
    for i, name in enumerate(names):
        if name not in _SOFTMAX:
            continue
        shape = first_shape(view.shapes(i))
        if shape is None or len(shape) < 3 or min(shape[-2:]) < _MIN_SCORE_DIM:
            continue
        before, after = _gemm_before(view, names, i, shape), _gemm_after(view, names, i, shape)
        if before < 0 or after < 0:
            continue
        scores[tuple(shape)] += 1
        head_dim = _inner_dim(names[before], view.shapes(before))
        fwd_flops += 4.0 * numel(shape) * head_dim  # QK^T and PV: 2·Sq·Sk·D each, per batch·head
        line = ctx.source_line(int(view.rows[i]))
        if line:
            lines[line] += 1
    return Attention(scores, fwd_flops, lines)


def _inner_dim(name: str, shapes: list[Any]) -> int:
    """D of the QK^T GEMM: the contraction dimension (last dim of its first operand)."""
    tensors = [s for s in shapes if is_flat(s) and len(s) >= 2]
    if name == "aten::baddbmm" and len(tensors) >= 3:
        tensors = tensors[1:]
    return int(tensors[0][-1]) if tensors else 0


def first_shape(shapes: list[Any]) -> list[int] | None:
    for s in shapes:
        if s and is_flat(s):
            return list(s)
    return None


def _gemm_before(view: ShapedOps, names: list[str], i: int, shape: list[int], window: int = 6) -> int:
    """Index of the GEMM that produced the scores (a few ops before the softmax), else -1."""
    thread = view.thread(i)
    for j in range(i - 1, max(i - window, -1) - 1, -1):
        if j < 0 or view.thread(j) != thread:
            return -1
        if names[j] in GEMM_OPS:
            out = gemm_out(names[j], view.shapes(j))
            return j if out is not None and numel(out) == numel(shape) and out[-1] == shape[-1] else -1
    return -1


def _gemm_after(view: ShapedOps, names: list[str], i: int, shape: list[int], window: int = 6) -> int:
    """Index of the GEMM that consumes the probabilities (a few ops after the softmax), else -1."""
    thread = view.thread(i)
    for j in range(i + 1, min(i + window + 1, len(names))):
        if view.thread(j) != thread:
            return -1
        if names[j] in GEMM_OPS:
            first = first_shape(view.shapes(j) if names[j] != "aten::baddbmm" else view.shapes(j)[1:])
            return j if first is not None and numel(first) == numel(shape) else -1
    return -1


def numel(shape: list[int]) -> int:
    return math.prod(shape)


def is_flat(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) for v in value)


__all__ = ["GEMM_OPS", "Attention", "ShapedOp", "ShapedOps", "find_attention", "first_shape", "gemm_out", "is_flat",
           "numel"]
