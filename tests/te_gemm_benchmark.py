"""Transformer Engine's GEMM benchmark of a 5B layer on an H200 NVL, the figures the tests of
the FP8 terms (test_fp8_recipes.py) and of the vendors' measured GEMM rates
(test_measured_max_gemm.py) check against."""

from __future__ import annotations

# Transformer Engine's GEMM benchmark of a 5B layer on an H200 NVL (TE docs/examples/
# gemm_profiling/gemm_profiling.rst, "Worked Example: 5B Model on H200": hidden 4096,
# intermediate 16384, M = 31 x 512 = 15,872 tokens; the 12 GEMMs of one layer; ms per layer).
TE_H200_BF16_MS = 31.968  # pre-quantized run's BF16 column
TE_H200_FP8_KERNELS_MS = 16.785  # FP8 current scaling, inputs quantized before the timed loop
TE_H200_CURRENT_AUTOCAST_MS = 20.285  # te.Linear under autocast: quantizes input and weight
TE_H200_DELAYED_AUTOCAST_MS = 18.978
MS = 1e-3  # seconds
# The 12 GEMMs (M x K x N): the page lists the Fprop ones; Dgrad swaps K and N, Wgrad takes
# K x M x N (its "Manual Shape Mode" section, TE benchmarks/gemm/benchmark_gemm.py).
TE_5B_SHAPES = (
    (15872, 4096, 12288), (15872, 4096, 4096), (15872, 4096, 16384), (15872, 16384, 4096),
    (15872, 12288, 4096), (15872, 4096, 4096), (15872, 16384, 4096), (15872, 4096, 16384),
    (4096, 15872, 12288), (4096, 15872, 4096), (4096, 15872, 16384), (16384, 15872, 4096),
)  # fmt: skip


# The H200 NVL's dense peaks, FLOP/s: NVIDIA's H200 datasheet, H200 NVL column, BF16 1,671 and
# FP8 3,341 TFLOP/s with sparsity (the tensor-core figures of the H100 NVL, catalog h100-nvl).
H200_NVL_BF16_PEAK = 1671e12 / 2
H200_NVL_FP8_PEAK = 3341e12 / 2


def te_layer_flops() -> float:
    """FLOPs of the benchmark's one layer: 2 M K N for each of its 12 GEMMs."""
    return float(sum(2 * m * k * n for m, k, n in TE_5B_SHAPES))
