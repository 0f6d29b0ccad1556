"""What a plan's rules decide for the files of each backend that runs its chosen layout.

A written file must run what was priced: the type gradients are reduced in, whether the
optimizer state is sharded, whether tensor-parallel or expert all-to-all traffic is overlapped,
how torchtitan groups layers into stages, which release of the backend runs the layout. Each is
a named formula of the rules the plan was made with (the built-in ones and every `--rules`
overlay), evaluated here once, on the formula environment the cost model priced the layout on
(`cost.estimate.CostModel.layout_env` for that backend), and kept in plan.json (`decisions`).
The renderer reads only the document, so an overlay that changes `grad_reduce_bytes` changes
ds_config.json's `communication_data_type` as it changed the traffic priced, and a plan.json
rendered later, anywhere, writes the same files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import SIXTEEN_BIT, Layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.kind import BackendName, TrainedModel
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.evaluate import named_formula
from parplan_gen.rules.ruleset import RuleSet

# The element size the data-parallel reduction moves (rules/cost/memory.yaml: the layout's
# grad_reduce_dtype, else the backend's default).
GRADIENT_BYTES = "grad_reduce_bytes"
OPTIMIZER_SHARDED = "optimizer_sharded"  # optimizer states sharded over dp (memory.yaml)
TP_COMM_OVERLAPPED = "tp_comm_overlapped"  # TP traffic under the GEMMs (rules/cost/time.yaml)
EP_A2A_OVERLAPPED = "moe_a2a_overlapped"  # expert all-to-alls paired (rules/cost/moe.yaml)
LAYERS_PER_STAGE = "tt_layers_per_stage"  # torchtitan's stage size (constraints/torchtitan.yaml)
# The backends whose files have a switch for each overlap (Megatron-LM --tp-comm-overlap and
# --overlap-moe-expert-parallel-comm; torchtitan --parallelism.enable_async_tensor_parallel).
TP_OVERLAP_BACKENDS = ("megatron", "torchtitan")
EP_OVERLAP_BACKENDS = ("megatron",)
# The backends whose files name the type gradients are reduced in (DeepSpeed's
# communication_data_type). Megatron-LM's follows its main gradients: fp32 unless the layout
# asks for bf16 (Layout.grad_reduce_dtype, written as --grad-reduce-in-bf16 from the layout
# itself); torchtitan 0.3's FSDP2 reduce_dtype is float32, the only value its
# TrainingConfig.mixed_precision_reduce takes.
GRAD_TYPE_BACKENDS = ("deepspeed",)
GradType = Literal["fp32", "bf16", "fp16"]
TYPE_BYTES: dict[GradType, int] = {"fp32": 4, "bf16": 2, "fp16": 2}


class BackendDecisions(BaseModel):
    """What the plan's rules decided for one backend's files (each from the named formula in
    parentheses)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(
        description="The release that runs the layout: a priced feature only a later one has "
        "(Megatron's EP overlap, `moe_a2a_overlapped`) names it."
    )
    grad_reduce_dtype: GradType | None = Field(
        description="The type gradients are reduced in (`grad_reduce_bytes`): fp32 or the "
        "plan's 16-bit type; null on a backend whose files do not name it."
    )
    optimizer_sharded: StrictBool = Field(
        description="Optimizer states sharded over data parallelism (`optimizer_sharded`)."
    )
    tp_comm_overlap: StrictBool = Field(
        description="Tensor-parallel traffic overlapped with the GEMMs (`tp_comm_overlapped`); "
        "false on a backend without the switch."
    )
    ep_a2a_overlap: StrictBool = Field(
        description="Expert all-to-alls overlapped across micro-batches (`moe_a2a_overlapped`); "
        "false on a backend without the switch."
    )
    layers_per_stage: StrictInt | None = Field(
        description="torchtitan's layers per pipeline stage of an interleaved schedule "
        "(`tt_layers_per_stage`); null elsewhere."
    )


def decide(
    model: TrainedModel,
    cluster: Cluster,
    layout: Layout,
    rules: RuleSet,
    runs: Mapping[str, str | None],
) -> dict[BackendName, BackendDecisions]:
    """The decisions for each backend of `runs` that runs `layout` (its verdict None)."""
    return {
        backend.name: _decide(model, cluster, layout, rules, backend.name)
        for name, why in runs.items()
        if why is None and (backend := BACKENDS.get(name)) is not None
    }


def _decide(
    model: TrainedModel, cluster: Cluster, layout: Layout, rules: RuleSet, backend: BackendName
) -> BackendDecisions:
    env = CostModel(rules, model.kind, backend).layout_env(model, cluster, layout)
    memo: dict[str, object] = {}

    def value(name: str) -> object:
        return named_formula(rules, name).evaluate(env, memo)

    def holds(name: str) -> bool:
        return bool(value(name))

    interleaved_stages = backend == "torchtitan" and layout.pp > 1 and layout.vpp > 1
    per_stage = value(LAYERS_PER_STAGE) if interleaved_stages else None
    return BackendDecisions(
        version=BACKENDS[backend].version_for(layout, holds),
        grad_reduce_dtype=_gradient_type(value(GRADIENT_BYTES), layout)
        if backend in GRAD_TYPE_BACKENDS
        else None,
        optimizer_sharded=holds(OPTIMIZER_SHARDED),
        tp_comm_overlap=backend in TP_OVERLAP_BACKENDS and holds(TP_COMM_OVERLAPPED),
        ep_a2a_overlap=backend in EP_OVERLAP_BACKENDS and holds(EP_A2A_OVERLAPPED),
        layers_per_stage=None if per_stage is None else _whole(per_stage, LAYERS_PER_STAGE),
    )


def _gradient_type(size: object, layout: Layout) -> GradType:
    """The type whose element size `grad_reduce_bytes` gave: the plan's 16-bit type, or fp32."""
    sixteen = SIXTEEN_BIT[layout.precision]
    for name, element in TYPE_BYTES.items():
        if name in (sixteen, "fp32") and element == size:
            return name
    raise InputError(f"{GRADIENT_BYTES} is {size!r} bytes: neither {sixteen} (2) nor fp32 (4)")


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise InputError(f"{name} is {value!r}: not a whole number of layers")
    return int(value)
