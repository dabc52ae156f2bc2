"""Rules on work that fused kernels would do with less memory traffic: ``unfused_attention`` and
``fusion_opportunity``.

Both look at the ops' recorded shapes (``record_shapes``): an attention is a GEMM whose output is a
score-shaped ``[..., Sq, Sk]`` tensor that a softmax then reads and a second GEMM consumes; a fusion
chain is a run of at least three consecutive elementwise ops on the same thread, each consuming a tensor
of the previous op's shape. Times are the ops' GPU time (kernels they launched) on GPU traces, and their
CPU time on CPU-only traces.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from msgspec import UNSET, UnsetType

from aiprof import arrays
from aiprof.arrays import unique
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rules.views.kernels import capped, kernels_of_ops
from aiprof.rules.views.shaped import GEMM_OPS, ShapedOps, first_shape, gemm_out, is_flat, numel
from aiprof.trace.model import I64


# ---------------------------------------------------------------------------------------------------
# unfused_attention
# ---------------------------------------------------------------------------------------------------


@rank_rule(saving=Saving.TIME, options=("attention_efficiency_gpu", "attention_efficiency_cpu", "attention_share"),
           needs=("shaped_ops", "attention", "op_costs", "source_lines", "kernels", "steps"))
def unfused_attention(ctx: RankContext) -> list[Finding]:
    """matmul → softmax → matmul on materialised [.., S, S] scores instead of a fused attention kernel."""
    view = ctx.views.shaped_ops
    found = ctx.views.attention
    scores, lines, fwd_flops = found.scores, found.lines, found.fwd_flops
    if not scores:
        return []
    names = view.names
    sigs = ctx.trace.op_signatures(view.rows).tolist()
    touches: dict[int, bool] = {}  # per signature: whether an input has a score shape
    shaped = []
    for i, n in enumerate(names):
        if n in GEMM_OPS:
            continue
        if sigs[i] not in touches:
            touches[sigs[i]] = _touches(view.shapes(i), scores)
        if touches[sigs[i]]:
            shaped.append(i)
    gemms = [i for i, n in enumerate(names) if n in GEMM_OPS and _attention_gemm(view, i, n, scores)]
    t_attn = float(view.time_ns[shaped + gemms].sum())
    training = any(names[i] == "aten::_softmax_backward_data" for i in shaped)
    flops = fwd_flops * (3.5 if training else 1.0)  # backward of a fused kernel: 2.5x the forward FLOPs
    rate, basis = _gemm_rate(ctx, view, names, set(gemms))
    efficiency = ctx.options.attention_efficiency_gpu if ctx.is_gpu else ctx.options.attention_efficiency_cpu
    fused = flops / (efficiency * rate) if rate else float(view.time_ns[gemms].sum())
    saving = _timeline_cap(ctx, max(t_attn - fused, 0.0) / ctx.step_count, view.rows[shaped + gemms])
    if ctx.share(saving) < ctx.options.attention_share:
        return []
    top = Counter({names[i]: 0 for i in shaped + gemms})
    for i in shaped + gemms:
        top[names[i]] += int(view.time_ns[i])
    evidence: dict[str, Any] = {
        "attention_calls_per_step": round(sum(scores.values()) / ctx.step_count, 1),
        "score_shapes": [list(sc) for sc, _ in scores.most_common(3)],
        "score_bytes_per_call": int(np.prod(scores.most_common(1)[0][0])) * 4,
        "attention_ns_per_step": int(t_attn / ctx.step_count),
        "fused_estimate_ns_per_step": int(fused / ctx.step_count),
        "attention_flops_per_step": int(flops / ctx.step_count),
        "fused_rate_basis": basis,
        "fused_efficiency": efficiency,
        "training": training,
        "attention_ops": [{"name": n, "ns_per_step": int(t / ctx.step_count)} for n, t in top.most_common(5)],
    }
    if lines:
        evidence["source_lines"] = [line for line, _ in lines.most_common(3)]
    return [
        ctx.finding(
            "unfused_attention",
            f"Unfused attention: {evidence['attention_calls_per_step']} matmul→softmax→matmul per step on "
            f"{'×'.join(map(str, evidence['score_shapes'][0]))} scores",
            saving,
            evidence=evidence,
            fix=(
                "Replace the explicit attention with torch.nn.functional.scaled_dot_product_attention(q, k, v, "
                "attn_mask=mask, dropout_p=p, is_causal=causal): "
                + ("it dispatches to FlashAttention / memory-efficient kernels that never write the S×S scores to "
                   "memory." if ctx.is_gpu else "on the CPU it runs a fused flash-attention kernel that never "
                   "materialises the S×S scores.")
            ),
            formula="Σ per steady step of the time of every op on the score-shaped tensors (the two GEMMs, scale, "
            "mask, softmax, dropout, and their backward) minus the fused kernel's time: the attention FLOPs "
            "(4·B·H·Sq·Sk·D forward, 3.5x that when training) at attention_efficiency × the best FLOP rate this "
            "trace's other GEMMs reach",
            kind="estimate",
            confidence="medium",
        )
    ]


def _attention_gemm(view: ShapedOps, i: int, name: str, scores: Counter[tuple[int, ...]]) -> bool:
    """A GEMM that reads or writes a score-shaped tensor (QK^T, PV, and their backward GEMMs)."""
    shapes = view.shapes(i)
    if _touches(shapes, scores):
        return True
    out = gemm_out(name, shapes)
    return out is not None and tuple(out) in scores


def _gemm_rate(ctx: RankContext, view: ShapedOps, names: list[str], exclude: set[int]) -> tuple[float | None, str]:
    """FLOP/ns of the fastest GEMM group (name + shapes, ≥ 10 MFLOP per call) outside the attention:
    what a fused attention kernel can be expected to reach on this device."""
    from aiprof.roofline.analysis import cached_op_cost

    groups: dict[tuple[str, str], list[float]] = {}
    dims_text: dict[int, str] = {}  # per signature
    sigs = ctx.trace.op_signatures(view.rows).tolist()
    for i, name in enumerate(names):
        if name not in GEMM_OPS and name not in ("aten::linear", "aten::addmm") or i in exclude:
            continue
        row = int(view.rows[i])
        cost = cached_op_cost(ctx.trace, row)  # op_cost of the recorded inputs, once per signature
        t = float(view.time_ns[i])
        if cost is None or cost.flops < 10_000_000 or t <= 0:
            continue
        if sigs[i] not in dims_text:
            dims_text[sigs[i]] = str(ctx.trace.op_inputs(row).dims)
        acc = groups.setdefault((name, dims_text[sigs[i]]), [0.0, 0.0])
        acc[0] += cost.flops
        acc[1] += t
    if not groups:
        return None, "no other GEMM in the trace: the attention GEMMs' own time is kept"
    (name, dims), (flops, t) = max(groups.items(), key=lambda kv: kv[1][0] / kv[1][1])
    return flops / t, f"{name} {dims}: {flops / t:.1f} GFLOP/s"


def _touches(shapes: list[Any], scores: Counter[tuple[int, ...]]) -> bool:
    return any(is_flat(s) and tuple(s) in scores for s in shapes)


# ---------------------------------------------------------------------------------------------------
# fusion_opportunity
# ---------------------------------------------------------------------------------------------------
class FusionChain(Evidence, kw_only=True):
    """A kind of chain (its first ops, in order) and what fusing it saves per step."""

    ops: str
    saving_ns_per_step: int


class FusionEvidence(Evidence, kw_only=True):
    """``fusion_opportunity``'s evidence: chains and their ops per step, the chains that save most, the
    user's lines that run them (when stacks were recorded)."""

    chains_per_step: float
    ops_in_chains_per_step: float
    top_chains: list[FusionChain]
    source_lines: list[str] | UnsetType = UNSET


@rank_rule(saving=Saving.TIME, options=("fusion_chain_min", "fusion_share"),
           needs=("shaped_ops", "op_costs", "source_lines", "kernels", "steps"))
def fusion_opportunity(ctx: RankContext) -> list[Finding]:
    """Chains of memory-bound elementwise ops that one fused kernel would do in one pass."""
    view = ctx.views.shaped_ops
    names = view.names
    costs = _elementwise_costs(ctx, view)
    c = ctx.trace.columns
    threads = list(zip(c.pid[view.rows].tolist(), c.tid[view.rows].tolist()))
    sigs = ctx.trace.op_signatures(view.rows).tolist()
    largest: dict[int, int] = {}  # signature → largest flat input (elements), -1 for none
    consumes: dict[tuple[int, int], bool] = {}  # (signature, previous op's signature) → _consumes
    chains: list[list[tuple[int, Any]]] = []
    current: list[tuple[int, Any]] = []
    costed = [i for i, cost in enumerate(costs) if cost is not None]
    at = 0  # position in ``costed`` of the next costed op
    i = -1
    while True:
        # With no chain open, only costed ops matter: jump to the next one.
        i = i + 1 if current else (costed[at] if at < len(costed) else len(costs))
        if i >= len(costs):
            break
        if at < len(costed) and costed[at] == i:
            at += 1
        cost = costs[i]
        if cost is None:
            k = sigs[i]
            if k not in largest:
                largest[k] = max((numel(s) for s in view.shapes(i) if is_flat(s)), default=-1)
            if largest[k] * 4 * 64 < max(current[-1][1].bytes_written, 1):
                continue  # a scalar conversion (aten::to of a Python number) does not break a chain
        linked = False
        if cost is not None and current and threads[current[-1][0]] == threads[i]:
            pair = (sigs[i], sigs[current[-1][0]])
            if pair not in consumes:
                consumes[pair] = _consumes(view.shapes(i), view.shapes(current[-1][0]))
            linked = consumes[pair]
        if cost is not None and linked:
            current.append((i, cost))
            continue
        if len(current) >= ctx.options.fusion_chain_min:
            chains.append(current)
        current = [(i, cost)] if cost is not None else []
    if len(current) >= ctx.options.fusion_chain_min:
        chains.append(current)
    return _fusion_finding(ctx, view, names, chains)


def _elementwise_costs(ctx: RankContext, view: ShapedOps) -> list[Any]:
    """Per op of the view: its cost if it is an elementwise op that moves bytes, else None (computed once
    per distinct name and recorded inputs)."""
    from aiprof.roofline.analysis import cached_op_cost
    from aiprof.roofline.cost import BINARY, UNARY, split_name

    trace, rows = ctx.trace, view.rows
    out: list[Any] = [None] * len(rows)
    names = trace.columns.name[rows].astype(np.int64)
    wanted = [n for n in unique(names).tolist() if split_name(trace.strings[n])[0] in UNARY | BINARY]
    cand = np.flatnonzero(arrays.isin(names, wanted))
    if not cand.size:
        return out
    sig = trace.op_signatures(rows[cand])
    _, first, inverse = np.unique(names[cand] * (trace.op_args.distinct + 1) + sig, return_index=True,
                                  return_inverse=True)
    found = []
    for i in cand[first].tolist():
        cost = cached_op_cost(trace, int(rows[i]))
        found.append(cost if cost is not None and cost.family == "elementwise" and cost.bytes > 0 else None)
    for i, k in zip(cand.tolist(), inverse.reshape(-1).tolist(), strict=True):
        out[i] = found[k]
    return out


def _consumes(shapes: list[Any], prev_shapes: list[Any]) -> bool:
    """The op reads a tensor the size of the previous op's output (shapes only: tensor ids are not traced)."""
    prev = first_shape(prev_shapes)
    return prev is not None and any(isinstance(s, list) and numel(s) == numel(prev) for s in shapes)


def _chain_gain(view: ShapedOps, chain: list[tuple[int, Any]]) -> float:
    """What fusing one chain saves: a fused kernel moves only the external bytes (the chain's inputs and
    its final output) at the bandwidth the chain achieved, so saving = t_chain × (1 − external / Σ bytes)."""
    t = float(sum(view.time_ns[i] for i, _ in chain))
    external, total = _chain_bytes(chain)
    return t * max(1.0 - external / total, 0.0) if total else 0.0


def _chain_bytes(chain: list[tuple[int, Any]]) -> tuple[int, int]:
    """(external bytes: the chain's inputs and its final output, Σ bytes of its ops)."""
    total = sum(cost.bytes for _, cost in chain)
    external = chain[0][1].bytes_read + chain[-1][1].bytes_written
    for (_, prev), (_, cost) in zip(chain, chain[1:]):
        external += max(cost.bytes_read - prev.bytes_written, 0)
    return int(external), int(total)


def _timeline_cap(ctx: RankContext, saving_ns: float, ops: I64) -> float:
    """On a GPU, a saving on these ops' kernel time never exceeds what the timeline supports: the step's
    idle plus those kernels' exclusive time (:func:`aiprof.rules.views.kernels.removable_ns`). Work on other
    streams that runs meanwhile does not go away when these kernels get faster."""
    if not ctx.is_gpu:
        return saving_ns

    return capped(ctx, saving_ns, kernels_of_ops(ctx, ops))[0]


def _fusion_finding(
    ctx: RankContext, view: ShapedOps, names: list[str], chains: list[list[tuple[int, Any]]]
) -> list[Finding]:
    saving = 0.0
    by_signature: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    ops_in_chains = 0
    starts = np.array([st.start_ns for st in ctx.steps], dtype=np.int64)
    per_step = np.zeros(max(len(ctx.steps), 1))
    for chain in chains:
        gain = _chain_gain(view, chain)
        ts = int(ctx.trace.columns.ts[view.rows[chain[0][0]]])
        per_step[max(int(np.searchsorted(starts, ts, side="right")) - 1, 0)] += gain
        saving += gain
        ops_in_chains += len(chain)
        signature = " → ".join(names[i].removeprefix("aten::") for i, _ in chain[:6]) + (" → …" if len(chain) > 6 else "")
        by_signature[signature] += int(gain)
        line = ctx.source_line(int(view.rows[chain[0][0]]))
        if line:
            lines[line] += 1
    # The median step: a chain's time swings with page faults and preemption from step to step, and a
    # fused kernel does not remove those.
    saving = float(arrays.median(per_step))
    if chains:
        saving = _timeline_cap(ctx, saving, view.rows[[i for chain in chains for i, _ in chain]])
    if not chains or ctx.share(saving) < ctx.options.fusion_share:
        return []
    from aiprof.analysis.whatif.edits import FUSED_CHAINS, FusedChain

    # The chains, for the what-if replay of the fix (docs/whatif.md 'Findings'), while the trace is in memory.
    ctx.trace.cache[FUSED_CHAINS] = tuple(
        FusedChain(tuple(view.rows[[i for i, _ in chain]].tolist()), *_chain_bytes(chain)) for chain in chains)
    evidence = FusionEvidence(
        chains_per_step=round(len(chains) / ctx.step_count, 1),
        ops_in_chains_per_step=round(ops_in_chains / ctx.step_count, 1),
        top_chains=[FusionChain(ops=s, saving_ns_per_step=int(g / ctx.step_count)) for s, g in by_signature.most_common(3)],
    )
    if lines:
        evidence.source_lines = [line for line, _ in lines.most_common(3)]
    return [
        ctx.finding(
            "fusion_opportunity",
            f"{evidence.chains_per_step} chains of unfused elementwise ops per step",
            saving,
            evidence=evidence,
            fix=(
                "Fuse the chain: torch.compile(model) (or torch.compile on the function holding it) generates one "
                + ("kernel" if ctx.is_gpu else "vectorised C++ loop") + " per chain; otherwise use fused ops (F.gelu/F.silu, torch.addcmul, fused bias+activation, "
                "fused optimizers) and in-place variants."
            ),
            formula="median over steady steps of Σ over the step's chains of t_chain × (1 − external bytes / Σ bytes "
            "of the chain's ops): a fused kernel moves only the chain's inputs and final output, at the bandwidth "
            "the chain achieved",
            kind="estimate",
            confidence="medium",
        )
    ]


__all__ = ["fusion_opportunity", "unfused_attention"]
