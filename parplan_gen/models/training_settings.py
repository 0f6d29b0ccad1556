"""What a model's own configuration says about how it was trained (`TrainingSettings`).

These settings do not change the shape the cost model prices; the renderer passes them to the
backends (render/facts.py: Megatron-LM's --rotary-base, --norm-epsilon, dropout and router
arguments). A field is None where the configuration does not say: the script then states the
backend's default in its header. `models/hf_training.py` reads them from a config.json with the
keys and defaults of parplan_gen/data/hf_training.yaml.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_RATE = 1.0  # dropout probabilities and loss coefficients are fractions


class RopeScaling(BaseModel):
    """A context-extension rescaling of the rotary frequencies (config.json rope_scaling)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: str = Field(min_length=1, description="`rope_type` (or `type`): llama3, yarn, linear...")
    factor: float = Field(gt=0, description="Scaling factor (`factor`).")
    low_freq_factor: float | None = Field(default=None, gt=0, description="llama3 scaling.")
    high_freq_factor: float | None = Field(default=None, gt=0, description="llama3 scaling.")
    original_max_position_embeddings: int | None = Field(
        default=None, gt=0, description="Context the model was pretrained at before scaling."
    )
    beta_fast: float | None = Field(default=None, gt=0, description="YaRN ramp, fast end.")
    beta_slow: float | None = Field(default=None, gt=0, description="YaRN ramp, slow end.")
    mscale: float | None = Field(default=None, gt=0, description="YaRN attention scale.")
    mscale_all_dim: float | None = Field(default=None, ge=0, description="YaRN all-dim scale.")


class TrainingSettings(BaseModel):
    """The model's training settings as its config gives them (None: it does not say)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    rope_theta: float | None = Field(default=None, gt=0, description="RoPE base (None: no RoPE).")
    rope_scaling: RopeScaling | None = Field(default=None, description="RoPE rescaling, if any.")
    rope_fraction: float | None = Field(
        default=None, gt=0, le=1, description="Share of each head's width rotated (GPT-NeoX)."
    )
    norm_eps: float | None = Field(default=None, gt=0, lt=1, description="Norm epsilon.")
    attention_dropout: float | None = Field(
        default=None, ge=0, lt=MAX_RATE, description="Dropout on attention probabilities."
    )
    hidden_dropout: float | None = Field(
        default=None, ge=0, lt=MAX_RATE, description="Dropout on the residual branches."
    )
    router_score: Literal["softmax", "sigmoid"] | None = Field(
        default=None, description="MoE router score function (None: not MoE / not said)."
    )
    expert_bias: bool = Field(
        default=False, description="Auxiliary-loss-free balancing bias on the router scores."
    )
    aux_loss_coeff: float | None = Field(
        default=None, ge=0, le=MAX_RATE, description="Load-balancing loss coefficient."
    )
    seq_aux: bool = Field(default=False, description="The balance loss is per sequence.")
    topk_norm: bool | None = Field(
        default=None,
        description="The routed experts' weights renormalised to sum 1 over the top k "
        "(norm_topk_prob; None: not MoE).",
    )
    topk_scale: float | None = Field(
        default=None, gt=0, description="Factor on the routed experts' weights."
    )
    router_groups: int | None = Field(
        default=None, gt=0, description="Expert groups of group-limited routing."
    )
    router_group_topk: int | None = Field(
        default=None, gt=0, description="Groups a token may route to."
    )
    group_score_experts: int | None = Field(
        default=None,
        gt=0,
        description="Group-limited routing ranks a group by the sum of its best N expert "
        "scores: 1 (its best, DeepSeek-V2) or 2 (DeepSeek-V3).",
    )
    mtp_layers: int = Field(default=0, ge=0, description="Multi-token-prediction modules.")
