"""torchtitan_run.sh: the search picks torchtitan where it runs the best layout, its file is
written, read back (`check --from-torchtitan`) to the plan's layout, and its overrides are
accepted by torchtitan 0.3.0's own ConfigManager and ParallelDims.

The consumer (tests/consumer_torchtitan.py, shared with test_consumers.py) parses the arguments
with torchtitan's ConfigManager, as torchtitan.train does, and builds its ParallelDims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import consumer_torchtitan
import pytest

import parplan_gen
from parplan_gen.api import load_model
from parplan_gen.backends.torchtitan.reader import torchtitan_values
from parplan_gen.inputs.errors import InputError
from parplan_gen.render.mapping import load_mapping

from consumer_support import mismatches

MAPPING = Path(parplan_gen.__file__).parent.parent / "templates" / "mapping.yaml"
CASES = [  # model, GPUs, global batch, seq len
    ("llama-3-70b", 64, 512, 4096),
    ("llama-3-70b", 256, 1024, 8192),
    ("llama-3-8b", 8, 64, 8192),
    ("llama-3-405b", 1024, 512, 8192),
]
LAYOUT = ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "global_batch", "seq_len", "recompute")


def _planned(tmp_path: Path, model: str, gpus: int, batch: int, seq: int) -> tuple[Any, Path]:
    cluster = {"gpus": gpus, "gpu": "h100"}
    precision = "fp8" if model == "llama-3-405b" else "bf16"  # its config's (Float8Linear)
    plan = parplan_gen.plan(
        model, cluster, global_batch=batch, seq_len=seq, backend="torchtitan", precision=precision
    )
    plan.write(tmp_path / "plan")
    return plan, tmp_path / "plan" / "torchtitan_run.sh"


@pytest.mark.parametrize(("model", "gpus", "batch", "seq"), CASES)
def test_torchtitan_run_reads_back_to_the_plan(
    tmp_path: Path, model: str, gpus: int, batch: int, seq: int
) -> None:
    plan, script = _planned(tmp_path, model, gpus, batch, seq)
    layout = plan.chosen.plan
    layers = load_model(model).pipeline_layers
    read = torchtitan_values(script, layers, load_mapping(MAPPING), num_gpus=gpus)
    assert {k: read.get(k, getattr(layout, k)) for k in LAYOUT} == {
        k: getattr(layout, k) for k in LAYOUT
    }
    assert read.get("zero_stage", layout.zero_stage) == layout.zero_stage
    assert read["precision"] == layout.precision


def test_hsdp_is_refused_by_the_reader(tmp_path: Path) -> None:
    script = tmp_path / "hsdp.sh"
    script.write_text(
        "torchrun -m torchtitan.train --module llama3 --config llama3_8b "
        "--parallelism.data_parallel_replicate_degree 2 "
        "--parallelism.data_parallel_shard_degree 4\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match="HSDP"):
        torchtitan_values(script, 32, load_mapping(MAPPING), num_gpus=8)


@pytest.mark.parametrize(("model", "gpus", "batch", "seq"), CASES)
def test_torchtitan_parses_the_overrides(
    tmp_path: Path, model: str, gpus: int, batch: int, seq: int
) -> None:
    plan, script = _planned(tmp_path, model, gpus, batch, seq)
    layout = plan.chosen.plan.model_dump()
    read = consumer_torchtitan.layout_read(consumer_torchtitan.torchtitan_reading(script, gpus))
    assert mismatches(read, {**layout, "seq_len": seq}) == []
