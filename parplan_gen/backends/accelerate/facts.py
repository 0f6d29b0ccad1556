"""The accelerate.* canonical facts of a plan (render/facts.py calls `accelerate_facts`): how
Accelerate 1.16 spells the layout in accelerate_config.yaml (mapping.yaml beside this file).

What Accelerate makes of them is read in the accelerate 1.16.0 wheel:
- `mixed_precision` is the run's 16-bit type: FSDP2's MixedPrecisionPolicy(param_dtype,
  reduce_dtype) are both that type (utils/dataclasses.py
  FullyShardedDataParallelPlugin.set_mixed_precision) over fp32 shards (utils/fsdp_utils.py
  fsdp2_prepare_model); an FP8 plan is refused (constraints.yaml beside this file), so its 16-bit
  type is never written;
- the parallelism config's sizes, dp_shard x tp x cp (dp_replicate 1), must multiply to
  num_processes (parallelism_config.py ParallelismConfig._validate_accelerator), which the
  Layout's dp x tp x cp = world size does; FSDP2 shards over dp_shard x cp (fsdp_dim_names);
- the cp rotation is named only with cp > 1 (TorchContextParallelConfig is built only then).
"""

from __future__ import annotations

from typing import Any

from parplan_gen.cost.layout import NEVER_RESHARD, SIXTEEN_BIT, Layout

FACT_NAMES = (
    "accelerate.mixed_precision",
    "accelerate.context_parallel",
    "accelerate.user_script",
    "accelerate.reshard_after_forward",
)


def accelerate_facts(layout: Layout) -> dict[str, Any]:
    """accelerate.* for `layout` (every key)."""
    return {
        # ClusterConfig.mixed_precision: "no", "fp16", "bf16" or "fp8" (utils PrecisionType)
        "accelerate.mixed_precision": SIXTEEN_BIT[layout.precision],
        "accelerate.context_parallel": layout.cp > 1,
        # fsdp_config.fsdp_reshard_after_forward: false where the layout keeps the units gathered
        "accelerate.reshard_after_forward": layout.fsdp_reshard != NEVER_RESHARD,
        # accelerate_launch.sh runs the user's training script (TRAIN_SCRIPT): the note saying what
        # it must do for the plan is shown for every plan
        "accelerate.user_script": True,
    }
