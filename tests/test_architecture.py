"""The package keeps its shape (docs/architecture.md): layers import only layers below them,
no import cycle between modules, modules stay small, and code outside `models` never asks
which class a model is."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

from conftest import REPO

PACKAGE = REPO / "parplan_gen"
# Bottom to top: a module may import its own layer and the layers before it.
LAYERS = ("inputs", "models", "rules", "cost", "planning", "render", "api", "cli")
MAX_LINES = 400  # "modules around 400 lines at most" (STYLE.md)
MODEL_CLASSES = {"ModelSpec", "GraphModelSpec", "ModelGraph"}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def layer_of(path: Path) -> str | None:
    """The layer a module of the package belongs to (None: the package's own __init__)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0].removesuffix(".py") if parts[0].removesuffix(".py") in LAYERS else None


def module_name(path: Path) -> str:
    return ".".join(("parplan_gen", *path.relative_to(PACKAGE).with_suffix("").parts))


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every parplan_gen module a tree imports, lazily or not."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parplan_gen."):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name) for a in node.names if a.name.startswith("parplan_gen.")
            ]
    return found


def test_every_module_is_in_a_layer() -> None:
    assert [p.name for p in MODULES if layer_of(p) is None] == []
    assert {layer_of(p) for p in MODULES} == set(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_a_module_imports_only_its_layer_and_the_layers_below(path: Path) -> None:
    rank = LAYERS.index(layer_of(path))
    upward = [
        f"line {line}: {target}"
        for line, target in imported(ast.parse(path.read_text(encoding="utf-8")))
        if LAYERS.index(target.split(".")[1]) > rank
    ]
    assert upward == []


def test_no_import_cycle_between_modules() -> None:
    """Imports at module level only (a function-level import is how `cli` stays fast)."""
    graph = nx.DiGraph()
    for path in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        statements = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        for _, target in imported(ast.Module(body=statements, type_ignores=[])):
            graph.add_edge(module_name(path), target)
    assert list(nx.simple_cycles(graph)) == []


def test_modules_stay_small() -> None:
    sizes = {module_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_only_models_ask_which_class_a_model_is() -> None:
    """`isinstance(x, ModelSpec)` and the like belong to `models` (the TrainedModel protocol
    answers everything else)."""
    asked = []
    for path in MODULES:
        if layer_of(path) == "models":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if names & MODEL_CLASSES:
                    asked.append(f"{module_name(path)}:{node.lineno}")
    assert asked == []
