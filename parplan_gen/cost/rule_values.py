"""The built-in rules' named formulas, read outside the cost model: what it assumed for a layout,
at render time (plan.json keeps no rules overlay, so a rendered file turns on what was priced)
and when a backend picks the release that runs a layout (planning/backends/capabilities.py)."""

from __future__ import annotations

from typing import Any

from parplan_gen.cost.estimate import FRAMEWORK_FEATURES, cluster_env
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Layout, plan_values
from parplan_gen.models.kind import TrainedModel
from parplan_gen.rules.ruleset import builtin_formula

TP_COMM_OVERLAPPED = "tp_comm_overlapped"  # the cost model's TP overlap (rules/cost/time.yaml)


def rule_env(
    layout: Layout,
    backend: str = "",
    cluster: Cluster | None = None,
    model: TrainedModel | None = None,
) -> dict[str, Any]:
    """The names such a formula may read: plan.*, train.precision, train.backend, the
    frameworks' features and, where given, cluster.* and model.*."""
    env: dict[str, Any] = {
        **plan_values(layout),
        **FRAMEWORK_FEATURES,
        "train.precision": layout.precision,
        "train.backend": backend,
    }
    if cluster is not None:
        env |= cluster_env(cluster, layout.precision)
    if model is not None:
        env |= model.formula_values(layout.seq_len)
    return env


def rule_value(
    name: str,
    layout: Layout,
    backend: str = "",
    cluster: Cluster | None = None,
    model: TrainedModel | None = None,
) -> object:
    """The built-in named formula `name` for `layout` on `backend` (see `rule_env`)."""
    return builtin_formula(name)(rule_env(layout, backend, cluster, model))
