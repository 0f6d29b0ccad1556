"""Feed a rendered torchtitan_run.sh to torchtitan 0.3.0's own ConfigManager and ParallelDims.

`ConfigManager().parse_args(args)` is what torchtitan.train runs on its command line: it loads
the config function named by --module/--config from the model's config_registry, applies the
tyro overrides and validates the result (Trainer.Config.__post_init__, _validate_config).
ParallelDims.from_config then builds the mesh sizes for the world size (its _validate needs no
GPU).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

from consumer_support import consumer


@dataclass(frozen=True)
class TorchtitanReading:
    """What torchtitan understood: its parsed sections, its ParallelDims and the config named."""

    parsed: Any  # torchtitan's Trainer.Config: .training, .parallelism, .activation_checkpoint
    dims: Any  # torchtitan.distributed.parallel_dims.ParallelDims
    module: str
    config: str


def torchtitan_args(script: Path) -> list[str]:
    """The torchtitan arguments the script passes: its TORCHTITAN_ARGS and the subcommand."""
    text = script.read_text(encoding="utf-8")
    block = text.split("TORCHTITAN_ARGS=(", 1)[1].split(")", 1)[0]
    return [*shlex.split(block), shlex.split(text.rstrip().splitlines()[-1])[-1]]


def torchtitan_reading(script: Path, gpus: int) -> TorchtitanReading:
    """Parse the script's arguments with torchtitan's ConfigManager; raise what torchtitan
    raises."""
    manager = consumer("torchtitan.config.manager")
    dims = consumer("torchtitan.distributed.parallel_dims")
    float8 = consumer("torchtitan.components.quantization.float8")
    args = torchtitan_args(script)
    # The float8 converter checks the GPU (SM 8.9 or later) when the config is validated; this
    # machine has none, so it stands in for the H100 (SM 9.0) the plans are made for.
    with patch.object(float8, "has_cuda_capability", lambda major, minor: (major, minor) <= (9, 0)):
        parsed = manager.ConfigManager().parse_args(args)
    built = dims.ParallelDims.from_config(parsed.parallelism, gpus)
    return TorchtitanReading(parsed, built, _value(args, "--module"), _value(args, "--config"))


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


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


def schedule_read(reading: TorchtitanReading) -> dict[str, Any]:
    """The optimizer and LR scheduler torchtitan's parsed config holds: the first param group's
    optimizer and kwargs (default_adamw's catch-all group) and LRSchedulersContainer.Config."""
    group = reading.parsed.optimizer.param_groups[0]
    sched = reading.parsed.lr_scheduler
    return {
        "optimizer": group.optimizer_name,
        **{f"optimizer.{k}": v for k, v in group.optimizer_kwargs.items()},
        "warmup_steps": sched.warmup_steps,
        "total_steps": sched.total_steps,
        "decay_ratio": sched.decay_ratio,
        "decay_type": sched.decay_type,
        "min_lr_factor": sched.min_lr_factor,
    }


def scheduled_lrs(reading: TorchtitanReading, at_steps: list[int]) -> list[float]:
    """The learning rate torchtitan's own schedule gives at each of `at_steps`: the config's
    OptimizersContainer built on a one-layer model (CPU) and LRSchedulersContainer.Config.build
    on it, as trainer.py builds them; its LambdaLR's factor times the group's base lr."""
    torch = consumer("torch")
    parsed = reading.parsed
    optimizers = parsed.optimizer.build(model_parts=[torch.nn.Linear(2, 2)])
    schedulers = parsed.lr_scheduler.build(
        optimizers=optimizers, training_steps=parsed.training.steps
    )
    first = schedulers.schedulers[0]
    return [first.base_lrs[0] * first.lr_lambdas[0](step) for step in at_steps]
