"""The import contract: the layer order of docs/architecture.md, checked on every module of src/aiprof.

Every ``import`` of an aiprof module (at module level and inside functions; names imported only under
``if TYPE_CHECKING:`` are types, not imports, and are left out) must go to the importer's own layer or to
one its row of :data:`LAYERS` allows. The table is the one in docs/architecture.md ("Layers"): a test
checks that the two agree. Imports that break the order today are listed in :data:`KNOWN_EXCEPTIONS`, each
with its reason; a new one fails here, and so does an exception that no longer happens (delete its entry).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "aiprof"
DOC = ROOT / "docs" / "architecture.md"

# layer -> (the top-level modules / packages of aiprof in it, the layers it may import besides its own).
# Bottom to top; mirrors the table in docs/architecture.md. "aiprof" is the package's front door
# (aiprof/__init__.py: the error base, everything else imported lazily on first use).
LAYERS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "base": (frozenset({"aiprof", "errors", "fsutil", "arrays", "heap", "plain", "interrupts",
                        "rundir", "runmeta", "redact", "native"}), frozenset()),
    "capture": (frozenset({"capture", "workloads"}), frozenset({"base"})),
    "trace": (frozenset({"trace"}), frozenset({"base"})),
    "analysis": (frozenset({"analysis", "roofline", "memory"}), frozenset({"base", "trace"})),
    "rules": (frozenset({"rules"}), frozenset({"base", "trace", "analysis"})),
    "diagnosis": (frozenset({"pipeline"}), frozenset({"base", "trace", "analysis", "rules"})),
    "report": (frozenset({"report"}), frozenset({"base", "trace", "analysis", "rules"})),
    "app": (frozenset({"app"}), frozenset({"base", "capture", "trace", "analysis", "rules", "diagnosis", "report"})),
    "cli": (frozenset({"cli", "__main__"}), frozenset({"base", "capture", "analysis", "rules", "app"})),
    "integrations": (frozenset({"integrations", "hf", "lightning", "accelerate"}), frozenset({"base", "capture", "app", "cli"})),
}

# (importing module, imported module) -> why it is allowed for now. Keep it short; shrink it.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("aiprof.trace.readers.ncu", "aiprof.roofline.analysis"):
        "Nsight Compute points are matched to the roofline's per-call FLOPs/bytes (in a function); "
        "the matching belongs in roofline/ or analysis/, the reader should only read",
}


def layer_of(module: str) -> str:
    """The layer of a dotted aiprof module name (by its top-level module or package)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "aiprof"
    for layer, (members, _) in LAYERS.items():
        if top in members:
            return layer
    raise LookupError(f"{module}: its top-level module {top!r} is in no layer; add it to the table in "
                      "docs/architecture.md and to LAYERS in tests/test_layers.py")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node``, leaving out the bodies of ``if TYPE_CHECKING:`` (not their ``else``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child)


def _submodule(package: str, name: str) -> str:
    """``package.name`` when it is a module or package (``from aiprof import arrays``), else ``package``."""
    base = SRC.parent.joinpath(*package.split("."))
    if (base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file():
        return f"{package}.{name}"
    return package


def imports_of(path: Path) -> Iterator[tuple[str, int]]:
    """The aiprof modules ``path`` imports at run time, with the line of each import."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "aiprof" or alias.name.startswith("aiprof."):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == "aiprof" or target.startswith("aiprof."):
                for alias in node.names:
                    yield _submodule(target, alias.name), node.lineno


@cache
def upward_imports() -> dict[tuple[str, str], str]:
    """Every import that goes to a layer its importer may not import: (importer, imported) -> where."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted(SRC.rglob("*.py")):
        importer = module_name(path)
        mine = layer_of(importer)
        allowed = LAYERS[mine][1] | {mine}
        for imported, line in imports_of(path):
            theirs = layer_of(imported)
            if theirs not in allowed:
                found.setdefault((importer, imported), f"{path.relative_to(ROOT)}:{line} ({mine} -> {theirs})")
    return found


def test_every_module_has_a_layer() -> None:
    for path in SRC.rglob("*.py"):
        layer_of(module_name(path))  # raises with what to do


def test_no_import_goes_up_a_layer() -> None:
    new = {pair: where for pair, where in upward_imports().items() if pair not in KNOWN_EXCEPTIONS}
    assert not new, "imports against the layer order of docs/architecture.md:\n" + "\n".join(
        f"  {where}: {a} imports {b}" for (a, b), where in sorted(new.items())
    )


def test_every_known_exception_still_happens() -> None:
    gone = set(KNOWN_EXCEPTIONS) - set(upward_imports())
    assert not gone, f"fixed, remove from KNOWN_EXCEPTIONS in tests/test_layers.py: {sorted(gone)}"


# Bottom modules load in every process ``aiprof run`` injects into, and in ``aiprof --help``: neither torch
# nor NumPy at import (NumPy is the point of ``arrays``); import them inside the function that needs them.
HEAVY = {"numpy", "torch"}
HEAVY_ALLOWED = {"arrays": {"numpy"}}


def test_bottom_modules_import_neither_torch_nor_numpy() -> None:
    members, _ = LAYERS["base"]
    for path in sorted(SRC.glob("*.py")):
        name = "aiprof" if path.name == "__init__.py" else path.stem
        if name not in members:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
        top |= {(node.module or "").split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom)}
        heavy = (top & HEAVY) - HEAVY_ALLOWED.get(name, set())
        assert not heavy, f"src/aiprof/{path.name} imports {sorted(heavy)} at import; import it where it is used"


def _doc_table() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """The "Layers" table of docs/architecture.md: | layer | modules | may import | job |."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- layers:start -->(.*?)<!-- layers:end -->", text, re.S)
    assert block, "docs/architecture.md lost its layer table (between <!-- layers:start/end --> markers)"
    table: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "") or set(cells[0]) <= set("-: "):
            continue
        members = frozenset(re.findall(r"`([\w.]+)`", cells[1]))
        members = frozenset(m.removeprefix("aiprof.") for m in members)
        may = frozenset(re.findall(r"[a-z]+", cells[2])) - {"nothing"}
        table[cells[0].strip("*")] = (members, may)
    return table


def test_the_doc_and_the_test_agree() -> None:
    assert _doc_table() == LAYERS


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from aiprof.report.escape import terminal\n", {"aiprof.report.escape"}),
        ("def f():\n    from aiprof import app\n", {"aiprof.app"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aiprof.report.model import Report\n", set()),
        ("import aiprof.rules.registry\n", {"aiprof.rules.registry"}),
        ("from . import links\n", {"aiprof.trace.links"}),
    ],
)
def test_the_scanner_sees_runtime_imports_only(source: str, expected: set[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself: function-level and relative imports count, type-only imports do not."""
    fake = tmp_path / "aiprof"
    (fake / "trace").mkdir(parents=True)
    for name in ("links", "__init__"):
        (fake / "trace" / f"{name}.py").write_text("")
    (fake / "app.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "SRC", fake)
    probe = fake / "trace" / "probe.py"
    probe.write_text(source)
    assert {name for name, _ in imports_of(probe)} == expected
