"""The linear layers' GEMMs priced by their roofline in all three sizes (rules/cost/efficiency.yaml
`linear_gemm_width`, `linear_gemm_efficiency`, `lm_head_gemm_efficiency`).

An M x K by K x N GEMM does 2 M N K FLOPs and moves its three operands, M K + K N + M N elements
(Williams, Waterman and Patterson 2009, "Roofline"): at r elements of ridge it takes
1 + r (1/M + 1/N + 1/K) of its peak-rate time. The rules price a layer's GEMMs by one width
whose inverse is their FLOP-weighted 1/N + 1/K, in a closed form; these tests enumerate the
GEMMs one by one instead (Megatron-Core: QKV and the first MLP GEMM column-parallel, split N;
the output projection and the second MLP GEMM row-parallel, split K; a gated MLP's first GEMM
2 f wide) and compare.

Worked example, Llama 3 8B at tp 8 (h 4096, 32 heads and 8 KV heads of 128, SwiGLU f 14336),
one rank's GEMMs (N, K), each weighted by its FLOPs (N x K):
  QKV (768, 4096), output (4096, 512), fc1 (3584, 4096), fc2 (4096, 1792);
  sum of N K (1/N + 1/K) = (4096 + 768) + (512 + 4096) + (4096 + 3584) + (1792 + 4096)
  = 23,040 over sum of N K = 27,262,976: 1/width = 8.4510e-4, width 1,183.3 elements.
At tp 1 the same sums give 1/width = 69,632 / 218,103,808 = 3.1926e-4 (3,132.2 elements).
"""

from __future__ import annotations

from typing import Any

import pytest
from formula_env import formula_env, formula_value

H100_RIDGE = 989e12 / 3.35e12  # data/gpus.yaml h100-sxm-80gb: dense BF16 peak over HBM bandwidth


def _inverse_width(env: dict[str, Any]) -> float:
    """The FLOP-weighted 1/N + 1/K of one rank's linear GEMMs, GEMM by GEMM."""
    a, g, d = env["model.heads"], env["model.kv_heads"], env["model.head_dim"]
    h, f, mf, k = (
        env["model.hidden"],
        env["model.ffn"],
        env["model.moe_ffn"],
        env["model.experts_per_token"],
    )
    tp, etp = env["plan.tp"], env["plan.etp"]
    wide = 2 if env["model.gated_mlp"] else 1
    moe_share = env["model.moe_layers"] / env["model.layers"]
    gemms = [  # (FLOP weight per token and layer, N on one rank, K on one rank)
        ((a + 2 * g) * d * h, (a + 2 * g) * d / tp, h),  # QKV, column-parallel
        (a * d * h, h, a * d / tp),  # output projection, row-parallel
        ((1 - moe_share) * wide * f * h, wide * f / tp, h),  # dense MLP fc1
        ((1 - moe_share) * f * h, h, f / tp),  # dense MLP fc2
    ]
    if moe_share:
        gemms += [
            (moe_share * k * wide * mf * h, wide * mf / etp, h),  # each routed expert's fc1
            (moe_share * k * mf * h, h, mf / etp),  # and fc2
        ]
    return sum(w * (1 / n + 1 / kk) for w, n, kk in gemms if w) / sum(w for w, _, _ in gemms)


def test_llama_3_8b_worked_by_hand() -> None:
    tp8 = formula_env("llama-3-8b", {"gpus": 8, "gpu": "h100"}, "megatron", tp=8)
    tp1 = formula_env("llama-3-8b", {"gpus": 8, "gpu": "h100"}, "megatron", tp=1)
    assert 1 / formula_value("linear_gemm_width", tp8) == pytest.approx(23_040 / 27_262_976)
    assert 1 / formula_value("linear_gemm_width", tp1) == pytest.approx(69_632 / 218_103_808)
    assert formula_value("gemm_ridge_tokens", tp8) == pytest.approx(H100_RIDGE)
    # mbs 1 x 8192 tokens per GEMM
    factor = 1 + H100_RIDGE * (1 / 8192 + 23_040 / 27_262_976)
    assert formula_value("linear_gemm_efficiency", tp8) == pytest.approx(
        formula_value("gemm_efficiency", tp8) / factor
    )
    # the LM head: 8192 tokens x 4096 into 128,256 / 8 logits
    head = 1 + H100_RIDGE * (1 / 8192 + 8 / 128_256 + 1 / 4096)
    assert formula_value("lm_head_gemm_efficiency", tp8) == pytest.approx(
        formula_value("gemm_efficiency", tp8) / head
    )


@pytest.mark.parametrize(
    ("model", "gpus", "layout"),
    [
        ("llama-3-8b", 8, {"tp": 2}),
        ("gpt3-175b", 64, {"tp": 8, "pp": 8}),  # multi-head attention, plain GELU MLP
        ("llama-3-405b", 64, {"tp": 8, "pp": 8}),
        ("mixtral-8x7b", 64, {"tp": 2, "ep": 8}),  # every layer's MLP is 8 experts, top 2
        ("mixtral-8x7b", 64, {"tp": 4, "ep": 4, "etp": 1}),
        ("qwen3-30b-a3b", 16, {"tp": 1, "ep": 8, "pp": 2}),  # 128 narrow experts, top 8
        ("deepseek-v3", 256, {"tp": 2, "ep": 64, "pp": 2, "etp": 1}),  # 3 dense layers first
    ],
)
def test_the_closed_form_is_the_gemms_one_by_one(
    model: str, gpus: int, layout: dict[str, Any]
) -> None:
    env = formula_env(model, {"gpus": gpus, "gpu": "h100"}, "megatron", **layout)
    assert 1 / formula_value("linear_gemm_width", env) == pytest.approx(_inverse_width(env))


def test_narrower_shards_and_fewer_tokens_cost_more() -> None:
    def efficiency(tp: int, mbs: int) -> float:
        env = formula_env("llama-3-70b", {"gpus": 8, "gpu": "h100"}, "megatron", tp=tp, mbs=mbs)
        return formula_value("linear_gemm_efficiency", env)

    by_tp = [efficiency(tp, 1) for tp in (1, 2, 4, 8)]
    assert by_tp == sorted(by_tp, reverse=True) and by_tp[0] > by_tp[-1]
    assert efficiency(8, 1) < efficiency(8, 2)
