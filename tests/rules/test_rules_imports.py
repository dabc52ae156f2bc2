"""The rules package is a one-way graph, read from its source (``ast``, no import):

- the registry imports the rule modules, never the reverse: no module of ``rules/`` but the registry and
  the package's front door (``rules/__init__.py``) imports ``aiprof.rules.registry``;
- a rule module (one that declares ``@rank_rule`` / ``@run_rule`` / ``@memory_rule`` functions) imports no
  other rule module: what rules share lives in ``rules/views/`` (the shared per-rank views and their
  helpers) or in the base modules (context, finding, evidence, options, spec, framework, vendor);
- a view module imports no rule module;
- nothing in ``rules/`` imports a ``_private`` name from another module;
- the imports between modules of ``rules/`` have no cycle, lazy imports inside functions included (names
  imported only under ``if TYPE_CHECKING:`` are types, not imports, and do not count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[2] / "src" / "aiprof" / "rules"
PACKAGE = "aiprof.rules"
REGISTRY = "aiprof.rules.registry"
DECORATORS = {"rank_rule", "run_rule", "memory_rule", "budget_rule"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(RULES_DIR.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """Every import of a module (at any depth) outside ``if TYPE_CHECKING:`` blocks: (module, names)."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        self.found: list[tuple[str, list[str], int]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for item in node.orelse:
                self.visit(item)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, [], node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:  # relative: resolved against this module's package
            package = self.module if self.is_package else self.module.rsplit(".", 1)[0]
            for _ in range(node.level - 1):
                package = package.rsplit(".", 1)[0]
            base = f"{package}.{base}" if base else package
        self.found.append((base, [a.name for a in node.names], node.lineno))


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    return {_module_name(p): (p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(RULES_DIR.rglob("*.py"))}


MODULES = _modules()


def _imports(module: str) -> list[tuple[str, list[str], int]]:
    path, tree = MODULES[module]
    visitor = _Imports(module, path.name == "__init__.py")
    visitor.visit(tree)
    return visitor.found


def _targets(module: str) -> dict[str, int]:
    """The modules of ``rules/`` that ``module`` imports (``from pkg import mod`` names the submodule), with
    the line of the first import of each."""
    out: dict[str, int] = {}
    for base, names, line in _imports(module):
        candidates = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES] or [base]
        for target in candidates:
            if target in MODULES and target != module:
                out.setdefault(target, line)
    return out


def _declares_rules(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                call = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(call, ast.Name) and call.id in DECORATORS:
                    return True
    return False


RULE_MODULES = {name for name, (_, tree) in MODULES.items() if _declares_rules(tree)}
VIEW_MODULES = {name for name in MODULES if name == f"{PACKAGE}.views" or name.startswith(f"{PACKAGE}.views.")}


def test_the_classification_sees_the_package() -> None:
    """The checks below are only as good as what they classify: the registry's rule modules are found,
    and the views package holds the views."""
    from aiprof.rules import registry

    assert {m.__name__ for m in registry.RULE_MODULES} == RULE_MODULES
    assert {f"{PACKAGE}.views", f"{PACKAGE}.views.kernels", f"{PACKAGE}.views.host"} <= VIEW_MODULES
    assert not RULE_MODULES & VIEW_MODULES
    assert _targets(REGISTRY).keys() >= RULE_MODULES  # the registry imports every rule module


def test_no_module_but_the_registry_and_the_front_door_imports_the_registry() -> None:
    bad = [f"{m} (line {line})" for m in MODULES if m not in (PACKAGE, REGISTRY)
           for target, line in _targets(m).items() if target == REGISTRY]
    assert bad == [], "modules of rules/ that import the registry"


@pytest.mark.parametrize("module", sorted(RULE_MODULES))
def test_a_rule_module_imports_no_other_rule_module(module: str) -> None:
    bad = {t: line for t, line in _targets(module).items() if t in RULE_MODULES or t == PACKAGE}
    assert bad == {}, f"{module} imports rule modules (share through rules/views/ instead)"


@pytest.mark.parametrize("module", sorted(VIEW_MODULES))
def test_a_view_module_imports_no_rule_module(module: str) -> None:
    bad = {t: line for t, line in _targets(module).items() if t in RULE_MODULES or t in (PACKAGE, REGISTRY)}
    assert bad == {}, f"{module} imports rule modules or the registry"


def test_no_private_name_crosses_a_module() -> None:
    bad = [f"{m}:{line} imports {name} from {base}" for m in MODULES for base, names, line in _imports(m)
           if base.startswith("aiprof") for name in names if name.startswith("_") and not name.startswith("__")]
    assert bad == []


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (a path that comes back to its start), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_imports_inside_rules_have_no_cycle() -> None:
    graph = {m: set(_targets(m)) - {PACKAGE} for m in MODULES if m != PACKAGE}
    assert _cycle(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    # a lazy import is an import: the visitor sees it inside a function, not under TYPE_CHECKING
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
                     "def f():\n    from aiprof.rules import registry\n")
    visitor = _Imports("aiprof.rules.mine", False)
    visitor.visit(tree)
    assert [(b, n) for b, n, _ in visitor.found] == [("typing", ["TYPE_CHECKING"]), ("aiprof.rules", ["registry"])]
