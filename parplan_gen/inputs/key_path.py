"""Key paths: where a value sits inside a parsed document, `('nodes', 3, 'op')`.

The YAML event reader (`yaml_events`) records a position for each key path, `source.Document`
points at one, and errors show one as `nodes[3].op`.
"""

from __future__ import annotations

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
