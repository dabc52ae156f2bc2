"""aiprof.plain.as_dict gives what dataclasses.asdict gives, without the deep copies."""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict, namedtuple
from pathlib import Path

import pytest

from aiprof.plain import as_dict

Point = namedtuple("Point", ["x", "y"])


@dataclasses.dataclass
class Leaf:
    name: str
    value: float
    tags: tuple[str, ...] = ()


@dataclasses.dataclass
class Tree:
    leaves: list[Leaf]
    by_name: dict[str, Leaf]
    counts: Counter[str]
    ordered: OrderedDict[str, int]
    point: Point
    nested: list[list[tuple[int, Leaf]]]
    nothing: None = None
    flag: bool = True


def test_same_as_asdict_on_nested_values() -> None:
    leaf = Leaf("a", 1.5, ("x", "y"))
    tree = Tree(
        leaves=[leaf, Leaf("b", float("nan"))],
        by_name={"a": leaf},
        counts=Counter({"k": 2}),
        ordered=OrderedDict(z=1, a=2),
        point=Point(1, Leaf("p", 0.0)),
        nested=[[(1, leaf)], []],
    )
    ours, theirs = as_dict(tree), dataclasses.asdict(tree)
    assert repr(ours) == repr(theirs)  # repr: NaN compares unequal, types and order must match too
    assert type(ours["counts"]) is Counter and type(ours["ordered"]) is OrderedDict
    assert type(ours["point"]) is Point


def test_same_as_asdict_on_real_statistics() -> None:
    from aiprof.analysis.coverage import device_coverage
    from aiprof.analysis.steps import step_windows
    from aiprof.trace.kineto.loader import load_file

    path = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "hta" / "amd_trace"
    files = sorted(path.glob("*.json.gz"))
    if not files:
        pytest.skip("shared traces not found")
    trace = load_file(files[0])
    # the statistics (kernels, ops, communication) are msgspec Structs: the step coverage is still dataclasses
    for result in (device_coverage(trace, step_windows(trace)),):
        assert repr(as_dict(result)) == repr(dataclasses.asdict(result))
