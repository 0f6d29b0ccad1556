"""The torchtitan.* canonical facts of a plan (render/facts.py calls `torchtitan_facts`): how
torchtitan 0.3 spells the layout in its overrides (mapping.yaml beside this file).

What torchtitan computes from them is read in the torchtitan 0.3.0 wheel:
- the data-parallel ranks are `data_parallel_shard_degree` (FSDP2, ZeRO-3) or
  `data_parallel_replicate_degree` (parameters replicated, ZeRO-0); both > 1 is HSDP, which a
  Layout does not say (config/configs.py ParallelismConfig, distributed/parallel_dims.py);
- gradient accumulation is global_batch_size / (local_batch_size x dp) (trainer.py), and with
  pp the local batch is split into pipeline micro-batches of pipeline_parallel_microbatch_size
  (trainer.py Trainer.Config.__post_init__ asserts it divides): so without pp the local batch is
  the micro-batch, and with pp it is micro-batch x accumulation (one optimizer step per local
  batch, the pipeline's micro-batches being the accumulation);
- pipeline stages: ceil((layers + 2) / pipeline_parallel_layers_per_stage)
  (distributed/pipeline_parallel.py), the formula `tt_layers_per_stage` of constraints.yaml
  beside this file, evaluated when the plan was made (plan.json's `decisions`,
  planning/decisions.py) and read here, as async TP is.

The config a job starts from (`--config llama3_8b`) is the first of the mapping's configs whose
model formula holds for the model: the formulas `tt_llama3_*` of this backend's own
constraints.yaml, compiled once per process on their own (not the whole rule set: plan.json
keeps no config, and the files are rendered from it alone). A plan made with a `--rules`
overlay that redefines them is judged by the overlay (`torchtitan.has_config`) and rendered
by these.

Where that config does not build the model in the plan's precision with the recipe the cost
model priced (cost/layout.py fp8_recipe), the job starts from `--module parplan_torchtitan_config
--config <function>` instead: the config function the plan writes beside torchtitan_run.sh
(CONFIG_MODULE_FILE), which calls torchtitan's config and sets its model's converters
(`torchtitan.converter`; none for bf16).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from parplan_gen.backends.torchtitan.configs import config_registry
from parplan_gen.cost.layout import DEFAULT_FSDP_RESHARD, Layout, fp8_recipe, loss_compiled_value
from parplan_gen.inputs.defaults import ZERO_FULL
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.inputs.resources import BACKEND_CONSTRAINTS
from parplan_gen.models.any_model import transformer_of
from parplan_gen.models.kind import TrainedModel
from parplan_gen.planning.decisions import BackendDecisions
from parplan_gen.render.mapping_schema import MappingFile
from parplan_gen.rules.formulas import FormulaLibrary
from parplan_gen.rules.ruleset import load_rule_file
from parplan_gen.rules.schema import NamedFormula

MODEL_PART, LOSS_PART = "model", "loss"  # config/configs.py CompileConfig.components' parts
# torch.distributed.pipelining schedule names (ParallelismConfig.pipeline_parallel_schedule).
SCHEDULE_1F1B, SCHEDULE_INTERLEAVED = "1F1B", "Interleaved1F1B"
# The config module a plan writes where no torchtitan config builds its model as priced
# (plan_files.py renders it; torchtitan_run.sh puts its folder on PYTHONPATH).
CONFIG_MODULE = "parplan_torchtitan_config"
CONFIG_MODULE_FILE = f"{CONFIG_MODULE}.py"
# The torchtitan 0.3 model converter of each FP8 recipe a plan prices (cost/layout.py
# fp8_recipe): components/quantization/float8.py Float8LinearConverter (recipe_name "rowwise"),
# mx.py MXFP8LinearConverter (MXFP8: SM 10.0 and later).
CONVERTERS = {"rowwise": "Float8LinearConverter", "mxfp8": "MXFP8LinearConverter"}
# How the written function is named: the config's name and what it converts to.
FUNCTION_SUFFIX = {"rowwise": "float8_rowwise", "mxfp8": "mxfp8", None: "bf16"}

FACT_NAMES = (
    "torchtitan.config",
    "torchtitan.flavor",
    "torchtitan.fp8_recipe",
    "torchtitan.converter",
    "torchtitan.config_function",
    "torchtitan.dp_shard",
    "torchtitan.dp_replicate",
    "torchtitan.local_batch_size",
    "torchtitan.pp_schedule",
    "torchtitan.layers_per_stage",
    "torchtitan.sequence_parallel",
    "torchtitan.no_sequence_parallel",
    "torchtitan.async_tp",
    "torchtitan.compile",
    "torchtitan.compile_components",
    "torchtitan.compile_model",
    "torchtitan.fsdp_reshard",
)


def torchtitan_facts(
    model: TrainedModel,
    layout: Layout,
    mapping: MappingFile,
    decided: BackendDecisions | None,
    architecture: str,
) -> dict[str, Any]:
    """torchtitan.* for `layout` on GPUs of `architecture` (every key; None where it does not
    apply). `decided`: what the plan's rules decided for torchtitan's files (None where it does
    not run the layout: its files are not written)."""
    if transformer_of(model) is None:
        return dict.fromkeys(FACT_NAMES)
    sharded = layout.zero_stage == ZERO_FULL
    pipeline, interleaved = layout.pp > 1, layout.vpp > 1
    split = layout.sequence_parallel and layout.tp > 1
    # torchtitan_run.sh's --config, written only where torchtitan runs the layout
    config = None if decided is None else config_name(model, layout, mapping)
    recipe = fp8_recipe(architecture, "torchtitan") if layout.precision == "fp8" else None
    async_tp = decided is not None and decided.tp_comm_overlap
    compiled = _compiled(layout, config, converted=recipe is not None, async_tp=async_tp)
    return {
        "torchtitan.config": config,
        "torchtitan.flavor": _own(mapping, config, "flavor"),
        "torchtitan.fp8_recipe": recipe,
        "torchtitan.converter": None if recipe is None else CONVERTERS[recipe],
        "torchtitan.config_function": _written_function(mapping, config, layout.precision, recipe),
        "torchtitan.dp_shard": layout.dp if sharded else 1,
        "torchtitan.dp_replicate": 1 if sharded else layout.dp,
        "torchtitan.local_batch_size": layout.mbs * (layout.grad_accum if pipeline else 1),
        "torchtitan.pp_schedule": (SCHEDULE_INTERLEAVED if interleaved else SCHEDULE_1F1B)
        if pipeline
        else None,
        "torchtitan.layers_per_stage": decided.layers_per_stage if decided else None,
        "torchtitan.sequence_parallel": split,
        "torchtitan.no_sequence_parallel": layout.tp > 1 and not split,
        # Async TP where the cost model priced the TP traffic overlapped (it needs SP).
        "torchtitan.async_tp": async_tp,
        "torchtitan.compile": bool(compiled),
        # one comma-separated word (torchtitan's config/manager.py list_str_rule)
        "torchtitan.compile_components": ",".join(compiled) or None,
        "torchtitan.compile_model": MODEL_PART in compiled,
        # the reshard policy where it is not torchtitan's default (Layout.fsdp_reshard)
        "torchtitan.fsdp_reshard": None
        if layout.fsdp_reshard == DEFAULT_FSDP_RESHARD
        else layout.fsdp_reshard,
    }


def _compiled(
    layout: Layout, config: str | None, *, converted: bool, async_tp: bool
) -> tuple[str, ...]:
    """What the job compiles (config/configs.py CompileConfig.components; empty: nothing):
    the model where its FP8 converters run (compiled, as torchtitan's float8 configs run them),
    where async TP needs it (CompileConfig.__post_init__: "Async TP requires 'model' in
    --compile.components") or where the config compiles it already or turns async TP on
    (configs.yaml); the loss as the layout says (Layout.loss_compiled; unsaid: as plans run
    it, cost/layout.py plan_loss_compiled). None of it without a config (no files)."""
    if config is None:
        return ()
    own = config_registry().settings(config)
    model = converted or async_tp or bool(own["compile"] or own["async_tp"])
    loss = loss_compiled_value(layout.loss_compiled, "torchtitan")
    return tuple(part for part, on in ((MODEL_PART, model), (LOSS_PART, loss)) if on)


def config_name(model: TrainedModel, layout: Layout, mapping: MappingFile) -> str | None:
    """The first torchtitan config (of the latest version in the mapping) whose model formula
    holds for `model`, else None (torchtitan's constraint torchtitan.has_config refuses it)."""
    if not mapping.torchtitan:
        return None
    env = model.formula_values(layout.seq_len)
    section = mapping.torchtitan[max(mapping.torchtitan)]
    return next((name for name, c in section.configs.items() if _holds(c.model, env)), None)


def _own(mapping: MappingFile, config: str | None, field: str) -> Any:
    """The `field` of `config` in the latest torchtitan section (None without a config)."""
    if config is None:
        return None
    return getattr(mapping.torchtitan[max(mapping.torchtitan)].configs[config], field)


def _written_function(
    mapping: MappingFile, config: str | None, precision: str, recipe: str | None
) -> str | None:
    """The function of CONFIG_MODULE_FILE the job starts from, None where torchtitan's own
    `config` builds the model in `precision` with `recipe` (or where there is no config)."""
    if config is None:
        return None
    own = mapping.torchtitan[max(mapping.torchtitan)].configs[config]
    if own.precision == precision and own.fp8_recipe == recipe:
        return None
    return f"{config}_{FUNCTION_SUFFIX[recipe]}"


def _holds(name: str, env: Mapping[str, Any]) -> bool:
    where = SourceRef(f"{BACKEND_CONSTRAINTS} formula {name}")
    return bool(own_formulas().compile(name, where, "estimate").evaluate(env))


@cache
def own_formulas() -> FormulaLibrary:
    """The named formulas of torchtitan's constraints.yaml (beside this module), compiled once
    per process; each is written as a formula or as {value, unit, source}."""
    doc, parsed = load_rule_file(Path(__file__).with_name(BACKEND_CONSTRAINTS))
    return FormulaLibrary(
        {
            name: (
                value.value if isinstance(value, NamedFormula) else value,
                doc.ref(("formulas", name)),
            )
            for name, value in parsed.formulas.items()
        }
    )
