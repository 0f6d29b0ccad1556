"""Megatron-LM's loss kernel (Layout.cross_entropy_fusion): its own cross-entropy (`off`,
Megatron-LM's default), Megatron-Core's fused one (`native`, --cross-entropy-loss-fusion) or
Transformer Engine's (`te`, with --cross-entropy-fusion-impl te), which every Megatron plan
writes; priced by rules/cost/memory.yaml logits_bytes_per_vocab and pipeline.yaml
loss_bytes_per_logit, read back by `check --from-megatron`.

The figures, from the kernels' code (not from the cost model):
  kept for the backward, per token and vocabulary entry: fp32 exp-logits (4 bytes) for `off`
    (tensor_parallel/cross_entropy.py) and `native` (fusions/fused_cross_entropy.py saves
    exp_logits); `te` writes the gradient into the 16-bit logits in place (TE v2.9
    triton/cross_entropy.py): 2;
  moved per logit, the head GEMM's 16-bit write (2) included: `off` 2 + (2 + 4) + 4 + 3 x 8 + 4
    + 8 + (4 + 2) = 54; `native`, four torch.compile'd functions: 2 + (2 + 4) + (4 + 4) +
    (4 + 4) + (4 + 4 + 2) = 34; `te`: 2 + 2 + (2 + 2) + (2 + 2) = 12.
Llama 3 8B: vocabulary 128,256; at seq 8192, mbs 1, tp 1, a micro-batch has 8,192 tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.backends.megatron.reader import megatron_arguments, megatron_values
from parplan_gen.inputs.errors import InputError

H100_8 = {"gpus": 8, "gpu": "h100"}
VOCAB = 128_256
TOKENS = 8_192
LAYOUT = {"mbs": 1, "global_batch": 64, "seq_len": TOKENS, "distributed_optimizer": True}
UPSTREAM = Path(__file__).parent / "data" / "upstream" / "megatron_train_llama3_8b_h100_fp8.sh"


def _estimate(backend: str = "megatron", **layout: Any) -> Any:
    return parplan_gen.estimate("llama-3-8b", H100_8, {**LAYOUT, **layout}, backend=backend)


# ---- what each kernel costs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "fusion", "bytes_per_entry"),
    [("megatron", "off", 4), ("megatron", "native", 4), ("megatron", "te", 2),
     ("deepspeed", "te", 4)],
)  # fmt: skip
def test_the_logits_are_what_the_loss_kernel_keeps(
    backend: str, fusion: str, bytes_per_entry: int
) -> None:
    from formula_env import formula_env, formula_value

    env = formula_env("llama-3-8b", H100_8, backend)
    env["train.cross_entropy_fusion"] = fusion  # on DeepSpeed the framework's own loss, always
    assert formula_value("logits_bytes", env) == bytes_per_entry * TOKENS * VOCAB


@pytest.mark.parametrize(
    ("backend", "fusion", "moved"),
    [("megatron", "off", 54), ("megatron", "native", 34), ("megatron", "te", 12),
     ("torchtitan", "te", 54)],
)  # fmt: skip
def test_the_loss_moves_the_bytes_its_kernels_move(backend: str, fusion: str, moved: int) -> None:
    from formula_env import formula_env, formula_value

    env = formula_env("llama-3-8b", H100_8, backend)
    env["train.cross_entropy_fusion"] = "off"
    unfused = formula_value("loss_s", env)
    env["train.cross_entropy_fusion"] = fusion
    assert formula_value("loss_s", env) / unfused == pytest.approx(moved / 54)


def test_transformer_engines_loss_saves_two_bytes_an_entry_and_some_time() -> None:
    te = _estimate().estimate
    off = _estimate(cross_entropy_fusion="off").estimate
    assert te.plan.cross_entropy_fusion == "te" and off.plan.cross_entropy_fusion == "off"
    assert off.memory.activations - te.memory.activations == pytest.approx(
        2 * TOKENS * VOCAB, rel=1e-9
    )
    assert te.time.step_s < off.time.step_s
    # nothing but the loss moves: weights, gradients, optimizer states
    for part in ("params", "grads", "optimizer"):
        assert getattr(te.memory, part) == getattr(off.memory, part)


def test_a_layout_that_names_none_runs_its_backends_own() -> None:
    assert _estimate().estimate.plan.cross_entropy_fusion == "te"
    deepspeed = _estimate("deepspeed", distributed_optimizer=False, zero_stage=1).estimate
    assert deepspeed.plan.cross_entropy_fusion is None
    refused = _estimate("deepspeed", distributed_optimizer=False, zero_stage=1,
                        cross_entropy_fusion="te")  # fmt: skip
    assert not refused.runnable
    assert any("DeepSpeed has no cross-entropy fusion te" in v.reason for v in refused.violations)


# ---- written and read back --------------------------------------------------------------------


def test_plans_write_transformer_engines_loss_and_megatron_core_takes_it(tmp_path: Path) -> None:
    import consumer_megatron

    found = parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=TOKENS, backend="megatron"
    )
    assert found.document.chosen.plan.cross_entropy_fusion == "te"
    found.write(tmp_path / "out")
    args = tmp_path / "out" / "megatron_args.sh"
    text = args.read_text(encoding="utf-8")
    assert "--cross-entropy-loss-fusion" in text and "--cross-entropy-fusion-impl te" in text
    reading = consumer_megatron.megatron_reading(args)
    assert reading.config.cross_entropy_loss_fusion
    assert reading.config.cross_entropy_fusion_impl == "te"
    assert megatron_values(args, 32)["cross_entropy_fusion"] == "te"


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("--cross-entropy-loss-fusion", "native"),  # the implementation's default
        ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", "te"),
        ("--cross-entropy-fusion-impl=te --cross-entropy-loss-fusion", "te"),
        ("--cross-entropy-fusion-impl te", "off"),  # no switch: Megatron-LM's own
    ],
)
def test_the_script_says_which_kernel(text: str, read: str, tmp_path: Path) -> None:
    args = tmp_path / "args.sh"
    args.write_text(text + "\n")
    # without --overlap-grad-reduce Megatron-LM reduces after the backward (read as off)
    assert megatron_values(args, 32) == {"cross_entropy_fusion": read, "overlap_grad_reduce": False}
    assert megatron_arguments(args).ignored == ()


def test_a_script_that_names_none_is_checked_with_megatron_lms_own(tmp_path: Path) -> None:
    args = tmp_path / "args.sh"
    args.write_text("--tensor-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 64\n")
    report = parplan_gen.check("llama-3-8b", H100_8, {"seq_len": TOKENS}, from_megatron=args)
    assert report.estimate.plan.cross_entropy_fusion == "off"


def test_an_unknown_implementation_is_named(tmp_path: Path) -> None:
    args = tmp_path / "args.sh"
    args.write_text("--cross-entropy-loss-fusion\n--cross-entropy-fusion-impl apex\n")
    with pytest.raises(
        InputError, match=r"args.sh:2: --cross-entropy-fusion-impl: 'apex' is not one of"
    ):
        megatron_values(args, 32)


def test_megatron_lms_fp8_example_is_checked_with_its_native_loss(cli) -> None:
    run = cli(
        "check", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--from-megatron", str(UPSTREAM),
    )  # fmt: skip
    assert run.code == 0, run.err
    layout = next(line for line in run.out.splitlines() if line.startswith("layout:"))
    assert "cross_entropy=native" in layout
    assert "--cross-entropy-loss-fusion" not in run.out.split("Ignored")[-1]


def test_estimate_and_compare_take_the_kernel(cli) -> None:
    from parplan_gen.cli.compare import layout_text

    assert layout_text("tp=1 cross_entropy=off") == {"tp": 1, "cross_entropy_fusion": "off"}
    with pytest.raises(argparse.ArgumentTypeError, match="cross_entropy=on: expected one of"):
        layout_text("cross_entropy=on")
    run = cli(
        "estimate", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64",
        "--seq-len", str(TOKENS), "--distributed-optimizer", "--backend", "megatron",
        "--cross-entropy-fusion", "native", "--json",
    )  # fmt: skip
    assert run.json()["plan"]["cross_entropy_fusion"] == "native"


def test_a_better_plan_says_the_loss_kernel_it_differs_in(cli, tmp_path: Path) -> None:
    args = tmp_path / "args.sh"
    args.write_text(
        "--tensor-model-parallel-size 1\n--micro-batch-size 1\n--global-batch-size 64\n"
        "--seq-length 8192\n--bf16\n--use-distributed-optimizer\n"
    )
    run = cli("check", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--from-megatron", str(args))
    layout = next(line for line in run.out.splitlines() if line.startswith("layout:"))
    assert "cross_entropy=off" in layout
    [better] = [x for x in run.out.splitlines() if x.startswith(("Better plan:", "Plan that"))]
    assert "megatron" in better and better.split(" (")[0].endswith("cross_entropy=te")


def test_the_cli_offers_the_layouts_kernels() -> None:
    """cli/common.py spells the kernels without importing the Layout (the CLI's start-up)."""
    from typing import get_args

    from parplan_gen.cli.common import CROSS_ENTROPY_FUSIONS
    from parplan_gen.cost.layout import CrossEntropyFusion

    assert get_args(CrossEntropyFusion) == CROSS_ENTROPY_FUSIONS
