"""The megatron.* canonical facts of a plan (render/facts.py calls `megatron_facts`): how
Megatron-LM spells a transformer and its layout in arguments (mapping.yaml beside this file),
each by Megatron-LM's own rules (its CUDA_DEVICE_MAX_CONNECTIONS assertion, validate_args'
defaults), with its source in a comment. What the planner and the cost model decided is read
from its one home: the pipeline split (models/pipeline_split.py, which the constraint
pipeline.layers_split calls), the learned-position limit (ModelSpec.positions_cover, read by the
constraint model.seq_len_within_learned_positions), and what the plan's rules decided for
Megatron-LM's files (plan.json's `decisions`: the optimizer sharding, the TP and EP overlaps).
An op-graph model has no Megatron-LM spelling: every megatron.* is None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from itertools import groupby
from typing import TYPE_CHECKING, Any

from parplan_gen.backends.megatron.model_from_script import NULL_EOD_TOKENS
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import (
    NO_CROSS_ENTROPY_FUSION,
    Layout,
    cross_entropy_value,
    fp8_recipe,
)
from parplan_gen.models.any_model import transformer_of
from parplan_gen.models.kind import TrainedModel
from parplan_gen.models.pipeline_split import PipelineSplit, pipeline_split
from parplan_gen.planning.decisions import BackendDecisions
from parplan_gen.render.checks import RenderError
from parplan_gen.render.mapping_schema import MappingFile

if TYPE_CHECKING:
    from parplan_gen.models.transformer import ModelSpec  # what the megatron.* facts read

# ModelSpec literals -> Megatron-LM argument values (arguments.py choices).
MEGATRON_NORM = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
MEGATRON_POSITION = {"learned": "learned_absolute", "rope": "rope", "alibi": "none"}
MEGATRON_ACTIVATION_FLAGS = {"swiglu": "swiglu", "squared_relu": "squared_relu", "gelu": None}
# Megatron-FSDP's strategy for a Megatron plan's ZeRO stage (Megatron-LM core_v0.16.1
# arguments.py --data-parallel-sharding-strategy choices).
FSDP_STRATEGIES = {2: "optim_grads", 3: "optim_grads_params"}


@dataclass(frozen=True)
class MegatronSpelling:
    """How a transformer plan is spelled in Megatron-LM arguments (the keys megatron.<field>),
    each by Megatron-LM's own rules. An op-graph model has none: for it every key is None."""

    # model shape
    ffn_hidden_size: int | None
    max_position_embeddings: int
    position_embedding_type: str
    normalization: str
    swiglu: bool
    squared_relu: bool
    unsupported_mlp: bool
    untied: bool
    disable_bias_linear: bool
    add_qkv_bias: bool
    shared_expert_size: int | None
    mock_vocab_size: int  # --vocab-size of the mock data's NullTokenizer (model_from_script)
    moe_layer_pattern: str | None  # None: every layer is MoE (or none is)
    grouped_gemm: bool
    alibi: bool
    rope: bool
    parallel_block: bool
    sliding_window: bool
    # parallelism
    first_stage_layers: int | None  # None: every pipeline stage holds as many layers
    last_stage_layers: int | None
    account_embedding: bool  # the embedding counts as a layer of the pipeline split
    account_loss: bool  # the loss counts as a layer of the pipeline split
    layers_per_virtual_stage: int | None
    virtual_stages_per_rank: int | None
    expert_tensor_parallel_size: int | None  # None: the experts' tensor parallelism is tp
    distributed_optimizer: bool
    overlap_param_gather: bool
    fsdp: bool  # Megatron-FSDP (ZeRO-2/3 of a plan priced on Megatron)
    fsdp_strategy: str | None  # its --data-parallel-sharding-strategy; None: off
    one_cuda_connection: bool
    fsdp_many_connections: bool  # CUDA_DEVICE_MAX_CONNECTIONS left unset for Megatron-FSDP
    tp_comm_overlap: bool  # --tp-comm-overlap: the cost model priced the TP traffic overlapped
    ub_skip_multicast: bool  # UB_SKIPMC=1: the TP overlap's userbuffers without CUDA multicast
    fp8_recipe: str | None  # --fp8-recipe for the GPU generation; None: not an FP8 plan
    moe_a2a_overlap: bool  # --overlap-moe-expert-parallel-comm: the cost model priced it
    grad_reduce_in_bf16: bool  # --grad-reduce-in-bf16: the layout reduces bf16 gradients
    # --cross-entropy-fusion-impl; None: no --cross-entropy-loss-fusion
    cross_entropy_fusion: str | None

    def facts(self) -> dict[str, Any]:
        return {f"megatron.{k}": v for k, v in asdict(self).items()}

    @classmethod
    def absent(cls) -> dict[str, None]:
        """The keys of a plan that Megatron-LM does not train, each None."""
        return {f"megatron.{f.name}": None for f in fields(cls)}


def megatron_facts(
    spec: TrainedModel,
    layout: Layout,
    cluster: Cluster,
    mapping: MappingFile,
    known: dict[str, Any],
    *,
    fsdp: bool,
    decided: BackendDecisions | None,
) -> dict[str, Any]:
    """megatron.*: for a transformer, its spelling; an op-graph model has none (all None).
    `decided`: what the plan's rules decided for Megatron-LM's files (None where it does not
    run the layout: its files are not written, and nothing was decided)."""
    transformer = transformer_of(spec)  # Megatron-LM trains transformers only
    if "megatron" not in spec.backends or transformer is None:
        return MegatronSpelling.absent()
    shape = _megatron_shape(transformer, layout, known)
    parallel = _megatron_parallel(
        transformer, layout, cluster, mapping, known, fsdp=fsdp, decided=decided
    )
    return MegatronSpelling(**shape, **parallel).facts()


def _megatron_shape(spec: ModelSpec, layout: Layout, known: dict[str, Any]) -> dict[str, Any]:
    """How the model's shape is spelled in Megatron-LM arguments."""
    shared = spec.num_shared_experts * spec.shared_expert_ffn_hidden_size
    return {
        "ffn_hidden_size": spec.ffn_hidden_size or None,
        "max_position_embeddings": _max_positions(spec, layout.seq_len),
        "position_embedding_type": MEGATRON_POSITION[spec.position_embedding],
        "normalization": MEGATRON_NORM[spec.norm],
        "swiglu": spec.mlp_kind == "swiglu",
        "squared_relu": spec.mlp_kind == "squared_relu",
        "unsupported_mlp": spec.mlp_kind not in MEGATRON_ACTIVATION_FLAGS,
        "untied": not spec.tied_embeddings,
        "disable_bias_linear": not spec.mlp_bias,
        "add_qkv_bias": spec.qkv_bias and not spec.mlp_bias,
        "shared_expert_size": shared if spec.is_moe and shared else None,
        # NullTokenizer's size is --vocab-size plus its end-of-document token: one less gives
        # the embedding the model's rows (padded as the priced model is).
        "mock_vocab_size": spec.vocab_size - NULL_EOD_TOKENS,
        "moe_layer_pattern": _moe_pattern(spec),
        # validate_args: grouped GEMM needs bf16; it pays off with several experts per rank.
        "grouped_gemm": spec.is_moe and known["train.bf16"] and spec.num_experts // layout.ep > 1,
        "alibi": spec.position_embedding == "alibi",
        "rope": spec.position_embedding == "rope",
        "parallel_block": spec.parallel_attn_mlp,
        "sliding_window": spec.sliding_window is not None,
    }


def _megatron_parallel(
    spec: ModelSpec,
    layout: Layout,
    cluster: Cluster,
    mapping: MappingFile,
    known: dict[str, Any],
    *,
    fsdp: bool,
    decided: BackendDecisions | None,
) -> dict[str, Any]:
    """How the layout is spelled in Megatron-LM arguments, by its validate_args rules."""
    split = _stage_split(spec, layout)
    uneven, interleaved = split.uneven, layout.vpp > 1
    # Optimizer states sharded over dp, as the cost model counts them (written only for a
    # layout Megatron-LM runs, plan_files.backend_runs: ZeRO 0 with the distributed optimizer,
    # or Megatron-FSDP, which wants --use-distributed-optimizer as well: its user guide).
    dist_opt = decided is not None and decided.optimizer_sharded
    exempt = mapping.nccl.one_connection_exempt_architectures
    one_queue = (layout.tp > 1 or layout.cp > 1) and cluster.gpu.architecture not in exempt
    strategy = FSDP_STRATEGIES.get(layout.zero_stage) if fsdp else None
    fsdp = strategy is not None
    tp_overlap = decided is not None and decided.tp_comm_overlap
    fusion = cross_entropy_value(layout.cross_entropy_fusion, "megatron")
    return {
        "first_stage_layers": split.first if uneven else None,
        "last_stage_layers": split.last if uneven else None,
        "account_embedding": split.embedding,
        "account_loss": split.loss,
        # Uneven stages take the virtual stages per rank; the others the layers per virtual
        # stage, of the stage's share with the embedding/loss counted (arguments.py).
        "layers_per_virtual_stage": split.share // layout.vpp
        if interleaved and not uneven
        else None,
        "virtual_stages_per_rank": layout.vpp if interleaved and uneven else None,
        # arguments.py validate_args: --expert-tensor-parallel-size defaults to tp.
        "expert_tensor_parallel_size": layout.etp
        if spec.is_moe and layout.etp != layout.tp
        else None,
        "distributed_optimizer": dist_opt,
        # --overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce.
        "overlap_param_gather": dist_opt and bool(known["plan.overlap_grad_reduce"]),
        "fsdp": fsdp,
        "fsdp_strategy": strategy,
        # CUDA_DEVICE_MAX_CONNECTIONS=1 is asserted for TP/CP > 1 before Blackwell, unless
        # Megatron-FSDP is on: it asserts the opposite (!= 1) and core_v0.16.1 then only warns
        # about TP/CP (arguments.py validate_args).
        "one_cuda_connection": one_queue and not fsdp,
        "fsdp_many_connections": one_queue and fsdp,
        # What rules/cost/time.yaml tp_comm_overlapped priced (it needs sequence parallelism).
        "tp_comm_overlap": tp_overlap,
        # Transformer Engine's initialize_ub (pytorch/module/base.py) raises without CUDA
        # multicast unless UB_SKIPMC=1 (CUDA IPC instead). Multicast objects need compute
        # capability 9.0 (TE common/comm_gemm_overlap/comm_gemm_overlap.h
        # device_supports_multicast) and an NVSwitch: NVLS's condition.
        "ub_skip_multicast": tp_overlap and not known["cluster.nvls"],
        # --fp8-recipe: the recipe the cost model priced (cost/layout.py fp8_recipe).
        "fp8_recipe": fp8_recipe(cluster.gpu.architecture, "megatron")
        if layout.precision == "fp8"
        else None,
        "moe_a2a_overlap": decided is not None and decided.ep_a2a_overlap,
        # --grad-reduce-in-bf16 (arguments.py validate_args, under --bf16: main gradients kept
        # and reduced in bf16), as the layout's gradients were priced (rules/cost/memory.yaml
        # grad_reduce_bytes); the default and fp32 are Megatron-LM's fp32 main gradients.
        "grad_reduce_in_bf16": layout.grad_reduce_dtype == "bf16",
        # --cross-entropy-loss-fusion --cross-entropy-fusion-impl: the loss kernel priced
        # (rules/cost/pipeline.yaml loss_bytes_per_logit; not named: the one plans write).
        "cross_entropy_fusion": None if fusion == NO_CROSS_ENTROPY_FUSION else fusion,
    }


def _stage_split(spec: ModelSpec, layout: Layout) -> PipelineSplit:
    """How the layers sit on the pipeline stages: the split the constraint
    `pipeline.layers_split` checks (models/pipeline_split.py, its one home)."""
    try:
        return pipeline_split(spec.num_layers, layout.pp, layout.vpp)
    except ValueError as exc:
        raise RenderError(f"{exc} (constraint pipeline.layers_split)") from None


def _max_positions(spec: ModelSpec, seq_len: int) -> int:
    """Megatron asserts max_position_embeddings >= seq_length; a learned table cannot grow."""
    if not spec.positions_cover(seq_len):  # the constraint model.seq_len_within_learned_positions
        raise RenderError(
            f"seq_len ({seq_len}) exceeds the learned position table of {spec.name} "
            f"({spec.max_position_embeddings} positions)"
        )
    return max(spec.max_position_embeddings, seq_len)


def _moe_pattern(spec: ModelSpec) -> str | None:
    """--moe-layer-freq as Megatron's list expression, e.g. `([0]*3+[1]*58)`; None: every layer."""
    mask = spec.moe_layer_mask
    if not spec.is_moe or all(mask):
        return None
    runs = [f"[{int(moe)}]*{len(list(group))}" for moe, group in groupby(mask)]
    return "(" + "+".join(runs) + ")"
