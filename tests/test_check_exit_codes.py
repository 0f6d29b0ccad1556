"""`parplan check` exit codes: 0 only when the layout runs as given; 1, with the reason as the
one-line error on stderr, when it breaks an `invalid` rule or does not fit (the memory rules).
The report is printed all the same (text, or JSON with `--json`). Each case with layout flags,
a ds_config.json and a Megatron-LM script."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPO, Run

GIB = 1024**3
H100_8 = ("--gpus", "8", "--gpu", "h100")
H100_64 = ("--gpus", "64", "--gpu", "h100")
FITS_DS = """
    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization":
     {"stage": 3}, "bf16": {"enabled": true}}
"""
# DeepSpeed's pipeline engine takes ZeRO 0 or 1 (rules/constraints/deepspeed.yaml).
INVALID_DS = """
    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "zero_optimization":
     {"stage": 2, "overlap_comm": true}, "pipeline": {"stages": 2}, "bf16": {"enabled": true}}
"""
# The common Megatron-LM idiom: arguments kept in a quoted variable.
MEGATRON_70B_ON_ONE_NODE = """
    GPT_ARGS="--micro-batch-size 1 --global-batch-size 64 --bf16"
    torchrun pretrain_gpt.py $GPT_ARGS --tensor-model-parallel-size 8
"""
# Megatron-LM validate_args: "Number of experts should be a multiple of expert model
# parallel_size" (Mixtral's 8 experts over ep 16). Without model parallelism Mixtral does not
# fit on 80 GiB either: the rule is named first.
MEGATRON_EP_16 = """
    MOE_ARGS=(--expert-model-parallel-size 16 --bf16)
    torchrun pretrain_gpt.py --micro-batch-size 1 \\
        --global-batch-size 64 "${MOE_ARGS[@]}"
"""

CASES = {
    "fits": (("llama-2-7b", *H100_8, "--tp", "8", "--global-batch", "64"), None),
    "fits_deepspeed": (("llama-2-7b", *H100_8, "--from-deepspeed", "ds.json"), FITS_DS),
    # 70B on one node with tp 8: optimizer states alone are ~8.8 bytes x 70.6B / 8 > 80 GiB
    "too_big": (("llama-3-70b", *H100_8, "--tp", "8", "--global-batch", "64"), None),
    "too_big_megatron": (("llama-3-70b", *H100_8, "--from-megatron", "args.sh"),
                         MEGATRON_70B_ON_ONE_NODE),
    "invalid": (("llama-3-8b", *H100_8, "--global-batch", "64", "--sequence-parallel"), None),
    "invalid_deepspeed": (("llama-2-7b", *H100_8, "--from-deepspeed", "ds.json"), INVALID_DS),
    "invalid_megatron": (("mixtral-8x7b", *H100_64, "--from-megatron", "args.sh"),
                         MEGATRON_EP_16),
}  # fmt: skip
# The first `invalid` rule each breaks, as rules/constraints/*.yaml words it.
INVALID = {
    "invalid": "sequence parallelism needs tp > 1 [parallel.sequence_parallel_needs_tp, invalid]",
    "invalid_deepspeed": "DeepSpeed: ZeRO-2 does not work with pipeline parallelism "
    "[deepspeed.pipeline_zero_at_most_1, invalid]",
    "invalid_megatron": "experts (8) do not divide by ep (16) [experts.divisible_by_ep, invalid]",
}


def _check(
    case: str, json: bool, cli: Callable[..., Run], write: Callable[..., Path]
) -> tuple[Run, Run]:
    """(the run asked for, the same run with --json for the figures)."""
    argv, text = CASES[case]
    if text is not None:
        name = next(a for a in argv if a in ("ds.json", "args.sh"))
        path = write(name, text)
        argv = tuple(str(path) if a == name else a for a in argv)
    run = cli("check", *argv, *(("--json",) if json else ()))
    return run, (run if json else cli("check", *argv, "--json"))


@pytest.mark.parametrize("json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_check_exits_0_only_when_the_layout_runs_as_given(
    case: str, json: bool, cli: Callable[..., Run], write: Callable[..., Path]
) -> None:
    run, report = _check(case, json, cli, write)
    data = report.json()  # the report is on stdout whatever the verdict
    memory = data["memory"]
    if case.startswith("fits"):
        assert (run.code, run.err) == (0, "")
        assert data["runs_as_given"] and data["problem"] is None
        assert memory["fits"] and memory["total"] <= memory["capacity"]
        return
    assert run.code == 1
    if case in INVALID:
        problem = f"the layout cannot run: {INVALID[case]}"
        if case == "invalid_megatron":  # it does not fit either: still the rule is named first
            assert memory["total"] > memory["capacity"]
    else:
        assert memory["fits"] is False and memory["total"] > memory["capacity"]
        over = memory["total"] - memory["capacity"]
        problem = (
            f"the layout does not fit: {memory['total'] / GIB:.1f} GiB per GPU, the GPU has "
            f"{memory['capacity'] / GIB:.1f} GiB ({over / GIB:.1f} GiB over)"
        )
        assert data["over_capacity_bytes"] == over
        assert data["runnable"]  # it breaks no invalid rule: only memory stops it
    assert run.err == f"parplan: error: {problem}\n"
    assert data["problem"] == problem and data["runs_as_given"] is False
    if json:
        assert run.json() == data
    else:  # the text view, then the reason on stderr
        assert "Constraints broken:" in run.out and "Time per step" in run.out


def test_a_layout_over_by_131_gib_is_no_success(cli: Callable[..., Run]) -> None:
    """The issue's case: a layout far over the GPU's memory used to exit 0."""
    run = cli("check", "llama-3-70b", "--gpus", "4", "--gpu", "h100", "--tp", "4",
              "--global-batch", "16", "--json")  # fmt: skip
    memory = run.json()["memory"]
    assert memory["total"] - memory["capacity"] > 100 * GIB
    assert run.code == 1 and "the layout does not fit" in run.err


def test_the_readme_check_errors_are_real(cli: Callable[..., Run]) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = re.findall(
        r"^\$ parplan (check [^\n]*)\n\.\.\.\n(parplan: error: [^\n]*)$", readme, re.M
    )
    assert len(shown) == 2
    for command, error in shown:
        run = cli(*shlex.split(command))
        assert run.code == 1 and run.err == error + "\n"
        assert run.out  # the report comes first
