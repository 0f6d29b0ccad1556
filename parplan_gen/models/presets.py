"""Built-in models, shipped as data in `parplan_gen/data/models/` (one YAML file per model).

A transformer preset is a Hugging Face config.json in YAML clothing plus where its numbers come
from, and goes through the same importer as a user's config.json:

    source: "paper / model card, table"        # required
    published: {total_params_b: 8.03, active_params_b: ..., source: "..."}   # optional
    config: {model_type: llama, hidden_size: 4096, ...}                       # HF field names

A graph preset (e.g. `resnet-50`) is a native graph file (`nodes`, `edges`) in
`parplan_gen/data/graphs/`. Files are read with importlib.resources, so presets work from an
installed wheel as well as from a checkout; only the file asked for is parsed.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.inputs.errors import InputError, did_you_mean
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import Document, parse_document
from parplan_gen.inputs.validation import validate
from parplan_gen.models.graph import ModelGraph, graph_from_document
from parplan_gen.models.hf_config import spec_from_hf_dict
from parplan_gen.models.transformer import ModelSpec

_SUFFIXES = (".yaml", ".yml", ".json")


class Published(BaseModel):
    """Parameter counts printed by the preset's source (billions), to check the spec against."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_params_b: int | float = Field(gt=0, description="Total parameters, billions, as printed.")
    active_params_b: int | float | None = Field(
        default=None, gt=0, description="Parameters used per token (MoE), billions, as printed."
    )
    active_counts_embedding: bool = Field(
        default=True,
        description="Whether the printed active count includes the input embedding table "
        "(Mixtral, Qwen: yes; DeepSeek-V3, gpt-oss: no). See ModelSpec.active_params.",
    )
    source: str = Field(min_length=1, description="Where the printed numbers are.")


class _PresetFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1, description="Paper or model card (and table) of the shape.")
    published: Published | None = Field(default=None, description="Printed parameter counts.")
    config: dict[str, Any] = Field(description="A Hugging Face config.json, as a mapping.")


class Preset(BaseModel):
    """A built-in transformer: its spec and the sources of its numbers."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: str
    published: Published | None
    spec: ModelSpec


def _folder(graph: bool) -> Any:
    return files("parplan_gen") / "data" / ("graphs" if graph else "models")


@lru_cache(maxsize=2)
def _entries(graph: bool) -> dict[str, Any]:
    """Shipped model files by preset name (the file's stem), without parsing them."""
    entries = {}
    for entry in sorted(_folder(graph).iterdir(), key=lambda e: e.name):
        stem, dot, suffix = entry.name.rpartition(".")
        if entry.is_file() and dot and f".{suffix}" in _SUFFIXES:
            entries[stem] = entry
    return entries


def preset_names() -> tuple[str, ...]:
    """Names of the built-in transformer presets, sorted."""
    return tuple(_entries(graph=False))


def graph_preset_names() -> tuple[str, ...]:
    """Names of the built-in native op graphs (e.g. `resnet-50`), sorted."""
    return tuple(_entries(graph=True))


@lru_cache(maxsize=64)
def _document(name: str, graph: bool) -> Document:
    """The parsed file of preset `name` (only that file is read)."""
    entry = _entries(graph).get(name)
    if entry is None:
        known = graph_preset_names() if graph else preset_names()
        hint = did_you_mean(name, known, cutoff=0.5)
        kind = "graph preset" if graph else "model preset"
        raise InputError(f"unknown {kind} '{printable(name)}'{hint} (`parplan models` lists them)")
    kind = "json" if entry.name.endswith(".json") else "yaml"
    folder = "graphs" if graph else "models"
    text = entry.read_text(encoding="utf-8")
    return parse_document(text, f"parplan_gen/data/{folder}/{entry.name}", kind)


@lru_cache(maxsize=64)
def preset_info(name: str) -> Preset:
    """The transformer preset `name` with its sources (InputError if there is none)."""
    doc = _document(name, graph=False)
    entry = validate(_PresetFile, doc.data, doc)
    spec = spec_from_hf_dict(entry.config, doc, name=name, key_path=("config",))
    return Preset(name=name, source=entry.source, published=entry.published, spec=spec)


def load_preset(name: str) -> ModelSpec:
    """The ModelSpec of the transformer preset `name` (InputError, with a suggestion, if none)."""
    return preset_info(name).spec


def load_graph_preset(name: str) -> ModelGraph:
    """The native op graph shipped as `name` (e.g. `resnet-50`)."""
    return graph_from_document(_document(name, graph=True))
