"""torchtitan 0.3 (templates/0.3 beside this file; read in the torchtitan 0.3.0 wheel): FSDP2
over the data-parallel ranks (ZeRO-3-like: parameters, gradients and optimizer states sharded),
or plain DDP when nothing else is parallel, x tensor parallelism (with its SequenceParallel,
async TP under torch.compile) x pipeline parallelism (1F1B, Interleaved1F1B with several stages
per rank) x context parallelism x expert parallelism, float8 linears and activation checkpointing
none / selective / full. Unlike DeepSpeed and Megatron-LM it runs full sharding together with
pp and cp. `constraints.yaml` beside this file holds its refusals with their sources.

Not planned yet: HSDP (data_parallel_replicate_degree x data_parallel_shard_degree, both > 1),
which a Layout cannot say (it has one dp and one ZeRO stage); ZeRO-1/2-style partial sharding,
which torchtitan does not have. No FP8 parameters (`fp8_param_gather`, left False): 0.3's
Float8LinearConverter.Config (components/quantization/float8.py) has no float8 all-gather for
FSDP, and torchao's (enable_fsdp_float8_all_gather) needs tensorwise scaling, which its
recipe_name cannot name.
"""

from __future__ import annotations

from parplan_gen.backends.capabilities import Capabilities

TORCHTITAN = Capabilities(
    name="torchtitan",
    title="torchtitan",
    version="0.3",
    # ZeRO-3 is FSDP2 (fully_shard over dp_shard); 0 is DDP (data_parallel_replicate_degree).
    optimizers=((3, False), (0, False)),
    tensor=True,
    pipeline=True,
    interleave=True,
    context=True,
    experts=True,
    sequence_parallel=True,
    recompute=("none", "selective", "full"),
    # config/configs.py CompileConfig.components; components/loss.py BaseLoss._maybe_compile
    compiled_loss=True,
    # config/configs.py ParallelismConfig.fsdp_reshard_after_forward; distributed/fsdp.py
    fsdp_reshard=True,
)
