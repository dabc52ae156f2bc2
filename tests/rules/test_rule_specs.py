"""Every rule declares what it is, and the declarations are true.

- every registered rule has a spec; the registry's lists are made from the specs;
- every id a rule declares has its entry in docs/findings.md, and every entry there is a declared id;
- the options, views and ids a rule declares are what its code reads and emits: read statically from the
  rule's function and, transitively, the helpers and views it calls in the rules package (a rule edited to
  read a new option or view without declaring it fails here);
- every option is read by some rule (or is one of the few every rule obeys).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
import re
from collections.abc import Iterator
from dataclasses import fields
from functools import cache
from pathlib import Path

import pytest

import aiprof
from aiprof.analysis.run import analyze_trace
from aiprof.rules import idle, registry
from aiprof.rules.context import RankContext
from aiprof.rules.finding import Finding
from aiprof.rules.options import DEFAULT_OPTIONS, RuleOptions
from aiprof.rules.spec import GLOBAL_OPTIONS, NEEDS, RuleSpec, Saving, rank_rule, spec_of
from aiprof.rules.views import RankViews
from aiprof.trace import Trace
from kineto_builder import TraceBuilder

DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"
RULES = registry.RULES
VIEW_NAMES = {name for name, value in vars(RankViews).items() if not name.startswith("_") and hasattr(value, "func")}


def test_every_registered_rule_has_a_spec() -> None:
    assert RULES, "no rule registered"
    for rule in RULES:
        spec = getattr(rule, "spec", None)
        assert isinstance(spec, RuleSpec), rule
        assert spec.name == rule.__name__ and spec is spec_of(rule)
    assert [spec_of(r).scope for r in registry.DEFAULT_RANK_RULES] == ["rank"] * len(registry.DEFAULT_RANK_RULES)
    assert [spec_of(r).scope for r in registry.DEFAULT_RUN_RULES] == ["run"] * len(registry.DEFAULT_RUN_RULES)
    assert [spec_of(r).scope for r in registry.DEFAULT_MEMORY_RULES] == ["memory"] * len(registry.DEFAULT_MEMORY_RULES)
    assert [spec_of(r).scope for r in registry.DEFAULT_BUDGET_RULES] == ["budget"] * len(registry.DEFAULT_BUDGET_RULES)
    assert (len(registry.DEFAULT_RANK_RULES) + len(registry.DEFAULT_RUN_RULES) + len(registry.DEFAULT_MEMORY_RULES)
            + len(registry.DEFAULT_BUDGET_RULES)) == len(RULES) == len(registry.RULE_SPECS)
    ids = [i for r in RULES for i in spec_of(r).ids]
    assert len(ids) == len(set(ids)), "two rules declare the same id"


def test_declared_ids_and_documented_ids_are_the_same() -> None:
    # a rule's entry is a "## id" heading (the memory family's: "### id" under "## Memory")
    documented = set(re.findall(r"^###? ([a-z][a-z0-9_]*)\s*$", DOCS.read_text(encoding="utf-8"), flags=re.M))
    declared = {i for r in RULES for i in spec_of(r).ids}
    assert declared - documented == set(), "declared ids without an entry in docs/findings.md"
    assert documented - declared == set(), "docs/findings.md entries that no rule declares"


def test_every_view_and_option_is_known() -> None:
    assert VIEW_NAMES <= set(NEEDS), "a shared view missing from spec.NEEDS"
    option_names = {f.name for f in fields(RuleOptions)}
    declared = {o for r in RULES for o in spec_of(r).options}
    assert option_names - declared - GLOBAL_OPTIONS == set(), "options that no rule declares it reads"


def test_a_spec_with_a_typo_fails_when_declared() -> None:
    with pytest.raises(ValueError, match="unknown option"):
        rank_rule(saving=Saving.TIME, options=("data_loading_shar",))(lambda ctx: [])
    with pytest.raises(ValueError, match="unknown need"):
        rank_rule(saving=Saving.TIME, needs=("rooflin",))(lambda ctx: [])
    with pytest.raises(ValueError, match="only idle savings"):
        rank_rule(saving=Saving.TIME, capture_idle=True)(lambda ctx: [])


def test_declared_rules_stay_picklable_functions() -> None:
    """Rule lists cross a process boundary (``functools.partial`` of the rank hook): the decorator returns
    the module-level function itself."""
    assert pickle.loads(pickle.dumps(idle.sync)) is idle.sync
    assert inspect.isfunction(idle.sync)


def test_the_memory_rules_are_declared_in_the_registry() -> None:
    """The 8 memory rules are in the one registry, each saving bytes (their options reaching them:
    tests/memory/test_findings.py)."""
    names = [spec_of(r).name for r in registry.DEFAULT_MEMORY_RULES]
    assert names == ["mem_oom", "mem_near_capacity", "mem_fragmentation", "mem_activation_dominant",
                     "mem_optimizer_dominant", "mem_leak", "mem_non_pytorch", "mem_underused"]
    assert {spec_of(r).saving for r in registry.DEFAULT_MEMORY_RULES} == {Saving.BYTES}
    assert all(spec_of(r).needs == ("memory",) for r in registry.DEFAULT_MEMORY_RULES)
    with pytest.raises(ValueError, match="save bytes"):
        rank_rule(saving=Saving.BYTES)(lambda ctx: [])


def test_a_plain_function_is_still_a_rule(tmp_path: Path) -> None:
    """A user's own rule needs no declaration: it runs as a rank rule with a time saving."""
    from aiprof.rules import diagnose_rank

    def mine(ctx: RankContext) -> list[Finding]:
        return [ctx.finding("mine", "a user's rule", 100_000, evidence={}, fix="-", formula="-")]

    assert spec_of(mine).saving is Saving.TIME and spec_of(mine).ids == ("mine",)
    b = TraceBuilder()
    for i in range(3):
        b.step(i, ts=i * 1000, dur=1000)
        b.launch(b.cpu_op("aten::mm", ts=i * 1000 + 1, dur=5), kernel_ts=i * 1000 + 10, kernel_dur=900)
    trace = aiprof.load(b.write(tmp_path / "t.json"))
    assert isinstance(trace, Trace)
    found, notes = diagnose_rank(trace, analyze_trace(trace), DEFAULT_OPTIONS, rules=[mine])
    assert [f.id for f in found] == ["mine"] and notes == []


# ---------------------------------------------------------------------------------------------------
# What the code reads and emits, statically
# ---------------------------------------------------------------------------------------------------
class _Reads:
    def __init__(self) -> None:
        self.options: set[str] = set()
        self.views: set[str] = set()
        self.ids: set[str] = set()
        self.calls: set[tuple[str, str]] = set()  # (module, function) in the rules package


@cache
def _module_tree(module: str) -> ast.Module:
    return ast.parse(inspect.getsource(importlib.import_module(module)))


@cache
def _functions(module: str) -> dict[str, ast.FunctionDef]:
    """Module-level functions and methods (``Class.method`` and plain ``method``) of a rules module."""
    out: dict[str, ast.FunctionDef] = {}
    for node in _module_tree(module).body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    out.setdefault(item.name, item)
    return out


def _resolve(module: str, name: str, local_imports: dict[str, str]) -> tuple[str, str] | None:
    """Where a called name is defined in the rules package, if it is."""
    if name in local_imports:
        return local_imports[name], name
    if name in _functions(module):
        return module, name
    value = getattr(importlib.import_module(module), name, None)
    home = getattr(value, "__module__", "")
    if isinstance(home, str) and home.startswith("aiprof.rules.") and name in _functions(home):
        return home, name
    return None


def _reads_of(module: str, name: str) -> _Reads:
    node = _functions(module)[name]
    found = _Reads()
    local_imports = {
        alias.asname or alias.name: stmt.module
        for stmt in ast.walk(node) if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("aiprof.rules")
        for alias in stmt.names
    }
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            if isinstance(sub.value, ast.Attribute) and sub.value.attr == "options" or (
                isinstance(sub.value, ast.Name) and sub.value.id in ("options", "opt")
            ):
                found.options.add(sub.attr)
            if isinstance(sub.value, ast.Attribute) and sub.value.attr == "views":
                found.views.add(sub.attr)
                found.calls.add(("aiprof.rules.views", sub.attr))
        if isinstance(sub, ast.Call):
            func = sub.func
            callee = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if callee == "finding" and sub.args and isinstance(sub.args[0], ast.Constant):
                found.ids.add(str(sub.args[0].value))
            if callee == "Finding":
                found.ids.update(str(k.value.value) for k in sub.keywords if k.arg == "id" and isinstance(k.value, ast.Constant))
            if isinstance(func, ast.Name):
                where = _resolve(module, func.id, local_imports)
                if where is not None:
                    found.calls.add(where)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("ctx", "self"):
                if func.attr in _functions("aiprof.rules.context"):
                    found.calls.add(("aiprof.rules.context", func.attr))
    return found


def _closure(module: str, name: str) -> _Reads:
    """What a function reads, with every function of the rules package it calls (or view it asks for)."""
    total, seen, todo = _Reads(), set(), [(module, name)]
    while todo:
        where = todo.pop()
        if where in seen or where[1] not in _functions(where[0]):
            continue
        seen.add(where)
        part = _reads_of(*where)
        total.options |= part.options
        total.views |= part.views
        total.ids |= part.ids
        todo.extend(part.calls)
    return total


def _rule_cases() -> Iterator[tuple[str, str]]:
    for rule in RULES:
        yield rule.__module__, rule.__name__


@pytest.mark.parametrize("module,name", list(_rule_cases()), ids=[n for _, n in _rule_cases()])
def test_declarations_match_the_code(module: str, name: str) -> None:
    spec = spec_of(getattr(importlib.import_module(module), name))
    reads = _closure(module, name)
    option_names = {f.name for f in fields(RuleOptions)}
    read_options = (reads.options & option_names) - GLOBAL_OPTIONS
    assert read_options == set(spec.options) - GLOBAL_OPTIONS, (
        f"{name}: options read {sorted(read_options)}, declared {sorted(spec.options)}")
    assert reads.views <= set(spec.needs), f"{name} reads views it does not declare: {sorted(reads.views - set(spec.needs))}"
    assert set(spec.needs) & VIEW_NAMES <= reads.views, f"{name} declares views it never reads"
    assert reads.ids == set(spec.ids), f"{name}: emits {sorted(reads.ids)}, declares {sorted(spec.ids)}"


def test_the_static_reader_sees_through_helpers() -> None:
    """The check above is only as good as its reader: host_stall reads stall_min_ns in a helper of a view."""
    reads = _closure("aiprof.rules.idle", "host_stall")
    assert {"host_bound_share", "stall_min_ns", "stall_factor"} <= reads.options
    assert {"host_split", "idle_sets", "long_calls"} <= reads.views


def test_the_trace_is_freed_after_the_rules_without_the_cycle_collector(tmp_path: Path) -> None:
    """Views refer back to their context: diagnose_rank drops them, so reference counting frees the trace
    (a worker holds one trace at a time; a cycle would keep each until the collector runs)."""
    import gc
    import weakref

    from aiprof.rules import diagnose_rank
    from corpus import cases_comm as cc

    path = cc._capture_then_replays(tmp_path)  # the capture-adjusted context shares the views too
    gc.disable()
    try:
        trace = aiprof.load(path)
        assert isinstance(trace, Trace)
        analysis = analyze_trace(trace)
        ref = weakref.ref(trace)
        found, _ = diagnose_rank(trace, analysis)
        assert "graph_capture" in [f.id for f in found]
        del trace, analysis
        assert ref() is None
    finally:
        gc.enable()
