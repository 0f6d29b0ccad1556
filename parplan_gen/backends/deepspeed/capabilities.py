"""DeepSpeed (templates/0.19 beside this file; constraints and mapping read in v0.19.8, the
release CI runs the files against: pyproject.toml's `consumers` extra): ZeRO 0-3, AutoTP training
(`tensor_parallel.autotp_size`, with ZeRO-3 too since AutoTP + ZeRO-3 trains), DeepSpeed-MoE (not
with ZeRO-3) and the pipeline engine (ZeRO <= 1). No Megatron-style sequence parallelism, no ring context
parallelism and no interleaved pipeline schedule; `constraints.yaml` beside this file holds the
refusals with their sources. Ulysses sequence parallelism (`sequence_parallel_size`, a ds_config
key from v0.17.0) and ZeRO-Offload/Infinity are not planned: docs/backends.md says why."""

from __future__ import annotations

from parplan_gen.backends.capabilities import Capabilities

DEEPSPEED = Capabilities(
    name="deepspeed",
    title="DeepSpeed",
    version="0.19",
    optimizers=((0, False), (1, False), (2, False), (3, False)),
    tensor=True,
    pipeline=True,
    interleave=False,
    context=False,
    experts=True,
    sequence_parallel=False,
    recompute=("none", "selective", "full"),
    # ds_config.json communication_data_type (runtime/config.py get_communication_data_type:
    # fp16, bf16 or fp32), written from plan.json's decisions (planning/decisions.py).
    grad_reduce_dtypes=("default", "fp32", "bf16"),
    # zero_optimization.stage3_prefetch_bucket_size, stage3_max_live_parameters,
    # reduce_bucket_size (runtime/zero/config.py DeepSpeedZeroConfig)
    zero3_buffers=True,
    # zero_optimization.overlap_comm (runtime/zero/stage_1_and_2.py reduction_stream, stage3.py
    # reduce_and_partition_stream, parameter_offload.py's all-gather stream: the default stream
    # without it). ZeRO-0 reduces after the backward whatever it says (engine.py
    # allreduce_gradients).
    overlap_switch=((1, False), (2, False), (3, False)),
)
