"""The wheel ships its rules and examples: install it into a fresh venv and run it there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from conftest import REPO


def run(*argv: object, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the built wheel; its dependencies come from this test's environment."""
    root = tmp_path_factory.mktemp("wheel")
    built = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        root / "dist",
        REPO,
    )
    assert built.returncode == 0, built.stderr
    wheel = next((root / "dist").glob("parplan_gen-*.whl"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    site = run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout
    # Dependencies (pydantic, networkx, ...) are reused from this environment rather than
    # downloaded; the package itself comes only from the wheel.
    Path(site.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    unpacked = run(
        sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", wheel
    )
    if unpacked.returncode != 0:  # pip too old for --python: install with the target's pip
        pytest.fail(unpacked.stderr)
    return env_dir


def test_installed_wheel_runs_analyze_on_a_shipped_example(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = run(
        installed / "bin" / "python",
        "-c",
        "import parplan_gen.inputs.resources as r; print(r.shipped_dir('examples'))",
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    examples = Path(where.stdout.strip())
    assert str(examples).startswith(str(installed)), "the package must come from the wheel"
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
    rules = run(
        installed / "bin" / "python",
        "-c",
        "import parplan_gen.inputs.resources as r; print(r.builtin_rules_dir())",
        cwd=tmp_path,
        env=env,
    )
    assert rules.stdout.strip().startswith(str(installed))


def test_installed_wheel_plans_and_renders_from_its_own_data(installed, tmp_path):
    # Presets, the hardware catalog, the cost and constraint rules and the templates all have
    # to come from the wheel for this to write the launch files.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = run(installed / "bin" / "parplan", "plan", "llama-3-8b", "--gpus", "8", "--gpu", "h100",
               "--global-batch", "64", "--out", tmp_path / "plan", cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = {p.name for p in (tmp_path / "plan").iterdir()}
    assert {"plan.json", "ds_config.json", "megatron_args.sh", "nccl.env", "plan.md"} <= written
