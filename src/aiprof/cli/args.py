"""Numbers on the command line, checked where argparse reads them: every value a user passes is finite
and inside the range that makes sense for it, or the command stops with one line and exit 2.

``nan`` and ``inf`` parse as floats, so a bare ``type=float`` lets ``--fail-if-slower nan`` switch a CI
gate off without a word (``pct > nan`` is never true); the types here refuse them.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiprof.errors import AiprofError

if TYPE_CHECKING:
    from aiprof.rules.options import RuleOptions

WIDTH_RANGE = (60, 1000)  # the terminal renderer needs 60 columns; beyond 1000 nobody reads a line
MAX_WORKERS = 1024
MAX_RANK = 1_000_000
MAX_COUNT = 1_000_000


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low} (got {value}; range {low}..{high})")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high} (got {value}; range {low}..{high})")
        return value

    parse.__name__ = "integer"  # what argparse names in its own messages
    return parse


def percentage(text: str) -> float:
    """An argparse type: a finite percentage >= 0 (``--fail-if-slower``)."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative: give a percentage >= 0, e.g. 5")
    return value


MAX_FACTOR = 1000.0


def factor(text: str) -> float:
    """An argparse type: a finite scale factor from 0 to MAX_FACTOR (``aiprof whatif --scale-host``)."""
    value = _finite(text)
    if value < 0 or value > MAX_FACTOR:
        raise argparse.ArgumentTypeError(f"{text!r}: give a factor from 0 to {MAX_FACTOR:g}, e.g. 0.5")
    return value


def width(text: str) -> int:
    return int_in(*WIDTH_RANGE)(text)


def workers(text: str) -> int:
    return int_in(1, MAX_WORKERS)(text)


def rank(text: str) -> int:
    return int_in(0, MAX_RANK)(text)


def count(text: str) -> int:
    return int_in(1, MAX_COUNT)(text)


# ---------------------------------------------------------------------------------------------------
# --rule-option NAME=VALUE
# ---------------------------------------------------------------------------------------------------
def option_range(name: str) -> tuple[float, float, bool]:
    """(low, high, low excluded) of a rule option, from what its name says it is: a share or fraction of
    something (0..1), a percentage (0..100), an attainable fraction of a peak that divides (0 excluded),
    else a count, a time in ns or a factor (0 .. 1e15, 11 days in ns)."""
    if name == "eta" or name.startswith(("roof_fraction_", "attention_efficiency_")):
        return 0.0, 1.0, True
    if name.endswith(("_share", "_fraction")):
        return 0.0, 1.0, False
    if name.endswith("_pct"):
        return 0.0, 100.0, False
    return 0.0, 1e15, False


def rule_options(assignments: list[str]) -> RuleOptions | None:
    """The ``--rule-option NAME=VALUE`` list as options, each value finite and in its range (``None``
    when none is given); a bad one is a one-line :class:`AiprofError`."""
    if not assignments:
        return None
    from dataclasses import fields

    from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions

    kinds = {f.name: type(getattr(DEFAULT_OPTIONS, f.name)) for f in fields(RuleOptions)}
    for item in assignments:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in kinds:
            continue  # RuleOptions.from_assignments names the known options
        _check_option(item, name, text, kinds[name])
    return RuleOptions.from_assignments(assignments)


def _check_option(item: str, name: str, text: str, kind: type) -> None:
    try:
        value = _finite(text)
    except argparse.ArgumentTypeError as err:
        raise AiprofError(f"--rule-option {item!r}: {err}") from None
    low, high, low_excluded = option_range(name)
    if value < low or value > high or (low_excluded and value == low):
        bound = f"above {low:g}" if low_excluded else f"from {low:g}"
        raise AiprofError(f"--rule-option {item!r}: {name} must be {bound} to {high:g}")
    if kind is int and not value.is_integer():
        raise AiprofError(f"--rule-option {item!r}: {name} is a whole number")
