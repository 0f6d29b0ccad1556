"""Pins and bounds: the parts of a layout a planning request fixes or limits.

This module owns what a user may fix (`Pins`: any layout field, e.g. tp = 8 or recompute
selective) or bound (`Bounds`: min/max of a size, e.g. tp <= 8 or dp >= 4), the check that they
agree with each other and with the request's sizes, and the one test the search applies to every
value it enumerates (`SearchLimits.allows`). The search never visits a value a pin or bound
excludes, so such a layout is not counted as rejected: it is not in the space. Which pinned
layout may run is still for the constraint rules to say.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)

from parplan_gen.cost.estimate import MemoryHeadroom, cluster_env
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import SIZE_LIMITS, Precision, Recompute
from parplan_gen.inputs.defaults import BOUNDED_SIZES, GIB, ZERO_STAGES
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.validation import check_choice
from parplan_gen.models.transformer_shape import MAX_LAYERS
from parplan_gen.planning.search_choices import (
    ActivationOffloadChoice,
    ChosenOptions,
    Fp8ParamGatherChoice,
    FsdpReshardChoice,
    GradReduceChoice,
    InterleaveChoice,
    PrecisionAwareOptimizerChoice,
    SequenceParallelChoice,
)
from parplan_gen.rules.request_names import MEMORY_HEADROOM_SHARE_DEFAULT
from parplan_gen.rules.ruleset import RuleSet

_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
DEFAULT_HEADROOM = MEMORY_HEADROOM_SHARE_DEFAULT  # rules/constraints/headroom.yaml
# The default headroom's names before it was a share of the tensors: an overlay that still
# defines one would be ignored, so it is refused.
RETIRED_HEADROOM = ("memory_headroom_default", "memory_headroom_fraction_default")
Size = StrictInt  # a whole number from 1 to layout.SIZE_LIMITS[field]


class Pins(BaseModel):
    """Layout fields a request fixes (None: searched). Named as the Layout names them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dp: Size | None = Field(None, ge=1, le=SIZE_LIMITS["dp"])
    tp: Size | None = Field(None, ge=1, le=SIZE_LIMITS["tp"])
    pp: Size | None = Field(None, ge=1, le=SIZE_LIMITS["pp"])
    cp: Size | None = Field(None, ge=1, le=SIZE_LIMITS["cp"])
    ep: Size | None = Field(None, ge=1, le=SIZE_LIMITS["ep"])
    etp: Size | None = Field(None, ge=1, le=SIZE_LIMITS["etp"])
    vpp: Size | None = Field(None, ge=1, le=SIZE_LIMITS["vpp"])
    mbs: Size | None = Field(None, ge=1, le=SIZE_LIMITS["mbs"])
    zero_stage: StrictInt | None = Field(None, ge=min(ZERO_STAGES), le=max(ZERO_STAGES))
    distributed_optimizer: StrictBool | None = None
    sequence_parallel: StrictBool | None = None
    recompute: Recompute | None = None
    offload_layers: StrictInt | None = Field(None, ge=0, le=MAX_LAYERS)

    def given(self) -> dict[str, object]:
        """The pinned fields, in the Layout's order."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Bounds(BaseModel):
    """Inclusive bounds on sizes (None: unbounded): `max_tp: 8` keeps tp <= 8."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_dp: Size | None = Field(None, ge=1)
    max_dp: Size | None = Field(None, ge=1)
    min_tp: Size | None = Field(None, ge=1)
    max_tp: Size | None = Field(None, ge=1)
    min_pp: Size | None = Field(None, ge=1)
    max_pp: Size | None = Field(None, ge=1)
    min_cp: Size | None = Field(None, ge=1)
    max_cp: Size | None = Field(None, ge=1)
    min_ep: Size | None = Field(None, ge=1)
    max_ep: Size | None = Field(None, ge=1)
    min_vpp: Size | None = Field(None, ge=1)
    max_vpp: Size | None = Field(None, ge=1)
    min_mbs: Size | None = Field(None, ge=1)
    max_mbs: Size | None = Field(None, ge=1)

    def given(self) -> dict[str, int]:
        """The bounds set, in field order."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


def flag(name: str) -> str:
    """`max_tp` -> `--max-tp`, `zero_stage` -> `--zero`: the flag a user typed."""
    return "--zero" if name == "zero_stage" else "--" + name.replace("_", "-")


class SearchLimits(BaseModel):
    """The pins and bounds of one request, checked to agree once, when built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pins: Pins = Field(default_factory=Pins)
    bounds: Bounds = Field(default_factory=Bounds)

    @model_validator(mode="after")
    def _agree(self) -> SearchLimits:
        problem = self.conflict()
        if problem:
            raise ValueError(problem)
        return self

    def conflict(self) -> str | None:
        """Why the pins and bounds exclude each other (a min above its max, a pin outside its
        bounds, ZeRO with the distributed optimizer), or None."""
        pins, bounds = self.pins.given(), self.bounds.given()
        for size in BOUNDED_SIZES:
            low, high = bounds.get(f"min_{size}", 1), bounds.get(f"max_{size}")
            if high is not None and low > high:
                return f"{flag('min_' + size)} {low} > {flag('max_' + size)} {high}"
            pinned = pins.get(size)
            if isinstance(pinned, int) and (pinned < low or (high is not None and pinned > high)):
                shown = f"[{low}, {high if high is not None else 'any'}]"
                return f"{flag(size)} {pinned} is outside its bounds {shown}"
        if pins.get("distributed_optimizer") and pins.get("zero_stage", 0) != 0:
            return (
                f"--zero {pins['zero_stage']} and --distributed-optimizer exclude each other "
                "(Megatron's distributed optimizer is ZeRO-1 of its own; docs/backends.md)"
            )
        return None

    @property
    def active(self) -> bool:
        """Some pin or bound is set."""
        return bool(self.pins.given() or self.bounds.given())

    def allows(self, field: str, value: object) -> bool:
        """Whether the search may use `value` for layout field `field`."""
        pinned = getattr(self.pins, field, None)
        if pinned is not None and pinned != value:
            return False
        if field not in BOUNDED_SIZES:
            return True
        low, high = getattr(self.bounds, f"min_{field}"), getattr(self.bounds, f"max_{field}")
        return (low is None or value >= low) and (high is None or value <= high)

    def describe(self) -> str:
        """`--tp 8 --max-pp 4`: the pins and bounds as flags, for messages."""
        parts = [f"{flag(k)} {_shown(v)}" for k, v in self.pins.given().items()]
        parts += [f"{flag(k)} {v}" for k, v in self.bounds.given().items()]
        return " ".join(parts)

    def world_problem(self, world: int, global_batch: int) -> str | None:
        """Why no layout of `world` GPUs and `global_batch` can meet the pinned sizes, or None:
        each pinned size divides the world (dp x tp x pp x cp = world) and the batch
        (mbs x dp divides it), and together they multiply to no more than it."""
        pins = self.pins
        product = 1
        for size in ("dp", "tp", "pp", "cp"):
            value = getattr(pins, size)
            if value is None:
                continue
            if world % value:
                return f"{flag(size)} {value}: dp x tp x pp x cp = {world} GPUs, {value} does not divide {world}"
            product *= value
        if world % product:
            return f"{self.describe()}: the pinned sizes multiply to {product}, which does not divide {world} GPUs"
        per_replica = global_batch // pins.dp if pins.dp and global_batch % pins.dp == 0 else None
        if pins.dp is not None and per_replica is None:
            return f"--dp {pins.dp}: the global batch {global_batch} does not divide by dp"
        if pins.mbs is not None and global_batch % pins.mbs:
            return f"--mbs {pins.mbs}: the global batch {global_batch} does not divide by the micro-batch"
        if pins.mbs is not None and per_replica is not None and per_replica % pins.mbs:
            return f"--mbs {pins.mbs}: the batch per replica {per_replica} (global {global_batch} / dp {pins.dp}) does not divide by it"
        return None


def _shown(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def search_limits(
    pins: Pins | Mapping[str, Any] | None = None, bounds: Bounds | Mapping[str, Any] | None = None
) -> SearchLimits:
    """SearchLimits from mappings or models; an InputError naming the flag when they conflict."""
    try:
        return SearchLimits(
            pins=pins if isinstance(pins, Pins) else Pins(**(pins or {})),
            bounds=bounds if isinstance(bounds, Bounds) else Bounds(**(bounds or {})),
        )
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        errors = getattr(exc, "errors", None)
        if callable(errors):
            first = errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise InputError(f"{where}: {message}" if where else message) from None
        raise InputError(str(exc)) from None


class Headroom(BaseModel):
    """Memory a plan keeps free per GPU: GiB, a fraction of the GPU's memory, or the rule's
    default when neither is given (`memory_headroom_share_default` of each layout's tensors,
    rules/constraints/headroom.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gib: float | None = Field(None, ge=0, allow_inf_nan=False)
    fraction: float | None = Field(None, ge=0, lt=1, allow_inf_nan=False)

    def text(self) -> str:
        """`4 GiB`, `10%` or `default`: as a user would type it."""
        if self.gib is not None:
            return f"{self.gib:g} GiB"
        return "default" if self.fraction is None else f"{self.fraction * 100:g}%"


def parse_headroom(value: object) -> Headroom:
    """`--headroom` / `headroom=`: a number of GiB (`4`, `4GiB`, `4 GiB`), a percentage of the
    GPU's memory (`10%`), a Headroom, or None or `default` (the rule's default). An InputError
    otherwise."""
    if value is None or isinstance(value, Headroom):
        return value or Headroom()
    if isinstance(value, str) and value.strip() == "default":
        return Headroom()
    problem = (
        "headroom: expected GiB >= 0 (4 or 4GiB), a percentage from 0 to below 100 (10%) or "
        "default, "
        f"got {value!r}"
    )
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return Headroom(gib=float(value))
        if isinstance(value, str):
            text = value.strip()
            number = text.removesuffix("%").removesuffix("GiB").strip()
            if _DECIMAL.fullmatch(number):
                if text.endswith("%"):
                    return Headroom(fraction=float(number) / 100)
                return Headroom(gib=float(number))
    except ValueError:
        pass
    raise InputError(problem)


class HeadroomRecord(BaseModel):
    """The pins, bounds and memory headroom of a request (plan.json `search` without the
    search options, which are resolved with the headroom: `with_options`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pins: dict[str, StrictBool | StrictInt | str] = Field(
        default_factory=dict, description="Layout fields fixed (`plan --tp 8`...)."
    )
    bounds: dict[str, StrictInt] = Field(
        default_factory=dict, description="Size bounds (`plan --max-tp 8`...)."
    )
    headroom: str = Field(description="As asked: `default`, `4 GiB` or `10%`.")
    headroom_bytes: int = Field(
        ge=0, description="Memory per GPU kept free whatever the layout, bytes."
    )
    headroom_share: float = Field(
        0.0,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Share of each layout's tensors kept free besides (the default headroom); "
        "0 in plan.json written before.",
    )
    headroom_source: str = Field(description="Where the headroom came from.")

    @property
    def memory_headroom(self) -> MemoryHeadroom:
        """What the memory rule keeps free, as it reads it."""
        return MemoryHeadroom(float(self.headroom_bytes), self.headroom_share)

    def with_options(self, chosen: ChosenOptions) -> SearchRecord:
        """The search record: this one with the request's search options."""
        return SearchRecord(**{**self.model_dump(), **chosen.model_dump()})


class SearchRecord(HeadroomRecord):
    """plan.json `search`: the pins, bounds, memory headroom and search options (interleaving,
    sequence parallelism, the gradient-reduction overlap, the gradients' reduce type, FP8
    parameters, FSDP2's reshard policy: planning/search_choices.py) the plan was searched
    under; every key is required but those added since, which read as what a plan.json written
    before them was searched with."""

    interleave: InterleaveChoice = Field(
        description="`search`: layouts with vpp > 1 searched; `off`: not."
    )
    interleave_source: str = Field(description="Where `interleave` came from.")
    sequence_parallel: SequenceParallelChoice = Field(
        description="Sequence parallelism with tp > 1: `search`, `on` or `off`."
    )
    sequence_parallel_source: str = Field(description="Where `sequence_parallel` came from.")
    overlap_grad_reduce: StrictBool = Field(
        description="Gradient reduction overlapped with the backward in the files."
    )
    overlap_grad_reduce_source: str = Field(description="Where `overlap_grad_reduce` came from.")
    grad_reduce_dtype: GradReduceChoice = Field(
        description="Gradient reduce types searched: `default`, `bf16` or `search` (both)."
    )
    grad_reduce_dtype_source: str = Field(description="Where `grad_reduce_dtype` came from.")
    fp8_param_gather: Fp8ParamGatherChoice = Field(
        description="FP8 parameters searched: `off`, `on` or `search` (both)."
    )
    fp8_param_gather_source: str = Field(description="Where `fp8_param_gather` came from.")
    precision_aware_optimizer: PrecisionAwareOptimizerChoice = Field(
        description="bf16 optimizer states searched: `off`, `on` or `search` (both)."
    )
    precision_aware_optimizer_source: str = Field(
        description="Where `precision_aware_optimizer` came from."
    )
    activation_offload: ActivationOffloadChoice = Field(
        description="Activation offloading searched: `off` or `search`."
    )
    activation_offload_source: str = Field(description="Where `activation_offload` came from.")
    activation_offload_parts: StrictInt = Field(
        description="With `activation_offload` `search`, the layers offloaded tried are each "
        "whole 1/parts of them."
    )
    activation_offload_parts_source: str = Field(
        description="Where `activation_offload_parts` came from."
    )
    fsdp_reshard: FsdpReshardChoice = Field(
        "default",
        description="FSDP2 reshard policies searched: `default`, `never` or `search` (both); "
        "`default` in plan.json written before the choice.",
    )
    fsdp_reshard_source: str = Field(
        "not recorded (plan.json written before the choice)",
        description="Where `fsdp_reshard` came from.",
    )

    def options(self) -> ChosenOptions:
        """The search options recorded."""
        return ChosenOptions(**{k: getattr(self, k) for k in ChosenOptions.model_fields})


def headroom_record(
    headroom: Headroom, limits: SearchLimits, cluster: Cluster, rules: RuleSet, precision: str
) -> HeadroomRecord:
    """plan.json `search`'s pins, bounds and the headroom: bytes for a `--headroom` given, else
    the rule's default share of each layout's tensors (`memory_headroom_share_default`; its
    cluster.* names at `precision`, the request's: a GPU has no peak at a precision it
    lacks)."""
    check_choice("precision", precision, get_args(Precision))
    for name in RETIRED_HEADROOM:
        if name in rules.formula_notes:
            raise InputError(
                f"{name} is no longer read: the default headroom is {DEFAULT_HEADROOM}, a share "
                "of each layout's tensors (rules/constraints/headroom.yaml)",
                rules.formula_notes[name][1].where,
            )
    memory = cluster.gpu.memory_bytes
    share = 0.0
    if headroom.gib is not None:
        amount, source = headroom.gib * GIB, "--headroom (GiB)"
    elif headroom.fraction is not None:
        amount, source = headroom.fraction * memory, "--headroom (share of the GPU's memory)"
    else:
        env = cluster_env(cluster, cast(Precision, precision))
        where = SourceRef(DEFAULT_HEADROOM)
        amount = 0.0
        share = float(rules.library.compile(DEFAULT_HEADROOM, where, "estimate").evaluate(env))  # type: ignore[arg-type]
        source = f"default: rule {DEFAULT_HEADROOM} (rules/constraints/headroom.yaml)"
        if not 0 <= share < 1:
            raise InputError(
                f"{DEFAULT_HEADROOM} gives a memory headroom of {share:g} of the tensors "
                "(valid: from 0 to below 1)",
                _overlay_where(rules),
            )
    if amount >= memory:
        raise InputError(
            f"--headroom {headroom.text()}: {amount / GIB:.1f} GiB is not below the GPU's "
            f"{memory / GIB:.1f} GiB"
        )
    return HeadroomRecord(
        pins=limits.pins.given(),
        bounds=limits.bounds.given(),
        headroom=headroom.text(),
        headroom_bytes=round(amount),
        headroom_share=share,
        headroom_source=source,
    )


def _overlay_where(rules: RuleSet) -> SourceRef | None:
    """Where the last `--rules` overlay redefined a formula of the default headroom (None: the
    built-in rules' own)."""
    redefined = [o for o in rules.overrides if o.id == DEFAULT_HEADROOM and not o.disabled]
    return redefined[-1].by.where if redefined else None
