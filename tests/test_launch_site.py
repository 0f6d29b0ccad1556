"""Launch on a real cluster (issue 14 item 5): node names, CPUs, SLURM account / partition /
time, RoCE's NCCL settings, from a cluster file or the flags, into launch_slurm.sbatch, the
hostfile and nccl.env.

Expected values are worked from the inputs: --cpus-per-task = CPUs per node x GPUs used / GPUs
per node (cpus_per_node of the file; the DGX H100's 112 cores from its datasheet, "Dual Intel
Xeon Platinum 8480C Processors, 112 Cores total"; else 1 per GPU); the ranges are NCCL's
(env.html: NCCL_IB_GID_INDEX min -1, NCCL_IB_TC 0..255) and sbatch(1)'s --time formats.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from parplan_gen import plan
from parplan_gen.cli.main import main
from parplan_gen.cost import launch_site
from parplan_gen.cost.hardware import (
    Cluster,
    ClusterSetup,
    cluster_from_flags,
    load_cluster,
    load_cluster_file,
)
from parplan_gen.cost.launch_site import LaunchSettings
from parplan_gen.inputs.errors import InputError, UsageError
from parplan_gen.render.checks import RenderError
from parplan_gen.render.launch_context import cpus_per_task
from parplan_gen.render.plan_files import render_plan
from parplan_gen.render.shell_quote import directive, name_word

from conftest import REPO

EXAMPLE = REPO / "examples" / "cluster_h100_roce_slurm.yaml"
NCCL_REFERENCE = REPO / "templates" / "nccl" / "nccl_env.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# ---- the cluster file ------------------------------------------------------------------------


def test_the_example_cluster_file_gives_every_launch_setting():
    setup = load_cluster_file(EXAMPLE)
    cluster = setup.cluster
    assert (cluster.num_gpus, cluster.num_nodes) == (16, 2)  # two node names, 8 GPUs each
    assert setup.launch.model_dump() == {
        "node_names": ("gpu-a01", "gpu-a02"),
        "cpus_per_node": 96,
        "slurm_account": "proj_llm",
        "slurm_partition": "gpu",
        "slurm_time": "2-00:00:00",
        "ib_hcas": tuple(f"mlx5_{i}" for i in range(8)),
        "ib_tc": 106,
        "ib_gid_index": 3,
        "socket_ifname": "bond0",
    }
    assert setup.budget_inputs is None  # the example gives no price, MTBF or storage
    assert load_cluster(EXAMPLE) == cluster  # the hardware alone
    assert Cluster.model_validate(cluster.model_dump(mode="json")) == cluster
    assert LaunchSettings.model_validate(setup.launch.model_dump(mode="json")) == setup.launch


def test_the_hardware_holds_no_launch_setting_and_no_budget_figure():
    keys = set(cluster_from_flags(16, "h100").model_dump(mode="json"))
    assert not keys & {"launch", "ib_hcas", "socket_ifname", "node_names", "gpu_hour_price"}


def test_a_launch_site_naming_the_wrong_count_of_nodes_is_refused():
    two_nodes = cluster_from_flags(16, "h100")
    with pytest.raises(ValueError, match="1 node_names for a cluster of 2 node"):
        ClusterSetup(cluster=two_nodes, launch=LaunchSettings(node_names=("a",)))
    with pytest.raises(InputError, match=r"^launch\.node_names: 1 node_names for a cluster of 2"):
        plan("llama-3-8b", two_nodes, launch={"node_names": ["a"]}, global_batch=64)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu: h100\nnodes: 2\nnode_names: [a]\n", "3:1: node_names: 1 node_names for a "
         "cluster of 2 node(s)"),
        ("gpu: h100\nnode_names: [a, a]\n", "2:1: node_names: node_names repeats a"),
        ("gpu: h100\nnodes: 1\nnode_names: ['a;touch M']\n", "3:14: node_names[0]: "),
        ("gpu: h100\nnodes: 1\nnode_names: [-oProxyCommand=x]\n", "3:14: node_names[0]: "),
        ("gpu: h100\nnodes: 1\nslurm: {account: 'a b'}\n", "3:9: slurm.account: "),
        ("gpu: h100\nnodes: 1\nslurm: {partition: 'gpu;id'}\n", "3:9: slurm.partition: "),
        ("gpu: h100\nnodes: 1\nslurm: {time: '$(id)'}\n", "3:9: slurm.time: "),
        ("gpu: h100\nnodes: 1\nslurm: {time: '1:2:3:4'}\n", "3:9: slurm.time: "),
        ("gpu: h100\nnodes: 1\nnccl: {ib_gid_index: -2}\n", "3:8: nccl.ib_gid_index: Input "
         "should be greater than or equal to -1"),
        ("gpu: h100\nnodes: 1\nnccl: {ib_tc: 256}\n", "3:8: nccl.ib_tc: Input should be less "
         "than or equal to 255"),
        ("gpu: h100\nnodes: 1\nnccl: {socket_ifname: 'eth0;id'}\n", "3:8: nccl.socket_ifname"),
        ("gpu: h100\nnodes: 1\ncpus_per_node: 0\n", "3:1: cpus_per_node: Input should be "
         "greater than 0"),
    ],
)  # fmt: skip
def test_a_bad_launch_setting_is_refused_at_its_line(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as refused:
        load_cluster(path)
    assert str(refused.value).startswith(f"{path}:{message}"), str(refused.value)


def test_the_ranges_are_nccls():
    reference = YAML(typ="safe").load(NCCL_REFERENCE.read_text(encoding="utf-8"))["variables"]
    assert reference["NCCL_IB_GID_INDEX"]["min"] == launch_site.NCCL_GID_INDEX_MIN
    tc = reference["NCCL_IB_TC"]
    assert (tc["min"], tc["max"]) == (launch_site.NCCL_TC_MIN, launch_site.NCCL_TC_MAX)


@pytest.mark.parametrize("time", ["30", "30:00", "48:00:00", "2-0", "2-12:30", "2-00:00:00", "0:5"])
def test_every_sbatch_time_format_is_taken(time):
    setup = ClusterSetup(cluster=cluster_from_flags(8, "h100")).with_slurm(time=time)
    assert setup.launch.slurm_time == time


@pytest.mark.parametrize(
    ("flag", "value"),
    [("account", "a;b"), ("account", "-x"), ("partition", "gpu long"), ("time", "1h"),
     ("time", "tomorrow"), ("partition", "a,\nb")],
)  # fmt: skip
def test_a_bad_slurm_flag_is_a_usage_error(flag, value):
    with pytest.raises(UsageError, match=f"^--slurm-{flag}: expected "):
        ClusterSetup(cluster=cluster_from_flags(8, "h100")).with_slurm(**{flag: value})


def test_flags_replace_the_cluster_files_slurm_settings():
    setup = load_cluster_file(EXAMPLE).with_slurm(partition="long", time="10:00")
    assert setup.launch.slurm_account == "proj_llm"  # kept
    assert (setup.launch.slurm_partition, setup.launch.slurm_time) == ("long", "10:00")
    assert setup.launch.node_names == ("gpu-a01", "gpu-a02")
    assert setup.cluster == load_cluster(EXAMPLE)  # the hardware is the file's


# ---- the rendered files ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_files() -> dict[str, str]:
    """The files of a plan on the example cluster file, through the Python API."""
    result = plan("llama-3-8b", str(EXAMPLE), global_batch=256, seq_len=4096)
    return render_plan(result.document)


def test_sbatch_takes_the_cluster_files_settings(example_files):
    head = example_files["launch_slurm.sbatch"].split("\n")[:10]
    assert head[2:10] == [
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=96",  # cpus_per_node 96, all 8 GPUs used
        "#SBATCH --exclusive",
        "#SBATCH --account=proj_llm",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=2-00:00:00",
    ]
    assert (
        "srun --kill-on-bad-exit=1 --cpus-per-task=96 bash" in example_files["launch_slurm.sbatch"]
    )


def test_hostfile_and_nccl_env_take_the_cluster_files_names(example_files):
    hosts = [ln for ln in example_files["hostfile"].split("\n") if ln and ln[0] != "#"]
    assert hosts == ["gpu-a01 slots=8", "gpu-a02 slots=8"]
    assert "placeholder" not in example_files["hostfile"]
    env = [ln for ln in example_files["nccl.env"].split("\n") if ln and ln[0] != "#"]
    assert "NCCL_IB_GID_INDEX=3" in env and "NCCL_IB_TC=106" in env
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7" in env
    assert "NCCL_SOCKET_IFNAME=bond0" in env
    assert "MASTER_ADDR=gpu-a01 ./launch_torchrun.sh" in example_files["launch_torchrun.sh"]


@pytest.mark.parametrize(
    ("gpu", "gpus", "per_node"),
    [("h100", 16, 8), ("a100-80gb", 4, 8), ("v100", 16, 8), ("h100", 16, 4), ("l40s", 16, 8)],
)
def test_no_cpus_per_task_without_cpus_per_node(gpu, gpus, per_node):
    # no reference system's figure stands in for the site's nodes (issue 29, item 3)
    found, why = cpus_per_task(cluster_from_flags(gpus, gpu, per_node), LaunchSettings())
    assert found is None
    assert why.startswith("no --cpus-per-task: the cluster file gives no cpus_per_node")


def test_a_plan_without_launch_settings_marks_its_placeholders(tmp_path, capsys):
    argv = ["plan", "llama-3-8b", "--gpus", "16", "--gpu", "h100", "--global-batch", "256"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    hostfile = (tmp_path / "o" / "hostfile").read_text(encoding="utf-8")
    assert "node-0 ... node-1 are placeholders" in hostfile
    assert "gives no node_names" in hostfile
    sbatch = (tmp_path / "o" / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --account" not in sbatch and "the site's defaults apply" in sbatch
    assert "NCCL_IB_GID_INDEX" not in (tmp_path / "o" / "nccl.env").read_text(encoding="utf-8")


def test_the_slurm_flags_reach_the_sbatch_file_and_plan_json(tmp_path, capsys):
    argv = ["plan", "llama-3-8b", "--cluster", str(EXAMPLE), "--global-batch", "256",
            "--slurm-partition", "long", "--slurm-time", "48:00:00", "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    sbatch = (tmp_path / "o" / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --partition=long\n#SBATCH --time=48:00:00\n" in sbatch
    saved = json.loads((tmp_path / "o" / "plan.json").read_text(encoding="utf-8"))
    assert saved["launch"]["slurm_partition"] == "long"
    assert "launch" not in saved["cluster"]


def test_a_bad_slurm_flag_exits_2(capsys):
    argv = ["plan", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64"]
    assert main([*argv, "--slurm-account", "x;touch MARKER"]) == 2
    assert "--slurm-account: expected a name" in capsys.readouterr().err


# ---- the renderer's own guard ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["a b", "a;b", "$(id)", "`id`", "a\nb", "-x", "", "a'b", 'a"b', "é"]
)
def test_a_word_that_needs_quoting_is_refused_in_sbatch_and_hostfile(value):
    with pytest.raises(RenderError, match="is not one plain word"):
        directive("account", value)
    with pytest.raises(RenderError, match="is not one plain word"):
        name_word(value, "node name")


def test_plain_words_pass_unchanged():
    assert directive("time", "2-00:00:00") == "#SBATCH --time=2-00:00:00"
    assert name_word("gpu-a01.cluster", "node name") == "gpu-a01.cluster"


def test_the_readme_slurm_command_runs(tmp_path, monkeypatch, capsys):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = re.search(r"\n(parplan plan [^\n]*--slurm-time[^\n]*)\n", readme)
    assert command, "the README shows the --slurm-* flags"
    argv = shlex.split(command.group(1))[1:]
    argv = [str(REPO / a) if a.startswith("examples/") else a for a in argv]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err
    out = tmp_path / argv[argv.index("--out") + 1]
    sbatch = (out / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --time=12:00:00\n" in sbatch and "#SBATCH --account=proj_llm\n" in sbatch
    assert "gpu-a02 slots=8" in (out / "hostfile").read_text(encoding="utf-8")


def test_render_replaces_the_slurm_settings_of_a_plan_json(tmp_path, capsys):
    first = ["plan", "llama-3-8b", "--cluster", str(EXAMPLE), "--global-batch", "256"]
    assert main([*first, "--out", str(tmp_path / "a")]) == 0
    again = ["render", str(tmp_path / "a" / "plan.json"), "--out", str(tmp_path / "b")]
    assert main([*again, "--slurm-partition", "long"]) == 0
    capsys.readouterr()
    sbatch = (tmp_path / "b" / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --account=proj_llm\n#SBATCH --partition=long\n" in sbatch
    saved = json.loads((tmp_path / "b" / "plan.json").read_text(encoding="utf-8"))
    assert saved["launch"]["slurm_partition"] == "long"
    assert main([*again, "--force", "--slurm-time", "soon"]) == 2
