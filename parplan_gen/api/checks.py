"""`check`: an existing layout's evaluation (every rule it breaks, its estimate) and a better
plan when the planner finds one; `CheckReport`, what it returns."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parplan_gen.api.estimates import estimate
from parplan_gen.api.plans import search_plan
from parplan_gen.api.wording import parameter_wording
from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Layout, given_layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.models.kind import ANY_BACKEND, TrainedModel
from parplan_gen.planning.evaluate import Evaluation
from parplan_gen.planning.loading import load_cluster_spec, load_model, load_ruleset
from parplan_gen.planning.planner import PlanError
from parplan_gen.planning.sanity import sanity_warnings
from parplan_gen.rules.ruleset import RuleSet


@dataclass(frozen=True)
class CheckReport(Evaluation):
    """`parplan check`: the layout's evaluation (its estimate and every rule it breaks) and a
    better plan if the planner finds one."""

    model: TrainedModel
    cluster: Cluster
    better: Estimate | None  # the planner's choice when it is faster (or the layout cannot run)
    planner_found: bool = True  # False: no layout of the request fits and meets every rule

    @property
    def runs_as_given(self) -> bool:
        """No `invalid` rule is broken and it fits (the memory rules hold): `check` exits 0."""
        return self.runnable and self.fits

    @property
    def warnings(self) -> list[str]:
        """The sanity warnings on the layout (planning.sanity); never a reason to refuse it."""
        return sanity_warnings(self.model, self.cluster, self.estimate)

    def contract(self) -> dict[str, Any]:
        """JSON: the estimate, the violations, fits / by how much, whether it runs as given
        (and why not), and the better plan."""
        memory = self.estimate.memory
        return {
            **self.estimate.contract(),
            "violations": [dataclasses.asdict(v) for v in self.violations],
            "runnable": self.runnable,
            "over_capacity_bytes": max(0, memory.total - memory.capacity),
            "runs_as_given": self.runs_as_given,
            "problem": self.problem(),
            "better": None if self.better is None else self.better.contract(),
            "warnings": self.warnings,
        }


def check_model(
    model: AnyModelSpec | str | Path | None, from_megatron: str | Path | None
) -> AnyModelSpec:
    """The model a check judges: `model` loaded, else (None) the one the Megatron-LM script at
    `from_megatron` trains (backends/megatron/model_from_script.py)."""
    if model is not None:
        return load_model(model)
    if not from_megatron:
        raise InputError(
            "give a model, or --from-megatron: a Megatron-LM script, which states the model it "
            "trains"
        )
    from parplan_gen.backends.megatron.model_from_script import megatron_model

    return megatron_model(from_megatron)


@parameter_wording
def check(
    model: AnyModelSpec | str | Path | None,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    layout: Layout | Mapping[str, Any] | None = None,
    *,
    rules: Sequence[str | Path] | RuleSet = (),
    flash_attention: bool = True,
    backend: str | None = None,
    any_backend: bool = False,
    from_deepspeed: str | Path | None = None,
    from_megatron: str | Path | None = None,
    from_torchtitan: str | Path | None = None,
    from_accelerate: str | Path | None = None,
) -> CheckReport:
    """Check an existing layout on `backend` (None: the first of the model's backends that runs
    it): every rule it breaks, its estimate (also when it cannot run), and the planner's choice
    for the same batch on the same backend (`any_backend`: on any) when that is faster.
    `layout`: a Layout or, as `estimate` takes it, a dict (a bad one: `layout.KEY: ...`). As
    `parplan check --from-*`, `from_deepspeed` / `from_megatron` / `from_torchtitan` /
    `from_accelerate` read the layout from a backend's file (judged on that backend unless
    `backend` says), `layout` (a dict) then changing fields of it (render/readers.py).
    `model` None: the model the Megatron-LM script `from_megatron` trains, read from its
    arguments (a script of another model than a `model` given is refused)."""
    ruleset = load_ruleset(rules)
    spec, machines = check_model(model, from_megatron), load_cluster_spec(cluster)
    files = {
        "deepspeed": from_deepspeed,
        "megatron": from_megatron,
        "torchtitan": from_torchtitan,
        "accelerate": from_accelerate,
    }
    if any(files.values()):
        from parplan_gen.render.readers import layout_read

        if isinstance(layout, Layout):
            raise InputError("layout: with a file to read, give the fields it changes as a dict")
        layout = layout_read(
            spec,
            machines.num_gpus,
            layout or {},
            ruleset,
            deepspeed=from_deepspeed,
            megatron=from_megatron,
            torchtitan=from_torchtitan,
            accelerate=from_accelerate,
        )
        backend = backend or next(name for name, path in files.items() if path)
    elif layout is None:
        raise InputError("give a layout, or a file to read it from (from_megatron, ...)")
    with given_layout(layout) as given:  # a dict: estimate builds the Layout, as for its own
        found = estimate(
            spec, machines, given, rules=ruleset, flash_attention=flash_attention, backend=backend
        )
    layout, same = found.estimate.plan, found.estimate.backend
    try:  # plan()'s search for the same batch (its chosen layout is the plan's), nothing more
        best = search_plan(
            spec,
            machines,
            ruleset,
            global_batch=layout.global_batch,
            seq_len=layout.seq_len,
            precision=layout.precision,
            objective="time",
            top=1,
            flash_attention=flash_attention,
            backend=ANY_BACKEND if any_backend or same is None else same.name,
        ).result
    except PlanError:
        best = None
    faster = best is not None and best.chosen.time.step_s < found.estimate.time.step_s
    better = (
        best.chosen if best is not None and best.feasible and (found.violations or faster) else None
    )
    return CheckReport(
        found.estimate,
        found.violations,
        host_broken=found.host_broken,
        model=spec,
        cluster=machines,
        better=better,
        planner_found=best is not None and best.feasible,
    )
