"""Issue 15 cost terms: the slowest pipeline rank (embedding / LM head + loss stages) and the
MoE model names, with figures worked out by hand from the split rules and the FLOP formula."""

from __future__ import annotations

import pytest

from parplan_gen.models.pipeline_split import slowest_stage
from parplan_gen.models.presets import load_preset


def test_one_stage_carries_embedding_head_and_loss() -> None:
    # pp = 1: the rank's own time plus the embedding and the loss (the head is in rank_s).
    assert slowest_stage(32, 1, 1, 10.0, 2.0, 0.5, 1.0) == pytest.approx(11.5)


def test_even_split_last_rank_adds_head_and_loss() -> None:
    # 36 layers on 4 ranks: 9 each. rank_s 10 s carries 2/4 s of head: 9.5 s of layers, so a
    # layer is 9.5/9 s; last rank 9.5 + 2 + 1 = 12.5 s, the first 9.5 + 0.5 = 10 s.
    assert slowest_stage(36, 4, 1, 10.0, 2.0, 0.5, 1.0) == pytest.approx(12.5)


def test_uneven_split_moves_layers_off_the_last_rank() -> None:
    # 126 layers on 16 ranks: first 7, middle 8, last 7 (Llama 3 Sec. 3.3.2). rank_s 8 s with
    # no head: a layer is 8 / (126/16) s; the last rank 7 layers + 0.6 s loss, a middle one 8.
    layer = 8.0 / (126 / 16)
    assert slowest_stage(126, 16, 1, 8.0, 0.0, 0.0, 0.6) == pytest.approx(8 * layer)
    assert slowest_stage(126, 16, 1, 8.0, 0.0, 0.0, 3.0) == pytest.approx(7 * layer + 3.0)


def test_qwen3_expert_flops_per_token() -> None:
    # 48 MoE layers x k = 8 experts x 3 gated matrices of 2048 x 768, x 2 FLOPs x 3 (fwd + bwd).
    spec = load_preset("qwen3-30b-a3b")
    assert spec.expert_flops_per_token() == 3 * 2 * 48 * 8 * 3 * 2048 * 768
    assert spec.formula_values(4096)["model.moe_ffn"] == 768
