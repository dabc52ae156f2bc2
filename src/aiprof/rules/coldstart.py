"""``cold_start``: one-time costs (CUDA context creation, lazy module loading, library initialisation,
cuDNN autotuning) found by their structure, reported on their own and kept out of the steady-state rules.

A trace of a first pass (``export_chrome_trace`` around the first iteration, a single window without
``ProfilerStep``) holds stalls that never come back: the first CUDA call creating the context (0.5-2 s),
the first launch of a kernel loading its module, cuBLAS/cuDNN creating their handles (``cudaFree`` of
seconds), and ``cudnn.benchmark`` trying every algorithm of each new convolution (hundreds of event
records and synchronisations inside one ``cudnn_convolution``). Read as steady state they look like
launch overhead, syncs and host overhead. :func:`aiprof.rules.views.one_time.one_time_costs` finds them; ``RankContext.steps`` leaves
them out (it drops the first step that holds them, or starts a single window after the last of them),
and :func:`cold_start` reports them, with no saving: they are paid once per process.
"""

from __future__ import annotations


import numpy as np
from msgspec import UNSET, UnsetType

from aiprof.analysis import intervals as iv
from aiprof.rules.context import RankContext
from aiprof.rules.framework import fix_text
from aiprof.rules.spec import Saving, rank_rule
from aiprof.rules.evidence import ms_text
from aiprof.rules.finding import Evidence, Finding
from aiprof.rules.views.one_time import OneTimeCost
from aiprof.trace import links
from aiprof.trace.model import Kind


# ---------------------------------------------------------------------------------------------------
# The rule
# ---------------------------------------------------------------------------------------------------
_FIX = (
    "Nothing to fix in the model: these costs are paid once per process. Profile the steady state instead: "
    "torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=3), "
    "on_trace_ready=...) and call prof.step() every iteration (aiprof run does this by default), or run a "
    "few iterations before starting the profiler. cuDNN autotuning (torch.backends.cudnn.benchmark=True) "
    "re-runs for every new input shape: keep shapes static (pad the last batch, drop_last=True) or set it "
    "False for dynamic shapes. CUDA_MODULE_LOADING=LAZY (the default since CUDA 11.7) moves module loading "
    "to each kernel's first launch, where it shows as a long first cudaLaunchKernel. torch.compile compiles "
    "each frame on its first call: Inductor's caches (TORCHINDUCTOR_CACHE_DIR, the FX graph cache) make the "
    "next process compile faster."
)


class ColdStartEvidence(Evidence, kw_only=True):
    """``cold_start``'s evidence: the one-time time (union of the costs), the ten longest costs, their kinds
    (most time first), and what the steady-state rules judged instead."""

    one_time_ns: int
    one_time_calls: list[OneTimeCall]
    kinds: list[str]
    steady_state: str


@rank_rule(saving=Saving.NONE, needs=("one_time_costs", "steps", "all_steps", "source_lines"))
def cold_start(ctx: RankContext) -> list[Finding]:
    """One-time costs, with what they are, where, and what was left out of the steady-state rules."""
    costs = ctx.one_time_costs
    if not costs:
        return []
    total = iv.total(iv.merge(np.array([c.start_ns for c in costs], dtype=np.int64),
                              np.array([c.end_ns for c in costs], dtype=np.int64)))
    kinds = sorted({c.kind for c in costs}, key=lambda k: -sum(c.dur_ns for c in costs if c.kind == k))
    origin = ctx.device.steps[0].start_ns if ctx.device.steps else 0
    evidence = ColdStartEvidence(
        one_time_ns=total,
        one_time_calls=[_call_evidence(ctx, c, origin) for c in sorted(costs, key=lambda c: -c.dur_ns)[:10]],
        kinds=kinds,
        steady_state=ctx.steady_note or "all steps",
    )
    steady = bool(ctx.steps)
    if steady:
        title = f"One-time start-up costs: {ms_text(total)} ({', '.join(kinds)}), left out of the steady-state analysis"
    else:
        title = (f"The trace is a cold start: {ms_text(total)} of one-time costs ({', '.join(kinds)}) and no "
                 "steady state to diagnose")
    confidence = "high" if any(c.kind in ("context creation", "module loading", "cudnn autotuning", "compilation")
                               for c in costs) else "medium"
    return [
        ctx.finding(
            "cold_start",
            title,
            0,
            evidence=evidence,
            fix=fix_text(ctx.trace, "cold_start", _FIX),
            formula="no saving: one-time costs (calls ≥ 20× the median of their name with the device idle, in "
            "the first step or the name's first calls; convolutions holding ≥ 10 event calls) are paid once",
            confidence=confidence,
            severity="info",
        )
    ]


class OneTimeCall(Evidence, kw_only=True):
    """One one-time cost in ``cold_start``'s evidence: the call, what kind of cost, how long against the
    median of its name, when after the first step's start; the event calls of a cuDNN autotuning, the op
    that issued a runtime call, the user's line."""

    name: str
    kind: str
    dur_ns: int
    median_ns_of_name: int
    at_ns: int
    event_calls: int | UnsetType = UNSET
    op: str | UnsetType = UNSET
    source_line: str | UnsetType = UNSET


def _call_evidence(ctx: RankContext, cost: OneTimeCost, origin: int) -> OneTimeCall:
    out = OneTimeCall(name=cost.name, kind=cost.kind, dur_ns=cost.dur_ns, median_ns_of_name=cost.median_ns,
                      at_ns=cost.start_ns - origin)
    if cost.kind == "cudnn autotuning":
        out.event_calls = cost.calls
    is_op = ctx.trace.columns.kind[cost.row] == int(Kind.CPU_OP)
    op = cost.row if is_op else int(links.issuing_op(ctx.trace)[cost.row])
    if op >= 0 and not is_op:
        out.op = ctx.trace.name_of(op)
    line = ctx.source_line(op if op >= 0 else cost.row)
    if line:
        out.source_line = line
    return out
