"""Reads a torchtitan 0.3 launch line back (`parplan check --from-torchtitan FILE`) as
torchtitan reads it: the settings of its config function (`--config llama3_70b`:
configs.yaml beside this file, read in torchtitan's own source: local batch, sequence length,
tensor parallelism, activation checkpointing, sequence parallelism, float8, compile), then the
tyro overrides of the `torchtitan` section of mapping.yaml beside this file, read backwards
(facts.py beside it says how each is written). A line that starts from the config function a
plan writes (`--module parplan_torchtitan_config`) is read from that file beside it, as
torchtitan_run.sh puts its folder on PYTHONPATH: parsed, never run, for the torchtitan config
the function calls, the converter its model_registry(...) builds the model with and the compile
it assigns (`_written_function`). Whether the loss is compiled (Layout.loss_compiled) is read
by compile_settings.py beside this file. A later override wins, as tyro's argparse does; the
other flags are refused where the estimate assumes another value, else counted or named as
ignored (flags.py beside this file). `data_parallel_shard_degree -1` (the default) is the rest of the
world size, and `global_batch_size -1` (the default) the local batch x dp, as torchtitan's
ParallelDims and Trainer make them. How many stages the layers make is the named formula
`tt_weighted_layers` of the check's own rules (built-in and overlays).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any, get_args

from parplan_gen.backends.torchtitan.compile_settings import (
    COMPILE_FLAGS,
    COMPILE_SETTINGS,
    assigned,
    is_flag,
    line_setting,
    loss_compiled,
    source_text,
)
from parplan_gen.backends.torchtitan.configs import THE_REST, ConfigRegistry, config_registry
from parplan_gen.backends.torchtitan.facts import (
    CONFIG_MODULE,
    CONFIG_MODULE_FILE,
    SCHEDULE_1F1B,
    SCHEDULE_INTERLEAVED,
)
from parplan_gen.backends.torchtitan.flags import (
    FlagsRead,
    LayoutRead,
    flags_beside,
    normalised,
    refuse_unpriced,
)
from parplan_gen.cost.layout import DEFAULT_FSDP_RESHARD, SIZE_LIMITS, FsdpReshard
from parplan_gen.inputs.defaults import ZERO_FULL
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.inputs.reading import read_text
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.shell_script import MAX_ARGUMENT_SCRIPT_BYTES
from parplan_gen.models.transformer_shape import MAX_LAYERS
from parplan_gen.planning.evaluate import named_formula
from parplan_gen.render.mapping import LoadedMapping
from parplan_gen.render.mapping_inverse import CHOICES, argument_value, read_choice, script_words
from parplan_gen.render.mapping_schema import TorchtitanMapping
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
# The pipeline schedules parplan prices and writes (facts.py SCHEDULE_1F1B, SCHEDULE_INTERLEAVED;
# rules/cost/pipeline.yaml), lower-cased as torch's get_schedule_class matches them, and
# whether each is looped (several stages a rank); ParallelismConfig's default schedule.
SCHEDULE_NAMES = (SCHEDULE_1F1B, SCHEDULE_INTERLEAVED)
SCHEDULES = {SCHEDULE_1F1B.lower(): False, SCHEDULE_INTERLEAVED.lower(): True}
DEFAULT_SCHEDULE = SCHEDULE_1F1B
RUN_KEYS = ("train.", "budget.")  # the mapping's keys of the run, not of its layout
# FSDP2's reshard policy (config/configs.py ParallelismConfig.fsdp_reshard_after_forward:
# default, always, never); `always` is not priced.
RESHARD_KEY, RESHARD_ALWAYS = "torchtitan.fsdp_reshard", "always"
WEIGHTED_LAYERS = "tt_weighted_layers"  # constraints.yaml: layers + embedding + output
SEQUENCE_PARALLEL_SWITCHES = {
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
# What the written config function calls to build the model (models/llama3/__init__.py
# model_registry(flavor, ..., converters=...)), and the converter's class attribute it names.
MODEL_REGISTRY, CONVERTERS_ARG, CONVERTER_CONFIG = "model_registry", "converters", "Config"
RECIPE_ARG = "recipe_name"  # Float8LinearConverter.Config.recipe_name
# The overrides that may say THE_REST (the settings they override, in configs.yaml).
REST_KEYS = {
    "torchtitan.dp_shard": "data_parallel_shard_degree",
    "plan.global_batch": "global_batch_size",
}
# The settings of configs.yaml each override replaces (the torchtitan.* and plan.* keys).
SETTING_OF_KEY = {
    "torchtitan.dp_replicate": "data_parallel_replicate_degree",
    **REST_KEYS,
    "plan.tp": "tensor_parallel_degree",
    "plan.pp": "pipeline_parallel_degree",
    "plan.mbs": "pipeline_parallel_microbatch_size",
    "plan.cp": "context_parallel_degree",
    "plan.ep": "expert_parallel_degree",
    "torchtitan.local_batch_size": "local_batch_size",
    "plan.seq_len": "seq_len",
}


@dataclass(frozen=True)
class _Said:
    """One override as the launch line gives it: its text, where it is, the flag it follows."""

    text: Any  # the raw value (True/False for a switch)
    where: SourceRef  # file, line and the flag (its `path`), for an error about the value


def torchtitan_values(
    path: str | Path,
    num_layers: int,
    mapping: LoadedMapping,
    rules: RuleSet | None = None,
    *,
    num_gpus: int,
) -> dict[str, Any]:
    """Layout fields (and precision) of a torchtitan launch line on `num_gpus` GPUs, for a model
    of `num_layers` layers: its config function's settings, then its overrides, under `rules`
    (the check's; None: the built-in rules, loaded only if the line needs a named formula)."""
    ref = SourceRef(str(path))
    words = script_words(path)
    said = _said(words, mapping, ref)
    if "module" in said and said["module"].text == CONFIG_MODULE:
        written = Path(path).parent / CONFIG_MODULE_FILE
        if not written.is_file():  # torchtitan_run.sh puts its own folder on PYTHONPATH
            raise InputError(
                f"no {written}: the config function this line starts from is written beside it",
                said["module"].where,
            )
        config, float8, compile_set = _written_function(written, said["config"])
        said["config"] = _Said(config, said["config"].where)
        if float8 is not None:
            said["float8"] = _Said(float8, SourceRef(str(written)))
        for key, (value, where) in compile_set.items():  # the line's own overrides win
            said.setdefault(key, _Said(value, where))
    else:
        _checked(said["config"].text, tuple(_latest(mapping).configs), said["config"].where)
    out = _layout(said, num_layers, num_gpus, rules, ref)
    sharded = out.get("zero_stage") == ZERO_FULL  # FSDP2 over dp_shard x cp
    refuse_unpriced(words, str(path), LayoutRead(pp=out["pp"], cp=out["cp"], sharded=sharded))
    return out


def _latest(mapping: LoadedMapping) -> TorchtitanMapping:
    return mapping.data.torchtitan[max(mapping.data.torchtitan)]


def _written_function(
    path: Path, config: _Said
) -> tuple[str, bool | None, dict[str, tuple[Any, SourceRef]]]:
    """The torchtitan config the function `config` names in the written config module calls,
    whether its model_registry(...) converts the linear layers (None: it keeps the config's
    model), and the compile settings it assigns (`config.compile.enable = True`, as a plan's
    FP8 function does; compile_settings.assigned). Read from the file's syntax tree: nothing
    in it is run."""
    text = read_text(str(path), max_bytes=MAX_ARGUMENT_SCRIPT_BYTES)
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise InputError(f"Python syntax: {exc.msg}", SourceRef(str(path), exc.lineno)) from None
    except ValueError as exc:  # a NUL byte
        raise InputError(f"not a Python file parplan reads: {exc}", SourceRef(str(path))) from None
    except (MemoryError, RecursionError):
        raise InputError(
            "not a Python file parplan reads: nested too deeply for Python's parser",
            SourceRef(str(path)),
        ) from None
    name = config.text
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        raise InputError(f"{path.name} defines no function {printable(name)}", config.where)
    registry = config_registry()
    calls = [
        (n.func.id, n)
        for n in ast.walk(found[-1])
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
    own = next((called for called, _ in calls if called in registry.configs), None)
    if own is None:
        raise InputError(
            f"{printable(name)} calls none of torchtitan's configs ({', '.join(registry.configs)})",
            SourceRef(str(path), found[-1].lineno),
        )
    build = next((call for called, call in calls if called == MODEL_REGISTRY), None)
    defaults = registry.settings(own)
    compile_set = assigned(found[-1], path, defaults)
    if build is None:
        return own, None, compile_set
    converts = _converts(build, registry, own, SourceRef(str(path), build.lineno))
    return own, converts, compile_set


def _converts(build: ast.Call, registry: ConfigRegistry, config: str, where: SourceRef) -> bool:
    """Whether `build` (a model_registry(flavor, converters=[...]) call) converts the model's
    linear layers with one of registry's converters; an InputError for a flavor that is not
    `config`'s or a converter or recipe torchtitan 0.3 does not have."""
    flavor = build.args[0] if build.args else None
    expected = registry.configs[config].flavor
    if not (isinstance(flavor, ast.Constant) and flavor.value == expected):
        shown = source_text(flavor) if flavor is not None else "no flavor"
        raise InputError(f"model_registry({shown}): {config} builds the {expected} model", where)
    given = next((k.value for k in build.keywords if k.arg == CONVERTERS_ARG), None)
    if given is None or (isinstance(given, ast.Constant) and given.value is None):
        return False
    if not isinstance(given, ast.List | ast.Tuple):
        raise InputError(f"{CONVERTERS_ARG}={source_text(given)}: not a list parplan reads", where)
    known = {c.name: c for c in registry.converters}
    for item in given.elts:
        func = item.func if isinstance(item, ast.Call) else None
        target = func.value if isinstance(func, ast.Attribute) else None
        if not (
            isinstance(item, ast.Call)
            and isinstance(func, ast.Attribute)
            and func.attr == CONVERTER_CONFIG
            and isinstance(target, ast.Name)
            and target.id in known
        ):
            raise InputError(
                f"converter {source_text(item)}: torchtitan 0.3's converters parplan prices are "
                f"{', '.join(f'{n}.{CONVERTER_CONFIG}(...)' for n in known)}",
                SourceRef(where.file, item.lineno),
            )
        recipe = next((k.value for k in item.keywords if k.arg == RECIPE_ARG), None)
        if recipe is not None:
            accepted = known[target.id].recipes
            ref = SourceRef(where.file, item.lineno, path=RECIPE_ARG)
            if not accepted:
                raise InputError(f"{target.id}.{CONVERTER_CONFIG} has no {RECIPE_ARG}", ref)
            value = recipe.value if isinstance(recipe, ast.Constant) else source_text(recipe)
            read_choice(value, accepted, ref)
    return bool(given.elts)


def _flag_keys(mapping: LoadedMapping) -> tuple[dict[str, tuple[str, bool]], dict[str, str]]:
    """The flags the layout is read from (flag -> its canonical key or field, and whether it
    is a switch) and the subcommands (`activation_checkpoint:` -> its key)."""
    flags: dict[str, tuple[str, bool]] = {}
    subcommands: dict[str, str] = {}
    for version in mapping.data.torchtitan.values():
        for arg in version.overrides:
            if arg.key is not None:
                flags[arg.flag] = (arg.key, False)
            elif arg.when in SEQUENCE_PARALLEL_SWITCHES:
                flags[arg.flag] = (arg.when, True)
        sub = version.activation_checkpoint
        subcommands[sub.subcommand + ":"] = sub.key
    flags |= {"--module": ("module", False), "--config": ("config", False)}
    flags |= {alias: (key, False) for alias, key in ALIASES.items()}
    flags[REDUCE_FLAG] = (REDUCE_KEY, False)
    return flags, subcommands


def torchtitan_flags(path: str | Path, mapping: LoadedMapping) -> FlagsRead:
    """What the launch line at `path` says beside its layout: the flags read with no effect on
    the estimate, by group, and those ignored (flags.py `flags_beside`)."""
    flags, _ = _flag_keys(mapping)
    # the layout's own: what the mapping writes of the run (train.*, budget.*) is not
    layout = {f for f, (key, _) in flags.items() if not key.startswith(RUN_KEYS)}
    return flags_beside(script_words(path), layout | set(COMPILE_FLAGS))


def _said(words: list[tuple[str, int]], mapping: LoadedMapping, ref: SourceRef) -> dict[str, _Said]:
    """{canonical key or field: what the words say of it}."""
    flags, subcommands = _flag_keys(mapping)
    # Every occurrence of a choice is checked, as tyro's argparse checks each (--config, which
    # config/manager.py reads before tyro, the last one given, when its module is known).
    choices = {
        "plan.recompute": CHOICES["recompute"],
        REDUCE_KEY: tuple(REDUCE_DTYPES),
    }
    out: dict[str, _Said] = {}
    for i, (word, line) in enumerate(words):
        flag = normalised(word)  # tyro takes either spelling
        if is_flag(flag):
            where = SourceRef(ref.file, line, path=flag)
            setting, value = line_setting(words, i, flag, where)
            out[setting] = _Said(value, where)
        elif flag in flags:
            key, switch = flags[flag]
            where = SourceRef(ref.file, line, path=flag)
            if switch:
                out["sequence_parallel"] = _Said(SEQUENCE_PARALLEL_SWITCHES[key], where)
            else:
                value = argument_value(words, i)
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


def _number(said: dict[str, _Said], key: str, settings: dict[str, Any]) -> int:
    """The override of `key` (-1 where REST_KEYS allow it), else the config's setting."""
    if key not in said:
        return int(settings[SETTING_OF_KEY[key]])
    text = said[key].text
    if key in REST_KEYS and text == str(THE_REST):
        return THE_REST
    field = key.removeprefix("plan.")
    try:
        return whole_number(text, LIMIT_OF_KEY.get(key) or SIZE_LIMITS[field])
    except ValueError as exc:
        rest = f" (or {THE_REST}: the rest)" if key in REST_KEYS else ""
        raise InputError(f"{exc}{rest}", said[key].where) from None


def _layout(
    said: dict[str, _Said],
    num_layers: int,
    num_gpus: int,
    rules: RuleSet | None,
    ref: SourceRef,
) -> dict[str, Any]:
    settings = config_registry().settings(said["config"].text)  # a choice checked as read
    sizes = {f: _number(said, f"plan.{f}", settings) for f in ("tp", "pp", "cp", "ep", "seq_len")}
    replicate = _number(said, "torchtitan.dp_replicate", settings)
    shard = _shard(said, settings, num_gpus, replicate, sizes, ref)
    if replicate > 1 and shard > 1:
        raise InputError(
            f"HSDP (data_parallel_replicate_degree {replicate} x data_parallel_shard_degree "
            f"{shard}) has no parplan layout: a plan shards over all its dp ranks (ZeRO-3) or "
            "none (ZeRO-0); give one of them as 1",
            next(
                said[k] for k in ("torchtitan.dp_shard", "torchtitan.dp_replicate") if k in said
            ).where,
        )
    float8 = said["float8"].text if "float8" in said else settings["float8"]
    out: dict[str, Any] = {"precision": "fp8" if float8 else "bf16", **sizes}
    out["dp"] = replicate * shard
    # FSDP2 shards over dp_shard x cp (distributed/parallel_dims.py fsdp mesh); with one rank
    # there, sharding and replicating are the same
    sharded = shard > 1 or sizes["cp"] > 1
    if out["dp"] > 1 or sizes["cp"] > 1:
        out["zero_stage"] = ZERO_FULL if sharded else 0
    pp = sizes["pp"]
    local = _number(said, "torchtitan.local_batch_size", settings)
    out["mbs"] = _number(said, "plan.mbs", settings) if pp > 1 else local
    batch = _number(said, "plan.global_batch", settings)
    # trainer.py: global_batch_size < 0 "results in 1 gradient accumulation step"
    out["global_batch"] = local * out["dp"] if batch == THE_REST else batch
    out["recompute"] = (
        said["plan.recompute"].text
        if "plan.recompute" in said
        else settings["activation_checkpoint"]
    )
    # torch.compile: the config's, then the written function's, then the line's settings
    compiled = {k: said[k].text if k in said else settings[k] for k in COMPILE_SETTINGS}
    where = next((said[k].where for k in COMPILE_SETTINGS if k in said), ref)
    out["loss_compiled"] = loss_compiled(compiled, where)
    out["fsdp_reshard"] = _reshard(said, sharded=sharded, pipelined=pp > 1)
    if REDUCE_KEY in said:
        out[REDUCE_KEY] = REDUCE_DTYPES[said[REDUCE_KEY].text]
    split = said["sequence_parallel"].text if "sequence_parallel" in said else None
    split = settings["enable_sequence_parallel"] if split is None else split
    out["sequence_parallel"] = split and sizes["tp"] > 1
    if pp > 1:
        out["vpp"] = _stages_per_rank(said, settings, pp, _weighted_layers(rules, num_layers), ref)
    return out


def _reshard(said: dict[str, _Said], *, sharded: bool, pipelined: bool) -> str:
    """Layout.fsdp_reshard of the line's --parallelism.fsdp_reshard_after_forward: `default` or
    `never` as said (`default` where nothing is `sharded`, the policy acting on nothing, and
    where `pipelined`: the default keeps the blocks gathered then, as `never` does), `always`
    refused (it reshards the final norm and output too, and under a pipeline every block, which
    no layout prices)."""
    given = said.get(RESHARD_KEY)
    if given is None or not sharded:
        return DEFAULT_FSDP_RESHARD
    if given.text == RESHARD_ALWAYS:
        raise InputError(
            f"{RESHARD_ALWAYS} is not priced (priced: {', '.join(get_args(FsdpReshard))}): it "
            "reshards the final norm and output after the forward too (distributed/fsdp.py), "
            "which the default keeps gathered (rules/cost/memory.yaml fsdp2_root_params)",
            given.where,
        )
    said_policy = read_choice(given.text, get_args(FsdpReshard), given.where)
    return DEFAULT_FSDP_RESHARD if pipelined else said_policy


def _stages_per_rank(
    said: dict[str, _Said], settings: dict[str, Any], pp: int, weighted: float, ref: SourceRef
) -> int:
    """The pipeline stages each rank runs (vpp), as torchtitan 0.3's distributed/
    pipeline_parallel.py works them: the weighted layers over pipeline_parallel_layers_per_stage,
    or without it 1 for a single-stage schedule and 2 for a looped one; a schedule parplan does
    not price, or a stage count the schedule refuses, is an InputError (torchtitan's words)."""
    given = said.get("torchtitan.pp_schedule")
    schedule = given.text if given is not None else DEFAULT_SCHEDULE
    where = given.where if given is not None else ref
    looped = SCHEDULES.get(schedule.lower())  # torch's get_schedule_class ignores case
    if looped is None:
        raise InputError(
            f"pipeline_parallel_schedule {printable(schedule)} is not priced (priced: "
            f"{', '.join(SCHEDULE_NAMES)}: rules/cost/pipeline.yaml)",
            where,
        )
    if "torchtitan.layers_per_stage" not in said:
        return 2 if looped else 1
    where = given.where if given is not None else said["torchtitan.layers_per_stage"].where
    per_stage = _number(said, "torchtitan.layers_per_stage", settings)
    stages = ceil(weighted / per_stage)  # the stages the weighted layers make
    if stages % pp:
        raise InputError(
            f"{stages} pipeline stages do not divide by pp {pp}",
            said["torchtitan.layers_per_stage"].where,
        )
    if looped and stages // pp < 2:
        raise InputError(
            f"Multi-stage schedule requires at least 2 stages per rank, but got {stages // pp} "
            f"({schedule}: distributed/pipeline_parallel.py)",
            where,
        )
    if not looped and stages // pp != 1:
        raise InputError(
            f"Single stage schedule requires exactly 1 stage per rank, but got {stages // pp} "
            f"({schedule}: distributed/pipeline_parallel.py)",
            where,
        )
    return stages // pp


def _shard(
    said: dict[str, _Said],
    settings: dict[str, Any],
    num_gpus: int,
    replicate: int,
    sizes: dict[str, int],
    ref: SourceRef,
) -> int:
    """data_parallel_shard_degree, -1 made the rest of the world size as ParallelDims makes it
    (distributed/parallel_dims.py: world_size // (dp_replicate * cp * tp * pp), then the
    product must be the world size)."""
    shard = _number(said, "torchtitan.dp_shard", settings)
    if shard != THE_REST:
        return shard
    others = replicate * sizes["cp"] * sizes["tp"] * sizes["pp"]
    rest = num_gpus // others
    if rest < 1 or rest * others != num_gpus:
        where = said["torchtitan.dp_shard"].where if "torchtitan.dp_shard" in said else ref
        raise InputError(
            f"dp_replicate({replicate}) * dp_shard(-1: {num_gpus} // {others} = {rest}) * "
            f"cp({sizes['cp']}) * tp({sizes['tp']}) * pp({sizes['pp']}) != world size "
            f"({num_gpus} GPUs)",
            where,
        )
    return rest


def _weighted_layers(rules: RuleSet | None, num_layers: int) -> float:
    """The layers torchtitan's pipeline split weighs (`tt_weighted_layers` of `rules`)."""
    found = load_rules() if rules is None else rules
    value = named_formula(found, WEIGHTED_LAYERS).evaluate({"model.layers": num_layers})
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{WEIGHTED_LAYERS} is {value!r}, not a number of layers")
    return value
