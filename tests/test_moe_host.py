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
    layers = 48 / 2  # every Qwen3-30B-A3B layer is an MoE layer; pp 2
    micro_batches = 512 / (1 * 8)  # global batch / (mbs 1 x dp 8): 16 GPUs over pp 2
    assert formula_value("plan.grad_accum", env) == micro_batches
    # The GPU's work between two syncs: the stage's layers without the LM head's average share,
    # and the traffic the step waits for (no TP or CP here: the expert all-to-alls), a layer and
    # micro-batch.
    stage = formula_value("layers_gpu_s", env) - formula_value("head_matmul_s", env) / 2
    gpu = (stage + formula_value("ep_exposed_s", env)) / (layers * micro_batches)
    assert formula_value("gpu_between_syncs_s", env) == pytest.approx(gpu)
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


def test_a_measured_launch_time_is_recorded_for_rules_not_priced(tmp_path) -> None:
    """A cluster file's `measured.moe_host.launch_s` reaches the rules as
    cluster.measured_host_launch_s (0 without a profile), but the built-in price stays the fitted
    average: a BF16 grouped-GEMM launch is not what the average over a layer's counted launches
    carries (efficiency.yaml)."""
    fitted = formula_env("qwen3-30b-a3b", H100_16, "megatron", **QWEN3)
    assert formula_value("cluster.measured_host_launch_s", fitted) == 0
    path = tmp_path / "c.yaml"
    path.write_text(_cluster_file(20e-6), encoding="utf-8")
    env = formula_env("qwen3-30b-a3b", path, "megatron", **QWEN3)
    assert formula_value("cluster.measured_host_launch_s", env) == pytest.approx(20e-6)
    assert formula_value("host_launch_s", env) == formula_value("host_launch_s", fitted)


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
    """transformer_engine.pytorch whose GroupedLinear's pass (its output's sum, then
    torch.autograd.grad of it) costs the host FIXED_S plus PER_LAUNCH_S for each of its experts'
    launches."""

    class GroupedLinear:
        def __init__(self, num_gemms: int, *shape: int, **options: Any) -> None:
            self.experts = num_gemms
            assert options["bias"] is False

        def parameters(self) -> list[str]:
            return [f"weight{i}" for i in range(self.experts)]

        def __call__(self, tokens: Any, splits: list[int]) -> Any:
            assert len(splits) == self.experts
            cost = FIXED_S + PER_LAUNCH_S * launches_per_expert * self.experts
            return SimpleNamespace(sum=lambda: cost)

    te = ModuleType("transformer_engine.pytorch")
    te.GroupedLinear = GroupedLinear  # type: ignore[attr-defined]
    return te


def _fake_torch(clock: _Clock, gpu_s: float = 0.0) -> Any:
    """torch whose autograd.grad spends the pass's host cost on the clock, and whose
    synchronize waits `gpu_s` for each pass the GPU is behind (0: the host paced)."""
    passes = []

    def grad(cost: float, wrt: list[Any]) -> None:
        assert len(wrt) > 1  # the input and the weights
        clock.now += cost
        passes.append(cost)

    def synchronize(index: int) -> None:
        clock.now += gpu_s * len(passes)
        passes.clear()

    cuda = SimpleNamespace(synchronize=synchronize, empty_cache=lambda: None)
    return SimpleNamespace(
        cuda=cuda,
        autograd=SimpleNamespace(grad=grad),
        device=lambda kind, index=0: (kind, index),
        bfloat16="bf16",
        randn=lambda *shape, **options: shape,
    )


def _with_fake_te(monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> None:
    top = ModuleType("transformer_engine")
    top.__version__ = "2.10.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformer_engine", top)
    te = _fake_te(clock, sweeps().moe_host.launches_per_expert)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", te)
    monkeypatch.setattr(moe_host_module.time, "perf_counter", clock)


def test_the_profile_times_the_host_per_launch_free_of_a_passs_fixed_cost(monkeypatch) -> None:
    passes = sweeps().moe_host
    clock = _Clock()
    _with_fake_te(monkeypatch, clock)
    found = moe_host(Device(_fake_torch(clock), "cuda", 0), passes)
    assert isinstance(found, MoeHost)
    assert found.launch_s == pytest.approx(PER_LAUNCH_S)
    low, high = passes.experts
    assert found.pass_s == pytest.approx(
        [FIXED_S + PER_LAUNCH_S * passes.launches_per_expert * n for n in (low, high)]
    )
    assert found.transformer_engine == "2.10.0"


def test_passes_the_gpu_paced_are_skipped_not_recorded(monkeypatch) -> None:
    clock = _Clock()
    _with_fake_te(monkeypatch, clock)
    slow_gpu = _fake_torch(clock, gpu_s=1.0)  # a second a pass behind the host
    found = moe_host(Device(slow_gpu, "cuda", 0), sweeps().moe_host)
    assert isinstance(found, str) and found.startswith("the GPU, not the host, paced the passes")


def test_without_a_loadable_transformer_engine_the_measurement_is_skipped(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", None)  # ImportError
    found = moe_host(Device(_fake_torch(clock), "cuda", 0), sweeps().moe_host)
    assert isinstance(found, str) and found.startswith("Transformer Engine cannot be loaded")
    assert moe_host(Device(_fake_torch(clock), "cpu", 0), sweeps().moe_host) is None

    def broken(name: str) -> Any:
        raise OSError("libtransformer_engine.so: cannot open shared object file")

    monkeypatch.setattr(moe_host_module.importlib, "import_module", broken)
    found = moe_host(Device(_fake_torch(clock), "cuda", 0), sweeps().moe_host)
    assert found == (
        "Transformer Engine cannot be loaded (OSError: libtransformer_engine.so: cannot open "
        "shared object file)"
    )


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


def test_plan_md_says_how_much_of_compute_waits_for_the_host(cli, tmp_path) -> None:
    """plan.md's time table has a row under the parts for time.host_wait_s, as a share of
    compute, where the chosen plan has one."""
    import json

    out = tmp_path / "plan"
    run = cli(
        "plan", "qwen3-30b-a3b", "--gpus", "16", "--gpu", "h100", "--global-batch", "512",
        "--seq-len", "4096", "--precision", "fp8", "--out", out,
    )  # fmt: skip
    assert run.code == 0, run.err
    time = json.loads((out / "plan.json").read_text(encoding="utf-8"))["chosen"]["time"]
    assert time["host_wait_s"] > 0
    share = f"{time['host_wait_s'] / time['compute_s']:.0%} of compute"
    rows = (out / "plan.md").read_text(encoding="utf-8").splitlines()
    row = next(line for line in rows if "waiting for host launches" in line)
    assert row.split("|")[3].strip() == share
