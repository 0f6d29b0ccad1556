"""Activation memory of a transformer: the bytes one token stores for the backward pass.

`ActivationBytes` derives from `transformer_shape.TransformerShape` (it reads the shape's
fields) and is a base of `transformer_counts.TransformerCounts`: Korthikanti et al. 2022
Sec. 4.1 per layer and Sec. 4.3's extras, generalised to GQA, gated MLPs, MoE and MLA; 16-bit
tensors, 1-byte dropout masks, attention scores materialised, no parallelism, no
recomputation.
"""

from __future__ import annotations

from typing import NamedTuple

from parplan_gen.models.transformer_shape import TransformerShape

ACT_BYTES = 2  # 16-bit activations (Korthikanti 2022, Sec. 4.1)
MASK_BYTES = 1  # 1-byte dropout masks (Korthikanti 2022, Sec. 4.1)
LOGIT_BYTES = 4  # fp32 logits (Korthikanti 2022, Sec. 4.3: 4sbh/t * (1 + v/h))


class LinearInputs(NamedTuple):
    """Values one token stores in a layer as inputs of linear layers, by how tensor
    parallelism treats them."""

    replicated: int  # the norm outputs', replicated unless the sequence is split
    split: int  # the other linear inputs', split over the tensor-parallel ranks


class ActivationBytes(TransformerShape):
    """Activation bytes per token of a transformer."""

    def mlp_activation_bytes(self, ffn: int) -> int:
        """Bytes one token stores inside one MLP of width `ffn`, input excluded: activation
        input(s) 2*ffn (x2 when gated: gate and up) and second-matmul input 2*ffn."""
        return ACT_BYTES * ffn * (3 if self.gated_mlp else 2)

    def attention_core_activation_bytes(self, seq_len: int) -> int:
        """Bytes one token stores in the attention core: Q, K, V and 5*a*s for the scores
        (softmax 2as, dropout mask as, dropout output 2as; Korthikanti Sec. 4.1)."""
        a, g = self.num_attention_heads, self.kv_heads_stored
        qkv = (a + g) * self.qk_head_dim + g * self.value_head_dim
        scores = (2 * ACT_BYTES + MASK_BYTES) * a * seq_len
        return ACT_BYTES * qkv + scores

    def layer_activation_bytes_per_token(self, layer: int, seq_len: int) -> int:
        """Bytes one token stores for the backward pass of `layer` (Korthikanti 2022 Eq. 1 per
        token: h(34 + 5as/h) for a GPT block; generalised to GQA, gated MLPs, MoE and MLA)."""
        h, a = self.hidden_size, self.num_attention_heads
        norms = self.norms_per_layer * ACT_BYTES * h
        attn_in = ACT_BYTES * h
        if self.uses_mla:
            attn_in += 2 * ACT_BYTES * ((self.q_lora_rank or 0) + (self.kv_lora_rank or 0))
        attn = attn_in + self.attention_core_activation_bytes(seq_len)
        attn += ACT_BYTES * a * self.value_head_dim + MASK_BYTES * h
        # With one norm shared by attention and MLP, the MLP input is the attention input.
        mlp_in = 0 if self.norms_per_layer == 1 else ACT_BYTES * h
        if self.moe_layer_mask[layer]:
            k, f = self.experts_per_token, self.moe_ffn_hidden_size
            mlp = mlp_in + k * (ACT_BYTES * h + self.mlp_activation_bytes(f))
            mlp += self.num_shared_experts * self.mlp_activation_bytes(
                self.shared_expert_ffn_hidden_size
            )
        else:
            mlp = mlp_in + self.mlp_activation_bytes(self.ffn_hidden_size)
        return norms + attn + mlp + MASK_BYTES * h

    def linear_input_elements_per_token(self, layer: int) -> LinearInputs:
        """The values one token stores in `layer` as the input of a linear layer, for its
        weight-gradient GEMM (part of layer_activation_bytes_per_token at 2 bytes each):
        `replicated`, those of the norm outputs, which tensor parallelism replicates unless the
        sequence is split (QKV's, MLA's down-projections' outputs, a dense FC1's); `split`,
        those it splits (the output projection's, FC2's, and the routed and shared experts').
        A router's input is not one: it stays in full precision."""
        h = self.hidden_size
        replicated = h
        if self.uses_mla:
            replicated += (self.q_lora_rank or 0) + (self.kv_lora_rank or 0)
        split = self.num_attention_heads * self.value_head_dim
        if self.moe_layer_mask[layer]:
            split += self.experts_per_token * (h + self.moe_ffn_hidden_size)
            split += self.num_shared_experts * self.shared_expert_ffn_hidden_size
        else:
            replicated += h if self.norms_per_layer == 2 else 0
            split += self.ffn_hidden_size
        return LinearInputs(replicated, split)

    def activation_bytes_per_token(self, seq_len: int) -> int:
        """All layers plus Korthikanti 2022 Sec. 4.3's extras at p = 1: embedding dropout mask h,
        final-norm and LM-head inputs 2h each, fp32 logits 4V (and an embedding norm's input)."""
        layers = sum(
            self.layer_activation_bytes_per_token(i, seq_len) for i in range(self.num_layers)
        )
        h = self.hidden_size
        norms = ACT_BYTES * h * (int(self.final_norm) + int(self.embedding_norm))
        return layers + MASK_BYTES * h + norms + ACT_BYTES * h + LOGIT_BYTES * self.vocab_size
