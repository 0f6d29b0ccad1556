"""Find the files shipped with the package: built-in rules, templates, examples, the backends'.

In an installed wheel the top-level folders live inside the package (`parplan_gen/shipped/rules`);
in a source checkout or an editable install they are the top-level folders of the repository.
Each backend's own files (its constraints.yaml, mapping.yaml and templates) are package data of
its folder, `parplan_gen/backends/<name>/`, wherever the package is.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
_SHIPPED = "shipped"  # the wheel's folder for them (pyproject.toml, force-include)
_BACKENDS = _PACKAGE / "backends"
RULE_SUFFIXES = (".yaml", ".yml")
BACKEND_CONSTRAINTS = "constraints.yaml"  # a backend's rules, in its folder


def shipped_dir(name: str) -> Path:
    """The directory `name` (e.g. "rules", "examples") as shipped, wherever it was installed."""
    inside = _PACKAGE / _SHIPPED / name
    if inside.is_dir():
        return inside
    return _PACKAGE.parent / name


def builtin_rules_dir() -> Path:
    """The directory of the built-in rules that are no backend's own (cost, budget, seed, the
    constraints every backend shares)."""
    return shipped_dir("rules")


def backend_dirs() -> list[Path]:
    """Each backend's folder (`parplan_gen/backends/<name>/`), by name."""
    return sorted(p for p in _BACKENDS.iterdir() if p.is_dir() and p.name[0] not in "_.")


def backend_files(name: str) -> list[Path]:
    """Each backend's file `name` (e.g. "mapping.yaml"), by backend, where it has one."""
    return [d / name for d in backend_dirs() if (d / name).is_file()]


def builtin_rule_files() -> list[Path]:
    """Every built-in rule file, in the order they load (the order of `parplan rules list`):
    the rules folder's files by their path in it, with a backend's constraints.yaml in the
    place of `constraints/<name>.yaml`. So rules of one file keep their order, and the rules
    every backend shares sit between DeepSpeed's and Megatron-LM's as they always have
    (`constraints/deepspeed`, `graph`, `headroom`, `layout`, `megatron`, `memory`,
    `torchtitan`): where a candidate breaks two rules, the first counts its rejection."""
    rules = builtin_rules_dir()
    placed = {
        p.relative_to(rules).as_posix(): p
        for p in rules.rglob("*")
        if p.suffix in RULE_SUFFIXES and p.is_file()
    }
    placed |= {f"constraints/{p.parent.name}.yaml": p for p in backend_files(BACKEND_CONSTRAINTS)}
    return [placed[key] for key in sorted(placed)]


def builtin_display_name(path: Path) -> str | None:
    """How a built-in rule file is shown (`<built-in>/seed/proposals.yaml`,
    `<built-in>/backends/megatron/constraints.yaml`); None for any other file."""
    for root, prefix in ((builtin_rules_dir(), ""), (_BACKENDS, "backends/")):
        if path.is_relative_to(root):
            return f"<built-in>/{prefix}{path.relative_to(root).as_posix()}"
    return None
