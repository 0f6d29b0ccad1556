"""Load what the API is given: a model (a loaded spec, a preset name, a config or graph file),
a cluster (a Cluster, a cluster file, or the CLI's flags as a dict) and the rules (a loaded
RuleSet, or rule directories to layer over the built-in ones). `api` re-exports the first two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from parplan_gen.cost.hardware import Cluster
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.rules import ruleset
from parplan_gen.rules.ruleset import RuleSet

CLUSTER_KEYS = (
    "gpus", "gpu", "gpus_per_node", "inter_node_gbps", "nvlink_domain",
    "slurm_account", "slurm_partition", "slurm_time", "cpus_per_node",
)  # fmt: skip


def load_model(model: AnyModelSpec | str | Path) -> AnyModelSpec:
    """A loaded model (ModelSpec, GraphModelSpec) as given, else what a preset name (`parplan
    models`), a Hugging Face config.json, a graph file or an ONNX model describes."""
    if not isinstance(model, str | Path):
        return model
    from parplan_gen.models.load import load_model as resolve

    return resolve(str(model))


def load_cluster_spec(cluster: Cluster | Mapping[str, Any] | str | Path) -> Cluster:
    """A Cluster, a cluster file, or the CLI flags as a dict (CLUSTER_KEYS, all but `gpus` and
    `gpu` optional); `Cluster.with_slurm(...)` replaces a cluster file's SLURM settings."""
    from parplan_gen.cost.hardware import cluster_from_flags, load_cluster

    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, str | Path):
        return load_cluster(cluster)
    unknown = sorted(set(cluster) - set(CLUSTER_KEYS))
    missing = [k for k in CLUSTER_KEYS[:2] if k not in cluster]
    if unknown or missing:
        raise InputError(
            f"cluster dict: unknown keys {unknown}, missing {missing} (keys: {', '.join(CLUSTER_KEYS)})"
        )
    return cluster_from_flags(**cluster)


def load_ruleset(rules: Sequence[str | Path] | RuleSet) -> RuleSet:
    """A loaded RuleSet as given, else the built-in rules with the directories of `rules`
    layered over them (`ruleset.load_rules`, looked up when called)."""
    if isinstance(rules, RuleSet):
        return rules
    return ruleset.load_rules(rules)
