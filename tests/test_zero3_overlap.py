"""ZeRO-3 traffic beside compute, and DeepSpeed's first ZeRO-3, which waited for it
(rules/cost/sharding.yaml zero3_overlapped, dp_exposed_s, dp_overlap_cost_s).

From ZeRO-3's first release (#834, 2021-03-08) to v0.5.x, DeepSpeed's parameter coordinator
fetched a sub-module's parameters blocking: stage3.py fetch_sub_module ends in
_synchronize_communication's torch.cuda.synchronize(), so the gathers and reduce-scatters a
step moves add to its compute (train.zero3_overlap false, a calibration fact of Narayanan
2021's ZeRO-3 rows). Every backend parplan renders for prefetches beside compute.
"""

from __future__ import annotations

import pytest

from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.layout import build_layout
from parplan_gen.planning.loading import load_cluster_spec, load_model
from parplan_gen.rules.ruleset import load_rules

MODEL = load_model("llama-3-70b")
CLUSTER = load_cluster_spec({"gpus": 32, "gpu": "h100"})
RULES = load_rules()


def figures(zero_stage: int, **env: object) -> dict[str, float]:
    """Llama 3 70B on 32 H100s, ZeRO `zero_stage` over dp 32, 64 x 4096 tokens on DeepSpeed."""
    layout = build_layout(32, zero_stage=zero_stage, global_batch=64, seq_len=4096, mbs=1)
    cost = CostModel(RULES, backend="deepspeed")
    return cost.figures(cost.layout_env(MODEL, CLUSTER, layout) | env)


def test_a_blocking_zero3_waits_for_all_of_its_traffic() -> None:
    today, blocking = figures(3), figures(3, **{"train.zero3_overlap": False})
    # the same traffic either way; the blocking fetch hides none of it and pays no overlap cost
    assert blocking["time_dp_comm_s"] == today["time_dp_comm_s"] > 0
    assert blocking["time_dp_exposed_s"] == blocking["time_dp_comm_s"]
    assert today["time_dp_exposed_s"] < 0.5 * today["time_dp_comm_s"]
    assert blocking["time_overlap_cost_s"] == 0 < today["time_overlap_cost_s"]
    exposed_more = blocking["time_dp_exposed_s"] - today["time_dp_exposed_s"]
    step_more = blocking["time_step_s"] - today["time_step_s"]
    # the step grows by the traffic it now waits for, less the overlap cost it no longer pays
    assert step_more == pytest.approx(exposed_more - today["time_overlap_cost_s"])


def test_the_flag_leaves_a_layout_without_zero3_as_it_is() -> None:
    """ZeRO-1 (the optimizer sharded, the gradients reduce-scattered in one sync): the fact is
    about ZeRO-3's fetches only."""
    assert figures(1, **{"train.zero3_overlap": False}) == figures(1)
