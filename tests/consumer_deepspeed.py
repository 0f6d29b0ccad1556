"""Feed a rendered ds_config.json to DeepSpeed's own config class, as deepspeed.initialize does.

`deepspeed.runtime.config.DeepSpeedConfig(config, mpu)` parses every section (pydantic models
for ZeRO, bf16/fp16, tensor parallelism, ...), fills in the batch sizes and asserts DeepSpeed's
batch arithmetic, `train_batch_size == micro_batch * grad_accum * world_size`, where world_size
is what DeepSpeed counts as data-parallel ranks:
- with a pipeline (`pipeline.stages` > 1) deepspeed.initialize takes the mpu of the
  PipelineModule's topology (deepspeed/__init__.py), whose data-parallel size is
  world / (stages x model-parallel size);
- with AutoTP (`tensor_parallel.autotp_size`) the training script passes an mpu of
  world / autotp_size data-parallel ranks (DeepSpeed's AutoTP training example);
- with Ulysses (`sequence_parallel_size`) DeepSpeedConfig divides the world itself;
- otherwise every rank is a data-parallel rank (dist.get_world_size()).
No GPU and no process group are here, so the world size and rank that DeepSpeedConfig asks
deepspeed.comm for are patched in: the plan's GPU count and rank 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from consumer_support import consumer


@dataclass(frozen=True)
class _Mpu:
    """The one question DeepSpeedConfig asks a model-parallel unit."""

    dp: int

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    return value if isinstance(value, dict) else {}


def _model_parallel_mpu(data: dict[str, Any], world: int) -> _Mpu | None:
    """The mpu deepspeed.initialize would get for this config, from DeepSpeed's own pipeline
    topology (PipeModelDataParallelTopology: pp x mp x dp = world, or it refuses)."""
    stages = _section(data, "pipeline").get("stages", 1)
    autotp = _section(data, "tensor_parallel").get("autotp_size", 0) or 1
    stages = stages if isinstance(stages, int) else 1  # "auto": the PipelineModule decides
    if stages == 1 and autotp == 1:
        return None
    if world % (stages * autotp):
        raise AssertionError(
            f"world({world}) does not divide into pipeline.stages({stages}) x "
            f"tensor_parallel.autotp_size({autotp}) x data-parallel ranks"
        )
    topology = consumer("deepspeed.runtime.pipe.topology").PipeModelDataParallelTopology(
        num_pp=stages, num_mp=autotp, num_dp=world // (stages * autotp)
    )
    return _Mpu(topology.get_dim("data"))


def deepspeed_config(path: Path, world: int) -> Any:
    """DeepSpeed's DeepSpeedConfig of the file at `path` on `world` ranks (rank 0); raises what
    DeepSpeed raises for a config it refuses."""
    config_module = consumer("deepspeed.runtime.config")
    data = json.loads(path.read_text(encoding="utf-8"))
    mpu = _model_parallel_mpu(data, world)
    comm = config_module.dist
    with (
        mock.patch.object(comm, "get_rank", return_value=0),
        mock.patch.object(comm, "get_world_size", return_value=world),
    ):
        return config_module.DeepSpeedConfig(data, mpu=mpu)


def layout_read(config: Any) -> dict[str, Any]:
    """The plan fields DeepSpeed understood from the config (names as in plan.json)."""
    return {
        "dp": int(config.world_size),
        "global_batch": config.train_batch_size,
        "mbs": config.train_micro_batch_size_per_gpu,
        "grad_accum": config.gradient_accumulation_steps,
        "precision": _precision(config),
    }


def buffers_read(config: Any) -> dict[str, int]:
    """DeepSpeed's ZeRO buffer sizes as its config class read them (names as in plan.json)."""
    zero = config.zero_config
    return {
        "ds_prefetch_bucket_size": zero.prefetch_bucket_size,
        "ds_max_live_parameters": zero.max_live_parameters,
        "ds_reduce_bucket_size": zero.reduce_bucket_size,
    }


def zero_read(config: Any) -> str:
    """DeepSpeed's ZeRO stage, as `zero-N`."""
    return f"zero-{int(config.zero_optimization_stage)}"


def _precision(config: Any) -> str:
    if config.bfloat16_config.enabled:
        return "bf16"
    return "fp16" if config.float16_config.enabled else "fp32"


def schedule_read(config: Any) -> dict[str, Any]:
    """The optimizer and LR scheduler DeepSpeed understood (DeepSpeedConfig's optimizer_name,
    optimizer_params, scheduler_name, scheduler_params, as engine.py builds them from)."""
    return {
        "optimizer": config.optimizer_name,
        **{f"optimizer.{k}": v for k, v in (config.optimizer_params or {}).items()},
        "scheduler": config.scheduler_name,
        **{f"scheduler.{k}": v for k, v in (config.scheduler_params or {}).items()},
    }


def scheduled_lrs(config: Any, at_steps: list[int]) -> list[float]:
    """The learning rate DeepSpeed's own scheduler class sets after each of `at_steps`, built as
    engine.py _scheduler_from_config does (getattr(lr_schedules, name)(optimizer, **params)) on
    a torch AdamW of one parameter with the config's optimizer params (FusedAdam needs a GPU)."""
    torch = consumer("torch")
    schedules = consumer("deepspeed.runtime.lr_schedules")
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], **config.optimizer_params)
    scheduler = getattr(schedules, config.scheduler_name)(optimizer, **config.scheduler_params)
    out = []
    for step in at_steps:
        scheduler.step(step)
        out.append(optimizer.param_groups[0]["lr"])
    return out
