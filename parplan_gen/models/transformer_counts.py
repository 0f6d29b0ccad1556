"""What a transformer's shape counts: parameters here, FLOPs and activation bytes in the
classes it derives from.

`TransformerCounts` is everything derived from a `TransformerShape`: the op-graph builder
(`transformer_graph`) and the cost model read it, and `transformer.ModelSpec` adds what it
answers as a trained model. Each method names its source formula in its docstring, so a
number can be traced to a paper.

Conventions (one place, used everywhere below):
* parameters are counted as stored: weights and biases, norm scales/shifts, embedding tables;
  a tied output layer adds nothing. Buffers (rotary tables, ALiBi slopes) are not parameters.
* FLOPs are model FLOPs per token: 2 per multiply-add of every matmul a token passes through,
  plus the attention score/value products; element-wise work (norms, activations, softmax,
  residual adds, biases) counts zero, as in Megatron-LM's `num_floating_point_operations`
  (`transformer_flops`).
* activation bytes follow Korthikanti et al. 2022 Sec. 4.1 (16-bit tensors, 1-byte dropout
  masks, attention scores materialised, no parallelism, no recomputation)
  (`transformer_activations`).
"""

from __future__ import annotations

from parplan_gen.models.transformer_activations import ActivationBytes
from parplan_gen.models.transformer_flops import FlopCounts


def _linear(inputs: int, outputs: int, bias: bool) -> int:
    """Parameters of a dense layer `inputs -> outputs`."""
    return inputs * outputs + (outputs if bias else 0)


class TransformerCounts(FlopCounts, ActivationBytes):
    """A transformer's shape with its parameter, FLOP and activation counts."""

    def norm_params(self, width: int) -> int:
        """Parameters of one norm over `width` elements (LayerNorm: scale+shift, RMSNorm: scale)."""
        return width * (2 if self.norm == "layernorm" else 1)

    def attention_params(self) -> int:
        """Parameters of one attention block: projections, MLA latents/norms, q/k norms, sinks."""
        h, a = self.hidden_size, self.num_attention_heads
        if self.uses_mla:  # DeepSeek-V2 Sec. 2.1.2 / HF DeepseekV3Attention
            r_kv, d_qk = self.kv_lora_rank or 0, self.qk_head_dim
            if self.q_lora_rank:
                q = _linear(h, self.q_lora_rank, self.qkv_bias) + self.norm_params(self.q_lora_rank)
                q += self.q_lora_rank * a * d_qk
            else:
                q = h * a * d_qk
            kv = _linear(h, r_kv + self.qk_rope_head_dim, self.qkv_bias) + self.norm_params(r_kv)
            kv += r_kv * a * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.attention_output_params()
        d, g = self.head_dim, self.num_kv_heads
        params = _linear(h, a * d, self.qkv_bias) + 2 * _linear(h, g * d, self.qkv_bias)
        params += self.attention_output_params()
        params += 2 * self.norm_params(d) if self.qk_norm else 0
        return params + (a if self.attention_sinks else 0)

    def attention_output_params(self) -> int:
        """Parameters of the attention output projection (a * d_v -> h)."""
        width = self.num_attention_heads * self.value_head_dim
        return _linear(width, self.hidden_size, self.out_proj_bias)

    def mlp_params(self, ffn: int) -> int:
        """Parameters of one MLP (or expert) of inner width `ffn`: 2 matrices, 3 when gated."""
        h, bias = self.hidden_size, self.mlp_bias
        up = _linear(h, ffn, bias) * (2 if self.gated_mlp else 1)
        return up + _linear(ffn, h, bias)

    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self.mlp_params(self.moe_ffn_hidden_size) if self.is_moe else 0

    def router_params(self) -> int:
        """Parameters of one MoE router (h -> num_experts)."""
        return _linear(self.hidden_size, self.num_experts, self.router_bias) if self.is_moe else 0

    def shared_expert_params(self) -> int:
        """Parameters of a layer's shared experts and their gate."""
        shared = self.num_shared_experts * self.mlp_params(self.shared_expert_ffn_hidden_size)
        return shared + (self.hidden_size if self.shared_expert_gate else 0)

    def layer_norm_params(self) -> int:
        """Parameters of the norms inside one block."""
        return self.norms_per_layer * self.norm_params(self.hidden_size)

    def dense_layer_params(self) -> int:
        """Parameters of one block with a dense MLP (Narayanan Eq. 2 per layer: 12h^2 + 13h)."""
        mlp = self.mlp_params(self.ffn_hidden_size)
        return self.attention_params() + self.layer_norm_params() + mlp

    def moe_layer_params(self) -> int:
        """Parameters of one MoE block: attention, norms, all experts, shared experts, router."""
        experts = self.num_experts * self.expert_params() + self.shared_expert_params()
        return self.attention_params() + self.layer_norm_params() + experts + self.router_params()

    def embedding_params(self) -> int:
        """Token embedding, learned position table and embedding norm (Narayanan Eq. 2: (V+s)h)."""
        h = self.hidden_size
        params = self.vocab_size * h
        params += self.max_position_embeddings * h if self.position_embedding == "learned" else 0
        return params + (self.norm_params(h) if self.embedding_norm else 0)

    def output_params(self) -> int:
        """Final norm and LM head (nothing for the head when it is tied to the embedding)."""
        h, v = self.hidden_size, self.vocab_size
        params = self.norm_params(h) if self.final_norm else 0
        params += 0 if self.tied_embeddings else v * h
        return params + (v if self.lm_head_bias else 0)

    def total_params(self) -> int:
        """All parameters (Narayanan 2021 Eq. 2 generalised; equals it + 2h for GPT-3 shapes,
        the final LayerNorm that Eq. 2 leaves out)."""
        layers = self.num_dense_layers * self.dense_layer_params()
        layers += self.num_moe_layers * self.moe_layer_params()
        return self.embedding_params() + layers + self.output_params()

    def active_params(self, *, count_embedding: bool = True) -> int:
        """Parameters one token uses: total less the routed experts it skips.

        By default the embedding table counts in full, the convention of Mixtral's "12.9B active"
        and Qwen3-30B-A3B's "3.3B activated"; `count_embedding=False` leaves out the input
        embedding (and learned positions) of an untied model, the convention of DeepSeek-V3's
        "37B" and gpt-oss-120b's "5.1B".
        """
        idle = (self.num_experts - self.experts_per_token) * self.expert_params()
        active = self.total_params() - self.num_moe_layers * idle
        if count_embedding or self.tied_embeddings:
            return active
        table = self.vocab_size * self.hidden_size
        if self.position_embedding == "learned":
            table += self.max_position_embeddings * self.hidden_size
        return active - table
