"""Both model classes are `kind.TrainedModel`s to the type checker, not only at run time.

The functions below are checked by mypy (`test_mypy_accepts_this_module`, with the project's
configuration): each assignment to a `TrainedModel`, and each `assert_type`, is a claim mypy
must accept. They also run, so the values they build are real models.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
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


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for this module's runs (the first reads the package, ~2 s; the next ~0.3 s)."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(*paths: Path, cache: Path) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api")
    config = str(REPO / "pyproject.toml")
    out, err, status = api.run(
        ["--config-file", config, "--cache-dir", str(cache), *map(str, paths)]
    )
    return out + err, status


def test_mypy_accepts_this_module(mypy_cache: Path) -> None:
    out, status = _mypy(Path(__file__), cache=mypy_cache)
    assert status == 0, out


def test_mypy_refuses_a_class_that_misses_part_of_the_interface(
    tmp_path: Path, mypy_cache: Path
) -> None:
    """The check above can fail: a model without `facts` is no TrainedModel."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            from parplan_gen.models.graph_model import GraphModelSpec
            from parplan_gen.models.kind import TrainedModel

            class NoFacts(GraphModelSpec):
                facts = None

            def as_model(spec: NoFacts) -> TrainedModel:
                return spec
            """
        ),
        encoding="utf-8",
    )
    out, status = _mypy(probe, cache=mypy_cache)
    assert status == 1
    assert 'Incompatible return value type (got "NoFacts", expected "TrainedModel")' in out
