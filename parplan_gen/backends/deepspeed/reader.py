"""Reads a DeepSpeed ds_config.json back (`parplan check --from-deepspeed FILE`): the
`deepspeed` section of mapping.yaml beside this file read backwards (render/mapping_inverse.py),
the same entries ds_config.json is written from, so that reading back a written file gives the
layout it was written for. Every number is parsed strictly (ASCII digits, bounded by the size
limits of `layout`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parplan_gen.cost.layout import size_problem
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.source import Document, load_document
from parplan_gen.render.mapping_inverse import CHOICES, DeepSpeedKey, deepspeed_keys, read_choice
from parplan_gen.render.template_env import Templates

HF_AUTO_HINT = " (the HF Trainer fills 'auto'; give the value as a flag)"


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
    for key in deepspeed_keys(Templates.at(templates_dir).mapping()):
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
