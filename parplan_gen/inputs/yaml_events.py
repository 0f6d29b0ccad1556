"""YAML at the level of the parser's events, before (or instead of) building a document: the
bounds checked before anything is built (nesting depth, what aliases and merge keys expand to),
the bounded load itself (`load_yaml`), and the position of every key and item
(`event_positions`), which `source.Document` finds only when an error needs one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parplan_gen.inputs.errors import SourceError, SourceRef
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.safe_text import printable

# Values that aliases and merge keys (`*a`, `<<: *a`) may add to a YAML document once they are
# expanded: copies of what the text already holds, so 2 million is far above any real use and
# far below a "billion laughs" bomb. Counted from the parser's events, before anything is built.
MAX_VALUES = 2_000_000
MAX_DEPTH = 100  # YAML nesting limit, checked before the C loader (deep nesting crashes it)


@dataclass
class _Frame:
    """A mapping or sequence being read: its key path and where the next child goes."""

    path: KeyPath
    is_map: bool
    key: str | None = None  # a mapping's current key, once read
    index: int = 0  # a sequence's next item


def event_positions(text: str, pure: bool) -> dict[KeyPath, tuple[int, int]]:
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
            key = frame.key
            if frame.is_map and key is None:  # a key
                frame.key = str(getattr(event, "value", ""))
                positions.setdefault((*frame.path, frame.key), mark)
                if isinstance(event, MappingStartEvent | SequenceStartEvent):  # a complex key
                    stack.append(_Frame((*frame.path, "?"), isinstance(event, MappingStartEvent)))
                continue
            if key is not None:  # the value of a mapping's current key
                path, frame.key = (*frame.path, key), None
            else:  # a sequence's item
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


def load_yaml(text: str, name: str) -> Any:
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
