"""The wheel ships its rules, templates and examples: install it into a fresh venv and run it
there. Kept cheap: the wheel is built by calling the build backend's PEP 517 hook directly (no
pip start-up, no build isolation), once per module, and each test starts as few processes as
it can."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import REPO


def run(*argv: object, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pyproject's build backend makes of the repository."""
    dist = tmp_path_factory.mktemp("dist")
    backend = "import sys, hatchling.build as b; print(b.build_wheel(sys.argv[1]))"
    built = run(sys.executable, "-c", backend, dist, cwd=REPO)  # pyproject's backend
    assert built.returncode == 0, built.stderr
    return dist / built.stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A venv holding the built wheel; its dependencies come from this test's environment."""
    root = tmp_path_factory.mktemp("wheel")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    site = sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)})
    # Dependencies (pydantic, networkx, ...) are reused from this environment rather than
    # downloaded; the package itself comes only from the wheel.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    unpacked = run(
        sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", wheel
    )
    if unpacked.returncode != 0:  # pip too old for --python: install with the target's pip
        pytest.fail(unpacked.stderr)
    return env_dir


def test_the_wheel_marks_the_package_as_typed(wheel):
    # PEP 561: type checkers read an installed package's hints only when it ships py.typed
    # (an empty file beside its __init__.py).
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {"parplan_gen/__init__.py", "parplan_gen/py.typed"} <= names
        assert archive.getinfo("parplan_gen/py.typed").file_size == 0


def test_the_wheel_ships_each_backends_folder(wheel):
    # capabilities, constraints.yaml, mapping.yaml, templates, facts and reader: package data
    # of parplan_gen/backends/<name>/, found inside the installed package
    folder = REPO / "parplan_gen" / "backends"
    shipped = {
        p.relative_to(REPO).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert "parplan_gen/backends/megatron/constraints.yaml" in shipped
    with zipfile.ZipFile(wheel) as archive:
        assert shipped - set(archive.namelist()) == set()


def test_installed_wheel_finds_each_backends_rules(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = run(
        installed / "bin" / "python",
        "-c",
        "import parplan_gen.inputs.resources as r\nfor p in r.builtin_rule_files(): print(p)",
        cwd=tmp_path,
        env=env,
    )
    assert found.returncode == 0, found.stderr
    files = [Path(line) for line in found.stdout.splitlines()]
    assert all(str(p).startswith(str(installed)) for p in files), files
    own = [p for p in files if p.parent.parent.name == "backends"]
    assert {p.parent.name for p in own} == {"accelerate", "deepspeed", "megatron", "torchtitan"}


def test_installed_wheel_runs_analyze_on_a_shipped_example(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = run(
        installed / "bin" / "python",
        "-c",
        "import parplan_gen.inputs.resources as r\n"
        "for name in ('examples', 'rules', 'templates'): print(r.shipped_dir(name))",
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    examples, rules, templates = (Path(line) for line in where.stdout.splitlines())
    for folder in (examples, rules, templates):  # all three inside the installed package
        assert str(folder).startswith(str(installed)), "the package must come from the wheel"
        assert folder.is_dir() and folder.parent.name == "shipped", folder
    done = run(
        installed / "bin" / "parplan",
        "analyze",
        examples / "transformer_block.yaml",
        "--json",
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["opportunities"]
    assert found[0]["node_id"] == "pipeline_stages"


def test_installed_wheel_plans_and_renders_from_its_own_data(installed, tmp_path):
    # Presets, the hardware catalog, the cost and constraint rules and the templates all have
    # to come from the wheel for this to write the launch files.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = run(installed / "bin" / "parplan", "plan", "llama-3-8b", "--gpus", "8", "--gpu", "h100",
               "--global-batch", "64", "--out", tmp_path / "plan", cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = {p.name for p in (tmp_path / "plan").iterdir()}
    assert {"plan.json", "nccl.env", "plan.md"} <= written
    assert {"ds_config.json", "megatron_args.sh"} & written  # the chosen backend's file
