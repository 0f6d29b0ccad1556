"""Check the GEMM roofline of rules/cost/efficiency.yaml against a published GEMM table.

Run: python benchmarks/gemm_roofline_check.py

The cost model prices a linear layer's GEMM (M x K by K x N) at 1 + r (1/M + 1/N + 1/K) of its
peak-rate time, r the roofline's ridge (peak over HBM bandwidth, the same for 16-bit and FP8
operands): each operand read or written once (Williams, Waterman and Patterson 2009,
"Roofline", CACM). DeepSeek's DeepGEMM README (deepseek-ai/DeepGEMM at 327ec92, "Normal GEMMs for
dense models") publishes the FP8 rate of 18 shapes on H800 (an H100 SXM's compute and HBM).
This script fits the one ceiling (the rate a GEMM would reach with free memory traffic) in log
space and prints each shape's error, for the three-size roofline and for the tokens alone
(1/M, what the model priced before the widths were counted).
"""

from __future__ import annotations

import math
from collections.abc import Callable

# (M, N, K, TFLOP/s), deepseek-ai/DeepGEMM README.md at 327ec92
DEEPGEMM_DENSE = [
    (64, 2112, 7168, 206), (64, 24576, 1536, 289), (64, 32768, 512, 219),
    (64, 7168, 16384, 336), (64, 4096, 7168, 287), (64, 7168, 2048, 295),
    (128, 2112, 7168, 352), (128, 24576, 1536, 535), (128, 32768, 512, 358),
    (128, 7168, 16384, 645), (128, 4096, 7168, 533), (128, 7168, 2048, 510),
    (4096, 2112, 7168, 1127), (4096, 24576, 1536, 1212), (4096, 32768, 512, 775),
    (4096, 7168, 16384, 1520), (4096, 4096, 7168, 1410), (4096, 7168, 2048, 1168),
]  # fmt: skip
H100_FP8_PEAK = 1979.0  # TFLOP/s, dense (parplan_gen/data/gpus.yaml h100-sxm-80gb)
H100_HBM = 3.35  # TB/s
RIDGE = 2 * 989.0 / (2 * H100_HBM)  # elements: FP8 doubles the peak and halves the bytes

Model = Callable[[float, float, float], float]  # (M, N, K) -> fraction of the ceiling


def fit(model: Model) -> tuple[float, list[float]]:
    """The ceiling that fits `model` to the table in log space, and each shape's error."""
    logs = [math.log(t / (H100_FP8_PEAK * model(m, n, k))) for m, n, k, t in DEEPGEMM_DENSE]
    ceiling = math.exp(sum(logs) / len(logs))
    errors = [ceiling * H100_FP8_PEAK * model(m, n, k) / t - 1 for m, n, k, t in DEEPGEMM_DENSE]
    return ceiling, errors


MODELS: dict[str, Model] = {
    "three sizes": lambda m, n, k: 1 / (1 + RIDGE * (1 / m + 1 / n + 1 / k)),
    "tokens alone": lambda m, n, k: 1 / (1 + RIDGE / m),
}


def main() -> None:
    print(f"ridge {RIDGE:.1f} elements; DeepGEMM dense FP8 on H800, 18 shapes")
    results = {name: fit(model) for name, model in MODELS.items()}
    print(f"{'M':>5} {'N':>6} {'K':>6} {'TFLOP/s':>8}  " + "  ".join(f"{n:>12}" for n in MODELS))
    for i, (m, n, k, t) in enumerate(DEEPGEMM_DENSE):
        errs = "  ".join(f"{100 * results[name][1][i]:+11.1f}%" for name in MODELS)
        print(f"{m:>5} {n:>6} {k:>6} {t:>8}  {errs}")
    for name, (ceiling, errors) in results.items():
        mean = 100 * sum(abs(e) for e in errors) / len(errors)
        worst = 100 * max(abs(e) for e in errors)
        print(
            f"{name}: ceiling {ceiling:.3f} of the peak, mean |error| {mean:.1f} %, worst {worst:.1f} %"
        )


if __name__ == "__main__":
    main()
