"""What-if results as typed values (msgspec Structs): what ``aiprof whatif`` prints and writes as JSON
(:class:`WhatIf`, one :class:`EditOutcome` per edit, the median step's :class:`CriticalPath`), and a
finding's replayed fix (:class:`FixPrediction`, written into the finding's evidence). Field order is the
JSON key order; docs/whatif.md gives the meaning of each number."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from aiprof.analysis.whatif.edits import Prediction


class EditOutcome(msgspec.Struct, kw_only=True):
    """One edit (or all of them together) replayed: the predicted steps and the median saving."""

    edit: str  # its label, as the CLI names it ("remove data_loading", "scale host x0.5", "all together")
    predicted_step_ns: list[int]  # per step
    predicted_median_step_ns: int
    predicted_saving_ns: int  # median over the steps of (measured - predicted); positive = faster
    predicted_saving_share: float  # of the measured median step, 4 decimals

    @staticmethod
    def of(label: str, prediction: Prediction) -> EditOutcome:
        base = prediction.baseline_median_ns
        return EditOutcome(edit=label, predicted_step_ns=prediction.predicted_ns.tolist(),
                           predicted_median_step_ns=prediction.predicted_median_ns,
                           predicted_saving_ns=prediction.saving_ns,
                           predicted_saving_share=round(prediction.saving_ns / base, 4) if base else 0.0)


class CriticalPath(msgspec.Struct, kw_only=True):
    """The critical path of the median step: its length, its node count and where the time on it goes
    (ns by node kind and by the delays between nodes: ``launch_latency``, ``sync_return``, ``gap``),
    largest first."""

    step_index: int
    length_ns: int
    nodes: int
    breakdown_ns: dict[str, int]


class WhatIf(msgspec.Struct, kw_only=True):
    """Baseline and predicted steps of one trace, per edit and combined, and the critical path."""

    trace: str
    rank: int
    step_source: str
    steps: int
    baseline_step_ns: list[int]
    baseline_median_step_ns: int
    edits: list[EditOutcome] = msgspec.field(default_factory=list)
    combined: EditOutcome | None = None  # all the edits together (only when there are several)
    critical_path: CriticalPath | None = None  # None: no step (JSON: {})
    notes: list[str] = msgspec.field(default_factory=list)

    def to_builtins(self) -> dict[str, object]:
        """Plain JSON types; a trace with no step has ``"critical_path": {}``."""
        doc: dict[str, object] = msgspec.to_builtins(self)
        if self.critical_path is None:
            doc["critical_path"] = {}
        return doc


class FixPrediction(msgspec.Struct, kw_only=True):
    """A finding's fix replayed on the dependency graph, and the saving the finding claims in the ranking.
    Its fields travel in the finding's evidence under the same names (:meth:`evidence`; read back with
    :meth:`of`).

    Fixes that change the same nodes of the graph remove the same time (one cause: a Python loop of tiny
    ops is both ``host_bound`` and ``launch_bound``): the first of them in
    :data:`~aiprof.analysis.whatif.findings.FIX_EDITS` order carries the replay of all their edits together
    and claims it (``claimed_with`` names the others), each other one names it in ``claimed_by`` and claims
    0. The claims of one rank are marginal, in ranking order, so they never add up to more than the step
    (docs/whatif.md, 'Claims')."""

    predicted_step_ns: int  # the median step after the fix (with claimed_with's: their fixes too)
    predicted_saving_ns_per_step: int  # median over the steps of (measured - predicted) step
    predicted_by: str  # the edit(s) replayed ("remove data_loading", "remove host overhead + cuda graphs")
    claimed_saving_ns_per_step: int | None = None  # what the finding claims (the ranking key); None: not known
    claimed_with: list[str] = msgspec.field(default_factory=list)  # findings whose time this one claims
    claimed_by: str = ""  # the finding that claims this one's time ("": none)

    def evidence(self) -> dict[str, object]:
        """The evidence keys that carry this prediction (``claimed_with`` / ``claimed_by`` only when set)."""
        out: dict[str, object] = {"predicted_step_ns": self.predicted_step_ns,
                                  "predicted_saving_ns_per_step": self.predicted_saving_ns_per_step,
                                  "predicted_by": self.predicted_by}
        if self.claimed_saving_ns_per_step is not None:
            out["claimed_saving_ns_per_step"] = self.claimed_saving_ns_per_step
        if self.claimed_with:
            out["claimed_with"] = list(self.claimed_with)
        if self.claimed_by:
            out["claimed_by"] = self.claimed_by
        return out

    @staticmethod
    def of(evidence: Mapping[str, object]) -> FixPrediction | None:
        """The prediction a finding's evidence carries, or None (no replay, or keys of the wrong type)."""
        if "predicted_step_ns" not in evidence:
            return None
        try:
            return msgspec.convert({"predicted_by": "", **{k: evidence[k] for k in _KEYS if k in evidence}},
                                   FixPrediction, strict=True)
        except msgspec.ValidationError:
            return None


_KEYS = tuple(FixPrediction.__struct_fields__)
