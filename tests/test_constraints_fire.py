"""Every built-in constraint rule fires exactly at its bound: one layout on the wrong side of it
and its neighbour on the right side, both estimated through the Python API
(`parplan_gen.estimate`, the path of `parplan estimate` and `check`).

Each bound is the one the framework source the rule cites enforces, and the case names that
file. The wrong side is chosen where a plausible slip in the rule would let it through (the
context-parallel one: a sequence of 2·cp·k + cp tokens is a multiple of cp but not of 2·cp),
the right side where a stricter slip would refuse it. The rules are enumerated by id from the
loaded rule set, not from their files: a rule added without a case here fails
`test_every_built_in_constraint_has_a_case`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

import parplan_gen
from parplan_gen.cost.estimate import MemoryHeadroom
from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.cost.layout import LayoutError, build_layout
from parplan_gen.inputs.defaults import GIB
from parplan_gen.models.presets import load_preset
from parplan_gen.planning.constraints import Constraints, estimate_env
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.ruleset import RuleSet, load_rules

GPU = "h100"  # 8 GPUs a node, one NVLink domain each (parplan_gen/data/gpus.yaml)


@dataclass(frozen=True)
class Side:
    """One layout of a case: the model (a preset, with `changes` to its fields), the GPUs and
    the layout's fields as `parplan_gen.estimate` takes them."""

    layout: dict[str, Any]
    model: str = "llama-3-8b"
    gpus: int = 8
    changes: dict[str, Any] = field(default_factory=dict)
    architecture: str | None = None  # the GPU's, in place of the catalog's
    gpu: str = GPU


@dataclass(frozen=True)
class Case:
    rule: str
    backend: str | None
    fires: Side
    holds: Side


def side(model: str = "llama-3-8b", gpus: int = 8, **layout: Any) -> Side:
    return Side(layout, model, gpus)


# The small FP8 run most FP8 rules are judged on (its batch and length fit 8 H100s).
FP8 = {"precision": "fp8", "global_batch": 8, "seq_len": 4096}
FP8_8B = {"zero_stage": 3, **FP8}


CASES = [
    # ---- the shared rules, judged on Megatron-LM -----------------------------------------
    # Megatron-LM megatron/training/arguments.py validate_args: max_position_embeddings >=
    # seq_length. GPT-3's learned table has 2048 rows (Brown et al. 2020, Table 2.1).
    Case(
        "model.seq_len_within_learned_positions",
        "megatron",
        fires=side("gpt3-175b", tp=8, global_batch=8, seq_len=2049),
        holds=side("gpt3-175b", tp=8, global_batch=8, seq_len=2048),
    ),
    # megatron/core/transformer/transformer_config.py __post_init__: num_attention_heads %
    # tensor_model_parallel_size == 0. Llama 3 8B has 32 heads: tp 32 is the largest allowed.
    Case(
        "parallel.heads_divisible_by_tp",
        "megatron",
        fires=side(gpus=64, tp=64, global_batch=64, seq_len=4096),
        holds=side(gpus=64, tp=32, global_batch=64, seq_len=4096),
    ),
    # transformer_config.py __post_init__: num_query_groups % tensor_model_parallel_size == 0.
    # 8 key/value heads; tp 16 still divides the 32 query heads, so only this rule refuses it.
    Case(
        "parallel.kv_heads_divisible_by_tp",
        "megatron",
        fires=side(gpus=16, tp=16, global_batch=16, seq_len=4096),
        holds=side(gpus=16, tp=8, global_batch=16, seq_len=4096),
    ),
    # megatron/core/tensor_parallel/layers.py ColumnParallelLinear: divide(output_size, tp),
    # megatron/core/utils.py ensure_divisibility. The MLP is 14336 = 7 x 2048 wide: tp 7
    # divides it (the hidden 4096 does not, so a rule reading the hidden width would refuse
    # it), tp 6 does not (14336 = 6 x 2389 + 2). 168 GPUs: whole 8-GPU nodes for both.
    Case(
        "parallel.ffn_divisible_by_tp",
        "megatron",
        fires=side(gpus=168, tp=6, global_batch=168, seq_len=4096),
        holds=side(gpus=168, tp=7, global_batch=168, seq_len=4096),
    ),
    # megatron/core/parallel_state.py: a tp group is tp consecutive ranks, and torchrun numbers
    # the ranks node by node, so the group stays in one 8-GPU node only when tp divides 8.
    Case(
        "parallel.tp_within_node",
        "megatron",
        fires=side(gpus=16, tp=16, global_batch=16, seq_len=4096),
        holds=side(gpus=16, tp=8, global_batch=16, seq_len=4096),
    ),
    # The same rule below the node size: tp 3 <= 8 but puts ranks 6, 7, 8 in one group across
    # two nodes; tp 4 does not.
    Case(
        "parallel.tp_within_node",
        "megatron",
        fires=side(gpus=24, tp=3, global_batch=24, seq_len=4096),
        holds=side(gpus=24, tp=4, global_batch=24, seq_len=4096),
    ),
    # arguments.py validate_args: "Disabling sequence parallelism because tensor model
    # parallelism is disabled" (tensor_model_parallel_size == 1).
    Case(
        "parallel.sequence_parallel_needs_tp",
        "megatron",
        fires=side(tp=1, sequence_parallel=True, global_batch=8, seq_len=4096),
        holds=side(tp=2, sequence_parallel=True, global_batch=8, seq_len=4096),
    ),
    # A search limit, not a framework's (the rule cites Narayanan et al. 2021 Fig. 16): the
    # micro-batch at most mg_max_mbs = 16 sequences.
    Case(
        "batch.micro_batch_limit",
        "megatron",
        fires=side(mbs=17, global_batch=17 * 16 * 8, seq_len=2048),
        holds=side(mbs=16, global_batch=17 * 16 * 8, seq_len=2048),
    ),
    # arguments.py validate_args and transformer_config.py __post_init__ (first/last pipeline
    # stage layers, every stage a multiple of the virtual stages). 32 layers on pp 6:
    # vpp 2: middle stages 2 x ceil(32 / 12) = 6, the ends share 32 - 4 x 6 = 8 as 4 + 4, both
    #   multiples of 2 (the uneven split);
    # vpp 3: middle 3 x ceil(32 / 18) = 6, the ends 8 = 5 + 3, and 5 is no multiple of 3; nor
    #   do 34, 33 (the embedding and loss counted) divide by 18 virtual stages.
    Case(
        "pipeline.layers_split",
        "megatron",
        fires=side(gpus=48, tp=8, pp=6, vpp=3, global_batch=48, seq_len=4096),
        holds=side(gpus=48, tp=8, pp=6, vpp=2, global_batch=48, seq_len=4096),
    ),
    # arguments.py validate_args: with the interleaved schedule and P2P overlap (its default),
    # pipeline_model_parallel_size > 1.
    Case(
        "pipeline.interleave_needs_pp",
        "megatron",
        fires=side(pp=1, vpp=2, global_batch=16, seq_len=4096),
        holds=side(pp=2, vpp=2, global_batch=16, seq_len=4096),
    ),
    # megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving:
    # the micro-batch group (microbatch_group_size_per_vp_stage, default pp) must be <= M, and
    # M % group must be 0 or >= pp, so M is a multiple of pp = 4. M = 6 is a multiple of
    # pp / 2 but not of pp.
    Case(
        "pipeline.interleave_microbatches",
        "megatron",
        fires=side(pp=4, vpp=2, global_batch=2 * 6, seq_len=4096),
        holds=side(pp=4, vpp=2, global_batch=2 * 8, seq_len=4096),
    ),
    # arguments.py validate_args: seq_length % (context_parallel_size * 2) == 0 (each rank takes
    # two chunks of the sequence, one from each end, for the causal load balance). With cp 2,
    # 4098 = 2 x 2 x 1024 + 2 is a multiple of cp but not of 2 x cp.
    Case(
        "context.seq_divisible",
        "megatron",
        fires=side(cp=2, global_batch=8, seq_len=4098),
        holds=side(cp=2, global_batch=8, seq_len=4096),
    ),
    # arguments.py validate_args: "num_experts must be non None to use expert model
    # parallelism". The same layout on a dense model and on Mixtral 8x7B (8 experts).
    Case(
        "experts.need_moe",
        "megatron",
        fires=side("llama-3-8b", ep=2, global_batch=8, seq_len=4096),
        holds=side("mixtral-8x7b", ep=2, global_batch=8, seq_len=4096),
    ),
    # arguments.py validate_args: num_experts % expert_model_parallel_size == 0. Mixtral's 8
    # experts: ep 8 is the largest allowed.
    Case(
        "experts.divisible_by_ep",
        "megatron",
        fires=side("mixtral-8x7b", gpus=16, ep=16, global_batch=16, seq_len=4096),
        holds=side("mixtral-8x7b", gpus=16, ep=8, global_batch=16, seq_len=4096),
    ),
    # Rajbhandari et al. 2020 (ZeRO) Sec. 5: states are partitioned over the data-parallel
    # ranks, which with context parallelism are dp x cp (Megatron-Core parallel_state
    # get_data_parallel_group(with_context_parallel=True)): dp 1 with cp 2 still shards.
    Case(
        "zero.needs_data_parallel",
        "megatron",
        fires=side(tp=8, distributed_optimizer=True, global_batch=8, seq_len=4096),
        holds=side(tp=4, cp=2, distributed_optimizer=True, global_batch=8, seq_len=4096),
    ),
    # Megatron-LM core_v0.16.1 docs/user-guide/features/custom_fsdp.md: Megatron-FSDP is
    # compatible with TP, EP and CP, not with pipeline parallelism.
    Case(
        "megatron.fsdp_no_pipeline",
        "megatron",
        fires=side(pp=2, zero_stage=2, global_batch=8, seq_len=4096),
        holds=side(pp=1, zero_stage=2, global_batch=8, seq_len=4096),
    ),
    # custom_fsdp.md: BF16 and FP8 recipes only; the rule covers ZeRO-2 and up (Megatron-FSDP).
    Case(
        "megatron.fsdp_not_fp16",
        "megatron",
        fires=side(zero_stage=2, precision="fp16", global_batch=8, seq_len=4096),
        holds=side(zero_stage=1, precision="fp16", global_batch=8, seq_len=4096),
    ),
    # Megatron-LM arguments.py validate_args reads --grad-reduce-in-bf16 under `if args.bf16:`
    # only: an fp16 run reduces fp16 gradients. An FP8 run keeps --bf16, so it holds there (a
    # rule asking for precision bf16 would refuse it).
    Case(
        "megatron.grad_reduce_bf16_needs_bf16",
        "megatron",
        fires=side(grad_reduce_dtype="bf16", precision="fp16", global_batch=8, seq_len=4096),
        holds=side(grad_reduce_dtype="bf16", **FP8),
    ),
    # megatron/core/transformer/transformer_config.py __post_init__: "fp8_param must be used
    # together with fp8 mode." (arguments.py passes --fp8-param-gather as fp8_param).
    Case(
        "megatron.fp8_param_gather_needs_fp8",
        "megatron",
        fires=side(
            fp8_param_gather=True,
            distributed_optimizer=True,
            precision="bf16",
            global_batch=8,
            seq_len=4096,
        ),
        holds=side(
            fp8_param_gather=True,
            distributed_optimizer=True,
            **FP8,
        ),
    ),
    # arguments.py validate_args: "--fp8-param-gather only supported with distributed optimizer,
    # torch fsdp2, megatron fsdp, or inference mode".
    Case(
        "megatron.fp8_param_gather_needs_distributed_optimizer",
        "megatron",
        fires=side(fp8_param_gather=True, **FP8),
        holds=side(
            fp8_param_gather=True,
            distributed_optimizer=True,
            **FP8,
        ),
    ),
    # Megatron-LM runs --fp8-param-gather with Megatron-FSDP too; the rules price FP8 weights
    # held whole (memory.yaml held_weight_bytes), so ZeRO-2/3 on Megatron is refused with it,
    # the distributed optimizer (ZeRO-1-like) is not.
    Case(
        "megatron.fp8_param_gather_not_with_fsdp",
        "megatron",
        fires=side(fp8_param_gather=True, zero_stage=2, **FP8),
        holds=side(
            fp8_param_gather=True,
            distributed_optimizer=True,
            **FP8,
        ),
    ),
    # megatron/core/optimizer/optimizer_config.py OptimizerConfig.__post_init__:
    # "--use-precision-aware-optimizer only supported with distributed optimizer".
    Case(
        "megatron.precision_aware_optimizer_needs_distributed_optimizer",
        "megatron",
        fires=side(precision_aware_optimizer=True, global_batch=8, seq_len=4096),
        holds=side(
            precision_aware_optimizer=True, distributed_optimizer=True, global_batch=8, seq_len=4096
        ),
    ),
    # The rules price FusedAdam's bf16 states on the distributed optimizer's shards; Megatron-FSDP
    # (ZeRO-2/3 on Megatron) with it is refused.
    Case(
        "megatron.precision_aware_optimizer_not_with_fsdp",
        "megatron",
        fires=side(precision_aware_optimizer=True, zero_stage=3, global_batch=8, seq_len=4096),
        holds=side(
            precision_aware_optimizer=True, distributed_optimizer=True, global_batch=8, seq_len=4096
        ),
    ),
    # megatron/core/transformer/transformer_config.py __post_init__ (core_v0.16.0): offloading
    # fewer layers than the model has (Llama 3 8B: 32), without a pipeline or recomputation.
    Case(
        "megatron.offload_fewer_than_layers",
        "megatron",
        fires=side(offload_layers=32, global_batch=8, seq_len=4096),
        holds=side(offload_layers=31, global_batch=8, seq_len=4096),
    ),
    Case(
        "megatron.offload_no_pipeline",
        "megatron",
        fires=side(offload_layers=8, pp=2, global_batch=8, seq_len=4096),
        holds=side(offload_layers=8, global_batch=8, seq_len=4096),
    ),
    Case(
        "megatron.offload_no_recompute",
        "megatron",
        fires=side(offload_layers=8, recompute="full", global_batch=8, seq_len=4096),
        holds=side(offload_layers=8, global_batch=8, seq_len=4096),
    ),
    # The copies are priced over the host link of data/host_links.yaml, which gives none for
    # the B200 (its datasheet figure is not there) and PCIe Gen5's for the H100.
    Case(
        "megatron.offload_needs_host_link",
        "megatron",
        fires=Side({"offload_layers": 8, "global_batch": 8, "seq_len": 4096}, gpu="b200"),
        holds=side(offload_layers=8, global_batch=8, seq_len=4096),
    ),
    # ---- DeepSpeed v0.19.8 ---------------------------------------------------------------
    # deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: zero_optimization_stage() <
    # ZeroStageEnum.gradients (2).
    Case(
        "deepspeed.pipeline_zero_at_most_1",
        "deepspeed",
        fires=side(pp=2, zero_stage=2, global_batch=8, seq_len=4096),
        holds=side(pp=2, zero_stage=1, global_batch=8, seq_len=4096),
    ),
    # deepspeed/runtime/pipe/topology.py (the pipeline's model-parallel axis) and
    # runtime/engine.py _configure_tensor_parallel_states (AutoTP's own mesh): nothing joins
    # the two, so AutoTP runs with pp 1 only.
    Case(
        "deepspeed.autotp_no_pipeline",
        "deepspeed",
        fires=side(tp=2, pp=2, global_batch=8, seq_len=4096),
        holds=side(tp=2, pp=1, global_batch=8, seq_len=4096),
    ),
    # deepspeed/runtime/engine.py _configure_zero_optimizer: for ZeroStageEnum.weights (3) it
    # asserts not has_moe_layers.
    Case(
        "deepspeed.moe_zero_at_most_2",
        "deepspeed",
        fires=side("mixtral-8x7b", ep=2, zero_stage=3, global_batch=8, seq_len=4096),
        holds=side("mixtral-8x7b", ep=2, zero_stage=2, global_batch=8, seq_len=4096),
    ),
    # ---- torchtitan 0.3.0 ----------------------------------------------------------------
    # torchtitan/models/llama3/__init__.py: the 8B flavor has 32 layers (config_registry.py
    # llama3_8b builds it); one layer more is no config's model.
    Case(
        "torchtitan.has_config",
        "torchtitan",
        fires=Side(
            {"zero_stage": 3, "global_batch": 8, "seq_len": 4096}, changes={"num_layers": 33}
        ),
        holds=Side({"zero_stage": 3, "global_batch": 8, "seq_len": 4096}),
    ),
    # config/configs.py TrainingConfig.mixed_precision_param: bfloat16 or float32, no float16;
    # fp8 is a converter the plan's config function adds (llama3_8b has none).
    Case(
        "torchtitan.config_precision",
        "torchtitan",
        fires=side(zero_stage=3, precision="fp16", global_batch=8, seq_len=4096),
        holds=side(zero_stage=3, **FP8),
    ),
    # components/quantization/float8.py Float8LinearConverter: has_cuda_capability(8, 9) or
    # has_rocm_capability(9, 4); an H100's FP8 peak on an Ampere part (SM 8.0) is refused, on
    # Ada (SM 8.9, the bound) it is not.
    Case(
        "torchtitan.float8_gpu",
        "torchtitan",
        fires=Side(FP8_8B, architecture="ampere"),
        holds=Side(FP8_8B, architecture="ada"),
    ),
    # components/loss.py ChunkedLossWrapper _chunk_local: the local sequence (seq_len / cp) %
    # num_chunks (8) == 0. With cp 2, 4104 = 16 x 256 + 8 tokens: a multiple of 8 (and of
    # 2 x cp, Megatron's bound) but 2052 a rank is not.
    Case(
        "torchtitan.loss_chunks_divide_sequence",
        "torchtitan",
        fires=side(cp=2, zero_stage=3, global_batch=8, seq_len=4104),
        holds=side(cp=2, zero_stage=3, global_batch=8, seq_len=4096),
    ),
    # distributed/pipeline_parallel.py: stages = ceil((layers + 1 + 1) / layers_per_stage),
    # which must equal pp x vpp. 34 weighted layers on pp 4:
    # vpp 3: layers_per_stage ceil(34 / 12) = 3 -> ceil(34 / 3) = 12 stages = 4 x 3;
    # vpp 4: layers_per_stage ceil(34 / 16) = 3 -> 12 stages, not 16.
    Case(
        "torchtitan.virtual_stages",
        "torchtitan",
        fires=side(pp=4, vpp=4, zero_stage=3, global_batch=16, seq_len=4096),
        holds=side(pp=4, vpp=3, zero_stage=3, global_batch=16, seq_len=4096),
    ),
    # config/configs.py ParallelismConfig.expert_parallel_degree and
    # distributed/parallel_dims.py: ep divides dp_shard x cp x tp. Without sharding (ZeRO 0)
    # dp_shard is 1, so with tp 2 the bound is ep <= 2 among its divisors.
    Case(
        "torchtitan.ep_within_dense_mesh",
        "torchtitan",
        fires=side("mixtral-8x7b", tp=2, ep=4, global_batch=8, seq_len=4096),
        holds=side("mixtral-8x7b", tp=2, ep=2, global_batch=8, seq_len=4096),
    ),
    # distributed/fsdp.py get_fsdp_reshard_after_forward_policy: with pp the default keeps the
    # blocks gathered, which is what `never` says.
    Case(
        "torchtitan.reshard_never_is_pipeline_default",
        "torchtitan",
        fires=side(pp=2, zero_stage=3, fsdp_reshard="never", global_batch=64, seq_len=4096),
        holds=side(pp=1, zero_stage=3, fsdp_reshard="never", global_batch=64, seq_len=4096),
    ),
    # distributed/parallel_dims.py ParallelDims.fsdp_enabled (dp_shard_enabled or cp_enabled):
    # with cp > 1 the parameters are FSDP-sharded, never replicated.
    Case(
        "torchtitan.replicate_without_cp",
        "torchtitan",
        fires=side(cp=2, zero_stage=0, global_batch=8, seq_len=4096),
        holds=side(cp=1, zero_stage=0, global_batch=8, seq_len=4096),
    ),
    # ---- Hugging Face Accelerate 1.16.0 ---------------------------------------------------
    # parallelism_config.py ParallelismConfig._validate_accelerator: with FSDP2, dp_shard or cp
    # must be > 1. tp 8 on 8 GPUs leaves neither; tp 4 leaves dp_shard 2, the least that holds.
    Case(
        "accelerate.fsdp_shard_dimension",
        "accelerate",
        fires=side(tp=8, zero_stage=3, global_batch=8, seq_len=4096),
        holds=side(tp=4, zero_stage=3, global_batch=8, seq_len=4096),
    ),
    # accelerator.py fp8_backend: FP8 under Accelerate is torchao or Transformer Engine as the
    # run finds them installed, which parplan does not price; bf16 is planned.
    Case(
        "accelerate.fp8_not_planned",
        "accelerate",
        fires=side(zero_stage=3, **FP8),
        holds=side(zero_stage=3, precision="bf16", global_batch=8, seq_len=4096),
    ),
    # ---- op-graph models (ResNet-50; DeepSpeed / torchrun) -------------------------------
    # rules/cost/graph.yaml prices no pipeline schedule, sequence split or experts.
    Case(
        "graph.data_and_channel_parallel_only",
        "deepspeed",
        fires=side("resnet-50", pp=2, global_batch=512),
        holds=side("resnet-50", pp=1, global_batch=512),
    ),
    # Megatron-LM ColumnParallelLinear's divide() on the output channels: ResNet-50's Conv2d /
    # MatMul widths (64 to 2048 channels, 1000 classes) have greatest common divisor 8.
    Case(
        "graph.channels_divisible_by_tp",
        "deepspeed",
        fires=side("resnet-50", gpus=16, tp=16, global_batch=512),
        holds=side("resnet-50", gpus=16, tp=8, global_batch=512),
    ),
    # Korthikanti et al. 2022 Sec. 4.2.2: sequence parallelism splits a transformer's sequence.
    Case(
        "graph.no_sequence_parallel",
        "deepspeed",
        fires=side("resnet-50", tp=2, sequence_parallel=True, global_batch=512),
        holds=side("resnet-50", tp=2, sequence_parallel=False, global_batch=512),
    ),
    # Korthikanti et al. 2022 Sec. 5: selective recomputation is of attention scores.
    Case(
        "graph.recompute_all_or_nothing",
        "deepspeed",
        fires=side("resnet-50", recompute="selective", global_batch=512),
        holds=side("resnet-50", recompute="full", global_batch=512),
    ),
    # Megatron-LM's pretrain scripts train transformers only: shard with ZeRO instead.
    Case(
        "graph.deepspeed_only",
        "deepspeed",
        fires=side("resnet-50", distributed_optimizer=True, global_batch=512),
        holds=side("resnet-50", zero_stage=1, global_batch=512),
    ),
    # ---- memory (checked after the cost model) -------------------------------------------
    # Llama 3 70B's 70.6e9 parameters at 16 bytes each for weights, gradients and Adam (ZeRO
    # Sec. 3.1: 2 + 2 + 12) are 1.1 TB a replica: nothing fits on 80 GB with dp 8 alone; over
    # tp 8 x pp 8 they are 17.6 GB a GPU. The exact byte bound is the test below.
    Case(
        "memory.fits",
        "megatron",
        fires=side("llama-3-70b", gpus=8, global_batch=8, seq_len=4096),
        holds=side("llama-3-70b", gpus=64, tp=8, pp=8, global_batch=8, seq_len=4096),
    ),
    # The offloaded activations' pinned buffers within the host's memory per GPU: an 8-GPU H100
    # SXM server's 2 TB over 8 (gpus.yaml reference_node.host_memory_gb), 250 GB. Llama 3 70B at
    # 8 x 8,192 tokens a micro-batch: 79 layers offloaded pin ~1.4 TiB per GPU, 10 layers ~178 GiB.
    Case(
        "memory.offload_fits_host",
        "megatron",
        fires=side(
            "llama-3-70b", mbs=8, global_batch=64, seq_len=8192, zero_stage=3, offload_layers=79
        ),
        holds=side(
            "llama-3-70b", mbs=8, global_batch=64, seq_len=8192, zero_stage=3, offload_layers=10
        ),
    ),
]

# Rules whose wrong side no Layout can hold: the Layout refuses it first (cost/layout.py).
LAYOUT_REFUSES = {"batch.divisible"}


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def model_of(s: Side) -> Any:
    if not s.changes:
        return s.model
    spec = load_preset(s.model)
    return type(spec).model_validate({**spec.model_dump(), **s.changes})


def broken(rules: RuleSet, case: Case, s: Side) -> set[str]:
    """The ids of every rule the side's layout breaks on the case's backend."""
    cluster = cluster_from_flags(s.gpus, s.gpu)
    if s.architecture is not None:
        gpu = cluster.gpu.model_copy(update={"architecture": s.architecture})
        cluster = cluster.model_copy(update={"gpu": gpu})
    found = parplan_gen.estimate(model_of(s), cluster, s.layout, rules=rules, backend=case.backend)
    return {v.rule_id for v in found.violations}


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.rule}-{i}" for i, c in enumerate(CASES)]
)  # fmt: skip
def test_the_rule_fires_on_the_wrong_side_of_its_bound_only(rules: RuleSet, case: Case) -> None:
    assert case.rule in broken(rules, case, case.fires)
    assert case.rule not in broken(rules, case, case.holds)


def test_every_built_in_constraint_has_a_case(rules: RuleSet) -> None:
    built_in = {c.rule.id for c in rules.constraints}
    assert {c.rule for c in CASES} | LAYOUT_REFUSES == built_in


def test_batch_divisible_bound_where_the_layout_cannot_hold_it(rules: RuleSet) -> None:
    """Megatron-LM megatron/core/num_microbatches_calculator.py: global_batch_size %
    (micro_batch_size x data_parallel_size) == 0. With mbs 2 on dp 8, 520 = 16 x 32 + 8 is a
    multiple of dp but not of mbs x dp. A Layout never holds it (mbs x grad_accum x dp =
    global batch), so the API refuses it before any rule; the rule itself is checked on the
    names of a layout that exists, its batch changed."""
    cluster = {"gpus": 8, "gpu": GPU}
    with pytest.raises(LayoutError, match=r"global_batch\(520\) is not divisible by mbs\(2\)"):
        parplan_gen.estimate("llama-3-8b", cluster, {"mbs": 2, "global_batch": 520}, rules=rules)
    layout = build_layout(8, mbs=2, global_batch=512, seq_len=4096)
    env = Evaluator(rules, backend="megatron").env(
        load_preset("llama-3-8b"), cluster_from_flags(8, GPU), layout, flash_attention=True
    )
    constraints = Constraints(rules, backend="megatron")
    assert env["train.global_batch"] == 512
    assert "batch.divisible" not in {v.rule_id for v in constraints.check(env, "layout")}
    env["train.global_batch"] = 520
    assert "batch.divisible" in {v.rule_id for v in constraints.check(env, "layout")}


@pytest.mark.parametrize(("total", "headroom", "share", "fits"), [
    (80 * GIB, 0, 0.0, True),  # exactly the GPU's memory
    (80 * GIB + 1, 0, 0.0, False),  # one byte over
    (76 * GIB, 4 * GIB, 0.0, True),  # with `plan --headroom 4`: exactly the memory left
    (76 * GIB + 1, 4 * GIB, 0.0, False),
    # the default's kind, a share of the tensors (total less other's 8 GiB): 64 GiB / 8 kept
    (72 * GIB, 0, 0.125, True),
    (72 * GIB + 8, 0, 0.125, False),  # 8 bytes more, 1 more kept free
    (70 * GIB, 2 * GIB, 0.125, True),  # both: 70 + 2 + 62 / 8 = 79.75 GiB
    (71 * GIB, 2 * GIB, 0.125, False),  # 71 + 2 + 63 / 8 = 80.875 GiB
])  # fmt: skip
def test_memory_fits_bound_to_the_byte(
    rules: RuleSet, total: int, headroom: int, share: float, fits: bool
) -> None:
    """memory.fits: the estimate's total plus what the headroom keeps free (bytes plus a share
    of the tensors, the total less `other`) within the GPU's memory, here 80 GiB."""
    layout = build_layout(8, global_batch=8, seq_len=4096)
    env = Evaluator(rules, backend="megatron").env(
        load_preset("llama-3-8b"), cluster_from_flags(8, GPU), layout, flash_attention=True,
        memory_headroom=MemoryHeadroom(headroom, share),
    )  # fmt: skip
    env.update(
        estimate_env({"memory_total": total, "memory_other": 8 * GIB, "memory_capacity": 80 * GIB})
    )
    found = {v.rule_id for v in Constraints(rules, backend="megatron").check(env, "estimate")}
    assert ("memory.fits" not in found) is fits
