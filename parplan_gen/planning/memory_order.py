"""Which of a candidate's memory options hold least, and which fitted variants make a candidate
unable to rank: the orderings `backend_planner`'s prunings rest on (its module docstring).

A memory option's frugality orders the options of one (zero stage, distributed optimizer) by
what they hold (the gradients' type, FP8 parameters, bf16 moments, layers offloaded, FSDP2's
blocks kept gathered), so the most frugal stands for all of them in the memory bound. A
candidate is dominated, with objective `time`, by a variant of its layout that fits and is never
slower: less recomputation, no offloading, FSDP2's blocks kept gathered.
"""

from __future__ import annotations

from parplan_gen.cost.layout import DEFAULT_FSDP_RESHARD, NEVER_RESHARD
from parplan_gen.planning.rejections import Refusal
from parplan_gen.planning.search_space import MemoryOption

DOMINATED = "dominated: fits with less recomputation, which is never slower"
_DOMINATED = Refusal(None, DOMINATED)  # the search's own pruning: no rule, no plan field
DOMINATED_OFFLOAD = "dominated: fits offloading fewer layers, or none (time.yaml offload_s)"
_DOMINATED_OFFLOAD = Refusal(None, DOMINATED_OFFLOAD)
DOMINATED_RESHARD = (
    "dominated: fits with FSDP2's blocks kept gathered (fsdp_reshard never), which skips the "
    "backward's all-gathers (sharding.yaml zero3_backward_gather_s)"
)
_DOMINATED_RESHARD = Refusal(None, DOMINATED_RESHARD)

# A memory option less its recomputation and with only whether it offloads activations (last):
# what a recomputing variant, one offloading more layers or one resharding is dominated within.
Sharding = tuple[int, bool, bool, str, bool, bool, bool, str, bool]
# The gradients' reduce types, least memory first (rules/cost/memory.yaml grad_bytes).
_GRAD_FRUGALITY = ("bf16", "default", "fp32")


def least_per_sharding(options: list[MemoryOption]) -> list[MemoryOption]:
    """For each (zero stage, distributed optimizer) of `options`, its option that holds the
    least memory: the smallest gradients (_GRAD_FRUGALITY), then FP8 parameters (1-byte
    weights: rules/cost/memory.yaml held_weight_bytes), then bf16 optimizer states
    (memory.yaml optimizer_bytes), then the most layers offloaded, in their first order."""
    best: dict[tuple[int, bool], MemoryOption] = {}
    for mem in options:
        key = (mem.zero_stage, mem.distributed_optimizer)
        held = best.get(key)
        if held is None or _frugality(mem) < _frugality(held):
            best[key] = mem
    return list(best.values())


def _frugality(mem: MemoryOption) -> tuple[int, bool, bool, int, bool]:
    """How much memory `mem`'s gradients, parameters, optimizer states, activations and
    gathered blocks hold, least first."""
    return (
        _GRAD_FRUGALITY.index(mem.grad_reduce_dtype),
        not mem.fp8_param_gather,
        not mem.precision_aware_optimizer,
        -mem.offload_layers,
        mem.fsdp_reshard != DEFAULT_FSDP_RESHARD,
    )


def dominated_by(sharding: Sharding, fitted: set[Sharding]) -> Refusal | None:
    """Why a candidate of `sharding` cannot rank with objective `time` (module docstring): a
    variant that fits with as little recomputation (the same sharding), with no offloading, or
    keeping FSDP2's blocks gathered; None when none has fitted."""
    *rest, reshard, offloads = sharding
    if sharding in fitted or (*rest, reshard, False) in fitted:
        return _DOMINATED_OFFLOAD if offloads else _DOMINATED
    if reshard != NEVER_RESHARD and any(
        (*rest, NEVER_RESHARD, o) in fitted for o in (offloads, False)
    ):
        return _DOMINATED_RESHARD
    return None
