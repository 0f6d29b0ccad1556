"""Shared test helpers: write inline YAML files, run the CLI and capture its output."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

from parplan_gen.cli.main import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """write("dir/name.yaml", text) -> path, with the text dedented."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return _write


class Run:
    """The result of one CLI run."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """cli("analyze", path, "--json") -> Run(code, out, err)."""

    def _run(*argv: object) -> Run:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return _run


def chain_graph(ops: Sequence[str], name: str = "chain") -> str:
    """YAML text of a chain n0 -> n1 -> ... with the given ops."""
    nodes = "\n".join(f"  - {{id: n{i}, op: {op}}}" for i, op in enumerate(ops))
    edges = "\n".join(f"  - [n{i}, n{i + 1}]" for i in range(len(ops) - 1))
    return f"name: {name}\nnodes:\n{nodes or '  []'}\nedges:\n{edges or '  []'}\n"


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as module `name` (the benchmarks import each other by name)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
