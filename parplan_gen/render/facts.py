"""The canonical facts of one plan: every value the mapping can send to a backend.

`facts(doc, mapping)` returns one flat dict with the same keys for every plan (a value is None
where it does not apply): model.*, plan.*, train.*, cluster.*, comm.*, and each backend's own,
megatron.*, deepspeed.*, torchtitan.*, accelerate.* (its folder's facts.py, parplan_gen/backends/<name>/).
A transformer has no graph-model fields and an op-graph model no transformer fields (None), and
no Megatron-LM spelling (every megatron.* None): a mapping that names a key reads for both.
Spellings that follow a backend's rules (its CUDA_DEVICE_MAX_CONNECTIONS assertion, DeepSpeed's
ZeRO stage for a distributed-optimizer plan) are made there, each with its source in a comment.
The cluster.* facts read the hardware (plan.json `cluster`) and the launch site (`launch`: the
NICs, interface and RoCE settings NCCL is given); `cluster.socket_transport` says that the
nodes talk over a catalog network of kind `ethernet` (TCP sockets: parplan_gen/data/networks.yaml),
whose nccl.env names NCCL's socket transport. How long the files train and when they save
(the budget's steps and checkpoint interval, the SLURM time limit's exit) are
render/run_length.py's.
What the planner and the cost model decided is read from its one home, not computed again: the
pipeline split (models/pipeline_split.py, which the constraint pipeline.layers_split calls),
the learned-position limit (ModelSpec.positions_cover, read by the constraint
model.seq_len_within_learned_positions), SyncBatchNorm (the estimate's
TimeBreakdown.sync_batchnorm), and what the plan's rules decided for each backend that runs
it: the gradients' type, the optimizer sharding, the TP and EP overlaps (plan.json's
`decisions`, planning/decisions.py), and the gradient-reduction overlap the search options
chose (plan.json's `search`).
"""

from __future__ import annotations

from typing import Any

from parplan_gen.backends.accelerate.facts import accelerate_facts
from parplan_gen.backends.deepspeed.facts import deepspeed_facts
from parplan_gen.backends.megatron.facts import megatron_facts
from parplan_gen.backends.torchtitan.facts import torchtitan_facts
from parplan_gen.cost.catalog import load_catalog
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.launch_site import LaunchSettings
from parplan_gen.cost.layout import SIXTEEN_BIT, Layout
from parplan_gen.models.any_model import graph_of
from parplan_gen.models.kind import TrainedModel
from parplan_gen.models.load import MODEL_FACT_NAMES
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.mapping_schema import MappingFile
from parplan_gen.render.run_length import run_facts
from parplan_gen.render.training_facts import training_facts


def facts(doc: PlanDocument, mapping: MappingFile, *, hf_trainer: bool = False) -> dict[str, Any]:
    """Every canonical key of `doc`'s chosen plan (`hf_trainer`: DeepSpeed under the HF Trainer)."""
    layout = doc.chosen.plan
    out: dict[str, Any] = {}
    out |= _model_facts(doc.model)
    out |= _plan_facts(layout)
    out |= _train_facts(layout, mapping)
    out |= _graph_training_facts(doc)
    out |= _cluster_facts(doc.cluster, doc.launch or LaunchSettings(), mapping)
    # Megatron-FSDP: ZeRO-2/3 of a plan priced on Megatron (its files are written for no other).
    fsdp = doc.chosen.backend is not None and doc.chosen.backend.name == "megatron"
    decided = doc.decisions
    out |= megatron_facts(
        doc.model, layout, doc.cluster, mapping, out, fsdp=fsdp, decided=decided.get("megatron")
    )
    out |= deepspeed_facts(layout, decided.get("deepspeed"))
    out |= torchtitan_facts(
        doc.model, layout, mapping, decided.get("torchtitan"), doc.cluster.gpu.architecture
    )
    out |= accelerate_facts(layout)
    out |= training_facts(doc.model, layout, doc.budget.steps if doc.budget else None)
    out |= run_facts(doc, mapping.slurm)
    out |= {
        "deepspeed.hf_trainer": hf_trainer,
        # the budget priced an asynchronous checkpoint (rules/budget/budget.yaml)
        "budget.checkpoint_async": doc.budget is not None and doc.budget.checkpoint_async,
    }
    return out


def _model_facts(spec: TrainedModel) -> dict[str, Any]:
    """model.<field> of both kinds of model (None where `spec` has no such field), model.kind."""
    return dict.fromkeys(MODEL_FACT_NAMES) | spec.facts()


def _plan_facts(layout: Layout) -> dict[str, Any]:
    out = {f"plan.{k}": v for k, v in layout.model_dump().items()}
    out |= {
        "plan.world_size": layout.world_size,
        "plan.pipeline": layout.pp > 1,
        "plan.tensor_parallel": layout.tp > 1,
        "plan.model_parallel": layout.tp * layout.pp * layout.cp > 1,
        "plan.expert_parallel": layout.ep > 1,
        "plan.recompute_enabled": layout.recompute != "none",
        "plan.recompute_full": layout.recompute == "full",
        "plan.offload_enabled": layout.offload_layers > 0,
        # Megatron-LM validate_args turns sequence parallelism off when tp == 1.
        "plan.sequence_parallel": layout.sequence_parallel and layout.tp > 1,
    }
    return out


def _train_facts(layout: Layout, mapping: MappingFile) -> dict[str, Any]:
    out = {key: default.value for key, default in mapping.defaults.items()}
    out |= {
        "train.precision": layout.precision,
        "train.bf16": SIXTEEN_BIT[layout.precision] == "bf16",
        "train.fp16": layout.precision == "fp16",
        "train.fp8": layout.precision == "fp8",
    }
    return out


def _graph_training_facts(doc: PlanDocument) -> dict[str, Any]:
    """What an op-graph model's training script does for the plan to hold (False / None for a
    transformer, whose Megatron-LM or DeepSpeed code does it)."""
    graph = graph_of(doc.model)
    layout = doc.chosen.plan
    full = graph is not None and layout.recompute == "full"
    return {
        "train.sync_batchnorm": graph is not None and doc.chosen.time.sync_batchnorm,
        # Channel-parallel Conv2d / MatMul layers (graph_model.py): the script splits them.
        "train.channel_parallel": graph is not None and layout.tp > 1,
        # Full recompute: the script checkpoints about every sqrt(n)-th node (Chen et al. 2016),
        # as rules/cost/graph.yaml graph_stored_fraction assumes.
        "train.graph_checkpointing": full,
    }


def _cluster_facts(cluster: Cluster, site: LaunchSettings, mapping: MappingFile) -> dict[str, Any]:
    """The hardware's facts, and the NCCL settings of the launch site (`site`)."""
    arch = cluster.gpu.architecture
    return {
        "cluster.name": cluster.name,
        "cluster.gpu": cluster.gpu.name,
        "cluster.architecture": arch,
        "cluster.num_gpus": cluster.num_gpus,
        "cluster.num_nodes": cluster.num_nodes,
        "cluster.procs_per_node": cluster.procs_per_node,
        "cluster.multi_node": cluster.multi_node,
        # the cluster file's nccl: NICs, interface, and RoCE's ib_gid_index / ib_tc
        "cluster.ib_hcas": ",".join(site.ib_hcas) if site.ib_hcas else None,
        "cluster.socket_ifname": site.socket_ifname,
        "cluster.ib_gid_index": site.ib_gid_index,
        "cluster.ib_tc": site.ib_tc,
        "cluster.nvls": nvls(cluster, mapping),
        "cluster.socket_transport": cluster.multi_node and network_kind(cluster) == "ethernet",
    }


def network_kind(cluster: Cluster) -> str | None:
    """The kind of the cluster's catalog network (infiniband, roce, ethernet); None for a
    network given as a bandwidth, or one this catalog does not hold."""
    if cluster.network is None:
        return None
    network = load_catalog().networks.get(cluster.network)
    return None if network is None else network.kind


def nvls(cluster: Cluster, mapping: MappingFile) -> bool:
    """NVLink SHARP, and the CUDA multicast objects it rests on, are there: a third-generation
    NVSwitch (Hopper and later; NCCL docs, NVLS)."""
    return cluster.nvswitch and cluster.gpu.architecture in mapping.nccl.nvls_architectures
