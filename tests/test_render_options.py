"""One set of render options, two ways in: `parplan plan --out` with flags and
`Plan.write(out_dir, **options)` write the same files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest

import parplan_gen
import parplan_gen.cli.main
from parplan_gen.render.checks import RenderError
from parplan_gen.render.render_options import RenderOptions

from conftest import Run

REQUEST = (
    "llama-3-8b",
    "--gpus",
    "8",
    "--gpu",
    "h100",
    "--global-batch",
    "64",
    "--seq-len",
    "2048",
)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_every_render_option_is_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parplan_gen.cli.main.main(["plan", "--help"])
    help_text = capsys.readouterr().out
    for field in fields(RenderOptions):
        assert f"--{field.name.replace('_', '-')}" in help_text, field.name


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"hf_trainer": True, "force_nccl_algo": True, "megatron_version": "core_v0.16",
         "deepspeed_version": "0.19"},
    ],
)  # fmt: skip
def test_the_api_and_the_cli_write_identical_files(
    options: dict[str, object], cli: Callable[..., Run], tmp_path: Path
) -> None:
    templates = tmp_path / "templates"
    (templates / "launch").mkdir(parents=True)
    (templates / "launch" / "hostfile.j2").write_text("# ours\nnode-0 slots=8\n")
    options = {**options, "templates": str(templates)}
    flags = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    run = cli("plan", *REQUEST, "--out", tmp_path / "cli", *flags)
    assert run.code == 0, run.err
    plan = parplan_gen.api.plan(
        "llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=2048
    )
    written = plan.write(tmp_path / "api", **options)
    assert [p.name for p in written] == sorted(files(tmp_path / "cli"))
    assert files(tmp_path / "api") == files(tmp_path / "cli")
    assert (tmp_path / "api" / "hostfile").read_text() == "# ours\nnode-0 slots=8\n"
    (tmp_path / "api" / "hostfile").write_text("mine\n")
    with pytest.raises(RenderError, match="pass force to replace"):
        plan.write(tmp_path / "api", **options)
    plan.write(tmp_path / "api", **options, force=True)
    assert files(tmp_path / "api") == files(tmp_path / "cli")


def test_an_unknown_option_is_refused(tmp_path: Path) -> None:
    plan = parplan_gen.api.plan(
        "llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=2048
    )
    with pytest.raises(TypeError, match="hf_trainerr"):
        plan.write(tmp_path, hf_trainerr=True)
