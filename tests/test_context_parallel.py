"""Ring attention under context parallelism (rules/cost/context.yaml), worked by hand.

Llama 3 8B (32 layers, 32 heads of 128, 8 KV heads) at s = 8192 on H100s, micro-batch 1:
  - one KV chunk at cp 2: 2 (K and V) x 4096 tokens x 8 x 128 x 2 B = 16,777,216 B;
  - the causal attention forward of one rank and layer at cp 2: 2,147,483,648 / 32 layers x 4096
    tokens = 274,877,906,944 FLOP, 137,438,953,472 per ring step;
  - FlashAttention-2 Fig. 4(d) / 7(d): efficiency ~ L / (L + 525); at cp 2 the kernel works on
    4096 tokens where the whole sequence has 8192: (4096 / 4621) / (8192 / 8717) = 8717 / 9242.
"""

from __future__ import annotations

from typing import Any

import pytest
from formula_env import formula_env, formula_value
from hypothesis import given, settings
from hypothesis import strategies as st

KV_CHUNK_CP2 = 16_777_216
STEP_FWD_FLOPS_CP2 = 137_438_953_472
H100_BF16 = 989e12  # data/gpus.yaml h100-sxm-80gb dense BF16 peak


def _env(backend: str, gpus: int = 8, **options: Any) -> dict[str, Any]:
    cluster_keys = {k: options.pop(k) for k in ("gpus_per_node", "inter_node_gbps") if k in options}
    cluster = {"gpus": gpus, "gpu": "h100", **cluster_keys}
    return formula_env("llama-3-8b", cluster, backend, **options)


_value = formula_value


def test_attention_runs_at_the_chunks_efficiency() -> None:
    assert _value("attention_chunk_efficiency", _env("megatron")) == 1
    env = _env("megatron", cp=2)
    assert _value("attention_chunk_efficiency", env) == pytest.approx(8717 / 9242, rel=1e-12)
    assert _value("attention_chunk_tokens", env) == 4096


def test_a_ring_step_over_nvlink_hides_behind_its_attention() -> None:
    env = _env("megatron", cp=2)
    assert _value("kv_chunk_bytes", env) == KV_CHUNK_CP2
    efficiency = _value("gemm_efficiency", env) * 8717 / 9242
    step_fwd = STEP_FWD_FLOPS_CP2 / (H100_BF16 * efficiency)
    assert _value("cp_step_fwd_s", env) == pytest.approx(step_fwd, rel=1e-12)
    assert _value("cp_step_bwd_s", env) == pytest.approx(2.5 * step_fwd, rel=1e-12)
    # 16.8 MB at NVLink's 450 GB/s (x 0.84) is ~44 us; the step's attention ~0.3 ms.
    assert _value("cp_step_comm_s", env) < step_fwd / 4
    assert _value("cp_comm_s", env) == 0


@pytest.mark.parametrize("cp", [2, 4])
def test_a_slow_ring_exposes_what_each_step_does_not_hide(cp: int) -> None:
    # One GPU per node on a 1 Gb/s network: every transfer outlasts its step's attention.
    env = _env("megatron", gpus=cp, cp=cp, gpus_per_node=1, inter_node_gbps=1)
    comm, fwd = _value("cp_step_comm_s", env), _value("cp_step_fwd_s", env)
    bwd = 2.5 * fwd
    assert comm > 2 * bwd
    # Forward: cp-1 steps send one chunk; backward: the first and last one chunk, the cp-2
    # between two (KV and dKV); 32 layers, 64 micro-batches (dp 1).
    per_layer = (cp - 1) * (comm - fwd) + 2 * (comm - bwd) + (cp - 2) * (2 * comm - bwd)
    assert _value("cp_comm_s", env) == pytest.approx(32 * 64 * per_layer, rel=1e-12)


def test_torchtitan_all_gathers_the_kv_behind_the_first_step_only() -> None:
    cp = 4
    env = _env("torchtitan", gpus=cp, cp=cp, gpus_per_node=1, inter_node_gbps=1)
    comm, fwd = _value("cp_step_comm_s", env), _value("cp_step_fwd_s", env)
    bwd = 2.5 * fwd
    # The forward's and the backward's all-gathers of 3 chunks, then dKV step by step.
    per_layer = (3 * comm - fwd) + (3 * comm - bwd) + 3 * (comm - bwd)
    assert _value("cp_exposed_per_layer_s", env) == pytest.approx(per_layer, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    cp=st.sampled_from([2, 4, 8]),
    gbps=st.sampled_from([1, 25, 100, 400]),
    backend=st.sampled_from(["megatron", "torchtitan"]),
)
def test_the_exposed_ring_is_never_more_than_its_traffic(cp: int, gbps: int, backend: str) -> None:
    env = _env(backend, gpus=cp, cp=cp, gpus_per_node=1, inter_node_gbps=gbps)
    # No recompute: K and V go round once in the forward, K, V and dK, dV in the backward.
    traffic = 3 * (cp - 1) * _value("cp_step_comm_s", env)
    assert 0 <= _value("cp_exposed_per_layer_s", env) <= traffic * (1 + 1e-12)
