"""Planner sanity (issue 15 item 5): on the README and issue scenarios, no chosen plan predicts
an MFU above the best published run of its GPU generation, size class and precision by more
than the margin of parplan_gen/data/published_best.yaml.

Each limit is worked by hand from that file (best + margin.points 5):
  - gpt3-175b (174.6B, dense-large) on A100, BF16: Korthikanti 2022 Table 5, 1T at 56.3 %;
  - llama-3-70b (70.6B, dense-medium) on H100, BF16: llm-foundry MPT-30B at 43.92 %;
  - llama-3-405b (405.9B, dense-large) on H100, BF16: Megatron-LM README 462B at 47 %;
  - llama-3-8b (8.03B, dense-small) on H100, BF16: Megatron-LM README 16B at 49 %.
"""

from __future__ import annotations

import pytest

import parplan_gen

SCENARIOS = [
    # model, GPUs, GPU, global batch, sequence length, limit (MFU fraction)
    ("gpt3-175b", 1024, "a100-80gb", 1536, 2048, 0.563 + 0.05),  # issue 15 "Why"
    ("llama-3-70b", 64, "h100", 1024, 8192, 0.4392 + 0.05),  # README `plan` example
    ("llama-3-405b", 16384, "h100", 2048, 8192, 0.47 + 0.05),  # README `plan` example
    ("llama-3-8b", 8, "h100", 512, 8192, 0.49 + 0.05),  # README quick start
]


@pytest.mark.parametrize(("model", "gpus", "gpu", "batch", "seq", "limit"), SCENARIOS)
def test_chosen_mfu_within_the_best_published_plus_margin(
    model: str, gpus: int, gpu: str, batch: int, seq: int, limit: float
) -> None:
    found = parplan_gen.plan(model, {"gpus": gpus, "gpu": gpu}, global_batch=batch, seq_len=seq)
    assert found.feasible
    mfu = found.chosen.throughput.mfu
    assert mfu <= limit, (
        f"{model} on {gpus} x {gpu}: the chosen plan predicts MFU {mfu:.1%}, above the best "
        f"published run of its class + margin ({limit:.1%})"
    )
    # The plan's own warning agrees with the test: none about MFU.
    assert not [w for w in found.document.warnings if w.startswith("predicted MFU")]
