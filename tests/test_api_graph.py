"""An op-graph model end to end (issue 8): `parplan plan resnet-50 --gpus 64 --gpu a100-80gb
--global-batch 4096` gives a data-parallel plan and its DeepSpeed / torchrun files, through the
CLI and the Python API; Megatron-LM arguments are refused with a clear error."""

from __future__ import annotations

import json

import pytest

import parplan_gen
from parplan_gen.api import Plan
from parplan_gen.render.checks import RenderError

RESNET = ("resnet-50", "--gpus", "64", "--gpu", "a100-80gb", "--global-batch", "4096")
GPUS, GLOBAL_BATCH = 64, 4096
FILES = {
    "ds_config.json",
    "nccl.env",
    "launch_torchrun.sh",
    "launch_slurm.sbatch",
    "hostfile",
    "plan_memory.svg",
    "plan_time.svg",
    "plan.md",
    "plan.json",
}


@pytest.fixture(scope="module")
def resnet_plan() -> Plan:
    cluster = {"gpus": GPUS, "gpu": "a100-80gb"}
    return parplan_gen.plan("resnet-50", cluster, global_batch=GLOBAL_BATCH)


def assert_data_parallel_config(config: dict) -> None:
    micro, accum = config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
    assert config["train_batch_size"] == GLOBAL_BATCH
    assert micro * accum * GPUS == GLOBAL_BATCH  # every GPU a data-parallel rank
    assert "pipeline" not in config


def test_plan_out_writes_the_deepspeed_and_torchrun_files(cli, tmp_path):
    run = cli("plan", *RESNET, "--out", tmp_path / "run")
    assert run.code == 0, run.err
    assert {p.name for p in (tmp_path / "run").iterdir()} == FILES
    assert_data_parallel_config(json.loads((tmp_path / "run" / "ds_config.json").read_text()))
    report = (tmp_path / "run" / "plan.md").read_text()
    assert "| step time | samples/s |" in report and "| global batch | 4,096 samples |" in report
    assert "Model: resnet-50 (25.6M params, op graph)." in report

    again = cli("render", tmp_path / "run" / "plan.json", "--out", tmp_path / "rendered")
    assert again.code == 0, again.err
    first = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    assert {p.name: p.read_bytes() for p in (tmp_path / "rendered").iterdir()} == first


def test_plan_out_refuses_a_megatron_version_for_a_graph_model(cli, tmp_path):
    run = cli("plan", *RESNET, "--out", tmp_path / "run", "--megatron-version", "core_v0.16")
    assert run.code == 1
    assert "--megatron-version 'core_v0.16': resnet-50 is an op-graph model" in run.err
    assert not (tmp_path / "run").exists()


def test_api_deepspeed_config_and_write(resnet_plan, tmp_path):
    assert resnet_plan.chosen.plan.dp == GPUS
    config = resnet_plan.deepspeed_config()
    assert_data_parallel_config(config)
    written = resnet_plan.write(tmp_path / "out")
    assert {p.name for p in written} == FILES
    assert json.loads((tmp_path / "out" / "ds_config.json").read_text()) == config


def test_api_megatron_args_is_a_clear_error(resnet_plan):
    with pytest.raises(RenderError) as info:
        resnet_plan.megatron_args()
    assert info.value.message == (
        "resnet-50 is an op-graph model: it has no Megatron-LM arguments (Megatron-LM trains "
        "transformers); launch your training script with launch_torchrun.sh and "
        "ds_config.json (parplan render / Plan.write)"
    )
