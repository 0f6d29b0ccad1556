"""Rendered files against the real upstream code (issue 13, item 4): every ds_config.json goes
through DeepSpeed's DeepSpeedConfig, every megatron_args.sh through Megatron-Core's
TransformerConfig, DistributedDataParallelConfig, OptimizerConfig, parallel_state and
num-microbatches calculator, every torchtitan_run.sh of the planned scenarios through
torchtitan's own ConfigManager and ParallelDims, and every accelerate_config.yaml through
Accelerate's own loader and launcher (tests/consumer_deepspeed.py, tests/consumer_megatron.py,
tests/consumer_torchtitan.py, tests/consumer_accelerate.py). A file the
real code refuses fails with that code's message; an accepted file must read back as the plan's
layout.

Scenarios: the issue's "Done when" list, planned through the public API with the batch and
sequence chosen below, and test_render.py's four hand-built plans. A backend's file is written
only when that backend runs the chosen layout; a file that is absent must be explained in
plan.json's `backends`, and the chosen backend's own file is always there.

Needs the `consumers` extra (pip install -e '.[consumers]'); CI sets
PARPLAN_REQUIRE_CONSUMERS=1 so that these tests cannot skip there.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import consumer_accelerate
import consumer_torchtitan
import pytest
from hf_routing import HfRouter, hf_weights
from test_render import rendered_cases

import parplan_gen
from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.layout import loss_compiled_value
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.render_options import RenderOptions, write_plan

import consumer_deepspeed
import consumer_megatron
from conftest import PLANNED, PLANNED_ON, builtin_rules
from consumer_support import consumer, mismatches, model_of, plan_of, sharding

# Megatron-Core warns of what is absent on a CPU machine (Transformer Engine, fused kernels).
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# Layouts the issue names as expressible, rendered as given (model, GPUs, layout): Megatron-LM
# options the search's choice may not show. Llama 3 405B's 126 layers on pp 16 x vpp 8 count the
# embedding and the loss as layers of the split (128 = 16 x 8); Qwen3-235B-A22B on 256 H100s
# as Megatron-Bridge's performance preset runs it (scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py: tp 2, pp 8, vpp 4, ep 32, etp 1, global batch 2048, mbs 1):
# ep 32 > dp 16, the expert groups folded over tp x dp, and 94 + 2 = 96 layers on 8 x 4 stages.
QWEN3_235B = str(Path(__file__).parents[1] / "examples" / "hf" / "qwen3-235b-a22b.json")
QWEN15_MOE = str(Path(__file__).parents[1] / "examples" / "hf" / "qwen1.5-moe-a2.7b.json")
DEEPSEEK_V2_LITE = str(Path(__file__).parents[1] / "examples" / "hf" / "deepseek-v2-lite.json")
PINNED = {
    # Megatron-FSDP (core_v0.16.1): ZeRO-3 with tp 2 on Hopper (CUDA_DEVICE_MAX_CONNECTIONS left
    # unset, not 1) and ZeRO-2 with experts.
    "llama-3-8b-megatron-fsdp-zero3": (
        "llama-3-8b", 16,
        {"tp": 2, "mbs": 1, "global_batch": 256, "seq_len": 8192, "sequence_parallel": True,
         "zero_stage": 3},
    ),
    "mixtral-8x7b-megatron-fsdp-zero2": (
        "mixtral-8x7b", 64,
        {"tp": 2, "ep": 8, "mbs": 1, "global_batch": 256, "seq_len": 4096,
         "sequence_parallel": True, "zero_stage": 2, "recompute": "full"},
    ),
    "llama-3-405b-pp16-vpp8": (
        "llama-3-405b", 16384,
        {"tp": 8, "pp": 16, "vpp": 8, "mbs": 1, "global_batch": 2048, "seq_len": 8192,
         "sequence_parallel": True, "distributed_optimizer": True, "recompute": "full"},
    ),
    "qwen3-235b-ep32-256xh100": (
        QWEN3_235B, 256,
        {"tp": 2, "pp": 8, "vpp": 4, "ep": 32, "etp": 1, "mbs": 1, "global_batch": 2048,
         "seq_len": 4096, "sequence_parallel": True, "distributed_optimizer": True},
    ),
    # Two routers for test_megatron_core_routes_as_the_hf_model: Qwen1.5-MoE-A2.7B (qwen2_moe,
    # norm_topk_prob false), and DeepSeek-V2-Lite as Megatron-Bridge's recipe runs it
    # (src/megatron/bridge/recipes/deepseek/h100/deepseek_v2.py
    # deepseek_v2_lite_pretrain_8gpu_h100_bf16_config: tp 1, pp 1, ep 8, global batch 512, mbs 1,
    # seq 4096, full recompute, distributed optimizer).
    "qwen1.5-moe-ep4-8xh100": (
        QWEN15_MOE, 8,
        {"ep": 4, "mbs": 1, "global_batch": 256, "seq_len": 4096, "recompute": "full",
         "distributed_optimizer": True},
    ),
    "deepseek-v2-lite-ep8-8xh100": (
        DEEPSEEK_V2_LITE, 8,
        {"ep": 8, "mbs": 1, "global_batch": 512, "seq_len": 4096, "recompute": "full",
         "distributed_optimizer": True},
    ),
    # DeepSpeed v0.19.8 trains AutoTP with ZeRO-3 (runtime/engine.py
    # _configure_tensor_parallel_states), which v0.16.9 refused: the pinned DeepSpeedConfig takes
    # stage 3 with tensor_parallel.autotp_size 2.
    "llama-3-70b-deepspeed-autotp-zero3": (
        "llama-3-70b", 64,
        {"tp": 2, "mbs": 1, "global_batch": 512, "seq_len": 4096, "zero_stage": 3,
         "recompute": "full", "backend": "deepspeed"},
    ),
}  # fmt: skip
# What DeepSpeed and Megatron-Core raise for a config they refuse (pydantic's ValidationError is
# a ValueError; parallel_state raises RuntimeError).
REFUSALS = (AssertionError, ValueError, RuntimeError, TypeError, KeyError)
# Plans priced on Accelerate (`plan --backend accelerate`: its FSDP2 is priced apart, so its file
# is written for its own plans only): FSDP2 alone, with the transformers tp_plan's tp, and with
# cp over a long sequence (model, GPUs, global batch, sequence, pins).
ACCELERATE = {
    "llama-3-8b-accelerate-16xh100": ("llama-3-8b", 16, 64, 4096, {}),
    "llama-3-70b-accelerate-tp8-64xh100": ("llama-3-70b", 64, 256, 4096, {"tp": 8}),
    "llama-3-8b-accelerate-cp4-16xh100": ("llama-3-8b", 16, 32, 32768, {"cp": 4}),
}
RENDERED = ("dense_multinode", "moe", "single_node", "graph_channel_parallel")


@functools.cache
def _pinned(name: str, root: Path) -> Path:
    model, gpus, pinned = PINNED[name]
    layout = {k: v for k, v in pinned.items() if k != "backend"}
    cluster = load_cluster_spec({"gpus": gpus, "gpu": "h100"})
    backend = str(pinned.get("backend", "megatron"))
    evaluation = parplan_gen.estimate(model, cluster, layout, backend=backend)
    assert evaluation.runnable and evaluation.fits, evaluation.violations
    document = PlanDocument.from_parts(
        rules=builtin_rules(), model=load_model(model), cluster=cluster, chosen=evaluation.estimate
    )
    write_plan(document, root / name, RenderOptions())
    return root / name


@functools.cache
def _on_accelerate(name: str, root: Path) -> Path:
    model, gpus, batch, seq, pins = ACCELERATE[name]
    cluster = {"gpus": gpus, "gpu": "h100"}
    found = parplan_gen.plan(
        model, cluster, global_batch=batch, seq_len=seq, backend="accelerate", pins=pins
    )
    found.write(root / name)
    return root / name


def _rendered(name: str, root: Path) -> Path:
    folder = root / name
    if not folder.exists():
        folder.mkdir()
        for file, text in rendered_cases()[name].items():
            (folder / file).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def plan_folder(tmp_path_factory: pytest.TempPathFactory, planned):
    root = tmp_path_factory.mktemp("consumers")

    def folder(name: str) -> Path:
        if name in PINNED:
            return _pinned(name, root)
        if name in ACCELERATE:
            return _on_accelerate(name, root)
        return planned(name) if name in PLANNED or name in PLANNED_ON else _rendered(name, root)

    return folder


CASES = (*PLANNED, *PINNED, *RENDERED)
TRANSFORMER_CASES = tuple(name for name in CASES if name != "graph_channel_parallel")
# The backend whose file each consumer reads.
BACKEND_OF_FILE = {
    "ds_config.json": "deepspeed",
    "megatron_args.sh": "megatron",
    "torchtitan_run.sh": "torchtitan",
    "accelerate_config.yaml": "accelerate",
}


def _written(folder: Path, file: str) -> bool:
    """Whether `file` was written; when it was not, plan.md must say so and why, and the plan
    must not be on that file's backend (no file may stand for a plan its backend does not run)."""
    if (folder / file).exists():
        return True
    report = (folder / "plan.md").read_text(encoding="utf-8")
    assert f"- {file}: not written, " in report, f"{file} not written, and plan.md says nothing"
    document = json.loads((folder / "plan.json").read_text(encoding="utf-8"))
    assert document["chosen"]["backend"]["name"] != BACKEND_OF_FILE[file]
    return False


def _read_by(consumer_name: str, path: Path, read: Callable[..., Any], *args: Any) -> Any:
    """`read(path, *args)` by the real consumer; a refusal fails the test with its message."""
    try:
        return read(path, *args)
    except REFUSALS as exc:
        message = f"{consumer_name} refuses {path.name}: {type(exc).__name__}: {exc}"
        pytest.fail(message, pytrace=False)


@pytest.mark.parametrize("name", CASES)
def test_deepspeed_accepts_ds_config_as_the_plans_layout(name, plan_folder):
    folder = plan_folder(name)
    plan, gpus = plan_of(folder)
    path = folder / "ds_config.json"
    if not _written(folder, path.name):
        return
    config = _read_by("DeepSpeed", path, consumer_deepspeed.deepspeed_config, gpus)
    expected = dict(plan, precision="bf16" if plan["precision"] == "fp8" else plan["precision"])
    assert mismatches(consumer_deepspeed.layout_read(config), expected) == []
    assert consumer_deepspeed.zero_read(config) == sharding(plan)


@functools.cache
def _megatron(folder: Path) -> consumer_megatron.MegatronReading | None:
    """Megatron-Core's reading of the folder's megatron_args.sh (None: not written)."""
    path = folder / "megatron_args.sh"
    if not _written(folder, path.name):
        return None
    return _read_by("Megatron-Core", path, consumer_megatron.megatron_reading)


@pytest.mark.parametrize("name", TRANSFORMER_CASES)
def test_megatron_core_accepts_megatron_args(name, plan_folder):
    reading = _megatron(plan_folder(name))
    # every argument is read by a Megatron-Core config or listed as Megatron-LM training-only
    assert reading is None or reading.unread == ()


@pytest.mark.parametrize("name", TRANSFORMER_CASES)
def test_megatron_args_read_back_as_the_plans_layout_and_model(name, plan_folder):
    folder = plan_folder(name)
    (plan, _), reading = plan_of(folder), _megatron(folder)
    if reading is None:
        return  # not written: _written checked that plan.json says why
    assert reading.world == plan["dp"] * plan["tp"] * plan["pp"] * plan["cp"]
    assert mismatches(consumer_megatron.layout_read(reading), plan) == []
    assert mismatches(consumer_megatron.model_read(reading), model_of(folder)) == []
    assert consumer_megatron.sharding_read(reading) == sharding(plan)


@pytest.mark.parametrize("name", PLANNED)
def test_torchtitan_accepts_torchtitan_run_as_the_plans_layout(name, plan_folder):
    folder = plan_folder(name)
    plan, gpus = plan_of(folder)
    path = folder / "torchtitan_run.sh"
    if not _written(folder, path.name):
        return
    reading = _read_by("torchtitan", path, consumer_torchtitan.torchtitan_reading, gpus)
    # the loss compiled as the layout says, else as torchtitan's plans compile it (a plan priced
    # on another backend leaves it unsaid)
    compiled = loss_compiled_value(plan["loss_compiled"], "torchtitan")
    expected = {**plan, "loss_compiled": compiled}
    assert mismatches(consumer_torchtitan.layout_read(reading), expected) == []


@pytest.mark.parametrize("name", (*PLANNED, *ACCELERATE))
def test_accelerate_accepts_accelerate_config_as_the_plans_layout(name, plan_folder):
    folder = plan_folder(name)
    plan, gpus = plan_of(folder)
    path = folder / "accelerate_config.yaml"
    if not _written(folder, path.name):
        return
    reading = _read_by("Accelerate", path, consumer_accelerate.accelerate_reading)
    expected = dict(plan, world_size=gpus)
    assert mismatches(consumer_accelerate.layout_read(reading), expected) == []
    # FSDP2, resharded after forward (ZeRO-3), one unit per layer, gathering and reducing in the
    # plan's 16-bit type (what rules/cost/sharding.yaml prices for Accelerate), nothing offloaded
    assert consumer_accelerate.fsdp_read(reading) == {
        "fsdp_version": 2,
        "reshard_after_forward": True,
        "wrap": "transformer_auto_wrap_policy",
        "param_dtype": plan["precision"],
        "reduce_dtype": plan["precision"],
        "offload": "OffloadPolicy",
        "cp_comm_strategy": "allgather" if plan["cp"] > 1 else None,
    }


def test_the_accelerate_scenarios_are_accelerates_with_their_pins(plan_folder):
    for name, (_, _, _, _, pins) in ACCELERATE.items():
        plan, _ = plan_of(plan_folder(name))
        document = json.loads((plan_folder(name) / "plan.json").read_text(encoding="utf-8"))
        assert document["chosen"]["backend"] == {"name": "accelerate", "version": "1.16"}
        assert {k: plan[k] for k in pins} == pins and plan["zero_stage"] == 3


# Each MoE scenario's router as its config.json states it (tests/hf_routing.py), and the
# Megatron-Core fields that compute the same (test_megatron_core_routes_as_the_hf_model).
ROUTERS: dict[str, tuple[HfRouter, dict[str, Any]]] = {
    # Mixtral 8x7B: softmax, top-2, always renormalised (planned on Megatron-LM: DeepSpeed-MoE
    # ranks first by 0.2 %)
    "mixtral-8x7b-64xh100-megatron": (
        HfRouter("softmax", k=2, norm=True),
        {"moe_router_score_function": "softmax", "moe_router_pre_softmax": False,
         "moe_router_topk_scaling_factor": None, "moe_router_num_groups": None},
    ),
    # Qwen3-30B-A3B's config.json: norm_topk_prob true
    "qwen3-30b-a3b-16xh100": (
        HfRouter("softmax", k=8, norm=True),
        {"moe_router_score_function": "softmax", "moe_router_pre_softmax": False,
         "moe_router_topk_scaling_factor": None, "moe_router_num_groups": None},
    ),
    # Qwen1.5-MoE-A2.7B's config.json: norm_topk_prob false
    "qwen1.5-moe-ep4-8xh100": (
        HfRouter("softmax", k=4, norm=False),
        {"moe_router_score_function": "softmax", "moe_router_pre_softmax": True,
         "moe_router_topk_scaling_factor": None, "moe_router_num_groups": None},
    ),
    # DeepSeek-V2-Lite's config.json: softmax, greedy, norm_topk_prob false, factor 1.0
    "deepseek-v2-lite-ep8-8xh100": (
        HfRouter("deepseek_v2", k=6, norm=False, scale=1.0),
        {"moe_router_score_function": "softmax", "moe_router_pre_softmax": True,
         "moe_router_topk_scaling_factor": 1.0, "moe_router_num_groups": None,
         "moe_router_enable_expert_bias": False},
    ),
    # DeepSeek-V3's config.json: sigmoid, noaux_tc (bias), 8 groups / 4, norm true, factor 2.5
    "deepseek-v3-1024xh100": (
        HfRouter("deepseek_v3", k=8, norm=True, scale=2.5, groups=8, group_topk=4),
        {"moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True,
         "moe_router_topk_scaling_factor": 2.5, "moe_router_num_groups": 8,
         "moe_router_group_topk": 4},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", ROUTERS)
def test_megatron_core_routes_as_the_hf_model(name, plan_folder):
    """The router flags megatron_args.sh writes make Megatron-Core 0.16.1 weigh the experts as
    the HF model does. Its rules (megatron/core/transformer/moe/moe_utils.py): softmax without
    --moe-router-pre-softmax takes the top k of the logits and a softmax over them (lines
    713-715: weights that sum to 1, norm_topk_prob true), with it a softmax over every expert
    and then the top k (710-712: norm_topk_prob false); sigmoid renormalises whenever k > 1
    (716-724); --moe-router-topk-scaling-factor multiplies after that (728-729);
    group_limited_topk ranks a group by the sum of its best k / group_topk scores (553-556:
    DeepSeek-V3's top two at 8 / 4). TransformerConfig.__post_init__ takes the expert bias with
    sigmoid only (transformer_config.py 1593) and refuses a softmax after top-1 (1633-1641).
    Beyond the fields, Megatron-Core's own topk_routing_with_score_function is run on random
    logits with the script's settings against the HF router (tests/hf_routing.py)."""
    reading = _megatron(plan_folder(name))
    assert reading is not None, f"{name}: the plan runs on Megatron-LM, its script is written"
    router, fields = ROUTERS[name]
    config = reading.config
    assert {field: getattr(config, field) for field in fields} == fields
    # The router and the permutations run as Transformer Engine's fused kernels, the launches
    # rules/cost/moe.yaml counts (core 0.16.1 moe_router_fusion, moe_permute_fusion).
    assert config.moe_router_fusion and config.moe_permute_fusion
    torch = consumer("torch")
    moe_utils = consumer("megatron.core.transformer.moe.moe_utils")
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, config.num_moe_experts, generator=generator)
    bias = 0.1 * torch.randn(config.num_moe_experts, generator=generator)
    probs, routing_map = moe_utils.topk_routing_with_score_function(
        logits,
        config.moe_router_topk,
        use_pre_softmax=config.moe_router_pre_softmax,
        num_groups=config.moe_router_num_groups,
        group_topk=config.moe_router_group_topk,
        scaling_factor=config.moe_router_topk_scaling_factor,
        score_function=config.moe_router_score_function,
        expert_bias=bias if config.moe_router_enable_expert_bias else None,
    )
    expected = hf_weights(torch, router, logits, bias)
    assert torch.equal(routing_map.bool(), expected > 0)
    assert torch.allclose(probs, expected, atol=1e-6)


def test_the_consumers_are_the_pinned_releases():
    assert consumer("accelerate").__version__ == "1.16.0"
    assert consumer("deepspeed").__version__ == "0.19.8"
    assert consumer("megatron.core.package_info").__version__ == "0.16.1"
    assert consumer("torch").__version__.startswith("2.13.0")


# ---- the harness itself: a refused file fails with the consumer's own message ------------------


def test_deepspeed_refusal_carries_deepspeeds_message(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(
        '{"train_batch_size": 512, "train_micro_batch_size_per_gpu": 1,'
        ' "gradient_accumulation_steps": 16, "zero_optimization": {"stage": 3}}'
    )
    with pytest.raises(AssertionError, match=r"512 != 1 \* 16 \* 64$"):
        consumer_deepspeed.deepspeed_config(path, 64)  # dp 32 x tp 2 written as dp only
    config = consumer_deepspeed.deepspeed_config(path, 32)
    assert (config.world_size, consumer_deepspeed.zero_read(config)) == (32, "zero-3")


def _megatron_script(tmp_path: Path, *args: str, nodes: int = 8) -> Path:
    path = tmp_path / "megatron_args.sh"
    words = " ".join(args)
    path.write_text(
        "ARGS=(--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --bf16\n"
        f"    --micro-batch-size 1 --global-batch-size 512 {words})\n"
        f'torchrun --nnodes "${{NNODES:-{nodes}}}" --nproc_per_node "${{NPROC_PER_NODE:-8}}" '
        'pretrain_gpt.py "${ARGS[@]}"\n'
    )
    return path


def test_megatron_reading_works_dp_and_micro_batches_from_megatron_core(tmp_path):
    path = _megatron_script(tmp_path, "--tensor-model-parallel-size 4", "--sequence-parallel")
    reading = consumer_megatron.megatron_reading(path)
    # 64 ranks / tp 4 = dp 16; 512 / (1 x 16) = 32 micro-batches
    assert (reading.world, reading.dp, reading.micro_batches) == (64, 16, 32)
    assert reading.config.sequence_parallel and reading.config.bf16


@pytest.mark.parametrize("recipe", ["tensorwise", "mxfp8"])
def test_megatron_core_takes_the_tp_overlap_and_fp8_recipe_parplan_renders(tmp_path, recipe):
    # What megatron_args.sh writes for an FP8 plan with TP overlap (cost/layout.py fp8_recipe).
    args = ("--tensor-model-parallel-size 4", "--sequence-parallel", "--tp-comm-overlap")
    fp8 = ("--fp8-format hybrid", f"--fp8-recipe {recipe}")
    reading = consumer_megatron.megatron_reading(_megatron_script(tmp_path, *args, *fp8))
    config = reading.config
    assert (config.tp_comm_overlap, config.fp8, config.fp8_recipe) == (True, "hybrid", recipe)
    assert not reading.unread


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--tensor-model-parallel-size 3",),
            r"num_attention_heads \(32\) must be a multiple of tensor_model_parallel_size \(3\)",
        ),
        (("--pipeline-model-parallel-size 3",), r"world_size \(64\) is not divisible by 3"),
        (
            ("--tensor-model-parallel-size 8", "--global-batch-size 4"),
            (
                r"global batch size \(4\) is not divisible by micro batch size \(1\) times data "
                r"parallel size \(8\)"
            ),
        ),
        (("--fp8-format", "e5m2"), r"fp8 = 'e5m2': Megatron-Core declares"),
    ],
)
def test_megatron_refusal_carries_megatron_cores_message(tmp_path, args, message):
    with pytest.raises((ValueError, AssertionError, RuntimeError), match=message):
        consumer_megatron.megatron_reading(_megatron_script(tmp_path, *args))


@pytest.mark.parametrize("name", PLANNED)
def test_the_chosen_backends_file_is_written(name, plan_folder):
    folder = plan_folder(name)
    document = json.loads((folder / "plan.json").read_text(encoding="utf-8"))
    chosen = document["chosen"]["backend"]["name"]
    assert document["backends"][chosen] is None
    files = {backend: file for file, backend in BACKEND_OF_FILE.items()}
    if chosen in files:
        assert (folder / files[chosen]).exists()
