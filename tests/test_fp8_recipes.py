"""FP8 quantization per recipe (rules/cost/compute.yaml fp8_cast_bytes_per_element), from
Transformer Engine's docs/features/low_precision_training/ pages:

  delayed (Hopper): one BF16 read (2 B), the FP8 copy and its transpose (1 + 1)     = 4 B
  tensorwise (Hopper): two reads, amax then cast (2 + 2), copy and transpose (1 + 1) = 6 B
  tensorwise (Blackwell): two reads, one copy (no transpose on Blackwell)             = 5 B
  mxfp8 (Blackwell): one read, rowwise and columnwise copies, an E8M0 byte per 32
    elements for each: 2 + 2 + 2/32                                                   = 4.0625 B
  blockwise (Hopper): one read, two copies, an FP32 scale per 128 for each: 2 + 2 + 8/128
"""

from __future__ import annotations

from typing import Any

import pytest
from formula_env import formula_env, formula_value


def _env(gpu: str, backend: str) -> dict[str, Any]:
    return formula_env("llama-3-8b", {"gpus": 8, "gpu": gpu}, backend, precision="fp8")


_value = formula_value


@pytest.mark.parametrize(
    ("gpu", "backend", "recipe"),
    [
        ("h100", "megatron", "tensorwise"),  # the rendered --fp8-recipe
        ("b200", "megatron", "mxfp8"),
        ("b200", "torchtitan", "tensorwise"),  # torchao float8: dynamic tensorwise everywhere
        ("h100", "deepspeed", "delayed"),  # TE's default recipe in the model code
        ("b200", "deepspeed", "mxfp8"),
    ],
)
def test_a_plan_is_priced_with_the_recipe_its_files_run(
    gpu: str, backend: str, recipe: str
) -> None:
    assert _env(gpu, backend)["train.fp8_recipe"] == recipe


@pytest.mark.parametrize(
    ("gpu", "recipe", "bytes_per_element"),
    [
        ("h100", "delayed", 4),
        ("h100", "tensorwise", 6),
        ("b200", "tensorwise", 5),
        ("b200", "mxfp8", 4.0625),
        ("h100", "blockwise", 4.0625),
    ],
)
def test_quantization_bytes_per_recipe(gpu: str, recipe: str, bytes_per_element: float) -> None:
    env = _env(gpu, "megatron") | {"train.fp8_recipe": recipe}
    assert _value("fp8_cast_bytes_per_element", env) == pytest.approx(bytes_per_element)


def test_current_scaling_costs_half_again_the_casts_of_delayed_scaling() -> None:
    env = _env("h100", "megatron")
    delayed = _value("fp8_cast_s", env | {"train.fp8_recipe": "delayed"})
    current = _value("fp8_cast_s", env | {"train.fp8_recipe": "tensorwise"})
    assert current == pytest.approx(1.5 * delayed, rel=1e-12) and delayed > 0
    # The GEMMs are the same kernel for both (TE speedups.rst): matmul time does not move.
    assert _value("matmul_s", env | {"train.fp8_recipe": "delayed"}) == _value("matmul_s", env)
