"""Hugging Face Accelerate 1.16 (templates/1.16 beside this file; read in the accelerate 1.16.0
wheel): `accelerate launch --config_file accelerate_config.yaml` with `distributed_type: FSDP`
and `fsdp_version: 2`, torch's FSDP2 (`fully_shard`: parameters, gradients and optimizer states
sharded over the data-parallel ranks, ZeRO-3-like) of a Hugging Face transformers model, x
tensor parallelism (the model's own `tp_plan`, its parallelism config's `tp_size`) x context
parallelism (torch's `context_parallel` over SDPA, `cp_size`), with each transformer layer
checkpointed or none (`fsdp_activation_checkpointing`). `constraints.yaml` beside this file holds
its refusals with their sources.

Not planned: pipeline parallelism, which Accelerate's FSDP2 path does not have (its
ParallelismConfig, parallelism_config.py, has dp_replicate, dp_shard, tp, cp and sp only);
expert parallelism (no size of its own in 1.16's ParallelismConfig); HSDP (dp_replicate_size x
dp_shard_size, both > 1), which a Layout cannot say (one dp, one ZeRO stage); plain DDP, which is
the `ddp` backend; Megatron-style sequence parallelism, which the transformers tp_plan does not
apply (its `sp_size` is DeepSpeed's Ulysses, not ring context parallelism).

Its FSDP2 is priced as its own (`own_pricing`): FSDP2 keeps fp32 shards as torchtitan's does,
but reduces gradients in the mixed-precision type (utils/dataclasses.py
FullyShardedDataParallelPlugin.set_mixed_precision: reduce_dtype = param_dtype) and runs a
transformers model (rules/cost/memory.yaml and sharding.yaml, `train.backend`), so its files are
written for plans priced on it only.
"""

from __future__ import annotations

from parplan_gen.backends.capabilities import Capabilities
from parplan_gen.inputs.defaults import ZERO_FULL

# fully_shard over dp_shard x cp: parameters, gradients and optimizer states
FSDP2 = (ZERO_FULL, False)

ACCELERATE = Capabilities(
    name="accelerate",
    title="Hugging Face Accelerate",
    version="1.16",
    optimizers=(FSDP2,),
    tensor=True,
    pipeline=False,
    interleave=False,
    context=True,
    experts=False,
    sequence_parallel=False,
    # utils/fsdp_utils.py fsdp2_apply_ac: checkpoint_wrapper around every layer the auto-wrap
    # policy wraps (fsdp_activation_checkpointing), or nothing: no selective recomputation.
    recompute=("none", "full"),
    own_pricing=(FSDP2,),
    # FSDP2's reduce_dtype is the mixed precision's own (dataclasses.py set_mixed_precision);
    # no key of the config file sets another.
    grad_reduce_dtypes=("default",),
    # fsdp_config.fsdp_reshard_after_forward (FullyShardedDataParallelPlugin.reshard_after_forward)
    fsdp_reshard=True,
)
