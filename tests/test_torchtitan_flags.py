"""What `check --from-torchtitan` makes of the flags beside a line's layout
(backends/torchtitan/unpriced_flags.yaml): a value the estimate does not price is refused with
why, every other flag is read with no effect (counted by group) or named as ignored."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.backends.torchtitan.flags import unpriced_flags
from parplan_gen.backends.torchtitan.reader import torchtitan_flags, torchtitan_values
from parplan_gen.inputs.errors import InputError
from parplan_gen.render.mapping import load_mapping

from conftest import REPO, Run
from consumer_support import consumer

MAPPING = REPO / "templates" / "mapping.yaml"
LAUNCH = "torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b {}\n"
LAUNCHER = "launcher"  # torchrun's own flags: not torchtitan's


def _line(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "run.sh"
    path.write_text(LAUNCH.format(flags), encoding="utf-8")
    return path


def _values(path: Path) -> dict[str, Any]:
    return torchtitan_values(path, 32, load_mapping(MAPPING), num_gpus=8)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--parallelism.fsdp_reshard_after_forward never",
         "--parallelism.fsdp_reshard_after_forward: 'never' is not priced (priced: 'default')"),
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.fsdp-reshard-after-forward always",
         "--parallelism.fsdp_reshard_after_forward: 'always' is not priced (priced: 'default')"),
        ("--training.mixed_precision_param float32",
         "--training.mixed_precision_param: 'float32' is not priced (priced: 'bfloat16')"),
        ("--training.dtype bfloat16",
         "--training.dtype: 'bfloat16' is not priced (priced: 'float32')"),
        ("--training.enable-cpu-offload", "--training.enable_cpu_offload: not priced"),
        ("--parallelism.pipeline_parallel_schedule=GPipe",
         "--parallelism.pipeline_parallel_schedule: 'GPipe' is not priced (priced: '1F1B', "
         "'Interleaved1F1B')"),
        ("--parallelism.context_parallel_load_balancer ptrr",
         "--parallelism.context_parallel_load_balancer: 'ptrr' is not priced (priced: "
         "'headtail')"),
    ],
)  # fmt: skip
def test_a_value_the_estimate_does_not_price_is_refused_with_why(
    tmp_path: Path, flags: str, message: str
) -> None:
    path = _line(tmp_path, flags)
    with pytest.raises(InputError) as caught:
        _values(path)
    assert str(caught.value).startswith(f"{path}:1: {message}: ")


@pytest.mark.parametrize(
    "flags",
    [
        "--parallelism.fsdp_reshard_after_forward default",
        # distributed/fsdp.py: `always` is the default without pp, `never` with it
        "--parallelism.fsdp_reshard_after_forward always",
        "--parallelism.pipeline_parallel_degree 2 --parallelism.fsdp_reshard_after_forward never",
        "--training.no_enable_cpu_offload --training.dtype float32",
    ],
)
def test_a_value_the_estimate_prices_is_read(tmp_path: Path, flags: str) -> None:
    assert _values(_line(tmp_path, flags))["precision"] == "bf16"


def test_the_other_flags_are_counted_by_group_or_named_as_ignored(tmp_path: Path) -> None:
    path = _line(
        tmp_path,
        "--checkpoint.enable --checkpoint.folder ckpt --metrics.log_freq 1 --job.dump_folder x "
        "--parallelism.enable_fsdp_symm_mem --job.dump_folder y --optimizer.implementation "
        "foreach --training.steps 10 --parallelism.tensor_parallel_degree 2",
    )
    read = torchtitan_flags(path, load_mapping(MAPPING))
    assert read.ignored == ("--job.dump_folder", "--parallelism.enable_fsdp_symm_mem")
    assert read.no_effect == {
        "launcher": ("--nproc_per_node",),
        "logging": ("--metrics.log_freq",),
        "checkpoint": ("--checkpoint.enable", "--checkpoint.folder"),
        "optimizer": ("--optimizer.implementation", "--training.steps"),
    }


def test_check_names_them_in_one_line(tmp_path: Path, cli: Callable[..., Run]) -> None:
    path = _line(tmp_path, "--job.dump_folder x --checkpoint.enable")
    run = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--from-torchtitan", path)
    assert run.code == 0, run.err
    assert run.out.splitlines()[-1] == (
        "torchtitan flags beside the layout: ignored --job.dump_folder; read, no effect on the "
        "estimate: 2 (launcher 1, checkpoint 1)"
    )


def _field(config: type, dotted: str) -> Any:
    """The type of Trainer.Config's field at `dotted` (`training.dtype`), None if none."""
    node: Any = config
    for part in dotted.split("."):
        hints = typing.get_type_hints(node) if dataclasses.is_dataclass(node) else {}
        if part not in hints:
            return None
        node = hints[part]
    return node


def test_every_flag_of_the_file_is_torchtitans() -> None:
    """Each priced flag and each group's flag or section is a field of torchtitan 0.3's
    Trainer.Config (a switch's `no_` form is tyro's negation of one), torchrun's aside."""
    config = consumer("torchtitan.trainer").Trainer.Config
    read = unpriced_flags()
    names = [p.flag for p in read.priced]
    names += [f for g in read.groups if g.name != LAUNCHER for f in g.flags]
    missing = []
    for flag in names:
        dotted = flag.removeprefix("--").removesuffix(".")
        section, _, leaf = dotted.rpartition(".")
        plain = f"{section}.{leaf.removeprefix('no_')}" if section else leaf.removeprefix("no_")
        if _field(config, dotted) is None and _field(config, plain) is None:
            missing.append(flag)
    assert missing == []
