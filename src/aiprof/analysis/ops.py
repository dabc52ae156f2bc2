"""Op statistics: CPU time, self CPU time and the GPU time each op launched, per op name or per (name, shapes).

Definitions (ns):
- ``cpu_total_ns``: the op's span. ``cpu_self_ns``: the span minus the time covered by its *direct* child
  CPU ops / annotations on the same thread (runtime calls such as ``cudaLaunchKernel`` stay in self
  time, as in ``torch.profiler``'s ``self_cpu_time_total`` and the TensorBoard plugin's host self time).
- ``gpu_self_ns``: summed duration of the GPU activities (kernels, memcpy, memset) this op launched itself
  (``links.gpu_op``); ``gpu_total_ns`` adds those launched by every descendant op. Sums, not unions:
  kernels of one op on two streams both count.
- ``kernel_count_self`` / ``kernel_count_total``: kernels (memcpy/memset excluded) launched likewise.
- A *top-level* op has no CPU op above it on its thread (annotations such as ProfilerStep do not count).

Aggregating ``gpu_total_ns`` over *all* ops double counts nested ops by design (aten::linear and its
aten::addmm both own the GEMM); use ``top_level_only=True`` for numbers that add up.
"""

from __future__ import annotations


import msgspec
import numpy as np

from aiprof.arrays import unique
from aiprof.trace import links
from aiprof.trace.model import GPU_WORK_KINDS, I64, Bool, Kind, Trace

_MAX_DEPTH = 256


class OpGroupStats(msgspec.Struct, frozen=True, kw_only=True):
    """One op name (and, when grouped by shapes, one input-shape signature). Times in ns."""

    name: str
    input_shapes: str | None  # JSON of ``Input Dims`` ("[[512,128],[128,384]]"); None when not grouped
    count: int
    cpu_total_ns: int
    cpu_self_ns: int
    cpu_mean_ns: float
    gpu_self_ns: int
    gpu_total_ns: int
    kernel_count_self: int
    kernel_count_total: int


class OpStats(msgspec.Struct, frozen=True, kw_only=True):
    """Op groups sorted by ``cpu_total_ns`` (longest first). The report's ``ranks[].ops`` keeps the
    :data:`aiprof.analysis.run.TOP_N` longest by GPU time and by self CPU time; ``group_count`` counts them all."""

    top_level_only: bool
    by_shapes: bool
    op_count: int
    groups: tuple[OpGroupStats, ...]
    group_count: int = 0  # op groups in the trace (the length of ``groups`` before any cut)


# ---------------------------------------------------------------------------------------------------
# Per-row quantities (cached on the trace; the roofline and rules can reuse them)
# ---------------------------------------------------------------------------------------------------
def cpu_self_ns(trace: Trace) -> I64:
    """Per row: self CPU time of CPU ops and annotations (span minus direct child op/annotation time)."""
    cached = trace.cache.get("ops.cpu_self_ns")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    c = trace.columns
    par = links.parent(trace)
    out = np.where(_is_op_like(trace), c.dur, 0).astype(np.int64)
    child = np.flatnonzero(_is_op_like(trace) & (par >= 0))
    p = par[child]
    covered = np.minimum(c.ts[child] + c.dur[child], c.ts[p] + c.dur[p]) - c.ts[child]
    out -= np.bincount(p, weights=np.maximum(covered, 0), minlength=len(c)).astype(np.int64)
    np.maximum(out, 0, out=out)
    trace.cache["ops.cpu_self_ns"] = out
    return out


def gpu_ns_per_op(trace: Trace) -> tuple[I64, I64, I64, I64]:
    """Per row: (gpu_self_ns, gpu_total_ns, kernel_count_self, kernel_count_total) of each CPU op."""
    cached = trace.cache.get("ops.gpu_ns")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    c = trace.columns
    n = len(c)
    op_of = links.gpu_op(trace)
    gpu = np.flatnonzero(trace.kind_mask(*GPU_WORK_KINDS) & (op_of >= 0))
    owners = op_of[gpu]
    g_self = np.bincount(owners, weights=c.dur[gpu], minlength=n).astype(np.int64)
    is_kernel = (c.kind[gpu] == int(Kind.KERNEL)).astype(np.int64)
    k_self = np.bincount(owners, weights=is_kernel, minlength=n).astype(np.int64)
    par = links.parent(trace)
    result = (g_self, _add_to_ancestors(g_self, par), k_self, _add_to_ancestors(k_self, par))
    trace.cache["ops.gpu_ns"] = result
    return result


def top_level_ops(trace: Trace) -> Bool:
    """Row mask: CPU ops with no CPU op among their ancestors on the same thread."""
    c = trace.columns
    par = links.parent(trace)
    ops = np.flatnonzero(c.kind == int(Kind.CPU_OP))
    nested = np.zeros(ops.size, dtype=bool)
    cur = par[ops]
    for _ in range(_MAX_DEPTH):
        alive = cur >= 0
        if not alive.any():
            break
        nested |= alive & (c.kind[np.maximum(cur, 0)] == int(Kind.CPU_OP))
        cur = np.where(alive & ~nested, par[np.maximum(cur, 0)], -1)
    mask = np.zeros(len(c), dtype=bool)
    mask[ops[~nested]] = True
    return mask


def _add_to_ancestors(values: I64, par: I64) -> I64:
    """Each row's value plus the values of all its descendants (walks up from rows with a value)."""
    total = values.copy()
    src = np.flatnonzero(values)
    vals = values[src]
    cur = par[src]
    for _ in range(_MAX_DEPTH):
        alive = cur >= 0
        if not alive.any():
            break
        cur, vals = cur[alive], vals[alive]
        total += np.bincount(cur, weights=vals, minlength=len(total)).astype(np.int64)
        cur = par[cur]
    return total


def _is_op_like(trace: Trace) -> Bool:
    kind = trace.columns.kind
    mask: Bool = (kind == int(Kind.CPU_OP)) | (kind == int(Kind.USER_ANNOTATION))
    return mask


# ---------------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------------
def op_stats(trace: Trace, top_level_only: bool = False, by_shapes: bool = False) -> OpStats:
    """Aggregate CPU ops per name, or per (name, input shapes) with ``by_shapes``."""
    c = trace.columns
    mask = top_level_ops(trace) if top_level_only else c.kind == int(Kind.CPU_OP)
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return OpStats(groups=(), top_level_only=top_level_only, by_shapes=by_shapes, op_count=0)
    self_cpu = cpu_self_ns(trace)
    g_self, g_total, k_self, k_total = gpu_ns_per_op(trace)
    shape_id, shape_text = _shape_ids(trace, rows) if by_shapes else (np.zeros(rows.size, np.int64), [""])
    # One int64 key per (name, shapes) pair: a 1-D unique is ~10x faster than unique(axis=0).
    width = int(shape_id.max()) + 1 if shape_id.size else 1
    flat, inverse = np.unique(c.name[rows].astype(np.int64) * width + shape_id, return_inverse=True)
    inverse = inverse.reshape(-1)
    uniq = np.stack((flat // width, flat % width), axis=1)

    def per_group(values: I64) -> I64:
        return np.bincount(inverse, weights=values[rows], minlength=len(uniq)).astype(np.int64)

    counts = np.bincount(inverse, minlength=len(uniq))
    cpu_total, cpu_self = per_group(c.dur), per_group(self_cpu)
    gs, gt, ks, kt = per_group(g_self), per_group(g_total), per_group(k_self), per_group(k_total)
    groups = [
        OpGroupStats(
            name=trace.strings[int(uniq[g, 0])],
            input_shapes=shape_text[int(uniq[g, 1])] if by_shapes else None,
            count=int(counts[g]),
            cpu_total_ns=int(cpu_total[g]),
            cpu_self_ns=int(cpu_self[g]),
            cpu_mean_ns=float(cpu_total[g]) / int(counts[g]),
            gpu_self_ns=int(gs[g]),
            gpu_total_ns=int(gt[g]),
            kernel_count_self=int(ks[g]),
            kernel_count_total=int(kt[g]),
        )
        for g in range(len(uniq))
    ]
    groups.sort(key=lambda s: (-s.cpu_total_ns, s.name, s.input_shapes or ""))
    return OpStats(groups=tuple(groups), top_level_only=top_level_only, by_shapes=by_shapes, op_count=int(rows.size),
                   group_count=len(groups))


class _Dims(msgspec.Struct):
    new: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b"null"))
    legacy: msgspec.Raw = msgspec.field(name="Input dims", default=msgspec.Raw(b"null"))


_DIMS_DECODER = msgspec.json.Decoder(_Dims)


def _shape_ids(trace: Trace, rows: I64) -> tuple[I64, list[str]]:
    """An id per row for its input-shape signature (the raw ``Input Dims`` JSON, all whitespace removed);
    id 0 is "" (no shapes recorded). Decodes only the dims key, once per distinct stored args text."""
    store = trace.op_args
    sig = store.signatures(rows)
    used = unique(sig[sig >= 0])
    table: dict[bytes, int] = {b"": 0}
    id_of_sig = np.zeros(store.distinct + 1, dtype=np.int64)  # the last slot: rows without args (-1)
    for k in used.tolist():
        dims = _DIMS_DECODER.decode(store.text(k))
        raw = bytes(dims.new) if bytes(dims.new) != b"null" else bytes(dims.legacy)
        text = b"" if raw == b"null" else b"".join(raw.split())
        id_of_sig[k] = table.setdefault(text, len(table))
    ids = id_of_sig[sig]
    texts = [""] * len(table)
    for text, index in table.items():
        texts[index] = text.decode()
    return ids, texts
