"""What the launch files format (templates/launch/*): the nodes and their ranks, the hostfile's
host names, and launch_slurm.sbatch's SLURM options.

Host names are the cluster file's `node_names` when it gives them, else placeholders
(`node-0`, ...) that the hostfile marks as such. `--cpus-per-task` of the one task per node is
asked for only when the cluster file's `cpus_per_node` (or --cpus-per-node) gives the node's
CPUs; else none is asked for and the sbatch file says so: `--exclusive` gives the job every CPU
of its nodes, and an srun step given no --cpus-per-task (nor --exact) uses all of them (srun(1)
--exact). Account, partition and time limit are written only when the cluster file or the
flags give them; with a time limit, the sbatch file says how megatron_args.sh saves before it
(render/run_length.py). Every user-given word passes `shell_quote.name_word` / `directive`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.launch_site import LaunchSettings
from parplan_gen.inputs.safe_text import safe_name
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.checks import RenderError
from parplan_gen.render.mapping import LoadedMapping, notes
from parplan_gen.render.mapping_schema import ENV_DEFAULT, EnvDefault, SlurmMapping
from parplan_gen.render.shell_quote import directive, name_word

JOB_PREFIX = "parplan-"  # the SLURM job and rendezvous id: parplan-<model name>
PLACEHOLDER_HOST = "node-{index}"  # a hostfile line when the cluster file names no nodes


def env_var(entry: EnvDefault, facts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An environment variable with its shell expansion, `${NAME:-default}`; a `key` default
    is that fact's value in `facts`, else (the fact has none) the entry's `default`."""
    default = entry.default
    if entry.key is not None:
        value = None if facts is None else facts.get(entry.key)
        if value is None and default is not None:
            value = default
        if value is None or not re.fullmatch(ENV_DEFAULT, str(value)):
            raise RenderError(f"{entry.name}: its default {entry.key} is {value!r}")
        default = str(value)
    shown = entry.model_dump() | {"default": default}
    return {**shown, "expansion": f"${{{entry.name}:-{default}}}"}


def launch_context(
    doc: PlanDocument, mapping: LoadedMapping, values: dict[str, Any]
) -> dict[str, Any]:
    """The `launch` of the templates' context."""
    cluster = doc.cluster
    settings = doc.launch or LaunchSettings()
    per_node = cluster.procs_per_node
    given = settings.node_names
    names = (
        [name_word(n, "node name") for n in given]
        if given is not None
        else [PLACEHOLDER_HOST.format(index=i) for i in range(cluster.num_nodes)]
    )
    hosts = [{"name": name, "slots": per_node} for name in names]
    launch = mapping.data.launch
    return {
        "nnodes": cluster.num_nodes,
        "nproc_per_node": per_node,
        "world_size": cluster.num_gpus,
        "multi_node": cluster.multi_node,
        "hosts": hosts,
        "placeholder_hosts": given is None,
        "first_host": hosts[0]["name"],
        "last_host": hosts[-1]["name"],
        "job_name": JOB_PREFIX + safe_name(doc.model.name, fallback="plan"),
        "master_port": env_var(launch.master_port),
        # What the training script does for the plan (an op-graph model's; plan.md says why).
        "notes": notes(mapping, launch.notes, values, ("launch", "notes")),
        "slurm": _slurm(cluster, settings, mapping.data.slurm),
    }


def _slurm(cluster: Cluster, settings: LaunchSettings, slurm: SlurmMapping) -> dict[str, Any]:
    cpus, why = cpus_per_task(cluster, settings)
    site = {
        "account": settings.slurm_account,
        "partition": settings.slurm_partition,
        "time": settings.slurm_time,
    }
    return {
        "cpus_per_task": cpus,
        "cpus_source": why,
        # srun's own option: since Slurm 22.05 it does not inherit sbatch's (sbatch(1))
        "srun_cpus": "" if cpus is None else f" --cpus-per-task={cpus}",
        "directives": [directive(option, value) for option, value in site.items() if value],
        "time": settings.slurm_time,
        "exit_reserve_minutes": slurm.exit_reserve_minutes.value,
    }


def cpus_per_task(cluster: Cluster, settings: LaunchSettings) -> tuple[int | None, str]:
    """--cpus-per-task of the one task per node (torchrun and the node's ranks), and why: the
    CPUs of the node's GPUs that the plan uses, from the launch site's `cpus_per_node`; None
    (ask for none, SLURM's default) when the site does not give it."""
    used, gpn = cluster.procs_per_node, cluster.gpus_per_node
    share = f"{used} of {gpn} GPUs" if used < gpn else f"all {gpn} GPUs"
    given = settings.cpus_per_node
    if given is None:
        return None, (
            "no --cpus-per-task: the cluster file gives no cpus_per_node (nor --cpus-per-node), "
            "so SLURM's default applies; --exclusive gives the job every CPU of its nodes and "
            "srun's step, given no --cpus-per-task or --exact, uses all of them (srun(1) --exact)"
        )
    cpus = max(1, given * used // gpn)
    why = f"cpus_per_node ({given}, the cluster file's or --cpus-per-node) for {share} of the node"
    return cpus, why
