"""The cost model orders competing layouts as the published measurements do (issue 15, item 4).

Each case is two layouts that a source measured on the same model, GPUs and batch; the test
asserts only the ORDER of the predicted throughputs (and, where the source's gap is wide, that
the predicted gap points the same way by a clear margin), never our own figures. The facts are
the sources' own, written out here so that the test does not need ../shared/calibration:

- Narayanan et al. 2021 (arXiv:2104.04473), Table 2: GPT-3 175B (96 layers, h 12288, 96 heads,
  seq 2048, vocabulary 51,200), global batch 1536, A100-80GB in DGX A100 nodes with eight
  200 Gb/s HDR InfiniBand HCAs per node. ZeRO-3 without model parallelism (micro-batch 4 / 2 /
  1: the fixed batch spread over every GPU) measured 144 / 88 / 44 TFLOP/s per GPU on 384 / 768 / 1536 GPUs; PTD-P (model-parallel size
  96: tp 8 x pp 12, micro-batch 1) 153 / 149 / 141. PTD-P is faster at every size, and the gap
  widens with the GPU count.
- torchtitan (Liang et al. 2024, arXiv:2410.06511, Table 1): Llama 3.1 8B on 8 H100, FSDP2 with
  selective activation checkpointing, local batch 2: 5,762 tokens/s per GPU in BF16, 8,532 with
  Float8 linears (and torch.compile): FP8 is faster.
"""

from __future__ import annotations

from typing import Any

import pytest

import parplan_gen
from parplan_gen.api import load_cluster_spec
from parplan_gen.cost.hardware import cluster_from_flags

GPT3_SEQ = 2048
GPT3_BATCH = 1536
HDR_GBPS_PER_GPU = 200  # eight 200 Gb/s HCAs for eight GPUs per node
ZERO3_MBS = {384: 4, 768: 2, 1536: 1}  # global batch / GPUs, no accumulation


def _zero3(gpus: int) -> dict[str, Any]:
    return {
        "global_batch": GPT3_BATCH, "seq_len": GPT3_SEQ, "recompute": "full",
        "tp": 1, "pp": 1, "mbs": ZERO3_MBS[gpus], "zero_stage": 3,
    }  # fmt: skip


def _tflops(model: str, cluster: Any, layout: dict[str, Any], backend: str) -> float:
    evaluation = parplan_gen.estimate(model, cluster, layout, backend=backend)
    return evaluation.estimate.throughput.model_tflops_per_gpu


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param(
            384,
            marks=pytest.mark.xfail(
                strict=True,
                reason="DeepSpeed 2021's ZeRO-3 at 4 sequences per GPU reads +36 % fast: its "
                "hooks and unhidden fetches are not priced (docs/benchmarks.md, 'ZeRO-3')",
            ),
        ),
        768,
        1536,
    ],
)
def test_ptd_p_beats_zero3_at_every_size_of_narayanan_table_2(gpus: int) -> None:
    cluster = cluster_from_flags(gpus, "a100-80gb", 8, HDR_GBPS_PER_GPU)
    common = {"global_batch": GPT3_BATCH, "seq_len": GPT3_SEQ, "recompute": "full"}
    zero3 = _tflops("gpt3-175b", cluster, _zero3(gpus), "deepspeed")
    ptdp = _tflops("gpt3-175b", cluster, common | {"tp": 8, "pp": 12, "mbs": 1}, "megatron")
    assert ptdp > zero3


def test_zero3_falls_as_table_2_adds_gpus_at_a_fixed_batch() -> None:
    """Measured 144 -> 88 -> 44: each doubling of the GPUs loses about 40-50 % per GPU."""
    figures = [
        _tflops(
            "gpt3-175b",
            cluster_from_flags(g, "a100-80gb", 8, HDR_GBPS_PER_GPU),
            _zero3(g),
            "deepspeed",
        )
        for g in (384, 768, 1536)
    ]
    assert figures[0] > figures[1] > figures[2]
    assert figures[2] < 0.75 * figures[0]  # measured 44 / 144 = 0.31


def test_float8_beats_bf16_on_llama_3_8b_fsdp2_as_torchtitan_measured() -> None:
    cluster = load_cluster_spec({"gpus": 8, "gpu": "h100-sxm-80gb"})
    common = {"dp": 8, "mbs": 2, "global_batch": 16, "seq_len": 8192, "zero_stage": 3}
    common |= {"recompute": "selective"}
    bf16 = _tflops("llama-3-8b", cluster, common | {"precision": "bf16"}, "torchtitan")
    fp8 = _tflops("llama-3-8b", cluster, common | {"precision": "fp8"}, "torchtitan")
    assert fp8 > bf16
    # Measured 8532 / 5762 = 1.48 with torch.compile as well; FP8 runs only the linear layers,
    # so the speed-up stays well below the 2x of the FP8 peak.
    assert fp8 / bf16 < 1.9
