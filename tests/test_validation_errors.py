"""inputs/validation.py: a model validator's own complaint, which pydantic reports with an empty
location, is named at the document it came from, in the validator's words."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, model_validator

from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.source import parse_document
from parplan_gen.inputs.validation import validate


class _Window(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    low: int
    high: int

    @model_validator(mode="after")
    def _ordered(self) -> _Window:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        return self


def test_a_model_validators_error_is_named_at_the_document() -> None:
    doc = parse_document("low: 9\nhigh: 3\n", "w.yaml")
    with pytest.raises(InputError) as info:
        validate(_Window, doc.data, doc)
    assert str(info.value) == "w.yaml:1:1: low (9) is above high (3)"


def test_a_nested_model_validators_error_is_named_at_its_key() -> None:
    class _Outer(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        window: _Window

    doc = parse_document("window:\n  low: 9\n  high: 3\n", "w.yaml")
    with pytest.raises(InputError) as info:
        validate(_Outer, doc.data, doc)
    assert str(info.value) == "w.yaml:1:1: window: low (9) is above high (3)"
