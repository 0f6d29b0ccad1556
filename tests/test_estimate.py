"""The cost model (rules/cost/*.yaml through parplan_gen.cost.estimate) against numbers from papers.

Every expected number is printed in the cited source or worked by hand in the comment next to
it (the arithmetic is written out so it can be checked with a pencil); none was produced by
running the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.cost.catalog import load_catalog
from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.hardware import Cluster, cluster_from_flags
from parplan_gen.cost.layout import DS_SETTINGS, Layout, build_layout
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.models.presets import load_preset, preset_names
from parplan_gen.models.transformer import ModelSpec
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.ruleset import RuleSet, load_rules

from conftest import Run, load_benchmark

GB = 1e9  # the ZeRO paper's GB


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


@pytest.fixture(scope="module")
def cost(rules: RuleSet) -> CostModel:
    return CostModel(rules)


@pytest.fixture(scope="module")
def evaluator(rules: RuleSet) -> Evaluator:
    return Evaluator(rules)


def gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> ModelSpec:
    """A Megatron GPT (Narayanan Sec. 2.3 / Korthikanti Sec. 3): GeLU MLP of 4h, biases,
    learned positions, LayerNorm, tied embeddings."""
    return ModelSpec(
        name=f"gpt-{layers}x{hidden}",
        model_type="gpt2",
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads,
        ffn_hidden_size=4 * hidden,
        mlp_kind="gelu",
        vocab_size=vocab,
        tied_embeddings=True,
        max_position_embeddings=seq,
        position_embedding="learned",
        norm="layernorm",
        qkv_bias=True,
        out_proj_bias=True,
        mlp_bias=True,
    )


def a100(gpus: int) -> Cluster:
    return cluster_from_flags(gpus, "a100-80gb")


def env_of(
    cost: CostModel,
    spec: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    *,
    flash_attention: bool = True,
    **model_overrides: float,
) -> dict[str, Any]:
    """The formula environment of one layout, with model.* values replaced where given."""
    env = cost.layout_env(spec, cluster, layout, flash_attention=flash_attention)
    env.update({f"model.{k}": v for k, v in model_overrides.items()})
    return env


def named(rules: RuleSet, formula: str, env: dict[str, Any]) -> float:
    """Evaluate `formula` (which may use the rules' named formulas) in `env`."""
    compiled = rules.library.compile(formula, SourceRef("test_estimate.py"), "estimate", "number")
    return float(compiled.evaluate(env))


# ---- model states: ZeRO paper and Megatron's distributed optimizer ------------------------------


# Rajbhandari et al. 2020 (arXiv:1910.02054) Fig. 1: Psi = 7.5B, N_d = 64, K = 12.
#   ZeRO-1: 2 Psi + 2 Psi + 12 Psi / 64 = 15 + 15 + 1.40625   = 31.40625 GB (paper: 31.4 GB)
#   ZeRO-2: 2 Psi + 14 Psi / 64         = 15 + 1.640625       = 16.640625 GB (paper: 16.6 GB)
#   ZeRO-3: 16 Psi / 64                 = 120 / 64            = 1.875 GB (paper: 1.9 GB)
# Stage 0 here is Megatron's 18 bytes/param (fp32 main grads, memory.yaml), not the paper's 16:
#   18 * 7.5 = 135 GB (the paper's baseline is 16 * 7.5 = 120 GB).
@pytest.mark.parametrize(
    ("zero", "expected_gb", "printed_gb"),
    [(0, 135.0, None), (1, 31.40625, 31.4), (2, 16.640625, 16.6), (3, 1.875, 1.9)],
)
def test_zero_paper_model_states(
    cost: CostModel, zero: int, expected_gb: float, printed_gb: float | None
) -> None:
    spec = load_preset("megatron-gpt-7.5b")
    layout = build_layout(64, mbs=1, global_batch=64, seq_len=2048, zero_stage=zero)
    env = env_of(cost, spec, a100(64), layout, params=7.5e9, params_embedding=0, params_output=0)
    fig = cost.figures(env)
    states = fig["memory_params"] + fig["memory_grads"] + fig["memory_optimizer"]
    # ZeRO-3 also holds whole the layers in use, which the paper's model states leave out: two
    # of the 36 layers' 16-bit weights and one layer's 16-bit grads (memory.yaml zero3_live_*,
    # FSDP-style without a backend): 6 bytes x 7.5e9 / 36 = 1.25 GB.
    live = 6 * 7.5e9 / spec.num_layers if zero == 3 else 0
    assert spec.num_layers == 36
    assert (states - live) / GB == pytest.approx(expected_gb, rel=1e-12)
    if printed_gb is not None:
        assert round((states - live) / GB, 1) == printed_gb


# Megatron-LM docs/user-guide/features/dist_optimizer.md, bf16 params / fp32 main grads:
# 18 bytes/param without, 6 + 12/d with the distributed optimizer: d=8 -> 7.5, d=64 -> 6.1875.
@pytest.mark.parametrize(("dp", "per_param"), [(8, 7.5), (64, 6.1875)])
def test_distributed_optimizer_bytes_per_param(cost: CostModel, dp: int, per_param: float) -> None:
    spec = load_preset("megatron-gpt-7.5b")
    layout = build_layout(dp, mbs=1, global_batch=dp, seq_len=2048, distributed_optimizer=True)
    env = env_of(cost, spec, a100(dp), layout, params=1e9, params_embedding=0, params_output=0)
    fig = cost.figures(env)
    states = fig["memory_params"] + fig["memory_grads"] + fig["memory_optimizer"]
    assert states / 1e9 == pytest.approx(per_param, rel=1e-12)


# ---- activations: Korthikanti et al. 2022 Table 2, the 22B model with t = 8 --------------------


# 22B (Table 3): a = 64, h = 6144, L = 48; s = 2048, micro-batch b = 4, t = 8.
#   sbh = 2048 * 4 * 6144 = 50,331,648;  5as/(ht) = 5*64*2048 / (6144*8) = 655,360/49,152 = 40/3
#   TP baseline (Eq. 2):      sbh (10 + 24/8 + 40/3) = sbh * 79/3  = 1,325,400,064
#   TP + SP (Eq. 4):          sbh (34/8 + 40/3)      = sbh * 211/12 =   884,998,144
#   TP + selective:           sbh (10 + 24/8)        = sbh * 13     =   654,311,424
#   TP + SP + selective:      sbh * 34/8                            =   213,909,504
#   full recompute (no SP):   2 sbh                                 =   100,663,296
@pytest.mark.parametrize(
    ("sp", "recompute", "formula", "expected"),
    [
        (False, "none", "act_per_token_layer", 1_325_400_064),
        (True, "none", "act_per_token_layer", 884_998_144),
        (False, "selective", "act_per_token_layer", 654_311_424),
        (True, "selective", "act_per_token_layer", 213_909_504),
        (False, "full", "act_full_recompute_token_layer", 100_663_296),
    ],
)
def test_korthikanti_table2_per_layer_22b(
    cost: CostModel, rules: RuleSet, sp: bool, recompute: str, formula: str, expected: int
) -> None:
    layout = build_layout(
        8, tp=8, mbs=4, global_batch=4, seq_len=2048, sequence_parallel=sp, recompute=recompute
    )
    env = env_of(cost, gpt(48, 6144, 64), a100(8), layout, flash_attention=False)
    assert named(rules, f"{formula} * plan.mbs * train.seq_len", env) == pytest.approx(expected)


# ---- FLOPs: Narayanan 2021 Table 1 from Eq. 3 ---------------------------------------------------


def narayanan_eq3(batch: int, s: int, layers: int, h: int, vocab: int) -> float:
    """F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), Narayanan 2021 Eq. 3 (full recompute)."""
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))


# (preset, GPUs, tp, pp, batch, printed TFLOP/s per GPU, step time derived by hand from Eq. 3):
#  1.7B: F = 96*512*2048*24*2304^2 * (1 + 2048/13824 + 51200/884736)
#          = 1.28247e16 * 1.206019 = 1.54668e16;  T = F / (32 * 137e12) = 3.528 s
#  1T:   F = 96*3072*2048*128*25600^2 * (1 + 2048/153600 + 51200/52428800)
#          = 5.06655e19 * 1.014310 = 5.13905e19;  T = F / (3072 * 163e12) = 102.63 s
TABLE_1_ROWS = [
    ("megatron-gpt-1.7b", 32, 1, 1, 512, 137, 3.528),
    ("megatron-gpt-1t", 3072, 8, 64, 3072, 163, 102.63),
]


@pytest.mark.parametrize(("name", "gpus", "tp", "pp", "batch", "tflops", "step_s"), TABLE_1_ROWS)
def test_narayanan_table1_tflops_from_step_time(
    cost: CostModel,
    rules: RuleSet,
    name: str,
    gpus: int,
    tp: int,
    pp: int,
    batch: int,
    tflops: int,
    step_s: float,
) -> None:
    spec = load_preset(name)
    layout = build_layout(gpus, tp=tp, pp=pp, global_batch=batch, seq_len=2048, recompute="full")
    env = env_of(cost, spec, a100(gpus), layout, flash_attention=False)
    hardware = named(rules, "hardware_flops_per_step", env)
    f = narayanan_eq3(batch, 2048, spec.num_layers, spec.hidden_size, spec.vocab_size)
    assert hardware == pytest.approx(f, rel=1e-12)  # hardware FLOPs = Eq. 3 exactly
    # Model FLOPs drop the recomputed forward of the layers (Korthikanti Eq. 7: 72 instead of 96).
    l, h, v = spec.num_layers, spec.hidden_size, spec.vocab_size  # noqa: E741 - the paper's l
    eq7 = 72 * batch * 2048 * l * h * h * (1 + 2048 / (6 * h) + v / (12 * h * l))
    assert named(rules, "model_flops_per_step", env) == pytest.approx(eq7, rel=1e-12)
    # The throughput formulas divide those FLOPs by the step time and the GPUs.
    assert hardware / (gpus * step_s) / 1e12 == pytest.approx(tflops, rel=5e-3)
    fig = cost.figures(env)
    assert fig["throughput_hardware_tflops_per_gpu"] == pytest.approx(
        hardware / fig["time_step_s"] / gpus / 1e12, rel=1e-12
    )


# ---- layout arithmetic -------------------------------------------------------------------------


def test_doubling_tp_halves_weights_per_gpu(cost: CostModel, rules: RuleSet) -> None:
    spec = load_preset("gpt3-175b")
    envs = [
        env_of(cost, spec, a100(64), build_layout(64, tp=tp, pp=4, global_batch=64, seq_len=2048))
        for tp in (4, 8)
    ]
    layer = [named(rules, "layer_params_per_gpu", e) for e in envs]
    assert layer[0] == 2 * layer[1]  # (P - edges) / (t p): exact
    weights = [cost.figures(e)["memory_params"] for e in envs]
    assert weights[0] == pytest.approx(2 * weights[1], rel=1e-12)  # edges are split by t too


def _activations(cost: CostModel, pp: int, vpp: int, global_batch: int) -> float:
    spec = gpt(48, 6144, 64)
    layout = build_layout(8 * pp, tp=8, pp=pp, vpp=vpp, global_batch=global_batch, seq_len=2048)
    return cost.figures(env_of(cost, spec, a100(8 * pp), layout))["memory_activations"]


def test_1f1b_in_flight_and_interleaving_factor(cost: CostModel) -> None:
    # Korthikanti Eq. 5: the first stage holds p micro-batches of L/p layers, so with m >= p the
    # activations do not depend on p (pp = 2 or 4, m = 8).
    assert _activations(cost, 2, 1, 8) == pytest.approx(_activations(cost, 4, 1, 8), rel=1e-12)
    # Interleaving multiplies them by 1 + (p-1)/(p v): p = 4, v = 2 -> 1 + 3/8 = 11/8.
    ratio = _activations(cost, 4, 2, 8) / _activations(cost, 4, 1, 8)
    assert ratio == pytest.approx(11 / 8, rel=1e-12)
    # Fewer micro-batches than stages: only m = 2 are in flight, half of p = 4.
    assert _activations(cost, 4, 1, 2) == pytest.approx(_activations(cost, 4, 1, 8) / 2)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(8, 1, 64), (8, 3, 64), (4, 2, 16)])
def test_bubble_fraction(evaluator: Evaluator, pp: int, vpp: int, m: int) -> None:
    # Narayanan Sec. 2.2: bubble / ideal time = (p - 1) / (v m); 8, 3, 64 -> 7/192.
    spec = load_preset("gpt3-175b")
    layout = build_layout(8 * pp, tp=8, pp=pp, vpp=vpp, global_batch=m, seq_len=2048)
    t = evaluator.evaluate(spec, a100(8 * pp), layout).estimate.time
    ideal = t.compute_s + t.tp_comm_s + t.cp_comm_s + t.ep_comm_s
    assert t.bubble_s / ideal == pytest.approx((pp - 1) / (vpp * m), rel=1e-12)


# ---- every preset on every GPU -------------------------------------------------------------------


def test_every_preset_estimates_on_every_catalog_gpu(evaluator: Evaluator) -> None:
    for gpu in load_catalog().gpus.values():
        precision = "bf16" if gpu.bf16_flops else "fp16"
        cluster = cluster_from_flags(8, gpu.name)
        layout = build_layout(8, global_batch=8, seq_len=2048, precision=precision)
        for name in preset_names():
            found = evaluator.evaluate(load_preset(name), cluster, layout)
            contract = found.estimate.contract()
            for section in ("memory", "time", "throughput"):
                for key, value in contract[section].items():
                    if key != "fits":
                        assert math.isfinite(value) and value >= 0, (name, gpu.name, key, value)
            assert contract["throughput"]["tokens_per_s"] > 0, (name, gpu.name)


# ---- the command line ------------------------------------------------------------------------------

# DESIGN.md "Plan and estimate contract", plus the documented extras (issue 3: MoE all-to-all,
# optimizer step; the plan's precision option).
CONTRACT: dict[str, dict[str, type]] = {
    "backend": {"name": str, "version": str},  # the backend whose rules judged the layout
    "plan": {
        **dict.fromkeys(("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "global_batch"), int),
        **dict.fromkeys(("grad_accum", "zero_stage", "seq_len"), int),
        **dict.fromkeys(("distributed_optimizer", "sequence_parallel", "fp8_param_gather"), bool),
        "precision_aware_optimizer": bool,
        "offload_layers": int,
        **dict.fromkeys(("recompute", "grad_reduce_dtype", "precision"), str),
        "cross_entropy_fusion": str,  # Megatron-LM's loss kernel (null on other backends)
        "loss_compiled": type(None),  # torchtitan compiles the loss (null on other backends)
        "fsdp_reshard": str,  # FSDP2's reshard policy (`default` but on FSDP2's backends)
        "overlap_grad_reduce": bool,  # the gradient reduction overlapped with the backward
        # DeepSpeed ZeRO-3's buffers, elements (DeepSpeed's defaults but where a layout says)
        **dict.fromkeys(DS_SETTINGS, int),
    },
    "memory": {
        **dict.fromkeys(("params", "grads", "optimizer", "activations", "other"), int),
        **dict.fromkeys(("total", "capacity"), int),
        "fits": bool,
        "host_offload": int,  # pinned host memory of offloaded activations, not in the total
        "kept_free": int,  # what plan's headroom keeps free beside the total (0 here)
    },
    "time": dict.fromkeys(
        (
            "step_s",
            "compute_s",
            "tp_comm_s",
            "cp_comm_s",
            "pp_comm_s",
            "dp_comm_s",
            "ep_comm_s",
            "bn_comm_s",
            "overlap_cost_s",  # what hidden communication costs the compute beside it
            "offload_s",  # activation offload copies not hidden behind compute
            "bubble_s",
            "optimizer_s",
            "tp_exposed_s",  # the parts of tp_comm_s / dp_comm_s not hidden behind compute
            "dp_exposed_s",
            "host_wait_s",  # the part of compute_s the GPU waits for the host's launches
        ),
        float,
    ),
    "throughput": dict.fromkeys(
        (
            "tokens_per_s",
            "model_tflops_per_gpu",
            "hardware_tflops_per_gpu",
            "mfu",
            # the causal half of the attention scores counted (rules/cost/throughput.yaml)
            "model_tflops_causal_per_gpu",
            "mfu_causal",
        ),
        float,
    ),
}


def test_estimate_json_contract(cli: Callable[..., Run]) -> None:
    run = cli(
        "estimate", "gpt3-175b", "--gpus", "1536", "--gpu", "a100-80gb", "--tp", "8", "--pp",
        "12", "--mbs", "1", "--global-batch", "1536", "--recompute", "full", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    out = run.json()
    assert set(out) == set(CONTRACT)
    for section, keys in CONTRACT.items():
        assert set(out[section]) == set(keys), section
        for key, kind in keys.items():
            assert type(out[section][key]) is kind, (section, key, out[section][key])
    plan = out["plan"]
    assert (plan["dp"], plan["grad_accum"], plan["recompute"]) == (16, 96, "full")  # 1536/96
    memory = out["memory"]
    parts = ("params", "grads", "optimizer", "activations", "other")
    assert memory["total"] == sum(memory[p] for p in parts)
    assert memory["capacity"] == 80 * 2**30
    assert memory["fits"] == (memory["total"] <= memory["capacity"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tp", "2", "--pp", "2", "--dp", "3", "--global-batch", "12"],
         "dp(3) * tp(2) * pp(2) * cp(1) = 12 != world size (16 GPUs)"),
        (["--tp", "2", "--pp", "2", "--mbs", "3", "--global-batch", "100"],
         "global_batch(100) is not divisible by mbs(3) * dp(4) = 12"),
    ],
)  # fmt: skip
def test_impossible_layouts_are_errors_with_the_equation(
    cli: Callable[..., Run], args: list[str], message: str
) -> None:
    run = cli("estimate", "gpt3-175b", "--gpus", "16", "--gpu", "h100", *args)
    assert run.code == 1
    assert run.err == f"parplan: error: {message}\n"
    assert run.out == ""


def test_a_layout_that_cannot_run_is_an_error_naming_the_rule(cli: Callable[..., Run]) -> None:
    # GPT-3 175B has 96 heads and an MLP of 4 x 12288: tp = 5 divides neither (Megatron-LM's
    # validate_args / TransformerConfig asserts); the layout itself multiplies out (5 x 2 = 10).
    run = cli("estimate", "gpt3-175b", "--gpus", "10", "--gpu", "h100", "--tp", "5",
              "--global-batch", "10", "--gpus-per-node", "10")  # fmt: skip
    assert run.code == 1
    assert run.err.startswith("parplan: error: attention heads (96) do not divide by tp (5)")
    assert "[parallel.heads_divisible_by_tp, invalid]" in run.err
    assert run.out == ""


# A site's own policy, as an overlay's `reject` rule: a layout that breaks it could run, but the
# planner must not choose it (rules/schema.py ConstraintRule.severity).
NO_TENSOR_PARALLEL = """
    constraints:
      - id: site.no_tensor_parallel
        require: "plan.tp == 1"
        reason: "this site runs no tensor parallelism (tp {plan.tp})"
        severity: reject
"""
LLAMA_TP2 = ("llama-3-8b", "--gpus", "8", "--gpu", "h100", "--tp", "2", "--global-batch", "64")


def test_a_rule_an_overlay_adds_is_listed_and_ends_the_run_as_check_does(
    cli: Callable[..., Run], write: Callable[..., Path]
) -> None:
    """The estimate is printed with the rule it breaks (text and JSON), then one error line and
    exit 1, as `check` ends for a layout that does not run as given."""
    rules = write("site/policy.yaml", NO_TENSOR_PARALLEL).parent
    text = cli("estimate", *LLAMA_TP2, "--rules", rules)
    data = cli("estimate", *LLAMA_TP2, "--rules", rules, "--json")
    broken = "this site runs no tensor parallelism (tp 2) [site.no_tensor_parallel, reject]"
    assert (text.code, data.code) == (1, 1)
    assert (
        text.err
        == data.err
        == f"parplan: error: the planner would not choose this layout: {broken}\n"
    )
    assert f"\nConstraints broken:\n  - {broken}\n" in text.out and "Time per step" in text.out
    out = data.json()
    assert out["violations"] == [
        {
            "rule_id": "site.no_tensor_parallel",
            "severity": "reject",
            "reason": broken.split(" [")[0],
        }
    ]
    assert out["memory"]["fits"] is True  # 8B on tp 2 x dp 4 fits: only the overlay refuses it
    plain = cli("estimate", *LLAMA_TP2, "--json")  # without the overlay: nothing broken
    assert (plain.code, plain.err) == (0, "") and "violations" not in plain.json()
    assert {k: v for k, v in out.items() if k != "violations"} == plain.json()


def test_a_layout_that_does_not_fit_is_estimated_then_exits_1(cli: Callable[..., Run]) -> None:
    # 70B on one node with tp 8: its optimizer states alone are ~8.8 bytes x 70.6B / 8 > 80 GiB.
    argv = ("estimate", "llama-3-70b", "--gpus", "8", "--gpu", "h100", "--tp", "8",
            "--global-batch", "64")  # fmt: skip
    text, data = cli(*argv), cli(*argv, "--json")
    memory = data.json()["memory"]
    gib, over = 2**30, memory["total"] - memory["capacity"]
    assert memory["fits"] is False and over > 0
    assert [v["rule_id"] for v in data.json()["violations"]] == ["memory.fits"]
    problem = (
        f"the layout does not fit: {memory['total'] / gib:.1f} GiB per GPU, the GPU has "
        f"{memory['capacity'] / gib:.1f} GiB ({over / gib:.1f} GiB over)"
    )
    assert (text.code, data.code) == (1, 1)
    assert text.err == data.err == f"parplan: error: {problem}\n"
    assert "DOES NOT FIT by" in text.out and "[memory.fits, reject]" in text.out


# ---- the calibration benchmark reads its file and lists what it cannot evaluate -------------------

RUNS = """\
conventions: {}
configs:
- name: narayanan2021_table1_gpt_1.7B
  model: {num_layers: 24, hidden_size: 2304, num_attention_heads: 24, num_query_groups: null,
          ffn_hidden_size: 9216, vocab_size: 51200, seq_length: 2048, moe: null,
          notes: GeLU MLP}
  hardware: {gpu: NVIDIA A100-SXM 80GB, gpu_memory_gb: 80, gpus_per_node: 8,
             inter_node: 8x NVIDIA Mellanox 200 Gb/s HDR InfiniBand HCAs per node,
             peak_16bit_dense_tflops: 312}
  total_gpus: 32
  parallelism: {tp: 1, pp: 1, dp: 32, cp: 1, ep: 1, virtual_pipeline_stages: null,
                sequence_parallel: false}
  zero_stage: 0
  distributed_optimizer: false
  micro_batch_size: 16
  global_batch_size: 512
  activation_recompute: full (every layer)
  precision: fp16
  measured: {tflops_per_gpu: 137}
- name: megatron2020_dgxa100_gpt2_1B_128gpus
  model: {num_layers: 24, hidden_size: 1920, num_attention_heads: 15, ffn_hidden_size: 7680,
          vocab_size: 51200, seq_length: 1024}
  hardware: {gpu: NVIDIA A100, gpus_per_node: 8, peak_16bit_dense_tflops: 312}
  total_gpus: 128
  parallelism: {tp: 1, pp: 1, dp: 128}
  micro_batch_size: null
  global_batch_size: 2048
  activation_recompute: full
  measured: {tflops_per_gpu: 139.8}
"""


def _calibration_module() -> Any:
    return load_benchmark("calibration")


def test_calibration_script_on_an_inline_file(tmp_path: Path) -> None:
    calibration = _calibration_module()
    runs = tmp_path / "runs.yaml"
    runs.write_text(RUNS, encoding="utf-8")
    printed: list[str] = []
    assert calibration.main([str(runs)], out=printed.append) == 0
    text = "\n".join(printed)
    row = next(line for line in text.splitlines() if line.startswith("narayanan2021"))
    assert row.split()[1:3] == ["megatron", "hardware"]  # Narayanan counts the recompute pass
    assert float(row.split()[4]) == 137.0
    assert "MAPE over 2 runs:" in text
    # Megatron-LM of 2020 had no gradient accumulation: micro-batch = 2048 / dp 128 = 16
    assert "megatron2020_dgxa100_gpt2_1B_128gpus: micro_batch_size 16: " in text
    # 8 x 200 Gb/s per 8-GPU node is 200 Gb/s per GPU
    entry = {"inter_node": "8x NVIDIA Mellanox 200 Gb/s HDR", "gpus_per_node": 8}
    assert calibration.inter_node_gbps(entry) == 200
    node = {"inter_node": "1600 Gbps node-node interconnect (RoCE)", "gpus_per_node": 8}
    assert calibration.inter_node_gbps(node) == 200
