"""The activations a Megatron-LM pipeline rank holds (models/pipeline_split.py peak_layers,
rules/cost/memory.yaml pipeline_stored_layers), worked from Megatron-LM's schedule
(core_v0.16.0 pipeline_parallel/schedules.py get_pp_rank_microbatches: rank r runs
p - r - 1 warm-up micro-batches without interleaving, 2 (p - r - 1) + (v - 1) p warm-up chunks
with it, then one forward before its first backward) and the split the files spell
(models/pipeline_split.py), not from the cost model."""

from __future__ import annotations

import pytest
from formula_env import formula_env, formula_value

from parplan_gen.models.pipeline_split import peak_layers


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "micro", "held", "why"),
    [
        # 80 layers, 8 x 5 chunks of 2: rank 0 holds 2 x 7 + 4 x 8 + 1 = 47 chunks, 94 layers,
        # Korthikanti's Eq. 5 L (1 + (p - 1) / (p v)) = 80 x 47 / 40
        (80, 8, 5, 64, 94, "an even split: Korthikanti's bound"),
        # Llama 3.1 405B, 126 layers + embedding + loss = 128 on 16 x 4 chunks of 2 (the first
        # chunk of rank 0 one layer): rank 1 holds 2 x 14 + 3 x 16 + 1 = 77 two-layer chunks
        (126, 16, 4, 384, 154, "the second rank, when the first has fewer layers"),
        # 4 micro-batches of 4 x 2 chunks of 4 layers: the warm-up would run 11 chunk forwards,
        # the step has 8, all of rank 0's (4 micro-batches x 8 layers)
        (32, 4, 2, 4, 32, "no more chunk forwards than the step has"),
        # 126 layers on 16 stages without interleaving: first and last 7, middle 8 (Llama 3
        # Sec. 3.3.2); rank 0 holds 16 micro-batches of 7 layers, rank 1 15 of 8
        (126, 16, 1, 64, 120, "1F1B with an uneven first stage"),
        (32, 4, 1, 2, 16, "1F1B with fewer micro-batches than stages"),
        (32, 1, 1, 8, 32, "one stage: one micro-batch"),
    ],
)
def test_the_rank_that_holds_the_most(
    layers: int, pp: int, vpp: int, micro: int, held: int, why: str
) -> None:
    assert peak_layers(layers, pp, vpp, micro) == held, why


def test_megatron_plans_hold_what_the_schedule_leaves_in_flight() -> None:
    """Llama 3 8B (32 layers), pp 4 x vpp 2, 4 micro-batches: 32 layer forwards stored, where
    Korthikanti's bound for many micro-batches counts 44; other backends keep the bound."""
    layout = {"pp": 4, "vpp": 2, "mbs": 1, "global_batch": 8, "seq_len": 4096}
    megatron = formula_env("llama-3-8b", {"gpus": 8, "gpu": "h100"}, "megatron", **layout)
    assert formula_value("pipeline_stored_layers", megatron) == 32
    deepspeed = formula_env("llama-3-8b", {"gpus": 8, "gpu": "h100"}, "deepspeed", **layout)
    assert formula_value("pipeline_stored_layers", deepspeed) == pytest.approx(32 * (1 + 3 / 8))
