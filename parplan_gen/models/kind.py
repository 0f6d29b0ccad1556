"""What every kind of model answers: the one interface the layers above `models` read.

`TrainedModel` is the protocol both kinds implement; code outside `models` reads it and never
asks which class a model is. The answers of each kind stand side by side in the two mixins
below (`TransformerKind` for `transformer.ModelSpec`, `GraphKind` for
`graph_model.GraphModelSpec`): its kind, the model.* values the rules read, its unit of work,
how views title it, its op graph, and the layout dimensions, recomputation choices, step-time
parts and backends it has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from parplan_gen.inputs.defaults import DEFAULT_SEQ_LEN
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.safe_text import printable

if TYPE_CHECKING:
    from parplan_gen.models.graph import ModelGraph

ModelKind = Literal["transformer", "graph"]
# The kinds of model the cost model and constraints know: a transformer (from its ModelSpec:
# presets and Hugging Face configs) and an op graph (native graph files, ONNX, graph presets).
MODEL_KINDS: tuple[ModelKind, ...] = ("transformer", "graph")
# The frameworks a plan is for (docs/backends.md); each has its constraints in
# rules/constraints/<name>.yaml and its capabilities in parplan_gen/planning/backends/<name>.py.
BackendName = Literal["megatron", "deepspeed", "ddp", "torchtitan"]
BACKEND_NAMES: tuple[BackendName, ...] = ("megatron", "deepspeed", "ddp", "torchtitan")
ANY_BACKEND = "any"  # `--backend any`: every backend the model has (the default)
WorkUnit = Literal["tokens", "samples"]
PER_LAYER_FIELDS = frozenset({"sliding_window_layers", "moe_layers"})  # lists, not facts
GRAPH_PARAMS_IN_MILLIONS = 100_000  # from here a graph model's count is shown as `25.6M`


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

    def model_dump(self, **kwargs: Any) -> dict[str, Any]: ...


class TransformerKind:
    """The answers of a decoder-only transformer (`ModelSpec`)."""

    kind: ClassVar[ModelKind] = "transformer"
    unit: ClassVar[WorkUnit] = "tokens"
    memory_heading: ClassVar[str] = "Memory per GPU (most loaded stage)"
    layout_dims: ClassVar[tuple[str, ...]] = ("dp", "tp", "pp", "cp", "ep", "vpp", "sp")
    recompute_choices: ClassVar[tuple[str, ...]] = ("none", "selective", "full")
    time_parts: ClassVar[tuple[str, ...]] = (
        "compute_s", "overlap_cost_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s",
        "ep_comm_s", "bubble_s", "optimizer_s",
    )  # fmt: skip
    backends: ClassVar[tuple[BackendName, ...]] = ("megatron", "deepspeed", "ddp", "torchtitan")

    @property
    def title(self) -> str:
        return f"{printable(self.name)} ({self.total_params() / 1e9:.2f}B params)"

    @property
    def pipeline_layers(self) -> int:
        return self.num_layers

    def batch_text(self, global_batch: int, seq_len: int) -> str:
        return f"global batch {global_batch} x {seq_len} tokens"

    def sequence_length(self, asked: int | None) -> int:
        return DEFAULT_SEQ_LEN if asked is None else asked

    def formula_values(self, seq_len: int) -> dict[str, Any]:
        layers = self.num_layers
        act = sum(self.layer_activation_bytes_per_token(i, seq_len) for i in range(layers))
        scores = self.attention_core_activation_bytes(seq_len)
        scores -= self.attention_core_activation_bytes(0)
        inputs = [self.linear_input_elements_per_token(i) for i in range(layers)]
        return {
            "model.layers": layers,
            "model.hidden": self.hidden_size,
            "model.heads": self.num_attention_heads,
            "model.kv_heads": self.num_kv_heads,
            "model.head_dim": self.head_dim,
            "model.ffn": self.ffn_hidden_size,
            "model.vocab": self.vocab_size,
            "model.experts": self.num_experts,
            "model.experts_per_token": self.experts_per_token if self.is_moe else 0,
            "model.moe_layers": self.num_moe_layers,
            "model.moe": self.is_moe,
            "model.max_positions": self.max_position_embeddings,
            "model.learned_positions": self.position_embedding == "learned",
            "model.positions_cover_seq_len": self.positions_cover(seq_len),
            "model.gated_mlp": self.gated_mlp,
            "model.params": self.total_params(),
            "model.params_embedding": self.embedding_params(),
            "model.params_output": self.output_params(),
            "model.params_experts": self.num_moe_layers * self.num_experts * self.expert_params(),
            "model.flops_per_token": self.flops_per_token(seq_len),
            "model.attention_flops_per_token": self.attention_score_flops_per_token(seq_len),
            "model.causal_attention_flops_per_token": self.attention_score_flops_per_token(
                seq_len, causal=True
            ),
            "model.lm_head_flops_per_token": self.lm_head_flops_per_token(),
            "model.expert_flops_per_token": self.expert_flops_per_token() if self.is_moe else 0,
            "model.moe_ffn": self.moe_ffn_hidden_size if self.is_moe else 0,
            "model.act_layer_bytes": act / layers,
            "model.act_scores_bytes": scores,
            "model.act_linear_inputs_replicated": sum(r for r, _ in inputs) / layers,
            "model.act_linear_inputs_split": sum(s for _, s in inputs) / layers,
        }

    def op_graph(self, seq_len: int) -> ModelGraph:
        from parplan_gen.models.transformer_graph import model_graph  # it imports ModelSpec

        return model_graph(self, seq_len=seq_len)

    def facts(self) -> dict[str, Any]:
        values = self.model_dump(exclude=PER_LAYER_FIELDS)
        return {
            **{f"model.{k}": v for k, v in values.items()},
            "model.kind": self.kind,
            "model.gqa": self.num_kv_heads < self.num_attention_heads,
            "model.moe": self.is_moe,
            "model.mla": self.uses_mla,
        }


class GraphKind:
    """The answers of an op-graph model (`GraphModelSpec`): one sample is one input of the
    graph; it is laid out over data and channel (tensor) parallelism only and runs under
    DeepSpeed / torchrun."""

    unit: ClassVar[WorkUnit] = "samples"
    memory_heading: ClassVar[str] = "Memory per GPU"
    layout_dims: ClassVar[tuple[str, ...]] = ("dp", "tp")
    recompute_choices: ClassVar[tuple[str, ...]] = ("none", "full")
    time_parts: ClassVar[tuple[str, ...]] = (
        "compute_s", "tp_comm_s", "dp_comm_s", "bn_comm_s", "optimizer_s",
    )  # fmt: skip
    backends: ClassVar[tuple[BackendName, ...]] = ("deepspeed",)

    @property
    def title(self) -> str:
        params = self.params
        count = f"{params / 1e6:,.1f}M" if params >= GRAPH_PARAMS_IN_MILLIONS else f"{params:,}"
        return f"{printable(self.name)} ({count} params, op graph)"

    @property
    def pipeline_layers(self) -> int:
        return 1

    def batch_text(self, global_batch: int, seq_len: int) -> str:
        return f"global batch {global_batch} samples"

    def sequence_length(self, asked: int | None) -> int:
        if asked not in (None, 1):
            raise InputError(
                f"--seq-len {asked}: {self.name} is an op-graph model, which has no sequence "
                "length (a sample is one input of the graph; its sizes are in the graph); "
                "leave it out"
            )
        return 1

    def formula_values(self, seq_len: int) -> dict[str, Any]:
        return {f"model.{k}": v for k, v in self.model_dump(exclude={"kind", "name"}).items()}

    def op_graph(self, seq_len: int) -> ModelGraph:
        return self.graph

    def facts(self) -> dict[str, Any]:
        values = {f"model.{k}": v for k, v in self.model_dump().items()}
        return {**values, "model.gqa": False, "model.moe": False, "model.mla": False}
