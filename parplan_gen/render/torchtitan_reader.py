"""Reads a torchtitan 0.3 launch line back (`parplan check --from-torchtitan FILE`): the
--module/--config and tyro overrides of templates/mapping.yaml's `torchtitan` section, read
backwards (render/torchtitan_facts.py says how each is written). A later override wins, as
tyro's argparse does; other arguments are ignored.
"""

from __future__ import annotations

from math import ceil
from pathlib import Path
from typing import Any

from parplan_gen.cost.layout import SIZE_LIMITS
from parplan_gen.inputs.errors import InputError, SourceRef, shown_value
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.inputs.reading import read_text
from parplan_gen.models.transformer import MAX_LAYERS
from parplan_gen.render.mapping import LoadedMapping
from parplan_gen.render.shell_script import MAX_ARGUMENT_SCRIPT_BYTES, read_script_words
from parplan_gen.render.torchtitan_facts import ZERO_SHARDED
from parplan_gen.rules.ruleset import builtin_formula

# The Layout field each override's canonical key is (plan.<field> otherwise).
FIELD_OF_KEY = {
    "torchtitan.dp_replicate": "dp_replicate",
    "torchtitan.dp_shard": "dp_shard",
    "torchtitan.local_batch_size": "local_batch_size",
    "torchtitan.layers_per_stage": "layers_per_stage",
}
WEIGHTED_LAYERS = (
    "tt_weighted_layers"  # rules/constraints/torchtitan.yaml: layers + embedding + output
)
SWITCHES = {
    "torchtitan.sequence_parallel": True,
    "torchtitan.no_sequence_parallel": False,
}


def torchtitan_values(path: str | Path, num_layers: int, mapping: LoadedMapping) -> dict[str, Any]:
    """Layout fields (and precision, from the config) of a torchtitan launch line."""
    text = read_text(str(path), max_bytes=MAX_ARGUMENT_SCRIPT_BYTES)
    ref = SourceRef(str(path))
    words = [w for w, _ in read_script_words(text, str(path))]
    said = _said(words, mapping, ref)
    return _layout(said, num_layers, mapping, ref)


def _said(words: list[str], mapping: LoadedMapping, ref: SourceRef) -> dict[str, Any]:
    """{canonical key or field: raw text (or True/False for a switch)} of the words."""
    flags: dict[str, tuple[str, bool]] = {}  # flag -> (key, is a switch)
    subcommands: dict[str, str] = {}
    for version in mapping.data.torchtitan.values():
        for arg in version.overrides:
            if arg.key is not None:
                flags[arg.flag] = (arg.key, False)
            elif arg.when in SWITCHES:
                flags[arg.flag] = (arg.when, True)
        sub = version.activation_checkpoint
        subcommands[sub.subcommand + ":"] = sub.key
    flags |= {"--module": ("module", False), "--config": ("config", False)}
    out: dict[str, Any] = {}
    for i, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        flag = flag.replace("-", "_").replace("__", "--", 1)  # tyro takes either spelling
        if flag in flags:
            key, switch = flags[flag]
            if switch:
                out["sequence_parallel"] = SWITCHES[key]
            else:
                out[key] = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        for prefix, key in subcommands.items():
            if word.startswith(prefix):
                out[key] = word.removeprefix(prefix)
    if "config" not in out:
        raise InputError("no --config: torchtitan 0.3 starts a job from a config function", ref)
    return out


def _number(said: dict[str, Any], key: str, ref: SourceRef, default: int = 1) -> int:
    if key not in said:
        return default
    field = key.removeprefix("plan.")
    try:
        return whole_number(said[key], SIZE_LIMITS.get(field, MAX_LAYERS))
    except ValueError as exc:
        raise InputError(f"{key}: {exc}", ref) from None


def _layout(
    said: dict[str, Any], num_layers: int, mapping: LoadedMapping, ref: SourceRef
) -> dict[str, Any]:
    section = mapping.data.torchtitan[max(mapping.data.torchtitan)]
    config = section.configs.get(said["config"])
    if config is None:
        known = ", ".join(section.configs)
        raise InputError(f"--config {shown_value(said['config'])}: parplan maps {known}", ref)
    replicate = _number(said, "torchtitan.dp_replicate", ref)
    shard = _number(said, "torchtitan.dp_shard", ref)
    if replicate > 1 and shard > 1:
        raise InputError(
            f"HSDP (data_parallel_replicate_degree {replicate} x data_parallel_shard_degree "
            f"{shard}) has no parplan layout: a plan shards over all its dp ranks (ZeRO-3) or "
            "none (ZeRO-0); give one of them as 1",
            ref,
        )
    out: dict[str, Any] = {"precision": config.precision}
    out["dp"] = replicate * shard
    if out["dp"] > 1:  # with one data-parallel rank, sharding and replicating are the same
        out["zero_stage"] = ZERO_SHARDED if shard > 1 else 0
    for field in ("tp", "pp", "cp", "ep", "seq_len", "global_batch"):
        if f"plan.{field}" in said:
            out[field] = _number(said, f"plan.{field}", ref)
    pp = out.get("pp", 1)
    local = _number(said, "torchtitan.local_batch_size", ref)
    out["mbs"] = _number(said, "plan.mbs", ref) if pp > 1 else local
    if "plan.recompute" in said:
        out["recompute"] = said["plan.recompute"]
    if "sequence_parallel" in said:
        out["sequence_parallel"] = said["sequence_parallel"] and out.get("tp", 1) > 1
    if "torchtitan.layers_per_stage" in said and pp > 1:
        per_stage = _number(said, "torchtitan.layers_per_stage", ref)
        weighted = builtin_formula(WEIGHTED_LAYERS)({"model.layers": num_layers})
        stages = ceil(weighted / per_stage)  # distributed/pipeline_parallel.py
        if stages % pp:
            raise InputError(f"{stages} pipeline stages do not divide by pp {pp}", ref)
        out["vpp"] = stages // pp
    return out
