"""A `--rules` overlay reaches the written files (issue 30, item 1): what the plan's rules decide
for a backend's files is evaluated once, when the plan is made, and kept in plan.json
(`decisions`); the renderer reads the document, never the built-in rules.

The values asserted are the rules' own: rules/cost/memory.yaml `grad_bytes` is 4 (fp32) for a
DeepSpeed plan without ZeRO and 2 (the plan's 16-bit type) with it; rules/cost/time.yaml
`tp_comm_overlapped` holds for Megatron-LM at tp 2 with sequence parallelism inside one NVLink
domain. An overlay that says otherwise must change the file the same way it changed the price.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from parplan_gen.planning.document import load_plan_document

from conftest import Run

A100_DS = ("llama-3-8b", "--gpus", "8", "--gpu", "a100-80gb", "--global-batch", "64")
H100_TP2 = ("llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64", "--tp", "2")


def _overlay(write: Callable[[str, str], Path], name: str, formulas: str) -> Path:
    return write(f"{name}/overlay.yaml", f"formulas:\n{formulas}").parent


@pytest.mark.parametrize(("overlay", "dtype", "grad_bytes"), [(None, "fp32", 4), ("2", "bf16", 2)])
def test_an_overlay_on_grad_bytes_reaches_ds_config(
    overlay: str | None, dtype: str, grad_bytes: int, cli: Callable[..., Run], write, tmp_path
) -> None:
    """The maintainer's repro: `formulas: {grad_bytes: 2}` priced 16-bit gradients while
    ds_config.json said fp32. Re-rendering the plan.json, with no overlay, keeps it."""
    rules = (
        () if overlay is None else ("--rules", _overlay(write, "ovl", f"  grad_bytes: {overlay}\n"))
    )
    out = tmp_path / "out"
    run = cli("plan", *A100_DS, "--backend", "deepspeed", "--zero", "0", *rules, "--out", out)
    assert run.code == 0, run.err
    doc = load_plan_document(out / "plan.json")
    layout = doc.chosen.plan
    assert (doc.chosen.backend.name, layout.zero_stage) == ("deepspeed", 0)
    # the memory priced: gradients of the parameters one GPU holds, grad_bytes each
    params = doc.chosen.memory.params / 2  # bf16 weights: 2 bytes a parameter
    assert doc.chosen.memory.grads == pytest.approx(params * grad_bytes, rel=1e-9)
    assert doc.decisions["deepspeed"].grad_reduce_dtype == dtype
    assert json.loads((out / "ds_config.json").read_text())["communication_data_type"] == dtype
    again = cli("render", out / "plan.json", "--out", tmp_path / "again")
    assert again.code == 0, again.err
    assert (
        json.loads((tmp_path / "again" / "ds_config.json").read_text())["communication_data_type"]
        == dtype
    )


@pytest.mark.parametrize(("overlay", "flag"), [(None, True), ('"false"', False)])
def test_an_overlay_on_the_tp_overlap_reaches_megatron_args(
    overlay: str | None, flag: bool, cli: Callable[..., Run], write, tmp_path
) -> None:
    formulas = f"  tp_comm_overlapped: {overlay}\n"
    rules = () if overlay is None else ("--rules", _overlay(write, "ovl", formulas))
    out = tmp_path / "out"
    run = cli(
        "plan", *H100_TP2, "--sequence-parallel", "--backend", "megatron", *rules, "--out", out
    )
    assert run.code == 0, run.err
    doc = load_plan_document(out / "plan.json")
    assert doc.decisions["megatron"].tp_comm_overlap is flag
    assert ("--tp-comm-overlap" in (out / "megatron_args.sh").read_text()) is flag


def test_decisions_are_kept_only_for_the_backends_that_run_the_layout(
    cli: Callable[..., Run], tmp_path
) -> None:
    out = tmp_path / "out"
    run = cli("plan", *H100_TP2, "--sequence-parallel", "--backend", "megatron", "--out", out)
    assert run.code == 0, run.err
    doc = load_plan_document(out / "plan.json")
    running = sorted(name for name, why in doc.backends.items() if why is None)
    assert sorted(doc.decisions) == running
    assert "deepspeed" not in running  # DeepSpeed has no Megatron-style sequence parallelism
    assert doc.decisions["megatron"].grad_reduce_dtype is None  # its files do not name it


def test_a_plan_json_of_the_earlier_format_is_refused_by_name(
    cli: Callable[..., Run], tmp_path
) -> None:
    out = tmp_path / "out"
    assert cli("plan", *A100_DS, "--out", out).code == 0
    data = json.loads((out / "plan.json").read_text())
    del data["decisions"]
    data["format_version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(data, indent=2))
    run = cli("render", tmp_path / "old.json", "--out", tmp_path / "r")
    assert run.code == 1
    assert run.err == (
        f"parplan: error: {tmp_path / 'old.json'}:2:3: format_version: format_version 1 is not "
        "supported (this parplan reads 3)\n"
    )
