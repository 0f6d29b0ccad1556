"""Resolve the MODEL argument of the CLI: to a `ModelGraph` (analyze, propose, explain) or to
the model the cost model trains (estimate, plan, check): a transformer's `ModelSpec`, or for
any other model the `GraphModelSpec` summed from its op graph, whatever form it takes.

An existing file is read by its suffix:

* `.onnx`: an ONNX model (`onnx_import`, needs the `onnx` extra);
* `.yaml`, `.yml`, `.json`: a Hugging Face config when it has a top-level `model_type`
  (expanded into its per-layer op graph by `transformer_graph`), else a native graph file.

Anything else that is not a file must be a preset name (`parplan models`): a transformer preset
is expanded like a config, a graph preset (e.g. `resnet-50`) is its native graph; or a Hugging
Face model id (`org/name`), whose config.json is read from the local Hugging Face cache
(`hf_cache`), never downloaded.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from pathlib import Path

from parplan_gen.inputs.defaults import DEFAULT_SEQ_LEN
from parplan_gen.inputs.errors import MAX_HINT_CHARS, InputError, SourceRef
from parplan_gen.inputs.reading import not_regular_file
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import gc_paused, load_document
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.models.graph import MAX_GRAPH_BYTES, ModelGraph, graph_from_document
from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.hf_cache import cached_config, is_hub_id
from parplan_gen.models.hf_config import load_hf_config
from parplan_gen.models.kind import PER_LAYER_FIELDS
from parplan_gen.models.presets import (
    graph_preset_names,
    load_graph_preset,
    load_preset,
    preset_names,
)
from parplan_gen.models.transformer import ModelSpec
from parplan_gen.models.transformer_graph import model_graph

ONNX_SUFFIXES = (".onnx",)
DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")
# model.<field> of both kinds of model: the model facts of every plan (a kind's `facts()` gives
# its own; the other kind's are None).
MODEL_FACT_NAMES = tuple(
    dict.fromkeys(
        f"model.{name}"
        for name in (*ModelSpec.model_fields, *GraphModelSpec.model_fields)
        if name not in PER_LAYER_FIELDS
    )
)


def load_graph_for(
    path_or_name: str, *, batch_size: int = 1, seq_len: int = DEFAULT_SEQ_LEN
) -> ModelGraph:
    """The op graph of a model file or preset name.

    `batch_size` binds an ONNX model's dynamic batch dimension; `seq_len` is the sequence
    length of a transformer (config or preset). Native graphs carry their own numbers.
    """
    path = Path(path_or_name)
    if _is_file(path):
        return _load_file(path, batch_size=batch_size, seq_len=seq_len)
    if path_or_name in graph_preset_names():
        return load_graph_preset(path_or_name)
    if path_or_name in preset_names():
        return model_graph(load_preset(path_or_name), seq_len=seq_len)
    if _hub_id(path_or_name):
        return model_graph(_hub_model(path_or_name), seq_len=seq_len)
    raise _unknown(path_or_name)


def load_model(path_or_name: str) -> AnyModelSpec:
    """The model to train (a `kind.TrainedModel`): a transformer's ModelSpec (a preset name or
    a Hugging Face config.json), else the GraphModelSpec of the op graph (a graph file, an ONNX
    model read at batch 1, a graph preset such as `resnet-50`), which keeps its graph for the
    proposals."""
    path = Path(path_or_name)
    if _is_file(path) and path.suffix.lower() in DOCUMENT_SUFFIXES:
        found = _read_document(path)
        if isinstance(found, ModelSpec):
            return found
        return GraphModelSpec.from_graph(found, SourceRef(str(path)))
    if _is_file(path) or path_or_name in graph_preset_names():
        where = SourceRef(path_or_name)
        return GraphModelSpec.from_graph(load_graph_for(path_or_name, batch_size=1), where)
    if path_or_name in preset_names():
        return load_preset(path_or_name)
    if _hub_id(path_or_name):
        return _hub_model(path_or_name)
    raise _unknown(path_or_name)


def _hub_id(text: str) -> bool:
    """Whether `text` names a Hugging Face model (`org/name`) rather than a missing file: no
    model file suffix, and nothing at that path."""
    if not is_hub_id(text) or Path(text).suffix.lower() in (*DOCUMENT_SUFFIXES, *ONNX_SUFFIXES):
        return False
    try:
        return not os.path.lexists(text)
    except ValueError:  # a NUL: no file, and no model id either (is_hub_id refuses it)
        return False


def _hub_model(model_id: str) -> ModelSpec:
    """The transformer of a Hugging Face model id, from the local cache's config.json, named
    as the id names it (`meta-llama/Llama-3.1-8B` -> `Llama-3.1-8B`)."""
    return load_hf_config(cached_config(model_id), name=model_id.split("/", 1)[1])


def _is_file(path: Path) -> bool:
    """Whether `path` is a regular file; False too for a name no file can have (too long, a
    NUL), which `_unknown` then explains."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _load_file(path: Path, *, batch_size: int, seq_len: int) -> ModelGraph:
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        from parplan_gen.models.onnx_import import load_onnx_graph  # needs the optional extra

        return load_onnx_graph(path, batch_size=batch_size)
    if suffix not in DOCUMENT_SUFFIXES:
        known = ", ".join((*DOCUMENT_SUFFIXES, *ONNX_SUFFIXES))
        shown = printable(repr(path.suffix)) if suffix else "'(none)'"
        raise InputError(f"unknown model file type {shown}; expected {known}", SourceRef(str(path)))
    found = _read_document(path)
    return model_graph(found, seq_len=seq_len) if isinstance(found, ModelSpec) else found


def _read_document(path: Path) -> ModelSpec | ModelGraph:
    """A YAML/JSON model file: a Hugging Face config (it has a top-level `model_type`) or a
    native graph file."""
    with gc_paused():  # as in graph.load_graph: 100k small objects would trigger the cyclic GC
        doc = load_document(path, max_bytes=MAX_GRAPH_BYTES)
        if isinstance(doc.data, dict) and "model_type" in doc.data:
            return load_hf_config(path)
        return graph_from_document(doc)


def _unknown(path_or_name: str) -> InputError:
    """For what is no regular file: a "not a regular file" error (a folder, a pipe, a device:
    never opened), "file not found" for what looks like a path, else an unknown-name error."""
    path = Path(path_or_name)
    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except (OSError, ValueError) as exc:  # a loop of links, no permission; NUL, or too long
        if isinstance(exc, OSError) and exc.errno != errno.ENAMETOOLONG:
            return InputError(f"cannot read file: {exc.strerror}", SourceRef(path_or_name))
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        message = "is a folder; expected a model file or a preset name"
        return InputError(message, SourceRef(path_or_name))
    if mode is not None:
        return not_regular_file(path_or_name, mode)
    if path.suffix.lower() in (*DOCUMENT_SUFFIXES, *ONNX_SUFFIXES) or len(path.parts) > 1:
        return InputError("file not found", SourceRef(path_or_name))
    return InputError(
        f"not a file or known model name{_did_you_mean(path_or_name)} "
        "(`parplan models` lists the names)",
        SourceRef(path_or_name),
    )


def _did_you_mean(name: str) -> str:
    """A close preset name, compared without case (`ResNet-50` -> `resnet-50`)."""
    if len(name) > MAX_HINT_CHARS:  # no misspelling, and difflib's time grows with its length
        return ""
    known = {n.lower(): n for n in (*graph_preset_names(), *preset_names())}
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    return f"; did you mean '{known[close[0]]}'?" if close else ""
