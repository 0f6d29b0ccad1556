"""Why one figure of a layout's estimate, or one named formula, has its value
(`parplan_gen.explain`, api/estimates.py): the layout's evaluation environment, built as `evaluate` builds it on
the backend that priced the layout, and the tree of the formulas behind the name
(`rules.formula_explain`), down to the `model.*`, `cluster.*`, `train.*` and `plan.*` values
it reads.
"""

from __future__ import annotations

from parplan_gen.cost.estimate import NO_HEADROOM, Estimate, MemoryHeadroom
from parplan_gen.cost.hardware import Cluster
from parplan_gen.models.kind import TrainedModel
from parplan_gen.planning.constraints import estimate_env
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.formula_explain import MAX_EXPLAIN_NODES, FormulaNode, explain_name
from parplan_gen.rules.ruleset import RuleSet


def explain_estimate(
    model: TrainedModel,
    cluster: Cluster,
    estimate: Estimate,
    name: str,
    rules: RuleSet,
    *,
    flash_attention: bool = True,
    memory_headroom: MemoryHeadroom = NO_HEADROOM,
    max_depth: int | None = None,
    max_nodes: int = MAX_EXPLAIN_NODES,
) -> FormulaNode:
    """The tree of `name` (a figure, `time.step_s`, or a named formula, `dp_comm_s`) in the
    evaluation that gave `estimate` (what `estimate(...)` returned: its layout, on its backend)
    under `rules`, keeping `memory_headroom` free. `max_depth`: levels shown below `name` (None:
    down to the inputs)."""
    backend = None if estimate.backend is None else estimate.backend.name
    evaluator = Evaluator(rules, model.kind, backend)
    env = evaluator.env(
        model,
        cluster,
        estimate.plan,
        flash_attention=flash_attention,
        memory_headroom=memory_headroom,
    )
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
