"""The compute and TP-overlap terms of rules/cost/compute.yaml and time.yaml, worked by hand, and
the Megatron / torchtitan settings rendered for what they price.

Llama 3 8B (32 layers, h 4096, 32 heads of 128, 8 KV heads, SwiGLU ffn 14336, vocab 128256) at
s = 8192, per token, forward:
  attention scores + values, whole matrix: 32 layers x 2 x 32 heads x (128 + 128) x 8192
    = 4,294,967,296; causal (flash attention skips the masked half): 2,147,483,648;
  linear layers: 32 x 2 x (2 x 4096 x 4096 + 2 x 4096 x 1024 + 3 x 4096 x 14336)
    = 13,958,643,712; LM head 2 x 4096 x 128256 = 1,050,673,152.
Training without recompute: linear 3x, LM head 3x, flash attention 3.5x forward
(flash-attention benchmarks/benchmark_flash_attention.py flops(): fwd_bwd = 3.5 f).
"""

from __future__ import annotations

from typing import Any

import pytest
from formula_env import formula_value

import parplan_gen
from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.layout import build_layout
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.render.render_options import RenderOptions, render_files

from conftest import builtin_rules

ATTENTION_FULL = 4_294_967_296
ATTENTION_CAUSAL = 2_147_483_648
LINEAR = 13_958_643_712
LM_HEAD = 1_050_673_152
H100_BF16, H100_FP8 = 989e12, 1979e12  # data/gpus.yaml h100-sxm-80gb dense peaks


def _env(gpus: int, gpu: str, backend: str, **layout: Any) -> tuple[dict[str, Any], Evaluator]:
    evaluator = Evaluator(builtin_rules(), backend=backend)  # type: ignore[arg-type]
    options = {"mbs": 1, "global_batch": 64, "seq_len": 8192} | layout
    plan = build_layout(gpus, **options)
    model, cluster = load_model("llama-3-8b"), load_cluster_spec({"gpus": gpus, "gpu": gpu})
    return evaluator.env(model, cluster, plan, flash_attention=True), evaluator


_value = formula_value


def test_causal_attention_is_half_the_matrix() -> None:
    env, _ = _env(8, "h100", "megatron")
    assert env["model.attention_flops_per_token"] == ATTENTION_FULL
    assert env["model.causal_attention_flops_per_token"] == ATTENTION_CAUSAL
    # The published convention (Megatron-LM before core_v0.12.0) keeps the whole matrix.
    assert env["model.flops_per_token"] == 3 * (LINEAR + LM_HEAD + ATTENTION_FULL)
    assert _value("attention_executed_per_token", env) == 3.5 * ATTENTION_CAUSAL
    assert _value("linear_executed_per_token", env) == 3 * LINEAR


def test_fp8_speeds_up_only_the_linear_layers() -> None:
    bf16, _ = _env(8, "h100", "megatron")
    fp8, _ = _env(8, "h100", "megatron", precision="fp8")
    scale = _value("fp8_gemm_scale", {})  # an FP8 GEMM's fraction of its peak (fitted)
    # The linear layers and the LM head run at their GEMMs' rooflines (the ridge is the 16-bit
    # one in both runs), the attention at its kernel's.
    linear, attention = _value("linear_gemm_efficiency", bf16), _value("attention_efficiency", bf16)
    head = _value("lm_head_gemm_efficiency", bf16)
    assert _value("linear_gemm_efficiency", fp8) == linear
    assert _value("lm_head_gemm_efficiency", fp8) == head
    assert _value("attention_efficiency", fp8) == attention
    other = 3.5 * ATTENTION_CAUSAL / attention + 3 * LM_HEAD / head
    expected = (3 * LINEAR / (H100_FP8 * scale * linear) + other / H100_BF16) / (
        (3 * LINEAR / linear + other) / H100_BF16
    )
    ratio = _value("matmul_s", fp8) / _value("matmul_s", bf16)
    assert ratio == pytest.approx(expected, rel=1e-9)
    assert 0.55 < ratio < 0.65  # not 989 / 1979 = 0.4998: attention and the LM head stay 16-bit
    assert _value("fp8_cast_s", bf16) == 0 < _value("fp8_cast_s", fp8)


@pytest.mark.parametrize(
    ("backend", "sequence_parallel", "overlapped"),
    [
        ("megatron", True, True),
        ("megatron", False, False),  # --tp-comm-overlap asserts --sequence-parallel
        ("torchtitan", True, True),
        ("deepspeed", True, False),  # AutoTP runs its all-reduces between the GEMMs
    ],
)
def test_tp_comm_is_hidden_behind_the_gemms_only_where_the_backend_overlaps_it(
    backend: str, sequence_parallel: bool, overlapped: bool
) -> None:
    env, _ = _env(8, "h100", backend, tp=8, sequence_parallel=sequence_parallel)
    comm, exposed = _value("tp_comm_s", env), _value("tp_exposed_s", env)
    if not overlapped:
        assert exposed == comm
        return
    gemms = _value("linear_matmul_s", env)
    assert exposed == max(comm / 8, comm - gemms) < comm


def test_megatron_tp_overlap_needs_the_tp_group_inside_one_nvlink_domain() -> None:
    """TE's userbuffers reach the tp ranks over CUDA IPC / multicast: a tp group of 16 on
    8-GPU nodes runs its collectives between the GEMMs; torchtitan's async TP is not gated."""
    across, _ = _env(16, "h100", "megatron", tp=16, sequence_parallel=True)
    assert _value("1 if tp_comm_overlapped else 0", across) == 0
    assert _value("tp_exposed_s", across) == _value("tp_comm_s", across)
    inside, _ = _env(16, "h100", "megatron", tp=8, sequence_parallel=True)
    assert _value("1 if tp_comm_overlapped else 0", inside) == 1


@pytest.mark.parametrize("backend", ["megatron", "torchtitan"])
def test_tp_overlap_needs_peer_access_which_a_pcie_node_does_not_promise(backend: str) -> None:
    """Transformer Engine's userbuffers stop with "No peer-to-peer access available between
    GPUs" (userbuffers-host.cpp, v2.9) and torch's symmetric memory maps peers' buffers too: on
    8 L40S (PCIe, no NVLink) the traffic stays between the GEMMs, and Megatron-LM's files go
    without --tp-comm-overlap (and its userbuffers' memory)."""
    pcie, _ = _env(8, "l40s", backend, tp=8, sequence_parallel=True)
    assert _value("1 if tp_comm_overlapped else 0", pcie) == 0
    assert _value("tp_exposed_s", pcie) == _value("tp_comm_s", pcie) > 0
    assert _value("te_userbuffer_bytes", pcie) == 0
    nvlink, _ = _env(8, "h100", backend, tp=8, sequence_parallel=True)
    assert _value("1 if tp_comm_overlapped else 0", nvlink) == 1
    if backend == "megatron":
        plan = parplan_gen.plan(
            "llama-3-8b", {"gpus": 8, "gpu": "l40s"}, global_batch=64, seq_len=4096,
            backend="megatron", pins={"tp": 2},
        )  # fmt: skip
        assert plan.chosen.plan.sequence_parallel
        assert "--tp-comm-overlap" not in plan.megatron_args()


def test_a_framework_without_tp_overlap_exposes_the_traffic() -> None:
    """train.tp_comm_overlap false (calibration: Megatron-LM before --tp-comm-overlap)."""
    env, _ = _env(8, "h100", "megatron", tp=8, sequence_parallel=True)
    env["train.tp_comm_overlap"] = False
    assert _value("tp_exposed_s", env) == _value("tp_comm_s", env) > 0


@pytest.mark.parametrize(
    ("gpu", "precision", "sequence_parallel", "flags", "absent"),
    [
        ("h100", "fp8", True, ["--fp8-format hybrid", "--fp8-recipe tensorwise"], []),
        ("b200", "fp8", True, ["--fp8-recipe mxfp8", "--tp-comm-overlap"], []),
        (
            "h100",
            "bf16",
            True,
            ["--sequence-parallel", "--tp-comm-overlap"],
            ["--fp8", "UB_SKIPMC"],
        ),
        ("h100", "bf16", False, [], ["--tp-comm-overlap", "--fp8", "UB_SKIPMC"]),
        # No CUDA multicast before Hopper: TE's initialize_ub raises unless UB_SKIPMC=1.
        ("a100-80gb", "bf16", True, ["--tp-comm-overlap", "export UB_SKIPMC=1"], []),
        ("a100-80gb", "bf16", False, [], ["--tp-comm-overlap", "UB_SKIPMC"]),
    ],
)
def test_megatron_renders_what_is_priced(
    gpu: str, precision: str, sequence_parallel: bool, flags: list[str], absent: list[str]
) -> None:
    evaluator = Evaluator(builtin_rules(), backend="megatron")
    model, cluster = load_model("llama-3-8b"), load_cluster_spec({"gpus": 8, "gpu": gpu})
    plan = build_layout(
        8, tp=2, mbs=1, global_batch=64, seq_len=8192, precision=precision,
        sequence_parallel=sequence_parallel, distributed_optimizer=True,
    )  # fmt: skip
    found = evaluator.evaluate(model, cluster, plan)
    doc = PlanDocument.from_parts(
        rules=builtin_rules(), model=model, cluster=cluster, chosen=found.estimate
    )
    script = render_files(doc, RenderOptions())["megatron_args.sh"]
    words = " ".join(script.split())
    assert all(flag in words for flag in flags), script
    assert not any(flag in words for flag in absent), script
