"""The torchtitan backend's capabilities and constraints (parplan_gen/backends/torchtitan/:
capabilities.py, constraints.yaml): full sharding with pp and cp runs there and nowhere else;
a model is torchtitan's only through one of its 0.3 configs, in bf16 or with float8 linear
layers (the plan's own config function where the config has none), on a GPU torchtitan's
float8 runs on. The expected verdicts are worked from torchtitan 0.3.0's sources named in the
YAML."""

from __future__ import annotations

import functools

import pytest

from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.layout import build_layout
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.evaluate import evaluate
from parplan_gen.rules.ruleset import load_rules


@functools.cache
def _rules():  # type: ignore[no-untyped-def]
    return load_rules()


def invalid(model: str, gpus: int, backend: str, **layout: object) -> list[str]:
    """The ids of the `invalid` rules (capabilities included) `layout` breaks on `backend`."""
    spec, cluster = load_model(model), load_cluster_spec({"gpus": gpus, "gpu": "h100"})
    built = build_layout(gpus, **layout)  # type: ignore[arg-type]
    found = evaluate(spec, cluster, built, _rules(), backend=backend)  # type: ignore[arg-type]
    return [v.rule_id for v in found.violations if v.severity == "invalid"]


def test_fsdp_with_tp_pp_and_cp_runs_on_torchtitan_only() -> None:
    # FSDP2 (ZeRO-3) x TP 8 x PP 4 x CP 2 on 256 GPUs: dp = 256 / (8 * 4 * 2) = 4.
    sizes = dict(tp=8, pp=4, cp=2, mbs=1, global_batch=64, seq_len=8192, zero_stage=3)
    assert invalid("llama-3-70b", 256, "torchtitan", **sizes) == []
    # DeepSpeed: no ring cp (capabilities); Megatron-LM: ZeRO-3 is Megatron-FSDP, which it does
    # not document with pp (a `reject` rule: the planner does not choose it).
    deepspeed = invalid("llama-3-70b", 256, "deepspeed", **sizes)
    assert deepspeed[0] == "backend.capabilities"
    assert "deepspeed.pipeline_zero_at_most_1" in deepspeed  # ZeRO-3 with pp > 1
    assert invalid("llama-3-70b", 256, "megatron", **sizes) == []
    spec, cluster = load_model("llama-3-70b"), load_cluster_spec({"gpus": 256, "gpu": "h100"})
    found = evaluate(spec, cluster, build_layout(256, **sizes), _rules(), backend="megatron")  # type: ignore[arg-type]
    assert "megatron.fsdp_no_pipeline" in {v.rule_id for v in found.violations}


def test_issue_layout_dp32_tp2_zero3_is_torchtitans() -> None:
    # The issue's llama-3-70b plan on 64 H100 (Megatron-LM runs it as Megatron-FSDP,
    # tests/test_megatron_fsdp.py; DeepSpeed v0.19.8 as AutoTP with ZeRO-3).
    sizes = dict(tp=2, mbs=1, global_batch=512, seq_len=4096, zero_stage=3)
    assert invalid("llama-3-70b", 64, "torchtitan", **sizes) == []
    assert invalid("llama-3-70b", 64, "deepspeed", **sizes) == []


def test_a_model_without_a_torchtitan_config_is_refused() -> None:
    # gpt3-175b: 96 layers, no llama3 flavor of torchtitan 0.3 builds it.
    sizes = dict(tp=8, mbs=1, global_batch=128, seq_len=2048, zero_stage=3)
    assert invalid("gpt3-175b", 64, "torchtitan", **sizes) == ["torchtitan.has_config"]


@pytest.mark.parametrize(
    ("model", "precision", "refused"),
    [
        ("llama-3-8b", "bf16", False),
        # llama3_8b has no float8 converter: the plan's config function adds one
        ("llama-3-8b", "fp8", False),
        ("llama-3-405b", "fp8", False),  # llama3_405b builds Float8LinearConverter
        ("llama-3-405b", "bf16", False),  # the plan's config function builds none
        # config/configs.py TrainingConfig.mixed_precision_param: bfloat16 or float32
        ("llama-3-8b", "fp16", True),
    ],
)
def test_precision_is_bf16_or_float8(model: str, precision: str, refused: bool) -> None:
    sizes = dict(tp=8, mbs=1, global_batch=64, seq_len=8192, zero_stage=3, precision=precision)
    assert ("torchtitan.config_precision" in invalid(model, 64, "torchtitan", **sizes)) is refused


@pytest.mark.parametrize(
    ("gpu", "architecture", "refused"),
    [
        ("h100", None, False),  # SM 9.0
        ("l40s", None, False),  # Ada, SM 8.9
        ("b200", None, False),  # SM 10.0: MXFP8 (mx.py)
        ("mi300x", None, False),  # gfx942
        ("h100", "ampere", True),  # an FP8 peak on a GPU float8.py refuses (SM 8.0)
    ],
)
def test_float8_needs_sm89_or_gfx942(gpu: str, architecture: str | None, refused: bool) -> None:
    spec, cluster = load_model("llama-3-8b"), load_cluster_spec({"gpus": 8, "gpu": gpu})
    if architecture is not None:
        hardware = cluster.gpu.model_copy(update={"architecture": architecture})
        cluster = cluster.model_copy(update={"gpu": hardware})
    layout = build_layout(8, mbs=1, global_batch=64, seq_len=8192, zero_stage=3, precision="fp8")
    found = evaluate(spec, cluster, layout, _rules(), backend="torchtitan")
    assert ("torchtitan.float8_gpu" in [v.rule_id for v in found.violations]) is refused


@pytest.mark.parametrize(
    ("pp", "vpp", "runs"),
    [
        # llama-3-70b: 80 layers + 2 (embedding, output) = 82 weighted layers.
        (4, 2, True),  # ceil(82 / 8) = 11 per stage, ceil(82 / 11) = 8 = 4 x 2 stages
        (8, 5, False),  # ceil(82 / 40) = 3 per stage, ceil(82 / 3) = 28 != 40 stages
    ],
)
def test_virtual_stages_follow_layers_per_stage(pp: int, vpp: int, runs: bool) -> None:
    sizes = dict(tp=8, pp=pp, vpp=vpp, mbs=1, global_batch=64 * pp, seq_len=8192, zero_stage=3)
    broken = invalid("llama-3-70b", 8 * pp * 2, "torchtitan", **sizes)
    assert ("torchtitan.virtual_stages" not in broken) is runs


def test_torchtitan_shards_fully_or_not_at_all() -> None:
    titan = BACKENDS["torchtitan"]
    assert titan.optimizers == ((3, False), (0, False))
    zero1 = build_layout(8, mbs=1, global_batch=8, seq_len=4096, zero_stage=1)
    assert titan.refuses(zero1) == "torchtitan has no ZeRO-1 sharding"
