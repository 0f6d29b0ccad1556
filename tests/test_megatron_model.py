"""The model a Megatron-LM script trains (backends/megatron/model_from_script.py), read as
Megatron-LM core_v0.16.1 builds it: its defaults for what the script leaves out
(megatron/training/arguments.py validate_args, TransformerConfig), the vocabulary padded as
tokenizer.py pads it, and the arguments a model needs refused in one line. Every expected value
is worked from those sources here; a script parplan renders reads back as the model it was
rendered from."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.backends.megatron.model_from_script import megatron_model
from parplan_gen.cost.layout import build_layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.hf_config import spec_from_hf_dict
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.render.render_options import RenderOptions, render_files

from conftest import builtin_rules

SHAPE = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 128"
NULL = "--tokenizer-type NullTokenizer --vocab-size 1000"
# tokenizer.py _vocab_size_with_padding: up to a multiple of 128 (the default
# --make-vocab-size-divisible-by) x tp; a NullTokenizer adds its end-of-document token.
PADDED_NULL_1000 = math.ceil(1001 / 128) * 128


def _read(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "train.sh"
    path.write_text(f"torchrun pretrain_gpt.py \\\n  {SHAPE}\\\n  {text}\n", encoding="utf-8")
    return megatron_model(path)


def test_what_the_script_leaves_out_is_megatron_lms_default(tmp_path: Path) -> None:
    model = _read(tmp_path, NULL)
    # validate_args: kv_channels = hidden // heads, ffn 4 x hidden; TransformerConfig: LayerNorm,
    # add_bias_linear (and with it add_qkv_bias); arguments.py: learned_absolute positions, the
    # output layer tied to the embedding (gpt_builders.py: not --untie-...).
    assert (model.head_dim, model.num_kv_heads, model.ffn_hidden_size) == (16, 4, 4 * 64)
    assert (model.mlp_kind, model.norm, model.position_embedding) == (
        "gelu",
        "layernorm",
        "learned",
    )
    assert model.tied_embeddings and model.qkv_bias and model.out_proj_bias and model.mlp_bias
    assert (model.vocab_size, model.max_position_embeddings, model.is_moe) == (
        PADDED_NULL_1000, 128, False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # validate_args with --swiglu: int((4 * 64 * 2 / 3) / 64) * 64
        ("--swiglu", {"mlp_kind": "swiglu", "ffn_hidden_size": int((4 * 64 * 2 / 3) / 64) * 64}),
        # --group-query-attention alone: TransformerConfig's argparse default of 1 group
        ("--group-query-attention", {"num_kv_heads": 1}),
        ("--group-query-attention --num-query-groups 2 --kv-channels 32",
         {"num_kv_heads": 2, "head_dim": 32}),
        ("--num-query-groups 2", {"num_kv_heads": 4}),  # ignored without the switch
        ("--disable-bias-linear --add-qkv-bias --normalization RMSNorm --squared-relu",
         {"qkv_bias": True, "out_proj_bias": False, "mlp_bias": False, "norm": "rmsnorm",
          "mlp_kind": "squared_relu"}),
        ("--position-embedding-type rope --untie-embeddings-and-output-weights --qk-layernorm",
         {"position_embedding": "rope", "tied_embeddings": False, "qk_norm": True}),
        ("--use-rotary-position-embeddings", {"position_embedding": "rope"}),
    ],
)  # fmt: skip
def test_the_shape_arguments(tmp_path: Path, text: str, expected: dict[str, Any]) -> None:
    model = _read(tmp_path, f"{NULL} {text}")
    assert {k: getattr(model, k) for k in expected} == expected


def test_experts_and_their_layers(tmp_path: Path) -> None:
    freq = "--moe-layer-freq '([0]+[1])*1'"  # quoted, as bash needs the parentheses
    text = f"{NULL} --num-experts 8 {freq} --moe-shared-expert-intermediate-size 96"
    model = _read(tmp_path, text)
    # TransformerConfig: top-2 routing; validate_args: the expert FFN is ffn_hidden_size (4h)
    assert (model.num_experts, model.experts_per_token, model.moe_ffn_hidden_size) == (8, 2, 256)
    assert (model.moe_layers, model.ffn_hidden_size) == ((False, True), 256)
    assert (model.num_shared_experts, model.shared_expert_ffn_hidden_size) == (1, 96)
    # moe_utils.py: a softmax over the top k sums to 1 unless --moe-router-pre-softmax
    assert (model.training.router_score, model.training.topk_norm) == ("softmax", True)
    every = _read(tmp_path, f"{NULL} --num-experts 4 --moe-router-topk 1 --moe-layer-freq 1")
    assert (every.moe_layers, every.ffn_hidden_size, every.experts_per_token) == ((), 0, 1)


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        (NULL, PADDED_NULL_1000),
        (f"{NULL} --tensor-model-parallel-size 4", math.ceil(1001 / 512) * 512),
        (f"{NULL} --make-vocab-size-divisible-by 8", math.ceil(1001 / 8) * 8),
        ("--tokenizer-type HuggingFaceTokenizer --vocab-size 1024", 1024),
        # GPT-2's BPE, 50,257 tokens (Radford et al. 2019), at tp 2
        ("--tokenizer-type GPT2BPETokenizer --tensor-model-parallel-size 2",
         math.ceil(50257 / 256) * 256),
        ("--tokenizer-type TikTokenizer", 2**17),  # CustomTikTokenizer's fallback
        (f"{NULL} --padded-vocab-size 2000", 2000),
    ],
)  # fmt: skip
def test_the_vocabulary_megatron_lm_builds(tmp_path: Path, text: str, rows: int) -> None:
    assert _read(tmp_path, text).vocab_size == rows


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta/llama",
         "{path}:3: --tokenizer-type: HuggingFaceTokenizer is sized by its tokenizer files, which "
         "parplan does not read, so the model's vocabulary is unknown: add --vocab-size to the "
         "script, or give MODEL"),
        (f"{NULL} --multi-latent-attention",
         "{path}:3: --multi-latent-attention: multi-latent attention: parplan reads its ranks "
         "and head widths (MLATransformerConfig's) from a model's config.json: give MODEL"),
        (f"{NULL} --position-embedding-type none",
         "{path}:3: --position-embedding-type: none positions are not parplan's "
         "(learned_absolute, rope): give MODEL"),
        (f"{NULL} --normalization LayerNorm1P",
         "{path}:3: --normalization: 'LayerNorm1P' is not one of ('LayerNorm', 'RMSNorm')"),
        (f"{NULL} --num-experts 8 --moe-layer-freq [1]*3",
         "{path}:3: --moe-layer-freq: 3 entries for 2 layers (gpt_layer_specs.py)"),
        (f"{NULL} --num-experts 8 --moe-layer-freq [1]*10**9",
         "{path}:3: --moe-layer-freq: '[1]*10**9' is no list of 0 and 1 Megatron-LM reads"),
        (f"{NULL} --swiglu --squared-relu",
         "{path}:3: --squared-relu: Megatron-LM takes one of --swiglu, --squared-relu"),
        (f"{NULL} --attention-dropout 1.5",
         "{path}:3: the script's model is not consistent: --attention-dropout: Input should be "
         "less than 1"),
        (f"{NULL} --group-query-attention --num-query-groups 3",
         "{path}: the script's model is not consistent: num_attention_heads(4) % "
         "num_kv_heads(3) != 0"),
        (f"{NULL} --ffn-hidden-size $FFN",
         "{path}:3: --ffn-hidden-size: expected a whole number (digits 0-9), got '$FFN' (a "
         "variable the script does not set; the environment is not read)"),
    ],
)  # fmt: skip
def test_what_the_model_cannot_be_read_from(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(InputError) as caught:
        _read(tmp_path, text)
    assert str(caught.value) == error.format(path=tmp_path / "train.sh")


def test_a_script_of_no_model(tmp_path: Path) -> None:
    path = tmp_path / "args.sh"
    path.write_text("--global-batch-size 64 --hidden-size 64 --tensor-model-parallel-size 2\n")
    with pytest.raises(InputError) as caught:
        megatron_model(path)
    assert str(caught.value) == (
        f"{path}: the script gives no --num-layers, --num-attention-heads, "
        "--max-position-embeddings, which Megatron-LM requires (arguments.py validate_args), "
        "so it states no model: give MODEL"
    )


QWEN3_MOE = {
    "model_type": "qwen3_moe", "hidden_size": 256, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 64, "num_hidden_layers": 4, "vocab_size": 1000,
    "intermediate_size": 512, "moe_intermediate_size": 128, "num_experts": 16,
    "num_experts_per_tok": 4, "mlp_only_layers": [0, 3], "max_position_embeddings": 4096,
}  # fmt: skip


@pytest.mark.parametrize("name", ["mixtral-8x7b", "llama-3-8b", "qwen3-moe-with-dense-layers"])
def test_a_rendered_script_reads_back_as_its_model(name: str, tmp_path: Path) -> None:
    """megatron_args.sh (MOCK_DATA: NullTokenizer with --vocab-size V - 1, which adds its
    end-of-document token) builds the model it was rendered from: V tokens, padded up to a
    multiple of 128 (tp 1) as Megatron-LM pads any vocabulary."""
    model = spec_from_hf_dict(QWEN3_MOE, name=name) if "qwen" in name else load_model(name)
    cluster = load_cluster_spec({"gpus": 8, "gpu": "h100"})
    layout = build_layout(8, mbs=1, global_batch=64, seq_len=4096)
    found = Evaluator(builtin_rules(), backend="megatron").evaluate(model, cluster, layout)
    doc = PlanDocument.from_parts(
        rules=builtin_rules(), model=model, cluster=cluster, chosen=found.estimate
    )
    path = tmp_path / "megatron_args.sh"
    path.write_text(render_files(doc, RenderOptions())["megatron_args.sh"], encoding="utf-8")
    read = megatron_model(path)
    assert read.vocab_size == math.ceil(model.vocab_size / 128) * 128
    mine = read.model_dump(exclude={"name", "model_type", "vocab_size"})
    assert mine == model.model_dump(exclude={"name", "model_type", "vocab_size"})
