"""The one declaration of what a formula may read and call.

The formula compiler, `docs/rules.md` (checked by a test) and `parplan rules` all read this
module. A name is either fixed (`graph.depth`) or a family with a free last segment
(`graph.op_count.<Op>`). Each name belongs to a namespace (its first segment); each place a
formula can appear (a *context*) allows some namespaces.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from parplan_gen.models import pipeline_split as split
from parplan_gen.models.kind import MODEL_KINDS, ModelKind
from parplan_gen.rules.cluster_names import CLUSTER_NAMES
from parplan_gen.rules.request_names import PLAN_REQUEST_NAMES
from parplan_gen.rules.units import SIZE_CONSTANTS
from parplan_gen.rules.vocabulary_graph import GRAPH_MODEL_NAMES

ValueKind = Literal["number", "bool", "str"]


@dataclass(frozen=True)
class Name:
    """A name a formula may read."""

    name: str  # dotted; a family ends with ".<...>", e.g. "graph.op_count.<Op>"
    kind: ValueKind
    unit: str
    doc: str
    models: tuple[ModelKind, ...] = MODEL_KINDS  # the kinds of model that give it a value

    @property
    def namespace(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def family_prefix(self) -> str | None:
        """For a family (`graph.op_count.<Op>`), the prefix before the free segment."""
        head, _, last = self.name.rpartition(".")
        return head + "." if last.startswith("<") else None


@dataclass(frozen=True)
class Function:
    """A function a formula may call."""

    name: str
    signature: str
    min_args: int
    max_args: int | None  # None: any number
    returns: ValueKind
    doc: str
    impl: Callable[..., object]


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(x, hi))


def interp_log(x: float, *points: float) -> float:
    """The curve through `points` (x1, y1, x2, y2, ...; x ascending, > 0) at `x`: linear in
    log(x) between two points, the end value beyond the ends."""
    if len(points) < 4 or len(points) % 2:
        raise ValueError(
            f"interp_log() takes x and two or more (x, y) pairs ({len(points)} numbers after x)"
        )
    xs, ys = points[0::2], points[1::2]
    if xs[0] <= 0 or any(b <= a for a, b in itertools.pairwise(xs)):
        raise ValueError(f"interp_log() points need x > 0, ascending: {list(xs)}")
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = next(i for i in range(1, len(xs)) if x <= xs[i])
    t = (math.log(x) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
    return ys[i - 1] + t * (ys[i] - ys[i - 1])


_SHARED_NAMES: tuple[Name, ...] = (
    Name("graph.node_count", "number", "nodes", "Number of nodes in the model graph."),
    Name("graph.edge_count", "number", "edges", "Number of edges in the model graph."),
    Name(
        "graph.depth",
        "number",
        "nodes",
        "Nodes on the longest path (the critical path); 0 for an empty graph.",
    ),
    Name(
        "graph.op_count.<Op>",
        "number",
        "nodes",
        "Number of nodes whose op is <Op> (canonical name, e.g. `graph.op_count.MatMul`); 0 when none.",
    ),
    Name(
        "graph.sum.<attr>",
        "number",
        "unit of the attribute",
        "Sum of the numeric node attribute <attr> over all nodes (e.g. `graph.sum.params`); 0 when no node has it.",
    ),
    Name(
        "node.index", "number", "position", "0-based position of the node in the file's node list."
    ),
    Name("node.in_degree", "number", "edges", "Number of edges into the node."),
    Name("node.out_degree", "number", "edges", "Number of edges out of the node."),
    Name(
        "node.level",
        "number",
        "nodes",
        "Nodes on the longest path from a source up to and including this node (1 for a source).",
    ),
    Name(
        "node.attr.<attr>",
        "number",
        "unit of the attribute",
        "The node's numeric attribute <attr> (e.g. `node.attr.flops`); an error when the node lacks it, so guard with `node.has.<attr>`.",
    ),
    Name("node.has.<attr>", "bool", "-", "True when the node has a numeric attribute <attr>."),
    Name(
        "cluster.devices",
        "number",
        "devices",
        "Device count given to `parplan propose --devices N`.",
    ),
    # --- model.*: the model being trained ------------------------------------------------------
    Name("model.params", "number", "parameters", "All parameters, as stored."),
)

# model.* names of a transformer (from its ModelSpec).
_TRANSFORMER_NAMES: tuple[Name, ...] = (
    Name("model.layers", "number", "layers", "Transformer layers (L)."),
    Name("model.hidden", "number", "elements", "Hidden size (h)."),
    Name("model.heads", "number", "heads", "Attention (query) heads (a)."),
    Name("model.kv_heads", "number", "heads", "Key/value heads (GQA query groups)."),
    Name("model.head_dim", "number", "elements", "Width of one attention head."),
    Name("model.ffn", "number", "elements", "Inner width of the dense MLP layers."),
    Name("model.vocab", "number", "tokens", "Vocabulary size (V)."),
    Name("model.experts", "number", "experts", "Routed experts per MoE layer (0: dense model)."),
    Name("model.experts_per_token", "number", "experts", "Routed experts each token visits."),
    Name("model.moe_layers", "number", "layers", "Layers whose MLP is a mixture of experts."),
    Name("model.moe", "bool", "-", "True for a mixture-of-experts model."),
    Name("model.moe_ffn", "number", "elements", "Inner width of one routed expert (0: dense)."),
    Name(
        "model.mtp_layers",
        "number",
        "layers",
        "Multi-token-prediction modules the config asks for (DeepSeek-V3: 1; others 0).",
    ),
    Name(
        "model.max_positions",
        "number",
        "tokens",
        "max_position_embeddings: rows of a learned position table, or the longest context.",
    ),
    Name(
        "model.learned_positions",
        "bool",
        "-",
        "True when positions are a learned table (it cannot serve longer sequences).",
    ),
    Name("model.positions_cover_seq_len", "bool", "-", "The positions serve train.seq_len."),
    Name("model.gated_mlp", "bool", "-", "True for a gated MLP (SwiGLU/GeGLU: three matrices)."),
    Name("model.params_embedding", "number", "parameters", "Input embedding (and position table)."),
    Name("model.params_output", "number", "parameters", "LM head (0 when tied to the embedding)."),
    Name("model.params_experts", "number", "parameters", "Routed-expert parameters, all layers."),
    Name(
        "model.flops_per_token",
        "number",
        "FLOP/token",
        "Training model FLOPs per token (forward + backward, no recomputation) at train.seq_len, "
        "the whole s^2 attention scores counted (PaLM's count; Megatron-LM counts their causal "
        "half since core_v0.12); Korthikanti et al. 2022 Eq. 7 for GPT.",
    ),
    Name(
        "model.attention_flops_per_token",
        "number",
        "FLOP/token",
        "Forward FLOPs per token of the attention scores and values (the s-dependent part), "
        "the whole s x s score matrix (Megatron-LM's count before core_v0.12).",
    ),
    Name(
        "model.causal_attention_flops_per_token",
        "number",
        "FLOP/token",
        "Forward FLOPs per token of the attention scores and values over the unmasked "
        "(causal) pairs only: about half of model.attention_flops_per_token, the work a flash "
        "attention kernel does (it skips the masked tiles).",
    ),
    Name("model.lm_head_flops_per_token", "number", "FLOP/token", "LM head forward FLOPs (2hV)."),
    Name("model.expert_flops_per_token", "number", "FLOP/token", "Routed experts' training FLOPs."),
    Name(
        "model.act_layer_bytes",
        "number",
        "bytes/token",
        "Activation bytes per token of one layer, no parallelism, no recomputation, attention "
        "scores stored (Korthikanti et al. 2022 Eq. 1: 34h + 5as for GPT); mean over layers.",
    ),
    Name(
        "model.act_scores_bytes",
        "number",
        "bytes/token",
        "The attention-score part of model.act_layer_bytes (5as); flash attention and "
        "selective recomputation do not store it.",
    ),
    Name(
        "model.act_linear_inputs_replicated",
        "number",
        "values/token",
        "Values per token of one layer that model.act_layer_bytes keeps as a linear layer's "
        "input and tensor parallelism replicates without sequence parallelism: the norm "
        "outputs into QKV and a dense FC1 (h each), MLA's down-projection outputs; mean over "
        "layers.",
    ),
    Name(
        "model.act_linear_inputs_split",
        "number",
        "values/token",
        "Values per token of one layer that model.act_layer_bytes keeps as a linear layer's "
        "input and tensor parallelism splits: the output projection's (heads x value width), "
        "FC2's (ffn), the routed experts' (k x (h + expert width)) and shared experts'; mean "
        "over layers.",
    ),
)


# The rest: the cluster, the request, the layout, an estimate's figures, proposal descriptions.
_RUN_NAMES: tuple[Name, ...] = (
    *(Name(*f) for f in CLUSTER_NAMES),  # type: ignore[arg-type]
    # --- train.*: what was asked for ----------------------------------------------------------
    Name(
        "train.global_batch",
        "number",
        "sequences",
        "Sequences (samples, for a graph model) per optimizer step.",
    ),
    Name(
        "train.seq_len",
        "number",
        "tokens",
        "Tokens per sequence; 1 for a graph model (a sample is one input of the graph).",
    ),
    Name("train.precision", "str", "-", "Matmul precision: 'bf16', 'fp16' or 'fp8'."),
    Name(
        "train.flash_attention", "bool", "-", "Attention scores are not stored (flash attention)."
    ),
    Name("train.backend", "str", "-", "Backend priced: 'megatron', 'deepspeed', ...; '': none."),
    Name(
        "train.fp8_recipe",
        "str",
        "-",
        "FP8 scaling recipe an FP8 run uses: 'delayed', 'tensorwise', 'rowwise', 'mxfp8' or "
        "'blockwise' (cost/layout.py fp8_recipe: the rendered Megatron --fp8-recipe, "
        "torchtitan's Float8 rowwise or MXFP8 converter, Transformer Engine's default under "
        "DeepSpeed).",
    ),
    Name(
        "train.tp_comm_overlap",
        "bool",
        "-",
        "The backend can pipeline tensor-parallel collectives with the GEMMs (Megatron-LM "
        "--tp-comm-overlap, torchtitan async TP) where the layout allows it: true for every "
        "plan; false only for calibration runs whose framework predates it.",
    ),
    Name(
        "train.chunked_loss",
        "bool",
        "-",
        "torchtitan computes the LM head and the loss a sequence chunk at a time (0.3's "
        "ChunkedLossWrapper, which its llama3 configs use): true for every plan; false for "
        "calibration runs, whose torchtitan predates it.",
    ),
    Name(
        "train.tt_fsdp_units_03",
        "bool",
        "-",
        "torchtitan wraps FSDP2 as 0.3 does (distributed/fsdp.py apply_fsdp_to_decoder): the "
        "embedding a unit of its own, resharded after its forward like a block, the final "
        "norm and output kept gathered; true for every plan; false for calibration runs, whose "
        "torchtitan (9dec370, e7c0cae parallelize_llama.py apply_fsdp) kept the root module "
        "(embedding, final norm, output) gathered.",
    ),
    Name(
        "train.loss_compiled",
        "bool",
        "-",
        "torchtitan compiles its loss (Layout.loss_compiled: torch.compile with 'loss' in "
        "CompileConfig.components): true for torchtitan's plans, which write --compile.enable "
        "and the components; as read for a file `check --from-torchtitan` reads, or a layout "
        "that says so; false on other backends, and for calibration runs unless their "
        "torchtitan compiled it (bbb1b616e, April 2025, and later, with compile on).",
    ),
    Name(
        "train.ds_prefetch_bucket_size",
        "number",
        "elements",
        "DeepSpeed ZeRO-3's prefetch bucket (Layout.ds_prefetch_bucket_size, ds_config.json "
        "stage3_prefetch_bucket_size): DeepSpeed's default 5e7 unless the layout says otherwise.",
    ),
    Name(
        "train.ds_max_live_parameters",
        "number",
        "elements",
        "DeepSpeed ZeRO-3's most parameters gathered at once (Layout.ds_max_live_parameters, "
        "stage3_max_live_parameters): DeepSpeed's default 1e9 unless the layout says otherwise.",
    ),
    Name(
        "train.ds_reduce_bucket_size",
        "number",
        "elements",
        "DeepSpeed's gradient bucket (Layout.ds_reduce_bucket_size, reduce_bucket_size): "
        "DeepSpeed's default 5e8 unless the layout says otherwise.",
    ),
    Name(
        "train.cross_entropy_fusion",
        "str",
        "-",
        "Megatron-LM's loss kernel (Layout.cross_entropy_fusion): 'te' (Transformer Engine's "
        "fused cross-entropy, --cross-entropy-loss-fusion --cross-entropy-fusion-impl te, which "
        "writes the gradient into the 16-bit logits in place; every Megatron plan writes it), "
        "'native' (--cross-entropy-loss-fusion: Megatron-Core's torch.compile'd one) or 'off' "
        "(its own tensor_parallel cross-entropy, Megatron-LM's default); calibration runs as "
        "their recipes set it. Other backends compute their own loss: the rules read it on "
        "Megatron-LM only.",
    ),
    Name(
        "train.torchao_float8_tp",
        "bool",
        "-",
        "torchtitan's Float8 linears all-gather their sequence-parallel inputs in float8 "
        "(torchao's Float8ColwiseParallel, which torchtitan took before 0.3): false for every "
        "plan (0.3's sharding gathers 16-bit inputs); true for calibration runs.",
    ),
    Name(
        "train.sdpa_cudnn",
        "bool",
        "-",
        "PyTorch's scaled_dot_product_attention prefers cuDNN's attention on Hopper and "
        "Blackwell (torch's sdp_utils.cpp check_prefer_cudnn_attention, with cuDNN above 9.15, "
        "which the CUDA 13 wheels ship) where it ran FlashAttention-2 before: true for every "
        "plan; false for calibration runs, which all predate it.",
    ),
    Name(
        "train.kv_heads_repeated",
        "bool",
        "-",
        "torchtitan repeats the key/value heads to the query heads before attention (repeat_kv, "
        "before ff0829c10 of January 2026; since then SDPA's enable_gqa takes them as they "
        "are), so context parallelism's ring carries and merges that many: false for every "
        "plan; true for calibration runs on torchtitan, which all predate it.",
    ),
    Name(
        "train.tt_fused_qkv",
        "bool",
        "-",
        "torchtitan projects the queries, keys and values with one fused matmul (torchtitan "
        "ad7a86533 of April 2026, 0.3's llama3 fuse_qkv), so per-op selective checkpointing "
        "recomputes wo and w3 where it recomputed wk, wo and w3: true for every plan; false "
        "for calibration runs on torchtitan, which all predate it.",
    ),
    Name(
        "train.p2p_overlap",
        "bool",
        "-",
        "An interleaved pipeline schedule overlaps its point-to-point transfers with compute "
        "(Megatron-LM's default --overlap-p2p-communication, torchtitan's Interleaved1F1B): true "
        "for every plan; false only for calibration runs whose Megatron-LM predates it.",
    ),
    Name(
        "train.zero3_overlap",
        "bool",
        "-",
        "ZeRO-3 / FSDP gathers and reduce-scatters run beside compute (every backend parplan "
        "renders for prefetches on its own streams; rules/cost/sharding.yaml zero3_overlapped): "
        "true for every plan; false only for calibration runs on DeepSpeed's first ZeRO-3 "
        "(2021), whose blocking fetch synchronised the device before each sub-module.",
    ),
    Name(
        "train.moe_a2a_overlap",
        "bool",
        "-",
        "Megatron-LM pairs micro-batches to hide the expert all-to-alls "
        "(--overlap-moe-expert-parallel-comm) where the layout allows it: true for every plan "
        "(its files turn it on); false for calibration runs whose recipe left it off.",
    ),
    # --- plan.*: the layout being estimated (cost.layout.PLAN_FIELDS: the Layout's fields) ------
    Name("plan.dp", "number", "ranks", "Data-parallel size."),
    Name("plan.tp", "number", "ranks", "Tensor-parallel size."),
    Name("plan.pp", "number", "ranks", "Pipeline-parallel size."),
    Name("plan.cp", "number", "ranks", "Context-parallel size."),
    Name("plan.ep", "number", "ranks", "Expert-parallel size: etp x ep ranks tile tp x cp x dp."),
    Name("plan.etp", "number", "ranks", "Expert-tensor-parallel size (tp unless set)."),
    Name("plan.vpp", "number", "chunks", "Model chunks per pipeline rank (1: not interleaved)."),
    Name("plan.mbs", "number", "sequences", "Micro-batch size (sequences or samples)."),
    Name("plan.grad_accum", "number", "micro-batches", "Micro-batches per step per pipeline (m)."),
    Name("plan.zero_stage", "number", "-", "ZeRO stage 0-3 (Megatron 2/3: Megatron-FSDP's)."),
    Name("plan.distributed_optimizer", "bool", "-", "Megatron's distributed optimizer is used."),
    Name("plan.sequence_parallel", "bool", "-", "Megatron sequence parallelism is on."),
    Name("plan.recompute", "str", "-", "Activation recomputation: 'none', 'selective' or 'full'."),
    Name(
        "plan.grad_reduce_dtype",
        "str",
        "-",
        "The type gradients are reduced in: 'default' (the backend's own: rules/cost/memory.yaml "
        "grad_default_bytes), 'fp32' or 'bf16' (Megatron-LM --grad-reduce-in-bf16, DeepSpeed "
        "communication_data_type).",
    ),
    Name(
        "plan.fp8_param_gather",
        "bool",
        "-",
        "FP8 parameters (Megatron-LM --fp8-param-gather): FP8 linear weights, all-gathered in "
        "FP8 by the distributed optimizer.",
    ),
    Name(
        "plan.precision_aware_optimizer",
        "bool",
        "-",
        "Megatron-LM's precision-aware optimizer with bf16 moments "
        "(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16): "
        "rules/cost/memory.yaml optimizer_bytes.",
    ),
    Name(
        "plan.offload_layers",
        "number",
        "layers",
        "Transformer layers whose activations go to host memory between their forward and "
        "backward (Megatron-LM --cpu-offloading-num-layers): rules/cost/memory.yaml "
        "offloaded_layers, rules/cost/time.yaml offload_exposed_s.",
    ),
    Name(
        "plan.fsdp_reshard",
        "str",
        "-",
        "FSDP2's reshard policy (Layout.fsdp_reshard): 'default', the backend's own (each block "
        "resharded after its forward and gathered again for its backward; under torchtitan's "
        "pipeline the stage stays gathered), or 'never' (every block stays gathered from its "
        "forward to its backward: torchtitan --parallelism.fsdp_reshard_after_forward never, "
        "Accelerate fsdp_reshard_after_forward false). Searched both ways on the backends that set "
        "it, for FSDP2's layouts (zero 3), unless plan --fsdp-reshard says otherwise.",
    ),
    Name(
        "plan.overlap_grad_reduce",
        "bool",
        "-",
        "Whether the files turn on the overlap of the data-parallel gradient reduction with the "
        "backward (Layout.overlap_grad_reduce: Megatron-LM --overlap-grad-reduce with "
        "--overlap-param-gather, DeepSpeed overlap_comm). False only where the backend has the "
        "switch (Megatron-LM's DDP and distributed optimizer, DeepSpeed ZeRO 1-3): as plan "
        "--overlap-grad-reduce asks, true elsewhere.",
    ),
    # --- estimate.*: figures of this plan's estimate (constraints only) ------------------------
    Name(
        "estimate.<figure>",
        "number",
        "bytes, s or as named",
        "A figure of the plan's estimate, named `<section>_<key>`: memory_params, memory_grads, "
        "memory_optimizer, memory_activations, memory_other, memory_total (bytes per GPU), "
        "time_step_s, time_compute_s, ... (seconds), throughput_mfu, ... A constraint that reads "
        "one is checked after the cost model runs.",
    ),
    Name("speedup", "number", "x", "In a proposal description: the proposal's evaluated speedup."),
    Name(
        "settings.<key>",
        "number",
        "as the setting",
        "In a proposal description: the evaluated setting <key> (numbers, booleans or text).",
    ),
)

NAMES: tuple[Name, ...] = (
    *_SHARED_NAMES,
    *(replace(n, models=("transformer",)) for n in _TRANSFORMER_NAMES),
    *(Name(n, k, u, d, models=("graph",)) for n, k, u, d in GRAPH_MODEL_NAMES),
    *_RUN_NAMES,
    *(Name(*f) for f in PLAN_REQUEST_NAMES),  # type: ignore[arg-type]
)

# Names that stand for a value: `true`/`false`, and the binary sizes (`GiB`: rules/units.py).
CONSTANTS: dict[str, bool | int] = {"true": True, "false": False, **SIZE_CONSTANTS}

FUNCTIONS: tuple[Function, ...] = (
    Function("min", "min(a, b, ...)", 1, None, "number", "Smallest argument.", min),
    Function("max", "max(a, b, ...)", 1, None, "number", "Largest argument.", max),
    Function(
        "clamp",
        "clamp(x, lo, hi)",
        3,
        3,
        "number",
        "`x` limited to [lo, hi]: max(lo, min(x, hi)).",
        _clamp,
    ),
    Function("ceil", "ceil(x)", 1, 1, "number", "Smallest integer >= x.", math.ceil),
    Function("floor", "floor(x)", 1, 1, "number", "Largest integer <= x.", math.floor),
    Function(
        "round",
        "round(x[, digits])",
        1,
        2,
        "number",
        "x rounded half-to-even to `digits` decimals (default 0).",
        round,
    ),
    Function("abs", "abs(x)", 1, 1, "number", "Absolute value.", abs),
    Function("sqrt", "sqrt(x)", 1, 1, "number", "Square root (x >= 0).", math.sqrt),
    Function("log", "log(x)", 1, 1, "number", "Natural logarithm (x > 0).", math.log),
    Function("log2", "log2(x)", 1, 1, "number", "Base-2 logarithm (x > 0).", math.log2),
    Function("log10", "log10(x)", 1, 1, "number", "Base-10 logarithm (x > 0).", math.log10),
    Function("exp", "exp(x)", 1, 1, "number", "e to the power x.", math.exp),
    Function(
        "interp_log",
        "interp_log(x, x1, y1, x2, y2, ...)",
        5,
        None,
        "number",
        "The curve through the points (x ascending, > 0) at x: linear in log(x) between two "
        "points, y1 below x1 and the last y above the last x (a table of a source's "
        "measurements, e.g. efficiency against tokens).",
        interp_log,
    ),
    # A backend fact computed once, in parplan_gen/models; the renderer calls it too.
    Function(
        "pipeline_split_ok",
        "pipeline_split_ok(layers, pp, vpp)",
        3,
        3,
        "bool",
        "`layers` split over pp x vpp pipeline stages (models/pipeline_split.py).",
        split.pipeline_split_ok,
    ),
    Function(
        "pipeline_slowest_stage", split.SIGNATURE, 7, 7, "number", split.DOC, split.slowest_stage
    ),
    Function(
        "pipeline_peak_layers",
        split.PEAK_SIGNATURE,
        4,
        4,
        "number",
        split.PEAK_DOC,
        split.peak_layers,
    ),
)

# Which namespaces a formula may read, by the place it appears in a rule file.
CONTEXTS: dict[str, frozenset[str]] = {
    "node": frozenset({"graph", "node"}),  # node-level opportunity rules
    "graph": frozenset({"graph"}),  # graph-level opportunity rules
    "proposal": frozenset({"graph", "cluster"}),  # proposal rules
    "proposal_description": frozenset({"graph", "cluster", "speedup", "settings"}),
    "estimate": frozenset({"model", "cluster", "train", "plan"}),  # cost model formulas
    "constraint": frozenset({"model", "cluster", "train", "plan", "estimate"}),  # planner
    "budget": frozenset({"model", "cluster", "train", "plan", "estimate", "budget"}),
}

FUNCTION_BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}

# `lookup` runs for every name of every formula at load: two dicts instead of a scan of NAMES.
# No fixed name lies inside a family (tests/test_formulas.py checks), so the order is free.
_FIXED: dict[str, Name] = {e.name: e for e in NAMES if e.family_prefix is None}
_FAMILIES: dict[str, Name] = {e.family_prefix: e for e in NAMES if e.family_prefix}


def lookup(name: str) -> Name | None:
    """The declaration that covers the dotted `name`, or None."""
    entry = _FIXED.get(name)
    if entry is not None:
        return entry
    head, dot, last = name.rpartition(".")
    return _FAMILIES.get(head + dot) if last else None


def all_spellings() -> list[str]:
    """Every fixed name, family prefix, constant and function, for "did you mean" hints."""
    out = [e.name if e.family_prefix is None else e.family_prefix for e in NAMES]
    return out + list(CONSTANTS) + [f.name for f in FUNCTIONS]
