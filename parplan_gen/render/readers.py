"""Layouts that users already have, read from their files: a DeepSpeed ds_config.json, a
Megatron-LM argument list or launch script, a torchtitan launch line, an Accelerate config
(`parplan check --from-deepspeed/--from-megatron/--from-torchtitan/--from-accelerate`, and
`parplan_gen.check(from_...=)`).

Each backend reads its own files (parplan_gen/backends/<name>/reader.py: its section of the
mapping read backwards, render/mapping_inverse.py, so that reading back the files `parplan`
wrote gives the layout they were written for). This module puts what they say together as a
check does: tp 1 and pp 1, then what the files say, then the fields given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan_gen.backends.accelerate.reader import accelerate_values
from parplan_gen.backends.deepspeed.reader import deepspeed_values
from parplan_gen.backends.megatron.reader import megatron_shape, megatron_values
from parplan_gen.backends.torchtitan.reader import torchtitan_values
from parplan_gen.cost.layout import Layout, build_layout
from parplan_gen.inputs.errors import InputError, ParplanError, SourceRef
from parplan_gen.render.mapping_inverse import UNFILLED
from parplan_gen.render.template_env import Templates

if TYPE_CHECKING:
    from parplan_gen.models.kind import TrainedModel
    from parplan_gen.rules.ruleset import RuleSet

UNREAD = {"tp": 1, "pp": 1}  # what a check takes where neither a file nor a field says


def layout_from_files(
    model: TrainedModel,
    *,
    deepspeed: str | Path | None = None,
    megatron: str | Path | None = None,
    torchtitan: str | Path | None = None,
    accelerate: str | Path | None = None,
    templates_dir: str | Path | None = None,
    rules: RuleSet | None = None,
    num_gpus: int | None = None,
) -> dict[str, Any]:
    """Layout fields set by a ds_config.json, then a Megatron-LM argument file, then a torchtitan
    launch line, then an accelerate_config.yaml (each may be None), plus `grad_accum` when the DeepSpeed config gives one (to
    check against the layout) and `unfilled` when it leaves fields to the flags
    (`require_given`). Megatron-LM arguments describe transformers: for an op-graph model, an
    InputError, as is a script whose model shape is not `model`'s. `rules`: the check's (None:
    the built-in ones, loaded if a torchtitan line needs a named formula); `num_gpus`: the
    world size a torchtitan line runs on (its data-parallel degree -1 is the rest of it), which
    an Accelerate config's num_processes must be."""
    values: dict[str, Any] = {}
    if deepspeed:
        hidden = getattr(model, "hidden_size", None)  # an op-graph model has none
        values.update(deepspeed_values(deepspeed, templates_dir=templates_dir, hidden=hidden))
    if megatron:
        if "megatron" not in model.backends:
            raise InputError(
                f"--from-megatron: {model.name} is an op-graph model; Megatron-LM arguments "
                "describe transformers (use --from-deepspeed or the layout flags)"
            )
        megatron_shape(megatron, model)
        read = megatron_values(megatron, model.pipeline_layers, templates_dir=templates_dir)
        _merge(values, read)
        # a script that names no loss fusion runs Megatron-LM's own cross-entropy (its default)
        values.setdefault("cross_entropy_fusion", "off")
    if torchtitan:
        if "torchtitan" not in model.backends:
            raise InputError(f"--from-torchtitan: torchtitan does not train {model.name}")
        if num_gpus is None:
            raise TypeError("layout_from_files: a torchtitan line needs num_gpus")
        mapping = Templates.at(templates_dir).mapping()
        layers = model.pipeline_layers
        values.update(torchtitan_values(torchtitan, layers, mapping, rules, num_gpus=num_gpus))
    if accelerate:
        if "accelerate" not in model.backends:
            raise InputError(
                f"--from-accelerate: Accelerate's FSDP2 plans do not train {model.name}"
            )
        if num_gpus is None:
            raise TypeError("layout_from_files: an Accelerate config needs num_gpus")
        mapping = Templates.at(templates_dir).mapping()
        _merge(values, accelerate_values(accelerate, mapping, num_gpus=num_gpus))
    return values


def _merge(values: dict[str, Any], read: dict[str, Any]) -> None:
    """`read` over `values`, the fields each leaves to the flags (UNFILLED) joined."""
    unfilled = values.pop(UNFILLED, {}) | read.pop(UNFILLED, {})
    values.update(read)
    if unfilled:
        values[UNFILLED] = unfilled


def require_given(values: dict[str, Any], given: Mapping[str, Any]) -> None:
    """Remove `unfilled` from the values read (the fields a file leaves to the flags: a
    ds_config.json's "auto", its fp32) and raise its one-line InputError for the first of them
    `given` (the flags, the API's layout fields) does not give."""
    for field, (why, where) in values.pop(UNFILLED, {}).items():
        if field not in given:
            raise InputError(why, where)


def layout_read(
    model: TrainedModel,
    num_gpus: int,
    given: Mapping[str, Any],
    rules: RuleSet,
    *,
    deepspeed: str | Path | None = None,
    megatron: str | Path | None = None,
    torchtitan: str | Path | None = None,
    accelerate: str | Path | None = None,
    no_batch: Callable[[str], ParplanError] = InputError,
) -> Layout:
    """The layout a check of these files judges, as `parplan check --from-*` reads it: tp 1 and
    pp 1, then what the files say, then the fields `given`; the sequence length defaults to the
    model's. A ds_config.json's gradient_accumulation_steps must be the layout's. `no_batch`:
    the error where neither a file nor `given` has the global batch (the CLI's is a usage
    error)."""
    values: dict[str, Any] = dict(UNREAD)
    values |= layout_from_files(
        model,
        deepspeed=deepspeed,
        megatron=megatron,
        torchtitan=torchtitan,
        accelerate=accelerate,
        rules=rules,
        num_gpus=num_gpus,
    )
    accum = _merge_given(values, given, num_gpus, deepspeed=deepspeed, megatron=megatron)
    if "global_batch" not in values:
        raise no_batch("give --global-batch (or a file that sets it)")
    values["seq_len"] = model.sequence_length(values.get("seq_len"))
    layout = build_layout(num_gpus, **values)
    check_accumulation(deepspeed, accum, layout)
    return layout


def _merge_given(
    values: dict[str, Any],
    given: Mapping[str, Any],
    num_gpus: int,
    *,
    deepspeed: str | Path | None = None,
    megatron: str | Path | None = None,
) -> int | None:
    """The fields `given` (the flags, the API's layout fields) over the `values` the files say
    (`layout_from_files`), in place, with what the frameworks derive from the result: a
    ds_config.json's missing batch values (`deepspeed_batch`), and a Megatron-LM script's
    sequence parallelism dropped where the tp it ends with is 1 (validate_args: "Disabling
    sequence parallelism because tensor model parallelism is disabled"; the reader drops it
    itself unless tp is left to a flag). Returns the file's gradient_accumulation_steps (None:
    it gives none), taken out of `values` for `check_accumulation`."""
    require_given(values, given)
    accum = values.pop("grad_accum", None)
    values |= given
    if deepspeed:
        deepspeed_batch(values, accum, num_gpus, deepspeed)
    if megatron and values.get("tp", 1) == 1 and "sequence_parallel" not in given:
        values.pop("sequence_parallel", None)
    return accum


def deepspeed_batch(
    values: dict[str, Any], accum: int | None, num_gpus: int, path: str | Path
) -> None:
    """Fill the micro-batch or the global batch of `values` (the files' and the flags') that a
    ds_config.json leaves out, as DeepSpeed derives them from the others over its data-parallel
    ranks, dp = GPUs / (tp x pp x cp) (runtime/config.py _set_batch_related_parameters):
    train_batch_size and gradient_accumulation_steps give the micro-batch, the micro-batch and
    the accumulation the batch, train_batch_size alone one accumulation step of
    train_batch_size / dp, the micro-batch alone a batch of one step. `accum`: the file's
    gradient_accumulation_steps, or None; `path` the file. A micro-batch left at none would
    otherwise be build_layout's 1, which is not what DeepSpeed runs."""
    model_parallel = values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
    if num_gpus % model_parallel:
        return  # build_layout names the sizes that do not divide the GPUs
    dp = num_gpus // model_parallel
    batch, mbs = values.get("global_batch"), values.get("mbs")
    if batch is not None and mbs is None:
        steps = dp * (accum or 1)
        # DeepSpeed's _batch_assertion: "Micro batch size per gpu: 0 has to be > 0"
        if batch < steps:
            raise InputError(
                f"{batch} gives no sequence to each of {dp} data-parallel "
                f"ranks x {accum or 1} accumulation steps (DeepSpeed asserts a micro-batch > 0)",
                SourceRef(str(path), None, path="train_batch_size"),
            )
        values["mbs"] = batch // steps
    elif batch is None and mbs is not None:
        values["global_batch"] = mbs * (accum or 1) * dp


def check_accumulation(deepspeed: str | Path | None, accum: int | None, layout: Layout) -> None:
    """A ds_config.json's gradient_accumulation_steps (None: it gives none) must be what the
    layout's batch, micro-batch and dp make it: an InputError naming the file otherwise."""
    if accum is not None and accum != layout.grad_accum:
        raise InputError(
            f"{deepspeed}: gradient_accumulation_steps({accum}) != global batch("
            f"{layout.global_batch}) / (mbs({layout.mbs}) * dp({layout.dp})) = {layout.grad_accum}"
        )
