"""Feed a rendered torchtitan_run.sh to torchtitan 0.3.0's own ConfigManager and ParallelDims.

`ConfigManager().parse_args(args)` is what torchtitan.train runs on its command line: it loads
the config function named by --module/--config from the model's config_registry (or, for a
plan that writes parplan_torchtitan_config.py, from that file, imported by its name from the
plan's folder as torchtitan_run.sh puts it on PYTHONPATH), applies the tyro overrides and
validates the result (Trainer.Config.__post_init__, _validate_config). ParallelDims.from_config
then builds the mesh sizes for the world size (its _validate needs no GPU).
"""

from __future__ import annotations

import contextlib
import importlib
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

from consumer_support import consumer

H100 = (9, 0)  # CUDA compute capability (SM 9.0): the GPU the plans are made for


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


def torchtitan_reading(
    script: Path, gpus: int, capability: tuple[int, int] = H100
) -> TorchtitanReading:
    """Parse the script's arguments with torchtitan's ConfigManager; raise what torchtitan
    raises. `capability`: the CUDA compute capability of the plan's GPU."""
    manager = consumer("torchtitan.config.manager")
    dims = consumer("torchtitan.distributed.parallel_dims")
    float8 = consumer("torchtitan.components.quantization.float8")
    mx = consumer("torchtitan.components.quantization.mx")
    args = torchtitan_args(script)
    module = _value(args, "--module")

    # The float8 and MXFP8 converters check the GPU (SM 8.9 / 10.0 or later) when the config is
    # built; this machine has none, so it stands in for the plan's GPU.
    def gpu(major: int, minor: int) -> bool:
        return (major, minor) <= capability

    with (
        _on_path(script.parent, module),
        patch.object(float8, "has_cuda_capability", gpu),
        patch.object(mx, "has_cuda_capability", gpu),
    ):
        parsed = manager.ConfigManager().parse_args(args)
    built = dims.ParallelDims.from_config(parsed.parallelism, gpus)
    return TorchtitanReading(parsed, built, module, _value(args, "--config"))


@contextlib.contextmanager
def _on_path(folder: Path, module: str) -> Iterator[None]:
    """`folder` first on sys.path, as torchtitan_run.sh puts the plan's folder first on
    PYTHONPATH when it holds `module`'s file (`module` imported afresh, and forgotten after: each
    plan's folder has its own)."""
    if not (folder / f"{module}.py").is_file():
        yield
        return
    sys.path.insert(0, str(folder))
    sys.modules.pop(module, None)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.modules.pop(module, None)
        sys.path.remove(str(folder))


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def layout_read(reading: TorchtitanReading) -> dict[str, Any]:
    """The plan fields torchtitan's reading sets: degrees from ParallelDims, the micro-batch and
    the accumulation as trainer.py works them (accumulation = global / (local x dp); pp splits
    the local batch into micro-batches), the sequence, the recomputation and whether the loss
    is compiled (components/loss.py BaseLoss._maybe_compile: compile.enable with "loss" among
    compile.components)."""
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
        "loss_compiled": _loss_compiled(reading),
        "fsdp_reshard": par.fsdp_reshard_after_forward,  # default | never (always: not planned)
    }  # fmt: skip


def _loss_compiled(reading: TorchtitanReading) -> bool:
    compile_config = reading.parsed.compile
    return bool(compile_config.enable) and "loss" in compile_config.components


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


def float8_read(reading: TorchtitanReading) -> dict[str, Any]:
    """How torchtitan's parsed config builds the model's linear layers: the converted layers'
    class (Float8Linear, MXFP8Linear; None: none converted), the torchao Float8 recipe their
    config is (Float8LinearConfig.from_recipe_name of which recipe), whether FSDP all-gathers
    their weights in float8, whether the LM head stays 16-bit, whether the model compiles and
    whether its loss does (CompileConfig.components)."""
    quantization = consumer("torchtitan.components.quantization")
    linear = consumer("torchtitan.models.common.linear")
    torchao = consumer("torchao.float8.config")
    model = reading.parsed.model_spec.model
    kinds = {quantization.Float8Linear.Config: "Float8Linear"}
    kinds[quantization.MXFP8Linear.Config] = "MXFP8Linear"
    found = [(fqn, c) for fqn, c, _, _ in model.traverse(linear.Linear.Config)]
    converted = {kinds[type(c)] for _, c in found if type(c) in kinds}
    configs = [c._torchao_config for _, c in found if type(c) is quantization.Float8Linear.Config]
    recipes = {
        next(
            (r.value for r in torchao.Float8LinearRecipeName
             if torchao.Float8LinearConfig.from_recipe_name(r) == config),
            None,
        )
        for config in configs
    }  # fmt: skip
    return {
        "converted": converted.pop() if len(converted) == 1 else sorted(converted) or None,
        "recipe": recipes.pop() if len(recipes) == 1 else sorted(recipes) or None,
        "fsdp_float8_all_gather": any(c.enable_fsdp_float8_all_gather for c in configs),
        "lm_head_16bit": any(f == "lm_head" and type(c) is linear.Linear.Config for f, c in found),
        "compile": reading.parsed.compile.enable,
        "model_compiled": reading.parsed.compile.enable
        and "model" in reading.parsed.compile.components,
        "loss_compiled": _loss_compiled(reading),
    }
