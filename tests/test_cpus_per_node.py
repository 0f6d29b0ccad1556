"""`--cpus-per-node C` on `plan` and `render`, and `cpus_per_node` in the Python API (issue 14,
item 5): sbatch's --cpus-per-task follows it.

Expected values are worked from sbatch(1)'s one task per node: --cpus-per-task = C x GPUs used
on the node / GPUs per node (docs/clusters.md), e.g. 96 CPUs with 4 of a DGX H100's 8 GPUs used:
96 x 4 / 8 = 48. The upper bound is Slurm's: cpus_per_task is a uint16_t (slurm/slurm.h
job_desc_msg_t) whose 0xfffe and 0xffff are reserved (NO_VAL16, INFINITE16), so 65,533.
"""

from __future__ import annotations

import json
import re

import pytest

from parplan_gen import plan
from parplan_gen.cli.main import main
from parplan_gen.cost.hardware import (
    ClusterSetup,
    cluster_from_flags,
    load_cluster,
    load_cluster_file,
)
from parplan_gen.inputs.errors import UsageError
from parplan_gen.render.plan_files import render_plan

from conftest import REPO

EXAMPLE = REPO / "examples" / "cluster_h100_roce_slurm.yaml"  # cpus_per_node: 96
PLAN = ["plan", "llama-3-8b", "--global-batch", "256", "--seq-len", "4096"]


def cpus_per_task(sbatch: str) -> tuple[int, int]:
    """The sbatch directive's --cpus-per-task and srun's, which must be given again."""
    directive = re.search(r"^#SBATCH --cpus-per-task=(\d+)$", sbatch, re.M)
    srun = re.search(r"^\s*srun .*--cpus-per-task=(\d+) ", sbatch, re.M)
    assert directive and srun, sbatch
    return int(directive.group(1)), int(srun.group(1))


@pytest.mark.parametrize(
    ("cluster", "cpus", "expected"),
    [
        (["--gpus", "16", "--gpu", "h100"], "64", 64),  # 2 full nodes: 64 x 8/8
        (["--gpus", "4", "--gpu", "h100"], "96", 48),  # 4 of 8 GPUs: 96 x 4/8
        (["--cluster", str(EXAMPLE)], "48", 48),  # the flag replaces the file's 96
    ],
)
def test_plan_out_takes_cpus_per_node(tmp_path, capsys, cluster, cpus, expected):
    assert main([*PLAN, *cluster, "--cpus-per-node", cpus, "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    sbatch = (tmp_path / "o" / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert cpus_per_task(sbatch) == (expected, expected)
    saved = json.loads((tmp_path / "o" / "plan.json").read_text(encoding="utf-8"))
    assert saved["launch"]["cpus_per_node"] == int(cpus)


def test_render_replaces_cpus_per_node_of_a_plan_json(tmp_path, capsys):
    assert main([*PLAN, "--gpus", "4", "--gpu", "h100", "--out", str(tmp_path / "a")]) == 0
    again = ["render", str(tmp_path / "a" / "plan.json"), "--out", str(tmp_path / "b")]
    assert main([*again, "--cpus-per-node", "30"]) == 0
    capsys.readouterr()
    sbatch = (tmp_path / "b" / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert cpus_per_task(sbatch) == (15, 15)  # 30 x 4/8
    assert "cpus_per_node (30, " in sbatch  # the comment says where it came from


def test_the_api_takes_cpus_per_node():
    cluster = {"gpus": 16, "gpu": "h100", "cpus_per_node": 72}
    result = plan("llama-3-8b", cluster, global_batch=256, seq_len=4096)
    assert cpus_per_task(render_plan(result.document)["launch_slurm.sbatch"]) == (72, 72)
    replaced = load_cluster_file(EXAMPLE).with_slurm(cpus_per_node=24)
    assert replaced.launch.cpus_per_node == 24
    assert replaced.launch.slurm_account == "proj_llm"  # the rest of the file's settings stay


@pytest.mark.parametrize("value", [0, -8, 2.5, 8.0, "8", True, 65534])
def test_the_api_refuses_a_count_that_is_not_one(value):
    expected = "--cpus-per-node: expected a whole number from 1 to 65533, got "
    with pytest.raises(UsageError, match="^" + re.escape(expected)):
        ClusterSetup(cluster=cluster_from_flags(8, "h100")).with_slurm(cpus_per_node=value)
    with pytest.raises(UsageError, match="^" + re.escape(expected)):
        load_cluster_file(EXAMPLE).with_slurm(cpus_per_node=value)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "expected a whole number from 1 to 65533, got 0"),
        ("-4", "expected a whole number from 1 to 65533, got -4"),
        ("2.5", "expected a whole number (digits 0-9), got '2.5'"),
        ("65534", "expected a whole number from 1 to 65533, got 65534"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "render"])
def test_the_cli_refuses_a_count_that_is_not_one(capsys, command, value, why):
    argv = [*PLAN, "--gpus", "8", "--gpu", "h100"] if command == "plan" else ["render", "p.json"]
    argv += ["--out", "o"] if command == "render" else []
    assert main([*argv, f"--cpus-per-node={value}"]) == 2
    assert f"argument --cpus-per-node: {why}" in capsys.readouterr().err


def test_a_cluster_file_refuses_a_count_that_is_not_one(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("gpu: h100\nnodes: 1\ncpus_per_node: 96.5\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"3:1: cpus_per_node: Input should be a valid integer"):
        load_cluster(path)
