"""The host's share of a Megatron MoE layer (rules/cost/moe.yaml moe_host_exposed_s): launches
counted from Transformer Engine v2.10's grouped linear layer and Megatron-Core's MoE layer,
times the host's time per launch (efficiency.yaml host_launch_s: fitted, or measured by
`parplan profile`), beyond the GPU's time for the layer, forward and backward; and the
profile's measurement of that time (parplan_gen/profile/moe_host.py) with a fake Transformer
Engine."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from formula_env import formula_env, formula_value
from measured_cluster import measured_cluster

from parplan_gen.cost.measured import MoeHost
from parplan_gen.profile import moe_host as moe_host_module
from parplan_gen.profile.moe_host import moe_host
from parplan_gen.profile.runtime import Device
from parplan_gen.profile.sweeps import sweeps

H100_16 = {"gpus": 16, "gpu": "h100"}
QWEN3 = {"ep": 8, "pp": 2, "global_batch": 512, "seq_len": 4096}
LOCAL_EXPERTS = 16  # Qwen3-30B-A3B's 128 experts over ep 8
# Megatron-Core's fixed launches of an MoE layer (router, dispatcher, combine), moe.yaml
FIXED_FWD, FIXED_BWD = 45, 25


def _host(env: dict[str, Any]) -> tuple[float, float, float]:
    t = formula_value("host_launch_s", env)
    return formula_value("moe_host_fwd_s", env), formula_value("moe_host_bwd_s", env), t


@pytest.mark.parametrize(
    ("precision", "cluster", "fwd_per_expert", "bwd_per_expert"),
    [
        # two linear layers, one GEMM each forward; dgrad and wgrad backward
        ("bf16", H100_16, 2, 4),
        # current scaling: four quantize kernels per expert and linear (zero amax, amax, scale,
        # cast), for the input forward and the output gradient backward
        ("fp8", H100_16, 2 * (1 + 4), 2 * (1 + 4) + 2),
        # MXFP8 on Blackwell: one quantize kernel per expert and linear
        ("fp8", {"gpus": 16, "gpu": "b200"}, 2 * (1 + 1), 2 * (1 + 1) + 2),
    ],
)
def test_launches_grow_with_the_local_experts_by_the_recipes_kernels(
    precision: str, cluster: dict[str, Any], fwd_per_expert: int, bwd_per_expert: int
) -> None:
    env = formula_env("qwen3-30b-a3b", cluster, "megatron", precision=precision, **QWEN3)
    fwd, bwd, t = _host(env)
    assert fwd == pytest.approx((FIXED_FWD + fwd_per_expert * LOCAL_EXPERTS) * t)
    assert bwd == pytest.approx((FIXED_BWD + bwd_per_expert * LOCAL_EXPERTS) * t)


def test_full_recomputation_launches_the_forward_again_in_the_backward() -> None:
    env = formula_env("qwen3-30b-a3b", H100_16, "megatron", recompute="full", **QWEN3)
    fwd, bwd, t = _host(env)
    assert bwd == pytest.approx((FIXED_BWD + 4 * LOCAL_EXPERTS) * t + fwd)


def test_the_host_adds_what_it_takes_beyond_the_gpus_time_each_direction() -> None:
    """16 local experts at 4,096 tokens a micro-batch on H100 in FP8: the host's 205 launches
    forward outlast the GPU's share of the layer, so the stage waits for the difference in
    every MoE layer of every micro-batch."""
    env = formula_env("qwen3-30b-a3b", H100_16, "megatron", precision="fp8", **QWEN3)
    fwd, bwd, _ = _host(env)
    gpu = formula_value("gpu_layer_microbatch_s", env)
    layers = 48 / 2  # every Qwen3-30B-A3B layer is an MoE layer; pp 2
    micro_batches = 512 / (1 * 8)  # global batch / (mbs 1 x dp 8): 16 GPUs over pp 2
    assert formula_value("plan.grad_accum", env) == micro_batches
    expected = layers * micro_batches * (max(0, fwd - gpu / 3) + max(0, bwd - 2 * gpu / 3))
    assert formula_value("moe_host_exposed_s", env) == pytest.approx(expected)
    assert fwd > gpu / 3  # the case the test is about: the host paces the forward
    assert formula_value("layers_compute_s", env) == pytest.approx(
        formula_value("layers_gpu_s", env) + expected
    )


@pytest.mark.parametrize(
    ("precision", "quantize"),
    [("bf16", 0), ("fp8", 1)],  # DeepSpeed's FP8 is TE's default recipe on Hopper: delayed
)
def test_deepspeed_calls_each_local_experts_mlp_in_turn(precision: str, quantize: int) -> None:
    """DeepSpeed-MoE's Experts.forward loops over the local experts; Qwen3's gated MLP is 3
    linears, SiLU and the gate's product forward (5), each linear's dgrad and wgrad and 3
    elementwise backward kernels (9); under FP8 each te.Linear casts its input and its output
    gradient."""
    env = formula_env("qwen3-30b-a3b", H100_16, "deepspeed", precision=precision, **QWEN3)
    fwd, bwd, t = _host(env)
    assert fwd == pytest.approx((FIXED_FWD + (3 * (1 + quantize) + 2) * LOCAL_EXPERTS) * t)
    assert bwd == pytest.approx((FIXED_BWD + (3 * (2 + quantize) + 3) * LOCAL_EXPERTS) * t)
    assert formula_value("moe_host_exposed_s", env) > 0


def test_no_host_term_without_per_expert_launches_or_experts() -> None:
    titan = formula_env("qwen3-30b-a3b", H100_16, "torchtitan", **QWEN3)
    assert formula_value("moe_host_exposed_s", titan) == 0  # one torch._grouped_mm
    accelerate = formula_env("qwen3-30b-a3b", H100_16, "accelerate", global_batch=512, seq_len=4096)
    assert formula_value("moe_host_exposed_s", accelerate) == 0  # transformers' grouped_mm
    dense = formula_env("llama-3-8b", {"gpus": 8, "gpu": "h100"}, "megatron")
    assert formula_value("moe_host_exposed_s", dense) == 0


def test_a_measured_launch_time_replaces_the_fitted_one(tmp_path) -> None:
    """A cluster file's `measured.moe_host.launch_s` is the time every counted launch costs:
    doubling it doubles the host's time of a layer."""
    fitted = formula_env("qwen3-30b-a3b", H100_16, "megatron", **QWEN3)
    assert formula_value("host_launch_s", fitted) == formula_value("host_launch_fit_s", fitted)
    hosts = []
    for launch_us in (20, 40):
        path = tmp_path / f"c{launch_us}.yaml"
        path.write_text(_cluster_file(launch_us * 1e-6), encoding="utf-8")
        env = formula_env("qwen3-30b-a3b", path, "megatron", **QWEN3)
        assert formula_value("host_launch_s", env) == pytest.approx(launch_us * 1e-6)
        hosts.append(formula_value("moe_host_fwd_s", env))
    assert hosts[1] == pytest.approx(2 * hosts[0])


def _cluster_file(launch_s: float) -> str:
    section = (
        f"  moe_host:\n    launch_s: {launch_s!r}\n    experts: [4, 16]\n"
        "    pass_s: [0.001, 0.002]\n    transformer_engine: '2.10.0'\n"
    )
    return measured_cluster(16, section)


# ---- the profile's measurement -----------------------------------------------------------------


class _Clock:
    """time.perf_counter as the fake layer advances it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


FIXED_S, PER_LAUNCH_S = 200e-6, 30e-6  # a pass's fixed host time; each launch's


def _fake_te(clock: _Clock, launches_per_expert: int) -> ModuleType:
    """transformer_engine.pytorch whose GroupedLinear's pass costs the host FIXED_S plus
    PER_LAUNCH_S for each of its experts' launches."""

    class GroupedLinear:
        def __init__(self, num_gemms: int, *shape: int, **options: Any) -> None:
            self.experts = num_gemms
            assert options["bias"] is False

        def __call__(self, tokens: Any, splits: list[int]) -> Any:
            assert len(splits) == self.experts
            cost = FIXED_S + PER_LAUNCH_S * launches_per_expert * self.experts

            def backward() -> None:
                clock.now += cost

            return SimpleNamespace(sum=lambda: SimpleNamespace(backward=backward))

    te = ModuleType("transformer_engine.pytorch")
    te.GroupedLinear = GroupedLinear  # type: ignore[attr-defined]
    return te


def _fake_torch() -> Any:
    cuda = SimpleNamespace(synchronize=lambda index: None, empty_cache=lambda: None)
    return SimpleNamespace(
        cuda=cuda,
        device=lambda kind, index=0: (kind, index),
        bfloat16="bf16",
        randn=lambda *shape, **options: shape,
    )


def test_the_profile_times_the_host_per_launch_free_of_a_passs_fixed_cost(monkeypatch) -> None:
    passes = sweeps().moe_host
    clock = _Clock()
    top = ModuleType("transformer_engine")
    top.__version__ = "2.10.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformer_engine", top)
    monkeypatch.setitem(
        sys.modules, "transformer_engine.pytorch", _fake_te(clock, passes.launches_per_expert)
    )
    monkeypatch.setattr(moe_host_module.time, "perf_counter", clock)
    found = moe_host(Device(_fake_torch(), "cuda", 0), passes)
    assert isinstance(found, MoeHost)
    assert found.launch_s == pytest.approx(PER_LAUNCH_S)
    low, high = passes.experts
    assert found.pass_s == pytest.approx(
        [FIXED_S + PER_LAUNCH_S * passes.launches_per_expert * n for n in (low, high)]
    )
    assert found.transformer_engine == "2.10.0"


def test_without_transformer_engine_the_measurement_is_skipped(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", None)  # ImportError
    found = moe_host(Device(_fake_torch(), "cuda", 0), sweeps().moe_host)
    assert isinstance(found, str) and found.startswith("Transformer Engine is not installed")
    assert moe_host(Device(_fake_torch(), "cpu", 0), sweeps().moe_host) is None


def test_the_profile_counts_the_launches_moe_yaml_counts_in_bf16() -> None:
    """profile_sweeps.yaml's launches per expert of one linear layer are moe.yaml's BF16 count
    for the expert MLP's two, forward and backward, halved."""
    env = formula_env("qwen3-30b-a3b", H100_16, "megatron", precision="bf16", **QWEN3)
    both = formula_value("moe_expert_launches_fwd", env) + formula_value(
        "moe_expert_launches_bwd", env
    )
    assert sweeps().moe_host.launches_per_expert == both / 2


def test_the_profile_summary_names_the_hosts_launch_time_and_the_context() -> None:
    from parplan_gen.cli.profile import _summary
    from parplan_gen.cost.measured import Measured
    from parplan_gen.profile.session import ProfileRun

    provenance = {
        "gpu_name": "NVIDIA H100 80GB HBM3", "driver": None, "cuda": "12.8", "hip": None,
        "torch": "2.13.0", "nccl": "2.27.3", "date": "2026-12-07T22:00:00Z", "device": "cuda",
        "quick": True, "budget_s": 60, "stopped_early": False,
    }  # fmt: skip
    measured = Measured.model_validate(
        {
            "provenance": provenance,
            "outside_allocator": {"context_bytes": 512 * 2**20},
            "moe_host": {
                "launch_s": 31e-6,
                "experts": [4, 16],
                "pass_s": [0.0005, 0.0016],
                "transformer_engine": "2.10.0",
            },
        }
    )
    run = ProfileRun(measured, "h100", 1, 1, writes=True, torchrun=())
    text = _summary(run, "c.yaml")
    assert "  outside the allocator: 512 MiB (CUDA context)\n" in text
    assert (
        "  host per launch: 31 us (Transformer Engine 2.10.0 GroupedLinear, 4 vs 16 experts)\n"
        in text
    )


def test_the_estimate_shows_the_hosts_share_of_compute() -> None:
    """time.host_wait_s is moe_host_exposed_s, the part of compute the GPU waits for the
    host's launches: in plan.json and under `compute` in the text view; 0 for a dense model."""
    import parplan_gen
    from parplan_gen.api import load_model
    from parplan_gen.cli.estimate_view import time_lines

    layout = {"pp": 2, "ep": 8, "vpp": 12, "global_batch": 512, "seq_len": 4096}
    layout |= {"precision": "fp8"}
    found = parplan_gen.estimate("qwen3-30b-a3b", H100_16, layout, backend="megatron")
    env = formula_env("qwen3-30b-a3b", H100_16, "megatron", vpp=12, precision="fp8", **QWEN3)
    wait = found.estimate.time.host_wait_s
    assert wait == pytest.approx(formula_value("moe_host_exposed_s", env))
    assert 0 < wait < found.estimate.time.compute_s
    lines = time_lines(found.estimate, load_model("qwen3-30b-a3b"))
    compute = next(i for i, line in enumerate(lines) if line.split()[0] == "compute")
    assert lines[compute + 1].split()[:5] == ["of", "it,", "waiting", "for", "host"]
    assert float(lines[compute + 1].split()[-3]) == pytest.approx(wait, abs=1e-4)
    dense = parplan_gen.estimate(
        "llama-3-8b", {"gpus": 8, "gpu": "h100"}, {"global_batch": 64}, backend="megatron"
    )
    assert dense.estimate.time.host_wait_s == 0
    dense_lines = time_lines(dense.estimate, load_model("llama-3-8b"))
    assert not any("host launches" in line for line in dense_lines)
