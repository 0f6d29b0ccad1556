"""Model FLOPs of a transformer: 2 per multiply-add of every matmul a token passes through, plus
the attention score/value products (element-wise work counts zero), as Megatron-LM's
`num_floating_point_operations` counts them.

`FlopCounts` derives from `transformer_shape.TransformerShape` (it reads the shape's fields) and
is a base of `transformer_counts.TransformerCounts`; each method names its source formula
(Narayanan et al. 2021, Korthikanti et al. 2022).
"""

from __future__ import annotations

from parplan_gen.models.transformer_shape import TransformerShape

TRAIN_FLOPS_PER_FORWARD = 3  # backward = 2x forward (Narayanan 2021, Appendix)


class FlopCounts(TransformerShape):
    """FLOPs per token of a transformer."""

    def attention_matmul_weights(self) -> int:
        """Multiply-adds per token in one block's attention projections (Q, K, V, output)."""
        h, a = self.hidden_size, self.num_attention_heads
        if self.uses_mla:
            r_q, r_kv, d_qk = self.q_lora_rank, self.kv_lora_rank or 0, self.qk_head_dim
            q = h * r_q + r_q * a * d_qk if r_q else h * a * d_qk
            kv = h * (r_kv + self.qk_rope_head_dim)
            kv += r_kv * a * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + a * self.v_head_dim * h
        return 2 * h * a * self.head_dim + 2 * h * self.num_kv_heads * self.head_dim

    def mlp_matmul_weights(self, ffn: int) -> int:
        """Multiply-adds per token in one MLP/expert of width `ffn` (x1.5 when gated)."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * ffn

    def moe_matmul_weights(self) -> int:
        """Multiply-adds per token in one MoE block: k routed + shared experts, router, gate."""
        h = self.hidden_size
        routed = self.experts_per_token * self.mlp_matmul_weights(self.moe_ffn_hidden_size)
        shared = self.num_shared_experts * self.mlp_matmul_weights(
            self.shared_expert_ffn_hidden_size
        )
        gate = h if self.shared_expert_gate else 0
        return routed + shared + h * self.num_experts + gate

    def expert_flops_per_token(self) -> int:
        """Training (forward + backward) FLOPs per token of the routed experts, all MoE layers:
        3 x 2 x k x the matmul weights of one expert (part of `flops_per_token`; Megatron-Core
        runs them as grouped GEMMs, megatron/core/transformer/moe/experts.py GroupedMLP/TEGroupedMLP)."""
        routed = self.experts_per_token * self.mlp_matmul_weights(self.moe_ffn_hidden_size)
        return TRAIN_FLOPS_PER_FORWARD * 2 * self.num_moe_layers * routed

    def lm_head_flops_per_token(self) -> int:
        """Forward FLOPs of the logits, 2hV (Narayanan 2021 Appendix: 2BshV per batch)."""
        return 2 * self.hidden_size * self.vocab_size

    def dense_flops_per_token(self) -> int:
        """Forward FLOPs per token of every matmul (independent of sequence length).

        Megatron-LM `num_floating_point_operations` without its `s/h` term, divided by 3:
        attention 4h*a*d*(1 + g/a), MLP 4h*ffn*(1.5 if gated) per expert used, logits 2hV. It is
        extended with MLA projections, shared experts and the router (2h*E, which Megatron omits).
        """
        attn = self.num_layers * self.attention_matmul_weights()
        mlp = self.num_dense_layers * self.mlp_matmul_weights(self.ffn_hidden_size)
        mlp += self.num_moe_layers * self.moe_matmul_weights()
        return 2 * (attn + mlp) + self.lm_head_flops_per_token()

    def keys_per_query(self, layer: int, seq_len: int, *, causal: bool = False) -> float:
        """Keys one query is scored against in `layer` at sequence length `seq_len`.

        `causal=False` is Megatron's convention (the whole s x s score matrix, or the s x w band
        of a windowed layer); `causal=True` counts only unmasked pairs, continuously: s/2 for a
        full layer (FlashAttention's benchmark convention), w - w^2/(2s) for a window w < s.
        """
        window = self.sliding_window if self.window_layer_mask[layer] else None
        if window is None or window >= seq_len:
            return seq_len / 2 if causal else float(seq_len)
        return window - window * window / (2 * seq_len) if causal else float(window)

    def attention_score_flops_per_token(self, seq_len: int, *, causal: bool = False) -> float:
        """Forward FLOPs per token of QK^T and softmax(.)V, all layers.

        Per layer 2*a*(d_qk + d_v)*keys; for MHA this is 4sh, the `4Bs^2h` of Narayanan 2021
        Appendix (Megatron's `s/h` term, divided by 3 for forward only).
        """
        per_key = 2 * self.num_attention_heads * (self.qk_head_dim + self.value_head_dim)
        keys = sum(self.keys_per_query(i, seq_len, causal=causal) for i in range(self.num_layers))
        return per_key * keys

    def forward_flops_per_token(self, seq_len: int, *, causal: bool = False) -> float:
        """Forward model FLOPs per token: matmuls + attention scores."""
        return self.dense_flops_per_token() + self.attention_score_flops_per_token(
            seq_len, causal=causal
        )

    def flops_per_token(self, seq_len: int, *, causal: bool = False) -> float:
        """Training (forward + backward) model FLOPs per token, no recomputation.

        Megatron-LM `num_floating_point_operations` per token, generalised to GQA, MoE (k routed +
        shared experts + router), MLA and windows. For a GPT (MHA, GeLU, ffn=4h, untied or tied)
        this is exactly Korthikanti 2022 Eq. 7 per token: 72Lh^2 (1 + s/(6h) + V/(12hL)).
        """
        return TRAIN_FLOPS_PER_FORWARD * self.forward_flops_per_token(seq_len, causal=causal)
