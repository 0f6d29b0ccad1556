"""Reads an accelerate_config.yaml back (`parplan check --from-accelerate FILE`) as Accelerate
1.16 reads it: `accelerate launch --config_file FILE` loads it with ClusterConfig.from_yaml_file
(commands/config/config_args.py), which refuses a key it does not know, and
_validate_launch_command (commands/launch.py) gives every key the file leaves out the launch
argument's default.

The layout's own keys are the `accelerate` section of mapping.yaml beside this file, read
backwards (the same entries accelerate_config.yaml is written from): num_processes (the world
size, which must be the check's GPUs), mixed_precision (the precision; `no`, fp32, is left to
--precision), the parallelism config's dp_shard / tp / cp sizes (none at all: FSDP2 over every
process) and fsdp_activation_checkpointing (recompute full, else none). The sharding is FSDP2's,
ZeRO-3. Every other key is one of keys.yaml's beside this file: a key whose value the estimate
assumes (`priced`: another value is refused, with why), a key that changes nothing the estimate
prices (`no_effect`, counted by group), or else `ignored`, named by the check's text view. The
file holds no batch: the micro-batch is left to --mbs (`UNFILLED`), the global batch to
--global-batch, the sequence length to --seq-len (the model's by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.backends.accelerate.capabilities import FSDP2
from parplan_gen.cost.layout import DEFAULT_FSDP_RESHARD, NEVER_RESHARD, size_problem
from parplan_gen.inputs.errors import InputError, SourceRef, shown_value
from parplan_gen.inputs.source import Document, load_mapping_document
from parplan_gen.inputs.validation import validated_file
from parplan_gen.render.mapping import LoadedMapping
from parplan_gen.render.mapping_inverse import CHOICES, UNFILLED, layout_field, read_choice

KEYS_FILE = Path(__file__).with_name("keys.yaml")
SECTIONS = ("fsdp_config", "parallelism_config")  # read key by key (`section.key`)
PARALLELISM = "parallelism_config"
# The mapping's canonical keys, besides plan.<Layout field>, that the reader takes back.
WORLD_SIZE, RECOMPUTE, PRECISION, RESHARD = (
    "plan.world_size",
    "plan.recompute_full",
    "accelerate.mixed_precision",
    "accelerate.reshard_after_forward",
)
# ClusterConfig.mixed_precision values (utils/dataclasses.py PrecisionType) and what each is: `no`
# (fp32) is no precision parplan prices.
NO_MIXED_PRECISION = "no"
# How Accelerate reads a switch (utils/environment.py str_to_bool, after the launcher's
# str(value).lower()): these spellings are true, and false.
TRUE_WORDS, FALSE_WORDS = (
    ("y", "yes", "t", "true", "on", "1"),
    ("n", "no", "f", "false", "off", "0"),
)
Scalar = bool | int | float | str


class Priced(BaseModel):
    """A key whose value the estimate assumes (keys.yaml `priced`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1)
    value: Scalar
    default: Scalar | None  # None: the file must say it
    why: str = Field(min_length=1)
    source: str = Field(min_length=1)


class KeyGroup(BaseModel):
    """Keys of one kind, with where Accelerate reads them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str = Field("", description="Its name in the check's line (no_effect only).")
    source: str = Field(min_length=1)
    keys: tuple[str, ...] = Field(min_length=1)


class AccelerateKeys(BaseModel):
    """keys.yaml: what the check makes of every key of an accelerate_config.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str = Field(min_length=1)
    accepted: KeyGroup
    priced: tuple[Priced, ...] = Field(min_length=1)
    no_effect: tuple[KeyGroup, ...]


@cache
def accelerate_keys() -> AccelerateKeys:
    """keys.yaml beside this module, validated."""
    return validated_file(KEYS_FILE, AccelerateKeys)


@dataclass(frozen=True)
class AccelerateReading:
    """What an accelerate_config.yaml says: layout fields (with UNFILLED: what the flags must
    give), and the keys beside the layout."""

    values: dict[str, Any]
    no_effect: dict[str, tuple[str, ...]] = field(default_factory=dict)  # by keys.yaml group
    ignored: tuple[str, ...] = ()  # read by Accelerate, not by the estimate


def accelerate_values(path: str | Path, mapping: LoadedMapping, *, num_gpus: int) -> dict[str, Any]:
    """Layout fields (and UNFILLED) of an accelerate_config.yaml for a cluster of `num_gpus`."""
    return accelerate_reading(path, mapping, num_gpus=num_gpus).values


def accelerate_reading(
    path: str | Path, mapping: LoadedMapping, *, num_gpus: int
) -> AccelerateReading:
    """The whole reading of an accelerate_config.yaml (module docstring)."""
    doc = load_mapping_document(str(path), "an Accelerate config is a YAML mapping")
    said = _keys(doc)
    keys = accelerate_keys()
    for priced in keys.priced:
        _check_priced(doc, said, priced)
    values, read = _layout(doc, said, mapping, num_gpus)
    read |= {p.key for p in keys.priced}
    no_effect = {
        g.group: found for g in keys.no_effect if (found := tuple(k for k in g.keys if k in said))
    }
    read |= {k for names in no_effect.values() for k in names}
    ignored = tuple(k for k in said if k not in read)
    return AccelerateReading(values, no_effect, ignored)


def _keys(doc: Document) -> dict[str, Any]:
    """{key or `section.key`: value} of the file, in its order; a top-level key Accelerate does
    not know is refused as ClusterConfig.from_yaml_file refuses it."""
    accepted = accelerate_keys().accepted.keys
    said: dict[str, Any] = {}
    for key, value in doc.data.items():
        if key not in accepted:
            raise InputError(
                "no key of an Accelerate config (ClusterConfig.from_yaml_file refuses unknown "
                "keys)",
                doc.ref((key,)),
            )
        if key in SECTIONS and value:
            if not isinstance(value, dict):
                raise InputError(f"{key} is a mapping of keys", doc.ref((key,)))
            said |= {f"{key}.{name}": item for name, item in value.items()}
        elif key not in SECTIONS:
            said[key] = value
    return said


def _where(doc: Document, key: str) -> SourceRef:
    return doc.ref(tuple(key.split(".")))


def _check_priced(doc: Document, said: dict[str, Any], priced: Priced) -> None:
    """An InputError unless the file says (or leaves to its default) the value priced."""
    if priced.key not in said and priced.default is None:
        raise InputError(f"no {priced.key}: Accelerate needs it", doc.ref())
    value = said.get(priced.key, priced.default)
    if _same(value, priced.value):
        return
    why = f"is not priced: {priced.why} (parplan prices {shown_value(priced.value)})"
    if priced.key in said:
        raise InputError(f"{shown_value(value)} {why}", _where(doc, priced.key))
    raise InputError(
        f"{priced.key} left out: Accelerate's default {shown_value(value)} {why}", doc.ref()
    )


def _same(value: Any, expected: Scalar) -> bool:
    """Whether Accelerate reads `value` as `expected`: the launcher passes every value on as
    text (utils/launch.py prepare_multi_gpu_env: str(...).lower()); a switch is str_to_bool's."""
    if isinstance(expected, bool):
        words = TRUE_WORDS if expected else FALSE_WORDS
        return str(value).lower() in words
    return str(value).lower() == str(expected).lower()


def _layout(
    doc: Document, said: dict[str, Any], mapping: LoadedMapping, num_gpus: int
) -> tuple[dict[str, Any], set[str]]:
    """The layout fields of the mapping's keys, and those keys."""
    zero_stage, distributed_optimizer = FSDP2
    values: dict[str, Any] = {
        "zero_stage": zero_stage,
        "distributed_optimizer": distributed_optimizer,
    }
    unfilled: dict[str, tuple[str, SourceRef]] = {
        "mbs": (
            "accelerate_config.yaml holds no micro-batch (the training script's per-device "
            "batch): give --mbs",
            doc.ref(),
        )
    }
    sizes: dict[str, str] = {}  # Layout field -> key of the parallelism config
    others: dict[str, str] = {}  # canonical key -> config key
    for version in mapping.data.accelerate.values():
        for entry in version.config:
            found = layout_field(entry.key)
            if found is not None:
                sizes[found] = entry.name
            elif entry.key in (WORLD_SIZE, RECOMPUTE, PRECISION, RESHARD):
                others[entry.key] = entry.name
    processes = _number(doc, said, others[WORLD_SIZE], "dp", None)
    if processes != num_gpus:
        raise InputError(
            f"{processes} processes: the check's cluster has {num_gpus} GPUs",
            _where(doc, others[WORLD_SIZE]),
        )
    if any(key.startswith(PARALLELISM + ".") for key in said):  # launch defaults: 1
        values |= {name: _number(doc, said, key, name, 1) for name, key in sizes.items()}
        total = values.get("dp", 1) * values.get("tp", 1) * values.get("cp", 1)
        if total != processes:
            raise InputError(
                f"the parallelism sizes make {total} processes, not num_processes {processes} "
                "(parallelism_config.py ParallelismConfig._validate_accelerator)",
                doc.ref((PARALLELISM,)),
            )
    else:  # no parallelism config: FSDP2 over every process (utils/fsdp_utils.py: mesh None)
        values |= {"dp": processes, "tp": 1, "cp": 1}
    values["recompute"] = "full" if _switch(doc, said, others[RECOMPUTE], False) else "none"
    # FullyShardedDataParallelPlugin.reshard_after_forward (default True): false keeps every
    # unit gathered from its forward to its backward (Layout.fsdp_reshard `never`)
    kept = not _switch(doc, said, others[RESHARD], True)
    values["fsdp_reshard"] = NEVER_RESHARD if kept else DEFAULT_FSDP_RESHARD
    precision = said.get(others[PRECISION], NO_MIXED_PRECISION)
    if precision in (NO_MIXED_PRECISION, False):  # `no` unquoted is false to YAML 1.1 readers
        unfilled["precision"] = (
            "mixed_precision no: Accelerate trains in fp32, which parplan does not price (its "
            f"precisions: {', '.join(CHOICES['precision'])}); give --precision to price another",
            _where(doc, others[PRECISION]) if others[PRECISION] in said else doc.ref(),
        )
    else:
        where = _where(doc, others[PRECISION])
        values["precision"] = read_choice(precision, CHOICES["precision"], where)
    return values | {UNFILLED: unfilled}, {*sizes.values(), *others.values()}


def _switch(doc: Document, said: dict[str, Any], key: str, default: bool) -> bool:
    """The switch at `key` as Accelerate reads it (`default` where the file leaves it out); an
    InputError for a value that is no switch."""
    value = said.get(key, default)
    if _same(value, True):
        return True
    if _same(value, False):
        return False
    raise InputError(f"{shown_value(value)} is no switch", _where(doc, key))


def _number(doc: Document, said: dict[str, Any], key: str, field_: str, default: int | None) -> int:
    """The whole number at `key` (`default` where the file leaves it out; None: required)."""
    if key not in said and default is None:
        raise InputError(f"no {key}: the check needs the world size", doc.ref())
    value = said.get(key, default)
    problem = size_problem(field_, value)
    if problem or not isinstance(value, int):
        raise InputError(problem or "not a whole number", _where(doc, key))
    return value
