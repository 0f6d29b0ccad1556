"""Feed a rendered accelerate_config.yaml to Accelerate 1.16.0's own loader and launcher.

`accelerate launch --config_file FILE TRAIN_SCRIPT` (what accelerate_launch.sh runs) is
commands/launch.py launch_command: _validate_launch_command loads the file
(commands/config/config_args.py load_config_from_file: ClusterConfig.from_yaml_file, which
refuses a key it does not know) and turns its values into launch arguments; multi_gpu_launcher
then gives them to every rank as environment variables (utils/launch.py prepare_multi_gpu_env),
from which each rank's FullyShardedDataParallelPlugin (utils/dataclasses.py) and ParallelismConfig
(parallelism_config.py) are built, as Accelerator() builds them. This runs those steps but the
launch itself; the FSDP2 mixed-precision policy is the one AcceleratorState sets on the plugin
(state.py: fsdp_plugin.set_mixed_precision(mixed_precision)).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

from consumer_support import consumer


@dataclass(frozen=True)
class AccelerateReading:
    """What Accelerate understood: the ClusterConfig, the ranks' environment, and the plugin and
    parallelism config a rank builds from it."""

    config: Any  # accelerate.commands.config.config_args.ClusterConfig
    env: dict[str, str]
    plugin: Any  # FullyShardedDataParallelPlugin, its mixed precision set as AcceleratorState does
    parallelism: Any  # accelerate.ParallelismConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_reading(path: Path) -> AccelerateReading:
    """Load `path` and build what a rank of `accelerate launch --config_file path` builds; raise
    what Accelerate raises."""
    config_args = consumer("accelerate.commands.config.config_args")
    launch = consumer("accelerate.commands.launch")
    utils_launch = consumer("accelerate.utils.launch")
    dataclasses = consumer("accelerate.utils.dataclasses")
    parallelism = consumer("accelerate.parallelism_config")
    config = config_args.load_config_from_file(str(path))
    # accelerate_launch.sh's line, on this machine: the main process here, on a free port
    argv = ["--config_file", str(path), "--machine_rank", "0", "--main_process_ip", "127.0.0.1",
            "--main_process_port", str(_free_port()), "train.py"]  # fmt: skip
    args, _, _ = launch._validate_launch_command(launch.launch_command_parser().parse_args(argv))
    env = dict(utils_launch.prepare_multi_gpu_env(args))
    with patch.dict(os.environ, env):
        plugin = dataclasses.FullyShardedDataParallelPlugin()
        plugin.set_mixed_precision(env["ACCELERATE_MIXED_PRECISION"])
        sizes = parallelism.ParallelismConfig()
    return AccelerateReading(config, env, plugin, sizes)


def layout_read(reading: AccelerateReading) -> dict[str, Any]:
    """The plan fields Accelerate's reading sets: the sizes of its parallelism config (FSDP2 over
    dp_shard x cp), the world size it must multiply to (ParallelismConfig._validate_accelerator),
    the precision and the recomputation (fsdp2_apply_ac: every wrapped layer, or none)."""
    sizes, plugin = reading.parallelism, reading.plugin
    return {
        "dp": sizes.dp_replicate_size * sizes.dp_shard_size,
        "tp": sizes.tp_size,
        "cp": sizes.cp_size,
        "world_size": reading.config.num_processes,
        "precision": reading.env["ACCELERATE_MIXED_PRECISION"],
        "recompute": "full" if plugin.activation_checkpointing else "none",
        # FullyShardedDataParallelPlugin.reshard_after_forward: False keeps the units gathered
        "fsdp_reshard": "default" if plugin.reshard_after_forward else "never",
    }


def fsdp_read(reading: AccelerateReading) -> dict[str, Any]:
    """How its FSDP2 runs: the version, resharding after forward (ZeRO-3), the wrap policy, the
    types it gathers parameters and reduces gradients in, offload, and the cp rotation."""
    plugin, torch = reading.plugin, consumer("torch")
    policy = plugin.mixed_precision_policy
    names = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    return {
        "fsdp_version": plugin.fsdp_version,
        "reshard_after_forward": plugin.reshard_after_forward,
        "wrap": getattr(plugin.auto_wrap_policy, "__name__", None),
        "param_dtype": names[policy.param_dtype],
        "reduce_dtype": names[policy.reduce_dtype],
        "offload": type(plugin.cpu_offload).__name__,
        "cp_comm_strategy": None
        if reading.parallelism.cp_handler is None
        else reading.parallelism.cp_handler.cp_comm_strategy,
    }
