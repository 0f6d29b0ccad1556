"""The typed shape of a decoder-only transformer: its fields, their bounds and consistency,
and the structural facts that follow directly from them (MoE, MLA, gated MLP, per-layer masks).

`TransformerShape` is the base of `transformer.ModelSpec`: the counts (`transformer_counts`:
parameters; `transformer_flops`: FLOPs; `transformer_activations`: activation bytes) are
classes derived from it, so each reads the fields with their types. Importers (`hf_config`,
`presets`) build the `ModelSpec`; nothing builds a bare shape.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parplan_gen.models.training_settings import TrainingSettings

MlpKind = Literal["gelu", "geglu", "swiglu", "squared_relu", "relu"]
GATED_MLPS: frozenset[str] = frozenset({"geglu", "swiglu"})  # gate, up and down: 3 matrices
# Size bounds: per-layer tables, op graphs (~12 nodes per layer) and searches are sized by them.
MAX_LAYERS = 4096  # 30x the deepest LLMs published
# Widths, head and expert counts, vocabularies, positions: above the largest published (the
# longest context, Llama 4 Scout's 10,485,760 positions).
MAX_WIDTH = 1 << 24


class TransformerShape(BaseModel):
    """One decoder-only transformer's architecture. Sizes are counts (layers, heads) or widths
    (elements)."""

    # Built on first use: the classes between this and `ModelSpec` are never validated, and
    # building each one's schema at import would cost start-up time for nothing.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str = Field(min_length=1, description="Display name, e.g. `llama-3-8b`.")
    model_type: str = Field(description="Hugging Face `model_type` it was read as, e.g. `llama`.")
    num_layers: int = Field(gt=0, le=MAX_LAYERS, description="Transformer blocks (`L`).")
    hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="Residual stream width (`h`).")
    num_attention_heads: int = Field(gt=0, le=MAX_WIDTH, description="Query heads (`a`).")
    num_kv_heads: int = Field(
        gt=0, le=MAX_WIDTH, description="Key/value heads = GQA query groups (`g`)."
    )
    head_dim: int = Field(
        gt=0, le=MAX_WIDTH, description="Width of one query/key/value head (non-MLA)."
    )
    ffn_hidden_size: int = Field(
        ge=0, le=MAX_WIDTH, description="Inner width of the dense MLP layers."
    )
    mlp_kind: MlpKind = Field(
        description="MLP activation; `geglu`/`swiglu` are gated (gate, up, down matrices)."
    )
    vocab_size: int = Field(
        gt=0, le=MAX_WIDTH, description="Rows of the token embedding (`V`), as stored."
    )
    tied_embeddings: bool = Field(description="The LM head reuses the token embedding matrix.")
    max_position_embeddings: int = Field(
        gt=0,
        le=MAX_WIDTH,
        description="Longest context; rows of the position table when it is learned.",
    )
    position_embedding: Literal["learned", "rope", "alibi"] = Field(
        description="`learned` adds a trainable table of max_position_embeddings x h."
    )
    norm: Literal["layernorm", "rmsnorm"] = Field(
        description="LayerNorm stores scale and shift (2 per element), RMSNorm a scale (1)."
    )
    norms_per_layer: Literal[1, 2] = Field(
        default=2, description="Norms per block: 1 for GPT-J/Falcon-7B style parallel blocks."
    )
    parallel_attn_mlp: bool = Field(
        default=False, description="Attention and MLP read the same block input (GPT-J, NeoX)."
    )
    embedding_norm: bool = Field(default=False, description="A norm after the embedding (BLOOM).")
    final_norm: bool = Field(default=True, description="A norm before the LM head.")
    qk_norm: bool = Field(default=False, description="Per-head norms on queries and keys (Qwen3).")
    qkv_bias: bool = Field(default=False, description="Q, K and V projections have biases.")
    out_proj_bias: bool = Field(default=False, description="Attention output projection bias.")
    mlp_bias: bool = Field(default=False, description="Dense MLP and expert matrices have biases.")
    lm_head_bias: bool = Field(default=False, description="The LM head has a bias (GPT-J).")
    attention_sinks: bool = Field(
        default=False, description="One learned sink logit per head and layer (gpt-oss)."
    )
    sliding_window: int | None = Field(
        default=None,
        gt=0,
        le=MAX_WIDTH,
        description="Keys a windowed layer attends to (None: no window).",
    )
    sliding_window_layers: tuple[bool, ...] = Field(
        default=(), description="Which layers use the window; empty = all, if a window is set."
    )
    num_experts: int = Field(
        default=0, ge=0, le=MAX_WIDTH, description="Routed experts per MoE layer; 0=dense."
    )
    experts_per_token: int = Field(
        default=0, ge=0, le=MAX_WIDTH, description="Routed experts a token uses (k)."
    )
    num_shared_experts: int = Field(
        default=0,
        ge=0,
        le=MAX_WIDTH,
        description="Always-active experts per MoE layer (DeepSeek, Qwen2-MoE).",
    )
    moe_ffn_hidden_size: int = Field(
        default=0, ge=0, le=MAX_WIDTH, description="Inner width of one expert."
    )
    shared_expert_ffn_hidden_size: int = Field(
        default=0, ge=0, le=MAX_WIDTH, description="Inner width of one shared expert."
    )
    shared_expert_gate: bool = Field(
        default=False, description="A sigmoid gate h -> 1 on the shared expert (Qwen2-MoE)."
    )
    router_bias: bool = Field(default=False, description="The router has a bias (gpt-oss).")
    moe_layers: tuple[bool, ...] = Field(
        default=(),
        description="Per layer, True where the MLP is MoE; empty = every layer when num_experts>0.",
    )
    q_lora_rank: int | None = Field(
        default=None,
        gt=0,
        le=MAX_WIDTH,
        description="MLA query compression rank (None: full q_proj).",
    )
    kv_lora_rank: int | None = Field(
        default=None,
        gt=0,
        le=MAX_WIDTH,
        description="MLA key/value compression rank; set = MLA attention.",
    )
    qk_nope_head_dim: int = Field(
        default=0, ge=0, le=MAX_WIDTH, description="MLA per-head q/k width, no RoPE."
    )
    qk_rope_head_dim: int = Field(
        default=0, ge=0, le=MAX_WIDTH, description="MLA per-head q/k RoPE width."
    )
    v_head_dim: int = Field(default=0, ge=0, le=MAX_WIDTH, description="MLA per-head value width.")
    training: TrainingSettings = Field(
        default_factory=TrainingSettings,
        description="How the config says the model was trained (RoPE base, norm epsilon, "
        "dropout, router): passed to the backends, not priced.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TransformerShape:
        a, g, n = self.num_attention_heads, self.num_kv_heads, self.num_layers
        if a % g:
            raise ValueError(f"num_attention_heads({a}) % num_kv_heads({g}) != 0")
        if self.sliding_window_layers and len(self.sliding_window_layers) != n:
            raise ValueError(
                f"len(sliding_window_layers)({len(self.sliding_window_layers)}) != {n}"
            )
        if self.is_moe:
            k, e = self.experts_per_token, self.num_experts
            if not 1 <= k <= e:
                raise ValueError(f"experts_per_token({k}) must be in 1..num_experts({e})")
            if self.moe_ffn_hidden_size == 0:
                raise ValueError("moe_ffn_hidden_size must be > 0 when num_experts > 0")
            if self.moe_layers and len(self.moe_layers) != n:
                raise ValueError(f"len(moe_layers)({len(self.moe_layers)}) != num_layers({n})")
            if self.num_shared_experts and not self.shared_expert_ffn_hidden_size:
                raise ValueError("shared_expert_ffn_hidden_size must be > 0 with shared experts")
        elif self.experts_per_token or self.num_shared_experts or any(self.moe_layers):
            raise ValueError("experts_per_token/num_shared_experts/moe_layers need num_experts > 0")
        if self.norms_per_layer == 1 and not self.parallel_attn_mlp:
            raise ValueError("norms_per_layer=1 needs parallel_attn_mlp (one norm feeds both)")
        if self.num_dense_layers and self.ffn_hidden_size == 0:
            raise ValueError("ffn_hidden_size must be > 0: the model has dense MLP layers")
        if self.uses_mla and not (
            self.qk_rope_head_dim and self.qk_nope_head_dim and self.v_head_dim
        ):
            raise ValueError("MLA needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim > 0")
        return self

    # ---- structure -------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        """True when some layers route tokens to experts."""
        return self.num_experts > 0

    @property
    def uses_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3): keys/values from a compressed latent."""
        return self.kv_lora_rank is not None

    @property
    def gated_mlp(self) -> bool:
        """Gated MLPs (SwiGLU, GeGLU) have three matrices instead of two."""
        return self.mlp_kind in GATED_MLPS

    def positions_cover(self, seq_len: int) -> bool:
        """Whether the positions serve sequences of `seq_len` tokens: computed ones (RoPE, ALiBi)
        always do; a learned table has max_position_embeddings rows and cannot grow (Megatron-LM
        validate_args: max_position_embeddings >= seq_length). The one home of the limit: the
        constraint model.seq_len_within_learned_positions reads it as
        model.positions_cover_seq_len, and the renderer asks it before it writes
        --max-position-embeddings."""
        return self.position_embedding != "learned" or seq_len <= self.max_position_embeddings

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head (MLA: no-RoPE part + RoPE part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.uses_mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Width of one value head."""
        return self.v_head_dim if self.uses_mla else self.head_dim

    @property
    def kv_heads_stored(self) -> int:
        """Key/value heads the attention core sees (MLA expands its latent to every head)."""
        return self.num_attention_heads if self.uses_mla else self.num_kv_heads

    @property
    def moe_layer_mask(self) -> tuple[bool, ...]:
        """Per layer, True where the MLP is a mixture of experts."""
        if not self.is_moe:
            return (False,) * self.num_layers
        return self.moe_layers or (True,) * self.num_layers

    @property
    def window_layer_mask(self) -> tuple[bool, ...]:
        """Per layer, True where attention is limited to `sliding_window` keys."""
        if self.sliding_window is None:
            return (False,) * self.num_layers
        return self.sliding_window_layers or (True,) * self.num_layers

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return sum(self.moe_layer_mask)

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP."""
        return self.num_layers - self.num_moe_layers
