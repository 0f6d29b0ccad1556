"""Either kind of model: the type of a loaded model, plan.json's `model` field, and the one
typed way to reach the fields of one kind.

Code above `models` reads a model through `kind.TrainedModel`; where it must read what only
one kind has (Megatron-LM's spelling of a transformer's shape, an op graph's channel
parallelism), `transformer_of` and `graph_of` give that kind or None, so the question is asked
here, once, and the answer is typed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Discriminator, Tag

from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.kind import ModelKind, TrainedModel
from parplan_gen.models.transformer import ModelSpec

# Either kind of model as a type annotation (what load_model gives, the API's results).
AnyModelSpec = ModelSpec | GraphModelSpec

if TYPE_CHECKING:

    def _either_kind_is_a_trained_model(model: AnyModelSpec) -> TrainedModel:
        """Both classes satisfy `kind.TrainedModel` as the type checker sees them, not only at
        run time: mypy (`.ci/run`) refuses this return if either misses part of it."""
        return model


def _model_kind(value: Any) -> ModelKind:
    """Which model a document holds: `kind: graph` marks an op-graph model."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "graph" if kind == "graph" else "transformer"


# Either kind of model as a pydantic field (plan.json reads it back), told apart by `kind`, not
# tried in turn: a wrong value is reported against the model it belongs to, not as unknown
# keys of the other.
DocumentModel = Annotated[
    Annotated[ModelSpec, Tag("transformer")] | Annotated[GraphModelSpec, Tag("graph")],
    Discriminator(_model_kind),
]


def transformer_of(model: TrainedModel) -> ModelSpec | None:
    """`model`'s transformer shape and counts; None for an op-graph model."""
    return model if isinstance(model, ModelSpec) else None


def graph_of(model: TrainedModel) -> GraphModelSpec | None:
    """`model`'s op-graph sums (and graph); None for a transformer."""
    return model if isinstance(model, GraphModelSpec) else None
