"""The package keeps its shape (docs/architecture.md): layers import only layers below them,
no import cycle between modules (lazy imports included), modules stay small without being
squeezed (`# fmt: skip` on tables only), and code outside `models` never asks which class a
model is."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from conftest import REPO

PACKAGE = REPO / "parplan_gen"
# Bottom to top: a module may import its own layer and the layers before it.
LAYERS = ("inputs", "models", "rules", "cost", "planning", "render", "profile", "api", "cli")
# A module is as long as its one job (most land under ~400 lines); past this many it is doing
# more than one, and is split where the job splits.
MAX_LINES = 600
# `# fmt: skip` keeps a table's rows as written: allowed on an assignment of a literal
# (tuple, list, dict, set, or one wrapped in a call: `frozenset((...))`), never to squeeze code
# under the line count.
TABLES = (ast.Tuple, ast.List, ast.Dict, ast.Set)
FMT_SKIP = "# fmt: skip"
MODEL_CLASSES = {"ModelSpec", "GraphModelSpec", "ModelGraph"}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


# A backend's folder (parplan_gen/backends/<name>/) holds modules of two layers, by their name.
BACKEND_PARTS = {
    "capabilities": "planning",
    "facts": "render",
    "reader": "render",
    "configs": "render",  # torchtitan's: the config functions' settings its reader starts from
    "compile_settings": "render",  # torchtitan's: the compile a line and its config function set
    "flags": "render",  # torchtitan's: the flags a line gives beside its layout
    "keys": "render",  # DeepSpeed's: the keys a ds_config.json gives beside its layout
    "model_from_script": "render",  # Megatron-LM's: the model a script trains
}


def layer_of(path: Path) -> str | None:
    """The layer a module of the package belongs to (None: the package's own __init__), given
    its path (or its dotted name's, without `.py`); a backend folder's by its part."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[0] == "backends":
        return BACKEND_PARTS.get(parts[-1])
    return parts[0] if parts[0] in LAYERS else None


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
        if LAYERS.index(layer_of(PACKAGE.joinpath(*target.split(".")[1:]))) > rank
    ]
    assert upward == []


def test_no_import_cycle_between_modules() -> None:
    """Every import counts, at module level or in a function (a lazy import keeps `parplan
    --help` fast, never to hide a cycle), `if TYPE_CHECKING:` ones too."""
    graph = nx.DiGraph()
    for path in MODULES:
        for _, target in imported(ast.parse(path.read_text(encoding="utf-8"))):
            graph.add_edge(module_name(path), target)
    assert sorted(sorted(cycle) for cycle in nx.simple_cycles(graph)) == []


def test_modules_stay_small() -> None:
    sizes = {module_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def _skipped(path: Path) -> list[str]:
    """`module:line` of each `# fmt: skip` that is not on an assignment of a literal table."""
    text = path.read_text(encoding="utf-8")
    ends: dict[int, ast.stmt] = {}
    for node in ast.walk(ast.parse(text)):  # outer statements first: the innermost wins
        if isinstance(node, ast.stmt) and node.end_lineno is not None:
            ends[node.end_lineno] = node
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        node = ends.get(number)
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
            value = value.args[0]  # frozenset((...)): the table is its argument
        if FMT_SKIP in line and not isinstance(value, TABLES):
            found.append(f"{module_name(path)}:{number}")
    return found


def test_fmt_skip_keeps_tables_only() -> None:
    assert [where for path in MODULES for where in _skipped(path)] == []


def test_only_the_profile_layer_loads_torch() -> None:
    """torch is optional (`pip install -e '.[profile]'`): only `parplan profile` loads it, in
    `profile/runtime.py`, by name; no module imports it."""
    found = []
    for path in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(name == "torch" or name.startswith("torch.") for name in names):
                found.append(f"{module_name(path)}:{node.lineno}")
    assert found == []


def test_the_cli_starts_without_the_cost_model() -> None:
    """`parplan --help` and the parsing of every command load no model class, cost model,
    rule engine or YAML parser: each command imports what it runs when it runs (the start was
    0.47 s when `cli/plan.py` imported the MFU conventions at the top, 0.1 s without)."""
    heavy = ["pydantic", "ruamel.yaml", "parplan_gen.cost.estimate", "parplan_gen.rules.engine",
             "parplan_gen.models.graph"]  # fmt: skip
    code = (
        "import sys; from parplan_gen.cli.main import build_parser; build_parser(); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


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
            # ... nor by its `kind` string: `x.kind == "graph"` is the same question.
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute):
                kinds = {c.value for c in node.comparators if isinstance(c, ast.Constant)}
                if node.left.attr == "kind" and kinds & {"graph", "transformer"}:
                    asked.append(f"{module_name(path)}:{node.lineno}")
    assert asked == []


# What a backend's folder holds (docs/backends.md, "Each backend owns"); ddp has capabilities
# and nothing else: its files are the launchers every plan has.
BACKEND_FILES = ("capabilities.py", "constraints.yaml", "mapping.yaml", "templates", "reader.py")
CAPABILITIES_ONLY = {"ddp"}


@pytest.mark.parametrize(
    "folder",
    sorted(d for d in (PACKAGE / "backends").iterdir() if d.is_dir() and d.name[0] not in "_."),
    ids=lambda d: d.name,
)
def test_every_backend_folder_has_its_parts(folder: Path) -> None:
    from parplan_gen.planning.backends import BACKENDS

    assert folder.name in BACKENDS
    wanted = BACKEND_FILES[:1] if folder.name in CAPABILITIES_ONLY else BACKEND_FILES
    assert [name for name in wanted if not (folder / name).exists()] == []
    if (folder / "templates").is_dir():  # one folder per release, each with its templates
        releases = [d for d in (folder / "templates").iterdir() if d.is_dir()]
        assert releases and all(list(d.glob("*.j2")) for d in releases)
