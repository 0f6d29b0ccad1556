"""Load YAML and JSON documents safely into plain Python data, with source positions.

The fast path parses without positions (json, or ruamel's safe C loader); positions are computed
lazily, only when something needs to point at a line (an error, `rules list`). Nothing a
document says can construct an object: YAML tags are refused, aliases are bounded, and the
result holds only dict, list, str, int, float, bool and None.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from parplan_gen.errors import SourceError, SourceRef

MAX_FILE_BYTES = 64 * 1024 * 1024  # larger inputs are refused before parsing
MAX_VALUES = 2_000_000  # bounds alias ("billion laughs") expansion while copying the tree
MAX_DEPTH = 100  # YAML nesting limit, checked before the C loader (deep nesting crashes it)

KeyPath = tuple[str | int, ...]


def format_path(path: KeyPath) -> str:
    """`('nodes', 3, 'op')` -> `nodes[3].op`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class Document:
    """One parsed file: its plain data and a way to point at any key path in it."""

    def __init__(self, name: str, text: str, data: Any) -> None:
        self.name = name
        self.text = text
        self.data = data

    def ref(self, path: KeyPath = ()) -> SourceRef:
        """The position of `path` (or of its nearest ancestor that has one), found lazily."""
        key = tuple(path)
        return SourceRef.lazy(self.name, format_path(key), lambda: self._find(key))

    def _find(self, path: KeyPath) -> tuple[int | None, int | None]:
        positions = self._positions
        for cut in range(len(path), -1, -1):
            pos = positions.get(path[:cut])
            if pos is not None:
                return pos
        return None, None

    def error(self, path: KeyPath, message: str, cls: type[SourceError] = SourceError) -> Exception:
        """Build an error of class `cls` pointing at `path`."""
        return cls(message, self.ref(path))

    @cached_property
    def _positions(self) -> dict[KeyPath, tuple[int, int]]:
        try:
            return _event_positions(self.text, pure=False)
        except Exception:  # noqa: BLE001 - libyaml is stricter than YAML 1.2 in places
            try:
                return _event_positions(self.text, pure=True)
            except Exception:  # noqa: BLE001 - positions are best effort; the data parsed
                return {}


@dataclass
class _Frame:
    """A mapping or sequence being read: its key path and where the next child goes."""

    path: KeyPath
    is_map: bool
    key: str | None = None  # a mapping's current key, once read
    index: int = 0  # a sequence's next item


def _event_positions(text: str, pure: bool) -> dict[KeyPath, tuple[int, int]]:
    """1-based (line, column) of every mapping key and sequence item, from the parser's events
    (no document is built: libyaml's parser is ~50x faster than the round-trip loader)."""
    from ruamel.yaml.events import (
        AliasEvent,
        CollectionEndEvent,
        MappingStartEvent,
        ScalarEvent,
        SequenceStartEvent,
    )

    positions: dict[KeyPath, tuple[int, int]] = {(): (1, 1)}
    stack: list[_Frame] = []
    for event in _yaml("safe", pure).parse(text):
        if isinstance(event, CollectionEndEvent):
            stack.pop()
            continue
        if not isinstance(event, ScalarEvent | AliasEvent | MappingStartEvent | SequenceStartEvent):
            continue
        mark = (event.start_mark.line + 1, event.start_mark.column + 1)
        path: KeyPath = ()
        if stack:
            frame = stack[-1]
            if frame.is_map and frame.key is None:  # a key
                frame.key = str(getattr(event, "value", ""))
                positions.setdefault((*frame.path, frame.key), mark)
                if isinstance(event, MappingStartEvent | SequenceStartEvent):  # a complex key
                    stack.append(_Frame((*frame.path, "?"), isinstance(event, MappingStartEvent)))
                continue
            if frame.is_map:  # the value of the current key
                path, frame.key = (*frame.path, frame.key), None
            else:
                path = (*frame.path, frame.index)
                frame.index += 1
                positions.setdefault(path, mark)
        if isinstance(event, MappingStartEvent | SequenceStartEvent):
            stack.append(_Frame(path, isinstance(event, MappingStartEvent)))
    return positions


def _yaml(typ: str, pure: bool = False) -> Any:
    from ruamel.yaml import YAML

    loader = YAML(typ=typ, pure=pure)
    loader.allow_duplicate_keys = False
    return loader


def read_text(path: str | Path) -> str:
    """Read a UTF-8 text file, refusing missing, oversized and non-UTF-8 files."""
    p = Path(path)
    name = str(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise SourceError("file not found", SourceRef(name)) from None
    except OSError as exc:
        raise SourceError(f"cannot read file: {exc.strerror}", SourceRef(name)) from None
    if not p.is_file():
        raise SourceError("not a regular file", SourceRef(name))
    if size > MAX_FILE_BYTES:
        limit = MAX_FILE_BYTES // (1024 * 1024)
        raise SourceError(f"file is {size} bytes; the limit is {limit} MiB", SourceRef(name))
    raw = p.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SourceError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            SourceRef(name, line),
        ) from None


def load_document(path: str | Path) -> Document:
    """Read and parse a `.json`, `.yaml` or `.yml` file (anything else is parsed as YAML)."""
    text = read_text(path)
    kind = "json" if str(path).lower().endswith(".json") else "yaml"
    return parse_document(text, str(path), kind)


def parse_document(text: str, name: str, kind: str = "yaml") -> Document:
    """Parse `text` (named `name` in errors) as `kind` ("yaml" or "json")."""
    doc = Document(name, text, None)
    if kind == "json":
        doc.data = _parse_json(text, name)  # already plain: json has no tags and no aliases
    else:
        doc.data = _plain(_parse_yaml(text, name), doc)
    return doc


def _parse_json(text: str, name: str) -> Any:
    def no_constant(token: str) -> Any:
        raise ValueError(f"{token} is not valid JSON")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise ValueError(f"duplicate key {key!r}")
                seen.add(key)
        return out

    try:
        return json.loads(text, parse_constant=no_constant, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise SourceError(
            f"malformed JSON: {exc.msg}", SourceRef(name, exc.lineno, exc.colno)
        ) from None
    except ValueError as exc:
        raise SourceError(f"malformed JSON: {exc}", SourceRef(name)) from None
    except RecursionError:
        raise SourceError("malformed JSON: nested too deeply", SourceRef(name)) from None


def _parse_yaml(text: str, name: str) -> Any:
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        return _load_yaml(text, name)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or exc.context or "malformed YAML").strip()
        if "duplicate key" in problem or type(exc).__name__ == "DuplicateKeyError":
            problem = problem.split(" with value")[0]
        if "could not determine a constructor" in problem:
            problem = "YAML tags are not allowed: " + problem
        ref = SourceRef(name, mark.line + 1, mark.column + 1) if mark else SourceRef(name)
        raise SourceError(f"malformed YAML: {problem}", ref) from None
    except YAMLError as exc:
        raise SourceError(f"malformed YAML: {exc}", SourceRef(name)) from None
    except (ValueError, KeyError, OverflowError) as exc:  # a constructor: `!!int x`, 2020-13-01
        detail = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise SourceError(f"malformed YAML: invalid value ({detail})", SourceRef(name)) from None
    except RecursionError:
        raise SourceError("malformed YAML: nested too deeply", SourceRef(name)) from None


def _load_yaml(text: str, name: str) -> Any:
    """The C loader (fast) or, where libyaml is stricter than YAML 1.2 (`{op: Compute::X}`: a
    plain scalar holding `::` in a flow mapping), the pure-Python one, which also reports the
    error when the text is malformed."""
    from ruamel.yaml.error import MarkedYAMLError

    try:
        _check_depth(text, name, pure=False)
        return _yaml("safe").load(text)
    except MarkedYAMLError:
        _check_depth(text, name, pure=True)
        return _yaml("safe", pure=True).load(text)


def _check_depth(text: str, name: str, pure: bool) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH: the C composer recurses without a limit and
    segfaults near 40,000 levels. Parser events come from an explicit stack, so counting is safe."""
    from ruamel.yaml.events import CollectionEndEvent, CollectionStartEvent

    depth = 0
    for event in _yaml("safe", pure).parse(text):
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                where = SourceRef(name, mark.line + 1, mark.column + 1)
                raise SourceError(f"document nested more than {MAX_DEPTH} levels deep", where)
        elif isinstance(event, CollectionEndEvent):
            depth -= 1


def _expanded_size(data: Any, memo: dict[int, int]) -> int:
    """How many values `data` holds once every alias is expanded, counting each shared
    (aliased) container once: linear in the document, however many times it is reused."""
    if not isinstance(data, (dict, list)):
        return 1
    if id(data) not in memo:
        memo[id(data)] = 0  # a recursive alias (`&a [*a]`) adds nothing; copying refuses it
        items = data.values() if isinstance(data, dict) else data
        memo[id(data)] = min(MAX_VALUES + 1, 1 + sum(_expanded_size(v, memo) for v in items))
    return memo[id(data)]


def _plain(data: Any, doc: Document) -> Any:
    """Copy into plain types, refusing anything else and bounding alias expansion."""
    if "*" in doc.text and _expanded_size(data, {}) > MAX_VALUES:  # only an alias reuses a node
        raise SourceError(
            f"document expands to more than {MAX_VALUES} values (alias bomb?)", SourceRef(doc.name)
        )
    budget = [MAX_VALUES]

    def copy(value: Any, path: KeyPath) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise SourceError(
                f"document expands to more than {MAX_VALUES} values (alias bomb?)",
                SourceRef(doc.name),
            )
        if value is None or isinstance(value, (bool, str)):
            return value if type(value) in (bool, str) or value is None else str(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, (str, int, float, bool)) or isinstance(key, (list, dict)):
                    raise doc.error(path, f"mapping key {key!r} must be a string")
                out[str(key)] = copy(item, (*path, str(key)))
            return out
        if isinstance(value, list):
            return [copy(item, (*path, i)) for i, item in enumerate(value)]
        kind = type(value).__name__
        raise doc.error(
            path,
            f"value of type {kind} is not allowed (only maps, lists, strings, numbers, booleans, null)",
        )

    try:
        return copy(data, ())
    except RecursionError:
        raise SourceError("document nested too deeply", SourceRef(doc.name)) from None


def is_finite_number(value: Any) -> bool:
    """True for int/float values that are not NaN or infinite (bools are not numbers)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (restoring its state after): loading a 100k-node
    graph allocates many small objects that would make it rescan the heap for nothing;
    reference counting still frees memory."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
