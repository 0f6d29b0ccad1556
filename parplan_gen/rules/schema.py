"""The schema of rule files (pydantic; unknown keys are refused).

A rule file has these sections, all optional: `uses` (the other files of its layer whose named
formulas it reads), `formulas` (named formulas, each a formula or a mapping that adds its unit
and source), `opportunities` (node-level rules keyed by op, or graph-level rules), `proposals`
(graph/cluster-level rules in groups), `constraints` (conditions every plan must meet),
`estimate` (which formula gives each figure of the cost model) and `disable` (rule ids of
earlier layers to switch off).
Every numeric field takes a number or a formula string; `when` takes a boolean or a formula.
Field documentation here is what `parplan rules schema` exports for editors.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from parplan_gen.models.kind import BackendName
from parplan_gen.rules.units import Unit

Value = bool | int | float | str  # a constant, or a formula when it is a string
NumberOrFormula = int | float | str
BoolOrFormula = bool | str

OpportunityType = Literal["DataParallel", "ModelParallel", "PipelineParallel", "TensorParallel"]
ProposalType = Literal[
    "DataParallel",
    "PipelineParallel",
    "TensorParallel",
    "CommunicationOptimization",
    "MemoryOptimization",
]

RULE_ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_.\-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class OpportunityRule(_Strict):
    """A way to parallelise one node (scope `node`) or the whole graph (scope `graph`)."""

    id: str = Field(
        pattern=RULE_ID_PATTERN, description="Unique id; a later layer overrides by id."
    )
    scope: Literal["node", "graph"] = Field(
        "node", description="`node`: evaluated for every node whose op matches; `graph`: once."
    )
    op: str | None = Field(
        None,
        description="Op this rule applies to (`MatMul`, `Compute::MatMul`, ...), or `*` for any "
        "op that no other node rule names. Required for scope `node`, absent for `graph`.",
    )
    node_id: str | None = Field(
        None, description="For scope `graph`: the node_id reported (e.g. `pipeline_stages`)."
    )
    type: OpportunityType = Field(description="Kind of parallelism offered.")
    when: BoolOrFormula = Field(True, description="Condition; the rule fires when it is true.")
    min_devices: NumberOrFormula = Field(description="Devices needed (rounded down to an integer).")
    memory_per_device: NumberOrFormula = Field(description="Bytes per device (integer).")
    communication_overhead: NumberOrFormula = Field(description="Fraction of step time.")
    speedup: NumberOrFormula = Field(description="Estimated speedup (x).")
    source: str | None = Field(None, description="Where the heuristic or figure comes from.")

    @model_validator(mode="after")
    def _scope_fields(self) -> OpportunityRule:
        if self.scope == "node" and not self.op:
            raise ValueError("a node rule needs `op` (an op name or `*`)")
        if self.scope == "node" and self.node_id is not None:
            raise ValueError(
                "`node_id` is only for scope `graph` (node rules report the node's id)"
            )
        if self.scope == "graph" and self.op is not None:
            raise ValueError("a graph rule has no `op`")
        if self.scope == "graph" and not self.node_id:
            raise ValueError("a graph rule needs `node_id` (the id it is reported under)")
        return self


class ProposalRule(_Strict):
    """A strategy proposed for the whole graph and cluster, carrying concrete settings."""

    id: str = Field(
        pattern=RULE_ID_PATTERN, description="Unique id; a later layer overrides by id."
    )
    group: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$",
        description="Group (data, pipeline, tensor, communication, memory, ...); groups run in "
        "the order they first appear, rules within a group in file order.",
    )
    type: ProposalType = Field(description="Kind of proposal.")
    when: BoolOrFormula = Field(True, description="Condition; the proposal is made when true.")
    speedup: NumberOrFormula = Field(description="Estimated speedup (x).")
    description: str = Field(
        description="Text shown to users; `{formula}` or `{formula:.1f}` placeholders may read "
        "`speedup` and `settings.<key>` as well as graph.* and cluster.*."
    )
    settings: dict[str, Value] = Field(
        default_factory=dict,
        description="Concrete configuration this proposal contributes, key -> number, boolean or "
        "formula (a literal text value is a quoted string inside the formula: \"'Ring'\").",
    )
    source: str | None = Field(None, description="Where the heuristic or figure comes from.")


class ConstraintRule(_Strict):
    """A condition every plan must meet; a plan that breaks it is rejected with its reason."""

    id: str = Field(
        pattern=RULE_ID_PATTERN, description="Unique id; a later layer overrides by id."
    )
    when: BoolOrFormula = Field(True, description="The constraint applies only when this holds.")
    require: BoolOrFormula = Field(description="Must be true for the plan to be kept.")
    reason: str = Field(
        description="Why a plan is rejected (the key rejections are counted under); "
        "`{formula}` placeholders may read model.*, cluster.*, train.* and plan.*."
    )
    severity: Literal["invalid", "reject"] = Field(
        "reject",
        description="`invalid`: such a layout cannot run at all (`estimate` refuses it); "
        "`reject`: it could run but the planner must not choose it (e.g. it does not fit).",
    )
    bounds_search: bool = Field(
        False,
        description="`true`: a bound of the search, not of a framework: `plan` enumerates only "
        "the layouts the rule allows (those it refuses are outside the search space, never "
        "counted as rejected); `check` and `estimate` report it like any rule. It may read "
        "the plan.* names of one search level (plan.mbs and plan.grad_accum, or plan.vpp, or "
        "the memory options), with the layout's sizes.",
    )
    model_kind: Literal["transformer", "graph", "any"] | None = Field(
        None,
        description="The models the constraint applies to: `transformer` (presets and Hugging "
        "Face configs), `graph` (graph files, ONNX, graph presets) or `any`; its formulas may "
        "only read model.* names that have a value for each of them. Left out: the kinds whose "
        "model.* names its formulas read (every kind when they read none).",
    )
    backend: BackendName | None = Field(
        None,
        description="The backend whose plans the constraint applies to (`megatron`, "
        "`deepspeed`, `ddp`: the framework that refuses such a layout); left out: every "
        "backend's plans.",
    )
    source: str | None = Field(None, description="Where the constraint comes from.")


class EstimateSection(_Strict):
    """Which formula gives each figure of an estimate (a later layer may replace any one)."""

    model_kind: Literal["transformer", "graph"] = Field(
        "transformer",
        description="The models these figures are for: `transformer` (presets and Hugging Face "
        "configs) or `graph` (graph files, ONNX, graph presets); each kind has its own cost "
        "model, and a figure is replaced only by one for the same kind.",
    )

    memory: dict[str, NumberOrFormula] = Field(
        default_factory=dict,
        description="Bytes per GPU on the most loaded GPU: params, grads, optimizer, "
        "activations, other.",
    )
    time: dict[str, NumberOrFormula] = Field(
        default_factory=dict,
        description="Seconds per step: compute_s, tp_comm_s, cp_comm_s, pp_comm_s, dp_comm_s, "
        "ep_comm_s, bn_comm_s, overlap_cost_s, optimizer_s, bubble_s, step_s; optional tp_exposed_s, "
        "dp_exposed_s (the parts of tp_comm_s, dp_comm_s not hidden behind compute), host_wait_s "
        "(the part of compute_s the GPU waits for the host's launches) and floor_s "
        "(a time step_s never goes below, which lets `plan` skip slow candidates).",
    )
    throughput: dict[str, NumberOrFormula] = Field(
        default_factory=dict,
        description="tokens_per_s, model_tflops_per_gpu, hardware_tflops_per_gpu, mfu; optional "
        "model_tflops_causal_per_gpu, mfu_causal (the causal half of the attention scores).",
    )


class NamedFormula(_Strict):
    """A named formula with its unit and where its value comes from (the plain form, `name:
    "formula"`, says neither)."""

    value: Value = Field(description="The formula: a number, true/false or formula text.")
    unit: Unit | None = Field(
        None,
        description="The unit of its value (`s`, `B`, `B/s`, `FLOP`, `count`, `fraction`, `1`, "
        "...: the units of docs/rules.md). A redefinition that leaves it out keeps the earlier "
        "one.",
    )
    source: str | None = Field(
        None, description="Where the value or the formula comes from (a paper, a datasheet, code)."
    )


def _form(value: object) -> str:
    """Which form a named formula is written in: `mapping` ({value, unit, source}) or `plain`."""
    return "mapping" if isinstance(value, dict | NamedFormula) else "plain"


# A mapping is read as a NamedFormula only, anything else as a plain value: an error names the
# one form the entry is written in.
NamedValue = Annotated[
    Annotated[Value, Tag("plain")] | Annotated[NamedFormula, Tag("mapping")],
    Discriminator(_form),
]


class RuleFile(_Strict):
    """One rule file."""

    uses: list[str] = Field(
        default_factory=list,
        description="The other files of this layer whose named formulas this file reads, by "
        "name: the path under the rules directory without `.yaml` (`cost/memory`).",
    )
    formulas: dict[str, NamedValue] = Field(
        default_factory=dict,
        description="Named formulas, usable by name in any formula: a formula, or "
        "`{value, unit, source}`.",
    )
    opportunities: list[OpportunityRule] = Field(default_factory=list)
    proposals: list[ProposalRule] = Field(default_factory=list)
    constraints: list[ConstraintRule] = Field(default_factory=list)
    estimate: EstimateSection | None = Field(
        None, description="The cost model: which formula gives each figure of an estimate."
    )
    disable: list[str] = Field(
        default_factory=list, description="Rule ids of earlier layers to switch off."
    )
