"""What a planning request asks of the search's optional parts, and the rules' defaults for
what it leaves out.

Eight choices, each a field of `SearchChoices` (None: the rule's default):

* `interleave` (`plan --interleave search|off`): whether layouts with vpp > 1 are searched;
* `sequence_parallel` (`--sequence-parallel-with-tp search|on|off`): sequence parallelism on
  layouts with tp > 1 tried both ways, always on or always off;
* `overlap_grad_reduce` (`--overlap-grad-reduce on|off`): whether the files overlap the
  data-parallel gradient reduction with the backward (Megatron-LM --overlap-grad-reduce,
  DeepSpeed overlap_comm);
* `grad_reduce_dtype` (`--grad-reduce-dtype default|bf16|search`): the type the layouts reduce
  their gradients in (Layout.grad_reduce_dtype): the backend's own, bf16 (Megatron-LM
  --grad-reduce-in-bf16, DeepSpeed communication_data_type bf16) where the backend can, or both;
* `fp8_param_gather` (`--fp8-param-gather off|on|search`): FP8 parameters (Megatron-LM
  --fp8-param-gather) on the layouts of a backend that has them, off, or both;
* `precision_aware_optimizer` (`--precision-aware-optimizer off|on|search`): Adam's moments in
  bf16 (Megatron-LM --use-precision-aware-optimizer, Layout.precision_aware_optimizer) on the
  layouts of a backend that has it, off, or both;
* `activation_offload` (`--activation-offload off|search`): layouts that offload some layers'
  activations to host memory (Megatron-LM --cpu-offloading-num-layers, Layout.offload_layers)
  tried beside those that do not, or not;
* `fsdp_reshard` (`--fsdp-reshard default|never|search`): FSDP2's reshard policy
  (Layout.fsdp_reshard) on the FSDP2 layouts of the backends that set it (torchtitan,
  Accelerate): the backend's own, every block kept gathered from its forward to its backward,
  or both.
The grad_reduce_dtype, fp8_param_gather and precision_aware_optimizer choices change the numerics of the run, so their defaults
(rules/search/defaults.yaml) are the frameworks' own: a request that does not name them is
planned as the frameworks run.

`choose` resolves them once per request: a value the request gives, else the named formula of
`rules/search/defaults.yaml` (`DEFAULT_FORMULAS`) evaluated with the request's rules (built-in
and overlays) on its model.*, cluster.* and train.* values. The result (`ChosenOptions`, each
value with where it came from) is what `search_space.SearchOptions.for_model` searches and what
plan.json records under `search`. Nothing here reads the seed's proposals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from parplan_gen.cost.estimate import NO_HEADROOM, CostModel, MemoryHeadroom
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Precision
from parplan_gen.inputs.errors import FormulaError, InputError, SourceRef
from parplan_gen.inputs.validation import check_choice
from parplan_gen.models.kind import TrainedModel
from parplan_gen.planning.evaluate import named_formula
from parplan_gen.rules.ruleset import RuleSet

InterleaveChoice = Literal["search", "off"]
SequenceParallelChoice = Literal["search", "on", "off"]
GradReduceChoice = Literal["default", "bf16", "search"]
Fp8ParamGatherChoice = Literal["off", "on", "search"]
PrecisionAwareOptimizerChoice = Literal["off", "on", "search"]
ActivationOffloadChoice = Literal["off", "search"]
FsdpReshardChoice = Literal["default", "never", "search"]
CHOICES: dict[str, tuple[object, ...]] = {
    "interleave": get_args(InterleaveChoice),
    "sequence_parallel": get_args(SequenceParallelChoice),
    "overlap_grad_reduce": (True, False),
    "grad_reduce_dtype": get_args(GradReduceChoice),
    "fp8_param_gather": get_args(Fp8ParamGatherChoice),
    "precision_aware_optimizer": get_args(PrecisionAwareOptimizerChoice),
    "activation_offload": get_args(ActivationOffloadChoice),
    "fsdp_reshard": get_args(FsdpReshardChoice),
}
# The named formula that gives each default, and the file that defines it.
DEFAULT_FORMULAS: dict[str, str] = {
    "interleave": "search_interleave_default",
    "sequence_parallel": "search_sequence_parallel_default",
    "overlap_grad_reduce": "search_overlap_grad_reduce_default",
    "grad_reduce_dtype": "search_grad_reduce_dtype_default",
    "fp8_param_gather": "search_fp8_param_gather_default",
    "precision_aware_optimizer": "search_precision_aware_optimizer_default",
    "activation_offload": "search_activation_offload_default",
    "fsdp_reshard": "search_fsdp_reshard_default",
}
DEFAULTS_FILE = "rules/search/defaults.yaml"
# Not a choice: the grid `--activation-offload search` tries (each whole 1/parts of the layers),
# a named formula of DEFAULTS_FILE too, a whole number in OFFLOAD_PARTS_RANGE (at least two
# parts, or no count below all the layers; at most 64, which bounds the candidates it adds).
OFFLOAD_PARTS_FORMULA = "search_activation_offload_parts"
OFFLOAD_PARTS_RANGE = (2, 64)
# The flag of each choice, for messages (`plan --interleave off`).
FLAGS: dict[str, str] = {
    "interleave": "--interleave",
    "sequence_parallel": "--sequence-parallel-with-tp",
    "overlap_grad_reduce": "--overlap-grad-reduce",
    "grad_reduce_dtype": "--grad-reduce-dtype",
    "fp8_param_gather": "--fp8-param-gather",
    "precision_aware_optimizer": "--precision-aware-optimizer",
    "activation_offload": "--activation-offload",
    "fsdp_reshard": "--fsdp-reshard",
}
# The Layout values each choice of the memory options searches (Layout.grad_reduce_dtype,
# Layout.fp8_param_gather, Layout.precision_aware_optimizer), before a backend keeps those it
# runs (search_space.SearchOptions.on).
GRAD_REDUCE_DTYPES: dict[str, tuple[str, ...]] = {
    "default": ("default",),
    "bf16": ("bf16",),
    "search": ("default", "bf16"),
}
FP8_PARAM_GATHER: dict[str, tuple[bool, ...]] = {
    "off": (False,),
    "on": (True,),
    "search": (False, True),
}
PRECISION_AWARE_OPTIMIZER = FP8_PARAM_GATHER  # the same off / on / search over a switch
# Layout.fsdp_reshard's values, the faster first (search_space.memory_options)
FSDP_RESHARDS: dict[str, tuple[str, ...]] = {
    "default": ("default",),
    "never": ("never",),
    "search": ("never", "default"),
}
# The training precisions each memory option can be used with: bf16 gradients with 16-bit
# BF16 training (an FP8 run keeps --bf16; Megatron-LM arguments.py validate_args reads
# --grad-reduce-in-bf16 only under `if args.bf16:`), FP8 parameters with FP8 training
# (megatron/core/transformer/transformer_config.py: "fp8_param must be used together with fp8
# mode."). The backends' constraint rules refuse the other layouts; a request that asks for
# an option its precision cannot use is refused before the search.
PRECISIONS_OF: dict[str, tuple[str, ...]] = {
    "grad_reduce_dtype": ("bf16", "fp8"),
    "fp8_param_gather": ("fp8",),
}
# The layout dimension (models.kind.TrainedModel.layout_dims) a choice is about, if any.
DIMENSION: dict[str, tuple[str, str]] = {
    "interleave": ("vpp", "virtual pipeline stages"),
    "sequence_parallel": ("sp", "sequence parallelism"),
}


class SearchChoices(BaseModel):
    """What a request asks of the search's optional parts (None: the rule's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interleave: InterleaveChoice | None = Field(
        None, description="`search`: layouts with vpp > 1 are searched; `off`: vpp = 1 only."
    )
    sequence_parallel: SequenceParallelChoice | None = Field(
        None,
        description="Sequence parallelism on layouts with tp > 1: `search` (both ways), `on` "
        "or `off`. A pin (`--sequence-parallel`) fixes the layout field instead.",
    )
    overlap_grad_reduce: StrictBool | None = Field(
        None,
        description="The data-parallel gradient reduction overlapped with the backward in "
        "the files (Megatron-LM --overlap-grad-reduce, DeepSpeed overlap_comm).",
    )
    grad_reduce_dtype: GradReduceChoice | None = Field(
        None,
        description="The type gradients are reduced in: `default` (each backend's own), "
        "`bf16` (Megatron-LM --grad-reduce-in-bf16, DeepSpeed communication_data_type bf16) "
        "on the backends that can, or `search` (both).",
    )
    fp8_param_gather: Fp8ParamGatherChoice | None = Field(
        None,
        description="FP8 parameters (Megatron-LM --fp8-param-gather, precision fp8): `off`, "
        "`on` (on every layout of a backend that has them) or `search` (both).",
    )
    precision_aware_optimizer: PrecisionAwareOptimizerChoice | None = Field(
        None,
        description="Adam's moments in bf16 (Megatron-LM --use-precision-aware-optimizer): "
        "`off`, `on` (on every layout of a backend that has it) or `search` (both).",
    )
    activation_offload: ActivationOffloadChoice | None = Field(
        None,
        description="Activation offloading to host memory (Megatron-LM "
        "--cpu-offloading-num-layers): `off`, or `search` (layouts that offload eighths of the "
        "layers tried beside those that do not).",
    )
    fsdp_reshard: FsdpReshardChoice | None = Field(
        None,
        description="FSDP2's reshard policy on the FSDP2 layouts of torchtitan and Accelerate: "
        "`default` (the backend's own), `never` (every block gathered from its forward to its "
        "backward) or `search` (both).",
    )

    def given(self) -> dict[str, object]:
        """The choices the request makes, in field order."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ChosenOptions(BaseModel):
    """Each choice of a request as resolved, and where it came from (plan.json `search`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interleave: InterleaveChoice
    interleave_source: str
    sequence_parallel: SequenceParallelChoice
    sequence_parallel_source: str
    overlap_grad_reduce: StrictBool
    overlap_grad_reduce_source: str
    grad_reduce_dtype: GradReduceChoice
    grad_reduce_dtype_source: str
    fp8_param_gather: Fp8ParamGatherChoice
    fp8_param_gather_source: str
    precision_aware_optimizer: PrecisionAwareOptimizerChoice
    precision_aware_optimizer_source: str
    activation_offload: ActivationOffloadChoice
    activation_offload_source: str
    activation_offload_parts: StrictInt
    activation_offload_parts_source: str
    fsdp_reshard: FsdpReshardChoice
    fsdp_reshard_source: str


def search_choices(value: SearchChoices | Mapping[str, Any] | None) -> SearchChoices:
    """`plan(search=...)`: a SearchChoices, a mapping of its fields, or None (every default);
    an InputError naming the field otherwise."""
    if isinstance(value, SearchChoices):
        return value
    try:
        return SearchChoices(**dict(value or {}))
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        if isinstance(exc, ValidationError):
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InputError(f"search.{where}: {first['msg']}") from None
        raise InputError(f"search: expected a mapping of choices, got {value!r}") from None


def choose(
    choices: SearchChoices,
    rules: RuleSet,
    model: TrainedModel,
    cluster: Cluster,
    *,
    global_batch: int,
    seq_len: int,
    precision: str = "bf16",
    pins: Mapping[str, object] | None = None,
    bounds: Mapping[str, int] | None = None,
    flash_attention: bool = True,
    memory_headroom: MemoryHeadroom = NO_HEADROOM,
) -> ChosenOptions:
    """Every choice of the request: the value given, else its rule's default (evaluated on the
    request's model.*, cluster.* and train.* values with `rules`). A choice about a dimension
    the model lacks (a graph model's vpp or sp) is `off`. An InputError when a given choice
    and a pin or bound (`pins`, `bounds`: SearchLimits' given ones) exclude each other, or
    when a given memory option cannot be used with `precision` (PRECISIONS_OF)."""
    _check_against_pins(choices, pins or {}, bounds or {})
    check_choice("precision", precision, get_args(Precision))
    _check_against_precision(choices, precision)
    env = CostModel(rules, model.kind).base_env(
        model,
        cluster,
        global_batch=global_batch,
        seq_len=seq_len,
        precision=cast(Precision, precision),
        flash_attention=flash_attention,
        memory_headroom=memory_headroom,
    )
    given = choices.given()
    resolved: dict[str, object] = {}
    for field, formula in DEFAULT_FORMULAS.items():
        dimension = DIMENSION.get(field)
        value: object
        if dimension is not None and dimension[0] not in model.layout_dims:
            value, source = "off", f"a {model.kind} model has no {dimension[1]}"
        elif field in given:
            value, source = given[field], f"{FLAGS[field]} (requested)"
        else:
            value, source = _default(rules, formula, field, env), _default_source(rules, formula)
        resolved |= {field: value, f"{field}_source": source}
    resolved |= {
        "activation_offload_parts": _offload_parts(rules, env),
        "activation_offload_parts_source": _default_source(rules, OFFLOAD_PARTS_FORMULA),
    }
    return ChosenOptions.model_validate(resolved)


def _evaluated(rules: RuleSet, formula: str, env: Mapping[str, Any]) -> object:
    """The value of the named formula `formula` for the request."""
    try:
        return named_formula(rules, formula).evaluate(env)
    except FormulaError as exc:
        raise InputError(
            f"{exc.message} (a search default is evaluated once per request, on its model.*, "
            "cluster.* and train.* values: no plan.*)",
            _overlay_where(rules, formula) or exc.where,
        ) from None


def _offload_parts(rules: RuleSet, env: Mapping[str, Any]) -> int:
    """OFFLOAD_PARTS_FORMULA for the request, a whole number in OFFLOAD_PARTS_RANGE."""
    value = _evaluated(rules, OFFLOAD_PARTS_FORMULA, env)
    low, high = OFFLOAD_PARTS_RANGE
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not low <= value <= high
        or value != int(value)
    ):
        raise InputError(
            f"{OFFLOAD_PARTS_FORMULA} gives {value!r}; it must be a whole number from {low} to "
            f"{high}",
            _overlay_where(rules, OFFLOAD_PARTS_FORMULA),
        )
    return int(value)


def _default(rules: RuleSet, formula: str, field: str, env: Mapping[str, Any]) -> object:
    """The value of `formula` for the request, checked to be one of the choice's values."""
    allowed = CHOICES[field]
    value = _evaluated(rules, formula, env)
    if not any(value == a and type(value) is type(a) for a in allowed):
        shown = ", ".join(repr(a) if isinstance(a, str) else str(a).lower() for a in allowed)
        raise InputError(
            f"{formula} gives {value!r}; a default of {FLAGS[field]} is one of {shown}",
            _overlay_where(rules, formula),
        )
    return value


def _default_source(rules: RuleSet, formula: str) -> str:
    """`default: rule NAME (rules/search/defaults.yaml)`, or the overlay that redefined it (no
    path: plan.json keeps none)."""
    where = DEFAULTS_FILE if _overlay_where(rules, formula) is None else "a --rules overlay"
    return f"default: rule {formula} ({where})"


def _overlay_where(rules: RuleSet, formula: str) -> SourceRef | None:
    """Where the last `--rules` overlay redefined `formula` (None: the built-in rule's own)."""
    redefined = [o for o in rules.overrides if o.id == formula and not o.disabled]
    return redefined[-1].by.where if redefined else None


def _check_against_pins(
    choices: SearchChoices, pins: Mapping[str, object], bounds: Mapping[str, int]
) -> None:
    """A given choice that excludes every layout its pins or bounds allow: an InputError."""
    vpp = max(_size(pins.get("vpp")), _size(bounds.get("min_vpp")))
    if choices.interleave == "off" and vpp > 1:
        limit = "pin --vpp" if _size(pins.get("vpp")) > 1 else "bound --min-vpp"
        raise InputError(
            f"search option {FLAGS['interleave']} off excludes the {limit} {vpp} "
            "(vpp > 1 interleaves)"
        )
    pinned = pins.get("sequence_parallel")
    if (choices.sequence_parallel, pinned) in (("off", True), ("on", False)):
        raise InputError(
            f"search option {FLAGS['sequence_parallel']} {choices.sequence_parallel} excludes "
            f"the pin --sequence-parallel {str(pinned).lower()} (give one: the pin fixes the "
            "layout field, the option applies to layouts with tp > 1)"
        )


def _check_against_precision(choices: SearchChoices, precision: str) -> None:
    """A given memory option (not its default value) that no layout of `precision` can use:
    an InputError naming the precision it needs."""
    unused = {"grad_reduce_dtype": "default", "fp8_param_gather": "off"}
    for field, off in unused.items():
        asked = getattr(choices, field)
        if asked not in (None, off) and precision not in PRECISIONS_OF[field]:
            needs = " or ".join(PRECISIONS_OF[field])
            raise InputError(
                f"search option {FLAGS[field]} {asked} needs --precision {needs} "
                f"(the plan trains in {precision})"
            )


def _size(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1
