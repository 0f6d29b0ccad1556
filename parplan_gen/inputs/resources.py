"""Find the folders shipped with the package: built-in rules, templates and examples.

In an installed wheel they live inside the package (`parplan_gen/shipped/rules`); in a source
checkout or an editable install they are the top-level folders of the repository.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
_SHIPPED = "shipped"  # the wheel's folder for them (pyproject.toml, force-include)


def shipped_dir(name: str) -> Path:
    """The directory `name` (e.g. "rules", "examples") as shipped, wherever it was installed."""
    inside = _PACKAGE / _SHIPPED / name
    if inside.is_dir():
        return inside
    return _PACKAGE.parent / name


def builtin_rules_dir() -> Path:
    """The directory of the built-in rules."""
    return shipped_dir("rules")
