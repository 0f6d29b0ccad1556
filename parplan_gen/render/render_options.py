"""The options of one render: what `parplan render`, `parplan plan --out` and `Plan.write` take,
as one typed value, and the write of a plan's files with them.

The CLI builds a RenderOptions from its flags (cli/render.py), the API from keyword arguments
(`Plan.write(out_dir, **options)`); both then call `write_plan`, so that the same options give
the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.plan_files import output_names, render_plan
from parplan_gen.render.writer import write_rendered


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    """How a plan is rendered and written (each the CLI flag of the same name)."""

    templates: str | Path | None = None  # a folder that overrides built-in templates by name
    force: bool = False  # replace existing files whose content differs
    hf_trainer: bool = False  # ds_config.json for the HF Trainer: "auto" where it fills values
    force_nccl_algo: bool = False  # NCCL_ALGO from the proposals, not commented out
    megatron_version: str | None = None  # Megatron-LM template version (None: the latest)
    deepspeed_version: str | None = None  # DeepSpeed template version (None: the latest)


def render_files(doc: PlanDocument, options: RenderOptions) -> dict[str, str]:
    """Every file of `doc` rendered with `options` (name -> text), checked."""
    doc = doc.with_render_options(
        megatron_version=options.megatron_version, deepspeed_version=options.deepspeed_version
    )
    return render_plan(
        doc,
        templates_dir=options.templates,
        hf_trainer=options.hf_trainer,
        force_nccl_algo=options.force_nccl_algo,
    )


def write_plan(doc: PlanDocument, out_dir: str | Path, options: RenderOptions) -> dict[str, str]:
    """Render `doc` with `options` and write the files into `out_dir` (file -> what was done). A
    file that an earlier plan wrote and this one has not (megatron_args.sh, for an op-graph
    model) is removed with the write, so the folder holds one plan's files; an existing
    different file is refused unless `options.force`."""
    files = render_files(doc, options)
    return write_rendered(out_dir, files, force=options.force, retire=output_names())
