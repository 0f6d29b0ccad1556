"""The Hugging Face MoE routers, written from their modeling code, to hold Megatron-Core's router
against: for a batch of router logits, the weight each token gives each expert (0 for the experts
it does not visit), as the HF model computes it (tests/test_consumers.py
test_megatron_core_routes_as_the_hf_model).

- Mixtral (transformers models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock.forward):
  softmax over every expert, top k, `routing_weights /= routing_weights.sum(dim=-1)`.
- Qwen2-MoE / Qwen3-MoE (modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock, modeling_qwen3_moe.py):
  softmax, top k, renormalised `if self.norm_topk_prob`.
- DeepSeek-V2 (DeepSeek's modeling_deepseek.py MoEGate.forward, huggingface.co/deepseek-ai/
  DeepSeek-V2-Lite; transformers' DeepseekV2Moe agrees for norm_topk_prob false): softmax, top k
  (topk_method greedy) or the top k within the topk_group groups of the best max score
  (group_limited_greedy), then renormalised when k > 1 and norm_topk_prob, else multiplied by
  routed_scaling_factor.
- DeepSeek-V3 (modeling_deepseek_v3.py DeepseekV3TopkRouter / DeepseekV3MoE
  route_tokens_to_experts): sigmoid, the top k of scores + e_score_correction_bias within the
  topk_group groups of the best sum of two, weights the unbiased scores, renormalised when
  norm_topk_prob, times routed_scaling_factor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HfRouter:
    """One HF model's router as its config.json states it."""

    family: str  # "softmax" (Mixtral, Qwen-MoE), "deepseek_v2" or "deepseek_v3"
    k: int
    norm: bool
    scale: float = 1.0
    groups: int | None = None  # group-limited routing: n_group / topk_group
    group_topk: int | None = None


def _group_mask(torch: Any, scores: Any, groups: int, keep: int, rank: str) -> Any:
    """The experts of the `keep` groups whose best score (`rank` "max") or best two summed
    ("top2") is highest, as a boolean mask over the experts."""
    n, experts = scores.shape
    grouped = scores.view(n, groups, experts // groups)
    best = grouped.max(dim=-1).values if rank == "max" else grouped.topk(2, dim=-1)[0].sum(-1)
    chosen = torch.zeros_like(best).scatter_(1, best.topk(keep, dim=-1)[1], 1)
    return chosen.unsqueeze(-1).expand(n, groups, experts // groups).reshape(n, -1).bool()


def hf_weights(torch: Any, router: HfRouter, logits: Any, bias: Any = None) -> Any:
    """[tokens, experts] weights of the HF model's router for fp32 `logits`."""
    if router.family == "deepseek_v3":
        scores = torch.sigmoid(logits)
        choice = scores + bias
        if router.groups:
            mask = _group_mask(torch, choice, router.groups, router.group_topk or 1, "top2")
            choice = choice.masked_fill(~mask, 0.0)
        index = choice.topk(router.k, dim=-1)[1]
        top = scores.gather(1, index)
        if router.norm:
            top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)
        top = top * router.scale
    else:
        scores = torch.softmax(logits, dim=-1)
        if router.family == "deepseek_v2" and router.groups:
            mask = _group_mask(torch, scores, router.groups, router.group_topk or 1, "max")
            top, index = scores.masked_fill(~mask, 0.0).topk(router.k, dim=-1)
        else:
            top, index = scores.topk(router.k, dim=-1)
        if router.norm and (router.k > 1 or router.family != "deepseek_v2"):
            top = top / top.sum(dim=-1, keepdim=True)
        elif router.family == "deepseek_v2":
            top = top * router.scale
    return torch.zeros_like(logits).scatter(1, index, top)
