"""Turn pydantic validation failures into one clear, positioned error.

Every input model in the package validates plain data parsed from a `Document`; this module maps
pydantic's error location back to the key path in that document so the message reads
`file.yaml:LINE:COL: key.path: what is wrong (what would be valid)`.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from parplan_gen.inputs.errors import InputError, shown_value
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.number_text import number_problem
from parplan_gen.inputs.source import Document, parse_document

M = TypeVar("M", bound=BaseModel)


def validate(
    model: type[M],
    data: Any,
    doc: Document,
    path: KeyPath = (),
    *,
    error: type[InputError] = InputError,
    strict: bool = False,
) -> M:
    """Validate `data` (found at `path` in `doc`) as `model`, or raise `error` at the bad key.
    `strict`: every value of `model` and of the models it nests has its JSON type exactly
    (pydantic's strict mode over the data as JSON: `true`, `8.0` or `"8"` is no integer, `"8"`
    no number, while 8 is a float and a list a tuple); for documents parplan writes itself."""
    try:
        if strict:
            return model.model_validate_json(json.dumps(data, allow_nan=False), strict=True)
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, model, data, doc, path, error) from None


def validated_file(path: Path, model: type[M]) -> M:
    """A shipped YAML data file (one beside a module: a backend's reader data), parsed and
    validated as `model`; its errors name the file and line."""
    doc = parse_document(path.read_text(encoding="utf-8"), str(path))
    return validate(model, doc.data, doc)


def _first_error(
    exc: ValidationError,
    model: type[BaseModel],
    data: Any,
    doc: Document,
    path: KeyPath,
    error: type[InputError],
) -> InputError:
    _where, first = all_errors(exc, model, data, doc, path, error=error)[0]  # the most telling
    return first


def all_errors(
    exc: ValidationError,
    model: type[BaseModel],
    data: Any,
    doc: Document,
    path: KeyPath = (),
    *,
    error: type[InputError] = InputError,
) -> list[tuple[KeyPath, InputError]]:
    """Every problem of a failed validation: one per key path (relative to `path`), most telling
    first. `parplan rules check` reports them all; `validate` raises the first."""
    details = exc.errors(include_url=False)
    # Prefer the most telling complaint: an unknown key (often a typo of a missing one), then a
    # wrong value of a key that is there (deepest first), then a missing key.
    rank = {"extra_forbidden": 0, "missing": 2}
    details.sort(key=lambda d: (rank.get(d["type"], 1), -len(d["loc"])))
    grouped: dict[KeyPath, list[ErrorDetails]] = {}
    for detail in details:
        grouped.setdefault(_data_path(data, tuple(detail["loc"])), []).append(detail)
    for key_path in _misspelled(grouped):
        del grouped[key_path]
    out = []
    for key_path, group in grouped.items():
        message = _union_message(group) or _message(group[0], model, data, key_path)
        out.append((key_path, error(message, doc.ref((*path, *key_path)))))
    return out


def _misspelled(grouped: dict[KeyPath, list[ErrorDetails]]) -> list[KeyPath]:
    """Missing keys that an unknown key next to them is a misspelling of (reported once, as
    the unknown key with its "did you mean")."""
    unknown: dict[KeyPath, list[str]] = {}
    for key_path, group in grouped.items():
        if key_path and group[0]["type"] == "extra_forbidden":
            unknown.setdefault(key_path[:-1], []).append(str(key_path[-1]))
    return [
        key_path
        for key_path, group in grouped.items()
        if key_path
        and group[0]["type"] == "missing"
        and any(
            difflib.get_close_matches(extra, [str(key_path[-1])], n=1)
            for extra in unknown.get(key_path[:-1], [])
        )
    ]


_UNION_MEMBERS = {"bool": "true/false", "int": "a number", "float": "a number", "str": "a string"}


def _union_message(group: list[ErrorDetails]) -> str | None:
    """`expected a number or a string (got list)` when every member of a union refused it."""
    if len(group) < 2 or not all(d["loc"] for d in group):
        return None  # one complaint, or a model validator's own (its `loc` is empty)
    tags = [str(d["loc"][-1]) for d in group]  # a member's tag is a name, never an index
    if not all(tag in _UNION_MEMBERS for tag in tags):
        return None
    wanted = list(dict.fromkeys(_UNION_MEMBERS[tag] for tag in tags))
    text = ", ".join(wanted[:-1]) + f" or {wanted[-1]}"
    got = group[0].get("input")
    return f"expected {text} (got {_shown(got)})"


def _data_path(data: Any, loc: tuple[Any, ...]) -> KeyPath:
    """The longest prefix of pydantic's `loc` that exists in `data` (drops union-member tags)."""
    out: list[str | int] = []
    node = data
    for index, part in enumerate(loc):
        in_dict = isinstance(node, dict) and isinstance(part, str)
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if (in_dict and part in node) or in_list:
            node = node[part]
            out.append(part)
        elif in_dict and index == len(loc) - 1:
            out.append(part)  # a missing or extra key: point at it by name
            break
        # else a union member's tag (`ModelSpec`, `transformer`) before the key it is about
    return tuple(out)


def _message(detail: ErrorDetails, model: type[BaseModel], data: Any, key_path: KeyPath) -> str:
    kind = detail["type"]
    key = key_path[-1] if key_path else ""
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, detail["loc"][:-1])
        hint = difflib.get_close_matches(str(key), allowed, n=1)
        did_you_mean = f"; did you mean '{hint[0]}'?" if hint else ""
        return f"unknown key '{key}'{did_you_mean} (allowed: {', '.join(allowed)})"
    if kind == "missing":
        return f"missing required key '{key}'"
    got = detail.get("input")
    if kind == "value_error" and isinstance(got, (dict, list)):  # a model validator's own words
        return str(detail["msg"]).removeprefix("Value error, ")
    return f"{detail['msg']} (got {_shown(got)})"


def _shown(got: Any) -> str:
    """A refused value in a message: a mapping or list by its type, an integer no float holds
    by its magnitude (`10^400`: its digits would fill the line), anything else as Python
    shows it."""
    if isinstance(got, (dict, list)):
        return type(got).__name__
    if isinstance(got, int) and number_problem(got) is not None:
        return shown_value(got)
    return repr(got)


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the (nested) model at pydantic location `loc`, by following annotations."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            current = _inner_model(current)
            if isinstance(part, int):
                continue
        if (
            isinstance(current, type)
            and issubclass(current, BaseModel)
            and part in current.model_fields
        ):
            current = _inner_model(current.model_fields[part].annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside `list[X]`, `X | None`, `dict[str, X]`, or the annotation itself."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def check_choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    """An InputError unless `value` is one of `allowed` (a request's option, e.g. `objective`)."""
    if not any(value == a and type(value) is type(a) for a in allowed):
        shown = ", ".join(map(str, allowed))
        raise InputError(f"{name}: expected one of {shown}, got {shown_value(value)}")
