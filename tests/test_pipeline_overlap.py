"""Pipeline point-to-point transfers, exposed as each backend's schedule leaves them
(rules/cost/time.yaml pp_p2p_overlapped, pp_comm_s).

Megatron-LM core_v0.16.1 overlaps them under its interleaved schedule by default
(arguments.py: only --no-overlap-p2p-communication; validate_args keeps the overlap with
interleaving only), waiting for the warm-up's forwards and the cool-down's backwards:
schedules.py get_pp_rank_microbatches gives the first rank (pp - 1) x 2 + (vpp - 1) x pp warm-up
micro-batches. torchtitan's Interleaved1F1B posts its receives early too; DeepSpeed's pipeline
engine blocks on every transfer. The transfer's own time is read from the unoverlapped layout,
so each figure below is worked from the schedule's counts alone.
"""

from __future__ import annotations

import pytest

from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.layout import build_layout
from parplan_gen.planning.loading import load_cluster_spec, load_model
from parplan_gen.rules.ruleset import load_rules

MODEL = load_model("llama-3-70b")
CLUSTER = load_cluster_spec({"gpus": 64, "gpu": "h100"})
RULES = load_rules()
# 512 sequences on dp 2 at mbs 1: 256 micro-batches per step
COMMON = {"tp": 8, "pp": 4, "mbs": 1, "global_batch": 512, "seq_len": 8192}
GRAD_ACCUM = 256


def pp_comm(backend: str, vpp: int, **env: object) -> float:
    """The layout's pp_comm_s priced on `backend` (`env`: formula names set otherwise)."""
    layout = build_layout(64, vpp=vpp, sequence_parallel=True, **COMMON)  # type: ignore[arg-type]
    cost = CostModel(RULES, backend=backend)
    names = cost.layout_env(MODEL, CLUSTER, layout) | env
    return cost.figures(names)["time_pp_comm_s"]


def one_transfer(backend: str) -> float:
    """Without interleaving every transfer is exposed: 2 per micro-batch (its activation
    forward, its gradient backward)."""
    return pp_comm(backend, 1) / (2 * GRAD_ACCUM)


@pytest.mark.parametrize("backend", ["megatron", "torchtitan"])
def test_interleaving_exposes_the_warm_up_and_cool_down_transfers_only(backend: str) -> None:
    """pp 4, vpp 2: (4 - 1) x 2 + (2 - 1) x 4 = 10 warm-up forwards, 10 cool-down backwards
    exposed; the steady phase's 2 x (256 x 2 - 10) transfers hide behind compute (a forward
    chunk, 80 / 8 layers of Llama 3 70B at 8192 tokens, takes far longer than 8192 x 8192 x 2 /
    8 bytes over the network: the pp ranks are 8 x 2 ranks apart, on other nodes)."""
    assert pp_comm(backend, 2) == pytest.approx(2 * 10 * one_transfer(backend))
    # vpp 5: (4 - 1) x 2 + 4 x 4 = 22
    assert pp_comm(backend, 5) == pytest.approx(2 * 22 * one_transfer(backend))


def test_without_the_overlap_every_transfer_of_every_chunk_waits() -> None:
    """A calibration run whose Megatron-LM predates the overlap (train.p2p_overlap false), and
    DeepSpeed's blocking pipeline engine: 2 x 256 micro-batches x vpp chunks."""
    transfer = one_transfer("megatron")
    assert pp_comm("megatron", 2, **{"train.p2p_overlap": False}) == pytest.approx(
        2 * GRAD_ACCUM * 2 * transfer
    )
    assert pp_comm("deepspeed", 2) == pytest.approx(2 * GRAD_ACCUM * 2 * transfer)


def test_a_step_with_all_its_micro_batches_in_the_warm_up_exposes_them_all() -> None:
    """4 sequences on dp 2: 2 micro-batches x vpp 2 = 4 chunks, fewer than the 10 of the
    warm-up: every transfer waits, as without the overlap."""
    layout = build_layout(64, vpp=2, sequence_parallel=True, **{**COMMON, "global_batch": 4})  # type: ignore[arg-type]
    cost = CostModel(RULES, backend="megatron")
    env = cost.layout_env(MODEL, CLUSTER, layout)
    overlapped = cost.figures(env)["time_pp_comm_s"]
    blocking = cost.figures(env | {"train.p2p_overlap": False})["time_pp_comm_s"]
    assert overlapped == pytest.approx(blocking)
