"""Ring attention under context parallelism (rules/cost/context.yaml), worked by hand.

Llama 3 8B (32 layers, 32 heads of 128, 8 KV heads) at s = 8192 on H100s, micro-batch 1:
  - one KV chunk at cp 2: 2 (K and V) x 4096 tokens x 8 x 128 x 2 B = 16,777,216 B;
  - the causal attention forward of one rank and layer at cp 2: 2,147,483,648 / 32 layers x 4096
    tokens = 274,877,906,944 FLOP, 137,438,953,472 per ring step;
  - FlashAttention-2 Fig. 4(d) / 7(d): efficiency ~ L / (L + 525); at cp 2 the kernel works on
    4096 tokens where the whole sequence has 8192: (4096 / 4621) / (8192 / 8717) = 8717 / 9242;
  - the merge of the ring's partial results, per token of a rank and layer: 32 x 128 = 4096
    query elements and 2 x 8 x 128 = 2048 K and V elements, at the bytes each backend's code
    moves for them (context.yaml cp_merge_*_bytes, counted from torch's _SDPAMerger and
    _templated_ring_attention_backward and Transformer Engine's AttnFuncWithCPAndKVP2P).
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


QUERY_ELEMENTS, KV_ELEMENTS = 32 * 128, 2 * 8 * 128  # per token of a rank, tp 1


def _torch_merge_bytes(cp: int, forwards: int, kv_elements: int = KV_ELEMENTS) -> int:
    """PyTorch's context_parallel, per token and layer: the forward's first-step cast and cast
    back (12) and each later step's cast and merge (38) for every query element; the backward's
    fp32 zeros, per-step += and cast back (10 + 10 cp); for K and V the concatenation to send at
    every step but the last (4) in each forward and the backward, and the backward's zeros,
    per-step += and dK, dV concatenation, and cast back (10 + 22 cp)."""
    query = forwards * (12 + 38 * (cp - 1)) + 10 + 10 * cp
    kv = forwards * 4 * (cp - 1) + 10 + 22 * cp + 4 * (cp - 1)
    return QUERY_ELEMENTS * query + kv_elements * kv


def _te_merge_bytes(cp: int, forwards: int) -> int:
    """Transformer Engine: a fused copy (4) then add (6) per step of the output, and of dQ, dK and
    dV in the backward."""
    per_element = 4 + 6 * (cp - 1)
    return QUERY_ELEMENTS * (forwards + 1) * per_element + KV_ELEMENTS * per_element


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_the_merge_of_the_rings_results_costs_what_each_backends_code_moves(cp: int) -> None:
    titan = _env("torchtitan", gpus=cp, cp=cp)
    assert _value("cp_merge_per_token_layer", titan) == _torch_merge_bytes(cp, 1)
    megatron = _env("megatron", gpus=cp, cp=cp)
    assert _value("cp_merge_per_token_layer", megatron) == _te_merge_bytes(cp, 1)
    # full recompute runs the ring's forward, and its merge, twice
    again = _env("torchtitan", gpus=cp, cp=cp, recompute="full")
    assert _value("cp_merge_per_token_layer", again) == _torch_merge_bytes(cp, 2)
    # unfused fp32 merges move several times Transformer Engine's fused 16-bit ones
    assert _torch_merge_bytes(cp, 1) > 3 * _te_merge_bytes(cp, 1)
    # memory-bound, at the HBM rate elementwise kernels reach: 32 layers, 64 micro-batches of
    # 8192 / cp tokens
    tokens = 64 * 8192 // cp
    hbm = titan["cluster.hbm_bandwidth"] * _value("hbm_efficiency", titan)
    merge = _torch_merge_bytes(cp, 1) * 32 * tokens / hbm
    assert _value("cp_merge_s", titan) == pytest.approx(merge, rel=1e-12)


def test_without_context_parallelism_nothing_is_merged() -> None:
    assert _value("cp_merge_s", _env("torchtitan")) == 0
    assert _value("cp_merge_s", _env("megatron")) == 0


def test_torchtitan_before_2026_repeated_the_kv_heads_its_ring_carried() -> None:
    """Calibration runs on torchtitan (all before ff0829c10, 'GQA without kv repeats') sent and
    merged the 32 query heads' K and V, four times Llama 3 8B's 8 KV heads."""
    env = _env("torchtitan", gpus=4, cp=4)
    assert env["train.kv_heads_repeated"] is False  # a plan: torchtitan 0.3 passes enable_gqa
    repeated = {**env, "train.kv_heads_repeated": True}
    assert _value("kv_chunk_bytes", repeated) == 4 * _value("kv_chunk_bytes", env)
    assert _value("cp_merge_per_token_layer", repeated) == _torch_merge_bytes(4, 1, 4 * KV_ELEMENTS)


@pytest.mark.parametrize("cp", [2, 8])
def test_a_layers_ring_attention_holds_its_buffers_beside_the_activations(cp: int) -> None:
    """Per token of a rank: PyTorch's backward holds the whole ring's K and V (2 cp bytes an
    element), fp32 and 16-bit dQ (6) and four dK, dV buffers (14); Transformer Engine its two
    send/receive buffers of K, V, dK, dV and the step's dK, dV (10) and two dQ (4)."""
    titan = _env("torchtitan", gpus=cp, cp=cp)
    torch_bytes = 6 * QUERY_ELEMENTS + (14 + 2 * cp) * KV_ELEMENTS
    assert _value("cp_transient_per_token", titan) == torch_bytes
    assert _value("cp_transient_bytes", titan) == torch_bytes * 8192 // cp  # mbs 1
    megatron = _env("megatron", gpus=cp, cp=cp)
    assert _value("cp_transient_per_token", megatron) == 4 * QUERY_ELEMENTS + 10 * KV_ELEMENTS
    assert _value("cp_transient_bytes", _env("torchtitan")) == 0


def test_the_rings_buffers_are_in_the_activations_peak() -> None:
    """Megatron-LM adds them to the recomputed layer; torchtitan's peak is the larger of that and
    its loss's (memory.yaml activation_bytes)."""

    def stored(env: dict[str, Any]) -> float:
        per_token = _value("stored_layers", env) * _value("act_full_recompute_token_layer", env)
        per_token += _value("pipeline_stage_outputs", env) * _value(
            "act_full_recompute_token_layer", env
        )
        return _value("tokens_per_microbatch", env) * per_token

    for backend in ("megatron", "torchtitan"):
        env = _env(backend, cp=2, recompute="full")
        transient, layer = _value("cp_transient_bytes", env), _value("recompute_layer_bytes", env)
        logits = _value("logits_bytes", env)
        assert transient > 0
        if backend == "megatron":
            peak = layer + transient + max(logits, _value("offload_resident_bytes", env))
        else:
            peak = max(layer + transient, logits)
        assert _value("activation_bytes", env) == pytest.approx(stored(env) + peak, rel=1e-12)
