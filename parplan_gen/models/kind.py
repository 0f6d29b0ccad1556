"""What every kind of model answers: the one interface the layers above `models` read.

`TrainedModel` is the protocol both kinds implement (`transformer.ModelSpec`,
`graph_model.GraphModelSpec`; `any_model` names either and reaches one kind's own fields);
code outside `models` reads it and never asks which class a model is: its kind, the model.*
values the rules read, its unit of work, how views title it, its op graph, and the layout
dimensions, recomputation choices, step-time parts and backends it has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from parplan_gen.models.graph import ModelGraph

ModelKind = Literal["transformer", "graph"]
# The kinds of model the cost model and constraints know: a transformer (from its ModelSpec:
# presets and Hugging Face configs) and an op graph (native graph files, ONNX, graph presets).
MODEL_KINDS: tuple[ModelKind, ...] = ("transformer", "graph")
# The frameworks a plan is for (docs/backends.md); each has its constraints in
# rules/constraints/<name>.yaml and its capabilities in parplan_gen/planning/backends/<name>.py.
BackendName = Literal["megatron", "deepspeed", "ddp", "torchtitan", "accelerate"]
BACKEND_NAMES: tuple[BackendName, ...] = (
    "megatron", "deepspeed", "ddp", "torchtitan", "accelerate",
)  # fmt: skip
ANY_BACKEND = "any"  # `--backend any`: every backend the model has (the default)
WorkUnit = Literal["tokens", "samples"]
PER_LAYER_FIELDS = frozenset({"sliding_window_layers", "moe_layers"})  # lists, not facts


class TrainedModel(Protocol):
    """A model the cost model trains and the planner lays out."""

    @property
    def kind(self) -> ModelKind:
        """Which cost model and constraint rules apply (rules' `model_kind`)."""
        ...

    @property
    def name(self) -> str: ...

    @property
    def unit(self) -> WorkUnit:
        """What the batch counts and throughput is measured in: tokens or samples."""
        ...

    @property
    def memory_heading(self) -> str:
        """The title of a view's memory section."""
        ...

    @property
    def layout_dims(self) -> tuple[str, ...]:
        """The parallel dimensions it may be laid out over (`sp`: sequence parallelism)."""
        ...

    @property
    def recompute_choices(self) -> tuple[str, ...]:
        """The recomputation it can do, least first."""
        ...

    @property
    def time_parts(self) -> tuple[str, ...]:
        """The parts of a step it has (TimeBreakdown fields, step_s excluded)."""
        ...

    @property
    def backends(self) -> tuple[BackendName, ...]:
        """The backends that train it (and whose files it gets)."""
        ...

    @property
    def is_moe(self) -> bool: ...

    @property
    def title(self) -> str:
        """`llama-3-8b (8.03B params)`, `resnet-50 (25.6M params, op graph)`."""
        ...

    @property
    def pipeline_layers(self) -> int:
        """Layers a pipeline splits (1 for a model that is not pipelined)."""
        ...

    def batch_text(self, global_batch: int, seq_len: int) -> str:
        """`global batch 512 x 8192 tokens`, `global batch 4096 samples`."""
        ...

    def sequence_length(self, asked: int | None) -> int:
        """The sequence length to plan at when `asked` (None: not given)."""
        ...

    def formula_values(self, seq_len: int) -> dict[str, Any]:
        """The model.* values the rules read, at sequence length `seq_len`."""
        ...

    def op_graph(self, seq_len: int) -> ModelGraph:
        """The op graph the rules engine proposes from."""
        ...

    def facts(self) -> dict[str, Any]:
        """model.* facts a mapping can send to a backend: its fields, kind, gqa, moe, mla."""
        ...
