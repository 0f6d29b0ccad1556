"""Megatron-LM's precision-aware optimizer with bf16 moments (Layout.precision_aware_optimizer;
--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16), priced by
rules/cost/memory.yaml optimizer_bytes and time.yaml optimizer_bytes_touched, searched on
request, written and read back.

The bytes a parameter, from the sources (not from the cost model):
  Adam (ZeRO arXiv:1910.02054 Sec. 3.1): fp32 master, momentum, variance: 4 + 4 + 4 = 12;
  precision-aware, BF16 run: Transformer Engine's FusedAdam keeps the master as int16 remainders
    of the bf16 weight (store_param_remainders) and both moments in bf16: 2 + 2 + 2 = 6;
  precision-aware, tensorwise FP8: Megatron keeps its fp32 main copy (optimizer_config.py
    use_precision_aware_optimizer_no_fp8_or_ds_fp8 is False): 4 + 2 + 2 = 8.
The update reads and writes the state, reads the fp32 grad and writes the 16-bit weight: Adam
2 x 12 + 4 + 2 = 30; BF16 precision-aware 2 x 6 + 4 + 2 and the bf16 weight the remainders
complete, 2: 20; FP8 precision-aware 2 x 8 + 4 + 2 = 22.

Llama 3 8B has 8,030,261,248 parameters (tests/test_memory_options.py, by hand); on 8 H100s at
tp = pp = 1 the distributed optimizer gives each GPU an eighth of them.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.backends.megatron.reader import megatron_arguments
from parplan_gen.inputs.errors import InputError

H100_8 = {"gpus": 8, "gpu": "h100"}
PARAMS = 8_030_261_248
SHARD = PARAMS / 8
LAYOUT = {"mbs": 1, "global_batch": 64, "seq_len": 4096, "distributed_optimizer": True}


def _estimate(**layout: Any) -> Any:
    return parplan_gen.estimate(
        "llama-3-8b", H100_8, {**LAYOUT, **layout}, backend="megatron"
    ).estimate


# ---- what it costs ----------------------------------------------------------------------------


@pytest.mark.parametrize(("precision", "state_bytes", "touched"), [("bf16", 6, 20), ("fp8", 8, 22)])
def test_bf16_moments_hold_and_move_the_bytes_their_types_have(
    precision: str, state_bytes: int, touched: int
) -> None:
    adam = _estimate(precision=precision)
    aware = _estimate(precision=precision, precision_aware_optimizer=True)
    assert adam.memory.optimizer == pytest.approx(12 * SHARD, abs=8)
    assert aware.memory.optimizer == pytest.approx(state_bytes * SHARD, abs=8)
    assert adam.memory.total - aware.memory.total == pytest.approx(
        (12 - state_bytes) * SHARD, abs=8
    )
    assert aware.time.optimizer_s / adam.time.optimizer_s == pytest.approx(touched / 30)
    # nothing else moves: weights, gradients, activations and the rest of the step
    assert (aware.memory.params, aware.memory.grads) == (adam.memory.params, adam.memory.grads)
    assert aware.memory.activations == adam.memory.activations
    assert aware.time.compute_s == adam.time.compute_s


def test_it_needs_the_distributed_optimizer() -> None:
    report = parplan_gen.check(
        "llama-3-8b",
        H100_8,
        {**LAYOUT, "distributed_optimizer": False, "precision_aware_optimizer": True},
        backend="megatron",
    )
    reasons = [v.reason for v in report.violations]
    assert "--use-precision-aware-optimizer needs the distributed optimizer" in reasons


# ---- reading a Megatron-LM script -------------------------------------------------------------


def _script(tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "args.sh"
    words = " ".join(("--bf16", "--use-distributed-optimizer", "--global-batch-size 64", *args))
    path.write_text(f'ARGS=({words})\npretrain_gpt.py "${{ARGS[@]}}"\n', encoding="utf-8")
    return path


def test_the_switch_and_bf16_moments_are_read(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "--use-precision-aware-optimizer",
        "--exp-avg-dtype bf16",
        "--exp-avg-sq-dtype=bf16",
        "--main-params-dtype fp32",
    )
    report = parplan_gen.check("llama-3-8b", H100_8, from_megatron=script)
    assert report.estimate.plan.precision_aware_optimizer
    assert report.estimate.plan.grad_reduce_dtype == "default"
    # read as the layout's: neither ignored nor counted as having no effect
    read = megatron_arguments(script)
    counted = set(read.ignored) | {f for group in read.no_effect.values() for f in group}
    assert not {"--use-precision-aware-optimizer", "--exp-avg-dtype", "--main-params-dtype"} & (
        counted
    )


def test_bf16_main_grads_are_bf16_gradients(tmp_path: Path) -> None:
    # arguments.py validate_args (under --bf16): fp32 accumulation only when main_grads_dtype
    # is fp32, with or without the precision-aware optimizer.
    script = _script(tmp_path, "--main-grads-dtype bf16")
    report = parplan_gen.check("llama-3-8b", H100_8, from_megatron=script)
    assert report.estimate.plan.grad_reduce_dtype == "bf16"
    assert not report.estimate.plan.precision_aware_optimizer


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--use-precision-aware-optimizer", "--exp-avg-dtype fp8", "--exp-avg-sq-dtype bf16"),
            r"args\.sh:1: --exp-avg-dtype: --use-precision-aware-optimizer with --exp-avg-dtype "
            r"fp8: a plan prices bf16 moments over fp32 main parameters only",
        ),
        (  # the moments' default type is fp32 (arguments.py default='fp32')
            ("--use-precision-aware-optimizer",),
            r"args\.sh: --use-precision-aware-optimizer with --exp-avg-dtype fp32",
        ),
        (("--exp-avg-dtype bf8",), r"args\.sh:1: --exp-avg-dtype: 'bf8' is not one of"),
    ],
)
def test_types_a_plan_does_not_price_are_refused(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        parplan_gen.check("llama-3-8b", H100_8, from_megatron=_script(tmp_path, *args))


# ---- planning with it, the files and reading them back ----------------------------------------


@pytest.fixture(scope="module")
def aware_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    plan = parplan_gen.plan(
        "llama-3-8b",
        H100_8,
        global_batch=64,
        seq_len=4096,
        backend="megatron",
        search={"precision_aware_optimizer": "on"},
    )
    folder = tmp_path_factory.mktemp("aware_plan")
    plan.write(folder)
    return plan, folder


def test_asked_for_it_is_planned_and_recorded(aware_plan) -> None:
    plan, _ = aware_plan
    chosen = plan.document.chosen.plan
    assert chosen.precision_aware_optimizer and chosen.distributed_optimizer
    search = plan.document.search
    assert search.precision_aware_optimizer == "on"
    assert search.precision_aware_optimizer_source == "--precision-aware-optimizer (requested)"


def test_the_script_says_what_was_priced_and_reads_back(aware_plan) -> None:
    plan, folder = aware_plan
    text = (folder / "megatron_args.sh").read_text(encoding="utf-8")
    words = text.split()
    assert "--use-precision-aware-optimizer" in words
    assert words[words.index("--exp-avg-dtype") + 1] == "bf16"
    assert words[words.index("--exp-avg-sq-dtype") + 1] == "bf16"
    report = parplan_gen.check(
        "llama-3-8b", H100_8, from_megatron=folder / "megatron_args.sh", backend="megatron"
    )
    assert report.estimate.plan == plan.document.chosen.plan


def test_megatron_core_takes_it(aware_plan, monkeypatch: pytest.MonkeyPatch) -> None:
    import consumer_megatron

    _, folder = aware_plan
    if importlib.util.find_spec("transformer_engine") is None:
        # OptimizerConfig.__post_init__ asserts Adam and the distributed optimizer, asks
        # Transformer Engine's version (is_te_min_version, which fails without TE: told 2.1 or
        # later here, as a GPU install has) and then imports its FusedAdam, which the CPU builds
        # lack: the script's optimizer arguments got past both asserts.
        config = importlib.import_module("megatron.core.optimizer.optimizer_config")
        monkeypatch.setattr(config, "is_te_min_version", lambda *_, **__: True)
        with pytest.raises(RuntimeError, match="requires FusedAdam from TransformerEngine"):
            consumer_megatron.megatron_reading(folder / "megatron_args.sh")
        return
    reading = consumer_megatron.megatron_reading(folder / "megatron_args.sh")
    assert reading.optimizer.use_precision_aware_optimizer


def test_the_default_search_keeps_adams_fp32_states() -> None:
    plan = parplan_gen.plan("llama-3-8b", H100_8, global_batch=64, backend="megatron")
    assert plan.document.search.precision_aware_optimizer == "off"
    assert plan.document.search.precision_aware_optimizer_source == (
        "default: rule search_precision_aware_optimizer_default (rules/search/defaults.yaml)"
    )
    assert not plan.document.chosen.plan.precision_aware_optimizer


def test_asked_of_a_backend_without_it_is_an_error() -> None:
    with pytest.raises(InputError, match=r"has no precision-aware optimizer \(only megatron does"):
        parplan_gen.plan(
            "llama-3-8b",
            H100_8,
            global_batch=64,
            backend="torchtitan",
            search={"precision_aware_optimizer": "on"},
        )


def test_the_plan_flag_asks_for_it(cli) -> None:
    run = cli(
        "plan", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64",
        "--backend", "megatron", "--precision-aware-optimizer", "search", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    assert run.json()["search"]["precision_aware_optimizer"] == "search"
