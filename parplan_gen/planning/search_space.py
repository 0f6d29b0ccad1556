"""The planner's candidate space: which layouts exist to be searched, and one request.

This module owns what a candidate is made of and how the sizes are enumerated: every
dp * tp * pp * cp = world size (for a mixture of experts, the expert groups etp x ep the
backend forms: `expert_groups`), vpp = 1 or a divisor (> 1) of a stage's layers (with the
embedding and the loss counted or not), micro-batch sizes that divide the per-replica batch, and the
memory options: DeepSpeed ZeRO 0-3 or Megatron's distributed optimizer, recomputation none /
selective / full, sequence parallelism when tp > 1, the gradients' reduce type and FP8
parameters. Whether vpp > 1 is searched, whether sequence parallelism is tried both ways, fixed
on or off, and which reduce types and FP8-parameter settings are tried are the request's search
options (planning/search_choices.py, defaults in rules/search/defaults.yaml).
Which of these may run is for the constraint rules to say, not for this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, get_args

from parplan_gen.cost.estimate import NO_HEADROOM, MemoryHeadroom
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import (
    DEFAULT_FSDP_RESHARD,
    PLAN_FIELDS,
    Layout,
    Precision,
    check_sizes,
    plan_cross_entropy_fusion,
    plan_loss_compiled,
)
from parplan_gen.inputs.defaults import ZERO_FULL
from parplan_gen.inputs.errors import InputError, shown_value
from parplan_gen.inputs.validation import check_choice
from parplan_gen.models.kind import ANY_BACKEND, BACKEND_NAMES, BackendName, TrainedModel
from parplan_gen.planning.backends import BACKENDS, Capabilities
from parplan_gen.planning.pins import SearchLimits
from parplan_gen.planning.search_choices import (
    FLAGS,
    FP8_PARAM_GATHER,
    FSDP_RESHARDS,
    GRAD_REDUCE_DTYPES,
    PRECISION_AWARE_OPTIMIZER,
    ChosenOptions,
)

Objective = Literal["time", "memory"]
NO_LIMITS = SearchLimits()  # a request with no pin and no bound
RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")  # least to most recomputation


@dataclass(frozen=True)
class SearchOptions:
    """Which optional parts of the candidate space are searched."""

    interleave: bool = True  # try vpp > 1
    sequence_parallel_fixed: bool = False  # True: sequence parallelism exactly when tp > 1
    # The backends searched, in order; `backend` is the one a search over its part runs for
    # (planning/backends: what each runs).
    backends: tuple[BackendName, ...] = BACKEND_NAMES
    backend: BackendName = "megatron"
    pipeline: bool = True  # try pp > 1
    sequence_parallel: bool = True  # try sequence parallelism when tp > 1
    recompute: tuple[str, ...] = RECOMPUTE  # recomputation choices, least first
    limits: SearchLimits = NO_LIMITS  # the request's pins and bounds (planning/pins.py)
    # The gradients' reduce types and FP8-parameter settings tried (search_choices: the
    # frameworks' defaults unless the request asks), each kept where the backend runs it.
    grad_reduce_dtypes: tuple[str, ...] = ("default",)
    fp8_param_gather: tuple[bool, ...] = (False,)
    precision_aware_optimizer: tuple[bool, ...] = (False,)
    # Layers offloaded to host memory (Layout.offload_layers), none first.
    offload_layers: tuple[int, ...] = (0,)
    # FSDP2's reshard policies tried (Layout.fsdp_reshard), the faster first: `never` on the
    # backends that set it, for their FSDP2 (zero 3) layouts (memory_options).
    fsdp_reshard: tuple[str, ...] = (DEFAULT_FSDP_RESHARD,)
    # The gradient reduction overlapped with the backward (Layout.overlap_grad_reduce); off
    # keeps the shardings whose files have the switch (`optimizers`).
    overlap_grad_reduce: bool = True

    @property
    def runs(self) -> Capabilities:
        """What `backend` runs."""
        return BACKENDS[self.backend]

    @property
    def optimizers(self) -> tuple[tuple[int, bool], ...]:
        """(zero_stage, distributed_optimizer) pairs searched: with the gradient reduction's
        overlap off, only those whose files can turn it off (Capabilities.overlap_switch)."""
        runs = self.runs
        if self.overlap_grad_reduce:
            return runs.optimizers
        return tuple(o for o in runs.optimizers if o in runs.overlap_switch)

    def on(self, backend: BackendName) -> SearchOptions:
        """These options for the search over `backend`'s part of the space: what the request
        allows and the backend runs."""
        runs = BACKENDS[backend]
        return replace(
            self,
            backend=backend,
            interleave=self.interleave and runs.interleave,
            pipeline=self.pipeline and runs.pipeline,
            sequence_parallel=self.sequence_parallel and runs.sequence_parallel,
            recompute=tuple(r for r in self.recompute if r in runs.recompute),
            # a backend without the asked type or FP8 parameters runs its default (as one
            # without sequence parallelism runs none)
            grad_reduce_dtypes=tuple(
                d for d in self.grad_reduce_dtypes if d in runs.grad_reduce_dtypes
            )
            or ("default",),
            fp8_param_gather=_run(self.fp8_param_gather, runs.fp8_param_gather),
            precision_aware_optimizer=_run(
                self.precision_aware_optimizer, runs.precision_aware_optimizer
            ),
            # a pinned count a backend cannot offload leaves it nothing to search
            offload_layers=_run(
                self.offload_layers,
                runs.activation_offload,
                (0,) if self.limits.pins.offload_layers is None else (),
            ),
            # a backend without FSDP2's policy runs its default (as for the reduce type)
            fsdp_reshard=tuple(
                r for r in self.fsdp_reshard if runs.fsdp_reshard or r == DEFAULT_FSDP_RESHARD
            )
            or (DEFAULT_FSDP_RESHARD,),
        )

    @classmethod
    def for_model(
        cls,
        model: TrainedModel,
        chosen: ChosenOptions,
        backends: str | Iterable[str] = ANY_BACKEND,
        limits: SearchLimits = NO_LIMITS,
    ) -> SearchOptions:
        """What the planner searches for `model`: the layout dimensions and recomputation it
        has, on the backends asked for (`any`: every backend that trains the model), with the
        request's search options (`chosen`: interleaving, sequence parallelism with tp > 1;
        planning/search_choices.py), within its pins and bounds (`limits`; a pin wins over an
        option: a pinned vpp > 1 turns interleaving on, a pinned sequence_parallel fixes it).
        An InputError for a backend that does not train it."""
        dims = model.layout_dims
        searched = backends_for(model, backends)
        _check_memory_options(chosen, searched, limits)
        interleave = chosen.interleave == "search" or (limits.pins.vpp or 1) > 1
        sp_pin = limits.pins.sequence_parallel
        sequence_parallel = chosen.sequence_parallel != "off" or sp_pin is True
        return cls(
            limits=limits,
            interleave=interleave and "vpp" in dims,
            sequence_parallel_fixed=chosen.sequence_parallel == "on" and "sp" in dims,
            backends=searched,
            pipeline="pp" in dims,
            sequence_parallel=sequence_parallel and "sp" in dims,
            recompute=model.recompute_choices,
            grad_reduce_dtypes=GRAD_REDUCE_DTYPES[chosen.grad_reduce_dtype],
            fp8_param_gather=FP8_PARAM_GATHER[chosen.fp8_param_gather],
            precision_aware_optimizer=PRECISION_AWARE_OPTIMIZER[chosen.precision_aware_optimizer],
            offload_layers=offload_options(model.pipeline_layers, chosen, limits),
            fsdp_reshard=FSDP_RESHARDS[chosen.fsdp_reshard],
            overlap_grad_reduce=chosen.overlap_grad_reduce,
        )


def _run(
    values: tuple[Any, ...], has_it: bool, otherwise: tuple[Any, ...] = (False,)
) -> tuple[Any, ...]:
    """The values of a memory option a backend runs: all where it `has_it`, else only the off
    value (False, 0), and `otherwise` when none is left."""
    return tuple(v for v in values if has_it or not v) or otherwise


def offload_options(layers: int, chosen: ChosenOptions, limits: SearchLimits) -> tuple[int, ...]:
    """The layers offloaded that the search tries: the pinned count, else none, and with
    `--activation-offload search` each whole 1/parts of `layers` below all of them (parts:
    rules/search/defaults.yaml search_activation_offload_parts)."""
    pinned = limits.pins.offload_layers
    if pinned is not None:
        return (pinned,)
    if chosen.activation_offload == "off":
        return (0,)
    parts = chosen.activation_offload_parts
    counts = (layers * k // parts for k in range(1, parts))
    return (0, *sorted({n for n in counts if 0 < n < layers}))


# The memory options a request can ask for outright (the value), and what a backend without
# them cannot do.
_SWITCHES = {
    "fp8_param_gather": ("on", "cannot gather FP8 parameters"),
    "precision_aware_optimizer": ("on", "has no precision-aware optimizer"),
    "fsdp_reshard": ("never", "has no FSDP2 reshard policy to set"),
}


def _check_memory_options(
    chosen: ChosenOptions, backends: tuple[BackendName, ...], limits: SearchLimits
) -> None:
    """FP8 parameters, bf16 optimizer states or FSDP2's blocks kept gathered asked for
    outright (`--fp8-param-gather on`, `--precision-aware-optimizer on`, `--fsdp-reshard
    never`) where none of `backends` has them: an InputError naming
    the backends that do, rather than a plan that silently leaves them out
    (`SearchOptions.on` drops what a backend lacks). The gradients' reduce type is not checked
    so: a backend without the choice reduces in its own type, which may be the one asked
    (Accelerate's FSDP2 reduces in 16 bits). So are layers offloaded by a pin (`--offload-layers
    N`) where none of `backends` offloads activations, and the gradient reduction's overlap
    turned off (`--overlap-grad-reduce off`) where none of `backends` can."""
    if not chosen.overlap_grad_reduce:
        _check_overlap_off(backends, limits)
    if limits.pins.offload_layers and not any(BACKENDS[b].activation_offload for b in backends):
        others = [b for b in BACKEND_NAMES if BACKENDS[b].activation_offload]
        raise InputError(
            f"--offload-layers {limits.pins.offload_layers}: {', '.join(backends)} does not "
            f"offload activations (only {', '.join(others)} does; docs/backends.md)"
        )
    for field, (asked, lacks) in _SWITCHES.items():
        if getattr(chosen, field) != asked:
            continue
        if any(getattr(BACKENDS[b], field) for b in backends):
            continue
        others = [b for b in BACKEND_NAMES if getattr(BACKENDS[b], field)]
        raise InputError(
            f"{FLAGS[field]} {asked}: {', '.join(backends)} {lacks} (only {', '.join(others)} "
            "does; docs/backends.md)"
        )


def _check_overlap_off(backends: tuple[BackendName, ...], limits: SearchLimits) -> None:
    """An InputError where the gradient reduction's overlap is asked off but no sharding of
    `backends` the pins allow has the switch (Capabilities.overlap_switch): the search would
    have nothing to try, and its refusals would not say why."""
    pins = limits.pins
    if any(
        pins.zero_stage in (None, zero) and pins.distributed_optimizer in (None, distributed)
        for backend in backends
        for zero, distributed in BACKENDS[backend].overlap_switch
    ):
        return
    flag = f"{FLAGS['overlap_grad_reduce']} off"
    if any(BACKENDS[b].overlap_switch for b in backends):  # a pin leaves out those with it
        pinned = (
            "the distributed optimizer" if pins.distributed_optimizer else f"ZeRO-{pins.zero_stage}"
        )
        raise InputError(
            f"{flag}: {pinned} on {', '.join(backends)} has no switch for the gradient "
            "reduction's overlap (Megatron-LM's DDP and distributed optimizer and DeepSpeed "
            "ZeRO 1-3 have; docs/backends.md)"
        )
    others = [b for b in BACKEND_NAMES if BACKENDS[b].overlap_switch]
    raise InputError(
        f"{flag}: {', '.join(backends)} always overlaps the gradient reduction with the "
        f"backward (only {', '.join(others)} can reduce after it; docs/backends.md)"
    )


def backends_for(model: TrainedModel, asked: str | Iterable[str]) -> tuple[BackendName, ...]:
    """The backends of `asked` (a name, `any`, or several names) in the model's order; an
    InputError for an unknown name or one that does not train the model."""
    names = [asked] if isinstance(asked, str) else list(asked)
    if not names or ANY_BACKEND in names:
        return model.backends
    for name in names:
        check_choice("backend", name, (*BACKEND_NAMES, ANY_BACKEND))
        if name not in model.backends:
            raise InputError(
                f"--backend {name}: {model.name} is trained by {', '.join(model.backends)} "
                "only (docs/backends.md)"
            )
    return tuple(b for b in model.backends if b in names)


@dataclass(frozen=True)
class Request:
    """One planning request."""

    spec: TrainedModel
    cluster: Cluster
    global_batch: int
    seq_len: int
    precision: Precision = "bf16"
    objective: Objective = "time"
    top: int = 5
    flash_attention: bool = True
    options: SearchOptions = SearchOptions()
    # what the memory rules keep free (plan --headroom)
    memory_headroom: MemoryHeadroom = NO_HEADROOM

    def __post_init__(self) -> None:
        check_sizes(global_batch=self.global_batch, seq_len=self.seq_len)
        check_choice("precision", self.precision, get_args(Precision))
        check_choice("objective", self.objective, get_args(Objective))
        if isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 1:
            raise InputError(f"top: expected a whole number >= 1, got {shown_value(self.top)}")

    @property
    def layers(self) -> int:
        """Layers a pipeline splits (1 for a graph model, which is not pipelined)."""
        return self.spec.pipeline_layers


class Structure(NamedTuple):
    """How a candidate splits the GPUs: dp * tp * pp * cp = world size; etp * ep divides
    tp * cp * dp (ep divides dp and etp = tp on a backend that carves ep out of dp)."""

    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int


class MemoryOption(NamedTuple):
    """How a candidate saves memory: optimizer sharding, sequence parallelism, recomputation,
    the gradients' reduce type, FP8 parameters, bf16 optimizer states, layers offloaded,
    FSDP2's reshard policy and the gradient reduction's overlap (one per sharding and request:
    DeepSpeed's second reduce buffer is held only with it)."""

    zero_stage: int
    distributed_optimizer: bool
    sequence_parallel: bool
    recompute: str
    grad_reduce_dtype: str
    fp8_param_gather: bool
    precision_aware_optimizer: bool
    offload_layers: int
    fsdp_reshard: str
    overlap_grad_reduce: bool


def prime_factors(n: int) -> dict[int, int]:
    """`n` (>= 1) as {prime: exponent}, by trial division that divides each factor out as it is
    found: at most about sqrt(n) / 2 steps (11,586 for any size within layout.SIZE_LIMITS), far
    fewer when n has small factors (2^62: 62)."""
    factors: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
        p += 1 if p == 2 else 2
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    return factors


def divisors(n: int) -> list[int]:
    """Divisors of n (>= 1), ascending, built from its prime factors: time grows with their
    number (at most 1,152 up to 2^29), not with n."""
    found = [1]
    for prime, exponent in prime_factors(n).items():
        found = [d * prime**k for d in found for k in range(exponent + 1)]
    return sorted(found)


def structures(world: int, moe: bool, options: SearchOptions) -> Iterator[Structure]:
    """Every (dp, tp, pp, cp, ep, etp) with dp * tp * pp * cp = world and, for a mixture of
    experts, the expert groups the backend forms (`expert_groups`)."""
    runs, ok = options.runs, options.limits.allows
    for tp in divisors(world) if runs.tensor else [1]:
        if not ok("tp", tp):
            continue
        for pp in divisors(world // tp) if options.pipeline else [1]:
            if not ok("pp", pp):
                continue
            for cp in divisors(world // (tp * pp)) if runs.context else [1]:
                dp = world // (tp * pp * cp)
                if not (ok("cp", cp) and ok("dp", dp)):
                    continue
                for ep, etp in expert_groups(dp, tp, cp, options) if moe else ((1, tp),):
                    if ok("ep", ep) and ok("etp", etp):
                        yield Structure(dp, tp, pp, cp, ep, etp)


def expert_groups(dp: int, tp: int, cp: int, options: SearchOptions) -> list[tuple[int, int]]:
    """(ep, etp) pairs searched: with expert tensor parallelism (Megatron), etp = tp or 1 and
    every ep whose etp x ep groups tile the tp x cp x dp ranks of a stage (Megatron-Bridge's
    Qwen3-235B preset on 256 H100s runs tp 2, ep 32, etp 1 with dp 16); otherwise ep divides
    dp and etp = tp (DeepSpeed-MoE carves ep out of dp)."""
    runs = options.runs
    if not runs.experts:
        return [(1, tp)]
    if not runs.expert_tensor:
        return [(ep, tp) for ep in divisors(dp)]
    etps = (tp, 1) if tp > 1 else (tp,)
    return [(ep, etp) for etp in etps for ep in divisors(tp * cp * dp // etp)]


def vpp_options(layers: int, pp: int, options: SearchOptions) -> list[int]:
    """1, and with interleaving every divisor > 1 of a stage's (rounded-up) layer count, also
    with the embedding and the loss counted as layers (models/pipeline_split.py ACCOUNTING)."""
    if pp == 1 or not options.interleave:
        return [1] if options.limits.allows("vpp", 1) else []
    shares = {-(-(layers + counted) // pp) for counted in range(3)}
    found = {d for share in shares for d in divisors(share)}
    return sorted(d for d in found if options.limits.allows("vpp", d))


def mbs_options(global_batch: int, dp: int, limits: SearchLimits = NO_LIMITS) -> list[int]:
    """Every divisor of the per-replica batch, ascending (just 1 when dp exceeds the batch).

    Not only powers of two: Megatron-LM and DeepSpeed take any micro-batch that divides the
    per-replica batch, and published runs used others (llm-foundry's MPT-7B at 6 and MPT-30B at
    14 sequences, scripts/train/benchmarking/README.md). When dp does not divide the global
    batch no micro-batch can, and the `batch.divisible` rule rejects them all. `limits`: the
    request's pins and bounds on mbs.
    """
    return [m for m in divisors(max(1, global_batch // dp)) if limits.allows("mbs", m)]


def memory_options(tp: int, options: SearchOptions) -> list[MemoryOption]:
    """Optimizer sharding x sequence parallelism x recomputation (least first) x layers
    offloaded (none first) x the gradients' reduce type x FP8 parameters x bf16 optimizer
    states x FSDP2's reshard policy (innermost; other than the default only with zero 3), each
    with the gradient reduction's overlap the request asks."""
    pinned_sp = options.limits.pins.sequence_parallel
    if tp == 1 or not options.sequence_parallel:
        sp_choices = [False]
    elif pinned_sp is not None:  # a pin overrides the sequence-parallelism option
        sp_choices = [pinned_sp]
    else:
        sp_choices = [True] if options.sequence_parallel_fixed else [False, True]
    ok = options.limits.allows
    overlap = options.overlap_grad_reduce
    return [
        MemoryOption(zero, dist, sp, recompute, grad, fp8, states, offload, reshard, overlap)
        for zero, dist in options.optimizers
        if ok("zero_stage", zero) and ok("distributed_optimizer", dist)
        for sp in sp_choices
        if ok("sequence_parallel", sp)
        for recompute in options.recompute
        if ok("recompute", recompute)
        for offload in options.offload_layers
        for grad in options.grad_reduce_dtypes
        for fp8 in options.fp8_param_gather
        for states in options.precision_aware_optimizer
        # the policy is FSDP2's: other shardings keep the default whatever is asked
        for reshard in (options.fsdp_reshard if zero == ZERO_FULL else (DEFAULT_FSDP_RESHARD,))
    ]


def outside_search(layout: Layout, request: Request) -> str | None:
    """Why the search for `request` never visits `layout` (None when it does): the part of the
    layout that no enumeration above produces. The constraint rules are not consulted."""
    asked = (request.cluster.num_gpus, request.global_batch, request.seq_len, request.precision)
    given = (layout.world_size, layout.global_batch, layout.seq_len, layout.precision)
    if asked != given:
        return f"planned for (GPUs, batch, sequence, precision) {asked}, the layout has {given}"
    options, spec = request.options, request.spec
    head = (layout.dp, layout.tp, layout.pp, layout.cp, layout.ep, layout.etp)
    if not any(s == head for s in structures(layout.world_size, spec.is_moe, options)):
        if not options.pipeline:
            return (
                f"(dp, tp, pp, cp, ep, etp) {head} is not searched (graph models: dp and tp only)"
            )
        return (
            f"(dp, tp, pp, cp, ep, etp) {head} is not searched on {options.backend} (ep > 1 needs a "
            f"mixture of experts; {options.runs.refuses(layout) or 'see docs/backends.md'})"
        )
    if layout.vpp not in vpp_options(request.layers, layout.pp, options):
        why = "interleaving is off for this request" if not options.interleave else "not searched"
        return f"vpp {layout.vpp}: {why}"
    if layout.mbs not in mbs_options(layout.global_batch, layout.dp, options.limits):
        return f"micro-batch {layout.mbs} is not searched"
    mem = MemoryOption(
        layout.zero_stage,
        layout.distributed_optimizer,
        layout.sequence_parallel,
        layout.recompute,
        layout.grad_reduce_dtype,
        layout.fp8_param_gather,
        layout.precision_aware_optimizer,
        layout.offload_layers,
        layout.fsdp_reshard,
        layout.overlap_grad_reduce,
    )
    if mem not in memory_options(layout.tp, options):
        if layout.grad_reduce_dtype not in options.grad_reduce_dtypes:
            return (
                f"gradient reduce type {layout.grad_reduce_dtype} is not searched on "
                f"{options.backend} (search option --grad-reduce-dtype)"
            )
        if layout.fp8_param_gather not in options.fp8_param_gather:
            state = "on" if layout.fp8_param_gather else "off"
            return (
                f"FP8 parameters {state} are not searched on {options.backend} "
                "(search option --fp8-param-gather)"
            )
        if layout.precision_aware_optimizer not in options.precision_aware_optimizer:
            state = "on" if layout.precision_aware_optimizer else "off"
            return (
                f"the precision-aware optimizer {state} is not searched on {options.backend} "
                "(search option --precision-aware-optimizer)"
            )
        if layout.fsdp_reshard not in options.fsdp_reshard:
            return (
                f"FSDP2 reshard policy {layout.fsdp_reshard} is not searched on {options.backend} "
                "(search option --fsdp-reshard)"
            )
        if layout.offload_layers not in options.offload_layers:
            return (
                f"{layout.offload_layers} layers offloaded are not searched on {options.backend} "
                f"(search option --activation-offload, pin --offload-layers; searched: "
                f"{', '.join(map(str, options.offload_layers))})"
            )
        with_tp = layout.tp > 1 and options.limits.pins.sequence_parallel is None
        if with_tp and options.sequence_parallel_fixed and not layout.sequence_parallel:
            return "sequence parallelism is always on with tp > 1 (search option: on)"
        sp_off = not options.sequence_parallel and "sp" in spec.layout_dims
        if with_tp and sp_off and layout.sequence_parallel and options.runs.sequence_parallel:
            return "sequence parallelism is off for this request (search option: off)"
        if layout.overlap_grad_reduce != options.overlap_grad_reduce:
            state = "on" if layout.overlap_grad_reduce else "off"
            return (
                f"the gradient reduction's overlap {state} is not searched on {options.backend} "
                "(search option --overlap-grad-reduce)"
            )
        return f"{mem} is not searched with backend {options.backend}"
    return None


def layout_of(plan: Iterable[Any], request: Request) -> Layout:
    """The Layout whose plan fields (cost.layout.PLAN_FIELDS, in order) are `plan`, with the
    loss kernel and the loss's compile the request's backend writes."""
    values = dict(zip(PLAN_FIELDS, plan, strict=True))
    return Layout(
        **values,
        cross_entropy_fusion=plan_cross_entropy_fusion(request.options.backend),
        loss_compiled=plan_loss_compiled(request.options.backend),
        global_batch=request.global_batch,
        seq_len=request.seq_len,
        precision=request.precision,
    )
