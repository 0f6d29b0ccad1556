"""Render a PlanDocument through Jinja templates into the files that launch it, and write them.

A transformer's plan renders every file; an op-graph model's plan (ResNet-50, an ONNX model)
renders all but megatron_args.sh, as Megatron-LM trains transformers only.

Templates live in the shipped `templates/` folder and each backend's folder
(parplan_gen/backends/<name>/templates/, named `<name>/<version>/...`); a user folder given with
`--templates` overrides any of them, and mapping.yaml, by relative name
(render/template_env.py, render/mapping.py). They run in
Jinja's immutable sandbox with StrictUndefined: a template that names a missing value fails,
and one that reaches for Python internals is refused (render/template_check.py checks each
template when it is loaded, render/sandbox.py bounds what it may cost when it runs). Every
rendered file is parsed back (render/checks.py) before it is returned; render/writer.py writes
them.

What the templates see is plain data made safe for the files a shell reads (shell_quote):
every text is safe in a comment (no control or line-break character), the model's, the
cluster's and the GPU's names are reduced to safe_text.safe_name's character set (inert
anywhere in a shell line), nccl.env's lines are built by `shell_quote.assignment`, and the
`sh` filter quotes a command's argument (`shell_quote.argument`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parplan_gen.backends.torchtitan.facts import CONFIG_MODULE, CONFIG_MODULE_FILE
from parplan_gen.inputs.safe_text import markdown, printable, safe_name
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render import mapping as render_mapping
from parplan_gen.render.checks import (
    ACCELERATE_CONFIG,
    RenderError,
    check_ds_config,
    check_files,
)
from parplan_gen.render.facts import facts
from parplan_gen.render.launch_context import env_var, launch_context
from parplan_gen.render.mapping import (
    MAPPING_FILE,
    LoadedMapping,
    megatron_groups,
    nccl_entries,
    notes,
)
from parplan_gen.render.mapping_schema import TorchtitanMapping
from parplan_gen.render.report import report_context
from parplan_gen.render.shell_quote import comment
from parplan_gen.render.template_env import Templates, environment, render_template
from parplan_gen.render.writer import NCCL_REFERENCE

DS_CONFIG, DS_CONFIG_TEMPLATE = "ds_config.json", "deepspeed/{deepspeed}/ds_config.json.j2"
OUTPUTS = (  # rendered file -> template; {megatron} and {deepspeed} are the chosen versions
    (DS_CONFIG, DS_CONFIG_TEMPLATE),
    ("megatron_args.sh", "megatron/{megatron}/megatron_args.sh.j2"),
    ("torchtitan_run.sh", "torchtitan/{torchtitan}/torchtitan_run.sh.j2"),
    (CONFIG_MODULE_FILE, "torchtitan/{torchtitan}/" + CONFIG_MODULE_FILE + ".j2"),
    (ACCELERATE_CONFIG, "accelerate/{accelerate}/accelerate_config.yaml.j2"),
    ("accelerate_launch.sh", "accelerate/{accelerate}/accelerate_launch.sh.j2"),
    ("nccl.env", "nccl/nccl.env.j2"),
    ("launch_torchrun.sh", "launch/launch_torchrun.sh.j2"),
    ("launch_slurm.sbatch", "launch/launch_slurm.sbatch.j2"),
    ("hostfile", "launch/hostfile.j2"),
    ("plan_memory.svg", "report/memory.svg.j2"),
    ("plan_time.svg", "report/time.svg.j2"),
    ("plan.md", "report/plan.md.j2"),
)
PLAN_JSON = "plan.json"
# A file written only for some plans of its backend: the context's (section, key) that is None
# where it is not (the torchtitan config function, where no torchtitan config builds the model
# as the plan is priced).
WRITTEN_WHEN = {CONFIG_MODULE_FILE: ("torchtitan", "config_module")}
BACKEND_FILES = {
    "deepspeed": DS_CONFIG,
    "megatron": "megatron_args.sh",
    "torchtitan": "torchtitan_run.sh",
    "accelerate": ACCELERATE_CONFIG,
}  # a backend's own file


def backend_runs(doc: PlanDocument) -> dict[str, str | None]:
    """For each backend the model has: None when its files are written (it runs the chosen
    layout exactly), else why not: the document's verdicts, by the rules it was planned with."""
    unjudged = "not judged when this plan was made"
    return {b: doc.backends.get(b, unjudged) for b in doc.model.backends}


def hf_trainer_runs(doc: PlanDocument) -> None:
    """A RenderError unless the Hugging Face Trainer runs the chosen layout: it wraps the model
    in DeepSpeed ZeRO data parallelism only (no pipeline engine, no AutoTP or MoE groups of
    its own), so a plan with tp, pp or ep > 1 is not one it runs."""
    layout = doc.chosen.plan
    sizes = {"tp": layout.tp, "pp": layout.pp, "ep": layout.ep}
    split = [f"{k} {v}" for k, v in sizes.items() if v > 1]
    if backend_runs(doc).get("deepspeed") is not None or split:
        why = ", ".join(split) or backend_runs(doc)["deepspeed"]
        raise RenderError(
            f"--hf-trainer: the Hugging Face Trainer runs DeepSpeed ZeRO data parallelism only "
            f"and this plan has {why}; render it without --hf-trainer"
        )


def resolve_versions(
    doc: PlanDocument, templates: Templates, mapping: LoadedMapping
) -> dict[str, str | None]:
    """The Megatron-LM and DeepSpeed template versions: the document's choice, else the latest;
    None for a backend the plan's kind of model does not use or that does not run the chosen
    layout (`backend_runs`: its files are not written)."""
    chosen = {
        "megatron": doc.render.megatron_version,
        "deepspeed": doc.render.deepspeed_version,
        "torchtitan": None,  # the latest shipped (plan.json records no torchtitan version)
        "accelerate": None,  # the latest shipped, as torchtitan's
    }
    sections: dict[str, Mapping[str, object]] = {
        "megatron": mapping.data.megatron,
        "deepspeed": mapping.data.deepspeed,
        "torchtitan": mapping.data.torchtitan,
        "accelerate": mapping.data.accelerate,
    }
    used = doc.model.backends
    runs = backend_runs(doc)
    out: dict[str, str | None] = {}
    for backend, wanted in chosen.items():
        if backend not in used:
            if wanted is not None:
                raise RenderError(
                    f"--{backend}-version '{printable(wanted)}': {printable(doc.model.name)} is "
                    f"an op-graph model, rendered for {' and '.join(used)} only"
                )
            out[backend] = None
            continue
        if runs.get(backend) is not None:
            out[backend] = None
            continue
        shipped = [v for v in templates.versions(backend) if v in sections[backend]]
        if not shipped:
            raise RenderError(f"no {backend} templates with a section in {MAPPING_FILE}")
        needed = doc.decisions[backend].version
        version = wanted or (needed if needed in shipped else shipped[-1])
        if version not in shipped:
            raise RenderError(
                f"--{backend}-version '{printable(version)}' is not available "
                f"(have: {printable(', '.join(shipped))})"
            )
        if needed not in (version, BACKENDS[backend].version):
            raise RenderError(f"--{backend}-version {version}: this plan needs {needed}")
        out[backend] = version
    return out


def output_names() -> list[str]:
    """Every file name a plan of any kind may render: what a folder written by parplan can
    hold, so that writing a new plan there removes a file of an earlier one (megatron_args.sh
    of a transformer's plan under an op-graph model's)."""
    return [PLAN_JSON, *(name for name, _ in OUTPUTS)]


def outputs(
    versions: dict[str, str | None], context: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """(file, template) of every file a plan with these backend versions renders: a backend's
    files only when the plan uses it, and a WRITTEN_WHEN file only where `context` (the
    templates' context; None: every file) has it."""
    skipped = [b for b, version in versions.items() if version is None]
    return [
        (name, template.format(**versions))
        for name, template in OUTPUTS
        if not any(f"{{{b}}}" in template for b in skipped)
        and (context is None or _wanted(name, context))
    ]


def _wanted(name: str, context: Mapping[str, Any]) -> bool:
    if name not in WRITTEN_WHEN:
        return True
    section, key = WRITTEN_WHEN[name]
    return context[section] is not None and context[section][key] is not None


def build_context(
    doc: PlanDocument,
    templates: Templates,
    *,
    hf_trainer: bool = False,
    force_nccl_algo: bool = False,
) -> dict[str, Any]:
    """Everything the templates format, computed from the document and the mapping.

    `megatron` is None for a plan that Megatron-LM does not train (an op-graph model)."""
    mapping = templates.mapping()
    versions = resolve_versions(doc, templates, mapping)
    values = facts(doc, mapping.data, hf_trainer=hf_trainer)
    # Whether ds_config.json is written with an optimizer (launch_torchrun.sh says how to use it).
    written = versions["deepspeed"] is not None
    values["deepspeed.optimizer_written"] = written and values["train.lr"] is not None
    megatron = (
        None
        if versions["megatron"] is None
        else _megatron_context(mapping, versions["megatron"], values)
    )
    if hf_trainer:
        hf_trainer_runs(doc)
    deepspeed = (
        None
        if versions["deepspeed"] is None
        else _deepspeed_context(mapping, versions["deepspeed"], values, hf_trainer)
    )
    torchtitan = (
        None
        if versions["torchtitan"] is None
        else _torchtitan_context(mapping, versions["torchtitan"], values)
    )
    accelerate = (
        None
        if versions["accelerate"] is None
        else _accelerate_context(mapping, versions["accelerate"], values)
    )
    launch = launch_context(doc, mapping, values)
    cluster = doc.cluster
    all_notes = [f"megatron_args.sh: {n}" for n in (megatron["notes"] if megatron else [])]
    all_notes += [f"ds_config.json: {n}" for n in (deepspeed["notes"] if deepspeed else [])]
    all_notes += [f"torchtitan_run.sh: {n}" for n in (torchtitan["notes"] if torchtitan else [])]
    all_notes += [f"accelerate_launch.sh: {n}" for n in (accelerate["notes"] if accelerate else [])]
    chosen_backend = doc.chosen.backend
    context = {
        "versions": versions,
        "model": {**doc.model.model_dump(mode="json"), "name": safe_name(doc.model.name)},
        "plan": doc.chosen.plan.model_dump(mode="json"),
        "cluster": {
            "name": safe_name(cluster.name, fallback="cluster"),
            "gpu": safe_name(cluster.gpu.display_name, fallback="gpu"),
            "num_gpus": cluster.num_gpus,
            "num_nodes": cluster.num_nodes,
            "gpus_per_node": cluster.procs_per_node,
            "nvlink_domain": cluster.nvlink_gpus,
        },
        "deepspeed": deepspeed,
        "megatron": megatron,
        "torchtitan": torchtitan,
        "accelerate": accelerate,
        "backend": {
            "title": BACKENDS[chosen_backend.name].title if chosen_backend else "not named",
            "version": chosen_backend.version if chosen_backend else "",
            "best_on": BACKENDS[doc.best_on].title if doc.best_on else "",
            "not_written": [
                f"{BACKEND_FILES[b]}: not written, {BACKENDS[b].title} does not run this "
                f"layout ({markdown(why)})"  # plan.md only; `why`: a rule's reason
                for b, why in backend_runs(doc).items()
                if why is not None and b in BACKEND_FILES
            ],
        },
        "nccl": {
            "entries": nccl_entries(mapping, values, doc.proposals, force_algo=force_nccl_algo),
        },
        "launch": launch,
        "report": report_context(
            doc,
            mapping.data.report,
            all_notes,
            launch["notes"],
        ),
    }
    return _shown(context)


def _shown(value: Any) -> Any:
    """`value` (the templates' context) with every text safe in a comment line
    (`shell_quote.comment`); anything but plain data is a bug here (TypeError)."""
    if isinstance(value, str):
        return comment(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_shown(item) for item in value]
    if isinstance(value, dict):
        return {_shown(key): _shown(item) for key, item in value.items()}
    raise TypeError(f"a template context holds plain data, not {type(value).__name__}")


def _megatron_context(
    mapping: LoadedMapping, version: str, values: dict[str, Any]
) -> dict[str, Any]:
    meg = mapping.data.megatron[version]
    return {
        "version": version,
        "script": meg.script,
        "groups": megatron_groups(mapping, version, values),
        "run_env": [env_var(e, values) for e in meg.run_env],
        "data_env": {k: env_var(e, values) for k, e in meg.data_env.items()},
        "one_cuda_connection": values["megatron.one_cuda_connection"],
        "ub_skip_multicast": values["megatron.ub_skip_multicast"],
        "fsdp": values["megatron.fsdp"],
        "fsdp_many_connections": values["megatron.fsdp_many_connections"],
        "mock_vocab_size": values["megatron.mock_vocab_size"],
        "notes": notes(mapping, meg.notes, values, ("megatron", version, "notes")),
    }


def _deepspeed_context(
    mapping: LoadedMapping, version: str, values: dict[str, Any], hf_trainer: bool
) -> dict[str, Any]:
    ds = mapping.data.deepspeed[version]
    return {
        "version": version,
        "config": render_mapping.deepspeed_config(mapping, version, values, hf_trainer=hf_trainer),
        "hf_trainer": hf_trainer,
        "notes": notes(mapping, ds.notes, values, ("deepspeed", version, "notes")),
    }


def _torchtitan_context(
    mapping: LoadedMapping, version: str, values: dict[str, Any]
) -> dict[str, Any]:
    section = mapping.data.torchtitan[version]
    if values["torchtitan.config"] is None:  # the constraint torchtitan.has_config refuses it
        raise RenderError(f"torchtitan {version} has no config that builds this model")
    *overrides, subcommand = render_mapping.torchtitan_args(mapping, version, values)
    written = _config_module(section, version, values)
    return {
        "version": version,
        "entry": section.entry,
        # the file `python -m ENTRY` runs, under the checkout (TORCHTITAN_DIR)
        "entry_file": section.entry.replace(".", "/") + ".py",
        # torchtitan's own config, or the config function the plan writes (config_module)
        "module": section.module if written is None else CONFIG_MODULE,
        "config": values["torchtitan.config"] if written is None else written["function"],
        "config_module": written,
        "overrides": overrides,
        "subcommand": subcommand,
        "notes": notes(mapping, section.notes, values, ("torchtitan", version, "notes")),
    }


def _config_module(
    section: TorchtitanMapping, version: str, values: dict[str, Any]
) -> dict[str, Any] | None:
    """What parplan_torchtitan_config.py says (None: torchtitan's own config is the plan's):
    its file and function, the config it calls, the model_registry flavor and the converter
    with the modules it leaves 16-bit (Float8) or converts (MXFP8)."""
    function = values["torchtitan.config_function"]
    if function is None:
        return None
    own = section.config_module
    if own is None or values["torchtitan.flavor"] is None:
        raise RenderError(
            f"the mapping's torchtitan {version} section has no config_module (or no flavor for "
            f"{values['torchtitan.config']}): torchtitan's {values['torchtitan.config']} does "
            f"not build this model in {values['train.precision']}, and {CONFIG_MODULE_FILE} "
            "would"
        )
    return {
        "file": CONFIG_MODULE_FILE,
        "function": function,
        "config": values["torchtitan.config"],
        "registry": f"torchtitan.models.{section.module}",
        "flavor": values["torchtitan.flavor"],
        "converter": values["torchtitan.converter"],
        # torch.compile on in the function, where the plan compiles the model (facts.py
        # _compiled): a converter reads it when the config is built (model_compile_enabled)
        "compile_model": values["torchtitan.compile_model"],
        "recipe": values["torchtitan.fp8_recipe"],
        "filter_fqns": own.float8_filter_fqns,
        "fqns": own.mxfp8_fqns,
    }


def _accelerate_context(
    mapping: LoadedMapping, version: str, values: dict[str, Any]
) -> dict[str, Any]:
    section = mapping.data.accelerate[version]
    return {
        "version": version,
        "config": render_mapping.accelerate_config(mapping, version, values),
        "config_file": ACCELERATE_CONFIG,
        "notes": notes(mapping, section.notes, values, ("accelerate", version, "notes")),
    }


def render_plan(
    doc: PlanDocument,
    *,
    templates_dir: str | Path | None = None,
    hf_trainer: bool = False,
    force_nccl_algo: bool = False,
) -> dict[str, str]:
    """Every rendered file (name -> text), each already parsed back and checked.

    plan.json records the template versions used, so rendering it again gives the same files.
    """
    templates = Templates.at(templates_dir)
    context = build_context(doc, templates, hf_trainer=hf_trainer, force_nccl_algo=force_nccl_algo)
    doc = doc.with_render_options(
        megatron_version=context["versions"]["megatron"],
        deepspeed_version=context["versions"]["deepspeed"],
    )
    env = environment(templates)
    files = {
        out: render_template(env, template, context)
        for out, template in outputs(context["versions"], context)
    }
    files[PLAN_JSON] = doc.to_json()
    check_files(files, nccl_reference=templates.builtin / NCCL_REFERENCE)
    return files


def deepspeed_config(
    doc: PlanDocument, *, templates_dir: str | Path | None = None, hf_trainer: bool = False
) -> dict[str, Any]:
    """The plan's DeepSpeed config, as ds_config.json holds it (rendered, parsed and checked)."""
    templates = Templates.at(templates_dir)
    context = build_context(doc, templates, hf_trainer=hf_trainer)
    _runs_or_fail(doc, "deepspeed")
    name = DS_CONFIG_TEMPLATE.format(**context["versions"])
    files = {DS_CONFIG: render_template(environment(templates), name, context)}
    check_files(files, nccl_reference=templates.builtin / NCCL_REFERENCE)
    config = json.loads(files[DS_CONFIG])
    check_ds_config(config, doc.chosen.plan.dp)
    return config


def megatron_args(doc: PlanDocument, *, templates_dir: str | Path | None = None) -> list[str]:
    """The model and plan arguments of megatron_args.sh, in its order, unquoted.

    Data, tokenizer and checkpoint arguments, the run length and the rates (TRAIN_ITERS, LR,
    ...) come from the environment in the script and are not part of this list. An op-graph
    model has none (RenderError).
    """
    if "megatron" not in doc.model.backends:
        raise RenderError(
            f"{printable(doc.model.name)} is an op-graph model: it has no Megatron-LM arguments "
            "(Megatron-LM trains transformers); launch your training script with "
            "launch_torchrun.sh and ds_config.json (parplan render / Plan.write)"
        )
    _runs_or_fail(doc, "megatron")
    templates = Templates.at(templates_dir)
    context = build_context(doc, templates)
    return [
        word for group in context["megatron"]["groups"] for arg in group["args"] for word in arg
    ]


def _runs_or_fail(doc: PlanDocument, backend: str) -> None:
    """A RenderError when `backend` does not run the chosen layout (its files are not written)."""
    why = backend_runs(doc).get(backend)
    if why is not None:
        raise RenderError(f"{BACKENDS[backend].title} does not run this plan: {why}")
