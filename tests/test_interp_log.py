"""`interp_log`, the formula language's table of measurements: linear in log(x), flat beyond."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parplan_gen.inputs.errors import FormulaError, SourceRef
from parplan_gen.rules.formulas import FormulaLibrary
from parplan_gen.rules.vocabulary import interp_log

POINTS = (256, 0.5, 1024, 0.8, 4096, 0.9)


def test_the_points_themselves_are_returned() -> None:
    assert [interp_log(x, *POINTS) for x in (256, 1024, 4096)] == [0.5, 0.8, 0.9]


def test_halfway_in_log_space_is_the_geometric_mean_of_the_xs() -> None:
    # 512 = sqrt(256 * 1024): halfway between the two points in log(x)
    assert interp_log(512, *POINTS) == pytest.approx(0.65)
    assert interp_log(2048, *POINTS) == pytest.approx(0.85)


def test_beyond_the_ends_the_end_values_hold() -> None:
    assert interp_log(1, *POINTS) == 0.5
    assert interp_log(1e9, *POINTS) == 0.9


@given(st.floats(min_value=1.0, max_value=1e6))
def test_a_rising_table_gives_a_value_between_its_neighbours(x: float) -> None:
    y = interp_log(x, *POINTS)
    assert 0.5 <= y <= 0.9
    assert interp_log(x * 1.5, *POINTS) >= y


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((10, 1, 2, 3), "two or more"),
        ((10, 1, 2, 3, 4, 5), "two or more"),
        ((10, 4, 1, 2, 2), "ascending"),
        ((10, 0, 1, 2, 2), "x > 0"),
    ],
)
def test_a_malformed_table_is_refused_with_what_is_wrong(
    args: tuple[float, ...], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        interp_log(*args)


def test_a_formula_reaches_it_and_a_bad_table_names_the_formula() -> None:
    where = SourceRef("rules/curve.yaml", 1, 1, "formulas.x")
    lib = FormulaLibrary({})
    ok = lib.compile("interp_log(train.seq_len, 1024, 0.5, 8192, 0.8)", where, "estimate", None)
    assert ok.evaluate({"train.seq_len": 2896}) == pytest.approx(
        0.5 + 0.3 * math.log(2896 / 1024) / math.log(8)
    )
    bad = lib.compile("interp_log(train.seq_len, 8192, 0.5, 1024, 0.8)", where, "estimate", None)
    with pytest.raises(FormulaError, match="ascending"):
        bad.evaluate({"train.seq_len": 2048})
