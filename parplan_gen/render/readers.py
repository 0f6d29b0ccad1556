"""Readers of layouts that users already have: a DeepSpeed ds_config.json and a Megatron-LM
argument list or launch script (`parplan check --from-deepspeed/--from-megatron`, and the API).

What they read is templates/mapping.yaml read backwards (render/mapping_inverse.py): the same
entries the renderer writes from, so that reading back the files `parplan` wrote gives the
layout they were written for. Every number is parsed strictly (ASCII digits, bounded by the size
limits of `layout`); an argument script is capped in size before it is read as bash reads it
(the variables it sets expanded, nothing run), in linear time (render/shell_script.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan_gen.cost.layout import SIZE_LIMITS, size_problem
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.inputs.reading import read_text
from parplan_gen.inputs.source import Document, load_document
from parplan_gen.models.transformer import MAX_LAYERS
from parplan_gen.render.facts import FSDP_STRATEGIES
from parplan_gen.render.mapping import MAPPING_FILE, LoadedMapping, load_mapping
from parplan_gen.render.mapping_inverse import (
    ACCOUNTED_LAYERS,
    CHOICES,
    FSDP_STRATEGY,
    LAYERS_PER_VIRTUAL_STAGE,
    MEGATRON_FSDP,
    DeepSpeedKey,
    MegatronFlag,
    deepspeed_keys,
    megatron_flags,
    read_choice,
)
from parplan_gen.render.shell_script import MAX_ARGUMENT_SCRIPT_BYTES, read_script_words
from parplan_gen.render.template_env import Templates
from parplan_gen.render.torchtitan_reader import torchtitan_values

if TYPE_CHECKING:
    from parplan_gen.models.kind import TrainedModel

HF_AUTO_HINT = " (the HF Trainer fills 'auto'; give the value as a flag)"


def layout_from_files(
    model: TrainedModel,
    *,
    deepspeed: str | Path | None = None,
    megatron: str | Path | None = None,
    torchtitan: str | Path | None = None,
    templates_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Layout fields set by a ds_config.json and then a Megatron-LM argument file (either may be
    None), plus `grad_accum` when the DeepSpeed config gives one (to check against the layout).
    Megatron-LM arguments describe transformers: for an op-graph model, an InputError."""
    values: dict[str, Any] = {}
    if deepspeed:
        values.update(deepspeed_values(deepspeed, templates_dir=templates_dir))
    if megatron:
        if "megatron" not in model.backends:
            raise InputError(
                f"--from-megatron: {model.name} is an op-graph model; Megatron-LM arguments "
                "describe transformers (use --from-deepspeed or the layout flags)"
            )
        values.update(megatron_values(megatron, model.pipeline_layers, templates_dir=templates_dir))
    if torchtitan:
        if "torchtitan" not in model.backends:
            raise InputError(f"--from-torchtitan: torchtitan does not train {model.name}")
        mapping = _mapping(templates_dir)
        values.update(torchtitan_values(torchtitan, model.pipeline_layers, mapping))
    return values


def _mapping(templates_dir: str | Path | None) -> LoadedMapping:
    return load_mapping(Templates.at(templates_dir).find(MAPPING_FILE))


# ---- DeepSpeed ---------------------------------------------------------------------------------


def deepspeed_values(
    path: str | Path, *, templates_dir: str | Path | None = None
) -> dict[str, Any]:
    """Batch, pipeline stages, ZeRO stage, precision and (with a pipeline) recompute of a
    DeepSpeed ds_config.json."""
    doc = load_document(str(path))
    if not isinstance(doc.data, dict):
        got = "an empty file" if doc.data is None else type(doc.data).__name__
        raise InputError(f"a DeepSpeed config is a JSON object (got {got})", doc.ref())
    out: dict[str, Any] = {}
    for key in deepspeed_keys(_mapping(templates_dir)):
        found, value = _at(doc.data, key.path)
        if found:
            out.update(_deepspeed_value(doc, key, value))
    return out


def _at(data: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    """(True, the value at `path`) when every section on the way is an object, else (False, None)."""
    node: Any = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _deepspeed_value(doc: Document, key: DeepSpeedKey, value: Any) -> dict[str, Any]:
    if key.field in CHOICES:  # the ZeRO stage: an int, not True, not 3.0
        return {key.field: read_choice(value, CHOICES[key.field], doc.ref(key.path))}
    if key.field is not None:
        problem = size_problem(key.field, value)
        if problem:
            hint = HF_AUTO_HINT if value == "auto" else ""
            raise InputError(problem + hint, doc.ref(key.path))
        return {key.field: value}
    for said, (field, setting) in key.means:  # the same type: `true` is no 1, 1 no `true`
        if type(value) is type(said) and value == said:
            return {field: setting}
    return {}


# ---- Megatron-LM -------------------------------------------------------------------------------


def megatron_values(
    path: str | Path, num_layers: int, *, templates_dir: str | Path | None = None
) -> dict[str, Any]:
    """Layout fields set by a Megatron-LM argument list or launch script (other args ignored; a
    later argument overrides an earlier one, as Megatron-LM's argparse does)."""
    text = read_text(str(path), max_bytes=MAX_ARGUMENT_SCRIPT_BYTES)

    def where(line: int, flag: str = "") -> SourceRef:
        return SourceRef(str(path), line, path=flag)

    words = read_script_words(text, str(path))
    flags = megatron_flags(_mapping(templates_dir))
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
