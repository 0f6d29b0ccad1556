"""MFU in the count the plan's backend logs (parplan_gen/data/mfu_conventions.yaml,
cost/mfu_convention.py), with both counts in the JSON.

The causal figure is checked against Megatron-LM's own count, written out here from core_v0.16.1
megatron/training/training.py num_floating_point_operations (transformer_flops, GQA branch):
per token, 3 x 2 x [h (q + k + v) + q s / 2 x 2 + q h] for attention and 3 x 2 x h x 3 ffn for
the SwiGLU MLP per layer, plus 3 x 2 x h x V for the logits.
"""

from __future__ import annotations

import json

import pytest

import parplan_gen
from parplan_gen.cost.mfu_convention import SAME, backend_convention, convention_of, mfu_text
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.frontier import Frontier, FrontierPoint, mfu_line
from parplan_gen.planning.loading import load_cluster_spec, load_model
from parplan_gen.planning.sanity import plan_causal_mfu

NODE = {"gpus": 8, "gpu": "h100"}
LAYOUT = {"tp": 1, "mbs": 1, "global_batch": 64, "seq_len": 4096, "distributed_optimizer": True}


def megatron_flops_per_token(seq: int) -> float:
    """Llama 3 8B (h 4096, 32 layers, 32 heads of 128, 8 KV heads, SwiGLU ffn 14336, vocab
    128256: a multiple of 128, so Megatron-LM pads none at tp 1), as Megatron-LM counts it."""
    h, layers, ffn, vocab = 4096, 32, 14336, 128256
    q, kv = 32 * 128, 8 * 128
    attention = 3 * 2 * (h * (q + kv + kv) + q * seq / 2 * 2 + q * h)
    mlp = 3 * 2 * h * ffn * 3
    return layers * (attention + mlp) + 3 * 2 * h * vocab


@pytest.fixture(scope="module")
def megatron():
    return parplan_gen.estimate("llama-3-8b", NODE, LAYOUT, backend="megatron").estimate


def test_the_causal_mfu_is_megatron_lms_count(megatron):
    peak = load_cluster_spec(NODE).gpu.peak_flops("bf16")
    tokens = 64 * 4096
    expected = megatron_flops_per_token(4096) * tokens / megatron.time.step_s / 8 / peak
    assert megatron.throughput.mfu_causal == pytest.approx(expected, rel=1e-5)
    assert megatron.throughput.model_tflops_causal_per_gpu == pytest.approx(
        expected * peak / 1e12, rel=1e-5
    )
    # the whole matrix counts the scores twice over: s x q more per token and layer, x 3 x 2
    full = megatron_flops_per_token(4096) + 32 * 3 * 2 * 4096 * 32 * 128 / 2 * 2
    assert megatron.throughput.mfu == pytest.approx(
        full * tokens / megatron.time.step_s / 8 / peak, rel=1e-5
    )


def test_the_sanity_check_and_the_rule_count_alike(megatron):
    """planning/sanity.py works the causal MFU from the model's values, the rule from its
    formula: the same figure."""
    model = load_model("llama-3-8b")
    assert plan_causal_mfu(model, megatron) == pytest.approx(megatron.throughput.mfu_causal)


@pytest.mark.parametrize(
    ("backend", "attention"),
    [("megatron", "causal"), ("torchtitan", "full"), ("deepspeed", "full"), ("ddp", "full")],
)
def test_each_backend_logs_its_count(backend, attention):
    count = backend_convention(backend)
    assert count.attention == attention
    assert count.source  # the framework file that counts (or shows nothing is logged)


def test_the_views_show_the_backends_count_and_say_which(megatron, cli):
    assert convention_of(megatron) == backend_convention("megatron")
    assert mfu_text(megatron) == (
        f"{megatron.throughput.mfu_causal:.1%} (causal, as Megatron-LM counts it)"
    )
    titan = parplan_gen.estimate(
        "llama-3-8b", NODE, {**LAYOUT, "distributed_optimizer": False, "zero_stage": 3},
        backend="torchtitan",
    ).estimate  # fmt: skip
    assert mfu_text(titan) == (
        f"{titan.throughput.mfu:.1%} (whole s x s scores, as torchtitan counts it)"
    )
    args = ["estimate", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--global-batch", 64,
            "--seq-len", 4096, "--mbs", 1, "--distributed-optimizer", "--backend", "megatron"]  # fmt: skip
    shown = cli(*args)
    assert f"MFU {mfu_text(megatron)}" in shown.out
    both = cli(*args, "--json").json()["throughput"]
    assert (both["mfu"], both["mfu_causal"]) == pytest.approx(
        (megatron.throughput.mfu, megatron.throughput.mfu_causal)
    )


def test_a_graph_model_has_one_count_and_says_nothing():
    found = parplan_gen.estimate(
        "resnet-50", {"gpus": 8, "gpu": "a100-80gb"}, {"mbs": 256, "global_batch": 2048}
    ).estimate
    assert found.throughput.mfu_causal == found.throughput.mfu
    assert convention_of(found) == SAME
    assert mfu_text(found) == f"{found.throughput.mfu:.1%}"


def test_a_plan_older_than_the_causal_figure_shows_the_whole_count(megatron):
    old = megatron.model_copy(
        update={
            "throughput": megatron.throughput.model_copy(
                update={"mfu_causal": None, "model_tflops_causal_per_gpu": None}
            )
        }
    )
    assert convention_of(old).attention == "full"
    assert "mfu_causal" not in json.dumps(old.contract())


def test_a_frontier_point_shows_its_backends_count():
    point = FrontierPoint(
        gpu="h100-sxm-80gb", gpus=8, feasible=True, reason=None,
        backend=BACKENDS["megatron"].ref,
        layout=None, layout_label=None, step_s=1.0, mfu=0.5, mfu_causal=0.45,
        mfu_convention="causal", wall_days=1.0, gpu_hours=1.0, gpu_hour_price=None, cost=None,
    )  # fmt: skip
    assert point.shown_mfu == 0.45
    assert point.model_copy(update={"mfu_convention": "full"}).shown_mfu == 0.5
    frontier = Frontier(
        model="llama-3-8b", title="Llama 3 8B", global_batch=64, seq_len=4096, tokens=1e9,
        gpu_types=["h100-sxm-80gb"], counts=[8], basis="gpu_hours", basis_note=None,
        deadline=None, budget=None, points=[point],
    )  # fmt: skip
    assert mfu_line(frontier) == (
        "MFU in the count each point's backend logs (megatron: causal, as Megatron-LM counts it)"
    )
