"""parplan_gen: turn a model and a GPU cluster into a distributed-training plan.

The public API is small; everything else is private to the package:

    import parplan_gen
    graph = parplan_gen.load_graph("examples/tiny_mlp.yaml")
    rules = parplan_gen.load_rules()              # built-in rules, plus any overlay dirs
    parplan_gen.analyze(graph, rules)             # opportunities, as the seed orders them
    parplan_gen.propose(graph, rules, devices=8)  # proposals with their settings

    plan = parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512)
    plan.deepspeed_config()                       # dict for deepspeed.initialize(config=...)
    plan.megatron_args()                          # pretrain_gpt.py argument list
    plan.write("plan/")                           # every launch file, rendered
    parplan_gen.estimate("llama-3-8b", {"gpus": 8, "gpu": "h100"}, {"tp": 2, "global_batch": 512})
    parplan_gen.check("llama-3-8b", {"gpus": 8, "gpu": "h100"}, layout)  # rules broken, better
    parplan_gen.compare("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512)  # why
    parplan_gen.explain("llama-3-8b", {"gpus": 8, "gpu": "h100"}, {"tp": 2, "global_batch": 512},
                        "time.step_s").render()  # the formulas behind a figure, as a tree
    parplan_gen.frontier("llama-3-8b", ["h100", "b200"], [64, 128], global_batch=1024,
                         tokens="1T", gpu_hour_price={"h100": 2.5, "b200": 4.0})  # days vs cost
    parplan_gen.measure(quick=True, out="cluster.yaml")  # `parplan profile`: needs torch, a GPU
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__", "analyze", "check", "compare", "estimate", "explain", "frontier", "load_graph",
    "load_rules", "measure", "plan", "plan_all_backends", "propose",
]  # fmt: skip

if TYPE_CHECKING:
    from parplan_gen.api import (
        check,
        compare,
        estimate,
        explain,
        frontier,
        measure,
        plan,
        plan_all_backends,
    )
    from parplan_gen.models.graph import load_graph
    from parplan_gen.rules.engine import analyze, propose
    from parplan_gen.rules.ruleset import load_rules

_LAZY = {
    "analyze": "parplan_gen.rules.engine",
    "propose": "parplan_gen.rules.engine",
    "load_graph": "parplan_gen.models.graph",
    "load_rules": "parplan_gen.rules.ruleset",
    "plan": "parplan_gen.api",
    "plan_all_backends": "parplan_gen.api",
    "estimate": "parplan_gen.api",
    "check": "parplan_gen.api",
    "compare": "parplan_gen.api",
    "explain": "parplan_gen.api",
    "frontier": "parplan_gen.api",
    "measure": "parplan_gen.api",
}


def __getattr__(name: str) -> Any:
    """Import the API lazily so that `parplan --help` stays fast."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'parplan_gen' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
