"""The Hugging Face config.json importer: field names per model_type, defaults, errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.inputs.errors import InputError, SourceError
from parplan_gen.inputs.source import parse_document
from parplan_gen.models.hf_config import load_hf_config, spec_from_hf_dict, supported_model_types
from parplan_gen.models.transformer import ModelSpec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "hf"
LLAMA = {"hidden_size": 64, "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 100}

# The fewest keys each model_type needs: the numbers that size the model.
MINIMAL: dict[str, dict[str, Any]] = {
    "gpt2": {"n_embd": 64, "n_head": 8, "n_layer": 4, "vocab_size": 100},
    "gptj": {"n_embd": 64, "n_head": 8, "n_layer": 4, "vocab_size": 100},
    "gpt_neox": LLAMA | {"intermediate_size": 256},
    "bloom": {"hidden_size": 64, "n_head": 8, "n_layer": 4, "vocab_size": 100},
    "opt": LLAMA | {"ffn_dim": 256},
    "falcon": LLAMA,
    "llama": LLAMA | {"intermediate_size": 160},
    "mistral": LLAMA | {"intermediate_size": 160},
    "qwen2": LLAMA | {"intermediate_size": 160},
    "nemotron": LLAMA | {"intermediate_size": 256},
    "gemma": LLAMA | {"intermediate_size": 160},
    "mixtral": LLAMA | {"intermediate_size": 160, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": LLAMA
    | {
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 128,
        "num_experts": 8,
        "num_experts_per_tok": 2,
    },
    "qwen3_moe": LLAMA | {"moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2},
    # every layer is MoE (DeepseekV2Config first_k_dense_replace 0): no dense width needed
    "deepseek_v2": LLAMA
    | {"moe_intermediate_size": 32, "n_routed_experts": 8, "num_experts_per_tok": 2},
    "deepseek_v3": LLAMA
    | {
        "intermediate_size": 160,
        "moe_intermediate_size": 32,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
    },
    "gpt_oss": LLAMA | {"intermediate_size": 32, "num_local_experts": 8, "num_experts_per_tok": 2},
}

# What each family must come out as (the config class's defaults for everything else).
# fmt: off
EXPECTED: dict[str, dict[str, Any]] = {
    "gpt2": {"mlp_kind": "gelu", "ffn_hidden_size": 256, "position_embedding": "learned",
             "max_position_embeddings": 1024, "tied_embeddings": True, "qkv_bias": True},
    "gptj": {"norms_per_layer": 1, "parallel_attn_mlp": True, "lm_head_bias": True,
             "qkv_bias": False, "mlp_bias": True, "tied_embeddings": False},
    "gpt_neox": {"parallel_attn_mlp": True, "norms_per_layer": 2, "qkv_bias": True,
                 "tied_embeddings": False, "position_embedding": "rope"},
    "bloom": {"position_embedding": "alibi", "embedding_norm": True, "ffn_hidden_size": 256,
              "tied_embeddings": True},
    "opt": {"mlp_kind": "relu", "position_embedding": "learned", "final_norm": True,
            "max_position_embeddings": 2048},
    "falcon": {"num_kv_heads": 1, "norms_per_layer": 1, "parallel_attn_mlp": True,
               "ffn_hidden_size": 256, "qkv_bias": False, "tied_embeddings": True},
    "llama": {"mlp_kind": "swiglu", "norm": "rmsnorm", "num_kv_heads": 8, "head_dim": 8,
              "tied_embeddings": False, "max_position_embeddings": 2048},
    "mistral": {"sliding_window": 4096, "max_position_embeddings": 131072},
    "qwen2": {"qkv_bias": True, "out_proj_bias": False, "sliding_window": None},
    "nemotron": {"mlp_kind": "squared_relu", "norm": "layernorm", "mlp_bias": False},
    "gemma": {"mlp_kind": "geglu", "head_dim": 256, "tied_embeddings": True},
    "mixtral": {"num_experts": 4, "experts_per_token": 2, "moe_ffn_hidden_size": 160,
                "ffn_hidden_size": 0, "sliding_window": None},
    "qwen2_moe": {"num_shared_experts": 1, "shared_expert_ffn_hidden_size": 128,
                  "shared_expert_gate": True, "qkv_bias": True},
    "qwen3_moe": {"qk_norm": True, "num_shared_experts": 0, "qkv_bias": False},
    "deepseek_v2": {"q_lora_rank": 1536, "num_shared_experts": 2, "moe_layers": (),
                    "shared_expert_ffn_hidden_size": 32, "max_position_embeddings": 2048},
    "deepseek_v3": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                    "num_shared_experts": 1, "moe_layers": (False, False, False, True)},
    "gpt_oss": {"attention_sinks": True, "router_bias": True, "mlp_bias": True, "head_dim": 64,
                "num_kv_heads": 8, "sliding_window": 128,
                "sliding_window_layers": (True, False, True, False)},
}
# fmt: on


def spec(model_type: str, **changes: Any) -> ModelSpec:
    """Import the minimal config of `model_type` with `changes` applied."""
    return spec_from_hf_dict({"model_type": model_type, **MINIMAL[model_type], **changes})


def test_every_requested_model_type_is_supported() -> None:
    assert set(supported_model_types()) == set(MINIMAL)


@pytest.mark.parametrize("model_type", sorted(MINIMAL))
def test_minimal_config_imports(model_type: str) -> None:
    result = spec(model_type)
    assert result.model_type == model_type
    assert result.name == model_type
    for field, value in EXPECTED[model_type].items():
        assert getattr(result, field) == value, field
    assert result.total_params() > 0


@pytest.mark.parametrize(
    ("model_type", "key"), [(m, k) for m in sorted(MINIMAL) for k in sorted(MINIMAL[m])]
)
def test_each_sizing_field_is_required(model_type: str, key: str) -> None:
    data = {"model_type": model_type} | {k: v for k, v in MINIMAL[model_type].items() if k != key}
    with pytest.raises(InputError, match=f"missing required field '{key}'"):
        spec_from_hf_dict(data)


def test_falcon_field_names() -> None:
    # FalconAttention: num_kv_heads counts only with new_decoder_architecture or !multi_query.
    assert spec("falcon", num_kv_heads=4).num_kv_heads == 1
    assert spec("falcon", num_kv_heads=4, multi_query=False).num_kv_heads == 4
    new = spec("falcon", num_kv_heads=4, new_decoder_architecture=True)
    assert (new.num_kv_heads, new.norms_per_layer) == (4, 2)  # ln_attn and ln_mlp
    legacy = spec_from_hf_dict(
        {"model_type": "falcon", "n_embed": 64, "n_head": 8, "n_layer": 2, "vocab_size": 10}
    )
    assert (legacy.hidden_size, legacy.num_layers) == (64, 2)
    sequential = spec("falcon", parallel_attn=False)
    assert (sequential.norms_per_layer, sequential.parallel_attn_mlp) == (2, False)
    assert spec("falcon", alibi=True, bias=True).position_embedding == "alibi"


def test_bloom_accepts_the_legacy_n_embed() -> None:
    data = {"model_type": "bloom", "n_embed": 64, "n_head": 8, "n_layer": 2, "vocab_size": 10}
    assert spec_from_hf_dict(data).hidden_size == 64


def test_gpt2_n_inner_null_means_4h() -> None:
    assert spec("gpt2", n_inner=None).ffn_hidden_size == 4 * 64
    assert spec("gpt2", n_inner=100).ffn_hidden_size == 100


def test_mistral_window_default_and_null() -> None:
    assert spec("mistral").sliding_window == 4096  # MistralConfig default
    assert spec("mistral", sliding_window=None).sliding_window is None
    assert spec("mistral", sliding_window=512).sliding_window == 512


def test_qwen_moe_layer_selection() -> None:
    # Qwen2MoeDecoderLayer: MoE iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
    sparse = spec("qwen2_moe", decoder_sparse_step=2, intermediate_size=96)
    assert sparse.moe_layer_mask == (False, True, False, True)
    assert sparse.ffn_hidden_size == 96
    only = spec("qwen3_moe", mlp_only_layers=[0], intermediate_size=96)
    assert only.moe_layer_mask == (False, True, True, True)
    with pytest.raises(InputError, match="missing required field 'intermediate_size'"):
        spec("qwen3_moe", mlp_only_layers=[0])


def test_qwen2_sliding_window_layers() -> None:
    window = spec("qwen2", use_sliding_window=True, max_window_layers=2, sliding_window=64)
    assert window.sliding_window_layers == (False, False, True, True)
    typed = spec("qwen2", use_sliding_window=True, layer_types=["full_attention"] * 4)
    assert typed.sliding_window is None


def test_deepseek_moe_layers_and_plain_q_proj() -> None:
    every_other = spec("deepseek_v3", first_k_dense_replace=1, moe_layer_freq=2)
    assert every_other.moe_layer_mask == (False, False, True, False)
    plain = spec("deepseek_v3", q_lora_rank=None)
    assert plain.q_lora_rank is None
    # q_proj 64 x 8*(128+64) replaces q_a (64x1536) + q_a_norm (1536) + q_b (1536 x 8*192).
    saved = 64 * 1536 + 1536 + 1536 * 8 * 192 - 64 * 8 * 192
    assert spec("deepseek_v3").attention_params() - plain.attention_params() == saved


def test_deepseek_v2_lite_counts_match_the_published_ones() -> None:
    """examples/hf/deepseek-v2-lite.json is huggingface.co/deepseek-ai/DeepSeek-V2-Lite's
    config.json (model_type deepseek_v2, q_lora_rank null, first_k_dense_replace 1, 2 shared and
    64 routed experts of width 1408, 6 per token). DeepSeek-V2 paper (arXiv:2405.04434) Appendix
    B.1 and the model card's "Model Architecture": 15.7B parameters in total, 2.4B activated for
    each token, DeepSeek's count without the input embedding (as DeepSeek-V3's 37B)."""
    lite = load_hf_config(EXAMPLES / "deepseek-v2-lite.json")
    assert lite.model_type == "deepseek_v2" and lite.q_lora_rank is None
    assert lite.moe_layer_mask == (False,) + (True,) * 26 and lite.num_shared_experts == 2
    assert f"{lite.total_params() / 1e9:.1f}" == "15.7"
    # printed to one decimal, truncated or rounded (test_model_spec: one unit of the last digit)
    assert abs(lite.active_params(count_embedding=False) / 1e9 - 2.4) < 0.1
    # an explicit null builds no shared expert (DeepseekV2Moe: `if n_shared_experts is not None`)
    assert spec("deepseek_v2", n_shared_experts=None).num_shared_experts == 0


def test_gpt_oss_layer_types() -> None:
    full = spec("gpt_oss", layer_types=["full_attention"] * 4)
    assert full.sliding_window is None
    with pytest.raises(InputError, match="layer_types: has 3 entries; num_layers is 4"):
        spec("gpt_oss", layer_types=["full_attention"] * 3)


def test_gemma_reads_hidden_activation_first() -> None:
    assert spec("gemma", hidden_act="gelu", hidden_activation="gelu_pytorch_tanh").gated_mlp


def test_unknown_model_type_points_at_its_line(write: Callable[[str, str], Path]) -> None:
    path = write(
        "config.json",
        """
        {
          "hidden_size": 64,
          "model_type": "lama"
        }
        """,
    )
    with pytest.raises(InputError) as info:
        load_hf_config(path)
    assert str(info.value).startswith(f"{path}:3:3: model_type: unknown model_type 'lama'; ")
    assert "did you mean 'llama'?" in str(info.value)


def test_missing_field_names_field_and_file(write: Callable[[str, str], Path]) -> None:
    path = write("m/config.json", json.dumps({"model_type": "gpt2", "n_head": 2}, indent=2))
    with pytest.raises(InputError) as info:
        load_hf_config(path)
    assert str(info.value) == f"{path}:1:1: missing required field 'n_embd' for model_type 'gpt2'"


def test_wrong_type_points_at_its_line(write: Callable[[str, str], Path]) -> None:
    text = json.dumps(
        MINIMAL["llama"] | {"model_type": "llama", "num_hidden_layers": "4"}, indent=2
    )
    path = write("config.json", text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "num_hidden_layers" in t)
    with pytest.raises(InputError) as info:
        load_hf_config(path)
    expected = f"{path}:{line}:3: num_hidden_layers: 'num_hidden_layers' must be a non-negative"
    assert str(info.value).startswith(expected)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"n_embd": 64}, "missing required field 'model_type'"),
        ({"model_type": 7}, "unknown model_type 7"),
        ({}, "missing required field 'model_type'"),
        (MINIMAL["llama"] | {"model_type": "llama", "num_key_value_heads": 3}, r"% num_kv_heads"),
        (MINIMAL["llama"] | {"model_type": "llama", "hidden_size": 60}, r"hidden_size\(60\)"),
        (MINIMAL["llama"] | {"model_type": "llama", "hidden_act": "tanh"}, "activation 'tanh'"),
        (MINIMAL["gpt2"] | {"model_type": "gpt2", "add_cross_attention": True}, "cross-attention"),
        (MINIMAL["gpt2"] | {"model_type": "gpt2", "n_layer": 0}, "'n_layer' must be a positive"),
        (MINIMAL["opt"] | {"model_type": "opt", "word_embed_proj_dim": 32}, "OPT-350m"),
        (MINIMAL["gpt2"] | {"model_type": "gpt2", "tie_word_embeddings": 1}, "true or false"),
        (MINIMAL["qwen3_moe"] | {"model_type": "qwen3_moe", "num_experts_per_tok": 9}, "1..num_"),
    ],
)
def test_bad_configs(data: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        spec_from_hf_dict(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"mlp_only_layers": [[1]]},
            "<config>: mlp_only_layers[0]: 'mlp_only_layers[0]' must be a layer index "
            "(0 to 4095), not a list",
        ),
        (
            {"mlp_only_layers": [0, {"a": 1}]},
            "<config>: mlp_only_layers[1]: 'mlp_only_layers[1]' must be a layer index "
            "(0 to 4095), not a dict",
        ),
        (
            {"mlp_only_layers": [4096]},
            "<config>: mlp_only_layers[0]: 'mlp_only_layers[0]' must be a layer index "
            "(0 to 4095), not 4096",
        ),
    ],
)
def test_layer_lists_hold_layer_indices(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as info:
        spec("qwen3_moe", **changes)
    assert str(info.value) == message
    dense_second = spec("qwen3_moe", mlp_only_layers=[1, 9], intermediate_size=160)
    assert dense_second.moe_layers == (True, False, True, True)  # 9: no such layer, as in HF


@pytest.mark.parametrize("item", [[1], {"a": 1}, None, 1, "sliding"])
def test_layer_types_of_any_type_are_refused_by_name(item: Any) -> None:
    with pytest.raises(InputError, match=r"^<config>: layer_types\[1\]: layer type .* is not sup"):
        spec("gpt_oss", layer_types=["full_attention", item, "full_attention", "full_attention"])


def test_a_huge_model_type_is_shown_cut_and_not_searched_for_a_match() -> None:
    with pytest.raises(InputError) as info:
        spec_from_hf_dict({"model_type": "x" * 10_000_000})
    shown = str(info.value)
    assert shown.startswith("<config>: model_type: unknown model_type 'xxxx")
    assert "... (9999802 more characters) (supported: gpt2, " in shown
    assert len(shown) < 600


def test_not_a_mapping() -> None:
    with pytest.raises(InputError, match="must be a mapping, not list"):
        spec_from_hf_dict([1, 2])


def test_error_inside_a_preset_file_points_at_the_config_key() -> None:
    doc = parse_document("source: x\nconfig:\n  model_type: llama\n  hidden_size: 64\n", "p.yaml")
    with pytest.raises(InputError) as info:
        spec_from_hf_dict(doc.data["config"], doc, key_path=("config",))
    assert str(info.value).startswith("p.yaml:2:1: config: missing required field")


def test_malformed_file_is_a_source_error(write: Callable[[str, str], Path]) -> None:
    with pytest.raises(SourceError):
        load_hf_config(write("config.json", '{"model_type": "llama",'))


def test_names() -> None:
    assert load_hf_config(EXAMPLES / "llama-3-8b.json").name == "llama-3-8b"
    named = spec_from_hf_dict({"model_type": "gpt2", **MINIMAL["gpt2"], "_name_or_path": "x/y"})
    assert named.name == "x/y"


def test_gpt2_small_count() -> None:
    # 12 layers x (12*768^2 + 13*768 = 7,087,872) = 85,054,464; token table 50,257*768 =
    # 38,597,376; positions 1,024*768 = 786,432; final LayerNorm 1,536 -> 124,439,808.
    assert load_hf_config(EXAMPLES / "gpt2.json").total_params() == 124_439_808


def test_gemma_7b_non_embedding_count_matches_the_paper() -> None:
    # Gemma Team 2024, Table 2: 7B has 7,751,248,896 non-embedding parameters:
    # 28 x (attention 4 x 3072 x 4096 + MLP 3 x 3072 x 24576 + 2 norms x 3072) + final 3072.
    gemma = load_hf_config(EXAMPLES / "gemma-7b.json")
    assert gemma.total_params() - gemma.embedding_params() == 7_751_248_896


def test_qwen15_moe_counts() -> None:
    # Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated.
    qwen = load_hf_config(EXAMPLES / "qwen1.5-moe-a2.7b.json")
    assert (qwen.total_params(), qwen.active_params()) == (14_315_784_192, 2_689_173_504)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_examples_load(path: Path) -> None:
    assert load_hf_config(path).name == path.stem
