"""Errors name what the caller gave: the Python API's parameters (`tp`, `seq_len`, `gpu`), the
command line's flags (`--tp`, `--seq-len`, `--gpu`) for the same mistake (api/wording.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import parplan_gen
from parplan_gen.api.wording import flag_wording, reword
from parplan_gen.inputs.errors import InputError, ParplanError, SourceRef

from conftest import Run

MODEL, NODE = "llama-3-8b", {"gpus": 8, "gpu": "h100"}
NODE_FLAGS = ("--gpus", "8", "--gpu", "h100")
SEQ_LEN_OF_A_GRAPH = (
    "4096: resnet-50 is an op-graph model, which has no sequence length (a sample is one input of "
    "the graph; its sizes are in the graph); leave it out"
)

# (the API's call, the CLI's argv for the same request, the message after the name).
# 16 does not divide 8 GPUs; tp 8 is above a bound of 4; an op graph has no sequence length;
# "h99" is no GPU of the catalog.
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...], str, str]] = {
    "pin": (
        {"pins": {"tp": 16}},
        ("--tp", "16"),
        "no layout meets the pins: {tp} 16: dp x tp x pp x cp = 8 GPUs, 16 does not divide 8",
        "tp",
    ),
    "bound": (
        {"pins": {"tp": 8}, "bounds": {"max_tp": 4}},
        ("--tp", "8", "--max-tp", "4"),
        "{tp} 8 is outside its bounds [1, 4]",
        "tp",
    ),
    "graph_seq_len": (
        {"model": "resnet-50", "seq_len": 4096},
        ("--seq-len", "4096"),
        "{seq_len} " + SEQ_LEN_OF_A_GRAPH,
        "seq_len",
    ),
    "gpu": ({"cluster": {"gpus": 8, "gpu": "h99"}}, ("--gpu", "h99"), "{gpu}: unknown GPU", "gpu"),
}
FLAG = {"tp": "--tp", "seq_len": "--seq-len", "gpu": "--gpu"}


def _api(case: dict[str, Any]) -> ParplanError:
    kwargs = {"global_batch": 64, **case}
    model, cluster = kwargs.pop("model", MODEL), kwargs.pop("cluster", NODE)
    with pytest.raises(ParplanError) as raised:
        parplan_gen.plan(model, cluster, **kwargs)
    return raised.value


def _cli(cli: Callable[..., Run], case: dict[str, Any], flags: tuple[str, ...]) -> Run:
    model = case.get("model", MODEL)
    node = NODE_FLAGS if "cluster" not in case else ("--gpus", "8")
    return cli("plan", model, *node, "--global-batch", "64", *flags)


@pytest.mark.parametrize("name", list(CASES))
def test_the_api_names_its_parameter_the_cli_its_flag(cli: Callable[..., Run], name: str) -> None:
    case, flags, message, parameter = CASES[name]
    error = _api(case)
    assert str(error).startswith(message.format(**{parameter: parameter}))
    assert "--" not in str(error)
    run = _cli(cli, case, flags)
    assert run.code in (1, 2)
    assert run.err.startswith("parplan: error: " + message.format(**{parameter: FLAG[parameter]}))


def test_the_flag_words_stay_under_flag_wording() -> None:
    """`cli.main` runs every command under `flag_wording()`: the same call names the flag."""
    with flag_wording(), pytest.raises(ParplanError) as raised:
        parplan_gen.plan(MODEL, NODE, global_batch=64, pins={"tp": 16})
    assert raised.value.message.startswith("no layout meets the pins: --tp 16: ")


def test_only_the_apis_flags_are_reworded() -> None:
    """A Megatron-LM argument quoted from a script is the script's own word: it stays."""
    error = reword(
        InputError(
            "--num-layers-per-virtual-pipeline-stage 4: 30 layers do not split (--pp 4, "
            "--zero 1 and --distributed-optimizer, --out x, --days 2, --interleave off)",
            SourceRef("--gpu"),
        )
    )
    assert error.message == (
        "--num-layers-per-virtual-pipeline-stage 4: 30 layers do not split (pp 4, "
        "zero_stage 1 and distributed_optimizer, out_dir x, days 2, interleave off)"
    )
    assert str(error) == f"gpu: {error.message}"


def test_plan_write_names_its_option(tmp_path) -> None:
    """A file the user changed is kept: `Plan.write` says which option replaces it (the CLI:
    `--force`, tests/test_render_options.py)."""
    plan = parplan_gen.plan(MODEL, NODE, global_batch=64)
    plan.write(tmp_path)
    (tmp_path / "nccl.env").write_text("# edited by hand\n", encoding="utf-8")
    with pytest.raises(ParplanError, match=r"nccl\.env \(content differs\); pass force to replace"):
        plan.write(tmp_path)
    assert plan.write(tmp_path, force=True)
