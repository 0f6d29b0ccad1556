"""The rendered files carry each layout field in its own flag. Every scenario pins a layout
whose sizes are all different numbers (tp, pp, cp, dp, and vpp, ep, etp where they apply), so
two fields swapped in a backend's mapping, a template or a fact change a value asserted here.

Each plan is made and written through the Python API (`parplan_gen.plan` with pins, then
`Plan.write`); the files are read as text (the flags) or JSON (ds_config.json), never through
the mapping's own inverse. Every expected value is worked by hand from the scenario's layout in
the comment beside it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.rules.ruleset import RuleSet, load_rules

GPUS_PER_NODE = 8  # H100: the DGX H100 node (parplan_gen/data/gpus.yaml reference_node)


@dataclass(frozen=True)
class Scenario:
    model: str
    gpus: int
    global_batch: int
    seq_len: int
    backend: str
    layout: dict[str, Any]  # every size pinned; the chosen layout must be exactly this


SCENARIOS = {
    # Llama 3 70B (80 layers) on 120 H100s = 15 nodes: dp 2 = 120 / (tp 4 x pp 5 x cp 3);
    # global batch 20 = mbs 1 x 10 micro-batches (a multiple of pp, for interleaving) x dp 2;
    # 6144 tokens, a multiple of 2 x cp.
    "megatron-dense": Scenario(
        "llama-3-70b", 120, 20, 6144, "megatron",
        {"tp": 4, "pp": 5, "cp": 3, "dp": 2, "vpp": 2, "mbs": 1},
    ),
    # Qwen3-30B-A3B (48 layers, 128 experts) on 192 H100s = 24 nodes: dp 8 = 192 / (4 x 3 x 2);
    # the expert groups, etp 1 x ep 16, tile the tp 4 x cp 2 x dp 8 = 64 ranks of a stage;
    # global batch 240 = mbs 5 x 6 micro-batches x dp 8.
    "megatron-moe": Scenario(
        "qwen3-30b-a3b", 192, 240, 4096, "megatron",
        {"tp": 4, "pp": 3, "cp": 2, "dp": 8, "ep": 16, "etp": 1, "vpp": 2, "mbs": 5},
    ),
    # Llama 3 8B on 24 H100s = 3 nodes: DeepSpeed's pipeline engine, pp 4 x dp 6, ZeRO-1;
    # global batch 60 = mbs 2 x 5 micro-batches x dp 6.
    "deepspeed-pipeline": Scenario(
        "llama-3-8b", 24, 60, 4096, "deepspeed",
        {"tp": 1, "pp": 4, "cp": 1, "dp": 6, "mbs": 2, "zero_stage": 1},
    ),
    # Llama 3 8B on 48 H100s = 6 nodes: AutoTP tp 4 x dp 12, ZeRO-2;
    # global batch 180 = mbs 3 x 5 micro-batches x dp 12.
    "deepspeed-autotp": Scenario(
        "llama-3-8b", 48, 180, 4096, "deepspeed",
        {"tp": 4, "pp": 1, "cp": 1, "dp": 12, "mbs": 3, "zero_stage": 2},
    ),
    # Llama 3 70B on 120 H100s = 15 nodes with torchtitan: dp 3 = 120 / (4 x 5 x 2), FSDP
    # (ZeRO-3) over it; global batch 180 = mbs 6 x 10 micro-batches x dp 3; 4096 tokens, a
    # multiple of cp x the loss's 8 chunks.
    "torchtitan-fsdp": Scenario(
        "llama-3-70b", 120, 180, 4096, "torchtitan",
        {"tp": 4, "pp": 5, "cp": 2, "dp": 3, "vpp": 2, "mbs": 6, "zero_stage": 3},
    ),
    # Llama 3 8B on 24 H100s = 3 nodes with torchtitan, dp 3 replicated (ZeRO 0, DDP): tp 2 x
    # pp 4; global batch 60 = mbs 5 x 4 micro-batches x dp 3. With the scenario above, the
    # replicated and sharded degrees each differ from ep (1) in one of the two.
    "torchtitan-ddp": Scenario(
        "llama-3-8b", 24, 60, 4096, "torchtitan",
        {"tp": 2, "pp": 4, "cp": 1, "dp": 3, "mbs": 5, "zero_stage": 0},
    ),
}  # fmt: skip

# Each flag of megatron_args.sh and the value it must carry.
MEGATRON_FLAGS = {
    "megatron-dense": {
        "--tensor-model-parallel-size": "4",
        "--pipeline-model-parallel-size": "5",
        "--context-parallel-size": "3",
        # 80 layers / pp 5 = 16 a stage, in vpp 2 chunks of 8 (an even split)
        "--num-layers-per-virtual-pipeline-stage": "8",
        "--micro-batch-size": "1",
        "--global-batch-size": "20",
        "--seq-length": "6144",
    },
    "megatron-moe": {
        "--tensor-model-parallel-size": "4",
        "--pipeline-model-parallel-size": "3",
        "--context-parallel-size": "2",
        "--expert-model-parallel-size": "16",
        "--expert-tensor-parallel-size": "1",
        # 48 layers / pp 3 = 16 a stage, in vpp 2 chunks of 8
        "--num-layers-per-virtual-pipeline-stage": "8",
        "--micro-batch-size": "5",
        "--global-batch-size": "240",
        "--seq-length": "4096",
    },
}
# Flags a scenario must not carry: no experts on a dense model, no uneven first/last stages on
# an even split, and etp only where it differs from tp.
MEGATRON_ABSENT = {
    "megatron-dense": (
        "--expert-model-parallel-size", "--expert-tensor-parallel-size",
        "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
        "--num-virtual-stages-per-pipeline-rank",
    ),
    "megatron-moe": (
        "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
        "--num-virtual-stages-per-pipeline-rank",
    ),
}  # fmt: skip

# ds_config.json (DeepSpeed v0.19.8 runtime/config.py, zero/config.py, tensor_parallel/config.py):
# each key path and the value it must carry; None: the key must be absent.
DEEPSPEED_CONFIG = {
    "deepspeed-pipeline": {
        ("train_batch_size",): 60,
        ("train_micro_batch_size_per_gpu",): 2,
        ("gradient_accumulation_steps",): 5,
        ("zero_optimization", "stage"): 1,
        ("pipeline", "stages"): 4,
        ("tensor_parallel",): None,  # tp 1: no AutoTP
    },
    "deepspeed-autotp": {
        ("train_batch_size",): 180,
        ("train_micro_batch_size_per_gpu",): 3,
        ("gradient_accumulation_steps",): 5,
        ("zero_optimization", "stage"): 2,
        ("tensor_parallel", "autotp_size"): 4,
        ("pipeline",): None,  # pp 1: not the pipeline engine
    },
}

# torchtitan_run.sh's overrides (torchtitan 0.3.0 config/configs.py ParallelismConfig,
# TrainingConfig) and the values they must carry (None: not given).
TORCHTITAN_FLAGS = {
    "torchtitan-fsdp": {
        "--config": "llama3_70b",  # models/llama3 config_registry.py: the 70B flavor
        "--parallelism.data_parallel_replicate_degree": "1",  # ZeRO-3: nothing replicated
        "--parallelism.data_parallel_shard_degree": "3",  # FSDP over dp 3
        "--parallelism.tensor_parallel_degree": "4",
        "--parallelism.pipeline_parallel_degree": "5",
        "--parallelism.pipeline_parallel_schedule": "Interleaved1F1B",  # vpp 2 stages a rank
        # ceil((80 layers + embedding + output) / (pp 5 x vpp 2)) = ceil(82 / 10) = 9, and
        # ceil(82 / 9) = 10 stages = pp x vpp (distributed/pipeline_parallel.py)
        "--parallelism.pipeline_parallel_layers_per_stage": "9",
        "--parallelism.pipeline_parallel_microbatch_size": "6",
        "--parallelism.context_parallel_degree": "2",
        "--parallelism.expert_parallel_degree": "1",
        "--training.local_batch_size": "60",  # global batch 180 / dp 3
        "--training.global_batch_size": "180",
        "--training.seq_len": "4096",
    },
    "torchtitan-ddp": {
        "--config": "llama3_8b",
        "--parallelism.data_parallel_replicate_degree": "3",  # ZeRO 0: DDP over dp 3
        "--parallelism.data_parallel_shard_degree": "1",
        "--parallelism.tensor_parallel_degree": "2",
        "--parallelism.pipeline_parallel_degree": "4",
        "--parallelism.pipeline_parallel_schedule": "1F1B",  # one stage a rank
        "--parallelism.pipeline_parallel_layers_per_stage": None,  # the default split
        "--parallelism.pipeline_parallel_microbatch_size": "5",
        "--parallelism.context_parallel_degree": "1",
        "--parallelism.expert_parallel_degree": "1",
        "--training.local_batch_size": "20",  # global batch 60 / dp 3
        "--training.global_batch_size": "60",
        "--training.seq_len": "4096",
    },
}

# The files each backend's plan launches with (render/plan_files.py writes a backend's own only
# where it runs the layout): the torchrun line of each carries the nodes and GPUs per node.
TORCHRUN_FILES = {
    "megatron": ("launch_torchrun.sh", "megatron_args.sh"),
    "deepspeed": ("launch_torchrun.sh",),
    "torchtitan": ("launch_torchrun.sh", "torchtitan_run.sh"),
}

_ARRAY_ENTRY = re.compile(r"^ {4}(--[A-Za-z0-9_.-]+)(?: (.+))?$", re.MULTILINE)
_DEFAULTED = re.compile(r'(--nnodes|--nproc_per_node) "\$\{[A-Z_]+:-(\d+)\}"')


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


@pytest.fixture(scope="module")
def written(rules: RuleSet, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """written(name) -> the folder the scenario's plan was written to (planned once)."""
    done: dict[str, Path] = {}

    def folder(name: str) -> Path:
        if name not in done:
            s = SCENARIOS[name]
            found = parplan_gen.plan(
                s.model, {"gpus": s.gpus, "gpu": "h100"}, global_batch=s.global_batch,
                seq_len=s.seq_len, backend=s.backend, pins=s.layout, top=1, rules=rules,
            )  # fmt: skip
            chosen = found.chosen
            assert found.feasible and chosen.backend is not None
            assert chosen.backend.name == s.backend
            assert {k: getattr(chosen.plan, k) for k in s.layout} == s.layout
            out = tmp_path_factory.mktemp(name)
            found.write(out)
            done[name] = out
        return done[name]

    return folder


def flags(text: str) -> dict[str, str]:
    """`--flag value` (or `--flag` alone: "") of every entry of the bash arrays."""
    found: dict[str, str] = {}
    for flag, value in _ARRAY_ENTRY.findall(text):
        assert flag not in found, f"{flag} given twice"
        found[flag] = value
    return found


@pytest.mark.parametrize("name", sorted(MEGATRON_FLAGS))
def test_megatron_args_carry_each_layout_field(written: Callable[[str], Path], name: str) -> None:
    given = flags((written(name) / "megatron_args.sh").read_text(encoding="utf-8"))
    assert {flag: given.get(flag) for flag in MEGATRON_FLAGS[name]} == MEGATRON_FLAGS[name]
    assert not set(MEGATRON_ABSENT[name]) & set(given)


@pytest.mark.parametrize("name", sorted(DEEPSPEED_CONFIG))
def test_ds_config_carries_each_layout_field(written: Callable[[str], Path], name: str) -> None:
    config = json.loads((written(name) / "ds_config.json").read_text(encoding="utf-8"))
    for path, expected in DEEPSPEED_CONFIG[name].items():
        node: Any = config
        for key in path[:-1]:
            node = node[key]
        assert node.get(path[-1]) == expected, path


@pytest.mark.parametrize("name", sorted(TORCHTITAN_FLAGS))
def test_torchtitan_overrides_carry_each_layout_field(
    written: Callable[[str], Path], name: str
) -> None:
    given = flags((written(name) / "torchtitan_run.sh").read_text(encoding="utf-8"))
    assert {flag: given.get(flag) for flag in TORCHTITAN_FLAGS[name]} == TORCHTITAN_FLAGS[name]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_launchers_carry_the_nodes_and_the_gpus_per_node(
    written: Callable[[str], Path], name: str
) -> None:
    """nnodes = the layout's GPUs (dp x tp x pp x cp) / 8 per node; nproc = 8."""
    s, out = SCENARIOS[name], written(name)
    world = s.layout["dp"] * s.layout["tp"] * s.layout["pp"] * s.layout["cp"]
    assert world == s.gpus
    nodes = world // GPUS_PER_NODE
    expected = {"--nnodes": str(nodes), "--nproc_per_node": str(GPUS_PER_NODE)}
    for file in TORCHRUN_FILES[s.backend]:
        text = (out / file).read_text(encoding="utf-8")
        assert dict(_DEFAULTED.findall(text)) == expected, file
    sbatch = (out / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert f"#SBATCH --nodes={nodes}\n" in sbatch
    assert f"#SBATCH --gpus-per-node={GPUS_PER_NODE}\n" in sbatch
    hosts = [
        line for line in (out / "hostfile").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]  # fmt: skip
    assert len(hosts) == nodes
    assert all(line.endswith(f" slots={GPUS_PER_NODE}") for line in hosts)
