"""Reads a DeepSpeed ds_config.json back (`parplan check --from-deepspeed FILE`): the
`deepspeed` section of mapping.yaml beside this file read backwards (render/mapping_inverse.py),
the same entries ds_config.json is written from, so that reading back a written file gives the
layout it was written for. Every number is parsed strictly (ASCII digits, bounded by the size
limits of `layout`).

`communication_data_type`, the type DeepSpeed reduces gradients in, is the layout's
`grad_reduce_dtype`: `default` where it is the type parplan prices and writes when a plan
leaves it to DeepSpeed (the named formula `grad_reduce_bytes` of the rules for a layout that
names no type: fp32 at ZeRO 0, the run's 16-bit type at ZeRO 1-3), else `fp32` or `bf16` as
written.

As DeepSpeed reads the file: a value "auto" (the HF Trainer's, filled from its own arguments)
is left to the check's flags, which must give it; with no bf16 (or its older name bfloat16) or
fp16 section enabled DeepSpeed trains in fp32, which the cost model does not price, so the
precision must come from a flag too (`UNFILLED`: what the flags must give, and the line that
says so where they do not). ZeRO-Offload (offload_optimizer / offload_param to cpu or nvme) is
refused by name: the cost model prices optimizer states and parameters in GPU memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan_gen.backends.deepspeed.keys import KeysBeside, check_keys
from parplan_gen.cost.layout import DS_LEAST_STAGE, DS_SETTINGS, SIXTEEN_BIT, size_problem
from parplan_gen.inputs.defaults import ZERO_FULL
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.source import Document, load_mapping_document
from parplan_gen.planning.decisions import GRADIENT_BYTES, TYPE_BYTES
from parplan_gen.planning.evaluate import named_formula
from parplan_gen.render.checks import AUTO, COMMUNICATION_TYPES
from parplan_gen.render.mapping_inverse import (
    CHOICES,
    UNFILLED,
    DeepSpeedKey,
    deepspeed_keys,
    read_choice,
)
from parplan_gen.render.template_env import Templates

if TYPE_CHECKING:
    from parplan_gen.rules.ruleset import RuleSet

# AUTO (render/checks.py): transformers integrations/deepspeed.py fills "auto" from the
# Trainer's arguments.
# The sections that turn 16-bit training on (runtime/precision_config.py: bf16, or its older
# name bfloat16 where bf16 is absent; fp16) and the precision each gives.
PRECISION_SECTIONS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16"}
ENABLED = "enabled"
# ZeRO-Offload (runtime/zero/offload_config.py OffloadDeviceEnum: none, cpu, nvme) and the
# deprecated switches runtime/zero/config.py turns into it.
OFFLOADS = ("offload_optimizer", "offload_param")
OFFLOAD_DEVICES, NOT_OFFLOADED = ("none", "cpu", "nvme"), "none"
OFFLOAD_SWITCHES = {"cpu_offload": "offload_optimizer", "cpu_offload_param": "offload_param"}
ZERO = "zero_optimization"
# ds_config.json's reduce type (render/checks.py COMMUNICATION_TYPES: DeepSpeed runtime/config.py
# get_communication_data_type) and its element sizes (planning/decisions.py TYPE_BYTES);
# GRADIENT_BYTES (rules/cost/memory.yaml) gives the size parplan writes for a layout that names
# no reduce type.
COMMUNICATION_TYPE = ("communication_data_type",)
OVERLAP = "overlap_grad_reduce"  # the Layout field zero_optimization.overlap_comm gives


def deepspeed_values(
    path: str | Path,
    *,
    templates_dir: str | Path | None = None,
    rules: RuleSet | None = None,
    hidden: int | None = None,
) -> dict[str, Any]:
    """Batch, pipeline stages, ZeRO stage, precision, (with a pipeline) recompute, the
    gradients' reduce type and ZeRO's buffers of a DeepSpeed ds_config.json; `rules`: the
    check's (None: the built-in ones, loaded only if the file names a communication_data_type);
    `hidden`: the model's hidden size, from which the HF Trainer fills the buffers' "auto"."""
    return deepspeed_reading(path, templates_dir=templates_dir, rules=rules, hidden=hidden).values


@dataclass(frozen=True)
class DeepSpeedReading:
    """What a ds_config.json says: layout fields (with UNFILLED: what the flags must give), and
    the keys beside the layout (keys.py)."""

    values: dict[str, Any]
    beside: KeysBeside


def deepspeed_reading(
    path: str | Path,
    *,
    templates_dir: str | Path | None = None,
    rules: RuleSet | None = None,
    hidden: int | None = None,
) -> DeepSpeedReading:
    """The whole reading of a ds_config.json (`deepspeed_values`), its other keys accounted for
    (keys.py: what the estimate does not price refused)."""
    doc = load_mapping_document(str(path), "a DeepSpeed config is a JSON object")
    _refuse_offload(doc)
    out: dict[str, Any] = {}
    unfilled: dict[str, tuple[str, SourceRef]] = {}
    read: set[str] = set()
    keys = deepspeed_keys(Templates.at(templates_dir).mapping())
    for key in keys:
        found, value = _at(doc.data, key.path)
        if found:
            read.add(".".join(key.path))
        if found and value == AUTO and key.field == OVERLAP:
            continue  # DeepSpeed reads "auto" as unset (config_utils.py): the stage's default
        if found and value == AUTO and key.field is not None:
            filled = _hf_filled(key.field, hidden)
            if filled is None:
                unfilled[key.field] = _auto_line(doc, key.path, key.field)
            else:
                out[key.field] = filled
        elif found and value != AUTO:
            out.update(_deepspeed_value(doc, key, value))
    if "precision" not in out:
        out.update(_older_bf16(doc.data))
    if "precision" not in out:
        unfilled["precision"] = _precision_line(doc)
    unfilled.pop("grad_accum", None)  # what the batch, micro-batch and dp make it
    found, value = _at(doc.data, COMMUNICATION_TYPE)
    if found:
        out.update(_reduce_type(doc, value, out, rules))
    stage = out.get("zero_stage", 0)
    _overlap_default(out, stage)
    for key in keys:
        # ZeRO's buffers and overlap_comm below the stage that reads them: DeepSpeed reads them
        # not (keys.py counts them with no effect), so the layout keeps its defaults
        if key.field in DS_LEAST_STAGE and stage < DS_LEAST_STAGE[key.field]:
            out.pop(key.field, None)
            unfilled.pop(key.field, None)
            read.discard(".".join(key.path))
    read |= {f"{section}.{ENABLED}" for section in PRECISION_SECTIONS}
    pipelined = out.get("pp", 1) > 1
    beside = check_keys(doc, stage, read | set(COMMUNICATION_TYPE), pipelined=pipelined)
    return DeepSpeedReading(out | ({UNFILLED: unfilled} if unfilled else {}), beside)


def _overlap_default(out: dict[str, Any], stage: int) -> None:
    """The layout's overlap_grad_reduce at ZeRO `stage` (`out`: what the file says): DeepSpeed's
    default where it says nothing (runtime/zero/config.py overlap_comm_valid: true at stage 3,
    false below); ZeRO-0 reads none (DS_LEAST_STAGE)."""
    if stage >= DS_LEAST_STAGE[OVERLAP]:
        out.setdefault(OVERLAP, stage == ZERO_FULL)


def _hf_filled(field: str, hidden: int | None) -> int | None:
    """The value the HF Trainer fills for a ZeRO buffer left "auto", from the model's hidden
    size h (transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig.
    trainer_config_finalize: reduce_bucket_size h^2, stage3_prefetch_bucket_size int(0.9 h^2)),
    or None (another field, or no model to read h from)."""
    if hidden is None:
        return None
    filled = {
        "ds_reduce_bucket_size": hidden * hidden,
        "ds_prefetch_bucket_size": 9 * hidden * hidden // 10,
    }
    return filled.get(field)


def _auto_line(doc: Document, path: tuple[str, ...], field: str) -> tuple[str, SourceRef]:
    flag = "--" + field.replace("_", "-")  # the check's flag of the layout field (cli/common.py)
    return f"{AUTO!r} is filled by the HF Trainer: give {flag}", doc.ref(path)


def _older_bf16(data: dict[str, Any]) -> dict[str, Any]:
    """precision bf16 where the older section name `bfloat16` enables it and `bf16` is absent
    (runtime/precision_config.py get_bfloat16_config)."""
    found, value = _at(data, ("bfloat16", ENABLED))
    return {"precision": "bf16"} if "bf16" not in data and found and value is True else {}


def _precision_line(doc: Document) -> tuple[str, SourceRef]:
    """Why a file that enables no 16-bit section has no precision the check can price."""
    for section in PRECISION_SECTIONS:
        found, value = _at(doc.data, (section, ENABLED))
        if found and value == AUTO:
            return _auto_line(doc, (section, ENABLED), "precision")
    return (
        "no bf16 or fp16 section enabled: DeepSpeed trains in fp32, which parplan does not "
        f"price (its precisions: {', '.join(CHOICES['precision'])}); give --precision to price "
        "another",
        doc.ref(),
    )


def _refuse_offload(doc: Document) -> None:
    """An InputError naming ZeRO-Offload where the file moves optimizer states or parameters
    off the GPU: the cost model does not price it."""
    for name in OFFLOADS:
        path = (ZERO, name, "device")
        found, device = _at(doc.data, path)
        if found and read_choice(device, OFFLOAD_DEVICES, doc.ref(path)) != NOT_OFFLOADED:
            raise InputError(f"{name} to {device} is not priced by parplan", doc.ref(path))
    for switch, name in OFFLOAD_SWITCHES.items():
        found, value = _at(doc.data, (ZERO, switch))
        if found and value is True:
            where = doc.ref((ZERO, switch))
            raise InputError(f"{switch} ({name} to cpu) is not priced by parplan", where)


def _reduce_type(
    doc: Document, value: Any, read: dict[str, Any], rules: RuleSet | None
) -> dict[str, Any]:
    """The layout's grad_reduce_dtype of a communication_data_type `value`, for the ZeRO stage
    and precision `read` from the file (a stage 0, bf16 run where it names none): nothing where
    it is the default (what a layout that names no type writes)."""
    where = doc.ref(COMMUNICATION_TYPE)
    said = read_choice(value, COMMUNICATION_TYPES, where)
    stage, sixteen = read.get("zero_stage", 0), SIXTEEN_BIT[read.get("precision", "bf16")]
    if rules is None:
        from parplan_gen.rules.ruleset import load_rules

        rules = load_rules()
    env = {
        "train.backend": "deepspeed",
        "plan.zero_stage": stage,
        "plan.grad_reduce_dtype": "default",
    }
    default = named_formula(rules, GRADIENT_BYTES).evaluate(env)
    if TYPE_BYTES[said] == default and said in ("fp32", sixteen):
        return {}  # the layout's default
    if said == "fp16":
        raise InputError(
            f"fp16 gradients in a {sixteen} run: parplan prices fp32 or the run's 16-bit type",
            where,
        )
    return {"grad_reduce_dtype": said}


def _at(data: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    """(True, the value at `path`) when every section on the way is an object, else (False, None)."""
    node: Any = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _deepspeed_value(doc: Document, key: DeepSpeedKey, value: Any) -> dict[str, Any]:
    if key.field == OVERLAP:  # DeepSpeedZeroConfig.overlap_comm: Optional[bool]
        if value is None:
            return {}  # DeepSpeed's default for the stage (_overlap_default)
        if not isinstance(value, bool):
            raise InputError(f"{key.path[-1]} is true or false, not {value!r}", doc.ref(key.path))
        return {key.field: value}
    if key.field in CHOICES:  # the ZeRO stage: an int, not True, not 3.0
        return {key.field: read_choice(value, CHOICES[key.field], doc.ref(key.path))}
    if key.field is not None:
        if key.field in DS_SETTINGS and isinstance(value, float) and value.is_integer():
            value = int(value)  # DeepSpeedZeroConfig's int fields take 5e8 (pydantic, lax)
        if key.field in DS_SETTINGS and value == 0 and not isinstance(value, bool):
            raise InputError(
                f"0 turns off what {key.path[-1]} sizes (DeepSpeed takes it: no prefetching, or "
                "no parameter kept gathered between its uses), which parplan does not price",
                doc.ref(key.path),
            )
        problem = size_problem(key.field, value)
        if problem:
            raise InputError(problem, doc.ref(key.path))
        return {key.field: value}
    for said, (field, setting) in key.means:  # the same type: `true` is no 1, 1 no `true`
        if type(value) is type(said) and value == said:
            return {field: setting}
    return {}
