"""FP8 activation memory (rules/cost/memory.yaml act_fp8_inputs_saving) and FP8 all-gathers under
sequence parallelism (rules/cost/time.yaml tp_traffic_scale): Transformer Engine keeps
a linear layer's input for the weight-gradient GEMM as its 1-byte FP8 copy (TE v2.9
module/linear.py, layernorm_linear.py), where the 16-bit count holds 2 bytes. Worked by hand:

Llama 3 8B (h 4096, 32 heads of 128, SwiGLU ffn 14336, two norms), per token and layer:
  replicated without sequence parallelism: QKV's and FC1's inputs, 4096 + 4096 = 8192 values;
  split over tp: the projection's 32 x 128 = 4096 and FC2's 14336 = 18432 values.
Qwen3-30B-A3B (h 2048, 32 heads of 128, every layer MoE: 8 experts of 768): replicated: QKV's
  input 2048 (the router's input stays in full precision); split: 4096 + 8 x (2048 + 768) =
  26,624 values.
"""

from __future__ import annotations

from typing import Any

import pytest
from formula_env import formula_env, formula_value


def _env(model: str, gpu: str, backend: str, **layout: Any) -> dict[str, Any]:
    return formula_env(model, {"gpus": 8, "gpu": gpu}, backend, seq_len=4096, **layout)


def test_linear_inputs_of_a_dense_and_a_moe_model() -> None:
    dense = _env("llama-3-8b", "h100", "megatron")
    assert dense["model.act_linear_inputs_replicated"] == 8192
    assert dense["model.act_linear_inputs_split"] == 18432
    moe = _env("qwen3-30b-a3b", "h100", "megatron")
    assert moe["model.act_linear_inputs_replicated"] == 2048
    assert moe["model.act_linear_inputs_split"] == 4096 + 8 * (2048 + 768)


@pytest.mark.parametrize(
    ("gpu", "backend", "precision", "sp", "saving"),
    [
        ("h100", "megatron", "fp8", True, (8192 + 18432) / 2),  # per-tensor: 1 byte a value
        ("h100", "megatron", "fp8", False, 8192 + 18432 / 2),  # QKV/FC1 inputs replicated
        ("b200", "megatron", "fp8", True, (1 - 1 / 32) * (8192 + 18432) / 2),  # MXFP8 scales
        ("h100", "deepspeed", "fp8", True, (8192 + 18432) / 2),  # TE modules as well
        ("h100", "torchtitan", "fp8", True, 0),  # torchao keeps its 16-bit inputs
        ("h100", "megatron", "bf16", True, 0),
    ],
)
def test_fp8_keeps_linear_inputs_in_one_byte(
    gpu: str, backend: str, precision: str, sp: bool, saving: float
) -> None:
    layout = {"tp": 2, "sequence_parallel": sp}
    fp8 = _env("llama-3-8b", gpu, backend, precision=precision, **layout)
    assert formula_value("act_fp8_inputs_saving", fp8) == pytest.approx(saving)
    sixteen = _env("llama-3-8b", gpu, backend, precision="bf16", **layout)
    assert formula_value("act_per_token_layer", fp8) == pytest.approx(
        formula_value("act_per_token_layer", sixteen) - saving
    )


@pytest.mark.parametrize(
    ("gpu", "backend", "precision", "sp", "scale"),
    [
        # an all-reduce's worth of traffic: the all-gather half at 1 byte, the reduce-scatter
        # half at 2: (1 + 1/2) / 2
        ("h100", "megatron", "fp8", True, 0.75),
        # torchtitan 0.3 all-gathers the 16-bit inputs (protocols/sharding.py: its sharding is
        # dtype-agnostic); torchao's float8 all-gathers are its calibration runs'
        # (test_fp8_recipes.py)
        ("h100", "torchtitan", "fp8", True, 1),
        ("b200", "megatron", "fp8", True, (1 + (1 + 1 / 32) / 2) / 2),  # MXFP8 scales
        ("h100", "megatron", "fp8", False, 1),  # all-reduces of the 16-bit outputs
        ("h100", "megatron", "bf16", True, 1),
    ],
)
def test_fp8_sequence_parallel_gathers_move_one_byte(
    gpu: str, backend: str, precision: str, sp: bool, scale: float
) -> None:
    env = _env("llama-3-8b", gpu, backend, tp=2, sequence_parallel=sp, precision=precision)
    assert formula_value("tp_traffic_scale", env) == pytest.approx(scale)
