"""Megatron-LM / Megatron-Core (templates/megatron/core_r0.13): TP with sequence parallelism,
PP with 1F1B and interleaving, CP, EP folded over TP x CP x DP with its own expert-tensor
parallelism (parallel_state.initialize_model_parallel), and the distributed optimizer for
optimizer-state sharding (ZeRO-1-like). It has no ZeRO-2/3 style sharding outside Megatron-FSDP, which
parplan does not plan yet: `rules/constraints/megatron.yaml` refuses those layouts."""

from __future__ import annotations

from parplan_gen.planning.backends.capabilities import Capabilities

MEGATRON = Capabilities(
    name="megatron",
    title="Megatron-LM",
    version="core_r0.13",
    optimizers=((0, False), (0, True)),
    tensor=True,
    pipeline=True,
    interleave=True,
    context=True,
    experts=True,
    sequence_parallel=True,
    recompute=("none", "selective", "full"),
    expert_tensor=True,
)
