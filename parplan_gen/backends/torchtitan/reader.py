"""Reads a torchtitan 0.3 launch line back (`parplan check --from-torchtitan FILE`): the
--module/--config and tyro overrides of the `torchtitan` section of mapping.yaml beside this
file, read backwards (facts.py beside it says how each is written). A later override wins, as
tyro's argparse does; other arguments are ignored. How many stages the layers make is the
named formula `tt_weighted_layers` of the check's own rules (built-in and overlays).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any

from parplan_gen.backends.torchtitan.facts import ZERO_SHARDED
from parplan_gen.cost.layout import SIZE_LIMITS
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.inputs.reading import read_text
from parplan_gen.inputs.shell_script import MAX_ARGUMENT_SCRIPT_BYTES, read_script_words
from parplan_gen.models.transformer_shape import MAX_LAYERS
from parplan_gen.planning.evaluate import named_formula
from parplan_gen.render.mapping import LoadedMapping
from parplan_gen.render.mapping_inverse import CHOICES, read_choice
from parplan_gen.rules.ruleset import RuleSet, load_rules

# The Layout field each override's canonical key is (plan.<field> otherwise).
FIELD_OF_KEY = {
    "torchtitan.dp_replicate": "dp_replicate",
    "torchtitan.dp_shard": "dp_shard",
    "torchtitan.local_batch_size": "local_batch_size",
    "torchtitan.layers_per_stage": "layers_per_stage",
}
# The largest value of each torchtitan.* number, as the plan's sizes bound what it is written
# from (torchtitan_facts): either data-parallel degree is the plan's dp; the local batch is
# mbs x accumulation, at most the global batch; a stage holds at most every layer, the
# embedding and the loss (tt_weighted_layers).
LIMIT_OF_KEY = {
    "torchtitan.dp_replicate": SIZE_LIMITS["dp"],
    "torchtitan.dp_shard": SIZE_LIMITS["dp"],
    "torchtitan.local_batch_size": SIZE_LIMITS["global_batch"],
    "torchtitan.layers_per_stage": MAX_LAYERS + 2,
}
WEIGHTED_LAYERS = "tt_weighted_layers"  # constraints.yaml: layers + embedding + output
SWITCHES = {
    "torchtitan.sequence_parallel": True,
    "torchtitan.no_sequence_parallel": False,
}
# Spellings parplan does not write but reads: torchtitan 0.1/0.2's activation checkpointing
# flag (JobConfig.activation_checkpoint.mode), before 0.3 made it a tyro subcommand.
ALIASES = {"--activation_checkpoint.mode": "plan.recompute"}
# The type FSDP2 reduces gradients in (config/configs.py TrainingConfig.mixed_precision_reduce,
# passed to fully_shard's MixedPrecisionPolicy(reduce_dtype)): torchtitan 0.3.0's Literal has
# "float32" alone, its default, so the layout's grad_reduce_dtype is `default` (parplan writes
# no override: rules/cost/memory.yaml prices float32 for it).
REDUCE_FLAG, REDUCE_KEY = "--training.mixed_precision_reduce", "grad_reduce_dtype"
REDUCE_DTYPES = {"float32": "default"}


@dataclass(frozen=True)
class _Said:
    """One override as the launch line gives it: its text, where it is, the flag it follows."""

    text: Any  # the raw value (True/False for a switch)
    where: SourceRef  # file, line and the flag (its `path`), for an error about the value


def torchtitan_values(
    path: str | Path, num_layers: int, mapping: LoadedMapping, rules: RuleSet | None = None
) -> dict[str, Any]:
    """Layout fields (and precision, from the config) of a torchtitan launch line, for a model
    of `num_layers` layers, under `rules` (the check's; None: the built-in rules, loaded only
    if the line needs a named formula)."""
    text = read_text(str(path), max_bytes=MAX_ARGUMENT_SCRIPT_BYTES)
    ref = SourceRef(str(path))
    said = _said(read_script_words(text, str(path)), mapping, ref)
    return _layout(said, num_layers, mapping, rules, ref)


def _said(words: list[tuple[str, int]], mapping: LoadedMapping, ref: SourceRef) -> dict[str, _Said]:
    """{canonical key or field: what the words say of it}."""
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
    flags |= {alias: (key, False) for alias, key in ALIASES.items()}
    flags[REDUCE_FLAG] = (REDUCE_KEY, False)
    latest = mapping.data.torchtitan[max(mapping.data.torchtitan)]
    # Every occurrence of a choice is checked, as tyro's argparse checks each.
    choices = {
        "config": tuple(latest.configs),
        "plan.recompute": CHOICES["recompute"],
        REDUCE_KEY: tuple(REDUCE_DTYPES),
    }
    out: dict[str, _Said] = {}
    for i, (word, line) in enumerate(words):
        flag, eq, inline = word.partition("=")
        flag = flag.replace("-", "_").replace("__", "--", 1)  # tyro takes either spelling
        if flag in flags:
            key, switch = flags[flag]
            where = SourceRef(ref.file, line, path=flag)
            if switch:
                out["sequence_parallel"] = _Said(SWITCHES[key], where)
            else:
                value = inline if eq else (words[i + 1][0] if i + 1 < len(words) else "")
                out[key] = _Said(_checked(value, choices.get(key), where), where)
        for prefix, key in subcommands.items():
            if word.startswith(prefix):
                where = SourceRef(ref.file, line, path=prefix.removesuffix(":"))
                value = word.removeprefix(prefix)
                out[key] = _Said(_checked(value, choices.get(key), where), where)
    if "config" not in out:
        raise InputError("no --config: torchtitan 0.3 starts a job from a config function", ref)
    return out


def _checked(value: str, choices: tuple[Any, ...] | None, where: SourceRef) -> str:
    return value if choices is None else read_choice(value, choices, where)


def _number(said: dict[str, _Said], key: str, default: int = 1) -> int:
    if key not in said:
        return default
    field = key.removeprefix("plan.")
    try:
        return whole_number(said[key].text, LIMIT_OF_KEY.get(key) or SIZE_LIMITS[field])
    except ValueError as exc:
        raise InputError(str(exc), said[key].where) from None


def _layout(
    said: dict[str, _Said],
    num_layers: int,
    mapping: LoadedMapping,
    rules: RuleSet | None,
    ref: SourceRef,
) -> dict[str, Any]:
    section = mapping.data.torchtitan[max(mapping.data.torchtitan)]
    config = section.configs[said["config"].text]  # a choice checked as it was read
    replicate = _number(said, "torchtitan.dp_replicate")
    shard = _number(said, "torchtitan.dp_shard")
    if replicate > 1 and shard > 1:
        raise InputError(
            f"HSDP (data_parallel_replicate_degree {replicate} x data_parallel_shard_degree "
            f"{shard}) has no parplan layout: a plan shards over all its dp ranks (ZeRO-3) or "
            "none (ZeRO-0); give one of them as 1",
            said["torchtitan.dp_shard"].where,
        )
    out: dict[str, Any] = {"precision": config.precision}
    out["dp"] = replicate * shard
    if out["dp"] > 1:  # with one data-parallel rank, sharding and replicating are the same
        out["zero_stage"] = ZERO_SHARDED if shard > 1 else 0
    for field in ("tp", "pp", "cp", "ep", "seq_len", "global_batch"):
        if f"plan.{field}" in said:
            out[field] = _number(said, f"plan.{field}")
    pp = out.get("pp", 1)
    local = _number(said, "torchtitan.local_batch_size")
    out["mbs"] = _number(said, "plan.mbs") if pp > 1 else local
    if "plan.recompute" in said:
        out["recompute"] = said["plan.recompute"].text
    if REDUCE_KEY in said:
        out[REDUCE_KEY] = REDUCE_DTYPES[said[REDUCE_KEY].text]
    if "sequence_parallel" in said:
        out["sequence_parallel"] = said["sequence_parallel"].text and out.get("tp", 1) > 1
    if "torchtitan.layers_per_stage" in said and pp > 1:
        per_stage = _number(said, "torchtitan.layers_per_stage")
        # torchtitan distributed/pipeline_parallel.py: the stages the weighted layers make
        stages = ceil(_weighted_layers(rules, num_layers) / per_stage)
        if stages % pp:
            raise InputError(
                f"{stages} pipeline stages do not divide by pp {pp}",
                said["torchtitan.layers_per_stage"].where,
            )
        out["vpp"] = stages // pp
    return out


def _weighted_layers(rules: RuleSet | None, num_layers: int) -> float:
    """The layers torchtitan's pipeline split weighs (`tt_weighted_layers` of `rules`)."""
    found = load_rules() if rules is None else rules
    value = named_formula(found, WEIGHTED_LAYERS).evaluate({"model.layers": num_layers})
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{WEIGHTED_LAYERS} is {value!r}, not a number of layers")
    return value
