"""Built-in cost formulas evaluated by hand-picked inputs, for the tests that check one term
against figures worked from its sources: the Evaluator's environment of a preset model on a
catalog cluster, and a named formula's value in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.layout import build_layout
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.planning.evaluate import Evaluator

from conftest import builtin_rules

LAYOUT_DEFAULTS = {"mbs": 1, "global_batch": 64, "seq_len": 8192}


def formula_env(
    model: str, cluster: dict[str, Any] | Path, backend: str, **layout: Any
) -> dict[str, Any]:
    """The names the cost rules read for `model` on `cluster` (a --gpus/--gpu mapping or a
    cluster file) with a layout of the cluster's GPUs (mbs 1, global batch 64, seq 8192 unless
    given)."""
    found = load_cluster_spec(cluster)
    plan = build_layout(found.num_gpus, **(LAYOUT_DEFAULTS | layout))
    evaluator = Evaluator(builtin_rules(), backend=backend)  # type: ignore[arg-type]
    return evaluator.env(load_model(model), found, plan, flash_attention=True)


def formula_value(name: str, env: dict[str, Any]) -> float:
    """The built-in named formula `name` in `env`."""
    formula = builtin_rules().library.compile(name, SourceRef("test"), "estimate", "number")
    return float(formula.evaluate(env))
