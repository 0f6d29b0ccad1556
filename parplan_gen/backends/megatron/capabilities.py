"""Megatron-LM / Megatron-Core (templates/core_v0.16 beside this file: core_v0.16.1, the release
CI runs the files against, pyproject.toml's `consumers` extra): TP with sequence parallelism, PP
with 1F1B and interleaving, CP, EP folded over TP x CP x DP with its own expert-tensor parallelism
(parallel_state.initialize_model_parallel) and its all-to-all overlap
(--overlap-moe-expert-parallel-comm), the distributed optimizer for optimizer-state sharding
(ZeRO-1-like) and Megatron-FSDP (--use-megatron-fsdp, since core 0.14): zero_stage 2 / 3 on
Megatron are its --data-parallel-sharding-strategy optim_grads / optim_grads_params. Its `optim`
strategy shards what the distributed optimizer shards, so ZeRO-1 on Megatron stays the
distributed optimizer. Megatron-FSDP keeps fp32 main gradients: its plans are priced as
Megatron's (rules/cost/memory.yaml, train.backend) and its files are written for Megatron plans
only (`own_pricing`)."""

from __future__ import annotations

from parplan_gen.backends.capabilities import Capabilities
from parplan_gen.cost.layout import FUSED_CROSS_ENTROPY

MEGATRON = Capabilities(
    name="megatron",
    title="Megatron-LM",
    version="core_v0.16",
    optimizers=((0, False), (0, True), (2, False), (3, False)),
    tensor=True,
    pipeline=True,
    interleave=True,
    context=True,
    experts=True,
    sequence_parallel=True,
    recompute=("none", "selective", "full"),
    expert_tensor=True,
    own_pricing=((2, False), (3, False)),
    # --grad-reduce-in-bf16, --fp8-param-gather, --use-precision-aware-optimizer and
    # --cpu-offloading-num-layers (core_v0.16.1 megatron/training/arguments.py; rendered from
    # mapping.yaml beside this file).
    grad_reduce_dtypes=("default", "fp32", "bf16"),
    fp8_param_gather=True,
    precision_aware_optimizer=True,
    activation_offload=True,
    # --cross-entropy-loss-fusion [--cross-entropy-fusion-impl te] (core_v0.16.0
    # model_parallel_config.py cross_entropy_loss_fusion, cross_entropy_fusion_impl): plans write
    # Transformer Engine's, which holds and moves fewer bytes than Megatron-Core's own
    # (rules/cost/memory.yaml logits_bytes_per_vocab, pipeline.yaml loss_bytes_per_logit).
    cross_entropy_fusions=FUSED_CROSS_ENTROPY,
    # --overlap-grad-reduce switches DDP's and the distributed optimizer's bucketed reduction
    # (core_v0.16.1 megatron/core/distributed/distributed_data_parallel.py: without it one
    # bucket, reduced synchronously in finish_grad_sync). Megatron-FSDP's optim_grads and
    # optim_grads_params set overlap_grad_reduce themselves (megatron_fsdp/megatron_fsdp.py
    # MegatronFSDP.__init__: "must be overlapped when using sharding optimizer and gradients").
    overlap_switch=((0, False), (0, True)),
)
