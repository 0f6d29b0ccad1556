"""`compare`: the chosen plan, the runner-up and the caller's layouts side by side, and why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan_gen.api.estimates import estimate
from parplan_gen.api.plans import plan
from parplan_gen.api.wording import parameter_wording
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Layout
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.planning.loading import load_cluster_spec, load_model, load_ruleset

if TYPE_CHECKING:
    from parplan_gen.render.compare import Comparison


@parameter_wording
def compare(
    model: AnyModelSpec | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    *,
    global_batch: int,
    seq_len: int | None = None,
    layouts: Sequence[Layout | Mapping[str, Any]] = (),
    runner_up: bool = True,
    **request: Any,
) -> Comparison:
    """The chosen plan (`plan` with `request`'s options), the runner-up (unless `runner_up` is
    False) and each of `layouts` (a Layout, or its fields as for `estimate`, where a `backend`
    key names the backend whose rules judge it) side by side, term by term, with one sentence
    per term that differs saying why the chosen plan wins there (render/compare.py)."""
    from parplan_gen.render.compare import compare_estimates, fit_problem

    ruleset = load_ruleset(request.pop("rules", ()))
    spec, machines = load_model(model), load_cluster_spec(cluster)
    found = plan(
        spec, machines, global_batch=global_batch, seq_len=seq_len, rules=ruleset, **request
    )
    doc, flash = found.document, request.get("flash_attention", True)
    columns = [("chosen", doc.chosen, fit_problem(doc.chosen))]
    columns += [("runner-up", e, fit_problem(e)) for e in doc.runners_up[:runner_up]]
    for given in layouts:
        fields: Layout | dict[str, Any] = (
            given
            if isinstance(given, Layout)
            else {"global_batch": global_batch, "seq_len": doc.chosen.plan.seq_len, **given}
        )
        backend = fields.pop("backend", None) if isinstance(fields, dict) else None
        mine = estimate(
            spec,
            machines,
            fields,
            rules=ruleset,
            flash_attention=flash,
            backend=backend,
            headroom=doc.search.memory_headroom,  # judged as the plan's columns are
        )
        columns.append(("yours", mine.estimate, mine.problem()))
    return compare_estimates(machines, columns, spec.time_parts, spec.layout_dims)
