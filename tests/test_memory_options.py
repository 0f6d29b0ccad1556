"""The memory options a framework leaves to its user: the type gradients are reduced in
(Layout.grad_reduce_dtype; Megatron-LM --grad-reduce-in-bf16, DeepSpeed
communication_data_type, torchtitan mixed_precision_reduce) and FP8 parameters
(Layout.fp8_param_gather; Megatron-LM --fp8-param-gather), priced by rules/cost/memory.yaml
and sharding.yaml, searched on request, written and read back.

Megatron-LM's own example, examples/llama/train_llama3_8b_h100_fp8.sh (core_v0.16.1), trains
Llama 3 8B on 8 H100s with tp 1, mbs 1, sequences of 8192, FP8, the distributed optimizer,
--grad-reduce-in-bf16 and --fp8-param-gather; tests/data/megatron_llama3_8b_fp8.sh has its
arguments, arrays and `if` branches.

Llama 3 8B by hand (parplan_gen/data/models/llama-3-8b.yaml: 32 layers, hidden 4096, FFN 14336,
32 heads and 8 key/value heads of 128, vocabulary 128256, untied):
  embedding = output = 128256 x 4096 = 525,336,576;
  a layer: q and o 2 x 4096 x 4096 + k and v 2 x 4096 x 1024 = 41,943,040, the SwiGLU MLP
  3 x 4096 x 14336 = 176,160,768, two RMSNorms 2 x 4096 = 8,192: 218,112,000;
  32 layers 6,979,584,000, the final norm 4,096;
  in all 2 x 525,336,576 + 6,979,584,000 + 4,096 = 8,030,261,248 parameters.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.inputs.errors import InputError

from conftest import REPO

EXAMPLE = REPO / "tests" / "data" / "megatron_llama3_8b_fp8.sh"
H100_8 = {"gpus": 8, "gpu": "h100"}
EMBEDDING = 128256 * 4096
LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
PARAMS = 2 * EMBEDDING + 32 * LAYER + 4096
# The arguments of the example that set the layout (mapping.yaml, reader.py READ_SWITCHES).
LAYOUT_ARGS = {
    "--seq-length", "--micro-batch-size", "--global-batch-size", "--bf16",
    "--grad-reduce-in-bf16", "--fp8-format", "--fp8-param-gather",
    "--tensor-model-parallel-size", "--context-parallel-size", "--sequence-parallel",
    "--use-distributed-optimizer", "--cross-entropy-loss-fusion", "--overlap-grad-reduce",
}  # fmt: skip
EXAMPLE_LAYOUT = {
    "mbs": 1, "global_batch": 128, "seq_len": 8192, "precision": "fp8",
    "distributed_optimizer": True,
}  # fmt: skip


def test_the_parameter_count_by_hand_is_the_models() -> None:
    assert PARAMS == 8_030_261_248
    from parplan_gen.api import load_model

    values = load_model("llama-3-8b").formula_values(8192)
    assert values["model.params"] == PARAMS
    # the final norm is counted with the output layer (models/transformer_counts.py)
    assert (values["model.params_embedding"], values["model.params_output"]) == (
        EMBEDDING,
        EMBEDDING + 4096,
    )


def _estimate(**layout: Any) -> Any:
    return parplan_gen.estimate(
        "llama-3-8b", H100_8, {**EXAMPLE_LAYOUT, **layout}, backend="megatron"
    ).estimate


# ---- what the options cost -------------------------------------------------------------------


def test_bf16_gradients_hold_two_bytes_a_parameter_less() -> None:
    # tp = pp = 1: every GPU holds every parameter's main gradient (the distributed optimizer
    # shards the optimizer states only): fp32 4 bytes, bf16 2 bytes.
    fp32, bf16 = _estimate(), _estimate(grad_reduce_dtype="bf16")
    assert fp32.memory.grads == 4 * PARAMS
    assert fp32.memory.grads - bf16.memory.grads == PARAMS * 2
    assert fp32.memory.total - bf16.memory.total == PARAMS * 2
    # an explicit fp32 is Megatron-LM's default
    assert _estimate(grad_reduce_dtype="fp32").memory == fp32.memory
    # and half the data-parallel reduce-scatter's bytes: less communication
    assert bf16.time.dp_comm_s < fp32.time.dp_comm_s


def test_fp8_parameters_hold_one_byte_a_layer_weight_less() -> None:
    # The transformer layers' weights (their norms counted with them) become 1-byte
    # Float8Tensors; the embedding, the final norm and the output layer keep 2 bytes.
    sixteen, fp8 = _estimate(), _estimate(fp8_param_gather=True)
    assert sixteen.memory.params == 2 * PARAMS
    assert sixteen.memory.params - fp8.memory.params == 32 * LAYER
    assert fp8.memory.grads == sixteen.memory.grads  # fp32 main grads either way
    assert fp8.memory.optimizer == sixteen.memory.optimizer  # fp32 main params, sharded
    assert fp8.time.dp_comm_s < sixteen.time.dp_comm_s  # the all-gather moves 1-byte weights


# ---- check --from-megatron of Megatron-LM's example --------------------------------------------


def _flags(text: str) -> set[str]:
    """Every `--name` argument the script's commands get (an independent scan of its text)."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9_-]*)", text))


def test_megatron_example_fits_with_bf16_gradients_and_fp8_parameters(cli) -> None:
    run = cli("check", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--from-megatron", EXAMPLE)
    assert run.code == 0, run.err
    layout = next(line for line in run.out.splitlines() if line.startswith("layout: "))
    assert "precision=fp8" in layout and "grad_reduce=bf16" in layout
    assert "fp8_param_gather" in layout and "distributed_optimizer" in layout
    assert re.search(r"total .* GiB of 80\.00: fits", run.out)


def test_every_argument_of_the_example_is_read_or_reported(cli) -> None:
    run = cli("check", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--from-megatron", EXAMPLE)
    [line] = [x for x in run.out.splitlines() if x.startswith("Megatron-LM arguments beside")]
    ignored = re.search(r"ignored (.*?); read, no effect", line).group(1).split()
    no_effect = int(re.search(r"no effect on the estimate: (\d+)", line).group(1))
    flags = _flags(EXAMPLE.read_text(encoding="utf-8"))
    assert flags >= LAYOUT_ARGS and not LAYOUT_ARGS & set(ignored)
    assert len(flags) == len(LAYOUT_ARGS) + len(ignored) + no_effect
    # The allocator settings change memory and time: named, not priced. The loss fusion is read
    # (Layout.cross_entropy_fusion: Megatron-Core's native kernel, as the script runs it).
    assert "--empty-unused-memory-level" in ignored
    # No --fp8-recipe: Megatron-LM's default, delayed (arguments.py default='delayed'); the
    # estimate prices tensorwise on Hopper (cost/layout.py fp8_recipe).
    assert line.endswith("; FP8 recipe delayed in the script, priced as tensorwise")


def test_the_example_read_as_a_layout() -> None:
    report = parplan_gen.check("llama-3-8b", H100_8, from_megatron=EXAMPLE)
    plan = report.estimate.plan
    assert (plan.dp, plan.tp, plan.cp, plan.mbs, plan.global_batch) == (8, 1, 1, 1, 128)
    assert (plan.precision, plan.grad_reduce_dtype, plan.fp8_param_gather) == ("fp8", "bf16", True)
    assert not plan.sequence_parallel  # validate_args turns it off at tp 1
    assert plan.cross_entropy_fusion == "native"  # --cross-entropy-loss-fusion, no impl given
    assert report.estimate.memory.fits


def test_fp8_format_before_bf16_is_still_fp8(tmp_path: Path) -> None:
    # arguments.py: --fp8-format and --bf16 are separate arguments; an FP8 run keeps --bf16.
    script = tmp_path / "args.sh"
    script.write_text(
        'ARGS=(--fp8-format e4m3 --bf16 --global-batch-size 8)\npretrain_gpt.py "${ARGS[@]}"\n',
        encoding="utf-8",
    )
    report = parplan_gen.check("llama-3-8b", H100_8, from_megatron=script)
    assert report.estimate.plan.precision == "fp8"
    assert report.estimate.plan.grad_reduce_dtype == "default"


# ---- planning with the options, the files and reading them back ------------------------------


@pytest.fixture(scope="module")
def fp8_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    plan = parplan_gen.plan(
        "llama-3-8b",
        H100_8,
        global_batch=128,
        seq_len=8192,
        precision="fp8",
        backend="megatron",
        search={"grad_reduce_dtype": "bf16", "fp8_param_gather": "on"},
    )
    folder = tmp_path_factory.mktemp("fp8_plan")
    plan.write(folder)
    return plan, folder


def test_the_options_asked_are_searched_and_recorded(fp8_plan) -> None:
    plan, _ = fp8_plan
    chosen = plan.document.chosen.plan
    assert (chosen.grad_reduce_dtype, chosen.fp8_param_gather) == ("bf16", True)
    assert chosen.distributed_optimizer  # --fp8-param-gather needs it (arguments.py)
    search = plan.document.search
    assert (search.grad_reduce_dtype, search.fp8_param_gather) == ("bf16", "on")
    assert search.grad_reduce_dtype_source == "--grad-reduce-dtype (requested)"


def test_the_script_says_what_was_priced_and_reads_back(fp8_plan) -> None:
    plan, folder = fp8_plan
    words = (folder / "megatron_args.sh").read_text(encoding="utf-8").split()
    assert "--grad-reduce-in-bf16" in words and "--fp8-param-gather" in words
    report = parplan_gen.check(
        "llama-3-8b", H100_8, from_megatron=folder / "megatron_args.sh", backend="megatron"
    )
    chosen = plan.document.chosen.plan
    assert report.estimate.plan == chosen


def test_megatron_core_takes_the_fp8_parameters(fp8_plan) -> None:
    import consumer_megatron

    _, folder = fp8_plan
    reading = consumer_megatron.megatron_reading(folder / "megatron_args.sh")
    assert reading.ddp.fp8_param_gather and reading.ddp.use_distributed_optimizer
    # Megatron-LM's validate_args reads --grad-reduce-in-bf16 (accumulate_allreduce_grads_in_
    # fp32 off, so DistributedDataParallelConfig.grad_reduce_in_fp32 stays False): no
    # Megatron-Core config has a field of that name.
    assert reading.unread == ("grad_reduce_in_bf16",)
    assert not reading.ddp.grad_reduce_in_fp32


def test_the_default_search_is_the_frameworks_own() -> None:
    plan = parplan_gen.plan("llama-3-8b", H100_8, global_batch=64, backend="megatron")
    search, chosen = plan.document.search, plan.document.chosen.plan
    assert (search.grad_reduce_dtype, search.fp8_param_gather) == ("default", "off")
    assert search.fp8_param_gather_source == (
        "default: rule search_fp8_param_gather_default (rules/search/defaults.yaml)"
    )
    assert (chosen.grad_reduce_dtype, chosen.fp8_param_gather) == ("default", False)


def test_a_backend_without_the_switch_plans_its_own_reduce_type() -> None:
    # torchtitan 0.3.0 config/configs.py: mixed_precision_reduce: Literal["float32"].
    plan = parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, backend="torchtitan",
        search={"grad_reduce_dtype": "bf16"},
    )  # fmt: skip
    assert plan.document.chosen.plan.grad_reduce_dtype == "default"


@pytest.mark.parametrize(
    ("precision", "search", "message"),
    [
        ("bf16", {"fp8_param_gather": "on"}, "fp8_param_gather on needs precision fp8 "),
        ("fp16", {"grad_reduce_dtype": "bf16"}, "grad_reduce_dtype bf16 needs precision bf16 or"),
    ],
)
def test_an_option_the_precision_cannot_use_is_refused(precision, search, message) -> None:
    with pytest.raises(InputError, match=message):
        parplan_gen.plan("llama-3-8b", H100_8, global_batch=64, precision=precision, search=search)


def test_the_plan_flags_ask_for_the_options(cli) -> None:
    run = cli(
        "plan", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64",
        "--backend", "megatron", "--grad-reduce-dtype", "search", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    assert run.json()["search"]["grad_reduce_dtype"] == "search"
    assert run.json()["chosen"]["plan"]["grad_reduce_dtype"] == "bf16"  # less memory, traffic


# ---- DeepSpeed and torchtitan files ----------------------------------------------------------


def _ds_config(tmp_path: Path, stage: int, reduce: str) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(
        '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": '
        f'{{"enabled": true}}, "zero_optimization": {{"stage": {stage}, "overlap_comm": true}}, '
        f'"communication_data_type": "{reduce}"}}',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("stage", "reduce", "read"),
    [
        (2, "bf16", "default"),  # ZeRO's own: the 16-bit training type
        (2, "fp32", "fp32"),
        (0, "fp32", "default"),  # what parplan writes for ZeRO 0
        (0, "bf16", "bf16"),
    ],
)
def test_deepspeed_communication_data_type_is_the_reduce_type(tmp_path, stage, reduce, read):
    report = parplan_gen.check(
        "llama-3-8b", H100_8, from_deepspeed=_ds_config(tmp_path, stage, reduce)
    )
    assert report.estimate.plan.grad_reduce_dtype == read


def test_deepspeed_fp32_reduction_moves_more_but_keeps_16_bit_gradients(tmp_path) -> None:
    # runtime/zero/stage_1_and_2.py: the reduce bucket is cast to communication_data_type; the
    # partitioned gradients stay in the model's type.
    bf16 = parplan_gen.check("llama-3-8b", H100_8, from_deepspeed=_ds_config(tmp_path, 2, "bf16"))
    fp32 = parplan_gen.check("llama-3-8b", H100_8, from_deepspeed=_ds_config(tmp_path, 2, "fp32"))
    assert fp32.estimate.memory.grads == bf16.estimate.memory.grads
    assert fp32.estimate.time.dp_comm_s > bf16.estimate.time.dp_comm_s


def test_torchtitan_reduce_type_is_float32_only(tmp_path) -> None:
    line = (
        "torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b "
        "--parallelism.data_parallel_shard_degree 8 --training.global_batch_size 64 "
        "--training.mixed_precision_reduce {}\n"
    )
    path = tmp_path / "run.sh"
    path.write_text(line.format("float32"), encoding="utf-8")
    report = parplan_gen.check("llama-3-8b", H100_8, from_torchtitan=path)
    assert report.estimate.plan.grad_reduce_dtype == "default"
    path.write_text(line.format("bfloat16"), encoding="utf-8")
    with pytest.raises(InputError, match=r"'bfloat16' is not one of \('float32'\)"):
        parplan_gen.check("llama-3-8b", H100_8, from_torchtitan=path)
