"""The optimizer and LR schedule of ds_config.json and torchtitan_run.sh, read back by the real
consumers: DeepSpeed's DeepSpeedConfig (and its own WarmupCosineLR, built as engine.py builds it
from the config) and torchtitan 0.3.0's ConfigManager (tests/consumer_deepspeed.py,
tests/consumer_torchtitan.py).

Expected values are worked by hand from the sources, not read from our output:
- llama-3-8b: peak 3e-4, Llama 3 paper Table 3; the rest GPT-3 Appendix B: cosine to 10 %
  (3e-5), warmup 375M of 260B tokens, AdamW 0.9/0.95/1e-8, weight decay 0.1. Global batch 512
  x 8192 = 4,194,304 tokens per step: 260e9 / 4,194,304 = 61,988.8 -> 61,989 steps; warmup
  375e6 / 260e9 x 61,989 = 89.41 -> 89 steps.
- mixtral-8x7b (no published LR): 12.88B parameters per token, GPT-3 Table 2.1 between 6.7B
  (1.2e-4) and 13B (1.0e-4) in log-log: 1.2e-4 x (1/1.2)^(ln(12.88/6.7)/ln(13/6.7)) = 1.0026e-4,
  written 1.00e-4. 256 x 4096 = 1,048,576 tokens per step: 260e9 / 1,048,576 = 247,955.7 ->
  247,956 steps; warmup 375/260000 x 247,956 = 357.6 -> 358.
"""

from __future__ import annotations

import consumer_torchtitan
import pytest

import consumer_deepspeed
from consumer_support import consumer, plan_of

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# PLANNED case -> (peak LR, total steps, warmup steps); min LR 10 % of the peak for both.
DEEPSPEED = {
    "llama-3-8b-8xh100": (3.0e-4, 61989, 89),
    "mixtral-8x7b-64xh100-deepspeed": (1.0e-4, 247956, 358),
}


@pytest.mark.parametrize("name", DEEPSPEED)
def test_deepspeed_reads_the_optimizer_and_lr_schedule(name: str, planned) -> None:
    folder = planned(name)
    _, gpus = plan_of(folder)
    path = folder / "ds_config.json"
    assert path.is_file(), f"{name}: DeepSpeed runs the plan, its config is written"
    config = consumer_deepspeed.deepspeed_config(path, gpus)
    lr, total, warmup = DEEPSPEED[name]
    assert consumer_deepspeed.schedule_read(config) == {
        "optimizer": "adamw",  # DeepSpeedConfig lower-cases a DeepSpeed optimizer's name
        "optimizer.lr": pytest.approx(lr),
        "optimizer.betas": [0.9, 0.95],
        "optimizer.eps": 1e-8,
        "optimizer.weight_decay": 0.1,
        "scheduler": "WarmupCosineLR",
        "scheduler.total_num_steps": total,
        "scheduler.warmup_num_steps": warmup,
        "scheduler.warmup_min_ratio": 0.0,
        "scheduler.cos_min_ratio": 0.1,
        "scheduler.warmup_type": "linear",
    }


@pytest.mark.parametrize("name", DEEPSPEED)
def test_deepspeeds_scheduler_warms_up_and_decays_to_the_minimum(name: str, planned) -> None:
    folder = planned(name)
    config = consumer_deepspeed.deepspeed_config(folder / "ds_config.json", plan_of(folder)[1])
    lr, total, warmup = DEEPSPEED[name]
    # lr_schedules.py WarmupCosineLR: step 0 -> 0 (linear from warmup_min_ratio 0); half the
    # warmup -> half the peak; step total - 1 -> cos(pi) -> cos_min_ratio x peak.
    start, half, end = consumer_deepspeed.scheduled_lrs(config, [0, warmup // 2, total - 1])
    assert start == 0.0
    assert half == pytest.approx(lr * (warmup // 2) / warmup)
    assert end == pytest.approx(0.1 * lr)


def test_torchtitan_reads_the_optimizer_and_lr_schedule(planned) -> None:
    folder = planned("llama-3-8b-8xh100-torchtitan")
    _, gpus = plan_of(folder)
    path = folder / "torchtitan_run.sh"
    assert path.is_file(), "torchtitan runs the llama-3-8b plan, its script is written"
    consumer("torchtitan")
    reading = consumer_torchtitan.torchtitan_reading(path, gpus)
    assert consumer_torchtitan.schedule_read(reading) == {
        "optimizer": "AdamW",
        "optimizer.lr": pytest.approx(3.0e-4),
        "optimizer.betas": pytest.approx((0.9, 0.95)),
        "optimizer.eps": 1e-8,
        "optimizer.weight_decay": 0.1,
        "warmup_steps": 89,
        "total_steps": 61989,
        "decay_ratio": None,  # decay right after the warmup (no stable phase)
        "decay_type": "cosine",
        "min_lr_factor": 0.1,
    }


def test_torchtitans_own_schedule_warms_up_and_decays_to_the_minimum(planned) -> None:
    folder = planned("llama-3-8b-8xh100-torchtitan")
    reading = consumer_torchtitan.torchtitan_reading(
        folder / "torchtitan_run.sh", plan_of(folder)[1]
    )
    # components/optimizer/lr_scheduler.py linear_warmup_stable_decay: step 0 -> 1/warmup of the
    # peak, step warmup - 1 -> the peak, step total -> min_lr_factor x the peak (89 / 61,989)
    first, peak, end = consumer_torchtitan.scheduled_lrs(reading, [0, 88, 61989])
    assert first == pytest.approx(3.0e-4 / 89)
    assert peak == pytest.approx(3.0e-4)
    assert end == pytest.approx(3.0e-5)
