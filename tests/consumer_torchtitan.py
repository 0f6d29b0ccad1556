"""Feed a rendered torchtitan_run.sh to torchtitan 0.3.0's own config classes and ParallelDims.

torchtitan's ConfigManager loads the config function first, and importing a config_registry
imports the trainer (triton ~1 GB, datasets, torchdata...), too heavy for CI. So the overrides
are parsed as ConfigManager.parse_args does after loading: tyro.cli with ConfigManager's own
tyro registry, over torchtitan's own sections (TrainingConfig, ParallelismConfig, CompileConfig,
ActivationCheckpointingConfig); Trainer.Config.__post_init__'s pipeline conditions are checked,
and ParallelDims.from_config is built (its _validate needs no GPU).
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer_support import consumer


@dataclass(frozen=True)
class TorchtitanReading:
    """What torchtitan understood: its parsed sections, its ParallelDims and the config named."""

    parsed: Any  # .training, .parallelism, .activation_checkpoint (torchtitan's own classes)
    dims: Any  # torchtitan.distributed.parallel_dims.ParallelDims
    module: str
    config: str


def torchtitan_args(script: Path) -> list[str]:
    """The torchtitan arguments the script passes: its TORCHTITAN_ARGS and the subcommand."""
    text = script.read_text(encoding="utf-8")
    block = text.split("TORCHTITAN_ARGS=(", 1)[1].split(")", 1)[0]
    return [*shlex.split(block), shlex.split(text.rstrip().splitlines()[-1])[-1]]


def torchtitan_reading(script: Path, gpus: int) -> TorchtitanReading:
    """Parse the script's overrides with torchtitan's classes; raise what torchtitan raises."""
    tyro = consumer("tyro")
    manager = consumer("torchtitan.config.manager")
    configs = consumer("torchtitan.config.configs")
    ac = consumer("torchtitan.distributed.activation_checkpoint")
    dims = consumer("torchtitan.distributed.parallel_dims")
    args = torchtitan_args(script)
    # ConfigManager._load_config: --module and --config name a config function.
    i, j = args.index("--module"), args.index("--config")
    registry = Path(manager.__file__).parent.parent / "models" / args[i + 1] / "config_registry.py"
    if f"def {args[j + 1]}() -> Trainer.Config:" not in registry.read_text(encoding="utf-8"):
        raise KeyError(f"{args[i + 1]} has no config function {args[j + 1]}")
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
            # trainer.py Trainer.Config.compile; its __post_init__ checks async TP's needs.
            ("compile", configs.CompileConfig, field(default_factory=configs.CompileConfig)),
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
    return TorchtitanReading(parsed, built, args[i + 1], args[j + 1])


def layout_read(reading: TorchtitanReading) -> dict[str, Any]:
    """The plan fields torchtitan's reading sets: degrees from ParallelDims, the micro-batch and
    the accumulation as trainer.py works them (accumulation = global / (local x dp); pp splits
    the local batch into micro-batches), the sequence and the recomputation."""
    ac = consumer("torchtitan.distributed.activation_checkpoint")
    dims, par, train = reading.dims, reading.parsed.parallelism, reading.parsed.training
    dp = dims.dp_replicate * dims.dp_shard
    micro = par.pipeline_parallel_microbatch_size if dims.pp > 1 else train.local_batch_size
    steps = train.global_batch_size // (train.local_batch_size * dp)
    pp_micro = train.local_batch_size // micro if dims.pp > 1 else 1
    recompute = {ac.SelectiveAC.Config: "selective", ac.FullAC.Config: "full", type(None): "none"}
    return {
        "dp": dp, "tp": dims.tp, "pp": dims.pp, "cp": dims.cp, "ep": dims.ep, "mbs": micro,
        "grad_accum": steps * pp_micro, "global_batch": train.global_batch_size,
        "seq_len": train.seq_len,
        "recompute": recompute[type(reading.parsed.activation_checkpoint)],
    }  # fmt: skip
