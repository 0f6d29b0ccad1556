"""Megatron-LM layouts of issue 13 that the layout could not express before: expert parallelism
folded over tp x cp x dp with its own expert-tensor parallelism (Megatron-Core parallel_state),
and pipeline splits that count the embedding and the loss as layers. Each is accepted by
`estimate`, `check` and the search on the megatron backend, and refused, with the reason, where
a backend does not run it."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan_gen.api import estimate, load_cluster_spec, load_model
from parplan_gen.cost.layout import LayoutError, build_layout
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.search_choices import SearchChoices, choose
from parplan_gen.planning.search_space import (
    Request,
    SearchOptions,
    expert_groups,
    outside_search,
    vpp_options,
)
from parplan_gen.rules.ruleset import load_rules

from conftest import REPO

QWEN3_235B = str(REPO / "examples" / "hf" / "qwen3-235b-a22b.json")
# Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py,
# QWEN3_235B_A22B_H100_256GPUS_BF16: tp 2, pp 8, vpp 4, ep 32, etp 1, global batch 2048, mbs 1
# (so dp = 256 / (2 x 8) = 16 < ep 32).
QWEN_LAYOUT = {
    "tp": 2, "pp": 8, "vpp": 4, "ep": 32, "etp": 1, "mbs": 1, "global_batch": 2048,
    "seq_len": 4096, "sequence_parallel": True, "distributed_optimizer": True,
}  # fmt: skip
LLAMA_405B_LAYOUT = {
    "tp": 8, "pp": 16, "vpp": 8, "mbs": 1, "global_batch": 2048, "seq_len": 8192,
    "sequence_parallel": True, "distributed_optimizer": True, "recompute": "full",
}  # fmt: skip


def _request(model: str, gpus: int, layout: dict, backend: str = "megatron") -> Request:
    spec, cluster = load_model(model), load_cluster_spec({"gpus": gpus, "gpu": "h100"})
    chosen = choose(
        SearchChoices(), load_rules(), spec, cluster, global_batch=layout["global_batch"],
        seq_len=layout["seq_len"],
    )  # fmt: skip
    options = SearchOptions.for_model(spec, chosen, backend).on(backend)  # type: ignore[arg-type]
    return Request(spec, cluster, layout["global_batch"], layout["seq_len"], options=options)


# ---- expert parallelism over tp x cp x dp --------------------------------------------------------


def test_the_layout_takes_ep_beyond_dp_when_the_expert_groups_tile_a_stage() -> None:
    layout = build_layout(256, **QWEN_LAYOUT)
    assert (layout.dp, layout.ep, layout.etp) == (16, 32, 1)
    # parallel_state: expert_data_parallel_size = world / (etp x ep x pp) = 256 / (1 x 32 x 8)
    assert layout.expert_dp == 1
    # etp defaults to tp (arguments.py validate_args), as in a plan.json written before etp
    assert build_layout(256, **{**QWEN_LAYOUT, "ep": 8, "etp": None}).etp == 2


def test_expert_groups_that_do_not_tile_a_stage_are_refused_with_the_equation() -> None:
    # tp 2 x dp 16 = 32 ranks per stage; etp 2 x ep 32 = 64 does not divide them
    with pytest.raises(LayoutError, match=r"tp\(2\) \* cp\(1\) \* dp\(16\) = 32 % \(etp\(2\) "):
        build_layout(256, **{**QWEN_LAYOUT, "etp": 2})


def test_megatron_runs_it_and_deepspeed_refuses_it_by_capabilities() -> None:
    assert BACKENDS["megatron"].refuses(build_layout(256, **QWEN_LAYOUT)) is None
    layout = build_layout(256, **{**QWEN_LAYOUT, "vpp": 1})  # DeepSpeed has no interleaving
    assert BACKENDS["megatron"].refuses(layout) is None
    refusal = BACKENDS["deepspeed"].refuses(layout)
    assert refusal == "DeepSpeed carves ep out of dp: dp(16) % ep(32) != 0"
    folded = build_layout(256, **{**QWEN_LAYOUT, "vpp": 1, "ep": 8})  # etp 1 != tp 2
    assert "no expert tensor parallelism of its own (etp 1)" in BACKENDS["deepspeed"].refuses(
        folded
    )


def test_estimate_counts_the_experts_over_etp_x_pp_x_ep() -> None:
    cluster = {"gpus": 256, "gpu": "h100"}
    folded = estimate(QWEN3_235B, cluster, QWEN_LAYOUT, backend="megatron")
    assert folded.runnable and folded.fits, folded.violations
    # etp = tp 2 (ep 16 within dp): experts split over 2 x 8 x 16 = 256 ranks, not 1 x 8 x 32
    same_tp = estimate(QWEN3_235B, cluster, {**QWEN_LAYOUT, "ep": 16, "etp": 2}, backend="megatron")
    assert folded.estimate.memory.params == pytest.approx(same_tp.estimate.memory.params, rel=1e-9)


def test_the_search_reaches_ep_32_on_256_gpus() -> None:
    request = _request(QWEN3_235B, 256, QWEN_LAYOUT)
    assert outside_search(build_layout(256, **QWEN_LAYOUT), request) is None
    # tp 2 x dp 16: etp 2 with ep dividing 16, and etp 1 with ep dividing 32
    groups = expert_groups(16, 2, 1, request.options)
    assert (32, 1) in groups and (16, 2) in groups and (32, 2) not in groups


def test_check_reads_the_expert_tensor_size_back(tmp_path: Path, cli) -> None:
    script = tmp_path / "megatron_args.sh"
    script.write_text(
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 "
        "--expert-model-parallel-size 32 --expert-tensor-parallel-size 1 --sequence-parallel "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
        "--num-layers-per-virtual-pipeline-stage 3 --use-distributed-optimizer "
        "--micro-batch-size 1 --global-batch-size 2048 --seq-length 4096 --bf16\n"
    )
    run = cli("check", QWEN3_235B, "--gpus", 256, "--gpu", "h100", "--from-megatron", script,
              "--json")  # fmt: skip
    assert run.code == 0, run.err
    layout = run.json()["plan"]
    # (94 + 2) / (8 stages x 3 layers) = 4 virtual stages; dp = 256 / (2 x 8)
    assert (layout["dp"], layout["ep"], layout["etp"], layout["vpp"]) == (16, 32, 1, 4)
    # on DeepSpeed: refused by its capabilities (exit 1, the reason named)
    run = cli("check", QWEN3_235B, "--gpus", 256, "--gpu", "h100", "--tp", 2, "--pp", 8,
              "--ep", 32, "--etp", 1, "--global-batch", 2048, "--seq-len", 4096,
              "--backend", "deepspeed")  # fmt: skip
    assert run.code == 1 and "DeepSpeed carves ep out of dp: dp(16) % ep(32)" in run.out


# ---- the embedding and the loss in the pipeline split ---------------------------------------


def test_126_layers_on_pp_16_x_vpp_8_are_estimated_and_searched() -> None:
    evaluation = estimate("llama-3-405b", {"gpus": 16384, "gpu": "h100"}, LLAMA_405B_LAYOUT)
    assert evaluation.runnable, evaluation.violations
    request = _request("llama-3-405b", 16384, LLAMA_405B_LAYOUT)
    assert outside_search(build_layout(16384, **LLAMA_405B_LAYOUT), request) is None
    # shares of 126, 127 and 128 layers over 16 stages are all 8: vpp 1, 2, 4, 8
    assert vpp_options(126, 16, request.options) == [1, 2, 4, 8]
    # the shares of 32, 33 and 34 layers over 2 stages: 16 and 17
    assert vpp_options(32, 2, request.options) == [1, 2, 4, 8, 16, 17]
