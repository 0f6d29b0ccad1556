"""Load YAML and JSON documents safely into plain Python data, with source positions.

Every input is bounded before it is parsed: its size (a cap per kind of input, which
`input_limit` overrides), and for YAML its nesting and what its aliases and merge keys expand
to, counted from the parser's events before anything is built. The fast path parses without
positions (json, or ruamel's safe C loader); a position is found only when something needs to
point at a line (an error, `rules list`): in YAML from the parser's events, in JSON by walking
only the containers on the way to the key. Nothing a document says can construct an object:
YAML tags are refused, and the result holds only dict, list, str, int, float, bool and None.
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from parplan_gen.inputs.errors import SourceError, SourceRef
from parplan_gen.inputs.safe_text import printable

MIB = 1024 * 1024
# The caps on what one input file may hold, checked before it is read. A kind of input whose
# cost is high per byte has its own (graph.MAX_GRAPH_BYTES, ruleset.MAX_RULE_FILE_BYTES,
# onnx_import.MAX_ONNX_BYTES, and MAX_YAML_BYTES below); this one bounds any other read to
# memory a laptop can spare. `input_limit` (the CLI's --max-input-mib) replaces them all.
MAX_FILE_BYTES = 64 * MIB
# A YAML document is refused above this size: ruamel's constructor takes ~40 us a value, ~4 s
# a MiB of a graph file (as JSON: ~0.2 s). 2 MiB holds ~35,000 graph nodes, which load in ~8 s;
# larger graphs belong in JSON.
MAX_YAML_BYTES = 2 * MIB
# Values that aliases and merge keys (`*a`, `<<: *a`) may add to a YAML document once they are
# expanded: copies of what the text already holds, so 2 million is far above any real use and
# far below a "billion laughs" bomb. Counted from the parser's events, before anything is built.
MAX_VALUES = 2_000_000
MAX_DEPTH = 100  # YAML nesting limit, checked before the C loader (deep nesting crashes it)
INPUT_LIMIT_ENV = "PARPLAN_MAX_INPUT_MIB"
RAISE_HINT = f"raise it with `parplan --max-input-mib N` or {INPUT_LIMIT_ENV}=N"
# An override of every cap, set by `input_limit` (the CLI's --max-input-mib); None: the caps.
_LIMIT_OVERRIDE: ContextVar[int | None] = ContextVar("input_limit", default=None)

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

    def __init__(self, name: str, text: str, data: Any, kind: str = "yaml") -> None:
        self.name = name
        self.text = text
        self.data = data
        self.kind = kind  # "yaml" or "json": how positions are found

    def ref(self, path: KeyPath = ()) -> SourceRef:
        """The position of `path` (or of its nearest ancestor that has one), found lazily."""
        key = tuple(path)
        return SourceRef.lazy(self.name, format_path(key), lambda: self._find(key))

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
            return _event_positions(self.text, pure=False)
        except Exception:  # noqa: BLE001 - libyaml is stricter than YAML 1.2 in places
            try:
                return _event_positions(self.text, pure=True)
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
        at = value = _JSON_SPACE.match(self.text).end()
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
        text, space = self.text, _JSON_SPACE.match
        at = space(text, container + 1).end()
        while text[at : at + 1] == '"':
            name, end = _JSON_VALUE(text, at)
            value = space(text, space(text, end).end() + 1).end()  # past the colon
            if name == key:
                return at, value
            at = space(text, self._skip(value)).end()
            if text[at : at + 1] != ",":
                return None
            at = space(text, at + 1).end()
        return None

    def _item(self, container: int, index: int) -> tuple[int, int] | None:
        text, space = self.text, _JSON_SPACE.match
        seen, at = self._furthest.get(container, (0, space(text, container + 1).end()))
        if seen > index:
            seen, at = 0, space(text, container + 1).end()
        while seen < index:
            run = _ITEMS.match(text, at) if index - seen >= _ITEM_RUN else None
            one = run or _ONE_ITEM.match(text, at)
            if one is not None:
                seen, at = seen + (_ITEM_RUN if run else 1), one.end()
                continue
            at = space(text, self._skip(at)).end()  # an item holding containers
            if text[at : at + 1] != ",":
                return None
            seen, at = seen + 1, space(text, at + 1).end()
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
            at = _LEVEL.match(text, at).end()


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


@contextmanager
def input_limit(max_bytes: int | None) -> Iterator[None]:
    """Within the block every input file may hold up to `max_bytes`, whatever the cap of its
    kind (None: the caps apply). The CLI's --max-input-mib sets it for one run."""
    token = _LIMIT_OVERRIDE.set(max_bytes)
    try:
        yield
    finally:
        _LIMIT_OVERRIDE.reset(token)


def size_limit(cap: int) -> int:
    """The size limit of an input whose kind is capped at `cap` bytes (see `input_limit`)."""
    override = _LIMIT_OVERRIDE.get()
    return cap if override is None else override


def _too_large(name: str, size: int | None, limit: int) -> SourceError:
    """The error for a file over its size limit (`size` None: found while reading it, its size
    unknown), saying how to raise the limit."""
    shown = f"is {size:,} bytes" if size is not None else f"holds more than {limit:,} bytes"
    mib = f"{limit / MIB:g}"
    cap = f"{mib} MiB" if float(mib) * MIB == limit else f"{limit:,} bytes"  # MiB when exact
    message = f"file {shown}; the limit is {cap} ({RAISE_HINT})"
    return SourceError(message, SourceRef(name))


_FILE_TYPES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular_file(name: str, mode: int) -> SourceError:
    """The error for a path that exists but is no regular file (a folder, a pipe, a device)."""
    kind = next((what for test, what in _FILE_TYPES if test(mode)), "not a file")
    return SourceError(f"not a regular file ({kind})", SourceRef(name))


def read_bytes(path: str | Path, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (default MAX_FILE_BYTES; see
    `input_limit`). A pipe or a device is refused without reading it (opening never waits for a
    writer), and no more than the limit is ever read, whatever the file's size says."""
    name = str(path)
    limit = size_limit(MAX_FILE_BYTES if max_bytes is None else max_bytes)
    try:
        mode = Path(path).stat().st_mode
        if not stat.S_ISREG(mode):
            raise not_regular_file(name, mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SourceError("file not found", SourceRef(name)) from None
    except OSError as exc:
        raise SourceError(f"cannot read file: {exc.strerror}", SourceRef(name)) from None
    except ValueError:  # the name holds a NUL character
        raise SourceError("no file can have this name", SourceRef(name)) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced since the check above
            raise not_regular_file(name, info.st_mode)
        if info.st_size > limit:
            raise _too_large(name, info.st_size, limit)
        raw = handle.read(limit + 1)
    if len(raw) > limit:  # it grew, or its size said 0 (/proc)
        raise _too_large(name, None, limit)
    return raw


def read_text(path: str | Path, *, max_bytes: int | None = None) -> str:
    """Read a UTF-8 text file, refusing missing, oversized and non-UTF-8 files (`read_bytes`)."""
    raw = read_bytes(path, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SourceError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            SourceRef(str(path), line),
        ) from None


def load_document(path: str | Path, *, max_bytes: int | None = None) -> Document:
    """Read and parse a `.json`, `.yaml` or `.yml` file (anything else is parsed as YAML) of at
    most `max_bytes` (default MAX_FILE_BYTES), and at most MAX_YAML_BYTES for YAML."""
    kind = "json" if str(path).lower().endswith(".json") else "yaml"
    cap = MAX_FILE_BYTES if max_bytes is None else max_bytes
    text = read_text(path, max_bytes=min(cap, MAX_YAML_BYTES) if kind == "yaml" else cap)
    return parse_document(text, str(path), kind)


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
        return _load_yaml(text, name)
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


def _load_yaml(text: str, name: str) -> Any:
    """The C loader (fast) or, where libyaml is stricter than YAML 1.2 (`{op: Compute::X}`: a
    plain scalar holding `::` in a flow mapping), the pure-Python one, which also reports the
    error when the text is malformed. Either is bounded first (`_check_events`)."""
    from ruamel.yaml.error import MarkedYAMLError

    try:
        _check_events(text, name, pure=False)
        return _yaml("safe").load(text)
    except MarkedYAMLError:
        _check_events(text, name, pure=True)
        return _yaml("safe", pure=True).load(text)


@dataclass
class _Open:
    """A collection the parser is inside: its anchor and its values so far (aliases expanded)."""

    anchor: str | None
    values: int = 1  # itself


def _check_events(text: str, name: str, pure: bool) -> None:
    """Refuse, from the parser's events and before anything is built, YAML nested deeper than
    MAX_DEPTH (the C composer recurses without a limit and segfaults near 40,000 levels) and
    aliases or merge keys (`<<: [*a, *b]`, an alias too) adding more than MAX_VALUES values.
    Each anchor's size is its values with the aliases in it expanded, so counting is linear in
    the text however deep the expansion would go."""
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent

    sizes: dict[str, int] = {}
    stack: list[_Open] = [_Open(None)]
    added = 0
    for event in _yaml("safe", pure).parse(text):
        if isinstance(event, CollectionStartEvent):
            if len(stack) > MAX_DEPTH:
                raise SourceError(
                    f"document nested more than {MAX_DEPTH} levels deep", _at(name, event)
                )
            stack.append(_Open(event.anchor))
        elif isinstance(event, CollectionEndEvent):
            done = stack.pop()
            stack[-1].values += done.values
            if done.anchor is not None:
                sizes[done.anchor] = done.values
        elif isinstance(event, AliasEvent):
            size = _alias_size(event, sizes, stack, name)
            added += size
            if added > MAX_VALUES:
                message = (
                    f"aliases and merge keys expand to more than {MAX_VALUES:,} values "
                    "(an alias bomb?)"
                )
                raise SourceError(message, _at(name, event))
            stack[-1].values += size
        elif isinstance(event, NodeEvent):  # a scalar
            stack[-1].values += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1


def _alias_size(event: Any, sizes: dict[str, int], stack: list[_Open], name: str) -> int:
    """Values an alias stands for; an alias inside the collection it names is refused."""
    if any(frame.anchor == event.anchor for frame in stack):
        message = f"alias *{printable(event.anchor)} is inside the collection it names (a loop)"
        raise SourceError(message, _at(name, event))
    return sizes.get(event.anchor, 0)  # 0: undefined, which the composer reports


def _at(name: str, event: Any) -> SourceRef:
    return SourceRef(name, event.start_mark.line + 1, event.start_mark.column + 1)


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
