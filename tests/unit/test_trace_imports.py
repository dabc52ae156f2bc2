"""The modules of ``aiprof.trace`` import one another in one direction only, and only public names.

Read from the source (ast), every import counted wherever it is written (a function-level import that
dodges a cycle at run time is still an edge here). A name is private when it starts with ``_``; importing
a private *module* (the native ``_columnar`` extension) is allowed, reaching into another module's
private names is not. The checker itself is tested on small made-up packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aiprof.trace

PACKAGE = "aiprof.trace"
ROOT = Path(aiprof.trace.__file__).parent


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every Python module under ``root`` by its dotted name (a package by its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def _is_module(name: str, known: dict[str, Path], root: Path, package: str) -> bool:
    """A Python module of the package, or an extension module (its ``.pyi`` stub or built file)."""
    if name in known:
        return True
    if not name.startswith(package + "."):
        return False
    where = root.joinpath(*name[len(package) + 1 :].split("."))
    return where.with_suffix(".pyi").exists() or any(where.parent.glob(where.name + ".*.so"))


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name a ``from … import`` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def scan(root: Path, package: str) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph inside the package (module → modules it imports) and every private-name import."""
    known = modules(root, package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    private: list[str] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bound: set[str] = set()  # local names bound to a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_module(alias.name, known, root, package):
                        graph[name].add(alias.name)
                        if alias.asname:
                            bound.add(alias.asname)
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(node, name, path.name == "__init__.py")
                if source != package and not source.startswith(package + "."):
                    continue
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    if _is_module(target, known, root, package):
                        graph[name].add(target)
                        bound.add(alias.asname or alias.name)
                        continue
                    if source in known:
                        graph[name].add(source)
                    if alias.name.startswith("_"):
                        private.append(f"{name}: from {source} import {alias.name}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                private.append(f"{name}: {node.value.id}.{node.attr}")
    for edges in graph.values():
        edges.discard("")
    return {name: {t for t in edges if t in known} for name, edges in graph.items()}, private


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph as a path that ends where it starts, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []


# --- aiprof.trace itself ------------------------------------------------------------------------
def test_no_module_of_aiprof_trace_imports_a_private_name_of_another() -> None:
    _, private = scan(ROOT, PACKAGE)
    assert private == []


def test_the_import_graph_of_aiprof_trace_has_no_cycle() -> None:
    graph, _ = scan(ROOT, PACKAGE)
    assert find_cycle(graph) == []


def test_the_kineto_reader_is_layered() -> None:
    """schema, source → builder → parallel → stream → loader, and nothing of the format-neutral part
    depends on the Kineto modules except the reader that adapts them."""
    graph, _ = scan(ROOT, PACKAGE)
    kineto = f"{PACKAGE}.kineto"
    assert f"{kineto}.builder" in graph[f"{kineto}.parallel"]
    assert f"{kineto}.builder" in graph[f"{kineto}.stream"] and f"{kineto}.parallel" in graph[f"{kineto}.stream"]
    assert f"{kineto}.loader" not in graph[f"{kineto}.stream"] | graph[f"{kineto}.parallel"]
    assert f"{kineto}.stream" not in graph[f"{kineto}.parallel"]
    outside = {m for m in graph if not m.startswith(kineto) and m != f"{PACKAGE}.readers.kineto"}
    assert {m for m in outside if any(t.startswith(kineto) for t in graph[m])} == set()


# --- the checker, on made-up packages ------------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_checker_sees_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "a.py": "from pkg.b import thing\n",
            "b.py": "def thing():\n    from pkg.a import other  # dodges the cycle at run time\n    return other\n",
            "c.py": "import pkg.a\n",
        },
    )
    graph, _ = scan(root, "pkg")
    assert graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])


def test_the_checker_sees_private_names_but_allows_private_modules(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "sub/__init__.py": "",
            "sub/_native.pyi": "def f() -> None: ...\n",
            "sub/core.py": "_HIDDEN = 1\nclass _Builder: ...\n",
            "user.py": (
                "from pkg.sub import _native\n"
                "from pkg.sub.core import _Builder\n"
                "from pkg.sub import core\n"
                "x = core._HIDDEN\n"
            ),
            "rel.py": "from .sub.core import _HIDDEN\n",
        },
    )
    graph, private = scan(root, "pkg")
    assert private == [
        "pkg.rel: from pkg.sub.core import _HIDDEN",
        "pkg.user: from pkg.sub.core import _Builder",
        "pkg.user: core._HIDDEN",
    ]
    assert graph["pkg.user"] == {"pkg.sub.core"} and find_cycle(graph) == []
