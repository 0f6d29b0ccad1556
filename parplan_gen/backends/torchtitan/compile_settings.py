"""torch.compile as a torchtitan 0.3 job sets it (config/configs.py CompileConfig), read back
for `check --from-torchtitan` (reader.py beside this file): the config function's settings
(configs.yaml), then what a written config function assigns, then the launch line's flags, the
last one winning as tyro's argparse does. Whether the loss is compiled (Layout.loss_compiled)
is `enable` with "loss" among `components` (components/loss.py BaseLoss._maybe_compile).

What torchtitan itself refuses is refused here too, with its words: async TP without the model
compiled (CompileConfig.__post_init__), a value after a switch (tyro's switches take none), the
components given as more than one word (torchtitan's list_str_rule reads one comma-separated
word, config/manager.py). A written function is read from its syntax tree, never run: only the
assignments parplan can follow (at the function's top level, on the config it returns) count,
and any other change to `.compile` is an error naming its line.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from parplan_gen.backends.torchtitan.facts import LOSS_PART, MODEL_PART
from parplan_gen.backends.torchtitan.flags import negation
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.shell_script import Seg

# The settings of configs.yaml (reader.py Settings) that CompileConfig's fields are.
SETTING_OF_FIELD = {
    "enable": "compile",
    "components": "compile_components",
    "enable_async_tensor_parallel": "async_tp",
}
COMPILE_SETTINGS = tuple(SETTING_OF_FIELD.values())
SECTION = "compile"  # Trainer.Config.compile
CONFIG_CLASS = "CompileConfig"
# The switches (normalised as reader.py does: tyro takes `-` or `_`), and tyro's negation of each.
_SWITCH_FIELDS = ("enable", "enable_async_tensor_parallel")
SWITCHES = {f"--{SECTION}.{f}": (SETTING_OF_FIELD[f], True) for f in _SWITCH_FIELDS} | {
    negation(f"--{SECTION}.{f}"): (SETTING_OF_FIELD[f], False) for f in _SWITCH_FIELDS
}
COMPONENTS_FLAG = f"--{SECTION}.components"
COMPILE_FLAGS = (*SWITCHES, COMPONENTS_FLAG)  # every compile flag `line_setting` reads
COMPONENTS = (MODEL_PART, LOSS_PART)  # the parts torchtitan 0.3 compiles (trainer.py, loss.py)
BOOL_WORDS = ("true", "false")  # a value a switch is sometimes (wrongly) given
ASYNC_TP_NEEDS = "Async TP requires 'model' in --compile.components and --compile.enable"


def line_setting(words: Sequence[Seg], i: int, flag: str, where: SourceRef) -> tuple[str, Any]:
    """The setting (configs.yaml name) and value the compile flag `flag` at `words[i]` gives; an
    InputError where torchtitan's tyro refuses it."""
    word = words[i][0]
    inline = word.partition("=")[2] if "=" in word else None
    following = [w for w, _ in words[i + 1 : i + 3]]  # the next two words, where there are
    if flag in SWITCHES:
        after = following[0] if following else ""
        if inline is not None or after.lower() in BOOL_WORDS:
            given = printable(word if inline is not None else f"{word} {after}")
            raise InputError(f"{flag} is a switch: it takes no value ({given})", where)
        return SWITCHES[flag]
    if inline is None:
        value, rest = (following[0], following[1:]) if following else ("", [])
    else:
        value, rest = inline, following[:1]
    if not value or value.startswith("-"):
        raise InputError(f"{flag} needs a value: the parts, comma-separated (model,loss)", where)
    if rest and rest[0] in COMPONENTS:
        raise InputError(
            f"{flag} {printable(value)} {rest[0]}: torchtitan reads the parts as one "
            "comma-separated word (model,loss)",
            where,
        )
    return SETTING_OF_FIELD["components"], tuple(value.split(","))


def is_flag(flag: str) -> bool:
    """Whether `flag` (normalised) is one of the compile flags `line_setting` reads."""
    return flag in COMPILE_FLAGS


def loss_compiled(settings: Mapping[str, Any], where: SourceRef) -> bool:
    """Whether a job with these compile settings (COMPILE_SETTINGS) compiles its loss; torchtitan's
    own InputError for async TP without the model compiled."""
    enable, components = settings["compile"], settings["compile_components"]
    if settings["async_tp"] and not (enable and MODEL_PART in components):
        raise InputError(f"{ASYNC_TP_NEEDS} (CompileConfig.__post_init__)", where)
    return bool(enable) and LOSS_PART in components


def assigned(
    function: ast.FunctionDef, path: Path, defaults: Mapping[str, Any]
) -> dict[str, tuple[Any, SourceRef]]:
    """The compile settings `function` (a written config function) assigns to the config it
    returns, the last of each in the file's order, with where; `defaults` (configs.yaml's) are
    what `NAME.compile = CompileConfig(...)` leaves unsaid."""
    returned = _returned(function)
    top = set(map(id, function.body))
    out: dict[str, tuple[Any, SourceRef]] = {}
    changes = [
        n for n in ast.walk(function) if isinstance(n, ast.stmt | ast.expr) and _changes_compile(n)
    ]
    for node in sorted(changes, key=lambda n: (n.lineno, n.col_offset)):
        where = SourceRef(str(path), node.lineno, path=SECTION)
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and id(node) in top
            and returned is not None
            and _root(node.targets[0]) == returned
        ):
            out.update(_assignment(node.targets[0], node.value, where, defaults))
            continue
        name = returned or "config"
        raise InputError(
            f"{source_text(node)}: parplan reads compile settings assigned at the function's "
            f"top level to the config it returns, as `{name}.compile.enable = True` or "
            f"`{name}.compile = {CONFIG_CLASS}(...)`",
            where,
        )
    return out


def _returned(function: ast.FunctionDef) -> str | None:
    """The name the function's last top-level `return NAME` returns (None: none does)."""
    returns = [n for n in function.body if isinstance(n, ast.Return)]
    value = returns[-1].value if returns else None
    return value.id if isinstance(value, ast.Name) else None


def _chain(node: ast.AST) -> list[ast.AST]:
    """`a.b[c].d` as its nodes from the outermost in (Attribute and Subscript links)."""
    links = [node]
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
        links.append(node)
    return links


def _touches(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == SECTION for n in _chain(node))


def _root(node: ast.AST) -> str | None:
    last = _chain(node)[-1]
    return last.id if isinstance(last, ast.Name) else None


def _changes_compile(node: ast.AST) -> bool:
    """An assignment to, or a method call on, something under `.compile`."""
    if isinstance(node, ast.Assign):
        return any(_touches(t) for t in node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Delete) else [node.target]
        return any(_touches(t) for t in targets)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and _touches(node.func.value)
    )


def _assignment(
    target: ast.AST, value: ast.expr, where: SourceRef, defaults: Mapping[str, Any]
) -> dict[str, tuple[Any, SourceRef]]:
    """The settings one readable assignment sets."""
    assert isinstance(target, ast.Attribute)
    if target.attr == SECTION:  # NAME.compile = CompileConfig(...)
        call = value if isinstance(value, ast.Call) else None
        if not (call and isinstance(call.func, ast.Name) and call.func.id == CONFIG_CLASS):
            raise InputError(
                f"{source_text(value)}: not a {CONFIG_CLASS}(...) parplan reads", where
            )
        given = {k.arg: k.value for k in call.keywords if k.arg in SETTING_OF_FIELD}
        return {
            SETTING_OF_FIELD[field]: (
                _constant(given[field], _at(where, field))
                if field in given
                else defaults[SETTING_OF_FIELD[field]],
                where,
            )
            for field in SETTING_OF_FIELD
        }
    inner = target.value
    if not (
        isinstance(inner, ast.Attribute)
        and inner.attr == SECTION
        and target.attr in SETTING_OF_FIELD
    ):
        raise InputError(f"{source_text(target)}: not a compile setting parplan reads", where)
    at = _at(where, target.attr)
    return {SETTING_OF_FIELD[target.attr]: (_constant(value, at), at)}


def _at(where: SourceRef, field: str) -> SourceRef:
    return SourceRef(where.file, where.line, path=f"{SECTION}.{field}")


def _constant(value: ast.expr, where: SourceRef) -> Any:
    """A field's value written out (`where` names the field): True/False, or for the
    components a list of strings."""
    if where.path != f"{SECTION}.components":
        if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
            raise InputError(f"{source_text(value)}: not True or False", where)
        return value.value
    items = value.elts if isinstance(value, ast.List | ast.Tuple) else None
    names = [i.value for i in items or () if isinstance(i, ast.Constant)]
    if items is None or len(names) != len(items) or not all(isinstance(n, str) for n in names):
        raise InputError(f"{source_text(value)}: not a list of names", where)
    return tuple(names)


def source_text(node: ast.AST) -> str:
    """A node of a config module as its source, for a message (escaped and cut)."""
    try:
        return printable(ast.unparse(node))
    except RecursionError:
        return f"a {type(node).__name__} nested too deeply to show"
