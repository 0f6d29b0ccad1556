"""The parallel layout of one training job, the invariants that make it exist, and the bounds
of every size a request holds.

A `Layout` is validated once, when it is built: dp·tp·pp·cp = world size,
global batch = mbs·grad_accum·dp, and the expert groups (etp·ep ranks) tile the tp·cp·dp ranks
of a pipeline stage. Nothing downstream re-checks these. Model-dependent limits (heads
divisible by tp, layers by pp, ...) are constraint rules (rules/constraints/), and how a backend
forms its expert groups (Megatron-LM folds ep over tp x cp x dp; DeepSpeed-MoE carves it out of
dp) is its own (planning/backends/).

`SIZE_LIMITS` is the one table of size bounds: the command-line flags, the `--from-*` readers,
cluster files, the Python API and `Layout` itself check a size against it where it enters, so
that no search, division or output is ever sized by an absurd number.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parplan_gen.cost.catalog import Precision
from parplan_gen.inputs.defaults import DS_DEFAULTS, DS_MAX_ELEMENTS, DS_SETTINGS, ZERO_FULL
from parplan_gen.inputs.errors import InputError, shown_value
from parplan_gen.models.transformer_shape import MAX_LAYERS, MAX_WIDTH
from parplan_gen.rules.vocabulary import NAMES

Recompute = Literal["none", "selective", "full"]
# The type the data-parallel gradient reduction moves (and, on Megatron-LM, the main gradients
# it keeps): `default` is what the backend does unless told otherwise (rules/cost/memory.yaml
# grad_default_bytes: fp32 main gradients on Megatron-LM, megatron/training/arguments.py
# validate_args with --bf16; fp32 under torchtitan's FSDP2 and DDP; the 16-bit training type
# under DeepSpeed ZeRO 1-3), `fp32` and `bf16` what a file sets (Megatron-LM
# --grad-reduce-in-bf16, DeepSpeed communication_data_type).
GradReduceDtype = Literal["default", "fp32", "bf16"]
# Megatron-LM's loss kernel (core_v0.16.0 models/common/language_module/language_module.py
# compute_language_model_loss): `off`, its own vocab-parallel cross-entropy (Megatron-LM's
# default), `native` (--cross-entropy-loss-fusion: Megatron-Core's torch.compile'd one,
# fusions/fused_cross_entropy.py), `te` (--cross-entropy-loss-fusion
# --cross-entropy-fusion-impl te: Transformer Engine's Triton kernels, which every Megatron plan
# writes: less memory and time than either, the same loss). rules/cost/memory.yaml
# logits_bytes_per_vocab and pipeline.yaml loss_bytes_per_logit price each (train.cross_entropy_fusion).
CrossEntropyFusion = Literal["off", "native", "te"]
# FSDP2's reshard policy (torchtitan --parallelism.fsdp_reshard_after_forward, Accelerate
# fsdp_reshard_after_forward): `default`, the backend's own (each block resharded after its
# forward, gathered again for its backward; under torchtitan's pipeline the stage stays
# gathered, distributed/fsdp.py get_fsdp_reshard_after_forward_policy), or `never`: every block
# stays gathered from its forward to its backward, which skips the backward's all-gather
# (rules/cost/memory.yaml fsdp2_params_kept, sharding.yaml zero3_backward_gather_s).
FsdpReshard = Literal["default", "never"]
DEFAULT_FSDP_RESHARD: FsdpReshard = "default"
NEVER_RESHARD: FsdpReshard = "never"
PLAN_CROSS_ENTROPY_FUSION: CrossEntropyFusion = "te"
NO_CROSS_ENTROPY_FUSION: CrossEntropyFusion = "off"  # the framework's own loss
# The fused kernels (Megatron-LM --cross-entropy-fusion-impl's choices)
FUSED_CROSS_ENTROPY: tuple[CrossEntropyFusion, ...] = tuple(
    f for f in get_args(CrossEntropyFusion) if f != NO_CROSS_ENTROPY_FUSION
)


def plan_cross_entropy_fusion(backend: str | None) -> CrossEntropyFusion | None:
    """The loss kernel a plan on `backend` writes: Transformer Engine's on Megatron-LM
    (backends/megatron/mapping.yaml), None elsewhere (the framework computes its own)."""
    return PLAN_CROSS_ENTROPY_FUSION if backend == "megatron" else None


def cross_entropy_value(
    named: CrossEntropyFusion | None, backend: str | None
) -> CrossEntropyFusion:
    """The loss kernel a layout that names `named` (Layout.cross_entropy_fusion) runs on
    `backend`, train.cross_entropy_fusion: `named`, else the one a plan on the backend writes,
    else `off` (the framework's own loss)."""
    return named or plan_cross_entropy_fusion(backend) or NO_CROSS_ENTROPY_FUSION


# The 16-bit precision of a run: an FP8 run keeps its other matmuls and its weights in BF16
# (rules/cost/compute.yaml; Megatron --fp8-format with --bf16).
SIXTEEN_BIT: dict[str, Precision] = {"bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}


def plan_loss_compiled(backend: str | None) -> bool | None:
    """Whether a plan on `backend` compiles its loss (Layout.loss_compiled). torchtitan's plans
    do: torchtitan 0.3 compiles the loss when --compile.enable and `loss` is in
    --compile.components (components/loss.py BaseLoss._maybe_compile; config/configs.py
    CompileConfig.components, default ["model", "loss"]), which keeps 4 bytes a logit instead
    of 12 (rules/cost/memory.yaml tt_loss_bytes_per_vocab) and moves fewer (pipeline.yaml
    loss_bytes_compiled). Their files compile the model too where the plan needs it (FP8's
    converters, async TP) and the loss alone elsewhere (backends/torchtitan/facts.py). None on
    the other backends: their files compute the framework's own loss, uncompiled."""
    return True if backend == "torchtitan" else None


def ds_settings(layout: Layout | None) -> dict[str, int]:
    """train.ds_* of `layout` (None: DeepSpeed's defaults, the Layout's)."""
    if layout is None:
        return {f"train.{f}": DS_DEFAULTS[f] for f in DS_SETTINGS}
    return {f"train.{f}": getattr(layout, f) for f in DS_SETTINGS}


def loss_compiled_value(named: bool | None, backend: str | None) -> bool:
    """Whether a layout that says `named` (Layout.loss_compiled) runs a compiled loss on
    `backend` (train.loss_compiled): `named`, else as the backend's plans run it."""
    return bool(plan_loss_compiled(backend)) if named is None else named


# The FP8 scaling recipe an FP8 plan runs (rules/cost/compute.yaml prices its quantization;
# train.fp8_recipe). Megatron-LM --fp8-recipe (core_r0.13.0 / core_v0.16.1 arguments.py choices
# tensorwise, delayed, mxfp8, blockwise), as the rendered files set it: Blackwell runs MXFP8
# block scaling (Transformer Engine MXFP8BlockScaling needs compute capability 10.0), the others
# per-tensor current scaling (tensorwise, TE Float8CurrentScaling), the "FP8-CS" of NeMo
# 25.11's H100 and B200 runs (Megatron-Bridge docs/performance-summary-archive.md). torchtitan
# 0.3's files (parplan_torchtitan_config.py) convert the linear layers with MXFP8LinearConverter
# on Blackwell (components/quantization/mx.py: SM 10.0 and later) and Float8LinearConverter
# elsewhere, whose recipe_name is "rowwise" or "rowwise_with_gw_hp" (float8.py
# Float8LinearConverter.Config; default and llama3_405b's: rowwise, torchao's per-row dynamic
# scaling; 0.3 has no tensorwise). DeepSpeed leaves FP8 to Transformer Engine in the model
# code, whose default recipe is MXFP8 where the GPU supports it and delayed scaling on Hopper
# and Ada (TE transformer_engine/pytorch/quantization.py get_default_fp8_recipe).
FP8_RECIPES = {"blackwell": "mxfp8"}
FP8_RECIPE_DEFAULT = "tensorwise"
TE_DEFAULT_FP8_RECIPE = "delayed"
TORCHTITAN_FP8_RECIPE = "rowwise"
OTHER_FP8_RECIPES = {"deepspeed": TE_DEFAULT_FP8_RECIPE, "torchtitan": TORCHTITAN_FP8_RECIPE}


def fp8_recipe(architecture: str, backend: str | None) -> str:
    """The FP8 recipe a plan on `backend` runs on GPUs of `architecture`."""
    default = OTHER_FP8_RECIPES.get(backend or "", FP8_RECIPE_DEFAULT)
    return FP8_RECIPES.get(architecture, default)


# The least ZeRO stage that reads each ds_config.json setting a Layout field takes: DeepSpeed's
# buffer sizes (inputs/defaults.py DS_SETTINGS), the reduce bucket the ZeRO optimizers'
# (runtime/zero/stage_1_and_2.py, stage3.py), the others ZeRO-3's parameter coordinator's only;
# and overlap_comm (overlap_grad_reduce), which ZeRO-0 does not read either (engine.py
# allreduce_gradients reduces after the backward).
DS_LEAST_STAGE = {
    "ds_prefetch_bucket_size": ZERO_FULL,
    "ds_max_live_parameters": ZERO_FULL,
    "ds_reduce_bucket_size": 1,
    "overlap_grad_reduce": 1,
}


# GPUs of a cluster, and so any parallel size (dp, tp, pp, cp, ep, etp): ~5x the largest clusters
# built (about 200,000 GPUs); bounds the search and the launch files.
MAX_GPUS = 1 << 20
# Tokens per sequence: no more than the most positions a model may have.
MAX_SEQ_LEN = MAX_WIDTH
# Sequences (or samples) per optimizer step, and so a micro-batch or an accumulation count:
# thousands of times the largest published batches (tens of thousands of sequences or images),
# and small enough that a step's tokens (at most MAX_GLOBAL_BATCH * MAX_SEQ_LEN = 2^53) are an
# exact float64, the cost model's arithmetic, and an int64.
MAX_GLOBAL_BATCH = 1 << 29
# Model chunks per pipeline rank: each chunk holds at least one layer.
MAX_VPP = MAX_LAYERS
# Field (or flag, without the dashes) -> largest value; every size is at least 1.
SIZE_LIMITS: dict[str, int] = {
    "gpus": MAX_GPUS,
    **dict.fromkeys(("dp", "tp", "pp", "cp", "ep", "etp"), MAX_GPUS),
    "vpp": MAX_VPP,
    **dict.fromkeys(("mbs", "global_batch", "grad_accum"), MAX_GLOBAL_BATCH),
    "seq_len": MAX_SEQ_LEN,
    # DeepSpeed ZeRO-3's buffers, in elements (Layout.ds_*)
    **dict.fromkeys(DS_SETTINGS, DS_MAX_ELEMENTS),
}


def size_problem(field: str, value: object) -> str | None:
    """Why `value` is no valid `field` (a key of SIZE_LIMITS), or None."""
    maximum = SIZE_LIMITS[field]
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return None
    return f"expected a whole number from 1 to {maximum}, got {shown_value(value)}"


def _ds_field(name: str, description: str) -> Any:
    """A Layout field of DeepSpeed's buffer `name` (inputs/defaults.py DS_DEFAULTS): its default,
    at least 1, at most DS_MAX_ELEMENTS elements."""
    return Field(DS_DEFAULTS[name], ge=1, le=DS_MAX_ELEMENTS, description=description)


class LayoutError(InputError):
    """A layout that cannot exist (a size out of bounds, sizes or batch that do not multiply out)."""


class Layout(BaseModel):
    """Parallel sizes, batch split and memory options of one job (the plan contract's `plan`).

    The memory options a framework leaves to its user (the gradients' reduce type, FP8
    parameters) default to the framework's own choice, so a layout that does not name them is
    priced as the framework runs by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dp: int = Field(
        ge=1,
        le=SIZE_LIMITS["dp"],
        description="Data-parallel size (includes any ZeRO-sharded dimension).",
    )
    tp: int = Field(ge=1, le=SIZE_LIMITS["tp"], description="Tensor-parallel size.")
    pp: int = Field(ge=1, le=SIZE_LIMITS["pp"], description="Pipeline-parallel size (stages).")
    cp: int = Field(
        ge=1,
        le=SIZE_LIMITS["cp"],
        description="Context-parallel size (sequence split across ranks).",
    )
    ep: int = Field(
        1,
        ge=1,
        le=SIZE_LIMITS["ep"],
        description="Expert-parallel size (MoE only): expert groups of etp x ep ranks tile the "
        "tp x cp x dp ranks of a stage (Megatron-Core parallel_state).",
    )
    etp: int = Field(
        None,  # type: ignore[assignment]  # filled with tp before validation (_expert_tp)
        ge=1,
        le=SIZE_LIMITS["etp"],
        description="Expert-tensor-parallel size: the tensor parallelism of the expert layers "
        "(Megatron-LM --expert-tensor-parallel-size; tp when not given).",
    )
    vpp: int = Field(
        1, ge=1, le=SIZE_LIMITS["vpp"], description="Model chunks per pipeline rank (interleaving)."
    )
    mbs: int = Field(ge=1, le=SIZE_LIMITS["mbs"], description="Micro-batch size, sequences.")
    global_batch: int = Field(
        ge=1, le=SIZE_LIMITS["global_batch"], description="Sequences per optimizer step."
    )
    grad_accum: int = Field(
        ge=1,
        le=SIZE_LIMITS["grad_accum"],
        description="Micro-batches per step per data-parallel rank.",
    )
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="DeepSpeed ZeRO stage.")
    distributed_optimizer: bool = Field(
        False, description="Megatron's distributed optimizer (shards optimizer states over dp)."
    )
    sequence_parallel: bool = Field(False, description="Megatron sequence parallelism (tp > 1).")
    recompute: Recompute = Field("none", description="Activation recomputation.")
    grad_reduce_dtype: GradReduceDtype = Field(
        "default",
        description="The type gradients are reduced in: `default`, the backend's own (fp32 main "
        "gradients on Megatron-LM, fp32 with torchtitan's FSDP2 and DDP, the 16-bit training "
        "type under DeepSpeed ZeRO 1-3), or `fp32` / `bf16` as a file sets it (Megatron-LM "
        "--grad-reduce-in-bf16, DeepSpeed communication_data_type).",
    )
    fp8_param_gather: bool = Field(
        False,
        description="FP8 parameters (Megatron-LM --fp8-param-gather): the model keeps its "
        "Transformer Engine linear weights in FP8 instead of BF16 and the distributed "
        "optimizer all-gathers them in FP8.",
    )
    precision_aware_optimizer: bool = Field(
        False,
        description="Megatron-LM's precision-aware optimizer with Adam's moments in bf16 "
        "(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16): "
        "Transformer Engine's FusedAdam keeps both moments in bf16 and, in a BF16 run or one "
        "with delayed-scaling FP8, the fp32 master weights as the 16 bits a bf16 weight lacks.",
    )
    offload_layers: int = Field(
        0,
        ge=0,
        le=MAX_LAYERS,
        description="Transformer layers whose activations are offloaded to host memory after "
        "their forward and reloaded for their backward (Megatron-LM --cpu-offloading-num-layers, "
        "Transformer Engine's CPU offload); 0: none.",
    )
    cross_entropy_fusion: CrossEntropyFusion | None = Field(
        None,
        description="Megatron-LM's loss kernel: `off` (its own cross-entropy, Megatron-LM's "
        "default), `native` (--cross-entropy-loss-fusion) or `te` (--cross-entropy-loss-fusion "
        "--cross-entropy-fusion-impl te); not given: as the backend's plan files run it (`te` on "
        "Megatron-LM; other backends compute their framework's own loss).",
    )
    fsdp_reshard: FsdpReshard = Field(
        DEFAULT_FSDP_RESHARD,
        description="FSDP2's reshard policy: `default` (the backend's own: each block's "
        "parameters resharded after its forward and gathered again for its backward; under "
        "torchtitan's pipeline the stage stays gathered) or `never` (every block stays gathered "
        "from its forward to its backward, which skips the backward's all-gather: torchtitan "
        "--parallelism.fsdp_reshard_after_forward never, Accelerate fsdp_reshard_after_forward "
        "false).",
    )
    overlap_grad_reduce: bool = Field(
        True,
        description="The files turn on the overlap of the data-parallel gradient reduction with "
        "the backward (Megatron-LM --overlap-grad-reduce, with the distributed optimizer also "
        "--overlap-param-gather; DeepSpeed zero_optimization.overlap_comm). False: the "
        "reduction runs after the backward, on the compute stream, where a backend has the "
        "switch (Megatron-LM's DDP and distributed optimizer, DeepSpeed ZeRO 1-3); the other "
        "backends' schedules always overlap it, and DeepSpeed ZeRO-0 always reduces after the "
        "backward (rules/cost/sharding.yaml).",
    )
    ds_prefetch_bucket_size: int = _ds_field(
        "ds_prefetch_bucket_size",
        "DeepSpeed ZeRO-3's prefetch bucket, elements (ds_config.json "
        "zero_optimization.stage3_prefetch_bucket_size; DeepSpeed's default 5e7): how much each "
        "fetch gathers ahead, so a layer of P parameters takes P / it all-gathers a pass "
        "(rules/cost/sharding.yaml zero3_gathers_per_layer). DeepSpeed only, with zero 3.",
    )
    ds_max_live_parameters: int = _ds_field(
        "ds_max_live_parameters",
        "DeepSpeed ZeRO-3's most parameters gathered at once, elements "
        "(zero_optimization.stage3_max_live_parameters; default 1e9; rules/cost/memory.yaml "
        "zero3_live_params). DeepSpeed only, with zero 3.",
    )
    ds_reduce_bucket_size: int = _ds_field(
        "ds_reduce_bucket_size",
        "DeepSpeed ZeRO's gradient bucket, elements (zero_optimization.reduce_bucket_size; "
        "default 5e8): ZeRO-3 reduce-scatters it when full (rules/cost/sharding.yaml "
        "zero3_scatters_per_layer, memory.yaml zero3_live_grad_bytes), ZeRO-1/2 stage their "
        "gradients in buffers of it (memory.yaml deepspeed_reduce_buffer_bytes). DeepSpeed "
        "only, with zero 1 and up.",
    )
    loss_compiled: bool | None = Field(
        None,
        description="torchtitan computes the loss with torch.compile (--compile.enable with "
        "`loss` in --compile.components); not given: as the backend's plan files run it "
        "(compiled on torchtitan; other backends compute their framework's own loss, "
        "uncompiled).",
    )
    seq_len: int = Field(ge=1, le=SIZE_LIMITS["seq_len"], description="Tokens per sequence.")
    precision: Precision = Field("bf16", description="Compute precision of the matmuls.")

    @property
    def world_size(self) -> int:
        """GPUs the layout occupies."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel size: the ranks that hold the same experts and reduce their
        gradients (Megatron-Core parallel_state: world / (etp * ep * pp))."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def interleaved(self) -> bool:
        """The interleaved 1F1B schedule is in use (more than one chunk per stage)."""
        return self.vpp > 1

    @model_validator(mode="before")
    @classmethod
    def _expert_tp(cls, data: Any) -> Any:
        # Megatron-LM arguments.py validate_args: expert_tensor_parallel_size defaults to
        # tensor_model_parallel_size; plan.json files written before etp existed read the same.
        if isinstance(data, dict) and data.get("etp") is None and "tp" in data:
            return {**data, "etp": data["tp"]}
        return data

    @model_validator(mode="after")
    def _exists(self) -> Layout:
        if self.mbs * self.grad_accum * self.dp != self.global_batch:
            raise ValueError(
                f"mbs({self.mbs}) * grad_accum({self.grad_accum}) * dp({self.dp}) "
                f"!= global_batch({self.global_batch})"
            )
        stage = self.tp * self.cp * self.dp
        if stage % (self.etp * self.ep):
            # Megatron-Core parallel_state.initialize_model_parallel: "decoder world_size is not
            # divisible by expert_tensor_model_pipeline_parallel size" (etp * ep * pp)
            raise ValueError(
                f"tp({self.tp}) * cp({self.cp}) * dp({self.dp}) = {stage} % "
                f"(etp({self.etp}) * ep({self.ep})) != 0: the expert groups do not tile a stage"
            )
        if self.zero_stage and self.distributed_optimizer:
            raise ValueError("choose ZeRO (zero_stage > 0) or the distributed optimizer, not both")
        return self


# The fields a formula reads as plan.<field> (the vocabulary's plan.* names, with their units),
# in Layout order; the others (global_batch, seq_len, precision) are the request's train.* names.
PLAN_FIELDS: tuple[str, ...] = tuple(
    f for f in Layout.model_fields if f in {n.name.removeprefix("plan.") for n in NAMES}
)


def plan_values(layout: Layout) -> dict[str, object]:
    """The plan.* formula values of `layout`."""
    return {f"plan.{field}": getattr(layout, field) for field in PLAN_FIELDS}


def check_sizes(**sizes: object) -> None:
    """A LayoutError naming the first of `sizes` (field=value; None: not given) that is outside
    SIZE_LIMITS."""
    for field, value in sizes.items():
        problem = None if value is None else size_problem(field, value)
        if problem:
            raise LayoutError(f"{field}: {problem}")


def build_layout(
    world_size: int,
    *,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    dp: int | None = None,
    mbs: int = 1,
    global_batch: int,
    seq_len: int,
    **options: object,
) -> Layout:
    """A Layout on `world_size` GPUs; dp defaults to what the other sizes leave.

    Raises LayoutError naming the size outside SIZE_LIMITS, or with the equation when the sizes
    or the batch do not work out.
    """
    check_sizes(
        gpus=world_size,
        tp=tp,
        pp=pp,
        cp=cp,
        dp=dp,
        mbs=mbs,
        global_batch=global_batch,
        seq_len=seq_len,
        **{k: v for k, v in options.items() if k in SIZE_LIMITS},  # ep, vpp
    )
    model_parallel = tp * pp * cp
    if dp is None:
        if world_size % model_parallel:
            raise LayoutError(
                f"tp({tp}) * pp({pp}) * cp({cp}) = {model_parallel} does not divide "
                f"the world size ({world_size} GPUs)"
            )
        dp = world_size // model_parallel
    if dp * model_parallel != world_size:
        raise LayoutError(
            f"dp({dp}) * tp({tp}) * pp({pp}) * cp({cp}) = {dp * model_parallel} "
            f"!= world size ({world_size} GPUs)"
        )
    if global_batch % (mbs * dp):
        raise LayoutError(
            f"global_batch({global_batch}) is not divisible by mbs({mbs}) * dp({dp}) = {mbs * dp}"
        )
    grad_accum = global_batch // (mbs * dp)
    from pydantic import ValidationError

    try:
        return Layout(
            dp=dp,
            tp=tp,
            pp=pp,
            cp=cp,
            mbs=mbs,
            global_batch=global_batch,
            grad_accum=grad_accum,
            seq_len=seq_len,
            **options,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise LayoutError(f"{where + ': ' if where else ''}{message}") from None


# The keys of a layout given as a dict (the Python API's `check` and `estimate`): every Layout
# field but grad_accum, which build_layout derives from the batch.
GIVEN_FIELDS: tuple[str, ...] = tuple(f for f in Layout.model_fields if f != "grad_accum")


@contextlib.contextmanager
def given_layout(
    given: Layout | Mapping[str, Any], where: str = "layout"
) -> Iterator[Layout | dict[str, Any]]:
    """For a block that builds a layout from `given` (a Layout, as it is, or a dict of its
    sizes, `{"tp": 2, "global_batch": 512}`): `given`, a dict with its keys checked (a
    LayoutError for a key outside GIVEN_FIELDS or a missing global_batch), and a LayoutError
    the block raises building the layout from it naming `where`: `where.KEY: ...`."""
    if isinstance(given, Layout):
        yield given
        return
    sizes = _given_sizes(given, where)
    try:
        yield sizes
    except LayoutError as exc:  # from build_layout: its message starts with the field, if one
        named = exc.message.split(":", 1)[0] in Layout.model_fields
        raise LayoutError(f"{where}{'.' if named else ': '}{exc.message}") from None


def _given_sizes(given: object, where: str) -> dict[str, Any]:
    """`given` as a dict, its keys checked (build_layout checks the values)."""
    if not isinstance(given, Mapping):
        raise LayoutError(
            f"{where}: expected a Layout or a dict of its sizes, got {type(given).__name__}"
        )
    for key in given:
        if key == "grad_accum":
            raise LayoutError(
                f"{where}.grad_accum: not given but derived (global_batch / (mbs * dp)); "
                "give global_batch and mbs"
            )
        if key not in GIVEN_FIELDS:
            name = key if isinstance(key, str) else shown_value(key)
            raise LayoutError(
                f"{where}.{name}: not a layout field (fields: {', '.join(GIVEN_FIELDS)})"
            )
    if "global_batch" not in given:
        raise LayoutError(f"{where}.global_batch: missing (sequences per optimizer step)")
    return dict(given)
