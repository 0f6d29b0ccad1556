"""DeepSpeed ZeRO-3's buffers are the layout's (Layout.ds_prefetch_bucket_size,
ds_max_live_parameters, ds_reduce_bucket_size): priced, written into ds_config.json, read back
by check, and accepted by DeepSpeed's own config class.

DeepSpeed-Chat's training config (DeepSpeedExamples applications/DeepSpeed-Chat,
dschat/utils/ds_utils.py get_train_ds_config) sets stage3_max_live_parameters and
stage3_prefetch_bucket_size to 3e7; before, check read such a file as DeepSpeed's defaults.

The figures, from Llama 3 8B's published shape (hidden 4096, FFN 14336, 8 KV heads of 128,
vocabulary 128,256, untied), not from the cost model: a block holds 218,112,000 parameters
(tests/test_fsdp_reshard.py) in 7 weight matrices; the largest tensor is the LM head (or the
embedding), 128,256 x 4,096 = 525,336,576. DeepSpeed's ZeRO-3 prefetches up to
stage3_max_live_parameters and overshoots by at most one whole tensor, the module about to run
being fetched whole (runtime/zero/partitioned_param_coordinator.py; measured on DeepSpeed
0.19.8 by benchmarks/deepspeed_zero3_live.py): at most the limit plus the LM head gathered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from formula_env import formula_env, formula_value
from plan_edit import rendered_with

import parplan_gen

import consumer_deepspeed

H100_8 = {"gpus": 8, "gpu": "h100"}
BLOCK_PARAMS = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
LM_HEAD = 128_256 * 4096
LAYOUT = {"mbs": 1, "global_batch": 64, "seq_len": 4096, "zero_stage": 3}
DS_CHAT = {"ds_max_live_parameters": 30_000_000, "ds_prefetch_bucket_size": 30_000_000}


def _estimate(backend: str = "deepspeed", **layout: Any) -> Any:
    return parplan_gen.estimate("llama-3-8b", H100_8, {**LAYOUT, **layout}, backend=backend)


def test_the_live_parameters_are_the_limit_and_one_tensor_more() -> None:
    default = _estimate().estimate.memory.params
    limited = _estimate(**DS_CHAT).estimate.memory.params
    # 16-bit: (1e9 + LM head) - (3e7 + LM head)
    assert default - limited == pytest.approx(2 * (1_000_000_000 - 30_000_000), abs=2)
    env = formula_env("llama-3-8b", H100_8, "deepspeed", **LAYOUT, **DS_CHAT)
    assert formula_value("zero3_live_params", env) == 30_000_000 + LM_HEAD


@pytest.mark.parametrize(
    ("bucket", "gathers"),
    [(50_000_000, BLOCK_PARAMS / 50_000_000), (30_000_000, BLOCK_PARAMS / 30_000_000)],
)
def test_a_smaller_prefetch_bucket_takes_more_gathers_a_layer(bucket: int, gathers: float) -> None:
    env = formula_env("llama-3-8b", H100_8, "deepspeed", **LAYOUT, ds_prefetch_bucket_size=bucket)
    assert formula_value("zero3_gathers_per_layer", env) == pytest.approx(gathers)


def test_zero2_stages_its_gradients_in_two_reduce_buckets() -> None:
    """stage_1_and_2.py setup_buckets: reduce_bucket_size elements of the 16-bit type, twice
    with overlap_comm (the plans write it)."""
    default = _estimate(zero_stage=2).estimate.memory.grads
    smaller = _estimate(zero_stage=2, ds_reduce_bucket_size=200_000_000).estimate.memory.grads
    assert default - smaller == pytest.approx(2 * 2 * (500_000_000 - 200_000_000), abs=2)


@pytest.mark.parametrize(
    ("backend", "layout", "why"),
    [
        ("megatron", {"zero_stage": 0, "ds_reduce_bucket_size": 10**8},
         "Megatron-LM has no DeepSpeed ZeRO buffers to size (ds_reduce_bucket_size)"),
        ("deepspeed", {"zero_stage": 2, "ds_prefetch_bucket_size": 10**7},
         "ds_prefetch_bucket_size acts with ZeRO-3 and up (zero 2)"),
        ("deepspeed", {"zero_stage": 0, "ds_reduce_bucket_size": 10**8},
         "ds_reduce_bucket_size acts with ZeRO-1 and up (zero 0)"),
    ],
)  # fmt: skip
def test_only_deepspeeds_zero_takes_them(backend: str, layout: dict[str, Any], why: str) -> None:
    found = _estimate(backend, **layout)
    reasons = [v.reason for v in found.violations if v.rule_id == "backend.capabilities"]
    assert reasons == [why]


def test_a_zero2_reduce_bucket_is_taken() -> None:
    assert _estimate(zero_stage=2, ds_reduce_bucket_size=200_000_000).runnable


def test_written_read_back_and_accepted_by_deepspeed(tmp_path: Path, cli: Any) -> None:
    out = tmp_path / "plan"
    parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=4096, backend="deepspeed",
        pins={"zero_stage": 3, "tp": 1},
    ).write(out)  # fmt: skip
    sizes = {**DS_CHAT, "ds_reduce_bucket_size": 1_000_000}
    config = rendered_with(out, tmp_path / "edited", cli, **sizes) / "ds_config.json"
    zero = json.loads(config.read_text(encoding="utf-8"))["zero_optimization"]
    assert (zero["stage3_max_live_parameters"], zero["stage3_prefetch_bucket_size"]) == (
        30_000_000,
        30_000_000,
    )
    read = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--seq-len", 4096,
               "--from-deepspeed", config, "--json").json()["plan"]  # fmt: skip
    assert {k: read[k] for k in sizes} == sizes
    deepspeed = consumer_deepspeed.deepspeed_config(config, 8)
    assert consumer_deepspeed.buffers_read(deepspeed) == sizes


def test_deepspeed_chats_exponents_are_read_as_deepspeed_reads_them(
    tmp_path: Path, cli: Any
) -> None:
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({
        "train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3, "stage3_param_persistence_threshold": 1e4,
            "stage3_max_live_parameters": 3e7, "stage3_prefetch_bucket_size": 3e7,
            "memory_efficient_linear": False,
        },
    }), encoding="utf-8")  # fmt: skip
    read = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--seq-len", 4096,
               "--from-deepspeed", config, "--json").json()["plan"]  # fmt: skip
    assert {k: read[k] for k in DS_CHAT} == DS_CHAT
    assert read["ds_reduce_bucket_size"] == 500_000_000  # DeepSpeed's default: not in the file


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (2.5e7 + 0.5, "expected a whole number"),
        (0, "0 turns off what stage3_prefetch_bucket_size sizes"),
        (True, ""),
    ],
)
def test_a_size_deepspeed_would_not_run_is_refused(
    tmp_path: Path, cli: Any, value: Any, why: str
) -> None:
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({
        "train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": value},
    }), encoding="utf-8")  # fmt: skip
    run = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--seq-len", 4096,
              "--from-deepspeed", config)  # fmt: skip
    assert run.code != 0 and "stage3_prefetch_bucket_size" in run.err and why in run.err


def test_the_flags_take_deepspeeds_spelling(cli: Any) -> None:
    run = cli("estimate", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--global-batch", 64,
              "--seq-len", 4096, "--backend", "deepspeed", "--zero", 3,
              "--ds-max-live-parameters", "3e7", "--json")  # fmt: skip
    assert run.json()["plan"]["ds_max_live_parameters"] == 30_000_000
    bad = cli("estimate", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--global-batch", 64,
              "--seq-len", 4096, "--backend", "deepspeed", "--zero", 3,
              "--ds-max-live-parameters", "3.5")  # fmt: skip
    assert bad.code == 2 and "--ds-max-live-parameters" in bad.err
