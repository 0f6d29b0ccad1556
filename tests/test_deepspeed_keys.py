"""`check --from-deepspeed` accounts for every key of a ds_config.json (backends/deepspeed/
keys.yaml, read in DeepSpeed v0.19.8): what the estimate does not price is refused with why, the
keys with no effect on it are counted by group, the rest named as ignored; the HF Trainer's
"auto" buckets are read as the Trainer fills them.

DeepSpeed-Chat's training config (DeepSpeedExamples applications/DeepSpeed-Chat,
dschat/utils/ds_utils.py get_train_ds_config) is the genuine file read here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.backends.deepspeed.keys import deepspeed_keys
from parplan_gen.backends.deepspeed.reader import deepspeed_reading
from parplan_gen.inputs.errors import InputError

from consumer_support import consumer

H100_8 = {"gpus": 8, "gpu": "h100"}
BATCH = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}
DS_CHAT = {
    **BATCH,
    "steps_per_print": 10,
    "zero_optimization": {
        "stage": 3, "offload_param": {"device": "none"}, "offload_optimizer": {"device": "none"},
        "stage3_param_persistence_threshold": 1e4, "stage3_max_live_parameters": 3e7,
        "stage3_prefetch_bucket_size": 3e7, "memory_efficient_linear": False,
    },
    "gradient_clipping": 1.0, "prescale_gradients": False, "wall_clock_breakdown": False,
    "hybrid_engine": {"enabled": False, "max_out_tokens": 512, "inference_tp_size": 1},
    "tensorboard": {"enabled": False, "output_path": "step3_tensorboard/ds_tensorboard_logs/"},
}  # fmt: skip


def _file(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config, indent=1), encoding="utf-8")
    return path


def _zero(stage: int, **keys: Any) -> dict[str, Any]:
    return {**BATCH, "zero_optimization": {"stage": stage, **keys}}


def test_deepspeed_chats_config_is_read_whole(tmp_path: Path, cli: Any) -> None:
    path = _file(tmp_path, DS_CHAT)
    beside = deepspeed_reading(path).beside
    assert beside.ignored == ()
    assert beside.no_effect == {
        "optimizer and schedule": ("gradient_clipping", "prescale_gradients"),
        "logging and monitoring": (
            "steps_per_print", "wall_clock_breakdown", "tensorboard.enabled",
            "tensorboard.output_path",
        ),
        "ZeRO bookkeeping": (
            "zero_optimization.stage3_param_persistence_threshold",
            "zero_optimization.memory_efficient_linear",
        ),
        "offload set to none": (
            "zero_optimization.offload_param.device", "zero_optimization.offload_optimizer.device",
        ),
        "hybrid engine off": ("hybrid_engine.max_out_tokens", "hybrid_engine.inference_tp_size"),
    }  # fmt: skip
    run = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--seq-len", 4096,
              "--from-deepspeed", path)  # fmt: skip
    assert run.code == 0, run.err
    assert run.out.splitlines()[-1] == (
        "DeepSpeed keys beside the layout: ignored none; read, no effect on the estimate: 12 "
        "(optimizer and schedule 2, logging and monitoring 4, ZeRO bookkeeping 2, offload set to "
        "none 2, hybrid engine off 2)"
    )


def test_a_key_deepspeed_reads_that_nothing_accounts_for_is_named(tmp_path: Path) -> None:
    config = _zero(3, some_new_switch=True) | {"aio": {"block_size": 1048576}}
    assert deepspeed_reading(_file(tmp_path, config)).beside.ignored == (
        "zero_optimization.some_new_switch",
        "aio.block_size",
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_zero(2, reduce_scatter=None, contiguous_gradients=False),  # null: the default, true
         "false is not priced: the estimate prices ZeRO's gradients in its contiguous buffer"),
        (BATCH | {"zero_optimization.reduce_scatter": True,  # a dotted key is no nested one
                  "zero_optimization": {"stage": 2, "reduce_scatter": False}},
         "false is not priced: with it off ZeRO all-reduces"),
        (_zero(2, overlap_comm=True, reduce_scatter=False), "false is not priced: with it off ZeRO all-reduces"),
        (_zero(3, zero_quantized_weights=True), "true is not priced: ZeRO++'s quantized weight gathers"),
        (_zero(3, zero_hpz_partition_size=8), "8 is not priced: ZeRO++'s secondary weight partition"),
        (_zero(3, stage3_max_reuse_distance=1e10), "10000000000.0 is not priced: parameters reused within"),
        (_zero(3) | {"activation_checkpointing": {"cpu_checkpointing": True}},
         "true is not priced: checkpointed activations moved to the CPU"),
        (_zero(3) | {"optimizer": {"type": "Lamb"}}, '"Lamb" is not priced: the estimate prices Adam'),
        (_zero(3) | {"hybrid_engine": {"enabled": True}}, "true is not priced: the hybrid engine's generation"),
    ],
)  # fmt: skip
def test_what_the_estimate_does_not_price_is_refused(
    tmp_path: Path, config: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError) as caught:
        deepspeed_reading(_file(tmp_path, config))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "config",
    [
        _zero(3),  # ZeRO-3 overlaps by default (runtime/zero/config.py overlap_comm_valid)
        _zero(0, overlap_comm=False),  # no ZeRO: the key is read by no stage
        # the pipeline engine reduces after the backward whatever it says (priced so)
        _zero(1) | {"pipeline": {"stages": 2}},
        _zero(3, stage3_max_reuse_distance=1e9),  # DeepSpeed's default, as a JSON float
        _zero(2, overlap_comm=True) | {"optimizer": {"type": "AdamW"}},
        _zero(2, overlap_comm=True) | {"optimizer": {"type": "adam"}},
    ],
)
def test_what_it_prices_is_taken(tmp_path: Path, config: dict[str, Any]) -> None:
    deepspeed_reading(_file(tmp_path, config))


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_priced_defaults_are_deepspeeds_own(stage: int) -> None:
    zero_config = consumer("deepspeed.runtime.zero.config")
    precision = consumer("deepspeed.runtime.precision_config")
    own = {
        "zero_optimization": zero_config.DeepSpeedZeroConfig(stage=stage),
        "bf16": precision.DeepSpeedBF16Config(),
    }
    checked = set()
    for priced in deepspeed_keys().priced:
        section, _, key = priced.key.rpartition(".")
        if section not in own or stage not in priced.stages:
            continue
        config = own[section]
        # the config's field of each key: its name, or the field the key is an alias of
        fields = {f.alias or name: name for name, f in type(config).model_fields.items()}
        fields |= {name: name for name in type(config).model_fields}
        assert getattr(config, fields[key]) == priced.defaults[stage], priced.key
        checked.add(section)
    assert checked == set(own)


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_a_plans_own_file_ignores_nothing(tmp_path: Path, zero_stage: int) -> None:
    out = tmp_path / "plan"
    parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=4096, backend="deepspeed",
        pins={"zero_stage": zero_stage, "tp": 1},
    ).write(out)  # fmt: skip
    beside = deepspeed_reading(out / "ds_config.json").beside
    assert beside.ignored == ()


def test_the_hf_trainers_auto_buckets_are_its_fill(tmp_path: Path, cli: Any) -> None:
    config = _zero(3, reduce_bucket_size="auto", stage3_prefetch_bucket_size="auto")
    read = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--seq-len", 4096,
               "--from-deepspeed", _file(tmp_path, config), "--json").json()["plan"]  # fmt: skip
    # transformers integrations/deepspeed.py: h^2 and int(0.9 h^2), h = 4096 for Llama 3 8B
    assert (read["ds_reduce_bucket_size"], read["ds_prefetch_bucket_size"]) == (
        4096 * 4096,
        15_099_494,
    )


@pytest.mark.parametrize(("backend", "zero_stage", "hidden"), [
    ("deepspeed", 0, False), ("deepspeed", 1, True), ("deepspeed", 2, True), ("ddp", 0, True),
])  # fmt: skip
def test_deepspeeds_zero_0_reduces_after_the_backward(
    backend: str, zero_stage: int, hidden: bool
) -> None:
    """DeepSpeed reduces ZeRO-0 gradients at the accumulation boundary, once the backward has
    returned (runtime/engine.py allreduce_gradients): none of the sync hides. ZeRO-1 with
    overlap_comm and ZeRO-2 reduce from hooks during the backward, and torch DDP's buckets
    too."""
    found = parplan_gen.estimate(
        "llama-3-8b", {"gpus": 16, "gpu": "h100"},
        {"tp": 2, "mbs": 1, "global_batch": 64, "seq_len": 4096, "zero_stage": zero_stage},
        backend=backend,
    ).estimate.time  # fmt: skip
    assert found.dp_comm_s > 0
    if hidden:
        assert found.dp_exposed_s < found.dp_comm_s
    else:
        assert found.dp_exposed_s == pytest.approx(found.dp_comm_s)


def test_zero3_sizes_in_a_zero2_file_are_read_as_deepspeed_reads_them(tmp_path: Path) -> None:
    """DeepSpeed-Chat writes its stage3_* sizes whatever the stage; below ZeRO-3 DeepSpeed reads
    them not, and neither does the layout (it keeps the defaults)."""
    config = _zero(2, overlap_comm=True, stage3_max_live_parameters=3e7,
                   stage3_prefetch_bucket_size=3e7)  # fmt: skip
    reading = deepspeed_reading(_file(tmp_path, config))
    assert "ds_max_live_parameters" not in reading.values
    assert reading.beside.no_effect["settings of another ZeRO stage"] == (
        "zero_optimization.stage3_max_live_parameters",
        "zero_optimization.stage3_prefetch_bucket_size",
    )


def test_a_pipelined_zero1_reduces_after_its_last_micro_batch() -> None:
    """pipe/engine.py sets the accumulation boundary only in _exec_reduce_grads: the hooks do not
    reduce during the backward, overlap_comm or not."""
    found = parplan_gen.estimate(
        "llama-3-8b", {"gpus": 16, "gpu": "h100"},
        {"pp": 2, "mbs": 1, "global_batch": 64, "seq_len": 4096, "zero_stage": 1},
        backend="deepspeed",
    ).estimate.time  # fmt: skip
    assert found.dp_exposed_s == pytest.approx(found.dp_comm_s)
