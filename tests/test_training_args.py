"""Training arguments true to the model (issue 14 item 4): the config's RoPE base and scaling,
norm epsilon, dropout, MoE router and multi-token prediction, and the optimizer schedule of
GPT-3's Table 2.1 / Appendix B, as the rendered megatron_args.sh gives them to Megatron-Core.

Every expected value is worked from the model's config.json (presets under
parplan_gen/data/models/, or the transformers config class default when a key is absent) or
from GPT-3's Table 2.1, not read from our output."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan_gen.api import load_cluster_spec
from parplan_gen.backends.megatron.reader import megatron_arguments, megatron_values
from parplan_gen.cost.layout import Layout, build_layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.hf_config import load_hf_config, spec_from_hf_dict
from parplan_gen.models.presets import load_preset, preset_names
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.render.lr_schedule import peak_lr, schedule, schedule_rule, steps
from parplan_gen.render.render_options import RenderOptions, render_files
from parplan_gen.render.training_facts import training_facts

import consumer_megatron
from conftest import REPO, builtin_rules
from consumer_support import consumer

LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 8,
    "num_hidden_layers": 2,
    "vocab_size": 100,
    "intermediate_size": 160,
}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 8, "n_layer": 2, "vocab_size": 100}


# ---- reading the config -----------------------------------------------------------------------


def test_llama_3_8b_preset_settings_are_its_config_json() -> None:
    # Meta-Llama-3-8B config.json: rope_theta 500000.0, rms_norm_eps 1e-05, attention_dropout 0.0
    t = load_preset("llama-3-8b").training
    assert (t.rope_theta, t.norm_eps, t.rope_scaling) == (500000.0, 1e-5, None)
    assert (t.attention_dropout, t.hidden_dropout) == (0.0, 0.0)
    assert t.router_score is None and t.mtp_layers == 0


def test_llama_3_1_405b_has_llama3_rope_scaling() -> None:
    scaling = load_preset("llama-3-405b").training.rope_scaling
    assert scaling is not None
    assert (scaling.kind, scaling.factor, scaling.original_max_position_embeddings) == (
        "llama3",
        8.0,
        8192,
    )


def test_deepseek_v3_router_and_mtp() -> None:
    # DeepSeek-V3 config.json: scoring_func sigmoid, topk_method noaux_tc, n_group 8,
    # topk_group 4, routed_scaling_factor 2.5, aux_loss_alpha 0.001, seq_aux true,
    # num_nextn_predict_layers 1, rms_norm_eps 1e-06, rope_scaling yarn factor 40
    t = load_preset("deepseek-v3").training
    assert (t.router_score, t.expert_bias, t.mtp_layers) == ("sigmoid", True, 1)
    assert (t.router_groups, t.router_group_topk, t.topk_scale) == (8, 4, 2.5)
    assert (t.aux_loss_coeff, t.seq_aux, t.norm_eps) == (0.001, True, 1e-6)
    assert t.rope_scaling is not None and (t.rope_scaling.kind, t.rope_scaling.factor) == (
        "yarn",
        40.0,
    )


def _v2(**changes: Any) -> dict[str, Any]:
    """A small DeepSeek-V2 config: softmax scores, DeepseekV2Config's greedy top-k."""
    return _deepseek_config() | {"model_type": "deepseek_v2", "num_experts_per_tok": 6} | changes


def test_the_router_is_spelled_as_megatron_core_computes_it() -> None:
    # Megatron-Core 0.16.1 moe_utils.py topk_routing_with_score_function: softmax after the top
    # k sums to 1 (norm_topk_prob true); --moe-router-pre-softmax takes it over every expert,
    # not renormalised (norm_topk_prob false); TransformerConfig wants the latter at top-1.
    def router(config: dict[str, Any]) -> tuple[Any, ...]:
        f = training_facts(spec_from_hf_dict(config), _layout())
        keys = ("router_score", "router_pre_softmax", "topk_scale", "router_groups")
        return (*(f[f"megatron.{k}"] for k in keys), f["megatron.router_unfaithful"])

    # DeepSeek-V2-Lite: softmax, greedy (n_group 1 unused), norm_topk_prob false, factor 1.0
    lite = _v2(n_group=1, topk_group=1, topk_method="greedy", norm_topk_prob=False)
    assert router(lite) == ("softmax", True, 1.0, None, None)
    # DeepSeek's MoEGate: renormalised or scaled, one or the other
    normalised = router(_v2(norm_topk_prob=True, routed_scaling_factor=16.0))
    assert normalised[:3] == ("softmax", False, None)
    qwen3 = _deepseek_config() | {"model_type": "qwen3_moe", "num_experts": 8}
    assert router(qwen3) == ("softmax", True, None, None, None)  # Qwen3MoeConfig: false
    assert router(qwen3 | {"norm_topk_prob": True}) == ("softmax", False, None, None, None)
    # top-1 renormalised weighs its expert 1.0; Megatron-Core cannot, and says so
    one = router(qwen3 | {"norm_topk_prob": True, "num_experts_per_tok": 1})
    assert one[1] is True and "--moe-router-pre-softmax at top-1" in one[4]
    # DeepSeek-V2's group_limited_greedy ranks groups by their best score; Megatron-Core by the
    # sum of the best k / topk_group = 2 (group_limited_topk)
    v2 = router(_v2(topk_method="group_limited_greedy", n_group=4, topk_group=3))
    assert v2[3] == 4 and "best 1 expert score(s)" in v2[4] and "6 // 3 = 2" in v2[4]
    # DeepSeek-V3 (sigmoid, norm_topk_prob true, top-8 of 8 groups / 4: two a group) is exact;
    # its sigmoid weights left unnormalised are not (Megatron-Core renormalises whenever k > 1)
    v3 = _deepseek_config() | {"n_routed_experts": 32, "num_experts_per_tok": 8}
    assert router(v3) == ("sigmoid", False, 2.5, 8, None)
    assert "whenever k > 1" in router(v3 | {"norm_topk_prob": False})[4]


def _megatron_script(model: Any, folder: Path, **layout: Any) -> Path:
    """megatron_args.sh of `model` with `layout` on 8 H100s, written to `folder`."""
    cluster = load_cluster_spec({"gpus": 8, "gpu": "h100"})
    plan = build_layout(8, **({"mbs": 1, "global_batch": 512, "seq_len": 4096} | layout))
    found = Evaluator(builtin_rules(), backend="megatron").evaluate(model, cluster, plan)
    doc = PlanDocument.from_parts(
        rules=builtin_rules(), model=model, cluster=cluster, chosen=found.estimate
    )
    path = folder / "megatron_args.sh"
    path.write_text(render_files(doc, RenderOptions())["megatron_args.sh"], encoding="utf-8")
    return path


def test_check_reads_the_router_flags_back(tmp_path: Path) -> None:
    # `check --from-megatron`: the router's arguments are read as the model's (mapping.yaml's
    # "mixture of experts" group, backends/megatron/reader.py MODEL_GROUPS), none ignored, and
    # the layout reads back as written.
    lite = load_hf_config(REPO / "examples" / "hf" / "deepseek-v2-lite.json")
    path = _megatron_script(lite, tmp_path, ep=8, recompute="full", distributed_optimizer=True)
    words = path.read_text(encoding="utf-8").split()
    router = {
        "--moe-router-score-function", "--moe-router-pre-softmax",
        "--moe-router-topk-scaling-factor", "--moe-router-load-balancing-type",
        "--moe-aux-loss-coeff",
    }  # fmt: skip
    assert router <= set(words)
    read = megatron_arguments(path)
    assert router <= set(read.no_effect["model"]) and not router & set(read.ignored)
    assert megatron_values(path, lite.num_layers)["ep"] == 8


def test_a_gated_shared_expert_is_written_and_read_back(tmp_path: Path) -> None:
    # Qwen1.5-MoE (Qwen2MoeSparseMoeBlock: shared_expert_gate, a sigmoid gate h -> 1 on the
    # shared expert); core_v0.16.1 TransformerConfig.moe_shared_expert_gate is off by default,
    # so without --moe-shared-expert-gate Megatron-LM builds the shared expert ungated.
    qwen = load_hf_config(REPO / "examples" / "hf" / "qwen1.5-moe-a2.7b.json")
    assert qwen.shared_expert_gate
    path = _megatron_script(qwen, tmp_path, ep=4, distributed_optimizer=True)  # 60 experts
    words = path.read_text(encoding="utf-8").split()
    assert "--moe-shared-expert-gate" in words
    read = megatron_arguments(path)
    assert "--moe-shared-expert-gate" not in read.ignored
    mixtral = load_preset("mixtral-8x7b")  # no shared expert: no gate
    (tmp_path / "m").mkdir()
    other = _megatron_script(mixtral, tmp_path / "m", ep=8, distributed_optimizer=True)
    assert "--moe-shared-expert-gate" not in other.read_text(encoding="utf-8").split()


def test_a_router_megatron_core_cannot_compute_is_named_in_the_script(tmp_path: Path) -> None:
    # DeepSeek-V2's group_limited_greedy (its config.json: n_group 8, topk_group 3, top-6)
    v2 = spec_from_hf_dict(_v2(topk_method="group_limited_greedy", n_group=4, topk_group=3))
    header = _megatron_script(v2, tmp_path).read_text(encoding="utf-8").split("set -euo")[0]
    text = " ".join(line.lstrip("# ") for line in header.splitlines())
    assert "not what Megatron-Core computes" in text and "group_limited_topk" in text


def test_absent_keys_take_the_config_class_defaults() -> None:
    # LlamaConfig: rms_norm_eps 1e-6, attention_dropout 0.0, default_theta 10000;
    # GPT2Config: attn_pdrop 0.1, resid_pdrop 0.1, layer_norm_epsilon 1e-5, learned positions
    llama = spec_from_hf_dict(LLAMA).training
    assert (llama.norm_eps, llama.attention_dropout, llama.rope_theta) == (1e-6, 0.0, 10000.0)
    gpt2 = spec_from_hf_dict(GPT2).training
    assert (gpt2.attention_dropout, gpt2.hidden_dropout, gpt2.norm_eps) == (0.1, 0.1, 1e-5)
    assert gpt2.rope_theta is None  # learned positions: no RoPE


def test_gpt_neox_rope_base_is_rotary_emb_base() -> None:
    # GPTNeoXConfig (transformers 4) names the RoPE base rotary_emb_base
    neox = {
        "model_type": "gpt_neox",
        "hidden_size": 64,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "intermediate_size": 256,
    }
    assert spec_from_hf_dict(neox | {"rotary_emb_base": 25000}).training.rope_theta == 25000.0
    assert spec_from_hf_dict(neox).training.rope_theta == 10000.0


def test_transformers_5_rope_parameters_are_read() -> None:
    config = LLAMA | {
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    }
    t = spec_from_hf_dict(config).training
    assert t.rope_theta == 500000.0
    assert t.rope_scaling is not None and t.rope_scaling.kind == "llama3"
    plain = spec_from_hf_dict(LLAMA | {"rope_parameters": {"rope_type": "default"}}).training
    assert plain.rope_scaling is None


def test_a_bad_training_setting_names_its_key() -> None:
    with pytest.raises(InputError, match="rope_theta"):
        spec_from_hf_dict(LLAMA | {"rope_theta": "big"})
    with pytest.raises(InputError, match="seq_aux"):
        spec_from_hf_dict(_deepseek_config() | {"seq_aux": "yes"})
    # a dense model has no router settings, whatever its family's table says
    assert spec_from_hf_dict(_deepseek_config()).training.router_score == "sigmoid"


def _deepseek_config() -> dict[str, Any]:
    return {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "vocab_size": 100,
    }


def _layout(cp: int = 1, ep: int = 1) -> Layout:
    return Layout(
        dp=8, tp=1, pp=1, cp=cp, ep=ep, global_batch=64, mbs=1, grad_accum=8, seq_len=4096
    )


def test_gpt_neox_20b_rotates_a_quarter_of_each_head() -> None:
    # GPTNeoXConfig rotary_pct 0.25, rotary_emb_base 10000, hidden_dropout 0.0; its own training
    # config (gpt-neox configs/20B.yml): lr 0.97e-4, weight-decay 0.01, in place of GPT-3's
    # 1.0e-4 * (0.6e-4 / 1.0e-4) ** (ln(20.6 / 13) / ln(175 / 13)) = 9.14e-5 for 20.6B
    f = training_facts(load_preset("gpt-neox-20b"), _layout())
    assert (f["megatron.rotary_percent"], f["megatron.rotary_base"]) == (0.25, 10000)
    assert f["megatron.hidden_dropout"] == 0.0
    assert (f["train.lr"], f["train.min_lr"], f["train.weight_decay"]) == (
        "9.70e-05",
        "9.70e-06",
        0.01,
    )
    assert f["train.lr_warmup_fraction"] == 0.01  # 0.01 of lr-decay-iters 150,000
    assert schedule(20_600_000_000).lr == pytest.approx(9.14e-5, rel=2e-3)  # GPT-3's, unnamed


def test_multi_token_prediction_is_left_out_with_context_parallelism() -> None:
    # Megatron-LM validate_args: "Multi-Token Prediction (MTP) is not supported with Context
    # Parallelism"
    f = training_facts(load_preset("deepseek-v3"), _layout(cp=2, ep=8))
    assert (f["megatron.mtp_layers"], f["megatron.mtp_with_cp"]) == (None, True)
    f = training_facts(load_preset("deepseek-v3"), _layout(ep=8))
    assert (f["megatron.mtp_layers"], f["megatron.mtp_unpriced"]) == (1, True)


# ---- the LR rule ------------------------------------------------------------------------------


def test_peak_lr_is_gpt3_table_2_1() -> None:
    rule = schedule_rule()
    # the table's own rows, and its ends outside it
    assert peak_lr(1.3e9, rule) == pytest.approx(2.0e-4)
    assert peak_lr(175e9, rule) == pytest.approx(0.6e-4)
    assert peak_lr(50e6, rule) == pytest.approx(6.0e-4)
    assert peak_lr(405e9, rule) == pytest.approx(0.6e-4)
    # 8.03B, between 6.7B (1.2e-4) and 13B (1.0e-4), log-log:
    # 1.2e-4 * (1.0 / 1.2) ** (ln(8.03 / 6.7) / ln(13 / 6.7)) = 1.1417e-4
    assert peak_lr(8.03e9, rule) == pytest.approx(1.1417e-4, rel=1e-3)


def test_schedule_is_gpt3_appendix_b() -> None:
    s = schedule(8_030_000_000)
    assert s.min_lr == pytest.approx(0.1 * s.lr)
    assert s.warmup_fraction == pytest.approx(375e6 / 260e9)
    assert (s.rule.weight_decay, s.rule.adam_beta1, s.rule.adam_beta2) == (0.1, 0.9, 0.95)
    assert s.rule.decay_style == "cosine"


@settings(deadline=None)  # the first example loads the rule file: no per-example timing
@given(st.floats(1e6, 1e13), st.floats(1.0, 100.0))
def test_a_bigger_model_never_gets_a_higher_peak_lr(params: float, ratio: float) -> None:
    rule = schedule_rule()
    small, big = peak_lr(params, rule), peak_lr(params * ratio, rule)
    assert big <= small * (1 + 1e-12)
    assert big >= 0.6e-4 - 1e-12 and small <= 6.0e-4 + 1e-12 and math.isfinite(big)


# ---- what Megatron-Core reads from the rendered script ----------------------------------------

# PLANNED case -> (Megatron-Core config fields, script arguments, OptimizerConfig fields),
# worked from the configs above, GPT-3 Table 2.1 and the models' published schedules.
EXPECTED: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "llama-3-8b-8xh100-megatron": (
        {"layernorm_epsilon": 1e-5, "attention_dropout": 0.0, "hidden_dropout": 0.0},
        {"rotary_base": "500000"},
        # Llama 3 paper Table 3: peak 3e-4 for 8B; GPT-3 Appendix B's 10 % minimum
        {"lr": 3.0e-4, "min_lr": 3.0e-5, "weight_decay": 0.1, "adam_beta2": 0.95},
    ),
    "gpt3-175b-1024xa100": (
        # GPT2Config attn_pdrop / resid_pdrop 0.1: the preset's config does not say otherwise
        {"attention_dropout": 0.1, "hidden_dropout": 0.1, "layernorm_epsilon": 1e-5},
        {},
        {"lr": 6.0e-5, "min_lr": 6.0e-6},
    ),
    "deepseek-v3-1024xh100": (
        {
            "layernorm_epsilon": 1e-6,
            "moe_router_score_function": "sigmoid",
            "moe_router_enable_expert_bias": True,
            "moe_router_load_balancing_type": "seq_aux_loss",
            "moe_aux_loss_coeff": 0.001,
            "moe_router_topk_scaling_factor": 2.5,
            "moe_router_num_groups": 8,
            "moe_router_group_topk": 4,
            # config.json num_nextn_predict_layers 1: the chosen plan has no cp (validate_args
            # refuses MTP with CP), so the module is kept, with a note that it is not priced.
            "mtp_num_layers": 1,
            "rotary_scaling_factor": 40.0,
            "mscale_all_dim": 1.0,
            "moe_router_dtype": "fp32",  # arguments.py --moe-router-dtype, 256 experts
        },
        {"rotary_base": "10000"},
        # DeepSeek-V3 report Sec. 4.2: peak 2.2e-4, cosine to 2.2e-5
        {"lr": 2.2e-4, "min_lr": 2.2e-5, "weight_decay": 0.1},
    ),
    "llama-3-405b-16384xh100": (
        {"layernorm_epsilon": 1e-5},
        {"rotary_base": "500000", "use_rope_scaling": True, "rope_scaling_factor": "8.0"},
        # Llama 3 paper Sec. 3.4.1: peak 8e-5, cosine to 8e-7
        {"lr": 8.0e-5, "min_lr": 8.0e-7},
    ),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_megatron_core_reads_the_models_training_settings(name: str, planned) -> None:
    consumer("megatron.core")
    path = planned(name) / "megatron_args.sh"
    assert path.is_file(), f"{name}: the plan runs on Megatron-LM, its script is written"
    reading = consumer_megatron.megatron_reading(path)
    config_fields, script_args, optimizer_fields = EXPECTED[name]
    for field, value in config_fields.items():
        assert getattr(reading.config, field) == pytest.approx(value), field
    words = consumer_megatron.arguments(consumer_megatron.script_words(path), {"use_rope_scaling"})
    for arg, value in script_args.items():
        assert words[arg] == value, arg
    for field, value in optimizer_fields.items():
        assert getattr(reading.optimizer, field) == pytest.approx(value, rel=1e-2), field


# ---- published schedules and the steps a DeepSpeed / torchtitan schedule spans ----------------


def test_published_schedules_replace_gpt3s_interpolation() -> None:
    # Llama 3 paper Sec. 3.4.1: 405B peak 8e-5, cosine to 8e-7, warmup 8,000 of 1,200,000 steps
    s = schedule(405_850_000_000, "llama-3-405b")
    assert (s.lr, s.min_lr, s.decay_tokens) == (8e-5, 8e-7, 15.6e12)
    assert s.warmup_fraction == pytest.approx(8000 / 1_200_000)
    assert s.min_lr_fraction == pytest.approx(0.01)
    assert s.published is not None and "Sec. 3.4.1" in s.published
    # Llama 3 paper Table 3: 8B 3e-4, 70B 1.5e-4; the rest GPT-3 Appendix B's
    llama3_8b = schedule(8_030_000_000, "llama-3-8b")
    assert (llama3_8b.lr, llama3_8b.min_lr) == (3e-4, pytest.approx(3e-5))
    assert llama3_8b.warmup_fraction == pytest.approx(375e6 / 260e9)
    assert schedule(70_550_000_000, "llama-3-70b").lr == 1.5e-4
    # Llama 2 Table 1 and Sec. 2.2: 3.0e-4 (7B, 13B), 1.5e-4 (70B), final 10 %, eps 1e-5,
    # warmup 2000 of 2.0T / 4M = 500,000 steps
    llama2 = schedule(6_740_000_000, "llama-2-7b")
    assert (llama2.lr, llama2.min_lr, llama2.adam_eps) == (3e-4, pytest.approx(3e-5), 1e-5)
    assert llama2.warmup_fraction == pytest.approx(0.004)
    assert schedule(13_000_000_000, "llama-2-13b").lr == 3e-4
    assert schedule(69_000_000_000, "llama-2-70b").lr == 1.5e-4
    # DeepSeek-V3 report Sec. 4.2: peak 2.2e-4, cosine to 2.2e-5
    v3 = schedule(37_550_000_000, "deepseek-v3")
    assert (v3.lr, v3.min_lr, v3.decay_tokens) == (2.2e-4, 2.2e-5, 14.8e12)
    # BLOOM's tr11-176B-ml.slurm: 6e-5 -> 6e-6 over 200M samples after 183,105 (375M tokens)
    bloom = schedule(176_000_000_000, "bloom-176b")
    assert (bloom.lr, bloom.min_lr, bloom.decay_tokens) == (6e-5, 6e-6, 409.6e9)
    assert bloom.warmup_fraction == pytest.approx(183_105 / 200_000_000)
    # a model without one: GPT-3's Table 2.1 (8.03B: 1.1417e-4, see above)
    assert schedule(8_030_000_000, "my-model").published is None
    assert schedule(8_030_000_000, "my-model").lr == pytest.approx(1.1417e-4, rel=1e-3)


def _llama_8b_layout() -> Layout:
    return Layout(
        dp=8, tp=1, pp=1, cp=1, ep=1, global_batch=512, mbs=1, grad_accum=64, seq_len=8192
    )


def test_schedule_steps_come_from_the_budget_else_the_decay_tokens() -> None:
    model = load_preset("llama-3-8b")
    # no budget: GPT-3's 260B decay tokens / (512 x 8192 = 4,194,304) = 61,988.8 -> 61,989;
    # warmup 375/260,000 x 61,989 = 89.4 -> 89
    f = training_facts(model, _llama_8b_layout())
    assert (f["train.total_steps"], f["train.warmup_steps"]) == (61989, 89)
    assert (f["train.peak_lr"], f["train.min_lr_fraction"]) == (3e-4, 0.1)
    # a 15T-token budget: 15e12 / 4,194,304 = 3,576,278.7 -> 3,576,279 steps; warmup 5,158.1
    f = training_facts(model, _llama_8b_layout(), budget_steps=3_576_279)
    assert (f["train.total_steps"], f["train.warmup_steps"]) == (3_576_279, 5158)
    assert f["train.steps_basis"] == "the budget's tokens"


def _header(folder: Any) -> str:
    """megatron_args.sh's header as one line (its notes are wrapped over comment lines)."""
    text = (folder / "megatron_args.sh").read_text(encoding="utf-8")
    return " ".join(line.lstrip("# ") for line in text.split("set -euo pipefail")[0].splitlines())


def test_the_script_header_names_the_schedule_that_applied(planned) -> None:
    llama = _header(planned("llama-3-405b-16384xh100"))
    assert "published for this model" in llama and "Sec. 3.4.1" in llama
    assert "GPT-3's Table 2.1 (Brown et al. 2020)" in _header(planned("gpt3-175b-1024xa100"))


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-16xh100", "deepseek-v3-1024xh100"])
def test_moe_routing_runs_in_fp32(name: str, planned) -> None:
    # arguments.py --moe-router-dtype (core_r0.13.0 and core_v0.16.1), written for every MoE model
    words = consumer_megatron.script_words(planned(name) / "megatron_args.sh")
    assert words[words.index("--moe-router-dtype") + 1] == "fp32"


def test_every_published_schedule_is_a_catalog_models_and_decays() -> None:
    # a name that is no preset would never apply; each decays below its peak after a warmup
    rule = schedule_rule()
    assert set(rule.published) <= set(preset_names())
    for name in rule.published:
        model = load_preset(name)
        s = schedule(model.active_params() if model.is_moe else model.total_params(), name)
        assert 0 < s.min_lr < s.lr and 0 < s.warmup_fraction < 1, name


@settings(deadline=None)
@given(
    st.sampled_from(["llama-3-405b", "deepseek-v3", "bloom-176b", "my-model"]),
    st.integers(1, 10**8),
    st.one_of(st.none(), st.integers(1, 10**9)),
)
def test_the_warmup_is_at_least_one_step_and_within_the_schedule(
    name: str, tokens_per_step: int, budget: int | None
) -> None:
    total, warmup = steps(schedule(10**9, name), tokens_per_step, budget)
    assert 1 <= warmup <= total
    assert total == (budget or math.ceil(schedule(10**9, name).decay_tokens / tokens_per_step))
