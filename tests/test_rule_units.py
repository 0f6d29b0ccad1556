"""Named formulas with `unit:` and `source:`, and the size constants (`GiB`): docs/rules.md,
"`formulas`" and "Units"."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan_gen.inputs.errors import RuleError, SourceRef
from parplan_gen.inputs.resources import builtin_rules_dir
from parplan_gen.rules.ruleset import load_rule_file, load_rules
from parplan_gen.rules.schema import NamedFormula
from parplan_gen.rules.units import SIZE_CONSTANTS, UNITS, Unit

COST_MODEL_FILES = sorted(
    [*(builtin_rules_dir() / "cost").glob("*.yaml"), builtin_rules_dir() / "budget/budget.yaml"]
)


def _value(rules, name: str) -> object:
    return rules.library.compile(name, SourceRef(name), "budget").evaluate({})


def test_units_are_declared_once_with_a_meaning():
    assert set(UNITS) == set(Unit.__args__)  # type: ignore[attr-defined]
    assert all(UNITS.values())


@pytest.mark.parametrize("path", COST_MODEL_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_named_formula_of_the_cost_model_says_its_unit(path: Path):
    _, parsed = load_rule_file(path)
    without = [n for n, f in parsed.formulas.items() if getattr(f, "unit", None) is None]
    assert without == []


@pytest.mark.parametrize("path", COST_MODEL_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_numeric_constant_of_the_cost_model_says_its_source(path: Path):
    """A constant: a named formula that reads no name and gives a number (`weight_bytes: 2`,
    `"54 * 24 * 16384 / 419"`)."""
    rules = load_rules()
    _, parsed = load_rule_file(path)
    constants = [
        name
        for name in parsed.formulas
        if rules.library.compile(name, SourceRef(name), "budget").is_constant
        and not isinstance(_value(rules, name), bool)
    ]
    assert [n for n in constants if not parsed.formulas[n].source] == []


def test_sources_name_where_the_figures_come_from():
    """Two of them, against the papers: ZeRO (Rajbhandari et al. 2020, Sec. 3.1) keeps 2 bytes
    of 16-bit weights and K = 12 bytes of Adam state per parameter."""
    notes = load_rules().formula_notes
    assert notes["weight_bytes"][0] == NamedFormula(
        value=2,
        unit="B/param",
        source="Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054) Sec. 3.1: 16-bit weights",
    )
    assert notes["adam_state_bytes"][0].value == 12
    assert "Sec. 3.1" in str(notes["adam_state_bytes"][0].source)


def test_a_named_formula_may_be_a_plain_value_or_a_mapping(write, tmp_path):
    write(
        "mine/f.yaml",
        """
        formulas:
          plain: "2 * 3"
          mapped:
            value: "plain + 1"
            unit: count
            source: "docs/rules.md"
        """,
    )
    rules = load_rules([tmp_path / "mine"], builtin=False)
    assert _value(rules, "mapped") == 7
    assert rules.formula_notes["plain"][0] == NamedFormula(value="2 * 3")
    assert rules.formula_notes["mapped"][0].unit == "count"
    assert str(rules.formula_notes["mapped"][1].where) == f"{tmp_path}/mine/f.yaml:3:3"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{value: 2, unit: sec}", "formulas.x.unit: Input should be 's', 'B', "),
        ("{value: 2, unti: s}", "formulas.x.unti: unknown key 'unti'; did you mean 'unit'?"),
        ("{unit: s}", "formulas.x.value: "),
    ],
)
def test_a_mapping_is_checked_key_by_key(write, tmp_path, entry, message):
    write("mine/f.yaml", f"formulas:\n  x: {entry}\n")
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path / "mine"], builtin=False)
    assert message in str(info.value)


def test_a_redefinition_keeps_the_unit_and_may_not_change_it(write, tmp_path):
    write("mine/f.yaml", "formulas:\n  grad_bytes: 2\n")
    note = load_rules([tmp_path / "mine"]).formula_notes["grad_bytes"][0]
    assert (note.value, note.unit, note.source) == (2, "B/param", None)
    write("mine/f.yaml", "formulas:\n  grad_bytes: {value: 2, unit: s}\n")
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path / "mine"])
    assert str(info.value).startswith(f"{tmp_path}/mine/f.yaml:2:3: formulas.grad_bytes: ")
    assert "is in B/param (at " in str(info.value)
    assert str(info.value).endswith("not s: a redefinition keeps the unit")


def test_size_constants_are_binary_prefixes(write, tmp_path):
    """IEC 80000-13: 1 GiB = 2^30 bytes = 1,073,741,824."""
    assert SIZE_CONSTANTS["GiB"] == 1_073_741_824
    assert SIZE_CONSTANTS["MiB"] * 1024 == SIZE_CONSTANTS["GiB"]
    write("mine/f.yaml", 'formulas:\n  reserve: "2 * GiB + 512 * MiB"\n')
    assert _value(load_rules([tmp_path / "mine"], builtin=False), "reserve") == 2_684_354_560


def test_a_named_formula_may_repeat_a_constant_but_not_change_it(write, tmp_path):
    write("mine/f.yaml", 'formulas:\n  GiB: 1073741824\n  two: "2 * GiB"\n')
    assert _value(load_rules([tmp_path / "mine"], builtin=False), "two") == 2**31
    write("mine/f.yaml", "formulas:\n  GiB: 1.0e9\n")
    with pytest.raises(
        RuleError,
        match=r"named formula 'GiB' clashes with the constant GiB "
        r"\(1073741824\); a formula may use GiB without defining it",
    ):
        load_rules([tmp_path / "mine"], builtin=False)
