"""The diagnosis result: one :class:`Finding` per problem, with evidence, an estimated saving and a fix.

A finding answers "what should I fix first, and how much will it give?". ``est_saving_ns_per_step`` is
what the fix is expected to take off the median step; ``saving_kind`` says whether that number is an
``upper_bound`` (the fix cannot give more: e.g. all exposed data-loading time) or an ``estimate`` (a
model's prediction that may be above or below); ``confidence`` says how far to trust it. The formula of
every rule is written in ``docs/findings.md`` and repeated in ``saving_formula``.

Severity follows the saving, for every rule alike: a finding with no saving of its own (a note that explains
another finding, a risk, a perturbed measurement) is never ``high`` or ``medium``. :class:`Finding` caps it
at ``low`` when it is built (:func:`capped_severity`), so no rule — and no finding read back from JSON —
can put a zero-saving note at the top of a report that orders by severity.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

SEVERITIES = ("high", "medium", "low", "info")
CONFIDENCES = ("high", "medium", "low")
DOCS_BASE = "docs/findings.md"
# The most a finding with no saving of its own may claim: it explains or warns, it does not rank.
ZERO_SAVING_MAX_SEVERITY = "low"


def capped_severity(severity: str, saving_ns: float) -> str:
    """``severity``, lowered to :data:`ZERO_SAVING_MAX_SEVERITY` when the finding saves nothing
    (``saving_ns`` ≤ 0); ``info`` and ``low`` are kept as they are."""
    if saving_ns > 0 or SEVERITIES.index(severity) >= SEVERITIES.index(ZERO_SAVING_MAX_SEVERITY):
        return severity
    return ZERO_SAVING_MAX_SEVERITY


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem. All times are ns; ``share_of_step`` is a fraction in [0, 1]."""

    id: str
    title: str
    severity: str
    est_saving_ns_per_step: int
    share_of_step: float
    saving_kind: str  # "upper_bound" or "estimate"
    saving_formula: str
    confidence: str
    evidence: dict[str, Any]
    fix: str
    ranks: tuple[int, ...] = ()
    device: str = ""
    docs: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence must be one of {CONFIDENCES}, not {self.confidence!r}")
        if self.saving_kind not in ("upper_bound", "estimate"):
            raise ValueError(f"saving_kind must be upper_bound or estimate, not {self.saving_kind!r}")
        capped = capped_severity(self.severity, self.est_saving_ns_per_step)
        if capped != self.severity:
            object.__setattr__(self, "severity", capped)  # frozen: set once, while being built
        evidence = unstruct(self.evidence)
        if evidence is not self.evidence:
            object.__setattr__(self, "evidence", evidence)

    def to_record(self) -> FindingRecord:
        """The finding as the report holds it (:class:`FindingRecord`): plain types, docs link filled in."""
        return FindingRecord(
            id=self.id,
            title=self.title,
            severity=self.severity,  # type: ignore[arg-type]  # checked in __post_init__
            ranks=[int(r) for r in self.ranks],
            device=self.device,
            est_saving_ns_per_step=int(self.est_saving_ns_per_step),
            share_of_step=round(float(self.share_of_step), 6),
            saving_kind=self.saving_kind,  # type: ignore[arg-type]
            saving_formula=self.saving_formula,
            confidence=self.confidence,  # type: ignore[arg-type]
            evidence=_plain(self.evidence),
            fix=self.fix,
            docs=self.docs or f"{DOCS_BASE}#{self.id}",
            notes=list(self.notes),
        )

    def plain(self) -> Finding:
        """The finding with its evidence in plain JSON types (numpy scalars → numbers, tuples → lists, floats
        to 6 decimals), as the report holds it: what the diagnosis hands on."""
        return dataclasses.replace(self, evidence=_plain(self.evidence))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the :class:`FindingRecord`'s fields, plain types only, units in the key names."""
        out: dict[str, Any] = msgspec.to_builtins(self.to_record())
        return out


class Evidence(msgspec.Struct, kw_only=True):
    """A finding's typed evidence, or a typed part of it (a row of ``top_ops``, a long gap, a graph break…),
    each a small Struct next to the rule that fills it (declared ``kw_only=True``, so an optional field may come before a
    required one: the field order is the key order). A finding holds it as the plain dict its fields make,
    fields left ``UNSET`` left out (:func:`unstruct`, when the :class:`Finding` is built): the evidence the
    report holds is the same JSON whichever way the rule wrote it."""


def unstruct(value: Any) -> Any:
    """``value`` with every msgspec Struct in it (nested in dicts, lists, tuples) as a dict of its set fields;
    ``value`` itself when it holds none. Numbers are left as they are (:func:`_plain` makes them JSON's)."""
    if isinstance(value, msgspec.Struct):
        return {name: unstruct(v) for name in value.__struct_fields__
                if (v := getattr(value, name)) is not msgspec.UNSET}
    if isinstance(value, dict):
        items = {k: unstruct(v) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    if isinstance(value, (list, tuple)):
        parts = [unstruct(v) for v in value]
        if all(a is b for a, b in zip(parts, value)):
            return value
        return parts if isinstance(value, list) else tuple(parts)
    return value


def _plain(value: Any) -> Any:
    """numpy scalars and tuples → plain JSON types, recursively."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    if isinstance(value, float):
        return round(value, 6)
    return value


Severity = Literal["high", "medium", "low", "info"]
Confidence = Literal["high", "medium", "low"]
SavingKind = Literal["upper_bound", "estimate"]


class FindingRecord(msgspec.Struct, kw_only=True):
    """A finding as the report document holds it (the JSON form of :class:`Finding`, same keys, same
    order). Decoding one (from a report file, or a dict through ``msgspec.convert``) validates the
    enumerations and caps a zero-saving finding's severity like :class:`Finding` does."""

    id: str
    title: str
    severity: Severity
    ranks: list[int] = msgspec.field(default_factory=list)
    device: str = ""
    est_saving_ns_per_step: int
    share_of_step: float
    saving_kind: SavingKind = "estimate"
    saving_formula: str = ""
    confidence: Confidence
    evidence: dict[str, Any]
    fix: str
    docs: str = ""
    notes: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        self.severity = capped_severity(self.severity, self.est_saving_ns_per_step)  # type: ignore[assignment]


def as_record(finding: FindingRecord | Finding | dict[str, Any]) -> FindingRecord:
    """Any form a finding travels in (the rule's :class:`Finding`, its ``to_dict()``, a record) as a
    :class:`FindingRecord`. A dict that is not a finding raises ``msgspec.ValidationError``."""
    if isinstance(finding, FindingRecord):
        return finding
    if isinstance(finding, Finding):
        return finding.to_record()
    return msgspec.convert(finding, FindingRecord)
