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
    """A finding's fix replayed on the dependency graph. Its fields travel in the finding's evidence under
    the same names (:meth:`evidence`; read back with :meth:`of`)."""

    predicted_step_ns: int  # the median step after the fix
    predicted_saving_ns_per_step: int  # median over the steps of (measured - predicted) step
    predicted_by: str  # the edit replayed ("remove data_loading")

    def evidence(self) -> dict[str, int | str]:
        """The evidence keys that carry this prediction."""
        return {"predicted_step_ns": self.predicted_step_ns,
                "predicted_saving_ns_per_step": self.predicted_saving_ns_per_step, "predicted_by": self.predicted_by}

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
