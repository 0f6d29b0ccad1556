"""`estimate`: one layout's memory, time and throughput, and every constraint rule it breaks;
`explain`: why one of its figures has its value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from parplan_gen.api.wording import parameter_wording
from parplan_gen.cost.estimate import NO_HEADROOM, Estimate, MemoryHeadroom
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Layout, build_layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.models.kind import ANY_BACKEND
from parplan_gen.planning.evaluate import Evaluation, evaluate
from parplan_gen.planning.explain_estimate import explain_estimate
from parplan_gen.planning.loading import load_cluster_spec, load_model, load_ruleset
from parplan_gen.planning.pins import Headroom, SearchLimits, headroom_record, parse_headroom
from parplan_gen.planning.search_space import backends_for
from parplan_gen.rules.formula_explain import MAX_EXPLAIN_NODES, FormulaNode
from parplan_gen.rules.ruleset import RuleSet


@parameter_wording
def estimate(
    model: AnyModelSpec | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    layout: Layout | Mapping[str, Any],
    *,
    rules: Sequence[str | Path] | RuleSet = (),
    flash_attention: bool = True,
    backend: str | None = None,
    headroom: float | str | Headroom | MemoryHeadroom | None = None,
) -> Evaluation:
    """Estimate one layout: its memory, time and throughput, and every constraint rule it
    breaks; `fits` is the memory rules' verdict. `layout` is a Layout or its sizes as a dict
    (`{"tp": 2, "global_batch": 512, "seq_len": 8192}`; dp defaults to what the other sizes
    leave, `seq_len` to 2048 tokens for a transformer); `rules` layers rule directories over
    the built-in ones (or is a loaded RuleSet). `backend`: the backend whose rules judge it
    (None: the first of the model's backends that runs it). `headroom`: what the memory rules
    keep free per GPU, as `plan` takes it (GiB, `"10%"` of the GPU's, `"default"`: the rule's
    share of the layout's tensors) or as a plan recorded it (`plan.document.search.
    memory_headroom`); None (the default): nothing, the layout is judged against the whole GPU."""
    ruleset = load_ruleset(rules)
    spec, machines = load_model(model), load_cluster_spec(cluster)
    names = None if backend in (None, ANY_BACKEND) else backends_for(spec, backend)
    if not isinstance(layout, Layout):
        sizes = dict(layout)
        sizes["seq_len"] = spec.sequence_length(sizes.get("seq_len"))
        layout = build_layout(machines.num_gpus, **sizes)
    return evaluate(
        spec,
        machines,
        layout,
        ruleset,
        flash_attention=flash_attention,
        backend=None if names is None else names[0],
        memory_headroom=_memory_headroom(headroom, machines, ruleset, layout.precision),
    )


def _memory_headroom(
    headroom: float | str | Headroom | MemoryHeadroom | None,
    cluster: Cluster,
    rules: RuleSet,
    precision: str,
) -> MemoryHeadroom:
    """What the memory rules keep free for `estimate(headroom=)`: nothing for None, a plan's
    recorded headroom as it is (checked), else what `plan(headroom=)` would keep."""
    if headroom is None:
        return NO_HEADROOM
    if isinstance(headroom, MemoryHeadroom):
        if not (0 <= headroom.bytes < cluster.gpu.memory_bytes and 0 <= headroom.share < 1):
            raise InputError(
                f"headroom: {headroom.bytes:g} bytes and {headroom.share:g} of the tensors "
                f"(valid: bytes from 0 to below the GPU's {cluster.gpu.memory_bytes}, a share from "
                "0 to below 1)"
            )
        return headroom
    record = headroom_record(parse_headroom(headroom), SearchLimits(), cluster, rules, precision)
    return record.memory_headroom


@parameter_wording
def explain(
    model: AnyModelSpec | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    layout: Estimate | Layout | Mapping[str, Any],
    name: str,
    *,
    rules: Sequence[str | Path] | RuleSet = (),
    flash_attention: bool = True,
    backend: str | None = None,
    headroom: float | str | Headroom | MemoryHeadroom | None = None,
    max_depth: int | None = None,
    max_nodes: int = MAX_EXPLAIN_NODES,
) -> FormulaNode:
    """Why `name` of one layout's estimate has its value, as a tree (`.render()` for text,
    `.contract()` for JSON): `parplan_gen.explain("llama-3-8b", {"gpus": 8, "gpu": "h100"},
    {"tp": 2, "global_batch": 512}, "time.step_s")`. The arguments are `estimate`'s; `layout`
    may also be the Estimate it returned (its layout, on its backend)."""
    ruleset = load_ruleset(rules)
    spec, machines = load_model(model), load_cluster_spec(cluster)
    if not isinstance(layout, Estimate):  # its layout on its backend (the headroom moves neither)
        layout = estimate(
            spec, machines, layout, rules=ruleset, flash_attention=flash_attention, backend=backend
        ).estimate
    return explain_estimate(
        spec,
        machines,
        layout,
        name,
        ruleset,
        flash_attention=flash_attention,
        memory_headroom=_memory_headroom(headroom, machines, ruleset, layout.plan.precision),
        max_depth=max_depth,
        max_nodes=max_nodes,
    )
