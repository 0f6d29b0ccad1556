"""Load YAML and JSON documents safely into plain Python data, with source positions.

Every input is bounded before it is parsed: its size (a cap per kind of input, which
`reading.input_limit` overrides), and for YAML its nesting and what its aliases and merge keys
expand to, counted from the parser's events (`yaml_events`) before anything is built. Owns the
`Document` (plain data plus positions) and the parsers. The fast path parses without
positions (json, or ruamel's safe C loader); a position is found only when something needs to
point at a line (an error, `rules list`): in YAML from the parser's events, in JSON by walking
only the containers on the way to the key. Nothing a document says can construct an object:
YAML tags are refused, and the result holds only dict, list, str, int, float, bool and None.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import InputError, SourceError, SourceRef
from parplan_gen.inputs.key_path import KeyPath, format_path
from parplan_gen.inputs.number_text import number_problem
from parplan_gen.inputs.reading import MAX_FILE_BYTES, read_text
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.yaml_events import event_positions, load_yaml

# A YAML document is refused above this size: ruamel's constructor takes ~40 us a value, ~4 s
# a MiB of a graph file (as JSON: ~0.2 s). 2 MiB holds ~35,000 graph nodes, which load in ~8 s;
# larger graphs belong in JSON.
MAX_YAML_BYTES = 2 * MIB


class Document:
    """One parsed file: its plain data and a way to point at any key path in it."""

    def __init__(self, name: str, text: str, data: Any, kind: str = "yaml") -> None:
        self.name = name
        self.text = text
        self.data = data
        self.kind = kind  # "yaml" or "json": how positions are found

    def ref(self, path: KeyPath = ()) -> SourceRef:
        """The position of `path` (or of its nearest ancestor that has one), found lazily."""
        key = tuple(path)
        return SourceRef.lazy(self.name, format_path(key), lambda: self._find(key), self)

    def _find(self, path: KeyPath) -> tuple[int | None, int | None]:
        if self.kind == "json":
            return self._json.position(path)
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
            return event_positions(self.text, pure=False)
        except Exception:  # noqa: BLE001 - libyaml is stricter than YAML 1.2 in places
            try:
                return event_positions(self.text, pure=True)
            except Exception:  # noqa: BLE001 - positions are best effort; the data parsed
                return {}

    @cached_property
    def _json(self) -> _JsonLocator:
        return _JsonLocator(self.text)


# Patterns that step over JSON text that parsed, in C, without building its values.
_JSON_SPACE = re.compile(r"[ \t\n\r]*+")
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_FLAT = rf"[\[{{](?:[^\"\[\]{{}}]++|{_STRING})*+[\]}}]"  # a list or mapping holding neither
_LEVEL = re.compile(rf"(?:[^\"\[\]{{}}]++|{_STRING}|{_FLAT})*+")  # up to a nested container
_SCALAR = rf"(?:{_STRING}|[^\"\[\]{{}},: \t\n\r]++)"
_ITEM = rf"(?:{_FLAT}|{_SCALAR})[ \t\n\r]*+,[ \t\n\r]*+"  # a flat item of a list, and its comma
_ITEM_RUN = 256  # items stepped over by one match: one Python step per 256 items of a list
_ONE_ITEM = re.compile(_ITEM)
_ITEMS = re.compile(f"(?:{_ITEM}){{{_ITEM_RUN}}}")
_JSON_VALUE = json.JSONDecoder().raw_decode  # one scalar or key from an offset


def _past(pattern: re.Pattern[str], text: str, at: int) -> int:
    """The offset just past what `pattern` matches at `at` (the patterns above that step over
    text match the empty string too: `at` itself when nothing is stepped over)."""
    match = pattern.match(text, at)
    return at if match is None else match.end()


class _JsonLocator:
    """Positions in a JSON text that parsed. The walk to a key path steps over what lies
    before it with the patterns above (runs of 256 flat list items per match), building no
    value but the keys on the way. Each step found is kept, and a later walk along the same
    list goes on from the furthest item an earlier one reached."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._furthest: dict[int, tuple[int, int]] = {}  # list offset -> (item index, offset)
        self._found: dict[tuple[int, str | int], tuple[int, int] | None] = {}

    def position(self, path: KeyPath) -> tuple[int, int]:
        """1-based (line, column) of `path`'s key or item, or of its nearest ancestor found."""
        if not path:
            return 1, 1  # as in YAML: the document itself
        at = value = _past(_JSON_SPACE, self.text, 0)
        for part in path:
            if (value, part) not in self._found:
                self._found[value, part] = self._child(value, part)
            found = self._found[value, part]
            if found is None:
                break
            at, value = found
        line = self.text.count("\n", 0, at) + 1
        return line, at - self.text.rfind("\n", 0, at)

    def _child(self, container: int, part: str | int) -> tuple[int, int] | None:
        """(offset of the key or item, offset of its value) of `part` in the container that
        opens at offset `container`."""
        opener = self.text[container : container + 1]
        try:
            if opener == "{" and isinstance(part, str):
                return self._member(container, part)
            if opener == "[" and isinstance(part, int) and not isinstance(part, bool):
                return self._item(container, part)
        except ValueError:  # not the text that parsed; positions are best effort
            pass
        return None

    def _member(self, container: int, key: str) -> tuple[int, int] | None:
        text = self.text
        at = _past(_JSON_SPACE, text, container + 1)
        while text[at : at + 1] == '"':
            name, end = _JSON_VALUE(text, at)
            value = _past(_JSON_SPACE, text, _past(_JSON_SPACE, text, end) + 1)  # past the colon
            if name == key:
                return at, value
            at = _past(_JSON_SPACE, text, self._skip(value))
            if text[at : at + 1] != ",":
                return None
            at = _past(_JSON_SPACE, text, at + 1)
        return None

    def _item(self, container: int, index: int) -> tuple[int, int] | None:
        text = self.text
        seen, at = self._furthest.get(container, (0, _past(_JSON_SPACE, text, container + 1)))
        if seen > index:
            seen, at = 0, _past(_JSON_SPACE, text, container + 1)
        while seen < index:
            run = _ITEMS.match(text, at) if index - seen >= _ITEM_RUN else None
            one = run or _ONE_ITEM.match(text, at)
            if one is not None:
                seen, at = seen + (_ITEM_RUN if run else 1), one.end()
                continue
            at = _past(_JSON_SPACE, text, self._skip(at))  # an item holding containers
            if text[at : at + 1] != ",":
                return None
            seen, at = seen + 1, _past(_JSON_SPACE, text, at + 1)
        if text[at : at + 1] in ("]", ""):
            return None
        self._furthest[container] = (index, at)
        return at, at

    def _skip(self, at: int) -> int:
        """The offset just past the value at `at`."""
        text = self.text
        if text[at : at + 1] not in ("[", "{"):
            return _JSON_VALUE(text, at)[1]
        depth = 0
        while True:
            char = text[at : at + 1]
            if not char:
                return at
            depth += 1 if char in ("[", "{") else -1
            at += 1
            if depth == 0:
                return at
            at = _past(_LEVEL, text, at)


def load_document(path: str | Path, *, max_bytes: int | None = None) -> Document:
    """Read and parse a `.json`, `.yaml` or `.yml` file (anything else is parsed as YAML) of at
    most `max_bytes` (default MAX_FILE_BYTES), and at most MAX_YAML_BYTES for YAML."""
    kind = "json" if str(path).lower().endswith(".json") else "yaml"
    cap = MAX_FILE_BYTES if max_bytes is None else max_bytes
    text = read_text(path, max_bytes=min(cap, MAX_YAML_BYTES) if kind == "yaml" else cap)
    return parse_document(text, str(path), kind)


def load_mapping_document(
    path: str | Path, expected: str, error: type[InputError] = InputError
) -> Document:
    """`load_document(path)` of a file whose top level must be a mapping; else `error`
    `"<expected> (got an empty file | <type>)"` at the file's start."""
    doc = load_document(path)
    if not isinstance(doc.data, dict):
        got = "an empty file" if doc.data is None else type(doc.data).__name__
        raise error(f"{expected} (got {got})", doc.ref())
    return doc


def read_package_data(filename: str) -> Document:
    """parplan_gen/data/`filename`, parsed (its errors name that path)."""
    path = resources.files("parplan_gen").joinpath("data").joinpath(filename)
    return parse_document(path.read_text(encoding="utf-8"), f"parplan_gen/data/{filename}")


def parse_document(text: str, name: str, kind: str = "yaml") -> Document:
    """Parse `text` (named `name` in errors) as `kind` ("yaml" or "json")."""
    doc = Document(name, text, None, kind)
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
                    raise ValueError(f"duplicate key {printable(repr(key))}")
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
    from ruamel.yaml.reader import ReaderError

    try:
        return load_yaml(text, name)
    except ReaderError as exc:  # a character YAML refuses (NUL, DEL, other controls)
        at = exc.position
        where = SourceRef(name, text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at))
        message = str(exc).split("\n", 1)[0]  # the rest names no file: the position is in `where`
        raise SourceError(f"malformed YAML: {message}", where) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or exc.context or "malformed YAML").strip()
        if "duplicate key" in problem or type(exc).__name__ == "DuplicateKeyError":
            problem = problem.split(" with value")[0]
        if "could not determine a constructor" in problem:
            problem = "YAML tags are not allowed: " + problem
        ref = SourceRef(name, mark.line + 1, mark.column + 1) if mark else SourceRef(name)
        raise SourceError(f"malformed YAML: {printable(problem)}", ref) from None
    except YAMLError as exc:
        raise SourceError(f"malformed YAML: {printable(str(exc))}", SourceRef(name)) from None
    except (ValueError, KeyError, OverflowError) as exc:  # a constructor: `!!int x`, 2020-13-01
        detail = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        message = f"malformed YAML: invalid value ({printable(detail)})"
        raise SourceError(message, SourceRef(name)) from None
    except RecursionError:
        raise SourceError("malformed YAML: nested too deeply", SourceRef(name)) from None


def _plain(data: Any, doc: Document) -> Any:
    """Copy into plain types (each alias becomes its own copy), refusing anything else. The
    copy is bounded: `_check_events` bounded what the aliases add."""

    def copy(value: Any, path: KeyPath) -> Any:
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
                    shown = printable(repr(key))
                    raise doc.error(path, f"mapping key {shown} must be a string")
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
    """True for int/float values that are not NaN or infinite (bools are not numbers), an int
    only up to the largest float (math.isfinite of a larger one raises OverflowError)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return number_problem(value) is None


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
