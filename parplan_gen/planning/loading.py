"""Load what the API is given: a model (a loaded spec, a preset name, a config or graph file),
a cluster (a Cluster, a ClusterSetup, a cluster file, or the CLI's flags as a dict), with the
launch site and budget inputs that go with it, and the rules (a loaded RuleSet, or rule
directories to layer over the built-in ones). `api` re-exports `load_model` and
`load_cluster_spec`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from parplan_gen.cost.budget_figures import BudgetInputs
from parplan_gen.cost.hardware import Cluster, ClusterSetup
from parplan_gen.cost.launch_site import LaunchSettings
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.rules import ruleset
from parplan_gen.rules.ruleset import RuleSet

HARDWARE_KEYS = ("gpus", "gpu", "gpus_per_node", "inter_node_gbps", "nvlink_domain")
SITE_KEYS = ("slurm_account", "slurm_partition", "slurm_time", "cpus_per_node")  # the launch site
CLUSTER_KEYS = (*HARDWARE_KEYS, *SITE_KEYS)
ClusterArgument = Cluster | ClusterSetup | Mapping[str, Any] | str | Path


def load_model(model: AnyModelSpec | str | Path) -> AnyModelSpec:
    """A loaded model (ModelSpec, GraphModelSpec) as given, else what a preset name (`parplan
    models`), a Hugging Face config.json, a graph file or an ONNX model describes."""
    if not isinstance(model, str | Path):
        return model
    from parplan_gen.models.load import load_model as resolve

    return resolve(str(model))


def load_cluster_spec(cluster: ClusterArgument) -> Cluster:
    """The hardware of a Cluster, a ClusterSetup, a cluster file, or the CLI flags as a dict
    (`load_cluster_setup`)."""
    return load_cluster_setup(cluster).cluster


def load_cluster_setup(
    cluster: ClusterArgument,
    *,
    launch: LaunchSettings | Mapping[str, Any] | None = None,
    budget_inputs: BudgetInputs | Mapping[str, Any] | None = None,
) -> ClusterSetup:
    """The hardware, launch site and budget inputs of a Cluster (the hardware alone), a
    ClusterSetup (`hardware.load_cluster_file`; `ClusterSetup.with_slurm(...)` replaces its
    SLURM settings), a cluster file, or the CLI flags as a dict (CLUSTER_KEYS, all but `gpus`
    and `gpu` optional; the `slurm_*` and `cpus_per_node` keys are the launch site's). `launch`
    and `budget_inputs`, where given (a LaunchSettings / BudgetInputs or a mapping of its
    fields), replace the ones the cluster gives."""
    from parplan_gen.cost.hardware import cluster_from_flags, load_cluster_file

    if isinstance(cluster, ClusterSetup):
        setup = cluster
    elif isinstance(cluster, Cluster):
        setup = ClusterSetup(cluster=cluster)
    elif isinstance(cluster, str | Path):
        setup = load_cluster_file(cluster)
    else:
        unknown = sorted(set(cluster) - set(CLUSTER_KEYS))
        missing = [k for k in CLUSTER_KEYS[:2] if k not in cluster]
        if unknown or missing:
            raise InputError(
                f"cluster dict: unknown keys {unknown}, missing {missing} (keys: {', '.join(CLUSTER_KEYS)})"
            )
        hardware = cluster_from_flags(**{k: v for k, v in cluster.items() if k in HARDWARE_KEYS})
        slurm = {k.removeprefix("slurm_"): v for k, v in cluster.items() if k in SITE_KEYS}
        setup = ClusterSetup(cluster=hardware).with_slurm(**slurm)
    if launch is None and budget_inputs is None:
        return setup
    site = setup.launch if launch is None else _part("launch", LaunchSettings, launch)
    problem = None if site is None else site.names_problem(setup.cluster.num_nodes)
    if problem:
        raise InputError(f"launch.node_names: {problem}")
    inputs = setup.budget_inputs
    if budget_inputs is not None:
        inputs = _part("budget_inputs", BudgetInputs, budget_inputs)
    return ClusterSetup(cluster=setup.cluster, launch=site, budget_inputs=inputs)


Part = TypeVar("Part", LaunchSettings, BudgetInputs)


def _part(parameter: str, model: type[Part], value: Part | Mapping[str, Any]) -> Part:
    """`value` as `model` (a mapping of its fields is validated); an InputError names the
    parameter and the field."""
    if isinstance(value, model):
        return value
    if not isinstance(value, Mapping):
        raise InputError(f"{parameter}: expected a {model.__name__} or a mapping of its fields")
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        raise _field_error(parameter, exc) from None


def _field_error(parameter: str, exc: ValidationError) -> InputError:
    """The first of `exc`'s errors, at `parameter.field`."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in (parameter, *first["loc"]))
    return InputError(f"{where}: {first['msg']}")


def load_ruleset(rules: Sequence[str | Path] | RuleSet) -> RuleSet:
    """A loaded RuleSet as given, else the built-in rules with the directories of `rules`
    layered over them (`ruleset.load_rules`, looked up when called)."""
    if isinstance(rules, RuleSet):
        return rules
    return ruleset.load_rules(rules)
