"""Megatron-LM / Megatron-Core (templates/core_r0.13 and core_v0.16.1 beside this file): TP with
sequence parallelism, PP with 1F1B and interleaving, CP, EP folded over TP x CP x DP with its own
expert-tensor parallelism (parallel_state.initialize_model_parallel), the distributed optimizer
for optimizer-state sharding (ZeRO-1-like) and, from core 0.14 on (planned with core_v0.16.1),
Megatron-FSDP: zero_stage 2 / 3 on Megatron are its --data-parallel-sharding-strategy
optim_grads / optim_grads_params. Its `optim` strategy shards what the distributed optimizer
shards, so ZeRO-1 on Megatron stays the distributed optimizer. Megatron-FSDP keeps fp32 main
gradients: its plans are priced as Megatron's (rules/cost/memory.yaml, train.backend) and its
files are written for Megatron plans only (`own_pricing`)."""

from __future__ import annotations

from parplan_gen.backends.capabilities import Capabilities

FSDP_VERSION = "core_v0.16.1"  # Megatron-LM arguments.py: --use-megatron-fsdp since core 0.14
# --overlap-moe-expert-parallel-comm (ModelParallelConfig.overlap_moe_expert_parallel_comm): in
# core_v0.16.1, not in core_r0.13's arguments.py; rules/cost/moe.yaml prices it.
EP_OVERLAP_VERSION = "core_v0.16.1"

MEGATRON = Capabilities(
    name="megatron",
    title="Megatron-LM",
    version="core_r0.13",
    optimizers=((0, False), (0, True), (2, False), (3, False)),
    tensor=True,
    pipeline=True,
    interleave=True,
    context=True,
    experts=True,
    sequence_parallel=True,
    recompute=("none", "selective", "full"),
    expert_tensor=True,
    later=(((2, False), FSDP_VERSION), ((3, False), FSDP_VERSION)),
    later_when=(("moe_a2a_overlapped", EP_OVERLAP_VERSION),),
    own_pricing=((2, False), (3, False)),
    # --grad-reduce-in-bf16 and --fp8-param-gather (core_r0.13 and core_v0.16.1
    # megatron/training/arguments.py; rendered from mapping.yaml beside this file).
    grad_reduce_dtypes=("default", "fp32", "bf16"),
    fp8_param_gather=True,
)
