"""Expert parallelism chosen on merit (issue 29 item 4): what EP saves (the experts' weights,
gradients and optimizer state divided by ep; the experts' gradient reduction over the
expert-data-parallel group only; the grouped GEMM at more tokens per expert) and what it costs
(the dispatch / combine all-to-alls, again under full recomputation), each priced from
Megatron-Core's code, and the planner's choice where the published practice is clear.

DeepSeek-V2-Lite is examples/hf/deepseek-v2-lite.json, its published config.json: 27 layers
(the first dense), hidden 2048, 64 routed experts of width 1408 and 2 shared, top-6.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from formula_env import formula_env, formula_value

import parplan_gen
from parplan_gen.inputs.errors import SourceRef

from conftest import REPO, builtin_rules

LITE = str(REPO / "examples" / "hf" / "deepseek-v2-lite.json")
H100 = {"gpu": "h100"}
# Megatron-Bridge's DeepSeek-V2-Lite recipe: global batch 512 of 4096 tokens, mbs 1
LITE_BATCH = {"global_batch": 512, "seq_len": 4096, "mbs": 1}


def _holds(name: str, env: dict[str, Any]) -> bool:
    return bool(builtin_rules().library.compile(name, SourceRef("test"), "estimate").evaluate(env))


def test_experts_gradients_are_reduced_over_their_own_group() -> None:
    """Megatron-Core DDP reduces the experts' gradients over intra_expt_dp_group
    (distributed_data_parallel.py expert_parallel_buffers): on 32 H100s with ep 8 that is
    32 / 8 = 4 ranks, 8 apart (parallel_state's expert order tp-ep-dp-pp), one a node, so its
    ring runs at one NIC's bus bandwidth where the DP group's 8 ranks a node run at
    min(NVLink, 8 NICs)."""
    env = formula_env("mixtral-8x7b", {"gpus": 32, **H100}, "megatron", ep=8, **LITE_BATCH)
    inter, intra = (
        formula_value("inter_bus_bandwidth", env),
        formula_value("intra_bus_bandwidth", env),
    )
    assert formula_value("expert_dp_bandwidth", env) == pytest.approx(inter)
    assert formula_value("dp_bandwidth", env) == pytest.approx(min(intra, 8 * inter))
    # ring (4 - 1) / 4 against (32 - 1) / 32, at their bandwidths
    scale = (3 / 4) / (31 / 32) * min(intra, 8 * inter) / inter
    assert formula_value("expert_wire_scale", env) == pytest.approx(scale)
    dense, experts = (
        formula_value(n, env) for n in ("dense_params_per_gpu", "expert_params_per_gpu")
    )
    assert formula_value("dp_params", env) == pytest.approx(dense + scale * experts)
    # one expert-data-parallel rank (ep = dp): the experts' gradients are not reduced at all
    env = formula_env("mixtral-8x7b", {"gpus": 8, **H100}, "megatron", ep=8, **LITE_BATCH)
    assert formula_value("expert_wire_scale", env) == 0
    # no expert parallelism: one group, the DP one
    env = formula_env("mixtral-8x7b", {"gpus": 32, **H100}, "megatron", **LITE_BATCH)
    assert formula_value("expert_wire_scale", env) == pytest.approx(1)


def test_full_recomputation_repeats_the_forward_all_to_alls() -> None:
    """Dispatch and combine forward and backward (4), and the forward's again when whole layers
    are recomputed (transformer_block.py _checkpointed_forward): 6."""
    for recompute, count in (("none", 4), ("selective", 4), ("full", 6)):
        env = formula_env(LITE, {"gpus": 8, **H100}, "megatron", ep=8, recompute=recompute)
        assert formula_value("a2a_per_layer_microbatch", env) == count
        per_pass = formula_value("a2a_s", env) * 26 * env["plan.grad_accum"]  # 26 MoE layers
        assert formula_value("ep_traffic_s", env) == pytest.approx(count * per_pass)


@pytest.mark.parametrize(
    ("model", "overlapped"),
    [(LITE, True), ("deepseek-v3", False)],  # DeepSeek-V3's MTP layer needs pp > 1
)
def test_megatron_overlaps_the_all_to_all_without_a_pipeline(model: str, overlapped: bool) -> None:
    """combined_1f1b_schedule_for_no_pipelining (core_v0.16.1): at pp = 1 the first forward and
    the last backward run alone; TransformerConfig refuses an MTP layer with the overlap and
    pp = 1. The pairing keeps one more layer's activations (memory.yaml stored_layers)."""
    gpus = 8 if model == LITE else 256
    env = formula_env(model, {"gpus": gpus, **H100}, "megatron", ep=8, **LITE_BATCH)
    assert _holds("moe_a2a_overlapped", env) is overlapped
    if overlapped:
        assert formula_value("moe_unpaired_fraction", env) == pytest.approx(
            1 / env["plan.grad_accum"]
        )
        assert formula_value("a2a_overlap_stored_layers", env) == 1
        layers = formula_value("layers_per_stage", env)
        assert formula_value("stored_layers", env) == pytest.approx(layers + 1)


def test_deepseek_v2_lite_on_8_h100_gets_the_published_expert_parallelism() -> None:
    """Megatron-Bridge's recipe (src/megatron/bridge/recipes/deepseek/h100/deepseek_v2.py
    deepseek_v2_lite_pretrain_8gpu_h100_bf16_config, "Recommended parallelism: TP=1, PP=1,
    EP=8"): the experts spread over the node, no pipeline."""
    cluster = {"gpus": 8, **H100}
    found = parplan_gen.plan(LITE, cluster, global_batch=512, seq_len=4096, backend="megatron")
    plan = found.chosen.plan
    assert (plan.tp, plan.pp, plan.ep) == (1, 1, 8)


def test_expert_parallelism_stops_at_the_node_where_the_network_would_carry_it() -> None:
    """DeepSeek-V2-Lite on 32 H100s: ep 1 does not fit (every expert's weights, fp32 gradients
    and state on each GPU); ep 8 fits and its all-to-alls stay on NVLink; ep 16 and 32 put
    (ep - 8) / ep of them on the network at 1/9 of NVLink's bandwidth, more than the gradient
    traffic they save."""
    layouts = {
        ep: {"ep": ep, **LITE_BATCH, "mbs": 2, "distributed_optimizer": True}
        for ep in (1, 8, 16, 32)
    }
    found = {
        ep: parplan_gen.estimate(LITE, {"gpus": 32, **H100}, layout, backend="megatron")
        for ep, layout in layouts.items()
    }
    assert not found[1].fits and all(found[ep].fits for ep in (8, 16, 32))
    step = {ep: found[ep].estimate.time.step_s for ep in (8, 16, 32)}
    assert step[8] < step[16] < step[32]
    ep8, ep16 = found[8].estimate.time, found[16].estimate.time
    assert ep16.ep_comm_s > ep8.ep_comm_s and ep16.dp_comm_s < ep8.dp_comm_s


def test_mixtral_on_64_h100_gets_the_published_expert_parallelism(
    planned: Callable[[str], Path],
) -> None:
    """Megatron-Core's MoE README, "Reference Best Parallel Mapping" (MCore v0.8): Mixtral 8x7B
    on 64 H100s at TP1 EP8 (PP4, VPP8): every expert on its own GPU of the node."""
    chosen = json.loads((planned("mixtral-8x7b-64xh100") / "plan.json").read_text())["chosen"]
    assert (chosen["plan"]["tp"], chosen["plan"]["ep"]) == (1, 8)
