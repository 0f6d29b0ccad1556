"""What `parplan check --from-deepspeed` makes of the keys of a ds_config.json beside its layout
(keys.yaml beside this file, read in DeepSpeed v0.19.8): a key whose value the estimate assumes
is refused where the file says, or leaves to DeepSpeed's default, another (`priced`, judged at
the ZeRO stages that read it), an optimizer other than Adam is refused, the keys that change
nothing the estimate prices are counted by group (`no_effect`), and every other key is named as
ignored. The layout's own keys are the mapping's (reader.py); ZeRO-Offload is reader.py's to
refuse.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.source import Document
from parplan_gen.inputs.validation import validated_file

KEYS_FILE = Path(__file__).with_name("keys.yaml")
OPTIMIZER_TYPE = "optimizer.type"
Scalar = StrictBool | StrictInt | StrictStr


class PricedKey(BaseModel):
    """A key whose value the estimate assumes (keys.yaml `priced`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1)
    value: Scalar
    defaults: dict[int, Scalar] = Field(description="DeepSpeed's default, by ZeRO stage.")
    stages: tuple[int, ...] = Field(min_length=1, description="The ZeRO stages that read it.")
    stages_with_pipeline: tuple[int, ...] = Field(
        description="The stages that read it in a file that runs DeepSpeed's pipeline engine."
    )
    why: str = Field(min_length=1)
    source: str = Field(min_length=1)


class Names(BaseModel):
    """Names, with where DeepSpeed reads them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: tuple[str, ...] = Field(min_length=1)
    source: str = Field(min_length=1)


class KeyGroup(BaseModel):
    """Keys of one kind: each key, and every key under it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str = Field(min_length=1)
    source: str = Field(min_length=1)
    keys: tuple[str, ...] = Field(min_length=1)


class DeepSpeedKeys(BaseModel):
    """keys.yaml: what the check makes of the keys of a ds_config.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str = Field(min_length=1)
    priced: tuple[PricedKey, ...] = Field(min_length=1)
    adam_optimizers: Names
    no_effect: tuple[KeyGroup, ...]


@cache
def deepspeed_keys() -> DeepSpeedKeys:
    """keys.yaml beside this module, validated."""
    return validated_file(KEYS_FILE, DeepSpeedKeys)


@dataclass(frozen=True)
class KeysBeside:
    """The keys of a ds_config.json beside its layout: counted by keys.yaml group, or ignored."""

    no_effect: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()


def leaves(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a JSON object, in its order (a list is a leaf). A
    key with a dot of its own is bracketed, `[a.b]`: DeepSpeed reads it as no nested key, and
    neither may it pass for one here."""
    for key, value in data.items():
        dotted = prefix + (f"[{key}]" if "." in key else key)
        if isinstance(value, Mapping) and value:
            yield from leaves(value, dotted + ".")
        else:
            yield dotted, value


def check_keys(
    doc: Document, stage: int, layout_keys: set[str], *, pipelined: bool = False
) -> KeysBeside:
    """Refuse what the estimate does not price in the file at ZeRO `stage`, with or without a
    pipeline (module docstring); the other keys, those of `layout_keys` (the layout's own, read
    by reader.py) apart."""
    keys = deepspeed_keys()
    said = dict(leaves(doc.data))
    for priced in keys.priced:
        judged = priced.stages_with_pipeline if pipelined else priced.stages
        if stage in judged:
            _check_priced(doc, said, priced, stage)
    _check_optimizer(doc, said, keys.adam_optimizers)
    read = layout_keys | {p.key for p in keys.priced} | {OPTIMIZER_TYPE}
    no_effect: dict[str, tuple[str, ...]] = {}
    for group in keys.no_effect:
        found = tuple(k for k in said if k not in read and _under(k, group.keys))
        if found:
            no_effect[group.group] = found
            read |= set(found)
    return KeysBeside(no_effect, tuple(k for k in said if k not in read))


def _under(key: str, names: tuple[str, ...]) -> bool:
    return any(key == name or key.startswith(name + ".") for name in names)


def _check_priced(doc: Document, said: dict[str, Any], priced: PricedKey, stage: int) -> None:
    value = said.get(priced.key)
    if value is None:  # left out, or null: DeepSpeed's default (config.py Optional fields)
        value = priced.defaults.get(stage)
    if value is None or _same(value, priced.value):
        return
    why = f"is not priced: {priced.why} (parplan prices {_json(priced.value)})"
    if said.get(priced.key) is not None:
        raise InputError(f"{_json(value)} {why}", doc.ref(tuple(priced.key.split("."))))
    raise InputError(
        f"{priced.key} left out: DeepSpeed's default at ZeRO-{stage}, {_json(value)}, {why}",
        doc.ref(),
    )


def _same(value: Any, expected: Scalar) -> bool:
    """Whether DeepSpeed reads `value` as `expected`: numbers by value (its int fields take 1e9,
    a float), anything else, a switch included, only as itself (`1` is no `true`)."""
    if isinstance(expected, int) and not isinstance(expected, bool):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and value == expected
    return type(value) is type(expected) and value == expected


def _json(value: Any) -> str:
    """`value` as the file spells it (JSON: true, "Lamb"), at most 60 characters."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_optimizer(doc: Document, said: dict[str, Any], adam: Names) -> None:
    if OPTIMIZER_TYPE not in said:
        return  # the client's optimizer (deepspeed.initialize(optimizer=...)), taken as Adam
    name = said[OPTIMIZER_TYPE]
    if isinstance(name, str) and name.lower() in adam.names:
        return
    raise InputError(
        f"{_json(name)} is not priced: the estimate prices Adam's two moments "
        f"(rules/cost/memory.yaml optimizer_bytes; priced: {', '.join(adam.names)})",
        doc.ref(tuple(OPTIMIZER_TYPE.split("."))),
    )
