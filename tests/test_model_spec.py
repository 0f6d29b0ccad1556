"""ModelSpec arithmetic, presets and the op graph, against numbers worked by hand from sources.

Every expected number below is either printed in the cited source or derived by hand in the
comment next to it; none was produced by running the code under test.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from pydantic import ValidationError

from parplan_gen.inputs.errors import InputError
from parplan_gen.models.hf_config import load_hf_config
from parplan_gen.models.presets import (
    graph_preset_names,
    load_graph_preset,
    load_preset,
    preset_info,
    preset_names,
)
from parplan_gen.models.transformer import ModelSpec
from parplan_gen.models.transformer_graph import model_graph

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "hf"


def narayanan_eq2(l: int, h: int, v: int, s: int) -> int:  # noqa: E741 - the paper's `l`
    """Narayanan 2021 Eq. 2, P = 12lh^2 (1 + 13/(12h) + (V+s)/(12lh)), multiplied out."""
    return 12 * l * h * h + 13 * l * h + (v + s) * h


def korthikanti_eq7_per_token(l: int, h: int, v: int, s: int) -> int:  # noqa: E741
    """Korthikanti 2022 Eq. 7 divided by B*s: 72 l h^2 (1 + s/(6h) + V/(12hl)), multiplied out."""
    return 72 * l * h * h + 12 * l * s * h + 6 * v * h


def megatron_flops_per_token(
    layers: int, h: int, a: int, g: int, d: int, ffn: int, k: int, swiglu: bool, v: int, s: int
) -> Fraction:
    """FORMULAS.md 3.1, Megatron-LM `num_floating_point_operations` divided by B*s:
    12 s l h^2 [(1 + g/a + s/h)(a d/h) + (ffn/h) k (1.5 if SwiGLU) + V/(2lh)] / s."""
    f = Fraction
    gate = f(3, 2) if swiglu else 1
    bracket = (1 + f(g, a) + f(s, h)) * f(a * d, h) + f(ffn, h) * k * gate + f(v, 2 * layers * h)
    return 12 * layers * h * h * bracket


# Narayanan 2021 Table 1: (preset, printed billions, heads, hidden, layers).
TABLE_1 = [
    ("megatron-gpt-1.7b", "1.7", 24, 2304, 24),
    ("megatron-gpt-3.6b", "3.6", 32, 3072, 30),
    ("megatron-gpt-7.5b", "7.5", 32, 4096, 36),
    ("megatron-gpt-18b", "18.4", 48, 6144, 40),
    ("megatron-gpt-39b", "39.1", 64, 8192, 48),
    ("megatron-gpt-76b", "76.1", 80, 10240, 60),
    ("megatron-gpt-145b", "145.6", 96, 12288, 80),
    ("megatron-gpt-310b", "310.1", 128, 16384, 96),
    ("megatron-gpt-530b", "529.6", 128, 20480, 105),
    ("megatron-gpt-1t", "1008.0", 160, 25600, 128),
]
GPT_PRESETS = [row[0] for row in TABLE_1] + ["gpt3-175b"]


def test_gpt3_175b_parameters_match_narayanan_eq2() -> None:
    # 12*96*12288^2 = 173,946,175,488; 13*96*12288 = 15,335,424; (51,200+2,048)*12,288 =
    # 654,311,424; sum 174,615,822,336 = 174.6B. ModelSpec adds the final LayerNorm (2h) that
    # Eq. 2 leaves out.
    spec = load_preset("gpt3-175b")
    assert narayanan_eq2(96, 12288, 51200, 2048) == 174_615_822_336
    assert spec.total_params() == 174_615_822_336 + 2 * 12288
    assert round(spec.total_params() / 1e9, 1) == 174.6


@pytest.mark.parametrize(("name", "printed", "heads", "hidden", "layers"), TABLE_1)
def test_narayanan_table1_sizes(
    name: str, printed: str, heads: int, hidden: int, layers: int
) -> None:
    spec = load_preset(name)
    assert (spec.num_attention_heads, spec.hidden_size, spec.num_layers) == (heads, hidden, layers)
    eq2 = narayanan_eq2(layers, hidden, 51200, 2048)
    assert spec.total_params() == eq2 + 2 * hidden  # + final LayerNorm
    assert f"{eq2 / 1e9:.1f}" == printed


@pytest.mark.parametrize("name", GPT_PRESETS)
@pytest.mark.parametrize("seq_len", [1024, 2048, 4096])
def test_flops_equal_korthikanti_eq7_for_gpt(name: str, seq_len: int) -> None:
    spec = load_preset(name)
    l, h, v = spec.num_layers, spec.hidden_size, spec.vocab_size  # noqa: E741
    assert spec.flops_per_token(seq_len) == korthikanti_eq7_per_token(l, h, v, seq_len)


def test_flops_equal_korthikanti_eq7_for_gpt2_small_with_its_odd_vocabulary() -> None:
    spec = load_hf_config(EXAMPLES / "gpt2.json")
    assert spec.flops_per_token(1024) == korthikanti_eq7_per_token(12, 768, 50257, 1024)


@pytest.mark.parametrize(
    ("source", "swiglu"),
    [("llama-3-8b", True), ("llama-3-405b", True), ("llama-2-70b", True)],
)
def test_flops_equal_megatron_formula_for_gqa_swiglu(source: str, swiglu: bool) -> None:
    spec = load_preset(source)
    expected = megatron_flops_per_token(
        spec.num_layers,
        spec.hidden_size,
        spec.num_attention_heads,
        spec.num_kv_heads,
        spec.head_dim,
        spec.ffn_hidden_size,
        1,
        swiglu,
        spec.vocab_size,
        8192,
    )
    assert spec.flops_per_token(8192) == expected


def test_flops_gemma_head_dim_not_hidden_over_heads() -> None:
    # Gemma-7B: a*d = 16*256 = 4096 != h = 3072; GeGLU counts like SwiGLU (3 matrices).
    spec = load_hf_config(EXAMPLES / "gemma-7b.json")
    expected = megatron_flops_per_token(28, 3072, 16, 16, 256, 24576, 1, True, 256000, 4096)
    assert spec.flops_per_token(4096) == expected


def test_flops_mixtral_is_megatron_moe_formula_plus_router() -> None:
    # Megatron's MoE term uses k=2 experts of width 14,336; the router (h x E per layer,
    # 6*h*E*L for forward+backward) is counted here and omitted by Megatron.
    spec = load_preset("mixtral-8x7b")
    megatron = megatron_flops_per_token(32, 4096, 32, 8, 128, 14336, 2, True, 32000, 4096)
    assert spec.flops_per_token(4096) == megatron + 6 * 4096 * 8 * 32


def test_deepseek_v3_forward_flops_by_hand() -> None:
    # Matmul weights a token passes: active 37,552,282,624 - embedding 926,679,040 - norms
    # (61 x (2*7168 + 1536 + 512) + 7168 = 1,006,592) = 36,624,596,992; x2 = 73,249,193,984.
    # Scores at s=4096: 61 layers x 2*128*(192+128)*4096 = 61 x 335,544,320 = 20,468,203,520.
    spec = load_preset("deepseek-v3")
    assert spec.active_params() == 37_552_282_624
    assert spec.dense_flops_per_token() == 73_249_193_984
    assert spec.attention_score_flops_per_token(4096) == 20_468_203_520
    assert spec.forward_flops_per_token(4096) == 73_249_193_984 + 20_468_203_520


def test_causal_and_sliding_window_score_flops_gpt_oss() -> None:
    # 36 layers alternating 128-token window / full. Per key 2*64*(64+64) = 16,384 FLOPs.
    # s=4096, Megatron convention: 18*4096 + 18*128 = 76,032 keys -> 1,245,708,288.
    # Causal: full layers 4096/2 = 2048, windows 128 - 128^2/(2*4096) = 126 -> 18*(2048+126)
    # = 39,132 keys -> 641,138,688.
    spec = load_preset("gpt-oss-120b")
    assert spec.window_layer_mask[:4] == (True, False, True, False)
    assert spec.attention_score_flops_per_token(4096) == 1_245_708_288
    assert spec.attention_score_flops_per_token(4096, causal=True) == 641_138_688
    total = spec.flops_per_token(4096, causal=True)
    assert total == 3 * (spec.dense_flops_per_token() + 641_138_688)


def test_causal_halves_scores_of_full_attention() -> None:
    spec = load_preset("llama-3-8b")
    full = spec.attention_score_flops_per_token(8192)
    assert full == 32 * 4 * 8192 * 4096  # 4sh per layer (Narayanan Appendix)
    assert spec.attention_score_flops_per_token(8192, causal=True) == full / 2


# (preset, total, active): totals multiplied out by hand in docs/models.md "Worked counts".
HAND_COUNTS = [
    ("llama-2-7b", 6_738_415_616, 6_738_415_616),
    ("llama-2-13b", 13_015_864_320, 13_015_864_320),
    ("llama-3-8b", 8_030_261_248, 8_030_261_248),
    ("llama-3-70b", 70_553_706_496, 70_553_706_496),
    ("llama-3-405b", 405_853_388_800, 405_853_388_800),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ("mixtral-8x22b", 140_620_634_112, 39_152_031_744),
    ("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704),
    ("deepseek-v3", 671_026_404_352, 37_552_282_624),
    ("gpt-oss-120b", 116_829_156_672, 5_711_982_912),
    ("bloom-176b", 176_247_271_424, 176_247_271_424),
    ("gpt-neox-20b", 20_554_567_680, 20_554_567_680),
]


@pytest.mark.parametrize(("name", "total", "active"), HAND_COUNTS)
def test_parameter_counts_worked_by_hand(name: str, total: int, active: int) -> None:
    spec = load_preset(name)
    assert (spec.total_params(), spec.active_params()) == (total, active)


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("llama-2-7b", "6.74", None),  # model card
        ("llama-3-8b", "8.03", None),
        ("llama-3-70b", "70.6", None),
        ("llama-3-405b", "405.9", None),
        ("mixtral-8x7b", "46.7", "12.9"),  # Jiang et al. 2024
        ("qwen3-30b-a3b", "30.5", "3.3"),  # model card
    ],
)
def test_model_card_figures(name: str, total_b: str, active_b: str | None) -> None:
    spec = load_preset(name)
    decimals = len(total_b.split(".")[1])
    assert f"{spec.total_params() / 1e9:.{decimals}f}" == total_b
    if active_b is not None:  # Qwen prints 3.3 for 3,353,032,704 (truncated, not rounded)
        assert abs(spec.active_params() / 1e9 - float(active_b)) < 0.1


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_and_matches_its_published_counts(name: str) -> None:
    info = preset_info(name)
    assert info.spec.name == name
    assert info.source.strip()
    published = info.published
    if published is None:
        return
    for printed, value in (
        (published.total_params_b, info.spec.total_params()),
        (
            published.active_params_b,
            info.spec.active_params(count_embedding=published.active_counts_embedding),
        ),
    ):
        if printed is None:
            continue
        # Sources round or truncate: accept one unit of the last printed digit either way.
        decimals = 0 if isinstance(printed, int) else len(repr(printed).split(".")[1])
        assert abs(value / 1e9 - printed) < 10**-decimals, (name, value)


def test_required_presets_are_shipped() -> None:
    required = {row[0] for row in TABLE_1} | {
        "gpt3-175b",
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3-8b",
        "llama-3-70b",
        "llama-3-405b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "gpt-neox-20b",
        "bloom-176b",
        "qwen3-30b-a3b",
    }
    assert required <= set(preset_names())
    assert "resnet-50" in graph_preset_names()
    assert "resnet-50" not in preset_names()


def test_unknown_preset_suggests_a_name() -> None:
    with pytest.raises(
        InputError, match=r"unknown model preset 'llama-3-8'; did you mean 'llama-3-8b'\?"
    ):
        load_preset("llama-3-8")


def test_resnet50_graph_totals() -> None:
    # torchvision resnet50: 25,557,032 parameters, 4.09 G multiply-adds at 224x224 (v1.5);
    # He et al. 2016 Table 1 prints 3.8e9 for the original stride placement.
    graph = load_graph_preset("resnet-50")
    sums = graph.stats.attr_sums
    assert sums["params"] == 25_557_032
    assert sums["macs"] == pytest.approx(4.09e9, rel=2e-3)
    assert sums["flops"] == 2 * sums["macs"]
    assert graph.stats.op_counts["Conv2d"] == 53  # 1 + 16 blocks x 3 + 4 projections
    assert graph.stats.op_counts["MatMul"] == 1


def test_gpt_activation_bytes_match_korthikanti_eq1() -> None:
    # Per layer per token: h(34 + 5as/h) = 34*2304 + 5*24*2048 = 78,336 + 245,760 = 324,096;
    # plus Sec. 4.3 extras at p=1: embedding dropout h, final LN and head inputs 4h, fp32 logits 4V.
    spec = load_preset("megatron-gpt-1.7b")
    assert spec.layer_activation_bytes_per_token(0, 2048) == 324_096
    extras = 2304 + 4 * 2304 + 4 * 51200
    assert spec.activation_bytes_per_token(2048) == 24 * 324_096 + extras


GRAPH_CASES = [*preset_names()]


@pytest.mark.parametrize("name", GRAPH_CASES)
def test_graph_nodes_sum_to_spec_totals(name: str) -> None:
    spec = load_preset(name)
    graph = model_graph(spec, seq_len=4096)
    sums = graph.stats.attr_sums
    assert sums["params"] == spec.total_params()
    assert sums["flops"] == spec.forward_flops_per_token(4096)
    assert sums["activation_bytes"] == spec.activation_bytes_per_token(4096)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_graph_of_every_example_sums_to_spec_totals(path: Path) -> None:
    spec = load_hf_config(path)
    sums = model_graph(spec, seq_len=2048).stats.attr_sums
    assert sums["params"] == spec.total_params()
    assert sums["flops"] == spec.forward_flops_per_token(2048)


def test_graph_shape_dense_and_moe() -> None:
    dense = model_graph(load_preset("llama-3-8b"), seq_len=2048)
    ops = dense.stats.op_counts
    assert (ops["MatMul"], ops["Attention"], ops["RMSNorm"], ops["Add"]) == (32 * 4 + 1, 32, 65, 64)
    assert "Router" not in ops
    assert dense.node("lm_head").op == "MatMul"
    assert dense.stats.depth == dense.stats.node_count  # one chain: embedding .. lm_head

    qwen = load_preset("qwen3-30b-a3b")
    moe = model_graph(qwen, seq_len=2048).stats.op_counts
    assert (moe["Router"], moe["Experts"]) == (48, 48)
    deepseek = model_graph(load_preset("deepseek-v3"), seq_len=2048)
    assert deepseek.node("layers.2.mlp.fc1").op == "MatMul"  # first_k_dense_replace = 3
    assert deepseek.node("layers.3.moe.experts").attrs["num_experts"] == 256
    assert deepseek.node("layers.3.moe.shared.fc2").op == "MatMul"


def test_graph_tied_head_has_no_weight_of_its_own() -> None:
    graph = model_graph(load_preset("gpt3-175b"), seq_len=2048)
    head = graph.node("lm_head")
    assert (head.op, head.attrs["params"], head.attrs["tied"]) == ("LMHead", 0, True)
    assert head.attrs["flops"] == 2 * 12288 * 51200


def test_graph_parallel_block_joins_in_one_add() -> None:
    graph = model_graph(load_preset("gpt-neox-20b"), seq_len=2048)
    assert graph.in_degree("layers.0.residual") == 3  # attention out, MLP out, residual
    assert graph.node("layers.0.mlp_norm").op == "LayerNorm"


def test_graph_rejects_non_positive_seq_len() -> None:
    with pytest.raises(InputError, match="seq_len must be a positive"):
        model_graph(load_preset("llama-2-7b"), seq_len=0)


BASE = {
    "name": "t",
    "model_type": "llama",
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 8,
    "num_kv_heads": 8,
    "head_dim": 8,
    "ffn_hidden_size": 128,
    "mlp_kind": "swiglu",
    "vocab_size": 100,
    "tied_embeddings": False,
    "max_position_embeddings": 128,
    "position_embedding": "rope",
    "norm": "rmsnorm",
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_kv_heads": 3}, r"num_attention_heads\(8\) % num_kv_heads\(3\) != 0"),
        (
            {"num_experts": 8, "experts_per_token": 9, "moe_ffn_hidden_size": 32},
            r"1\.\.num_experts",
        ),
        ({"num_experts": 8, "experts_per_token": 2}, "moe_ffn_hidden_size must be > 0"),
        ({"experts_per_token": 2}, "need num_experts > 0"),
        ({"moe_layers": (True,)}, "need num_experts > 0"),
        ({"norms_per_layer": 1}, "needs parallel_attn_mlp"),
        ({"kv_lora_rank": 512}, "MLA needs"),
        ({"sliding_window": 4, "sliding_window_layers": (True,)}, r"len\(sliding_window_layers\)"),
        ({"mlp_kind": "tanh"}, "mlp_kind"),
        ({"hiden_size": 64}, "hiden_size"),
    ],
)
def test_spec_validation(change: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelSpec(**(BASE | change))


def test_spec_is_frozen_and_moe_masks() -> None:
    spec = ModelSpec(
        **BASE,
        num_experts=4,
        experts_per_token=1,
        moe_ffn_hidden_size=32,
        moe_layers=(False, True),
    )
    assert (spec.num_dense_layers, spec.num_moe_layers) == (1, 1)
    # One idle-expert set skipped: 3 experts x 3 matrices x 64 x 32 = 18,432 parameters.
    assert spec.total_params() - spec.active_params() == 18_432
    with pytest.raises(ValidationError):
        spec.hidden_size = 1  # type: ignore[misc]


def test_docs_cover_every_field_model_type_and_preset() -> None:
    from parplan_gen.models.hf_config import supported_model_types

    text = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    for field in ModelSpec.model_fields:
        assert f"| `{field}` |" in text, field
    for model_type in supported_model_types():
        assert f"| `{model_type}` |" in text, model_type
    for name in (*preset_names(), *graph_preset_names()):
        assert f"`{name}`" in text, name
