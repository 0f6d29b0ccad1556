"""Reads a Megatron-LM argument list or launch script back (`parplan check --from-megatron
FILE`): the `megatron` section of mapping.yaml beside this file read backwards
(render/mapping_inverse.py), the same entries megatron_args.sh is written from. The script is
capped in size before it is read as bash reads it (the variables it sets expanded, nothing run),
in linear time (inputs/shell_script.py); every number is parsed strictly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parplan_gen.backends.megatron.facts import FSDP_STRATEGIES
from parplan_gen.cost.layout import SIZE_LIMITS
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.inputs.reading import read_text
from parplan_gen.inputs.shell_script import MAX_ARGUMENT_SCRIPT_BYTES, read_script_words
from parplan_gen.models.transformer_shape import MAX_LAYERS
from parplan_gen.render.mapping_inverse import (
    ACCOUNTED_LAYERS,
    CHOICES,
    FSDP_STRATEGY,
    LAYERS_PER_VIRTUAL_STAGE,
    MEGATRON_FSDP,
    MegatronFlag,
    megatron_flags,
    read_choice,
)
from parplan_gen.render.template_env import Templates


def megatron_values(
    path: str | Path, num_layers: int, *, templates_dir: str | Path | None = None
) -> dict[str, Any]:
    """Layout fields set by a Megatron-LM argument list or launch script (other args ignored; a
    later argument overrides an earlier one, as Megatron-LM's argparse does)."""
    text = read_text(str(path), max_bytes=MAX_ARGUMENT_SCRIPT_BYTES)

    def where(line: int, flag: str = "") -> SourceRef:
        return SourceRef(str(path), line, path=flag)

    words = read_script_words(text, str(path))
    flags = megatron_flags(Templates.at(templates_dir).mapping())
    out: dict[str, Any] = {}
    for i, (word, line) in enumerate(words):
        flag, eq, inline = word.partition("=")
        reading = flags.get(flag)
        if reading is None:
            continue
        if reading.sets is not None and not reading.values:
            out.update([reading.sets])
            continue
        raw = inline if eq else (words[i + 1][0] if i + 1 < len(words) else "")
        out.update(_megatron_value(flag, reading, raw, where(line), where(line, flag)))
    if out.get("tp", 1) == 1:  # Megatron-LM validate_args: "Disabling sequence parallelism
        out.pop("sequence_parallel", None)  # because tensor model parallelism is disabled"
    _fsdp_sharding(out)
    per_chunk = out.pop(LAYERS_PER_VIRTUAL_STAGE, None)
    counted = num_layers + sum(bool(out.pop(name, False)) for name in ACCOUNTED_LAYERS)
    if per_chunk is not None:
        stages = out.get("pp", 1)
        if counted % (stages * per_chunk):
            raise InputError(
                f"--num-layers-per-virtual-pipeline-stage {per_chunk}: {counted} layers do not "
                f"divide by pp({stages}) x {per_chunk}",
                SourceRef(str(path)),
            )
        out["vpp"] = counted // (stages * per_chunk)
    return out


def _megatron_value(
    flag: str, reading: MegatronFlag, raw: str, where: SourceRef, at_flag: SourceRef
) -> dict[str, Any]:
    """What one argument sets; `where` is its line, `at_flag` the line with the flag named."""
    if reading.sets is not None:  # an argument whose value names the setting (--fp8-format)
        read_choice(raw, reading.values, at_flag)
        return dict([reading.sets])
    field = reading.field
    if field is None:
        return {}
    if field in CHOICES:  # --recompute-granularity, --data-parallel-sharding-strategy
        return {field: read_choice(raw, CHOICES[field], at_flag)}
    if field not in SIZE_LIMITS and field != LAYERS_PER_VIRTUAL_STAGE:
        return {field: raw}
    try:  # layers per virtual stage: at most a model's layers
        return {field: whole_number(raw, SIZE_LIMITS.get(field, MAX_LAYERS))}
    except ValueError as exc:
        hint = (
            " (a variable the script does not set; the environment is not read)"
            if "$" in raw
            else ""
        )
        raise InputError(f"{flag}: {exc}{hint}", where) from None


def _fsdp_sharding(out: dict[str, Any]) -> None:
    """Megatron-FSDP's strategy as the sharding a plan names (facts.FSDP_STRATEGIES): ZeRO-2/3,
    and `optim` as the distributed optimizer, which shards the same. Without --use-megatron-fsdp
    Megatron-LM does not use the strategy (training.py get_model wraps in DDP)."""
    strategy = out.pop(FSDP_STRATEGY, "no_shard")  # one of CHOICES[FSDP_STRATEGY], as read
    if not out.pop(MEGATRON_FSDP, False):
        return
    stages = {"no_shard": 0, "optim": 1, **{v: k for k, v in FSDP_STRATEGIES.items()}}
    if stages[strategy] >= 2:
        out["zero_stage"] = stages[strategy]
        out.pop("distributed_optimizer", None)
    elif stages[strategy] == 1:
        out["distributed_optimizer"] = True
