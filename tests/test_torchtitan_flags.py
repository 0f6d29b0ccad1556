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

import parplan_gen
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
        # `always` reshards the final norm and output too (distributed/fsdp.py)
        ("--parallelism.fsdp-reshard-after-forward always",
         "--parallelism.fsdp_reshard_after_forward: always is not priced (priced: default, "
         "never)"),
        ("--training.mixed_precision_param float32",
         "--training.mixed_precision_param: 'float32' is not priced (priced: 'bfloat16')"),
        ("--training.dtype float32 --training.dtype bfloat16",  # the last one wins
         "--training.dtype: 'bfloat16' is not priced (priced: 'float32')"),
        ("--training.no_enable_cpu_offload --training.enable-cpu-offload",
         "--training.enable_cpu_offload: not priced"),
        ("--optimizer.implementation fused_opt_states_bf16",
         "--optimizer.implementation: 'fused_opt_states_bf16' is not priced (priced: 'fused', "
         "'foreach', 'for-loop')"),
        ("--optimizer.param_groups.0.optimizer_name Muon",
         "--optimizer.param_groups.0.optimizer_name: 'Muon' is not priced (priced: 'AdamW', "
         "'Adam')"),
        ("--comm.mode fake_backend",
         "--comm.mode: 'fake_backend' is not priced (priced: 'default')"),
        ("--parallelism.pipeline_parallel_degree 2 "
         "--parallelism.pipeline_parallel_schedule_csv s.csv",
         "--parallelism.pipeline_parallel_schedule_csv: 's.csv' is not priced (priced: '', "
         "'None')"),
        ("--parallelism.pipeline_parallel_degree 2 "
         "--parallelism.pipeline_parallel_first_stage_less_layers 2",
         "--parallelism.pipeline_parallel_first_stage_less_layers: '2' is not priced (priced: "
         "'1')"),
        ("--parallelism.context_parallel_degree 2 "
         "--parallelism.context_parallel_load_balancer ptrr",
         "--parallelism.context_parallel_load_balancer: 'ptrr' is not priced (priced: "
         "'headtail')"),
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule=GPipe",
         "--parallelism.pipeline_parallel_schedule: pipeline_parallel_schedule GPipe is not "
         "priced (priced: 1F1B, Interleaved1F1B"),
        # distributed/pipeline_parallel.py: 34 weighted layers in 4 stages, 2 a rank
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_layers_per_stage 9",
         "--parallelism.pipeline_parallel_layers_per_stage: Single stage schedule requires "
         "exactly 1 stage per rank, but got 2"),
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule "
         "Interleaved1F1B --parallelism.pipeline_parallel_layers_per_stage 17",
         "--parallelism.pipeline_parallel_schedule: Multi-stage schedule requires at least 2 "
         "stages per rank, but got 1"),
    ],
)  # fmt: skip
def test_a_value_the_estimate_does_not_price_is_refused_with_why(
    tmp_path: Path, flags: str, message: str
) -> None:
    path = _line(tmp_path, flags)
    with pytest.raises(InputError) as caught:
        _values(path)
    assert str(caught.value).startswith(f"{path}:1: {message}")


@pytest.mark.parametrize(
    ("flags", "vpp"),
    [
        ("--parallelism.fsdp_reshard_after_forward default", None),
        # distributed/fsdp.py: `never` is the default with pp
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.fsdp_reshard_after_forward never",
         1),
        ("--training.enable_cpu_offload --training.no_enable_cpu_offload "
         "--training.dtype bfloat16 --training.dtype float32", None),  # the last one wins
        # where the flag acts on nothing: no pp, no cp, no FSDP2 (one replicated rank)
        ("--parallelism.pipeline_parallel_schedule_csv s.csv --parallelism."
         "context_parallel_load_balancer ptrr", None),
        ("--parallelism.data_parallel_shard_degree 1 --parallelism.data_parallel_replicate_degree 8 "
         "--parallelism.fsdp_reshard_after_forward never", None),
        # torch's get_schedule_class ignores case; a looped schedule runs 2 stages a rank unless
        # pipeline_parallel_layers_per_stage says otherwise
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule "
         "interleaved1f1b", 2),
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule "
         "Interleaved1F1B --parallelism.pipeline_parallel_layers_per_stage 6", 3),
    ],
)  # fmt: skip
def test_a_value_the_estimate_prices_is_read(tmp_path: Path, flags: str, vpp: int | None) -> None:
    read = _values(_line(tmp_path, flags))
    assert read["precision"] == "bf16" and read.get("vpp") == vpp


@pytest.mark.parametrize(
    ("flags", "policy"),
    [
        ("", "default"),
        ("--parallelism.fsdp_reshard_after_forward never", "never"),
        ("--parallelism.fsdp_reshard_after_forward never "
         "--parallelism.fsdp_reshard_after_forward default", "default"),  # the last one wins
        # where nothing is sharded the policy acts on nothing
        ("--parallelism.data_parallel_shard_degree 1 --parallelism.data_parallel_replicate_degree 8 "
         "--parallelism.fsdp_reshard_after_forward never", "default"),
        # with pp the default keeps the blocks gathered: `never` is its run (distributed/fsdp.py)
        ("--parallelism.pipeline_parallel_degree 2 --parallelism.fsdp_reshard_after_forward never",
         "default"),
    ],
)  # fmt: skip
def test_the_reshard_policy_is_the_layouts(tmp_path: Path, flags: str, policy: str) -> None:
    assert _values(_line(tmp_path, flags))["fsdp_reshard"] == policy


def test_the_other_flags_are_counted_by_group_or_named_as_ignored(tmp_path: Path) -> None:
    path = _line(
        tmp_path,
        "--checkpoint.enable --checkpoint.folder ckpt --metrics.log_freq 1 --compile.backend "
        "aot_eager --parallelism.enable-fsdp-symm-mem --compile.backend eager "
        "--optimizer.param_groups.0.optimizer_kwargs.lr 1e-4 --training.steps 10 "
        "--parallelism.tensor_parallel_degree 2 --compile.enable --training.no_enable_cpu_offload",
    )
    path.write_text("srun --nodes 2 nvidia-smi --query-gpu=name\n" + path.read_text())
    read = torchtitan_flags(path, load_mapping(MAPPING))
    # as first written; the layout's, the compile and the priced flags are none of these, nor
    # are the other commands' plain flags
    assert read.ignored == ("--compile.backend", "--parallelism.enable-fsdp-symm-mem")
    assert read.no_effect == {
        "launcher": ("--nproc_per_node",),
        "logging": ("--metrics.log_freq",),
        "checkpoint": ("--checkpoint.enable", "--checkpoint.folder"),
        "optimizer": ("--optimizer.param_groups.0.optimizer_kwargs.lr", "--training.steps"),
    }


def test_a_plans_own_line_ignores_nothing(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    parplan_gen.plan(
        "llama-3-8b", {"gpus": 16, "gpu": "h100"}, global_batch=64, seq_len=8_192,
        backend="torchtitan", pins={"pp": 2}, tokens="10B",
    ).write(out)  # fmt: skip
    read = torchtitan_flags(out / "torchtitan_run.sh", load_mapping(MAPPING))
    assert read.ignored == ()
    assert set(read.no_effect) == {"launcher", "cuda-graphs", "checkpoint", "optimizer"}


def test_check_names_them_in_one_line(tmp_path: Path, cli: Callable[..., Run]) -> None:
    path = _line(tmp_path, "--parallelism.enable_fsdp_symm_mem --checkpoint.enable")
    run = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--from-torchtitan", path)
    assert run.code == 0, run.err
    assert run.out.splitlines()[-1] == (
        "torchtitan flags beside the layout: ignored --parallelism.enable_fsdp_symm_mem; read, "
        "no effect on the estimate: 2 (launcher 1, checkpoint 1)"
    )


def _field(config: type, dotted: str) -> Any:
    """The type of Trainer.Config's field at `dotted` (`training.dtype`; a list's element at
    `N`), None if none."""
    node: Any = config
    for part in dotted.split("."):
        if part == "N" and typing.get_origin(node) is list:
            node = typing.get_args(node)[0]
            continue
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
    # a priced value of a Literal field is one of its choices
    for entry in read.priced:
        kind = _field(config, entry.flag.removeprefix("--"))
        if typing.get_origin(kind) is typing.Literal:
            assert set(entry.values) <= set(typing.get_args(kind)), entry.flag
