"""Both model classes are `kind.TrainedModel`s, and either kind's own fields are reached typed.

The type checker's side is in the package, where `.ci/run`'s mypy checks it
(`models/any_model.py` `_either_kind_is_a_trained_model`); these tests run the same claims, so
the values they build are real models and `transformer_of` / `graph_of` give the right kind.
"""

from __future__ import annotations

from pathlib import Path

from typing_extensions import assert_type

from parplan_gen.models.any_model import AnyModelSpec, graph_of, transformer_of
from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.kind import TrainedModel
from parplan_gen.models.load import load_model
from parplan_gen.models.presets import load_graph_preset, load_preset
from parplan_gen.models.transformer import ModelSpec

REPO = Path(__file__).resolve().parent.parent


def test_a_transformer_is_a_trained_model() -> None:
    spec = load_preset("llama-3-8b")
    assert_type(spec, ModelSpec)
    model: TrainedModel = spec
    assert model.kind == "transformer"
    assert_type(transformer_of(model), ModelSpec | None)
    assert transformer_of(model) is spec
    assert graph_of(model) is None


def test_an_op_graph_model_is_a_trained_model() -> None:
    spec = GraphModelSpec.from_graph(load_graph_preset("resnet-50"))
    model: TrainedModel = spec
    assert model.kind == "graph"
    assert_type(graph_of(model), GraphModelSpec | None)
    assert graph_of(model) is spec
    assert transformer_of(model) is None


def test_a_loaded_model_is_either_kind_and_a_trained_model() -> None:
    loaded = load_model("resnet-50")
    assert_type(loaded, AnyModelSpec)
    model: TrainedModel = loaded
    assert model.unit == "samples"
