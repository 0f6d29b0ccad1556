"""`plan_all_backends`: each backend's own best plan (`plan --all-backends`), or the typed error
that says why a backend runs nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeAlias

from parplan_gen.api.plans import Plan, plan
from parplan_gen.api.wording import parameter_wording, reword
from parplan_gen.inputs.errors import NothingFitsError
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.models.kind import ANY_BACKEND
from parplan_gen.planning.loading import (
    ClusterArgument,
    load_cluster_setup,
    load_model,
    load_ruleset,
)
from parplan_gen.planning.planner import PlanError
from parplan_gen.planning.search_space import backends_for

# What one backend's search gives: its own best plan; a PlanError when no layout of it can run
# at all; a NothingFitsError when some can run but none fits (its closest layout's memory).
BackendOutcome: TypeAlias = Plan | PlanError | NothingFitsError


@parameter_wording
def plan_all_backends(
    model: AnyModelSpec | str | Path,
    cluster: ClusterArgument,
    **request: Any,
) -> dict[str, BackendOutcome]:
    """`plan` per backend of `backend` (default any), each search restricted to it (`plan
    --all-backends`), with `plan`'s other keyword arguments: backend -> its own best plan
    (labelled `best_on` it), or the error that says why it runs nothing (BackendOutcome)."""
    spec = load_model(model)
    request["rules"] = load_ruleset(request.pop("rules", ()))  # loaded once for every backend
    machines = load_cluster_setup(  # the cluster's three parts, loaded once for every backend
        cluster,
        launch=request.pop("launch", None),
        budget_inputs=request.pop("budget_inputs", None),
    )
    found: dict[str, BackendOutcome] = {}
    for name in backends_for(spec, request.pop("backend", ANY_BACKEND)):
        try:
            one = plan(spec, machines, backend=name, **request)
        except PlanError as exc:
            found[name] = exc
            continue
        if one.feasible:
            label = {"best_on": name}
            found[name] = one.model_copy(update={"document": one.document.model_copy(update=label)})
            continue
        found[name] = reword(NothingFitsError(f"nothing fits ({one.closest_needs()})"))
    return found
