"""Why one figure of a layout's estimate, or one named formula, has its value
(`parplan_gen.explain`): the layout's evaluation environment, built as `evaluate` builds it on
the backend that priced the layout, and the tree of the formulas behind the name
(`rules.formula_explain`), down to the `model.*`, `cluster.*`, `train.*` and `plan.*` values
it reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Layout, build_layout, given_layout
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.models.kind import ANY_BACKEND, TrainedModel
from parplan_gen.planning.constraints import estimate_env
from parplan_gen.planning.evaluate import Evaluator, evaluate
from parplan_gen.planning.loading import load_cluster_spec, load_model
from parplan_gen.planning.search_space import backends_for
from parplan_gen.rules.formula_explain import MAX_EXPLAIN_NODES, FormulaNode, explain_name
from parplan_gen.rules.ruleset import RuleSet, load_rules


def explain_estimate(
    model: TrainedModel,
    cluster: Cluster,
    estimate: Estimate,
    name: str,
    rules: RuleSet,
    *,
    flash_attention: bool = True,
    max_depth: int | None = None,
    max_nodes: int = MAX_EXPLAIN_NODES,
) -> FormulaNode:
    """The tree of `name` (a figure, `time.step_s`, or a named formula, `dp_comm_s`) in the
    evaluation that gave `estimate` (what `estimate(...)` returned: its layout, on its backend)
    under `rules`. `max_depth`: levels shown below `name` (None: down to the inputs)."""
    backend = None if estimate.backend is None else estimate.backend.name
    evaluator = Evaluator(rules, model.kind, backend)
    env = evaluator.env(model, cluster, estimate.plan, flash_attention=flash_attention)
    memo: dict[str, object] = {}
    env.update(estimate_env(evaluator.cost.figures(env, memo)))
    return explain_name(
        rules,
        env,
        name,
        model_kind=model.kind,
        memo=memo,
        max_depth=max_depth,
        max_nodes=max_nodes,
    )


def explain(
    model: AnyModelSpec | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    layout: Estimate | Layout | Mapping[str, Any],
    name: str,
    *,
    rules: Sequence[str | Path] | RuleSet = (),
    flash_attention: bool = True,
    backend: str | None = None,
    max_depth: int | None = None,
    max_nodes: int = MAX_EXPLAIN_NODES,
) -> FormulaNode:
    """Why `name` of one layout's estimate has its value, as a tree (`.render()` for text,
    `.contract()` for JSON): `parplan_gen.explain("llama-3-8b", {"gpus": 8, "gpu": "h100"},
    {"tp": 2, "global_batch": 512}, "time.step_s")`. The arguments are `estimate`'s; `layout`
    may also be the Estimate it returned (its layout, on its backend)."""
    ruleset = rules if isinstance(rules, RuleSet) else load_rules(rules)
    spec, machines = load_model(model), load_cluster_spec(cluster)
    if not isinstance(layout, Estimate):
        names = None if backend in (None, ANY_BACKEND) else backends_for(spec, backend)
        with given_layout(layout) as given:
            if not isinstance(given, Layout):
                given["seq_len"] = spec.sequence_length(given.get("seq_len"))
                given = build_layout(machines.num_gpus, **given)
        priced_on = None if names is None else names[0]
        found = evaluate(
            spec, machines, given, ruleset, flash_attention=flash_attention, backend=priced_on
        )
        layout = found.estimate
    return explain_estimate(
        spec,
        machines,
        layout,
        name,
        ruleset,
        flash_attention=flash_attention,
        max_depth=max_depth,
        max_nodes=max_nodes,
    )
