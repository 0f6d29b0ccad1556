"""The mapping read backwards: what each backend entry says about the layout.

The renderer writes a canonical key's value under a backend's name (render/mapping.py); the
readers of existing configs (each backend's reader.py, parplan_gen/backends/<name>/) take the
same entries the other way, so that
reading back what `parplan` wrote gives the layout it was written from, as far as the file says
it (Megatron-LM has no ZeRO stage; ds_config.json names recompute for a pipeline only).

A Megatron-LM argument or a ds_config.json key is read when its `key` is a layout field
(`plan.tp`, or one of FIELD_OF_KEY), or when the canonical key it is written from (its `key`,
or a switch's `when`) is one of FIELD_OF_FACT. Every other entry (model shape, constants,
communication settings) is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from parplan_gen.cost.layout import Layout
from parplan_gen.inputs.errors import InputError, SourceRef, shown_value
from parplan_gen.inputs.reading import read_text
from parplan_gen.inputs.shell_script import MAX_ARGUMENT_SCRIPT_BYTES, Seg, read_script_words
from parplan_gen.render.checks import RenderError
from parplan_gen.render.mapping import LoadedMapping
from parplan_gen.render.mapping_schema import MegatronArg, Scalar

# The key of a reader's values under which it leaves fields to the check's flags: {field: (why,
# where)}, raised by render/readers.py require_given for each field no flag gives.
UNFILLED = "unfilled"
LAYERS_PER_VIRTUAL_STAGE = "layers_per_virtual_stage"  # not a Layout field: read as vpp
# Not Layout fields either: layers the pipeline split counts besides the transformer's, which
# --num-layers-per-virtual-pipeline-stage divides with them (arguments.py validate_args).
ACCOUNTED_LAYERS = ("account_embedding", "account_loss")
# Megatron-FSDP (--use-megatron-fsdp, --data-parallel-sharding-strategy): read into these two,
# then into the ZeRO stage (readers.megatron_values), as neither is a Layout field alone.
MEGATRON_FSDP, FSDP_STRATEGY = "megatron_fsdp", "fsdp_strategy"
# Canonical keys, besides plan.<Layout field>, whose value is a layout field's (render/facts.py).
FIELD_OF_KEY = {
    "megatron.fsdp_strategy": FSDP_STRATEGY,
    "megatron.virtual_stages_per_rank": "vpp",
    "megatron.layers_per_virtual_stage": LAYERS_PER_VIRTUAL_STAGE,
    "megatron.expert_tensor_parallel_size": "etp",
    "deepspeed.zero_stage": "zero_stage",
}
# Canonical keys that, at one value, set a layout field (how render/facts.py derives them).
FIELD_OF_FACT: dict[str, dict[Scalar, tuple[str, Any]]] = {
    "plan.sequence_parallel": {True: ("sequence_parallel", True)},
    "plan.overlap_grad_reduce": {True: ("overlap_grad_reduce", True)},
    "megatron.distributed_optimizer": {True: ("distributed_optimizer", True)},
    "megatron.fsdp": {True: (MEGATRON_FSDP, True)},
    "train.bf16": {True: ("precision", "bf16")},
    "train.fp16": {True: ("precision", "fp16")},
    "train.fp8": {True: ("precision", "fp8")},
    "megatron.account_embedding": {True: (ACCOUNTED_LAYERS[0], True)},
    "megatron.account_loss": {True: (ACCOUNTED_LAYERS[1], True)},
    # DeepSpeed PipelineModule activation_checkpoint_interval 1: every layer is recomputed.
    "deepspeed.pipeline_checkpoint_interval": {1: ("recompute", "full")},
}
# Megatron-LM spellings that parplan does not write but reads (Megatron-LM arguments.py).
MEGATRON_ALIASES = {  # the older name of --num-virtual-stages-per-pipeline-rank
    "--virtual-pipeline-model-parallel-size": "--num-virtual-stages-per-pipeline-rank",
}
MEGATRON_SWITCH_ALIASES: dict[str, tuple[str, Any]] = {
    "--recompute-activations": ("recompute", "selective"),  # the older selective switch
}
MEGATRON_VALUE_ALIASES = {"--fp8-format": ("e4m3",)}  # the other FP8 recipe: FP8 all the same
# Megatron-FSDP's --data-parallel-sharding-strategy (Megatron-LM arguments.py choices).
FSDP_STRATEGY_CHOICES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
# The values each choice a reader takes may have: the Layout's own (ZeRO stage, recompute,
# precision: its Literal fields) and Megatron-FSDP's strategy.
CHOICES: dict[str, tuple[Any, ...]] = {
    name: get_args(info.annotation)
    for name, info in Layout.model_fields.items()
    if get_args(info.annotation)
} | {FSDP_STRATEGY: FSDP_STRATEGY_CHOICES}


def read_choice(value: Any, choices: tuple[Any, ...], where: SourceRef) -> Any:
    """`value` when it is one of `choices` (of the same type: `true` is no 1, `3.0` no 3), else
    the one error every reader gives: `FILE:LINE: FLAG: 'bogus' is not one of (...)`, where
    `where` holds the flag or key path as its `path`."""
    if any(type(value) is type(choice) and value == choice for choice in choices):
        return value
    shown = ", ".join(repr(choice) for choice in choices)
    raise InputError(f"{shown_value(value)} is not one of ({shown})", where)


def script_words(path: str | Path) -> list[Seg]:
    """The words (and lines) of the launch script or argument list at `path` as bash expands
    them, nothing run, the file capped at MAX_ARGUMENT_SCRIPT_BYTES (inputs/shell_script.py)."""
    text = read_text(str(path), max_bytes=MAX_ARGUMENT_SCRIPT_BYTES)
    return read_script_words(text, str(path))


def argument_value(words: Sequence[Seg], i: int) -> str:
    """The value argparse gives the argument `words[i]`: its inline `--flag=value`, else the next
    word ("" after the last)."""
    _, eq, inline = words[i][0].partition("=")
    return inline if eq else (words[i + 1][0] if i + 1 < len(words) else "")


@dataclass(frozen=True)
class MegatronFlag:
    """How one Megatron-LM argument is read: its value is `field`'s, or it sets `sets` (a switch;
    with `values`, an argument that takes one of them)."""

    field: str | None = None
    sets: tuple[str, Any] | None = None
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeepSpeedKey:
    """How one ds_config.json key (its dotted path) is read: its value is `field`'s, or a value
    of `means` sets that (field, value)."""

    path: tuple[str, ...]
    field: str | None = None
    means: tuple[tuple[Scalar, tuple[str, Any]], ...] = ()


def layout_field(key: str | None) -> str | None:
    """The layout field a canonical key's value is, or None."""
    if key is None:
        return None
    name = key.removeprefix("plan.")
    if name != key and name in Layout.model_fields:
        return name
    return FIELD_OF_KEY.get(key)


def megatron_flags(m: LoadedMapping) -> dict[str, MegatronFlag]:
    """Every Megatron-LM argument the readers take, over all versions in the mapping."""
    flags: dict[str, MegatronFlag] = {}
    for version in m.data.megatron.values():
        for group in version.groups:
            for arg in group.args:
                reading = _megatron_flag(arg)
                if reading is not None:
                    _add(flags, arg.flag, reading)
    for alias, flag in MEGATRON_ALIASES.items():
        if flag in flags:
            _add(flags, alias, flags[flag])
    for switch, sets in MEGATRON_SWITCH_ALIASES.items():
        _add(flags, switch, MegatronFlag(sets=sets))
    return flags


def _megatron_flag(arg: MegatronArg) -> MegatronFlag | None:
    field = layout_field(arg.key)
    if field is not None:
        return MegatronFlag(field=field)
    sets = FIELD_OF_FACT.get(arg.when or "", {}).get(True)
    if arg.key is not None or sets is None:
        return None
    if arg.value is None:  # a switch
        return MegatronFlag(sets=sets)
    return MegatronFlag(
        sets=sets, values=(str(arg.value), *MEGATRON_VALUE_ALIASES.get(arg.flag, ()))
    )


def _add(flags: dict[str, MegatronFlag], flag: str, reading: MegatronFlag) -> None:
    if flags.setdefault(flag, reading) != reading:
        raise RenderError(f"{flag} is read two ways in the mapping's Megatron-LM versions")


def deepspeed_keys(m: LoadedMapping) -> list[DeepSpeedKey]:
    """Every ds_config.json key the readers take, over all versions, in the mapping's order."""
    keys: dict[tuple[str, ...], DeepSpeedKey] = {}
    for version in m.data.deepspeed.values():
        for entry in version.config:
            path = tuple(entry.name.split("."))
            field = layout_field(entry.key)
            means = tuple(FIELD_OF_FACT.get(entry.key or "", {}).items())
            if field is not None or means:
                keys.setdefault(path, DeepSpeedKey(path, field, means))
    return list(keys.values())
