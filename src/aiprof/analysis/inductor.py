"""Compiled kernels back to the model: which ATen ops each Inductor kernel fused, and which compiled graph
launched it.

Inductor names a generated kernel after the ops it fused: ``triton_<kind>_fused_<op>_<op>…_<n>`` (kind
``poi`` pointwise, ``red`` reduction, ``per`` persistent reduction, ``tem`` a template such as a GEMM, ``for``
foreach, ``mix``), ``cpp_fused_<ops>_<n>`` on the CPU. Older Inductor (torch < 2.1) numbered its Triton
kernels instead (``triton__0d1d2d``): the name says nothing, but the CPU op Inductor wraps every launch in
(``record_function`` named like the kernel, with ``kernel_backend``/``kernel_name`` args from torch 2.6)
still does. So the fused ops come from the kernel's name, else from the name of the CPU op that launched it
(``source`` says which); the compiled graph from the ``Torch-Compiled Region`` / ``CompiledFunction`` /
``CompiledFunctionBackward`` span the launch ran in.

Op names are split on ``_`` with the ATen names that themselves hold underscores kept whole
(:data:`ATEN_MULTI`: ``_to_copy``, ``native_layer_norm``, ``constant_pad_nd``…): Inductor joins op names with
``_``, so ``fused__to_copy_add_native_layer_norm_0`` is ``_to_copy``, ``add``, ``native_layer_norm``.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from aiprof.trace import links
from aiprof.trace.model import I64, Kind, Trace

_KERNEL = re.compile(r"^(?:triton_(?P<kind>poi|red|per|tem|for|mix)_fused_|cpp_fused_)(?P<ops>.*?)(?:_\d+)?$")
_NUMBERED = re.compile(r"^triton_+\d")  # triton__0d1d2d: numbered, pre-2.1 Inductor
INDUCTOR_KERNEL = r"^(triton_|cpp_fused_)"
_GRAPH = r"^(Torch-Compiled Region|CompiledFunction|CompiledFunctionBackward|## Call CompiledFxGraph)"
KINDS = {"poi": "pointwise", "red": "reduction", "per": "persistent reduction", "tem": "template", "for": "foreach",
         "mix": "mixed"}

# ATen op names with underscores, as Inductor writes them into kernel names (longest first when matching).
ATEN_MULTI = frozenset("""
_to_copy _unsafe_view _softmax _log_softmax _softmax_backward_data _log_softmax_backward_data _scaled_dot_product_flash_attention
_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention _native_batch_norm_legit _native_batch_norm_legit_functional
_native_batch_norm_legit_no_training _fused_rms_norm _unsafe_index _unsafe_index_put _embedding_bag _weight_norm_interface
native_layer_norm native_layer_norm_backward native_batch_norm native_batch_norm_backward native_group_norm
native_group_norm_backward native_dropout native_dropout_backward constant_pad_nd reflection_pad2d replication_pad2d
index_put index_select index_add scatter_add scatter_reduce select_scatter slice_scatter diagonal_scatter as_strided
as_strided_scatter new_zeros new_ones new_empty new_full new_empty_strided full_like zeros_like ones_like empty_like
rand_like randn_like clamp_min clamp_max masked_fill masked_scatter threshold_backward gelu_backward silu_backward
sigmoid_backward tanh_backward hardtanh_backward leaky_relu leaky_relu_backward elu_backward softplus_backward
nll_loss_forward nll_loss_backward nll_loss2d_forward nll_loss2d_backward embedding_dense_backward convolution_backward
avg_pool2d avg_pool2d_backward max_pool2d_with_indices max_pool2d_with_indices_backward adaptive_avg_pool2d
upsample_nearest2d upsample_bilinear2d grid_sampler_2d group_norm layer_norm batch_norm rms_norm linalg_vector_norm
scaled_dot_product_attention bitwise_and bitwise_or bitwise_not bitwise_xor logical_and logical_or logical_not
floor_divide remainder_ true_divide lift_fresh squeeze_copy unsqueeze_copy view_copy permute_copy expand_copy
alias_copy t_copy split_with_sizes unbind_copy topk_ cumsum_ log1p expm1 erfinv rsub sgn isnan isinf
moe_forward moe_sum
""".split())
_MAX_OP_TOKENS = max(len(n.split("_")) for n in ATEN_MULTI)


def split_ops(joined: str) -> tuple[str, ...]:
    """``_to_copy_add_native_layer_norm`` → ``("_to_copy", "add", "native_layer_norm")``."""
    tokens = joined.split("_")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        for k in range(min(_MAX_OP_TOKENS, len(tokens) - i), 1, -1):
            name = "_".join(tokens[i : i + k])
            if name in ATEN_MULTI:
                out.append(name)
                i += k
                break
        else:
            if tokens[i] == "" and i + 1 < len(tokens):  # a leading underscore: "_foo" not in the list
                out.append("_" + tokens[i + 1])
                i += 2
            else:
                if tokens[i]:
                    out.append(tokens[i])
                i += 1
    return tuple(out)


# Fused ops that only move or reinterpret data: no FLOP of their own.
DATA_MOVEMENT = frozenset("""
view _unsafe_view reshape clone copy _to_copy to contiguous slice select transpose permute expand squeeze unsqueeze
cat stack split split_with_sizes unbind constant_pad_nd as_strided index index_select gather scatter slice_scatter
select_scatter diagonal_scatter t alias detach lift_fresh full full_like zeros zeros_like ones ones_like empty
empty_like new_zeros new_ones new_empty fill arange iota flip roll repeat unfold squeeze_copy unsqueeze_copy
view_copy permute_copy expand_copy alias_copy t_copy reflection_pad2d replication_pad2d _unsafe_index embedding
""".split())


def arithmetic_ops(ops: tuple[str, ...]) -> tuple[str, ...]:
    """The fused ops that compute (not :data:`DATA_MOVEMENT`)."""
    return tuple(op for op in ops if op not in DATA_MOVEMENT)


def fused_ops_of_name(name: str) -> tuple[str, tuple[str, ...]] | None:
    """(kind, fused ops) for an Inductor kernel name, None for any other name (or a numbered one)."""
    m = _KERNEL.match(name)
    if not m or not m.group("ops") or m.group("ops").isdigit():  # triton_poi_fused_0: fused nothing named
        return None
    kind = KINDS.get(m.group("kind") or "", "cpp" if name.startswith("cpp_") else "")
    return kind, split_ops(m.group("ops"))


class KernelAttribution(msgspec.Struct, frozen=True):
    """One Inductor kernel name: its calls and device time, the ops it fused and where that came from."""

    name: str
    calls: int
    gpu_ns: int
    kind: str  # pointwise, reduction, persistent reduction, template, foreach, cpp, '' (unknown)
    ops: tuple[str, ...]  # the ATen ops it fused ('' when unknown)
    source: str  # "kernel name" | "launching op" | "" (not attributed)
    graphs: tuple[str, ...]  # the compiled graph spans the launches ran in (names, most device time first)


def compiled_kernels(trace: Trace) -> list[KernelAttribution]:
    """Every Inductor kernel name of the trace's device activity (Triton, numbered Triton, cpp), with the ops
    it fused and the compiled graphs that launched it, most device time first (cached)."""
    cached: list[KernelAttribution] | None = trace.cache.get("inductor.kernels")
    if cached is not None:
        return cached
    c = trace.columns
    kernels = trace.rows_of(Kind.KERNEL)
    kernels = kernels[trace.name_matches(kernels, INDUCTOR_KERNEL)]
    op = links.gpu_op(trace)[kernels] if kernels.size else np.zeros(0, dtype=np.int64)
    graph = _enclosing_graph(trace, links.launcher(trace)[kernels]) if kernels.size else np.zeros(0, dtype=np.int64)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (name, by) in enumerate(zip(c.name[kernels].tolist(), op.tolist())):
        groups.setdefault((name, int(c.name[by]) if by >= 0 else -1), []).append(i)
    merged: dict[str, KernelAttribution] = {}
    for (name_id, op_name_id), idx in groups.items():
        name = trace.strings[name_id]
        found, source = fused_ops_of_name(name), "kernel name"
        if found is None and op_name_id >= 0:
            found, source = fused_ops_of_name(trace.strings[op_name_id]), "launching op"
        rows = kernels[idx]
        gpu_ns = int(c.dur[rows].sum())
        names = [trace.name_of(int(g)) for g in graph[idx].tolist() if g >= 0]
        prev = merged.get(name)
        kind, ops = found if found else ("", ())
        entry = KernelAttribution(name, len(idx), gpu_ns, kind, ops, source if found else "", _by_count(names))
        if prev is not None:  # the same kernel launched by ops of several names: keep the attributed one
            best = prev if prev.ops or not entry.ops else entry
            entry = KernelAttribution(name, prev.calls + entry.calls, prev.gpu_ns + entry.gpu_ns, best.kind, best.ops,
                                      best.source, _by_count(list(prev.graphs) + list(entry.graphs)))
        merged[name] = entry
    cached = sorted(merged.values(), key=lambda k: -k.gpu_ns)
    trace.cache["inductor.kernels"] = cached
    return cached


def _by_count(names: list[str]) -> tuple[str, ...]:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return tuple(sorted(counts, key=lambda n: -counts[n])[:3])


def _enclosing_graph(trace: Trace, launch: I64) -> I64:
    """For each launch call: the innermost compiled-graph span (region, CompiledFunction…) around it, or -1."""
    par = links.parent(trace)
    host = trace.rows_of(Kind.CPU_OP, Kind.USER_ANNOTATION)
    is_graph = np.zeros(len(trace.columns.ts), dtype=bool)
    is_graph[host[trace.name_matches(host, _GRAPH)]] = True
    out = np.full(launch.shape, -1, dtype=np.int64)
    memo: dict[int, int] = {}
    for i, row in enumerate(launch.tolist()):
        if row < 0:
            continue
        p = int(par[row])
        seen: list[int] = []
        found = -1
        while p >= 0:
            if p in memo:
                found = memo[p]
                break
            seen.append(p)
            if is_graph[p]:
                found = p
                break
            p = int(par[p])
        for s in seen:
            memo[s] = found
        out[i] = found
    return out


class CompiledKernels(msgspec.Struct, kw_only=True):
    """The report's view of the Inductor kernels (``compile.kernels``): their names and device time, the
    part of it whose fused ops are known and the part launched inside a known compiled graph; ``kernels``
    the ``top`` with the most device time."""

    kernel_names: int
    gpu_ns: int
    attributed_gpu_ns: int
    attributed_share: float
    in_graph_gpu_ns: int
    kernels: list[KernelAttribution]


def compiled_kernels_section(trace: Trace, top: int = 50) -> CompiledKernels:
    """The Inductor kernels of the trace as the report shows them (:class:`CompiledKernels`)."""
    rows = compiled_kernels(trace)
    total = sum(k.gpu_ns for k in rows)
    attributed = sum(k.gpu_ns for k in rows if k.ops)
    in_graph = sum(k.gpu_ns for k in rows if k.graphs)
    return CompiledKernels(kernel_names=len(rows), gpu_ns=total, attributed_gpu_ns=attributed,
                           attributed_share=attributed / total if total else 0.0, in_graph_gpu_ns=in_graph,
                           kernels=rows[:top])
