"""Ring attention under context parallelism (rules/cost/context.yaml), worked by hand.

Llama 3 8B (32 layers, 32 heads of 128, 8 KV heads) at s = 8192 on H100s, micro-batch 1:
  - one KV chunk at cp 2: 2 (K and V) x 4096 tokens x 8 x 128 x 2 B = 16,777,216 B;
  - the causal attention forward of one rank and layer at cp 2: 2,147,483,648 / 32 layers x 4096
    tokens = 274,877,906,944 FLOP, 137,438,953,472 per ring step;
  - the attention kernel at cp 2 works on 4096-token chunks: FlashAttention-2 (Dao 2023 Fig. 7(d),
    H100) reaches 294 TFLOP/s there and 308 at 8192, of 989; Transformer Engine's cuDNN
    attention, which Megatron runs on Hopper, measured 1.597x and 1.588x flash-attention in TE's
    own benchmark (docs/examples/attention/attention.ipynb: 0.5850 / 0.3664 ms and
    11.8879 / 7.4875 ms);
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
CUDNN_OVER_FLASH = (0.5850 / 0.3664 + 11.8879 / 7.4875) / 2  # TE attention.ipynb, H100


def _env(backend: str, gpus: int = 8, **options: Any) -> dict[str, Any]:
    cluster_keys = {k: options.pop(k) for k in ("gpus_per_node", "inter_node_gbps") if k in options}
    cluster = {"gpus": gpus, "gpu": "h100", **cluster_keys}
    return formula_env("llama-3-8b", cluster, backend, **options)


_value = formula_value


def test_attention_runs_at_its_kernels_rate_on_the_chunk() -> None:
    env = _env("megatron", cp=2)
    assert _value("attention_chunk_tokens", env) == 4096
    assert _value("attention_efficiency", env) == pytest.approx(294 / 989 * CUDNN_OVER_FLASH)
    assert _value("attention_efficiency", _env("megatron")) == pytest.approx(
        308 / 989 * CUDNN_OVER_FLASH
    )
    # torchtitan's SDPA: cuDNN's attention first on Hopper in today's torch (sdp_utils.cpp
    # check_prefer_cudnn_attention), FlashAttention-2 in the torch its calibration runs used
    titan = _env("torchtitan", cp=2)
    assert _value("attention_efficiency", titan) == pytest.approx(294 / 989 * CUDNN_OVER_FLASH)
    before = {**titan, "train.sdpa_cudnn": False}
    assert _value("attention_efficiency", before) == pytest.approx(294 / 989)
    # on an A100 Transformer Engine picks flash-attention (attention.ipynb, "Selection Order"):
    # Dao 2023 Fig. 4(d), 182 TFLOP/s at 8192 tokens of 312
    a100 = formula_env("llama-3-8b", {"gpus": 8, "gpu": "a100-80gb"}, "megatron")
    assert _value("attention_efficiency", a100) == pytest.approx(182 / 312)


def test_a_ring_step_over_nvlink_hides_behind_its_attention() -> None:
    env = _env("megatron", cp=2)
    assert _value("kv_chunk_bytes", env) == KV_CHUNK_CP2
    efficiency = 294 / 989 * CUDNN_OVER_FLASH
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
    dkv = _value("cp_dkv_step_comm_s", env)  # fp32: twice the chunk's bytes
    # The forward's and the backward's all-gathers of 3 chunks, then dKV step by step: each of
    # the first 3 behind the next step's backward, the 4th (torch 2.13
    # _templated_ring_attention_backward: one exchange every step, the last waited for after
    # the loop) behind nothing.
    per_layer = (3 * comm - fwd) + (3 * comm - bwd) + 3 * (dkv - bwd) + dkv
    assert _value("cp_exposed_per_layer_s", env) == pytest.approx(per_layer, rel=1e-12)


def test_torchtitans_last_dkv_transfer_is_exposed_on_nvlink_too() -> None:
    """Inside a node every transfer hides behind a step's attention but the backward's last
    dK, dV, which its function waits for as its loop ends."""
    env = _env("torchtitan", gpus=8, cp=4, dp=2)
    assert _value("cp_allgather_s", env) <= _value("cp_step_fwd_s", env)
    dkv = _value("cp_dkv_step_comm_s", env)
    assert _value("cp_exposed_per_layer_s", env) == pytest.approx(dkv, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    cp=st.sampled_from([2, 4, 8]),
    gbps=st.sampled_from([1, 25, 100, 400]),
    backend=st.sampled_from(["megatron", "torchtitan"]),
)
def test_the_exposed_ring_is_never_more_than_its_traffic(cp: int, gbps: int, backend: str) -> None:
    env = _env(backend, gpus=cp, cp=cp, gpus_per_node=1, inter_node_gbps=gbps)
    # No recompute: K and V go round once in the forward, K, V and dK, dV in the backward
    # (PyTorch's dK, dV in fp32).
    comm = _value("cp_step_comm_s", env)
    dkv = _value("cp_dkv_step_comm_s", env) if backend == "torchtitan" else comm
    # torchtitan's backward sends dK, dV at every step, cp of them (step 0's too)
    traffic = (cp - 1) * 2 * comm + (cp if backend == "torchtitan" else cp - 1) * dkv
    assert 0 <= _value("cp_exposed_per_layer_s", env) <= traffic * (1 + 1e-12)


# Llama 3 8B at tp 1, per token of a rank: 32 x 128 query elements, 2 x 8 x 128 K and V ones.
QUERY_ELEMENTS, KV_ELEMENTS = 4096, 2048

# Bytes per token and layer, counted op by op from the code on the last rank (every later
# step merges the whole output and half-adds its dK, dV), at cp 4, one forward:
# PyTorch (torch 2.13 _attention.py, convert_to_f32):
#   query, forward: fp32 cast of the first step's output 6 + cast back 6 + 3 later steps x
#     (cast 6, out - out' 12, sigmoid(.) * (.) 8, out - (.) 12) = 126;
#   query, backward: fp32 zeros 4 + 4 steps x grad_query += (10) + cast back 6 = 50;
#   K/V, forward: contiguous() 4 + 3 x torch.cat to send 4 = 16;
#   K/V, backward: contiguous() 4 + zeros 4 + first += 10 + 3 x _partial_update (5 + 8) + 4 x
#     cat of dK, dV (8) + 3 x cat of K, V (4) + cast back 6 = 107.
TORCH_CP4 = 4096 * (126 + 50) + 2048 * (16 + 107)  # 972,800
TORCH_CP4_FULL_RECOMPUTE = 4096 * (2 * 126 + 50) + 2048 * (2 * 16 + 107)  # the ring runs twice
# Transformer Engine (AttnFuncWithCPAndKVP2P): query, forward: init copy 4 + 3 fused adds 6 =
# 22; backward: dq copy 4 + 3 x dq.add_ 6 = 22; K/V, forward: cat into p2p_comm_buffers[0] 4;
# backward: copy_ into the first buffer 4 + dk/dv copy 4 + 3 x add_ 6 = 26.
TE_CP4 = 4096 * (22 + 22) + 2048 * (4 + 26)  # 241,664


def test_the_merge_of_the_rings_results_costs_what_each_backends_code_moves() -> None:
    titan = _env("torchtitan", gpus=4, cp=4)
    assert _value("cp_merge_per_token_layer", titan) == TORCH_CP4
    assert _value("cp_merge_per_token_layer", _env("megatron", gpus=4, cp=4)) == TE_CP4
    again = _env("torchtitan", gpus=4, cp=4, recompute="full")
    assert _value("cp_merge_per_token_layer", again) == TORCH_CP4_FULL_RECOMPUTE
    # memory-bound, at the HBM rate elementwise kernels reach: 32 layers, 64 micro-batches of
    # 2048 tokens a rank
    hbm = titan["cluster.hbm_bandwidth"] * _value("hbm_efficiency", titan)
    assert _value("cp_merge_s", titan) == pytest.approx(TORCH_CP4 * 32 * 64 * 2048 / hbm)


def test_without_context_parallelism_nothing_is_merged_or_held() -> None:
    for backend in ("torchtitan", "megatron"):
        assert _value("cp_merge_s", _env(backend)) == 0
        assert _value("cp_transient_bytes", _env(backend)) == 0


def test_torchtitan_before_2026_repeated_the_kv_heads_its_ring_carried() -> None:
    """Calibration runs on torchtitan (all before ff0829c10, 'GQA without kv repeats') sent and
    merged the 32 query heads' K and V, four times Llama 3 8B's 8 KV heads."""
    env = _env("torchtitan", gpus=4, cp=4)
    assert env["train.kv_heads_repeated"] is False  # a plan: torchtitan 0.3 passes enable_gqa
    repeated = {**env, "train.kv_heads_repeated": True}
    assert _value("kv_chunk_bytes", repeated) == 4 * _value("kv_chunk_bytes", env)
    assert _value("cp_merge_per_token_layer", repeated) == 4096 * (126 + 50) + 4 * 2048 * (16 + 107)


def test_pytorchs_backward_sends_dk_dv_in_fp32() -> None:
    """_templated_ring_attention_backward accumulates dK, dV in float32 (convert_to_f32) and
    sends them round the ring so: twice a 16-bit K, V chunk's bytes."""
    env = _env("torchtitan", gpus=4, cp=4, gpus_per_node=1, inter_node_gbps=1)
    chunk, bandwidth = _value("kv_chunk_bytes", env), _value("cp_bandwidth", env)
    latency = _value("cp_latency", env)
    assert _value("cp_dkv_step_comm_s", env) == pytest.approx(2 * chunk / bandwidth + latency)


# The most a layer's ring attention holds at once, per token of a rank, at cp 4:
# PyTorch forward, at a later step's merge: gathered K, V 2 x 4 x 2048 + contiguous copies
# 2 x 2048 + 18 x 4096 (fp32 output so far and new, the step's output and its fp32 cast, the
# product) = 94,208; backward: 8 x 4096 + (20 + 8) x 2048 = 90,112. With the KV heads repeated
# (4 x 2048): forward 73,728 + 10 x 8192 = 155,648, backward 32,768 + 28 x 8192 = 262,144.
# Transformer Engine forward: cp send buffers 2 x 4 x 2048 + every step's output and the
# result 2 x 5 x 4096 = 57,344; backward 4 x 4096 + 10 x 2048 = 36,864.
def test_a_layers_ring_attention_holds_the_larger_of_its_forwards_and_backwards_buffers() -> None:
    titan = _env("torchtitan", gpus=4, cp=4)
    assert _value("cp_transient_per_token", titan) == 94_208
    repeated = {**titan, "train.kv_heads_repeated": True}
    assert _value("cp_transient_per_token", repeated) == 262_144
    assert _value("cp_transient_per_token", _env("megatron", gpus=4, cp=4)) == 57_344
    assert _value("cp_transient_bytes", titan) == 94_208 * 2048  # mbs 1: 8192 / 4 tokens


def test_the_rings_buffers_are_in_the_activations_memory(tmp_path: Any) -> None:
    """Set to nothing by an overlay, the estimate's activations lose exactly the buffers."""
    import parplan_gen

    folder = tmp_path / "no_buffers"
    folder.mkdir()
    (folder / "ring.yaml").write_text(
        "formulas:\n  cp_transient_per_token:\n    value: 0\n    unit: B/token\n"
        '    source: "test: without the buffers"\n',
        encoding="utf-8",
    )
    layout = {"cp": 4, "global_batch": 8, "seq_len": 8192}
    cluster = {"gpus": 8, "gpu": "h100"}
    held = parplan_gen.estimate("llama-3-8b", cluster, layout, backend="megatron")
    freed = parplan_gen.estimate(
        "llama-3-8b", cluster, layout, backend="megatron", rules=[str(folder)]
    )
    gone = held.estimate.memory.activations - freed.estimate.memory.activations
    assert gone == 57_344 * 2048  # Transformer Engine's forward buffers, 2048 tokens a rank
