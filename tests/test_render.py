"""Rendering a plan: golden files, parse-back checks, the sandbox, safe writes, determinism.

The four scenarios are built by hand here: three transformer plans (dense multi-node, MoE,
single node) from model presets, a hand-written GPU and hand-written estimates, and an op-graph
one (a ResNet-50-like GraphModelSpec with SyncBatchNorm and channel parallelism) from
hand-picked sums, so they do not move when the planner, the cost model or the hardware catalog
change.

Golden files: one per output type, all from the richest scenario (GOLDEN_CASE, dense
multi-node: tp, pp, four nodes, NCCL HCAs named), in tests/golden/dense_multinode/, compared
byte for byte; a difference is shown as a diff. The other scenarios are checked by targeted
assertions on the values that differ between scenarios (SCENARIO_VALUES), worked by hand from
each builder's inputs. There is no switch that rewrites a golden file: after an intended change,
render the scenario (`render_plan(dense_multinode())`, or apply the diff the failing test
prints), write the file, and review every changed line by hand before committing it; a golden
file pasted from the code under test without that review proves nothing.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import shutil
import stat
import subprocess
from pathlib import Path

import jinja2
import pytest
from jinja2 import nodes

from parplan_gen.cli.out_options import add_render_commands
from parplan_gen.cost.catalog import GPU, ReferenceNode
from parplan_gen.cost.estimate import Estimate, MemoryBreakdown, Throughput, TimeBreakdown
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.launch_site import LaunchSettings
from parplan_gen.cost.layout import Layout, build_layout
from parplan_gen.inputs.defaults import GIB
from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.kind import TrainedModel
from parplan_gen.models.presets import load_preset
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.document import PlanDocument, PlanDocumentError, load_plan_document
from parplan_gen.planning.pins import SearchLimits, SearchRecord, headroom_record, parse_headroom
from parplan_gen.planning.search_choices import SearchChoices, choose
from parplan_gen.render.checks import (
    RenderError,
    check_bash,
    check_ds_config,
    check_env,
    check_hostfile,
)
from parplan_gen.render.facts import facts
from parplan_gen.render.mapping import load_mapping
from parplan_gen.render.plan_files import deepspeed_config, megatron_args, render_plan
from parplan_gen.render.template_env import Templates
from parplan_gen.render.writer import write_rendered
from parplan_gen.rules.engine import Proposal

from conftest import REPO, builtin_rules

GOLDEN = Path(__file__).parent / "golden"
TEMPLATES = REPO / "templates"
BACKENDS_DIR = REPO / "parplan_gen" / "backends"  # each backend's mapping.yaml and templates
NCCL_REFERENCE = TEMPLATES / "nccl" / "nccl_env.yaml"
SHARED_REFERENCE = REPO.parent / "shared" / "reference" / "nccl_env.yaml"
HAS_BASH = shutil.which("bash") is not None


# ---- hand-built inputs ------------------------------------------------------------------------


def gpu(name: str, architecture: str, memory_gib: int, peak_tflops: float) -> GPU:
    """A GPU with datasheet-like figures, written here so the goldens ignore the catalog."""
    return GPU(
        name=name,
        display_name=name.upper(),
        vendor="nvidia",
        architecture=architecture,
        form_factor="sxm",
        memory_bytes=memory_gib * GIB,
        bf16_flops=peak_tflops * 1e12,
        fp16_flops=peak_tflops * 1e12,
        fp8_flops=2 * peak_tflops * 1e12,
        memory_bandwidth_bytes_per_s=3.35e12,
        intra_node_link="nvlink",
        intra_node_bytes_per_s=450e9,
        nvswitch=True,
        reference_node=ReferenceNode(system="DGX", network="ndr", nics_per_node=8, gpus_per_node=8),
    )


H100 = gpu("h100-sxm-80gb", "hopper", 80, 989)
A100 = gpu("a100-sxm-80gb", "ampere", 80, 312)
B200 = gpu("b200", "blackwell", 180, 2250)


def cluster(name: str, g: GPU, gpus: int, **fields: object) -> Cluster:
    """A cluster of nodes of 8 `g`, each node its NVLink domain unless `fields` (Cluster
    fields) says otherwise."""
    return Cluster(
        name=name,
        gpu=g,
        num_gpus=gpus,
        gpus_per_node=8,
        intra_node_latency_s=3e-6,
        inter_node_bytes_per_s=50e9,
        inter_node_latency_s=5e-6,
        **{"network": "ndr", "nvlink_domain": 8, **fields},
    )


# The golden plan's site: its nodes, their CPUs, the SLURM account / partition / time limit,
# the NICs and interface NCCL uses, and RoCE's GID index and traffic class (as a cluster file's
# node_names, cpus_per_node, slurm: and nccl: give them).
GOLDEN_SITE = LaunchSettings(
    node_names=("gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"),
    cpus_per_node=96,
    slurm_account="proj_llm",
    slurm_partition="gpu,gpu-long",
    slurm_time="2-00:00:00",
    ib_hcas=("mlx5_0", "mlx5_3"),
    socket_ifname="enp",
    ib_gid_index=3,
    ib_tc=106,
)


def searched(model: TrainedModel, c: Cluster, layout: Layout, *, overlap: bool) -> SearchRecord:
    """The search a scenario's plan was made under: nothing pinned or bounded, no memory kept
    free (`plan --headroom 0`, so the memory chart draws no headroom line), the
    gradient-reduction overlap its files show as requested (`--overlap-grad-reduce`), and each
    other search option its rule's default (rules/search/defaults.yaml)."""
    rules = builtin_rules()
    record = headroom_record(parse_headroom(0), SearchLimits(), c, rules, layout.precision)
    chosen = choose(
        SearchChoices(overlap_grad_reduce=overlap),
        rules,
        model,
        c,
        global_batch=layout.global_batch,
        seq_len=layout.seq_len,
        precision=layout.precision,
    )
    return record.with_options(chosen)


def estimate(
    layout, memory_gib, step_s, parts_s, tokens_per_s, mfu, capacity_gib=80, peak=989, backend=None
):
    """An estimate with hand-picked numbers; memory parts in GiB, time parts in seconds, the
    GPU's peak in TFLOP/s (tokens_per_s counts samples for an op-graph model); `backend`: the
    name of the backend that runs it (None: not named, as a plan.json of before)."""
    parts = ("params", "grads", "optimizer", "activations", "other")
    memory = dict(zip(parts, memory_gib, strict=True))
    memory = {k: round(v * GIB) for k, v in memory.items()}
    total, capacity = sum(memory.values()), capacity_gib * GIB
    names = ("compute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s", "ep_comm_s")
    times = dict.fromkeys((*names, "bubble_s", "optimizer_s"), 0.0) | parts_s
    return Estimate(
        backend=None if backend is None else BACKENDS[backend].ref,
        plan=layout,
        memory=MemoryBreakdown(**memory, total=total, capacity=capacity, fits=total <= capacity),
        time=TimeBreakdown(step_s=step_s, **times),
        throughput=Throughput(
            tokens_per_s=tokens_per_s,
            model_tflops_per_gpu=mfu * peak,
            hardware_tflops_per_gpu=mfu * peak * 1.1,
            mfu=mfu,
        ),
    )


def proposal(rule_id: str, group: str, kind: str, text: str, speedup: float, **settings):
    return Proposal(
        type=kind,
        description=text,
        estimated_speedup=speedup,
        settings=settings,
        rule_id=rule_id,
        group=group,
    )


COMM = "CommunicationOptimization"
SEED_COMMUNICATION = [
    proposal(
        "seed.communication.ring_allreduce",
        "communication",
        COMM,
        "Use ring all-reduce pattern for 32 devices to achieve 2(n-1)/n bandwidth efficiency",
        1.5,
        nccl_algo="Ring",
    ),
    proposal(
        "seed.communication.hierarchical_allreduce",
        "communication",
        COMM,
        "Apply hierarchical all-reduce (intra-node then inter-node) for 32 devices",
        1.8,
        hierarchical_allreduce=True,
    ),
    proposal(
        "seed.communication.overlap",
        "communication",
        COMM,
        "Overlap gradient all-reduce with backward computation for 32 devices",
        1.3,
        overlap_grad_reduce=True,
    ),
    proposal(
        "seed.communication.nccl_tree",
        "communication",
        COMM,
        "Enable NCCL tree algorithm for large tensor all-reduce operations",
        1.2,
        nccl_algo="Tree",
    ),
]


def dense_multinode() -> PlanDocument:
    """Llama 3 8B on 4 nodes of 8 H100s on RoCE whose cluster file names HCAs, the interface,
    the nodes and the site's SLURM and RoCE settings (GOLDEN_SITE)."""
    c = cluster("h100-4nodes", H100, 32, network="roce-400")
    common = {"global_batch": 512, "seq_len": 8192}
    chosen = build_layout(
        32,
        tp=2,
        pp=2,
        mbs=1,
        distributed_optimizer=True,
        sequence_parallel=True,
        recompute="selective",
        **common,
    )
    second = build_layout(32, tp=1, pp=1, mbs=1, zero_stage=1, recompute="full", **common)
    third = build_layout(32, tp=4, pp=1, mbs=2, distributed_optimizer=True, **common)
    e1 = estimate(
        chosen,
        (3.75, 7.5, 2.8, 18.0, 3.1),
        16.0,
        {"compute_s": 14.9, "tp_comm_s": 0.7, "pp_comm_s": 0.1, "bubble_s": 0.25},
        262144.0,
        0.48,
        backend="megatron",
    )
    e2 = estimate(
        second,
        (15.0, 15.0, 2.8, 7.0, 3.1),
        16.3,
        {"compute_s": 16.2, "dp_comm_s": 0.1},
        257000.0,
        0.47,
        backend="deepspeed",
    )
    e3 = estimate(
        third,
        (1.9, 3.7, 1.4, 30.5, 3.1),
        17.1,
        {"compute_s": 15.5, "tp_comm_s": 1.5},
        245000.0,
        0.45,
        backend="megatron",
    )
    data = proposal(
        "seed.data.parallel",
        "data",
        "DataParallel",
        "Apply data parallelism across 8 devices for 323 compute nodes (estimated 4.0x speedup)",
        4.0,
        dp=8,
    )
    model = load_preset("llama-3-8b")
    return PlanDocument.from_parts(
        rules=builtin_rules(),
        model=model,
        cluster=c,
        launch=GOLDEN_SITE,
        chosen=e1,
        candidates=[e1, e2, e3],
        rejected={
            "does not fit in GPU memory (80 GiB)": 41,
            "tp (16) spans more than one NVLink domain": 12,
        },
        advice=["tp 2 with sequence parallelism keeps activations at 18 GiB per GPU"],
        proposals=[data, *SEED_COMMUNICATION],
        search=searched(model, c, chosen, overlap=True),
    )


def moe() -> PlanDocument:
    """Mixtral 8x7B on 2 nodes of H100s with every kind of parallelism; no NCCL names given."""
    c = cluster("h100-2nodes", H100, 16)
    layout = build_layout(
        16,
        tp=2,
        pp=2,
        cp=2,
        ep=2,
        vpp=2,
        mbs=1,
        global_batch=128,
        seq_len=8192,
        distributed_optimizer=True,
        sequence_parallel=True,
        recompute="full",
    )
    e = estimate(
        layout,
        (11.0, 22.0, 5.5, 20.0, 3.0),
        21.5,
        {
            "compute_s": 18.0,
            "tp_comm_s": 1.2,
            "cp_comm_s": 0.6,
            "pp_comm_s": 0.2,
            "dp_comm_s": 0.4,
            "ep_comm_s": 1.1,
            "bubble_s": 0.9,
            "optimizer_s": 0.01,
        },
        48770.0,
        0.31,
        backend="megatron",
    )
    model = load_preset("mixtral-8x7b")
    return PlanDocument.from_parts(
        rules=builtin_rules(),
        model=model,
        cluster=c,
        chosen=e,
        candidates=[e],
        rejected={"experts (8) do not divide by ep (16)": 3},
        advice=[],
        proposals=[SEED_COMMUNICATION[2]],
        search=searched(model, c, e.plan, overlap=True),
    )


def single_node() -> PlanDocument:
    """Llama 2 7B on one node of 8 A100s, data parallel without sharding in fp16, full
    recomputation: a layout both Megatron-LM and DeepSpeed run, so both files are written; no
    proposals."""
    c = cluster("a100-node", A100, 8)
    layout = build_layout(
        8,
        mbs=2,
        global_batch=64,
        seq_len=4096,
        zero_stage=0,
        recompute="full",
        precision="fp16",
    )
    e = estimate(
        layout,
        (1.6, 1.6, 9.4, 12.0, 2.5),
        9.8,
        {"compute_s": 9.5, "dp_comm_s": 0.9},
        26750.0,
        0.52,
        backend="megatron",
    )
    model = load_preset("llama-2-7b")
    return PlanDocument.from_parts(
        rules=builtin_rules(),
        model=model,
        cluster=c,
        chosen=e,
        candidates=[e],
        rejected={},
        search=searched(model, c, e.plan, overlap=False),
    )


RESNET_LIKE = GraphModelSpec(
    name="resnet-50",
    nodes=174,
    weighted_nodes=107,
    params=25_557_032,
    forward_flops=8.2e9,
    activation_elements=3.76e7,
    stored_elements=2.09e7,
    split_params=25_557_032,
    split_outputs=1.11e7,
    split_nodes=54,
    split_width_gcd=8,
    batchnorm_layers=53,
    batchnorm_channels=26_560,
)


def graph_channel_parallel() -> PlanDocument:
    """An op graph on 2 nodes of 8 A100s: tp 2 (channel-parallel Conv2d / MatMul), 16 samples
    per GPU (SyncBatchNorm on), ZeRO-1, full recompute; the runner-up is data parallel only."""
    c = cluster("a100-2nodes", A100, 16)
    common = {"global_batch": 512, "seq_len": 1, "zero_stage": 1, "recompute": "full"}
    chosen = build_layout(16, tp=2, mbs=16, **common)
    second = build_layout(16, tp=1, mbs=32, **common)
    e1 = estimate(
        chosen,
        (0.02, 0.05, 0.02, 0.09, 1.6),
        0.0318,
        {
            "compute_s": 0.021,
            "tp_comm_s": 0.006,
            "dp_comm_s": 0.0015,
            "bn_comm_s": 0.0032,
            "optimizer_s": 0.0001,
        },
        16101.0,
        0.079,
        peak=312,
        backend="deepspeed",
    )
    e2 = estimate(
        second,
        (0.05, 0.1, 0.02, 0.17, 1.6),
        0.0331,
        {"compute_s": 0.029, "dp_comm_s": 0.0041, "optimizer_s": 0.0004},
        15468.0,
        0.076,
        peak=312,
        backend="deepspeed",
    )
    channel = proposal(
        "seed.tensor.channel_parallel",
        "tensor",
        "TensorParallel",
        "Apply channel-parallel splitting to 53 Conv2d operations",
        2.0,
        conv_split="channel",
    )
    overlap = proposal(
        "seed.communication.overlap",
        "communication",
        COMM,
        "Overlap gradient all-reduce with backward computation for 16 devices",
        1.3,
        overlap_grad_reduce=True,
    )
    return PlanDocument.from_parts(
        rules=builtin_rules(),
        model=RESNET_LIKE,
        cluster=c,
        chosen=e1,
        candidates=[e1, e2],
        rejected={
            "channel parallelism needs every Conv2d / MatMul output width to divide by tp (16); "
            "their greatest common divisor is 8": 12,
        },
        advice=[],
        proposals=[channel, overlap],
        search=searched(RESNET_LIKE, c, e1.plan, overlap=True),
    )


CASES = {
    "dense_multinode": dense_multinode,
    "moe": moe,
    "single_node": single_node,
    "graph_channel_parallel": graph_channel_parallel,
}
TRANSFORMER_CASES = sorted(c for c in CASES if not c.startswith("graph"))


GOLDEN_CASE = "dense_multinode"  # the scenario whose every file is kept in tests/golden/


@functools.cache
def rendered_cases() -> dict[str, dict[str, str]]:
    """Every scenario's files, rendered once per session (test_writer reads them too); callers
    must not change them."""
    return {name: render_plan(build()) for name, build in CASES.items()}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, str]]:
    return rendered_cases()


# ---- golden files -----------------------------------------------------------------------------


def test_rendered_files_match_the_reviewed_golden_files(rendered):
    folder = GOLDEN / GOLDEN_CASE
    files = rendered[GOLDEN_CASE]
    assert [p.name for p in GOLDEN.iterdir()] == [GOLDEN_CASE]
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    # every type; ds_config.json is not the golden plan's (DeepSpeed does not run its layout: tp 2
    # with sequence parallelism and Megatron's distributed optimizer), single_node's holds it
    others = {"ds_config.json"}
    assert {name for case in rendered.values() for name in case} <= set(files) | others
    assert "ds_config.json" in rendered["single_node"]
    for name, text in files.items():
        expected = (folder / name).read_text(encoding="utf-8")
        if text != expected:
            diff = difflib.unified_diff(
                expected.splitlines(),
                text.splitlines(),
                f"golden/{GOLDEN_CASE}/{name}",
                "rendered",
                lineterm="",
            )
            pytest.fail("\n".join(diff))


# ---- the other scenarios: the values that differ, worked from their inputs ----------------------

# Worked from each builder: nodes = GPUs / 8 per node; dp = GPUs / (tp * pp * cp);
# grad_accum = global_batch / (mbs * dp); memory = the sum of the five hand-picked parts;
# model TFLOP/s = mfu * the estimate's peak (989 unless given); the hand-built estimates carry no
# causal count, so the headline MFU is the whole-matrix one and says so (cost/mfu_convention.py).
# DeepSpeed's ZeRO stage is the plan's, or 1 where the plan uses Megatron's distributed optimizer
# (ZeRO-1's sharding).
SCENARIO_VALUES = {
    "moe": {  # mixtral-8x7b (32 layers) on 16 H100s; dp = 16 / (2 * 2 * 2) = 2
        "title": "mixtral-8x7b on 16 x H100-SXM-80GB",
        "cluster": "`h100-2nodes`: 2 node(s) x 8 GPUs",
        "nodes": 2,
        "megatron": {"tensor-model-parallel": 2, "pipeline-model-parallel": 2,
                     "context-parallel": 2, "expert-model-parallel": 2, "micro-batch": 1,
                     "global-batch": 128},
        "seq_len": 8192,
        "ds": (128, 1, 64, 1, "bf16", True),  # accum 128 / (1 * 2)
        # DeepSpeed runs no interleaved schedule, cp or Megatron's distributed optimizer
        "ds_config": False,
        # 11 + 22 + 5.5 + 20 + 3 GiB; 0.31 * 989 = 306.6 TFLOP/s
        "summary": (
            "| 21.50 s | 48,770 | 31.0% (the whole s x s attention scores counted) | 306.6 "
            "| 61.5 GiB of 80.0 GiB | yes |"
        ),
        "memory": ("params: 11.0 GiB", "grads: 22.0 GiB", "activations: 20.0 GiB"),
        "time": ("compute: 18.00 s", "ep comm: 1.10 s", "bubble: 900.0 ms"),
    },
    "single_node": {  # llama-2-7b (32 layers) on 8 A100s; dp = 8
        "title": "llama-2-7b on 8 x A100-SXM-80GB",
        "cluster": "`a100-node`: 1 node(s) x 8 GPUs",
        "nodes": 1,
        "megatron": {"tensor-model-parallel": 1, "pipeline-model-parallel": 1,
                     "context-parallel": 1, "micro-batch": 2, "global-batch": 64},
        "seq_len": 4096,
        "ds": (64, 2, 4, 0, "fp16", False),  # accum 64 / (2 * 8); ZeRO-0 in fp16
        # 1.6 + 1.6 + 9.4 + 12 + 2.5 GiB; 0.52 * 989 = 514.3 TFLOP/s
        "summary": (
            "| 9.80 s | 26,750 | 52.0% (the whole s x s attention scores counted) | 514.3 "
            "| 27.1 GiB of 80.0 GiB | yes |"
        ),
        "memory": ("params: 1.6 GiB", "optimizer: 9.4 GiB", "other: 2.5 GiB"),
        "time": ("compute: 9.50 s", "dp comm: 900.0 ms"),
    },
    "graph_channel_parallel": {  # resnet-50-like graph on 16 A100s; dp = 16 / 2 = 8
        "title": "resnet-50 on 16 x A100-SXM-80GB",
        "cluster": "`a100-2nodes`: 2 node(s) x 8 GPUs",
        "nodes": 2,
        "megatron": None,  # an op graph: no Megatron-LM arguments
        "seq_len": 1,
        "ds": (512, 16, 4, 1, "bf16", False),  # accum 512 / (16 * 8); ZeRO-1 asked for
        "summary": None,  # its report is checked in test_a_graph_report_shows_its_kinds_...
        "memory": ("params: 0.0 GiB", "other: 1.6 GiB"),  # 0.02 GiB shows as 0.0
        "time": ("compute: 21.0 ms", "tp comm: 6.0 ms", "bn comm: 3.2 ms"),
    },
}  # fmt: skip
PRESET_LAYERS = 32  # llama-2-7b and mixtral-8x7b both have 32 layers (their presets)


def test_every_scenario_but_the_golden_one_has_targeted_values():
    assert sorted(SCENARIO_VALUES) == sorted(set(CASES) - {GOLDEN_CASE})


@pytest.mark.parametrize("case", sorted(SCENARIO_VALUES))
def test_deepspeed_config_holds_the_scenarios_batch_zero_and_precision(case, rendered):
    if SCENARIO_VALUES[case].get("ds_config") is False:
        assert "ds_config.json" not in rendered[case]
        assert "ds_config.json: not written, DeepSpeed does not run" in rendered[case]["plan.md"]
        return
    config = json.loads(rendered[case]["ds_config.json"])
    batch, micro, accum, stage, precision, pipeline = SCENARIO_VALUES[case]["ds"]
    assert (
        config["train_batch_size"],
        config["train_micro_batch_size_per_gpu"],
        config["gradient_accumulation_steps"],
        config["zero_optimization"]["stage"],
    ) == (batch, micro, accum, stage)
    assert config[precision]["enabled"] is True
    assert ("pipeline" in config) == pipeline


@pytest.mark.parametrize("case", sorted(SCENARIO_VALUES))
def test_megatron_arguments_hold_the_scenarios_layout(case, rendered):
    values = SCENARIO_VALUES[case]
    if values["megatron"] is None:
        assert "megatron_args.sh" not in rendered[case]
        return
    script = rendered[case]["megatron_args.sh"]
    for flag, value in values["megatron"].items():
        assert f"\n    --{flag}-size {value}\n" in script, flag
    assert ("--expert-model-parallel-size" in script) == (
        "expert-model-parallel" in values["megatron"]
    )
    assert f"\n    --seq-length {values['seq_len']}\n" in script
    assert f"\n    --num-layers {PRESET_LAYERS}\n" in script
    precision = values["ds"][4]
    assert f"\n    --{precision}\n" in script


@pytest.mark.parametrize("case", sorted(SCENARIO_VALUES))
def test_hostfile_and_launchers_hold_the_scenarios_nodes(case, rendered):
    files, nodes = rendered[case], SCENARIO_VALUES[case]["nodes"]
    hosts = [line for line in files["hostfile"].splitlines() if not line.startswith("#")]
    assert hosts == [f"node-{i} slots=8" for i in range(nodes)]
    assert (
        f"\n#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=1\n" in files["launch_slurm.sbatch"]
    )
    torchrun = files["launch_torchrun.sh"]
    assert f'--nnodes "${{NNODES:-{nodes}}}"' in torchrun
    assert '--nproc_per_node "${NPROC_PER_NODE:-8}"' in torchrun
    model = SCENARIO_VALUES[case]["title"].split(" on ")[0]
    assert f'--rdzv_id "${{RDZV_ID:-parplan-{model}}}"' in torchrun


@pytest.mark.parametrize("case", sorted(SCENARIO_VALUES))
def test_report_and_charts_hold_the_scenarios_figures(case, rendered):
    values, files = SCENARIO_VALUES[case], rendered[case]
    report = files["plan.md"]
    assert report.startswith(
        f"# Training plan: {values['title']}\n\nCluster {values['cluster']}.\n"
    )
    if values["summary"]:
        assert f"\n{values['summary']}\n" in report
    for part in values["memory"]:
        assert f"<title>{part}</title>" in files["plan_memory.svg"]
    for part in values["time"]:
        assert f"<title>{part}</title>" in files["plan_time.svg"]


@pytest.mark.parametrize("case", sorted(SCENARIO_VALUES))
def test_plan_json_holds_the_scenarios_layout(case, rendered):
    plan = json.loads(rendered[case]["plan.json"])["chosen"]["plan"]
    values = SCENARIO_VALUES[case]
    batch, micro, accum, *_ = values["ds"]
    assert (plan["global_batch"], plan["mbs"], plan["grad_accum"]) == (batch, micro, accum)
    assert (plan["seq_len"], plan["precision"]) == (values["seq_len"], values["ds"][4])
    for dim, value in (values["megatron"] or {}).items():
        short = {"tensor-model-parallel": "tp", "pipeline-model-parallel": "pp",
                 "context-parallel": "cp", "expert-model-parallel": "ep"}.get(dim)  # fmt: skip
        if short:
            assert plan[short] == value, dim


# ---- each file is what its consumer accepts -----------------------------------------------------


@pytest.mark.parametrize("case", ["single_node", "graph_channel_parallel"])  # the DeepSpeed ones
def test_ds_config_batch_identity_holds_with_the_plan_dp(case, rendered):
    doc = CASES[case]()
    config = json.loads(rendered[case]["ds_config.json"])
    plan = doc.chosen.plan
    assert config["train_batch_size"] == plan.global_batch
    assert config["train_micro_batch_size_per_gpu"] == plan.mbs
    assert config["gradient_accumulation_steps"] == plan.grad_accum
    assert config["train_batch_size"] == plan.mbs * plan.grad_accum * plan.dp
    assert ("pipeline" in config) == (plan.pp > 1)


@pytest.mark.skipif(not HAS_BASH, reason="bash is not installed")
@pytest.mark.parametrize("case", sorted(CASES))
def test_scripts_pass_bash_n(case, rendered):
    scripts = [n for n in rendered[case] if n.endswith((".sh", ".sbatch"))]
    assert len(scripts) == (2 if case.startswith("graph") else 3)
    for name in scripts:
        check_bash(rendered[case][name])


@pytest.mark.parametrize("case", sorted(CASES))
def test_nccl_env_and_hostfile_parse_back(case, rendered):
    doc = CASES[case]()
    check_env(rendered[case]["nccl.env"], NCCL_REFERENCE)
    check_hostfile(rendered[case]["hostfile"], doc.cluster.num_nodes, doc.cluster.procs_per_node)


def test_plan_json_renders_again_to_the_same_files(rendered, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(rendered["moe"]["plan.json"], encoding="utf-8")
    assert render_plan(load_plan_document(path)) == rendered["moe"]


def test_megatron_arguments_follow_validate_args(rendered):
    args = megatron_args(moe())
    assert args[args.index("--num-layers-per-virtual-pipeline-stage") + 1] == "8"  # 32 / (2 * 2)
    for needs in ("--use-distributed-optimizer", "--overlap-grad-reduce"):
        assert needs in args  # --overlap-param-gather asserts both
    assert "--recompute-method" not in megatron_args(dense_multinode())  # selective: no method
    assert "--moe-grouped-gemm" in args and "--bf16" in args  # grouped GEMM is bf16 only
    script = rendered["moe"]["megatron_args.sh"]
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script  # tp 2, cp 2 on Hopper
    # NullTokenizer adds its end-of-document token to --vocab-size: 31,999 + 1 = Mixtral's 32,000
    assert "--mock-data --tokenizer-type NullTokenizer --vocab-size 31999" in script


def test_deepspeed_config_api_matches_the_file(rendered):
    assert deepspeed_config(single_node()) == json.loads(rendered["single_node"]["ds_config.json"])
    with pytest.raises(RenderError, match=r"DeepSpeed does not run this plan: .*vpp 2"):
        deepspeed_config(moe())


# ---- op-graph models: DeepSpeed / torchrun only ---------------------------------------------------


def test_a_graph_plan_renders_no_megatron_arguments(rendered):
    files = rendered["graph_channel_parallel"]
    assert "megatron_args.sh" not in files and "megatron_args.sh" in rendered["moe"]
    assert "megatron" not in files["launch_slurm.sbatch"].lower()
    assert "megatron" not in files["launch_torchrun.sh"].lower()
    assert json.loads(files["plan.json"])["render"] == {
        "megatron_version": None,
        "deepspeed_version": "0.19",
    }
    with pytest.raises(
        RenderError, match=r"^resnet-50 is an op-graph model: it has no Megatron-LM arguments"
    ):
        megatron_args(graph_channel_parallel())


def test_a_megatron_version_for_a_graph_plan_is_refused():
    doc = graph_channel_parallel().with_render_options(megatron_version="core_v0.16")
    with pytest.raises(RenderError, match=r"--megatron-version 'core_v0.16': resnet-50 is an op"):
        render_plan(doc)


def test_graph_facts_have_every_key_with_megatron_ones_none():
    mapping = load_mapping(TEMPLATES / "mapping.yaml").data
    graph = facts(graph_channel_parallel(), mapping)
    transformer = facts(moe(), mapping)
    assert graph.keys() == transformer.keys()
    megatron = [k for k in graph if k.startswith("megatron.")]
    assert len(megatron) == 61 and all(graph[k] is None for k in megatron)
    assert transformer["megatron.one_cuda_connection"] is True  # tp 2, cp 2 on Hopper
    assert (graph["model.kind"], graph["model.nodes"], graph["model.num_layers"]) == (
        "graph",
        174,
        None,
    )
    assert (transformer["model.kind"], transformer["model.nodes"]) == ("transformer", None)
    assert graph["train.sync_batchnorm"] and graph["train.channel_parallel"]
    assert graph["train.graph_checkpointing"] and not transformer["train.graph_checkpointing"]
    assert not transformer["train.sync_batchnorm"] and not transformer["train.channel_parallel"]


def test_a_graph_report_shows_its_kinds_time_parts_and_samples(rendered):
    graph_md = rendered["graph_channel_parallel"]["plan.md"]
    assert "| bn comm | 3.2 ms | 10% |" in graph_md
    assert "| pp comm |" not in graph_md and "| bubble |" not in graph_md
    assert "| step time | samples/s |" in graph_md and "tokens" not in graph_md
    assert "| global batch | 512 samples |" in graph_md
    assert "Model: resnet-50 (25.6M params, op graph)." in graph_md
    assert "`torch.nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group)`" in graph_md
    assert "over 2 consecutive ranks" in graph_md
    assert "bn comm" in rendered["graph_channel_parallel"]["plan_time.svg"]
    for case in TRANSFORMER_CASES:
        assert "bn comm" not in rendered[case]["plan.md"] + rendered[case]["plan_time.svg"]
        assert "samples/s" not in rendered[case]["plan.md"]


def test_sync_batchnorm_follows_the_estimate(rendered):
    """SyncBatchNorm is explained exactly when the estimate pays for it (bn_comm_s > 0)."""
    doc = graph_channel_parallel()
    off = doc.chosen.model_copy(
        update={"time": doc.chosen.time.model_copy(update={"bn_comm_s": 0.0})}
    )
    files = render_plan(doc.model_copy(update={"chosen": off, "candidates": [off]}))
    assert "SyncBatchNorm" not in files["plan.md"] + files["launch_torchrun.sh"]
    assert "SyncBatchNorm" in rendered["graph_channel_parallel"]["launch_torchrun.sh"]
    assert "channel parallelism (tp 2)" in files["plan.md"]


@pytest.mark.skipif(not HAS_BASH, reason="bash is not installed")
@pytest.mark.parametrize("script", ["launch_torchrun.sh", "launch_slurm.sbatch"])
def test_graph_launchers_want_a_training_script(script, rendered, tmp_path):
    write_rendered(tmp_path, rendered["graph_channel_parallel"])
    done = subprocess.run(
        ["bash", str(tmp_path / script)], capture_output=True, text=True, check=False, timeout=30
    )
    assert done.returncode == 2
    assert "TRAINING_SCRIPT [ARGUMENTS...]" in done.stderr


def test_a_graph_plan_json_renders_again_through_the_command(rendered, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(rendered["graph_channel_parallel"]["plan.json"], encoding="utf-8")
    assert run_render("render", plan, "--out", tmp_path / "out") == 0
    written = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "out").iterdir()}
    assert written == rendered["graph_channel_parallel"]
    assert "megatron_args.sh" not in capsys.readouterr().out


def test_uneven_split_uses_first_and_last_stage_arguments():
    doc = dense_multinode()
    layout = build_layout(
        48, pp=6, mbs=1, global_batch=64, seq_len=4096, distributed_optimizer=True
    )
    doc = doc.model_copy(update={"chosen": estimate(layout, (1, 1, 1, 1, 1), 1.0, {}, 1.0, 0.5)})
    doc = doc.model_copy(update={"candidates": [], "cluster": cluster("x", H100, 48)})
    args = megatron_args(doc)
    # 32 layers on 6 stages: middle stages 6 each, first and last share 8
    assert args[args.index("--decoder-first-pipeline-num-layers") + 1] == "4"
    assert args[args.index("--decoder-last-pipeline-num-layers") + 1] == "4"


def test_no_cuda_device_max_connections_on_blackwell_or_without_tp():
    on_b200 = dense_multinode().model_copy(update={"cluster": cluster("b", B200, 32)})
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in render_plan(on_b200)["nccl.env"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in render_plan(single_node())["megatron_args.sh"]


def test_nccl_env_names_its_rules_and_comments_out_nccl_algo(rendered):
    text = rendered["dense_multinode"]["nccl.env"]
    assert "\n# NCCL_ALGO=Ring,Tree\n" in text
    assert "NCCL_IB_HCA=mlx5_0,mlx5_3\n" in text and "NCCL_SOCKET_IFNAME=enp\n" in text
    assert "\nNCCL_NVLS_ENABLE=1\n" in text
    moe_env = rendered["moe"]["nccl.env"]
    assert "\n# NCCL_IB_HCA=mlx5_0,mlx5_1\n" in moe_env  # no HCAs given: an example to adapt
    assert "NVLS" not in rendered["single_node"]["nccl.env"]  # A100: no NVLink SHARP


def test_force_nccl_algo_sets_it():
    text = render_plan(dense_multinode(), force_nccl_algo=True)["nccl.env"]
    assert "\nNCCL_ALGO=Ring,Tree\n" in text


def test_hf_trainer_variant_says_auto_where_the_trainer_fills_in():
    zero3 = single_node()
    layout = zero3.chosen.plan.model_copy(update={"zero_stage": 3})
    zero3 = zero3.model_copy(update={"chosen": zero3.chosen.model_copy(update={"plan": layout})})
    config = json.loads(render_plan(zero3, hf_trainer=True)["ds_config.json"])
    for key in (
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
    ):
        assert config[key] == "auto"
    assert config["fp16"]["enabled"] == "auto"
    assert config["zero_optimization"]["stage"] == 3  # the plan decides the stage
    # ZeRO's buckets are the layout's: the Trainer's "auto" would be h^2 and 0.9 h^2
    # (transformers integrations/deepspeed.py), not the sizes priced
    zero = config["zero_optimization"]
    assert (zero["stage3_prefetch_bucket_size"], zero["reduce_bucket_size"]) == (
        5 * 10**7,
        5 * 10**8,
    )
    # The HF Trainer fills the optimizer and the scheduler's steps from TrainingArguments
    # (transformers integrations/deepspeed.py); WarmupCosineLR's ratios are no argument of it.
    assert set(config["optimizer"]["params"].values()) == {"auto"}
    scheduler = config["scheduler"]["params"]
    assert (scheduler["total_num_steps"], scheduler["warmup_num_steps"]) == ("auto", "auto")
    assert (scheduler["cos_min_ratio"], scheduler["warmup_type"]) == (0.1, "linear")


# ---- checkers refuse what the consumers refuse ---------------------------------------------------


def test_ds_config_check_names_the_broken_identity():
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}
    config["gradient_accumulation_steps"] = 4
    with pytest.raises(RenderError, match=r"train_batch_size\(64\) != .* data-parallel size\(4\)"):
        check_ds_config(config, 4)
    with pytest.raises(RenderError, match="pipeline"):
        check_ds_config({**config, "zero_optimization": {"stage": 2}, "pipeline": {}}, 8)
    with pytest.raises(RenderError, match="communication_data_type"):
        check_ds_config({**config, "communication_data_type": "fp8"}, 8)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# ok\nNCCL_NO_SUCH_THING=1\n", "not a documented NCCL variable"),
        ("# ok\nNCCL_NVLS_ENABLE=3\n", "not a valid enum value"),
        ("# ok\nNCCL_IB_HCA=mlx5 0\n", "unsafe to source"),
        ("NCCL_NVLS_ENABLE=1\n", "has no comment"),
        ("# ok\nNCCL_IB_GDR_LEVEL=PHB\n", "deprecated alias; use NCCL_NET_GDR_LEVEL"),
        ("# ok\nNCCL_ASYNC_ERROR_HANDLING=1\n", "use TORCH_NCCL_ASYNC_ERROR_HANDLING"),
        ("# ok\n# NCCL_ALGO=Rings\n", "not a valid func_list value"),
        ("# ok\nCUDA_DEVICE_MAX_CONNECTIONS=64\n", "not a valid int value"),
        ("export NCCL_DEBUG=INFO\n", "not NAME=VALUE"),
        # NCCL's grammar, but bash would run `broadcast:^ring` and `ZERO` as commands
        ("# ok\nNCCL_ALGO=allreduce:tree;broadcast:^ring\n", "unsafe to source"),
        ("# ok\nNCCL_CTA_POLICY=EFFICIENCY|ZERO\n", "unsafe to source"),
        # Python's splitlines() would see a second, commented line after the carriage return
        ("# ok\nNCCL_ALGO=Ring\r#x touch PWNED\n", "unsafe to source"),
    ],
)
def test_env_check_refuses_undocumented_or_invalid_settings(text, problem):
    with pytest.raises(RenderError, match=problem):
        check_env(text, NCCL_REFERENCE)


@pytest.mark.parametrize(
    "line",
    [
        "NCCL_ALGO=allreduce:^tree,ring",
        "NCCL_DEBUG_SUBSYS=^INIT,COLL",
        "NCCL_SOCKET_IFNAME=^docker,lo",
    ],
)
def test_env_check_accepts_nccl_grammar(line):
    check_env(f"# a rule\n{line}\n", NCCL_REFERENCE)


def test_hostfile_check_uses_deepspeeds_grammar():
    with pytest.raises(RenderError, match="bad or repeated"):
        check_hostfile("node-0 slots=8\nnode-0 slots=8\n", None, None)
    with pytest.raises(RenderError, match="3 hosts for a plan on 4 nodes"):
        check_hostfile("a slots=8\nb slots=8\nc slots=8\n", 4, 8)


@pytest.mark.skipif(not HAS_BASH, reason="bash is not installed")
def test_bash_check_refuses_a_broken_script():
    with pytest.raises(RenderError, match="bash -n"):
        check_bash("if true; then\n")


# ---- writing ---------------------------------------------------------------------------------------


def test_write_is_atomic_idempotent_and_marks_scripts_executable(rendered, tmp_path):
    out = tmp_path / "out"
    status = write_rendered(out, rendered["single_node"])
    assert set(status.values()) == {"written"}
    assert (out / "megatron_args.sh").stat().st_mode & stat.S_IXUSR
    assert not (out / "plan.md").stat().st_mode & stat.S_IXUSR
    assert set(write_rendered(out, rendered["single_node"]).values()) == {"unchanged"}
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_a_different_existing_file_is_never_overwritten_without_force(rendered, tmp_path):
    out = tmp_path / "out"
    write_rendered(out, rendered["single_node"])
    (out / "nccl.env").write_text("# edited by hand\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(RenderError, match=r"will not overwrite .*nccl\.env.*--force"):
        write_rendered(out, rendered["dense_multinode"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written at all
    status = write_rendered(out, rendered["dense_multinode"], force=True)
    assert status["nccl.env"] == "written"
    assert (out / "nccl.env").read_text() == rendered["dense_multinode"]["nccl.env"]


def test_files_failing_their_check_leave_no_output_folder(rendered, tmp_path):
    files = dict(rendered["single_node"], **{"ds_config.json": '{"train_batch_size": 3}'})
    with pytest.raises(RenderError, match=r"rendered ds_config\.json is invalid"):
        write_rendered(tmp_path / "out", files)
    assert not (tmp_path / "out").exists()


def test_an_out_path_that_is_a_file_is_refused(rendered, tmp_path):
    (tmp_path / "out").write_text("")
    with pytest.raises(RenderError, match="is not a folder"):
        write_rendered(tmp_path / "out", rendered["single_node"])


def test_rendering_twice_gives_identical_bytes(rendered):
    assert render_plan(dense_multinode()) == rendered["dense_multinode"]


# ---- templates: sandbox, StrictUndefined, overrides, versions -------------------------------------


def user_templates(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "templates"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_a_user_template_overrides_the_built_in_one_by_name(tmp_path):
    hostfile = (
        "# ours\n{% for host in launch.hosts %}{{ host.name }} slots={{ host.slots }}\n{% endfor %}"
    )
    folder = user_templates(tmp_path, {"launch/hostfile.j2": hostfile})
    files = render_plan(single_node(), templates_dir=folder)
    assert files["hostfile"] == "# ours\nnode-0 slots=8\n"
    assert files["nccl.env"] == render_plan(single_node())["nccl.env"]


def test_a_template_naming_a_missing_value_fails_with_its_line(tmp_path):
    folder = user_templates(tmp_path, {"nccl/nccl.env.j2": "# fine\n# {{ nccl.no_such_key }}\n"})
    with pytest.raises(RenderError, match=r"nccl/nccl.env.j2:2: undefined value: .*no_such_key"):
        render_plan(single_node(), templates_dir=folder)


@pytest.mark.parametrize(
    "attack",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ self.__init__.__globals__ }}",
        "{{ launch.hosts.append(1) }}",
        "{{ model.update(name='x') }}",
        "{{ lipsum.__globals__ }}",
    ],
)
def test_the_sandbox_refuses_template_injection(tmp_path, attack):
    folder = user_templates(tmp_path, {"launch/hostfile.j2": attack})
    with pytest.raises(
        RenderError, match=r"launch/hostfile\.j2:1: refused by the template sandbox"
    ):
        render_plan(single_node(), templates_dir=folder)


def test_the_sandbox_bounds_loops(tmp_path):
    folder = user_templates(
        tmp_path, {"launch/hostfile.j2": "{% for i in range(10**9) %}{% endfor %}"}
    )
    with pytest.raises(RenderError, match=r"hostfile\.j2:1: refused .*: calls are not allowed"):
        render_plan(single_node(), templates_dir=folder)


def test_built_in_templates_only_format():
    """No arithmetic in any shipped template: numbers are computed in Python."""
    env = jinja2.Environment()
    arithmetic = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow)
    for path in sorted([*TEMPLATES.rglob("*.j2"), *BACKENDS_DIR.rglob("*.j2")]):
        tree = env.parse(path.read_text(encoding="utf-8"))
        found = [type(n).__name__ for n in tree.find_all((*arithmetic, nodes.Neg))]
        assert not found, f"{path.relative_to(REPO)} computes: {found}"


def user_mapping(backend: str, old: str, new: str) -> str:
    """A user's mapping.yaml: the shared sections, and `backend`'s section with `old` made
    `new` (it replaces that backend's own)."""
    section = (BACKENDS_DIR / backend / "mapping.yaml").read_text(encoding="utf-8")
    assert section.count(old) == 1
    return (TEMPLATES / "mapping.yaml").read_text(encoding="utf-8") + section.replace(old, new)


def test_unknown_canonical_key_in_a_user_mapping_points_at_its_line(tmp_path):
    mapping = user_mapping("deepspeed", "key: plan.global_batch", "key: plan.global_bach")
    folder = user_templates(tmp_path, {"mapping.yaml": mapping})
    with pytest.raises(
        RenderError, match=r"mapping.yaml:\d+:\d+: .*unknown canonical key 'plan.global_bach'"
    ):
        render_plan(single_node(), templates_dir=folder)


OLD_PORT = '      master_port: {name: MASTER_PORT, default: "29600", doc: "rendezvous port"}\n'
MEGATRON_NOTES = (
    "    notes: &mg_notes\n      - when: megatron.unsupported_mlp"  # after core_r0.13's data_env
)


def test_a_mapping_of_an_older_format_is_refused_in_one_line(tmp_path):
    """0.x mapping formats may change (CHANGELOG.md): one without the `launch:` section, or with
    the rendezvous port in megatron's data_env (where it was before), is refused."""
    text = (TEMPLATES / "mapping.yaml").read_text(encoding="utf-8")
    no_launch, removed = re.subn(r"(?ms)^(#[^\n]*\n)*launch:\n.*?(?=^nccl:)", "", text)
    assert removed == 1
    folder = user_templates(tmp_path / "a", {"mapping.yaml": no_launch})
    with pytest.raises(
        RenderError, match=r"mapping.yaml:1:1: launch: missing required key 'launch'$"
    ):
        render_plan(single_node(), templates_dir=folder)
    port = user_mapping("megatron", MEGATRON_NOTES, OLD_PORT + MEGATRON_NOTES)
    folder = user_templates(tmp_path / "b", {"mapping.yaml": port})
    with pytest.raises(
        RenderError,
        match=r"mapping.yaml:\d+:\d+: .*master_port is read from launch.master_port",
    ):
        render_plan(single_node(), templates_dir=folder)


def test_versions_default_to_what_the_plan_needs_and_an_unknown_one_is_named(tmp_path):
    templates = Templates.at(None)
    assert templates.versions("megatron") == ["core_v0.16"]
    # the one release (the pinned core_v0.16.1), for every plan (test_megatron_fsdp.py too)
    assert "Megatron-LM (core_v0.16)" in render_plan(single_node())["megatron_args.sh"]
    doc = single_node().with_render_options(megatron_version="core_r0.99")
    have = r"\(have: core_v0.16\)"
    with pytest.raises(RenderError, match=r"'core_r0.99' is not available " + have):
        render_plan(doc)


# ---- plan.json ----------------------------------------------------------------------------------


def test_plan_json_errors_point_at_the_line(rendered, tmp_path):
    data = json.loads(rendered["moe"]["plan.json"])
    data["chosen"]["plan"]["tpp"] = 2
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(PlanDocumentError, match=r"plan.json:\d+:\d+: chosen.plan.tpp: unknown key"):
        load_plan_document(path)
    path.write_text(json.dumps({**data, "format_version": 9}))
    with pytest.raises(PlanDocumentError, match="format_version 9 is not supported"):
        load_plan_document(path)


def test_plan_document_keeps_no_absolute_paths():
    model = load_preset("llama-2-7b").model_copy(update={"name": "/home/me/models/llama"})
    doc = PlanDocument.from_parts(
        rules=builtin_rules(),
        model=model,
        cluster=single_node().cluster,
        chosen=single_node().chosen,
    )
    assert doc.model.name == "llama"
    with pytest.raises(ValueError, match="absolute path"):
        PlanDocument.model_validate({**doc.model_dump(), "advice": ["/etc/passwd"]})


def test_shipped_nccl_reference_is_the_shared_one():
    if not SHARED_REFERENCE.is_file():
        pytest.skip("shared/reference is not beside this checkout")
    assert NCCL_REFERENCE.read_bytes() == SHARED_REFERENCE.read_bytes()


# ---- command line -----------------------------------------------------------------------------------


def run_render(*argv: object) -> int:
    parser = argparse.ArgumentParser(prog="parplan")
    add_render_commands(parser.add_subparsers())
    args = parser.parse_args([str(a) for a in argv])
    return args.handler(args)


def test_render_command_writes_every_file_and_refuses_to_clobber(rendered, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(rendered["single_node"]["plan.json"])
    assert run_render("render", plan, "--out", tmp_path / "a") == 0
    assert "written    " in capsys.readouterr().out
    assert {p.name: p.read_text() for p in (tmp_path / "a").iterdir()} == rendered["single_node"]
    (tmp_path / "a" / "hostfile").write_text("mine slots=8\n")
    with pytest.raises(RenderError, match="hostfile"):
        run_render("render", plan, "--out", tmp_path / "a", "--hf-trainer")
    assert run_render("render", plan, "--out", tmp_path / "a", "--hf-trainer", "--force") == 0
    assert json.loads((tmp_path / "a" / "ds_config.json").read_text())["train_batch_size"] == "auto"


def test_render_command_through_main_once_wired(rendered, tmp_path, cli):
    from parplan_gen.cli.main import build_parser

    if "render" not in build_parser().format_help():
        pytest.skip("`parplan render` is not wired into parplan_gen/cli/main.py yet")
    plan = tmp_path / "plan.json"
    plan.write_text(rendered["single_node"]["plan.json"])
    run = cli("render", plan, "--out", tmp_path / "out", "--megatron-version", "core_r0.99")
    assert run.code == 1 and "core_r0.99" in run.err
    assert cli("render", plan, "--out", tmp_path / "out").code == 0
