"""Built-in models, shipped as data in `parplan_gen/data/models/` (one YAML file per model).

A transformer preset is a Hugging Face config.json in YAML clothing plus where its numbers come
from, and goes through the same importer as a user's config.json:

    source: "paper / model card, table"        # required
    published: {total_params_b: 8.03, active_params_b: ..., source: "..."}   # optional
    config: {model_type: llama, hidden_size: 4096, ...}                       # HF field names

A graph preset (e.g. `resnet-50`) is a native graph file (`nodes`, `edges`). Files are read with
importlib.resources, so presets work from an installed wheel as well as from a checkout.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib.resources import files
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.errors import InputError
from parplan_gen.graph import ModelGraph, graph_from_document
from parplan_gen.hf_config import spec_from_hf_dict
from parplan_gen.model_spec import ModelSpec
from parplan_gen.source import Document, parse_document
from parplan_gen.validation import validate

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


@lru_cache(maxsize=1)
def _documents() -> dict[str, Document]:
    """Every shipped model file, parsed once, by preset name (the file's stem)."""
    folder = files("parplan_gen") / "data" / "models"
    docs: dict[str, Document] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        stem, dot, suffix = entry.name.rpartition(".")
        if not entry.is_file() or not dot or f".{suffix}" not in _SUFFIXES:
            continue
        kind = "json" if suffix == "json" else "yaml"
        text = entry.read_text(encoding="utf-8")
        docs[stem] = parse_document(text, f"parplan_gen/data/models/{entry.name}", kind)
    return docs


def _is_graph(doc: Document) -> bool:
    return isinstance(doc.data, dict) and "nodes" in doc.data


def preset_names() -> tuple[str, ...]:
    """Names of the built-in transformer presets, sorted."""
    return tuple(name for name, doc in _documents().items() if not _is_graph(doc))


def graph_preset_names() -> tuple[str, ...]:
    """Names of the built-in native op graphs (e.g. `resnet-50`), sorted."""
    return tuple(name for name, doc in _documents().items() if _is_graph(doc))


def _document(name: str, graph: bool) -> Document:
    doc = _documents().get(name)
    if doc is None or _is_graph(doc) != graph:
        known = graph_preset_names() if graph else preset_names()
        hint = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        did_you_mean = f"; did you mean '{hint[0]}'?" if hint else ""
        kind = "graph preset" if graph else "model preset"
        raise InputError(f"unknown {kind} '{name}'{did_you_mean} (`parplan models` lists them)")
    return doc


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
