"""Typed access to one Hugging Face config dict (`ConfigReader`): required and optional
integers, booleans and lists under the field names (and aliases) of a `transformers` config
class, each bounded, activation names mapped to an MLP kind, per-layer sliding-window flags,
and errors that point at the key in its file. The per-family readers are in `hf_config`.
"""

from __future__ import annotations

from typing import Any

from parplan_gen.inputs.errors import InputError, SourceRef, shown_value
from parplan_gen.inputs.key_path import KeyPath, format_path
from parplan_gen.inputs.source import Document
from parplan_gen.models.transformer_shape import MAX_LAYERS, MAX_WIDTH, MlpKind

_GELUS = frozenset(
    {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate"}
)


LAYER_KEYS = frozenset({"num_hidden_layers", "n_layer", "num_layers", "n_layers"})


class ConfigReader:
    """Typed access to one config dict, with errors that point into its file."""

    def __init__(self, data: dict[str, Any], doc: Document | None, where: KeyPath, name: str):
        self.data, self.doc, self.prefix, self.name = data, doc, where, name
        self.model_type = str(data.get("model_type"))

    def ref(self, *path: str | int) -> SourceRef:
        full = (*self.prefix, *path)
        if self.doc is None:
            return SourceRef(self.name, path=format_path(full))
        return self.doc.ref(full)

    def fail(self, key: str | None, message: str, *item: int) -> InputError:
        """An InputError at `key` (at its list item `item`, when given), or at the config."""
        return InputError(message, self.ref(key, *item) if key else self.ref())

    def first(self, keys: tuple[str, ...]) -> tuple[str, Any] | None:
        """The first of `keys` present and not null (null means "use the default", as in HF),
        with its value; None: none of them."""
        for key in keys:
            if self.data.get(key) is not None:
                return key, self.data[key]
        return None

    def req_int(self, *keys: str) -> int:
        """A required positive integer under the first of `keys` present (aliases after it)."""
        found = self.first(keys)
        if found is None:
            also = f" (or {', '.join(repr(k) for k in keys[1:])})" if keys[1:] else ""
            raise self.fail(
                None, f"missing required field '{keys[0]}'{also} for model_type '{self.model_type}'"
            )
        key, value = found
        if self._int(key, value) == 0:
            raise self.fail(key, f"'{key}' must be a positive integer, not 0")
        return value

    def opt_int(self, key: str, default: int) -> int:
        """An optional integer; `default` is the config class's value."""
        found = self.first((key,))
        return default if found is None else self._int(*found)

    def _int(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(
                key, f"'{key}' must be a non-negative integer, not {shown_value(value)}"
            )
        limit = MAX_LAYERS if key in LAYER_KEYS else MAX_WIDTH
        if value > limit:  # per-layer tables and searches are sized by these numbers
            raise self.fail(key, f"'{key}' is {shown_value(value)}; parplan reads at most {limit}")
        return value

    def opt_bool(self, key: str, default: bool) -> bool:
        """An optional boolean; `default` is the config class's value."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"'{key}' must be true or false, not {value!r}")
        return value

    def opt_list(self, key: str) -> list[Any] | None:
        """An optional list (None when absent or null)."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, list):
            raise self.fail(key, f"'{key}' must be a list, not {type(value).__name__}")
        return value

    def layer_indices(self, key: str) -> frozenset[int]:
        """An optional list of 0-based layer indices (empty when absent or null)."""
        indices = self.opt_list(key) or []
        for i, value in enumerate(indices):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_LAYERS:
                message = f"'{key}[{i}]' must be a layer index (0 to {MAX_LAYERS - 1})"
                raise self.fail(key, f"{message}, not {shown_value(value)}", i)
        return frozenset(indices)

    def head_dim(self, hidden: int, heads: int, default: int | None = None) -> int:
        """`head_dim` when given, else `default`, else hidden // heads (which must divide)."""
        if self.data.get("head_dim") is not None or default is not None:
            return self.opt_int("head_dim", default or 0)
        if hidden % heads:
            raise self.fail(None, f"hidden_size({hidden}) % num_attention_heads({heads}) != 0")
        return hidden // heads

    def mlp_kind(self, keys: tuple[str, ...], default: str, *, gated: bool) -> MlpKind:
        """Map the activation name to an MLP kind (gated families: silu->swiglu, gelu->geglu)."""
        found = self.first(keys)
        key, act = found if found else (keys[0] if keys else None, default)
        if not isinstance(act, str):
            raise self.fail(key, f"'{key}' must be a string, not {act!r}")
        if gated and act in ("silu", "swish"):
            return "swiglu"
        if act in _GELUS:
            return "geglu" if gated else "gelu"
        if not gated and act == "relu":
            return "relu"
        if not gated and act == "relu2":
            return "squared_relu"
        kind = "gated " if gated else ""
        raise self.fail(key, f"activation '{act}' is not supported in a {kind}MLP")

    def refuse(self, key: str, value: Any, why: str) -> None:
        """Refuse a feature ModelSpec cannot express when `key` equals `value`."""
        if key in self.data and self.data[key] == value:
            raise self.fail(key, f"'{key}: {value}' is not supported: {why}")

    def window_layers(self, num_layers: int, default: list[bool]) -> tuple[bool, ...]:
        """Per-layer sliding flags from `layer_types` when given, else `default`."""
        types = self.opt_list("layer_types")
        if types is None:
            return tuple(default)
        if len(types) != num_layers:
            raise self.fail("layer_types", f"has {len(types)} entries; num_layers is {num_layers}")
        known = {"sliding_attention": True, "full_attention": False}
        for i, value in enumerate(types):
            if not isinstance(value, str) or value not in known:
                use = " or ".join(map(repr, known))
                message = f"layer type {shown_value(value)} is not supported (use {use})"
                raise self.fail("layer_types", message, i)
        return tuple(known[t] for t in types)
