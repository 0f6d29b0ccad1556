"""The Python API for training repositories: plan a job, then take its DeepSpeed config or its
Megatron-LM arguments, or write plan.json.

    import parplan_gen
    plan = parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"},
                            global_batch=512, seq_len=8192)
    plan.chosen.plan.tp               # the chosen layout (a Layout)
    plan.document                     # the plan: what plan.json holds, the views and files read
    ds_config = plan.deepspeed_config()   # deepspeed.initialize(config=ds_config)
    argv = plan.megatron_args()           # pretrain_gpt.py arguments
    plan.write("plan/")                   # plan.json
    result = parplan_gen.estimate("llama-3-8b", {"gpus": 8, "gpu": "h100"},
                                  {"tp": 2, "global_batch": 512, "seq_len": 8192})
    result.fits, result.violations       # the memory rules' verdict, every rule broken
    parplan_gen.compare("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512)  # why

One module per job: `plans` (`plan`, `Plan`), `per_backend` (`plan_all_backends`),
`estimates` (`estimate`, `explain`), `checks` (`check`, `CheckReport`), `comparison` (`compare`),
`frontier` (`frontier`: days against cost over GPU types and counts),
`measuring` (`measure`: `parplan profile`) and `wording` (errors name the API's parameters, the
CLI's flags under `flag_wording`). Each is imported when one of its names is first asked for, so
that `parplan --help` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parplan_gen.api.checks import CheckReport, check
    from parplan_gen.api.comparison import compare
    from parplan_gen.api.estimates import estimate, explain
    from parplan_gen.api.frontier import frontier
    from parplan_gen.api.measuring import measure
    from parplan_gen.api.per_backend import BackendOutcome, plan_all_backends
    from parplan_gen.api.plans import Plan, plan, proposals_for
    from parplan_gen.planning.loading import load_cluster_spec, load_model
    from parplan_gen.planning.planner import PlanError
    from parplan_gen.rules.ruleset import load_rules

_MODULE_OF = {
    "Plan": "parplan_gen.api.plans",
    "plan": "parplan_gen.api.plans",
    "proposals_for": "parplan_gen.api.plans",
    "BackendOutcome": "parplan_gen.api.per_backend",
    "plan_all_backends": "parplan_gen.api.per_backend",
    "estimate": "parplan_gen.api.estimates",
    "explain": "parplan_gen.api.estimates",
    "CheckReport": "parplan_gen.api.checks",
    "check": "parplan_gen.api.checks",
    "compare": "parplan_gen.api.comparison",
    "frontier": "parplan_gen.api.frontier",
    "measure": "parplan_gen.api.measuring",
    "load_model": "parplan_gen.planning.loading",
    "load_cluster_spec": "parplan_gen.planning.loading",
    "PlanError": "parplan_gen.planning.planner",
    "load_rules": "parplan_gen.rules.ruleset",
}
__all__ = [
    "BackendOutcome",
    "CheckReport",
    "Plan",
    "PlanError",
    "check",
    "compare",
    "estimate",
    "explain",
    "frontier",
    "load_cluster_spec",
    "load_model",
    "load_rules",
    "measure",
    "plan",
    "plan_all_backends",
    "proposals_for",
]


def __getattr__(name: str) -> Any:
    """The API's names, each imported from its module when first asked for."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'parplan_gen.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
