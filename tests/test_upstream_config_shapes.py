"""Launch files shaped as the frameworks' own examples write them, read by `check` as the
frameworks read them (a survey of Megatron-LM's examples and DeepSpeedExamples' configs found
each of these misread or refused).

DeepSpeed derives the batch values a ds_config.json leaves out from the others over its
data-parallel ranks (runtime/config.py _set_batch_related_parameters): DeepSpeedExamples'
training/gan config gives train_batch_size alone, training/imagenet's ds_fp16_z1_config.json
train_batch_size with gradient_accumulation_steps, training/bf16_master_weight's the micro-batch
with the accumulation. What the estimate does not price is refused by name: Ulysses sequence
parallelism (sequence_parallel_size) and the bf16 master weights of
training/bf16_master_weight. A Megatron-LM script whose arguments reach the command through a
string run by `bash -c` (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh) or that runs the
multimodal trainer (examples/multimodal) is refused rather than priced at Megatron-LM's
defaults; a size the script computes with shell arithmetic (examples/gptoss/02_train.sh) is
left to the check's flag.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

H100_8 = ("--gpus", "8", "--gpu", "h100")
SMALL = "megatron-gpt-1.7b"  # fits at every micro-batch here


def _layout(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("layout: "))


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _ds(tmp_path: Path, **config: Any) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"bf16": {"enabled": True}, **config}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("batch", "shows"),
    [
        # train_batch_size alone: one accumulation step of 64 / 8 sequences
        ({"train_batch_size": 64}, "dp=8 tp=1 pp=1 mbs=8 grad_accum=1"),
        # with the accumulation: the micro-batch is 256 / 8 / 2
        ({"train_batch_size": 256, "gradient_accumulation_steps": 2}, "mbs=16 grad_accum=2"),
        # the micro-batch and the accumulation: a batch of 4 x 1 x 8
        ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1}, "mbs=4 grad_accum=1"),
        # the micro-batch alone: one step
        ({"train_micro_batch_size_per_gpu": 2}, "mbs=2 grad_accum=1"),
        # the batch and the micro-batch: the accumulation is what they leave
        ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, "mbs=2 grad_accum=4"),
    ],
)  # fmt: skip
def test_deepspeed_derives_the_batch_values_a_config_leaves_out(
    cli: Any, tmp_path: Path, batch: dict[str, int], shows: str
) -> None:
    path = _ds(tmp_path, **batch)
    run = cli("check", SMALL, *H100_8, "--seq-len", "512", "--from-deepspeed", path)
    assert run.code == 0, run.err
    assert shows in _layout(run.out)
    total = batch.get("train_batch_size") or batch[
        "train_micro_batch_size_per_gpu"
    ] * 8 * batch.get("gradient_accumulation_steps", 1)
    assert f"global batch {total} x 512 tokens" in _layout(run.out)


def test_a_stated_accumulation_that_the_batch_contradicts_is_refused(cli: Any, tmp_path: Path):
    path = _ds(
        tmp_path,
        train_batch_size=64,
        train_micro_batch_size_per_gpu=2,
        gradient_accumulation_steps=2,
    )
    run = cli("check", SMALL, *H100_8, "--seq-len", "512", "--from-deepspeed", path)
    assert run.code == 1
    assert "gradient_accumulation_steps(2) != global batch(64) / (mbs(2) * dp(8)) = 4" in run.err


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"sequence_parallel_size": 2}, "sequence_parallel_size: 2 is not priced: Ulysses"),
        (
            {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}},
            "bf16.bf16_master_weights_and_grads: true is not priced: bf16 master weights",
        ),
    ],
)
def test_what_deepspeed_runs_otherwise_is_refused(
    cli: Any, tmp_path: Path, config: dict[str, Any], message: str
) -> None:
    path = _ds(tmp_path, train_batch_size=64, **config)
    run = cli("check", SMALL, *H100_8, "--seq-len", "512", "--from-deepspeed", path)
    assert run.code == 1
    assert message in run.err


def test_a_script_whose_arguments_reach_the_command_through_a_string_is_refused(
    cli: Any, tmp_path: Path
) -> None:
    script = _script(
        tmp_path,
        "sbatch.sh",
        "PRETRAIN_ARGS=(--tensor-model-parallel-size 2 --micro-batch-size 1)\n"
        'TRAINING_CMD="python pretrain_gpt.py ${PRETRAIN_ARGS[@]}"\n'
        'srun --container-image img bash -c "${TRAINING_CMD}"\n',
    )
    run = cli("check", "llama-3-8b", *H100_8, "--global-batch", "64", "--from-megatron", script)
    assert run.code == 1
    assert "no Megatron-LM argument is read from its commands" in run.err


def test_the_multimodal_trainer_is_refused(cli: Any, tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "pretrain_mistral_clip.sh",
        "torchrun examples/multimodal/train.py --tensor-model-parallel-size 4 "
        "--seq-length 576 --decoder-seq-length 1024 --language-model-type mistral_7b "
        "--freeze-LM --micro-batch-size 1 --global-batch-size 256 --bf16\n",
    )
    run = cli("check", "llama-3-8b", *H100_8, "--from-megatron", script)
    assert run.code == 1
    assert re.search(r"pretrain_mistral_clip\.sh:1: --language-model-type: a run of Megatron-LM's "
                     r"multimodal trainer", run.err)  # fmt: skip


def test_a_size_computed_by_shell_arithmetic_is_left_to_the_flag(cli: Any, tmp_path: Path):
    script = _script(
        tmp_path,
        "train.sh",
        "GPUS=8\nPP=$((GPUS/2))\n"
        "torchrun pretrain_gpt.py --pipeline-model-parallel-size $PP --micro-batch-size 1 "
        "--global-batch-size 64 --seq-length 4096 --bf16\n",
    )
    run = cli("check", "llama-3-8b", *H100_8, "--from-megatron", script)
    assert run.code == 1
    assert run.err.rstrip().endswith(
        "got '$((GPUS/2))' (shell arithmetic, which parplan does not evaluate): give --pp"
    )
    run = cli("check", "llama-3-8b", *H100_8, "--pp", "4", "--from-megatron", script)
    assert run.code == 0, run.err
    assert "dp=2 tp=1 pp=4 mbs=1 grad_accum=32" in _layout(run.out)


def test_a_batch_below_the_data_parallel_ranks_is_refused(cli: Any, tmp_path: Path) -> None:
    path = _ds(tmp_path, train_batch_size=4)
    run = cli("check", SMALL, *H100_8, "--seq-len", "512", "--from-deepspeed", path)
    assert run.code == 1
    assert "train_batch_size: 4 gives no sequence to each of 8 data-parallel ranks" in run.err


def test_sequence_parallelism_goes_with_a_tp_of_1_given_by_flag(cli: Any, tmp_path: Path):
    """Megatron-LM drops --sequence-parallel where tp is 1 (validate_args), also where the
    script leaves tp to the environment and the check's flag gives 1."""
    script = _script(
        tmp_path,
        "train.sh",
        "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP --sequence-parallel "
        "--micro-batch-size 1 --global-batch-size 64 --seq-length 512 --bf16\n",
    )
    one = cli("check", SMALL, *H100_8, "--tp", "1", "--from-megatron", script)
    assert one.code == 0, one.err
    assert "sequence_parallel" not in _layout(one.out)
    two = cli("check", SMALL, *H100_8, "--tp", "2", "--from-megatron", script)
    assert "dp=4 tp=2" in _layout(two.out) and "sequence_parallel" in _layout(two.out)


def test_virtual_stages_need_the_pipeline_size_in_the_script(cli: Any, tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "train.sh",
        "torchrun pretrain_gpt.py --pipeline-model-parallel-size $((G/4)) "
        "--num-layers-per-virtual-pipeline-stage 3 --micro-batch-size 1 "
        "--global-batch-size 64 --seq-length 512\n",
    )
    run = cli("check", SMALL, *H100_8, "--pp", "2", "--from-megatron", script)
    assert run.code == 1
    assert "write --pipeline-model-parallel-size as one" in run.err


def test_a_hybrid_mamba_script_is_refused_without_a_model(cli: Any, tmp_path: Path) -> None:
    """Megatron-LM's examples/mamba/train.sh: the layers come from --hybrid-layer-pattern
    (arguments.py validate_args), and no MODEL prices Mamba layers."""
    script = _script(
        tmp_path,
        "train.sh",
        'MODEL_SCALE="800M"\ncase "${MODEL_SCALE}" in\n  "800M") TP=1 ;;\n  "8B") TP=4 ;;\nesac\n'
        "torchrun pretrain_mamba.py --tensor-model-parallel-size $TP "
        "--hybrid-layer-pattern M-M-M--M-*M --hidden-size 1024 --num-attention-heads 16 "
        "--micro-batch-size 1 --global-batch-size 32 --seq-length 4096 --bf16\n",
    )
    run = cli("check", *H100_8, "--from-megatron", script)
    assert run.code == 1
    assert "--hybrid-layer-pattern: a hybrid Mamba model" in run.err
