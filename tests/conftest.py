"""Shared test helpers: write inline YAML files, run the CLI and capture its output."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import io
import json
import os
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ruamel.yaml import YAML

import parplan_gen
from parplan_gen.cli.main import main
from parplan_gen.rules.ruleset import RuleSet

from launch_support import TORCHRUN, JobOutcome

REPO = Path(__file__).resolve().parent.parent
# The calibration files next to the repository (not shipped: tests that read them skip without).
SHARED_CALIBRATION = REPO.parent / "shared" / "calibration"
RUN_FILES = (
    SHARED_CALIBRATION / "published_runs.yaml",
    SHARED_CALIBRATION / "published_runs_modern.yaml",
)
NO_RUN_FILES = not all(f.is_file() for f in RUN_FILES)
# Their copies, vendored with the tests (CI has no ../shared): what the tests read.
VENDORED_RUNS = tuple(REPO / "tests" / "data" / "calibration" / f.name for f in RUN_FILES)
# Every row the constants of rules/cost/ are fitted on: those two files and the repository's
# own sourced rows (benchmarks/data/fitting_runs.yaml).
FIT_RUNS = (*VENDORED_RUNS, REPO / "benchmarks" / "data" / "fitting_runs.yaml")
# The writer's journal key (render/journal.py) lives in $XDG_STATE_HOME/parplan: the tests use a
# folder of their own (per worker), never the user's, and every run they start inherits it.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="parplan-state-")

# The cyclic collector's oldest generation, collected at most once every 100 collections of the
# middle one rather than every 10 (gc.set_threshold's default 700, 10, 10). A test process holds
# ever more long-lived objects (the collected items, the imported frameworks, the built-in
# RuleSet, the search memo, the modules' cached plans), and each full collection rescans all of
# them: ~50 per xdist worker at ~0.15 s, ~15 s of CPU per run; with 100, ~10 (~5 s). The young
# generations, where most reference cycles die, are collected as often as before; the tests
# that count garbage collect it themselves (gc.collect).
gc.set_threshold(700, 10, 100)


# The modules that load the frameworks themselves (tests/consumer_*.py: Megatron-Core ~4 s to
# import, torchtitan's registry, DeepSpeed, torch): xdist runs all of their tests on one worker
# (`--dist loadgroup`, pyproject.toml), so each framework is imported once per run rather than
# once per worker, and the torchrun jobs share one launch (`torchrun_jobs`).
FRAMEWORK_GROUP = "frameworks"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For `--dist loadgroup`: xdist's own scheduler, with the framework modules' tests as one
    unit of work (FRAMEWORK_GROUP), each other test a unit of its own.

    Not by an `xdist_group` mark: xdist 3.8 groups by a suffix it writes into each item's
    `_nodeid`, which pytest 9.2's structured node ids no longer read, so the marked tests were
    spread over both workers, each importing the frameworks (pytest-dev/pytest-xdist#1386)."""
    if config.getvalue("dist") != "loadgroup":
        return None  # xdist's own choice
    from xdist.scheduler import LoadGroupScheduling

    class FrameworkGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if _loads_frameworks(str(config.rootpath / nodeid.split("::", 1)[0])):
                return FRAMEWORK_GROUP
            return super()._split_scope(nodeid)

    return FrameworkGroupScheduling(config, log)


@cache
def _loads_frameworks(path: str) -> bool:
    """Whether a test module imports a consumer (tests/consumer_*.py), at its top or in a test."""
    if not path.endswith(".py") or not Path(path).is_file():
        return False
    text = Path(path).read_text(encoding="utf-8")
    return re.search(r"^\s*(from|import) consumer_", text, re.MULTILINE) is not None


@cache
def builtin_rules() -> RuleSet:
    """The built-in rules alone, loaded once per test process and shared by the tests that
    evaluate, explain or render with them directly (they never change the set)."""
    return parplan_gen.load_rules()


def run_entries(*paths: Path) -> list[dict]:
    """The `configs` of runs files (the calibration files' format), in file order."""
    yaml = YAML(typ="safe")
    return [e for path in paths for e in yaml.load(path.read_text(encoding="utf-8"))["configs"]]


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
    """benchmarks/<name>.py as module `name` (the benchmarks import each other by name, as
    `python benchmarks/<name>.py` lets them: benchmarks/ on the import path)."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# The issue-13 scenarios that several modules check (the real consumers, the read-back through
# `check`): name -> (model, GPUs, GPU, global batch, sequence length).
PLANNED = {
    "llama-3-8b-8xh100": ("llama-3-8b", 8, "h100", 512, 8192),
    "llama-3-70b-64xh100": ("llama-3-70b", 64, "h100", 512, 4096),
    "llama-3-70b-256xh100": ("llama-3-70b", 256, "h100", 1024, 4096),
    "gpt3-175b-1024xa100": ("gpt3-175b", 1024, "a100-80gb", 1536, 2048),
    "mixtral-8x7b-64xh100": ("mixtral-8x7b", 64, "h100", 256, 4096),
    "qwen3-30b-a3b-16xh100": ("qwen3-30b-a3b", 16, "h100", 256, 4096),
    "deepseek-v3-1024xh100": ("deepseek-v3", 1024, "h100", 2048, 4096),
    "llama-3-405b-16384xh100": ("llama-3-405b", 16384, "h100", 2048, 8192),
}


# Scenarios of PLANNED planned for one backend (`planned` gives them too): name -> (the
# PLANNED scenario, backend).
PLANNED_ON = {
    # Megatron-LM with a pipeline and DeepSpeed-MoE are within 0.2 % of each other: each
    # backend's files are read, whichever the search ranks first.
    "mixtral-8x7b-64xh100-deepspeed": ("mixtral-8x7b-64xh100", "deepspeed"),
    "mixtral-8x7b-64xh100-megatron": ("mixtral-8x7b-64xh100", "megatron"),
    # torchtitan's FSDP2 and Megatron-FSDP are within 1 % of each other on 8 H100
    "llama-3-8b-8xh100-megatron": ("llama-3-8b-8xh100", "megatron"),
    "llama-3-8b-8xh100-torchtitan": ("llama-3-8b-8xh100", "torchtitan"),
}


@pytest.fixture(scope="session")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """planned(name) -> the folder `parplan plan ... --out` wrote for PLANNED[name] (or
    PLANNED_ON[name]), planned once per session (the files are read, never changed)."""
    root = tmp_path_factory.mktemp("planned")
    done: dict[str, Path] = {}

    def folder(name: str) -> Path:
        if name not in done:
            scenario, backend = PLANNED_ON.get(name, (name, "any"))
            model, gpus, gpu, batch, seq = PLANNED[scenario]
            out = root / name
            argv = ["plan", model, "--gpus", str(gpus), "--gpu", gpu, "--global-batch",
                    str(batch), "--seq-len", str(seq), "--backend", backend,
                    "--out", str(out)]  # fmt: skip
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                code = main(argv)
            assert code == 0, sink.getvalue()[-2000:]
            done[name] = out
        return done[name]

    return folder


@pytest.fixture(scope="session")
def torchrun_jobs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], JobOutcome]:
    """torchrun_jobs(name) -> what the shared torchrun launch did for the job `name` registered
    with launch_support.TORCHRUN: every registered job is planned and launched once per session
    (their modules are all in FRAMEWORK_GROUP, so on one worker)."""
    root = tmp_path_factory.mktemp("torchrun")
    return lambda name: TORCHRUN.outcome(name, root)
