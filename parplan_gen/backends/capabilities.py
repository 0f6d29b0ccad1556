"""What one backend runs: the shape of its part of the search space."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parplan_gen.cost.estimate import BackendRef
from parplan_gen.cost.layout import (
    DEFAULT_FSDP_RESHARD,
    DS_LEAST_STAGE,
    DS_SETTINGS,
    NO_CROSS_ENTROPY_FUSION,
    Layout,
)
from parplan_gen.inputs.defaults import DS_DEFAULTS, ZERO_FULL
from parplan_gen.models.kind import BackendName

# (zero_stage, distributed_optimizer) pairs: DeepSpeed ZeRO 0-3, Megatron's distributed optimizer
Optimizer = tuple[int, bool]


@dataclass(frozen=True)
class Capabilities:
    """The layout dimensions and optimizer sharding a backend can run at all. What it refuses
    within them (ZeRO-3 with MoE, ...) is its constraint rules' to say."""

    name: BackendName
    title: str  # how the text view and plan.md name it
    version: str  # the release its constraints and templates follow
    optimizers: tuple[Optimizer, ...]  # searched in this order
    tensor: bool  # tp > 1
    pipeline: bool  # pp > 1
    interleave: bool  # vpp > 1
    context: bool  # cp > 1 (ring context parallelism)
    experts: bool  # ep > 1
    sequence_parallel: bool  # Megatron-style sequence parallelism with tp
    recompute: tuple[str, ...]  # recomputation modes it can be told to run
    # Expert groups folded over tp x cp x dp with their own tensor parallelism (Megatron-Core
    # parallel_state: etp x ep x expert-dp); False: ep is carved out of dp and etp = tp.
    expert_tensor: bool = False
    # Optimizer sharding that only a later release runs, with that release: a plan with it
    # names that version, and its files are rendered from that version's templates only.
    later: tuple[tuple[Optimizer, str], ...] = ()
    # A named formula of the plan's rules (evaluated on the layout's own formula environment,
    # planning/evaluate.py) and the later release that runs a layout for which it is true: a
    # priced feature only that release has (Megatron's EP overlap, rules/cost/moe.yaml
    # moe_a2a_overlapped).
    later_when: tuple[tuple[str, str], ...] = ()
    # Optimizer sharding priced as this backend's own (Megatron-FSDP keeps fp32 main gradients,
    # DeepSpeed ZeRO 16-bit ones): its files are written only for a plan priced on this backend.
    own_pricing: tuple[Optimizer, ...] = ()
    # The gradient reduce types its files can name (Layout.grad_reduce_dtype): `default` and
    # `fp32` everywhere (fp32 is what torchtitan's FSDP2 and DDP reduce in, and what DeepSpeed's
    # communication_data_type may say); `bf16` where the files have a switch for it: not
    # torchtitan 0.3's (config/configs.py TrainingConfig.mixed_precision_reduce is
    # Literal["float32"]) nor plain DDP's.
    grad_reduce_dtypes: tuple[str, ...] = ("default", "fp32")
    # FP8 parameters, all-gathered in FP8 (Layout.fp8_param_gather; Megatron-LM
    # --fp8-param-gather).
    fp8_param_gather: bool = False
    # Adam's moments in bf16 (Layout.precision_aware_optimizer; Megatron-LM
    # --use-precision-aware-optimizer with Transformer Engine's FusedAdam).
    precision_aware_optimizer: bool = False
    # Activations offloaded to host memory between forward and backward (Layout.offload_layers;
    # Megatron-LM --cpu-offloading-num-layers with Transformer Engine's CPU offload).
    activation_offload: bool = False
    # The fused loss kernels its files can name (Layout.cross_entropy_fusion); every backend
    # runs `off`, its framework's own loss (the one its plans write: cost/layout.py
    # plan_cross_entropy_fusion).
    cross_entropy_fusions: tuple[str, ...] = ()
    # Its files can compile the loss with torch.compile (Layout.loss_compiled; torchtitan's
    # --compile.components). Every backend runs its loss uncompiled (False).
    compiled_loss: bool = False
    # FSDP2's reshard policy can be set to keep every block gathered (Layout.fsdp_reshard
    # `never`: torchtitan's --parallelism.fsdp_reshard_after_forward, Accelerate's
    # fsdp_reshard_after_forward); it applies to its ZeRO-3 (FSDP2) layouts.
    fsdp_reshard: bool = False
    # DeepSpeed ZeRO-3's prefetch bucket, live-parameter limit and reduce bucket can be sized
    # (Layout.ds_*: ds_config.json stage3_prefetch_bucket_size, stage3_max_live_parameters,
    # reduce_bucket_size); they apply to its ZeRO-3 layouts.
    zero3_buffers: bool = False
    # The shardings whose files have a switch for the gradient reduction's overlap with the
    # backward (Layout.overlap_grad_reduce false: reduced after it); the others' schedules run
    # as they do whatever is asked (FSDP2 and DDP always overlap, Megatron-FSDP forces it).
    overlap_switch: tuple[Optimizer, ...] = ()

    @property
    def ref(self) -> BackendRef:
        """The name and base version (what a layout without a `later` sharding needs)."""
        return BackendRef(name=self.name, version=self.version)

    def version_for(self, layout: Layout, holds: Callable[[str], bool]) -> str:
        """The release that runs `layout`: the base version unless its sharding is `later` or
        a `later_when` formula holds for it (`holds(name)`: the formula's value for the layout,
        under the plan's rules)."""
        sharding = (layout.zero_stage, layout.distributed_optimizer)
        if sharding in dict(self.later):
            return dict(self.later)[sharding]
        return next((v for name, v in self.later_when if holds(name)), self.version)

    def ref_for(self, layout: Layout, holds: Callable[[str], bool]) -> BackendRef:
        """The name and version a plan of `layout` carries (see `version_for`)."""
        return BackendRef(name=self.name, version=self.version_for(layout, holds))

    def priced_apart(self, layout: Layout) -> bool:
        """Whether this backend prices `layout`'s sharding differently from the others."""
        return (layout.zero_stage, layout.distributed_optimizer) in self.own_pricing

    def refuses(self, layout: Layout) -> str | None:
        """Why the backend cannot run `layout` at all (None: within its capabilities)."""
        sizes = (
            ("tp", layout.tp, self.tensor, "tensor parallelism"),
            ("pp", layout.pp, self.pipeline, "pipeline parallelism"),
            ("vpp", layout.vpp, self.interleave, "interleaved pipeline schedule"),
            ("cp", layout.cp, self.context, "context parallelism"),
            ("ep", layout.ep, self.experts, "expert parallelism"),
        )
        for field, size, runs, what in sizes:
            if size > 1 and not runs:
                return f"{self.title} has no {what} ({field} {size})"
        if not self.expert_tensor and layout.dp % layout.ep:
            return f"{self.title} carves ep out of dp: dp({layout.dp}) % ep({layout.ep}) != 0"
        if not self.expert_tensor and layout.etp != layout.tp:
            return f"{self.title} has no expert tensor parallelism of its own (etp {layout.etp})"
        if layout.sequence_parallel and not self.sequence_parallel:
            return f"{self.title} has no Megatron-style sequence parallelism"
        if (layout.zero_stage, layout.distributed_optimizer) not in self.optimizers:
            return f"{self.title} has no {_sharding(layout)}"
        if layout.recompute not in self.recompute:
            return f"{self.title} is not told to recompute ({layout.recompute} recomputation)"
        if layout.grad_reduce_dtype not in self.grad_reduce_dtypes:
            return f"{self.title} has no switch to reduce gradients in {layout.grad_reduce_dtype}"
        if layout.fp8_param_gather and not self.fp8_param_gather:
            return f"{self.title} has no FP8 parameters (fp8_param_gather)"
        if layout.precision_aware_optimizer and not self.precision_aware_optimizer:
            return f"{self.title} has no bf16 optimizer states (precision_aware_optimizer)"
        if layout.offload_layers and not self.activation_offload:
            return f"{self.title} does not offload activations (offload_layers)"
        fusion = layout.cross_entropy_fusion
        if fusion not in (None, NO_CROSS_ENTROPY_FUSION, *self.cross_entropy_fusions):
            return f"{self.title} has no cross-entropy fusion {fusion} (cross_entropy_fusion)"
        if layout.loss_compiled and not self.compiled_loss:
            return f"{self.title} does not compile the loss (loss_compiled)"
        if layout.fsdp_reshard != DEFAULT_FSDP_RESHARD:
            if not self.fsdp_reshard:
                return f"{self.title} has no FSDP2 reshard policy to set (fsdp_reshard)"
            if layout.zero_stage != ZERO_FULL:  # the sharding a reshard policy acts on
                return f"fsdp_reshard {layout.fsdp_reshard} needs FSDP2's sharding (zero 3)"
        sharding = (layout.zero_stage, layout.distributed_optimizer)
        if not layout.overlap_grad_reduce and sharding not in self.overlap_switch:
            return (
                f"{self.title}'s {_sharding(layout)} has no switch for the overlap of the "
                "gradient reduction with the backward: its schedule runs as it does "
                "(overlap_grad_reduce off)"
            )
        return self._buffers_refused(layout)

    def _buffers_refused(self, layout: Layout) -> str | None:
        """Why DeepSpeed's buffer sizes of `layout` (Layout.ds_*) cannot be set, or None: the
        reduce bucket acts with any ZeRO stage (runtime/zero/stage_1_and_2.py and stage3.py
        read reduce_bucket_size), the prefetch bucket and the live-parameter limit with ZeRO-3
        (runtime/zero/partitioned_param_coordinator.py)."""
        changed = [f for f in DS_SETTINGS if getattr(layout, f) != DS_DEFAULTS[f]]
        if not changed:
            return None
        if not self.zero3_buffers:
            return f"{self.title} has no DeepSpeed ZeRO buffers to size ({changed[0]})"
        for field in changed:
            if layout.zero_stage < DS_LEAST_STAGE[field]:
                return f"{field} acts with ZeRO-{DS_LEAST_STAGE[field]} and up (zero {layout.zero_stage})"
        return None


def _sharding(layout: Layout) -> str:
    if layout.distributed_optimizer:
        return "distributed optimizer (Megatron-LM's)"
    return f"ZeRO-{layout.zero_stage} sharding"
