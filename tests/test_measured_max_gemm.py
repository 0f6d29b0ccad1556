"""GEMM efficiency on a GPU whose vendor publishes its own measured maximum-achievable GEMM rate
(rules/cost/compute.yaml architecture_gemm_scale, measured_max_fp8_scale), worked by hand from
the two vendors' benchmarks:

  AMD (ROCm blog 'Measuring Max-Achievable FLOPs - Part 2', Table 1): the MI300X's hipBLASLt
  GEMMs reach 708 TFLOP/s in BF16 and 1,273 in FP8, of dense peaks of 1,307.4 and 2,614.9;
  NVIDIA (Transformer Engine's GEMM benchmark, tests/te_gemm_benchmark.py): a 5B layer's 12
  GEMMs in 31.968 ms (BF16) and 16.785 ms (FP8) on an H200 NVL, dense peaks 835.5 and 1,670.5.

The MI300X is priced at Hopper's fraction of its peak times the ratio of the two fractions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from formula_env import formula_env, formula_value
from te_gemm_benchmark import (
    H200_NVL_BF16_PEAK,
    H200_NVL_FP8_PEAK,
    MS,
    TE_H200_BF16_MS,
    TE_H200_FP8_KERNELS_MS,
    te_layer_flops,
)

MI300X_BF16 = 708 / 1307.4  # MAF over the dense peak: 0.5415
MI300X_FP8 = 1273 / 2614.9  # 0.4868
MI325X_BF16 = 843 / 1307.4
NVIDIA_BF16 = te_layer_flops() / (TE_H200_BF16_MS * MS) / H200_NVL_BF16_PEAK  # 0.7178
NVIDIA_FP8 = te_layer_flops() / (TE_H200_FP8_KERNELS_MS * MS) / H200_NVL_FP8_PEAK  # 0.6838


def _env(gpu: str | Path, precision: str = "bf16") -> dict:
    cluster = gpu if isinstance(gpu, Path) else {"gpus": 8, "gpu": gpu}
    return formula_env("llama-3-8b", cluster, "megatron", precision=precision)


@pytest.mark.parametrize(("gpu", "fraction"), [("mi300x", MI300X_BF16), ("mi325x", MI325X_BF16)])
def test_an_amd_gemm_is_priced_at_hoppers_fraction_times_the_vendors_ratio(
    gpu: str, fraction: float
) -> None:
    env = _env(gpu)
    hopper = formula_value("hopper_gemm_scale", env)
    assert formula_value("architecture_gemm_scale", env) == pytest.approx(
        hopper * fraction / NVIDIA_BF16, rel=1e-9
    )
    # below Hopper's (0.754 of it on the MI300X) and below the vendor's own measured rate
    assert formula_value("architecture_gemm_scale", env) < hopper
    rate = formula_value("gemm_efficiency", env) * env["cluster.peak_flops_16bit"]
    assert rate < env["cluster.gemm_max_fraction_16bit"] * env["cluster.peak_flops_16bit"]


def test_an_amd_fp8_gemm_gains_what_its_vendor_measured_against_what_te_measured() -> None:
    env = _env("mi300x", "fp8")
    expected = (MI300X_FP8 / MI300X_BF16) / (NVIDIA_FP8 / NVIDIA_BF16)  # 0.899 / 0.953
    assert formula_value("measured_max_fp8_scale", env) == pytest.approx(expected, rel=1e-9)
    assert formula_value("linear_peak_flops", env) == pytest.approx(
        env["cluster.peak_flops"] * formula_value("fp8_gemm_scale", env) * expected, rel=1e-9
    )


@pytest.mark.parametrize(
    ("gpu", "scale"),
    [("h100", "hopper_gemm_scale"), ("b200", "blackwell_gemm_scale"), ("a100-80gb", None)],
)
def test_gpus_without_a_vendor_figure_keep_their_fitted_scales(gpu: str, scale: str | None) -> None:
    env = _env(gpu)
    assert env["cluster.gemm_max_fraction_16bit"] == 0.0
    expected = 1.0 if scale is None else formula_value(scale, env)
    assert formula_value("architecture_gemm_scale", env) == expected


def test_an_amd_gpu_without_a_published_figure_has_no_measured_term() -> None:
    """AMD's table covers the MI300X and MI325X only: the MI355X keeps the neutral scale."""
    env = _env("mi355x", "fp8")
    assert env["cluster.gemm_max_fraction"] == env["cluster.gemm_max_fraction_16bit"] == 0.0
    assert formula_value("architecture_gemm_scale", env) == 1.0
    assert formula_value("measured_max_fp8_scale", env) == 1.0


def test_an_fp16_plan_uses_the_vendors_fp16_figure() -> None:
    """AMD's FP16 MAF (654) is below its BF16 one (708) at the same peak; the scale follows."""
    env = _env("mi300x", "fp16")
    assert env["cluster.gemm_max_fraction_16bit"] == pytest.approx(654 / 1307.4)
    assert formula_value("architecture_gemm_scale", env) == pytest.approx(
        formula_value("hopper_gemm_scale", env) * (654 / 1307.4) / NVIDIA_BF16, rel=1e-9
    )
    assert formula_value("measured_max_fp8_scale", env) == 1.0


def test_a_lowered_peak_lowers_the_priced_rate_with_it(tmp_path: Path) -> None:
    """The measured rate is a fraction of the peak AMD measured against (1,307.4): a cluster
    file that lowers the peak (a power-capped part) keeps the fraction, so the priced GEMM rate
    falls with the peak rather than staying at the 750 W part's 708 TFLOP/s."""
    path = tmp_path / "capped.yaml"
    path.write_text("gpu: mi300x\nnodes: 1\noverrides:\n  bf16_dense_tflops: 900\n")
    capped, stock = _env(path), _env("mi300x")
    assert capped["cluster.gemm_max_fraction_16bit"] == stock["cluster.gemm_max_fraction_16bit"]
    rate = {
        name: formula_value("gemm_efficiency", env) * env["cluster.peak_flops_16bit"]
        for name, env in (("capped", capped), ("stock", stock))
    }
    assert rate["capped"] == pytest.approx(rate["stock"] * 900 / 1307.4, rel=1e-9)
