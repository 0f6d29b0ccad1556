"""The units a named formula may declare (`unit:` in a rule file), the units of the estimate's
figures, and the size constants a formula may use by name (`GiB`). Read by the rule schema, the
formula explainer, `docs/rules.md` (checked by a test) and the test that every built-in named
formula of the cost model says its unit.
"""

from __future__ import annotations

from typing import Literal

Unit = Literal[
    "s",
    "B",
    "B/s",
    "FLOP",
    "FLOP/s",
    "FLOP/token",
    "B/token",
    "B/param",
    "B/element",
    "params",
    "elements",
    "tokens",
    "count",
    "fraction",
    "1",
    "bool",
    "text",
    "GPU-hours",
    "currency",
    "tokens/s",
    "TFLOP/s",
]

# What each unit means; docs/rules.md's units table is this one.
UNITS: dict[str, str] = {
    "s": "Seconds.",
    "B": "Bytes.",
    "B/s": "Bytes per second.",
    "FLOP": "Floating-point operations.",
    "FLOP/s": "Floating-point operations per second.",
    "FLOP/token": "Floating-point operations per token.",
    "B/token": "Bytes per token (of one layer, where the formula says so).",
    "B/param": "Bytes per parameter.",
    "B/element": "Bytes per tensor element.",
    "params": "Parameters (a number of weights).",
    "elements": "Tensor elements (a width, a number of values).",
    "tokens": "Tokens (samples, for a graph model).",
    "count": "A number of things: layers, ranks, micro-batches, collectives, passes, steps.",
    "fraction": "A share of a whole, from 0 to 1 (an efficiency, the bubble's share).",
    "1": "A dimensionless ratio or factor, which may exceed 1 (a scale, a speedup).",
    "bool": "true or false.",
    "text": "A string ('megatron', 'full').",
    "GPU-hours": "GPUs x hours.",
    "currency": "Money, in the unit of the GPU-hour price (`--gpu-hour-price`).",
    "tokens/s": "Tokens per second (samples per second, for a graph model).",
    "TFLOP/s": "10^12 floating-point operations per second.",
}

# The unit of each figure of an estimate (`estimate:` sections; docs/rules.md, "estimate"):
# by section, or by `section.key` where the figures of one section differ.
FIGURE_UNITS: dict[str, Unit] = {
    "memory": "B",
    "time": "s",
    "throughput.tokens_per_s": "tokens/s",
    "throughput.model_tflops_per_gpu": "TFLOP/s",
    "throughput.hardware_tflops_per_gpu": "TFLOP/s",
    "throughput.mfu": "fraction",
    "throughput.model_tflops_causal_per_gpu": "TFLOP/s",
    "throughput.mfu_causal": "fraction",
}


def figure_unit(section: str, key: str) -> str | None:
    """The unit of the estimate figure `section.key` (None: a figure of no known unit)."""
    return FIGURE_UNITS.get(f"{section}.{key}", FIGURE_UNITS.get(section))


# Binary size prefixes (IEC 80000-13: kibi = 2^10, mebi = 2^20, gibi = 2^30, tebi = 2^40), which a
# formula may write instead of a literal: `2 * GiB`. Integers, so `2 * GiB` is 2147483648 exactly.
SIZE_CONSTANTS: dict[str, int] = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
