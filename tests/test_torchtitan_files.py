"""torchtitan_run.sh: the search picks torchtitan where it runs the best layout, its file is
written, read back (`check --from-torchtitan`) to the plan's layout, and its overrides are
accepted by torchtitan 0.3.0's own config classes and ParallelDims.

The consumer: torchtitan's ConfigManager loads the config function first, and importing a
config_registry imports the trainer (triton ~1 GB, datasets, torchdata...), too heavy for CI.
So the test parses the overrides as ConfigManager.parse_args does after loading: tyro.cli with
ConfigManager's own tyro registry, over torchtitan's own sections (TrainingConfig,
ParallelismConfig, ActivationCheckpointingConfig), checks Trainer.Config.__post_init__'s
pipeline conditions, and builds ParallelDims.from_config (its _validate needs no GPU)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.api import load_model
from parplan_gen.inputs.errors import InputError
from parplan_gen.render.mapping import load_mapping
from parplan_gen.render.torchtitan_reader import torchtitan_values

from consumer_support import consumer

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


def _args(script: Path) -> list[str]:
    """The torchtitan arguments the script passes: its TORCHTITAN_ARGS and the subcommand."""
    text = script.read_text(encoding="utf-8")
    block = text.split("TORCHTITAN_ARGS=(", 1)[1].split(")", 1)[0]
    return [*shlex.split(block), shlex.split(text.rstrip().splitlines()[-1])[-1]]


@pytest.mark.parametrize(("model", "gpus", "batch", "seq"), CASES)
def test_torchtitan_run_reads_back_to_the_plan(
    tmp_path: Path, model: str, gpus: int, batch: int, seq: int
) -> None:
    plan, script = _planned(tmp_path, model, gpus, batch, seq)
    layout = plan.chosen.plan
    read = torchtitan_values(script, load_model(model).pipeline_layers, load_mapping(MAPPING))
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
        torchtitan_values(script, 32, load_mapping(MAPPING))


@pytest.mark.parametrize(("model", "gpus", "batch", "seq"), CASES)
def test_torchtitan_parses_the_overrides(
    tmp_path: Path, model: str, gpus: int, batch: int, seq: int
) -> None:
    tyro = consumer("tyro")
    manager = consumer("torchtitan.config.manager")
    configs = consumer("torchtitan.config.configs")
    ac = consumer("torchtitan.distributed.activation_checkpoint")
    dims = consumer("torchtitan.distributed.parallel_dims")
    plan, script = _planned(tmp_path, model, gpus, batch, seq)
    layout = plan.chosen.plan
    args = _args(script)
    # ConfigManager._load_config: --module and --config name a config function.
    i, j = args.index("--module"), args.index("--config")
    registry = Path(manager.__file__).parent.parent / "models" / args[i + 1] / "config_registry.py"
    assert f"def {args[j + 1]}() -> Trainer.Config:" in registry.read_text(encoding="utf-8")
    rest = [a for n, a in enumerate(args) if n not in (i, i + 1, j, j + 1)]

    field = dataclasses.field
    sections = dataclasses.make_dataclass(  # the parts of Trainer.Config the overrides set
        "Sections",
        [
            ("training", configs.TrainingConfig, field(default_factory=configs.TrainingConfig)),
            (
                "parallelism",
                configs.ParallelismConfig,
                field(default_factory=configs.ParallelismConfig),
            ),
            (
                "activation_checkpoint",
                ac.ActivationCheckpointingConfig,
                field(default_factory=ac.SelectiveAC.Config),
            ),
        ],
    )
    manager.ConfigManager()  # registers its tyro rules
    parsed = tyro.cli(sections, args=rest, default=sections(), registry=manager.custom_registry)
    par, train = parsed.parallelism, parsed.training
    # Trainer.Config.__post_init__ and _validate_cuda_graphs with pp > 1.
    if par.pipeline_parallel_degree > 1:
        assert train.local_batch_size % par.pipeline_parallel_microbatch_size == 0
        assert train.disable_cuda_graphs
    built = dims.ParallelDims.from_config(par, gpus)
    assert (built.dp_replicate * built.dp_shard, built.tp, built.pp, built.cp, built.ep) == (
        layout.dp, layout.tp, layout.pp, layout.cp, layout.ep,
    )  # fmt: skip
    # trainer.py: accumulation = global / (local x dp); pp splits the local batch.
    micro = par.pipeline_parallel_microbatch_size if layout.pp > 1 else train.local_batch_size
    steps = train.global_batch_size // (train.local_batch_size * layout.dp)
    pp_micro = train.local_batch_size // micro if layout.pp > 1 else 1
    assert (micro, steps * pp_micro, train.seq_len) == (layout.mbs, layout.grad_accum, seq)
    recompute = {ac.SelectiveAC.Config: "selective", ac.FullAC.Config: "full", type(None): "none"}
    assert recompute[type(parsed.activation_checkpoint)] == layout.recompute
