"""A decoder-only transformer as a model to train: `ModelSpec`.

`ModelSpec` is the transformer's shape (`transformer_shape`) with its counts
(`transformer_counts`: parameters, FLOPs, activation bytes) and what it answers as a
`kind.TrainedModel`: its kind, unit of work, title, the model.* values the rules read, its op
graph (`transformer_graph`), and the layout dimensions, recomputation choices, step-time parts
and backends it has. Importers (`hf_config`, `presets`) build it; the cost model reads it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from parplan_gen.inputs.defaults import DEFAULT_SEQ_LEN
from parplan_gen.inputs.safe_text import printable
from parplan_gen.models.graph import ModelGraph
from parplan_gen.models.kind import PER_LAYER_FIELDS, BackendName, ModelKind, WorkUnit
from parplan_gen.models.transformer_counts import TransformerCounts
from parplan_gen.models.transformer_graph import model_graph


class ModelSpec(TransformerCounts):
    """One decoder-only transformer (its fields are `TransformerShape`'s), as a
    `kind.TrainedModel`."""

    kind: ClassVar[ModelKind] = "transformer"
    unit: ClassVar[WorkUnit] = "tokens"
    memory_heading: ClassVar[str] = "Memory per GPU (most loaded stage)"
    layout_dims: ClassVar[tuple[str, ...]] = ("dp", "tp", "pp", "cp", "ep", "vpp", "sp")
    recompute_choices: ClassVar[tuple[str, ...]] = ("none", "selective", "full")
    time_parts: ClassVar[tuple[str, ...]] = (
        "compute_s", "overlap_cost_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s",
        "ep_comm_s", "offload_s", "bubble_s", "optimizer_s",
    )  # fmt: skip
    backends: ClassVar[tuple[BackendName, ...]] = (
        "megatron", "deepspeed", "ddp", "torchtitan", "accelerate",
    )  # fmt: skip

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
            "model.mtp_layers": self.training.mtp_layers,
            "model.act_layer_bytes": act / layers,
            "model.act_scores_bytes": scores,
            "model.act_linear_inputs_replicated": sum(i.replicated for i in inputs) / layers,
            "model.act_linear_inputs_split": sum(i.split for i in inputs) / layers,
        }

    def op_graph(self, seq_len: int) -> ModelGraph:
        return model_graph(self, seq_len=seq_len)

    def facts(self) -> dict[str, Any]:
        values = self.model_dump(exclude=set(PER_LAYER_FIELDS))
        return {
            **{f"model.{k}": v for k, v in values.items()},
            "model.kind": self.kind,
            "model.gqa": self.num_kv_heads < self.num_attention_heads,
            "model.moe": self.is_moe,
            "model.mla": self.uses_mla,
        }
