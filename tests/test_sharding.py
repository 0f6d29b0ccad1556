"""ZeRO-3 / FSDP terms of rules/cost/sharding.yaml against Narayanan et al. 2021 Table 2
(GPT-3 175B, global batch 1536, A100-80GB with 8 x 200 Gb/s HDR per node): ZeRO-3 measured
144 / 88 / 44 TFLOP/s per GPU on 384 / 768 / 1536 GPUs, PTD-P (tp 8, pp 12) 153 / 149 / 141."""

from __future__ import annotations

import pytest
from formula_env import formula_value
from nccl_figures import CONTEXT, NETWORK_RING

from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.cost.layout import build_layout
from parplan_gen.models.presets import load_preset
from parplan_gen.planning.evaluate import Evaluator

from conftest import builtin_rules

SIZES = (384, 768, 1536)


def _evaluate(gpus: int, zero3: bool):
    spec = load_preset("gpt3-175b")
    cluster = cluster_from_flags(gpus, "a100-80gb", gpus_per_node=8, inter_node_gbps=200)
    common = {"global_batch": 1536, "seq_len": 2048, "recompute": "full"}
    if zero3:
        layout = build_layout(gpus, mbs=1536 // gpus, zero_stage=3, **common)
        backend = "deepspeed"
    else:
        layout = build_layout(gpus, tp=8, pp=12, mbs=1, **common)
        backend = "megatron"
    evaluator = Evaluator(builtin_rules(), backend=backend)  # type: ignore[arg-type]
    found = evaluator.evaluate(spec, cluster, layout, flash_attention=False)
    env = evaluator.env(spec, cluster, layout, flash_attention=False)
    return found.estimate, env


def test_zero3_gather_pays_nccls_ring_latency_at_large_dp() -> None:
    # NCCL tuning.cc ring/Simple: 8.4 us + (1536 - 192) x 3.4 us (NVLink) + 191 x 14 us (NET)
    _, env = _evaluate(1536, zero3=True)
    latency = formula_value("dp_gather_latency_s", env)
    assert latency == pytest.approx((8.4 + 1344 * 3.4 + 191 * 14.0) * 1e-6, rel=1e-9)


def test_table2_zero3_falls_with_gpus_and_stays_below_ptdp() -> None:
    zero3 = [_evaluate(n, zero3=True)[0].throughput.hardware_tflops_per_gpu for n in SIZES]
    ptdp = [_evaluate(n, zero3=False)[0].throughput.hardware_tflops_per_gpu for n in SIZES]
    # measured: ZeRO-3 < PTD-P at every size (144 < 153, 88 < 149, 44 < 141). DeepSpeed's
    # ZeRO-3 is priced from its code's schedule (sharding.yaml), no fraction fitted to these
    # rows: at 384 and 768 GPUs it reads 2021's runs fast (+36 %, +70 %: docs/benchmarks.md,
    # "ZeRO-3"), level with PTD-P or above it; at 1536 the gathers' latency shows.
    assert zero3[2] < ptdp[2]
    # measured: ZeRO-3 falls to 0.61 and 0.31 of its 384-GPU figure; more than halved here too
    assert zero3[0] > zero3[1] > zero3[2]
    assert zero3[2] < 0.5 * zero3[0]
    # never slower than published: what the schedule leaves out only slows the run down
    for predicted, published in zip(zero3, (144, 88, 44), strict=True):
        assert predicted > published


def test_zero3_other_is_the_context_and_two_network_rings() -> None:
    """`other` holds no share of the weights (5 % of the unsharded 16-bit weights was once 53 GiB
    for 530B): on 48 DGX A100 nodes it is the CUDA context (PyTorch PR #86509's 287,047,680 B
    in use, less its tensor's 20 MiB allocator segment) and two ring communicators across nodes,
    the world group and DeepSpeed's clone of it for the data-parallel collectives
    (deepspeed/utils/groups.py _clone_world_group), each (NCCL 2.23) 16 p2p channels x 3
    allocations of the 2 MiB granule at init and 16 ring channels of a 10 MiB receive and a
    10 MiB network send connection; no NVLS on Ampere."""
    estimate, _ = _evaluate(384, zero3=True)
    expected = CONTEXT + 2 * NETWORK_RING
    assert estimate.memory.other == expected
    assert _evaluate(1536, zero3=True)[0].memory.other == expected  # as many connections
