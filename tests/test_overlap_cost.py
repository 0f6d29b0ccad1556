"""What hidden communication costs the compute it overlaps (rules/cost/time.yaml): Lee et al.
2025 (arXiv:2507.03114v1, abstract) measured compute that overlaps communication 18.9 % slower
on average than the same compute alone.

Worked here per overlap window, from first principles: compute F beside a transfer of X seconds
runs at 1 / 1.189 while the transfer runs, so the window takes max(X, F + share X) with
share = 0.189 / 1.189, where free overlap took max(X, F). The transfers and the compute that
hides them are the terms the overlap rules already name; each case checks the priced cost
against that difference, window by window.
"""

from __future__ import annotations

from typing import Any

import pytest
from formula_env import formula_env, formula_value

from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.layout import build_layout
from parplan_gen.planning.evaluate import Evaluator

from conftest import builtin_rules

SLOWDOWN = 0.189  # Lee et al. 2025, abstract: "an average computational slowdown of 18.9%"
SHARE = SLOWDOWN / (1 + SLOWDOWN)
LAYERS = 32  # Llama 3 8B and Mixtral 8x7B


def window_cost(transfer: float, compute: float) -> float:
    """What one window costs beyond free overlap: slowed, the compute ends at F + share X."""
    return max(transfer, compute + SHARE * transfer) - max(transfer, compute)


def _env(backend: str, gpus: int = 8, model: str = "llama-3-8b", **layout: Any) -> dict[str, Any]:
    return formula_env(model, {"gpus": gpus, "gpu": "h100"}, backend, **layout)


def _v(name: str, env: dict[str, Any]) -> float:
    return formula_value(name, env)


def test_the_share_is_the_papers_slowdown() -> None:
    assert _v("overlap_compute_slowdown", {}) == SLOWDOWN
    assert _v("overlap_cost_share", {}) == pytest.approx(SHARE, rel=1e-12)  # 0.159
    # a window the compute hides whole costs share x its transfer; one the transfer outlasts
    # by the slowdown or more costs nothing: the slowed compute still ends inside it
    assert window_cost(1.0, 2.0) == pytest.approx(SHARE)
    assert window_cost(1.189, 1.0) == pytest.approx(0.0, abs=1e-12)


def _tp_cost(env: dict[str, Any], tp: int) -> float:
    """All but one of the tp chunks of each collective overlap the linear layers' GEMMs."""
    comm, gemms = _v("tp_comm_s", env), _v("linear_matmul_s", env)
    return window_cost(comm * (tp - 1) / tp, gemms)


def test_tp_traffic_the_gemms_hide_costs_its_share() -> None:
    # Megatron --tp-comm-overlap inside one node: the GEMMs hide all but one chunk.
    env = _env("megatron", tp=8, sequence_parallel=True)
    comm = _v("tp_comm_s", env)
    assert _v("tp_exposed_s", env) == pytest.approx(comm / 8)
    assert _v("tp_overlap_cost_s", env) == pytest.approx(SHARE * comm * 7 / 8, rel=1e-9)
    assert _v("tp_overlap_cost_s", env) == pytest.approx(_tp_cost(env, 8), rel=1e-9)


def test_a_tp_window_the_traffic_outlasts_costs_less_than_its_share() -> None:
    # torchtitan's async TP over two nodes (tp 16): the traffic crosses the network and
    # outlasts the GEMMs, so part of it is exposed and the rest slows less compute.
    env = _env("torchtitan", gpus=16, tp=16, sequence_parallel=True)
    comm, gemms = _v("tp_comm_s", env), _v("linear_matmul_s", env)
    assert comm * 15 / 16 > gemms  # partly exposed
    cost = _v("tp_overlap_cost_s", env)
    assert cost == pytest.approx(_tp_cost(env, 16), rel=1e-9)
    assert cost < SHARE * comm * 15 / 16


def test_traffic_run_between_the_gemms_costs_nothing_more() -> None:
    # DeepSpeed AutoTP runs its all-reduces between the GEMMs: exposed whole, nothing hidden.
    env = _env("deepspeed", tp=8, sequence_parallel=True)
    assert _v("tp_exposed_s", env) == _v("tp_comm_s", env) > 0
    assert _v("tp_overlap_cost_s", env) == 0


def test_the_distributed_optimizers_two_windows() -> None:
    # dp 8: the gather hides behind the first forward (1/3 of a micro-batch's compute without
    # recompute), the reduce-scatter behind the last backward (2/3).
    env = _env("megatron", distributed_optimizer=True)
    gather, reduce = _v("dp_sharded_gather_s", env), _v("dp_sharded_reduce_s", env)
    forward = _v("microbatch_compute_s", env) / 3
    expected = window_cost(gather, forward) + window_cost(reduce, 2 * forward)
    assert expected > 0
    assert _v("dp_overlap_cost_s", env) == pytest.approx(expected, rel=1e-9)


def test_zero3_windows_are_the_layers_between_the_edges() -> None:
    # torchtitan FSDP2 over 8 GPUs: per micro-batch, a layer's gather behind the forward of the
    # layer before, a layer's gather and the next layer's reduce-scatter behind its backward,
    # over 31 of the 32 layers; the first gather and the last reduce-scatter are exposed.
    env = _env("torchtitan", zero_stage=3)
    accum = _v("plan.grad_accum", env)
    gather, scatter = _v("zero3_gather_s", env), _v("zero3_scatter_s", env)
    layer_forward = _v("microbatch_compute_s", env) / 3 / LAYERS
    fwd, bwd = (gather, layer_forward), (gather + scatter, 2 * layer_forward)
    windows = accum * (LAYERS - 1)
    exposed = windows * (max(0, fwd[0] - fwd[1]) + max(0, bwd[0] - bwd[1]))
    assert _v("dp_exposed_s", env) == pytest.approx(exposed + accum * (gather + scatter))
    cost = windows * (window_cost(*fwd) + window_cost(*bwd))
    assert cost > 0
    assert _v("dp_overlap_cost_s", env) == pytest.approx(cost, rel=1e-9)


@pytest.mark.parametrize("backend", ["megatron", "torchtitan"])
def test_a_context_parallel_ring_with_full_recompute(backend: str) -> None:
    # cp 2 over NVLink with full recompute: the forward ring runs twice (forward, recomputed
    # forward), each step's KV chunk behind that step's attention; in the backward the KV and
    # dKV chunks behind the backward steps. Megatron's ring and torchtitan's all-gather send the
    # same chunks at cp 2, but torchtitan's dK, dV in fp32 (context.yaml cp_dkv_step_comm_s).
    env = _env(backend, cp=2, recompute="full")
    step = _v("cp_step_comm_s", env)
    dkv = 2 * step - _v("cp_latency", env) if backend == "torchtitan" else step
    fwd, bwd = _v("cp_step_fwd_s", env), _v("cp_step_bwd_s", env)
    assert _v("cp_forward_rings", env) == 2
    per_layer = 2 * window_cost(step, fwd) + window_cost(step, bwd) + window_cost(dkv, bwd)
    expected = per_layer * LAYERS * _v("plan.grad_accum", env)
    assert _v("cp_overlap_cost_s", env) == pytest.approx(expected, rel=1e-9)
    assert _v("stage_overlap_cost_s", env) == pytest.approx(expected, rel=1e-9)  # tp 1, no ep


def test_the_experts_all_to_all_where_megatron_overlaps_it() -> None:
    # Mixtral 8x7B, ep 8, pp 2 x vpp 2 on 16 H100: the paired passes' all-to-alls hide behind
    # the partner micro-batch's compute; the unpaired warm-up and cool-down ones are exposed.
    on = _env("megatron", gpus=16, model="mixtral-8x7b", ep=8, pp=2, vpp=2, global_batch=256)
    traffic, compute = _v("ep_traffic_s", on), _v("layers_compute_s", on)
    paired = 1 - _v("moe_unpaired_fraction", on)
    assert 0 < paired < 1
    expected = paired * window_cost(traffic, compute)
    assert expected > 0
    assert _v("ep_overlap_cost_s", on) == pytest.approx(expected, rel=1e-9)
    # a pipeline without interleaving (the overlap needs vpp with pp > 1): all exposed, no cost
    off = _env("megatron", gpus=16, model="mixtral-8x7b", ep=8, pp=2, global_batch=256)
    assert _v("ep_exposed_s", off) == _v("ep_traffic_s", off) > 0
    assert _v("ep_overlap_cost_s", off) == 0


LAYOUTS = [
    {"tp": 8, "sequence_parallel": True},
    {"distributed_optimizer": True},
    {"zero_stage": 3},
    {"zero_stage": 2, "mbs": 2},
    {"tp": 2, "pp": 2, "vpp": 2, "cp": 2, "sequence_parallel": True},
    {"tp": 4, "cp": 2, "sequence_parallel": True, "recompute": "full"},
]


@pytest.mark.parametrize("backend", ["megatron", "torchtitan", "deepspeed"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_cost_is_at_most_the_share_of_its_traffic(
    backend: str, layout: dict[str, Any]
) -> None:
    """Each term is >= 0 and at most share x the traffic it prices (what it costs when the
    compute hides all of it)."""
    env = _env(backend, **layout)
    cp, rings = _v("plan.cp", env), _v("cp_forward_rings", env)
    step = _v("cp_step_comm_s", env)
    dkv = _v("cp_dkv_step_comm_s", env) if backend == "torchtitan" else step  # fp32 dK, dV
    cp_traffic = (cp - 1) * ((rings + 1) * step + dkv)
    traffic = {
        "tp_overlap_cost_s": _v("tp_comm_s", env),
        "cp_overlap_cost_s": cp_traffic * LAYERS * _v("plan.grad_accum", env),
        "dp_overlap_cost_s": _v("dp_comm_s", env),
    }
    for name, seconds in traffic.items():
        assert 0 <= _v(name, env) <= SHARE * seconds * (1 + 1e-12), name


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_estimates_parts_add_up_to_its_step(layout: dict[str, Any]) -> None:
    """The time chart draws compute, the overlap cost, the exposed traffic, the bubble and the
    optimizer in sequence up to step_s; overlap_cost_s is the stage's and the windows' cost."""
    plan = build_layout(8, **({"mbs": 1, "global_batch": 64, "seq_len": 8192} | layout))
    evaluation = Evaluator(builtin_rules(), backend="megatron").evaluate(
        load_model("llama-3-8b"), load_cluster_spec({"gpus": 8, "gpu": "h100"}), plan
    )
    t = evaluation.estimate.time
    env = _env("megatron", **layout)
    cost = _v("stage_overlap_cost_s", env) + _v("dp_overlap_cost_s", env)
    assert t.overlap_cost_s == pytest.approx(cost, rel=1e-9)
    sequence = (
        t.compute_s
        + t.overlap_cost_s
        + (t.tp_exposed_s or 0)
        + t.cp_comm_s
        + t.ep_comm_s
        + t.bubble_s
        + t.pp_comm_s
        + (t.dp_exposed_s or 0)
        + t.optimizer_s
    )
    assert sequence == pytest.approx(t.step_s, rel=1e-9)
