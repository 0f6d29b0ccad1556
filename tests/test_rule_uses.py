"""`uses:`: a rule file lists the other files of its layer whose named formulas it reads, and
loading refuses a use it does not list (docs/rules.md, "`uses`")."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from parplan_gen.inputs.errors import RuleError
from parplan_gen.inputs.resources import builtin_display_name
from parplan_gen.rules import vocabulary
from parplan_gen.rules.file_uses import UndeclaredUseError
from parplan_gen.rules.ruleset import load_rule_file, load_rules


def _name(file: str) -> str:
    """A built-in file as `uses:` names it: `cost/memory`."""
    shown = builtin_display_name(Path(file))
    assert shown is not None, file
    return shown.split("/", 1)[1].rsplit(".", 1)[0]


def _idents(text: object) -> set[str]:
    if not isinstance(text, str):
        return set()
    return {n.id for n in ast.walk(ast.parse(text.strip(), mode="eval")) if isinstance(n, ast.Name)}


def test_each_builtin_file_lists_exactly_the_files_it_reads():
    """Read from the files themselves: every plain name of every formula that another built-in
    file defines is a file the reader lists, and it lists no other."""
    rules = load_rules()
    defined = {name: _name(origin.where.file) for name, (_, origin) in rules.formula_notes.items()}
    read: dict[str, set[str]] = defaultdict(set)
    listed: dict[str, set[str]] = {}
    files = {origin.where.file for _, origin in rules.formula_notes.values()}
    files |= {e.origin.where.file for e in rules.estimate}
    files |= {c.origin.where.file for c in (*rules.constraints, *rules.proposals)}
    for file in files:
        _, parsed = load_rule_file(Path(file))
        me = _name(file)
        listed[me] = set(parsed.uses)
        texts = [getattr(f, "value", f) for f in parsed.formulas.values()]
        for rule in (*parsed.constraints, *parsed.proposals, *parsed.opportunities):
            texts += [getattr(rule, k) for k in ("when", "require", "speedup") if hasattr(rule, k)]
        if parsed.estimate is not None:
            for section in ("memory", "time", "throughput"):
                texts += getattr(parsed.estimate, section).values()
        for text in texts:
            named = _idents(text) - set(vocabulary.CONSTANTS)  # `GiB` is the constant
            read[me] |= {defined[n] for n in named if n in defined} - {me}
    assert {name: read[name] for name in listed if read[name] != listed[name]} == {}
    assert listed["cost/time"] >= {"cost/memory", "cost/sharding"}  # the review's example


def test_a_use_of_another_files_formula_needs_uses(write, tmp_path):
    write("mine/a.yaml", "formulas:\n  x: 2\n")
    write("mine/b.yaml", 'formulas:\n  y: "x * 3"\n')
    with pytest.raises(UndeclaredUseError) as info:
        load_rules([tmp_path / "mine"], builtin=False)
    assert str(info.value) == (
        f"{tmp_path}/mine/b.yaml:2:3: formulas.y: uses 'x', a named formula of the rule file "
        "'a' (line 2), which this file's `uses:` does not list: write `uses: [a]`"
    )
    assert isinstance(info.value, RuleError)
    write("mine/b.yaml", 'uses: [a]\nformulas:\n  y: "x * 3"\n')
    rules = load_rules([tmp_path / "mine"], builtin=False)
    assert (
        rules.library.compile("y", rules.formula_notes["y"][1].where, "estimate").evaluate({}) == 6
    )


def test_a_file_in_a_folder_is_named_by_its_path(write, tmp_path):
    write("mine/units/sizes.yaml", "formulas:\n  page: 4096\n")
    write(
        "mine/c.yaml",
        """
        uses: [units/sizes]
        constraints:
          - id: mine.pages
            require: "plan.mbs * page > 0"
            reason: "pages"
        """,
    )
    assert load_rules([tmp_path / "mine"], builtin=False).constraints[0].rule.id == "mine.pages"
    write("mine/c.yaml", "uses: [unit/sizes]\n")
    with pytest.raises(
        RuleError,
        match=r"c\.yaml:1:8: uses\[0\]: no rule file 'unit/sizes' in "
        r"this layer \(did you mean 'units/sizes'\?\)",
    ):
        load_rules([tmp_path / "mine"], builtin=False)


@pytest.mark.parametrize(
    ("uses", "message"),
    [
        ("[b]", "uses[0]: 'b' is this file; list only the others it reads"),
        ("[a, a]", "uses[1]: 'a' is listed twice"),
    ],
)
def test_uses_entries_name_other_files_once(write, tmp_path, uses, message):
    write("mine/a.yaml", "formulas:\n  x: 2\n")
    write("mine/b.yaml", f'uses: {uses}\nformulas:\n  y: "x * 3"\n')
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path / "mine"], builtin=False)
    assert str(info.value).startswith(f"{tmp_path}/mine/b.yaml:1:")
    assert str(info.value).endswith(message)


def test_an_overlay_reads_and_redefines_builtin_formulas_without_uses(write, tmp_path):
    """An earlier layer's named formula is free to use, whichever layer redefines it."""
    write("mine/a.yaml", "formulas:\n  weight_bytes: 4\n")
    write("mine/b.yaml", 'formulas:\n  my_bytes: "weight_bytes * model.params"\n')
    rules = load_rules([tmp_path / "mine"])
    assert rules.formula_notes["weight_bytes"][1].layer.endswith("mine")
    assert "my_bytes" in rules.library.names


def test_a_formula_only_a_later_layer_defines_is_refused(write, tmp_path):
    write("first/a.yaml", 'formulas:\n  y: "later * 2"\n')
    write("second/b.yaml", "formulas:\n  later: 3\n")
    with pytest.raises(
        UndeclaredUseError,
        match=r"a\.yaml:2:3: formulas\.y: uses 'later', "
        r"which only a later layer defines \(.*second/b\.yaml:2:3\)",
    ):
        load_rules([tmp_path / "first", tmp_path / "second"], builtin=False)


def test_rules_check_reports_every_undeclared_use(cli, write, tmp_path):
    write("mine/a.yaml", "formulas:\n  x: 2\n")
    write(
        "mine/b.yaml",
        """
        estimate:
          memory: {other: "x * GiB"}
        constraints:
          - id: mine.c
            require: "x > 1"
            reason: "x is small"
        """,
    )
    result = cli("rules", "check", tmp_path / "mine")
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[0].endswith(
        "b.yaml:2:12: estimate.memory.other: uses 'x', a named formula of the rule file 'a' "
        "(line 2), which this file's `uses:` does not list: write `uses: [a]`"
    )
    assert lines[1].endswith(
        "b.yaml:5:5: constraints[0].require: uses 'x', a named formula of "
        "the rule file 'a' (line 2), which this file's `uses:` does not "
        "list: write `uses: [a]`"
    )
    assert lines[2].endswith(": 2 errors")
