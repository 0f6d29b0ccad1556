"""Read a Hugging Face `config.json` into a `ModelSpec`.

Each supported `model_type` has one small reader that uses the field names of its
`transformers` configuration class (`configuration_<type>.py`). Required fields are the numbers
that size the model (layers, width, heads, vocabulary, MLP and expert widths, expert counts):
the config classes have defaults for them, but those describe one checkpoint, so a config.json
without them is truncated rather than "default". Other absent (or null) fields take the default
that the config class or its modeling code applies; each is named where it is read. Unknown
keys are ignored (config.json files carry many runtime keys); features that would change the
parameter count and that ModelSpec cannot express are refused with the key that asks for them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from parplan_gen.inputs.errors import InputError, did_you_mean, shown_value
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.number_text import unusable_numbers
from parplan_gen.inputs.safe_text import name_from_path
from parplan_gen.inputs.source import Document, load_document
from parplan_gen.models.hf_reader import ConfigReader
from parplan_gen.models.hf_training import training_settings
from parplan_gen.models.transformer import ModelSpec

Spec = dict[str, Any]
_MAX_POS = "max_position_embeddings"
# Literal defaults in the readers below (context lengths, window sizes, MLA widths, ...) are the
# defaults of the named family's transformers config class, `configuration_<model_type>.py`.
_HF_NAMES = (("hidden_size",), ("num_attention_heads",), ("num_hidden_layers",))


def _base(
    r: ConfigReader,
    names: tuple[tuple[str, ...], ...] = _HF_NAMES,
    *,
    act: tuple[tuple[str, ...], str, bool],
    tied: bool,
    max_pos: tuple[str, int],
    pos: str = "rope",
    norm: str = "layernorm",
    kv: int | None = None,
    head_dim: int | None = None,
) -> Spec:
    """What every family has. `act` = (keys, default, gated); `max_pos` = (key, default); `kv`
    and `head_dim` are config-class defaults (else MHA and hidden/heads)."""
    h, a, layers = (r.req_int(*keys) for keys in names)
    return {
        "num_layers": layers,
        "hidden_size": h,
        "num_attention_heads": a,
        "num_kv_heads": r.opt_int("num_key_value_heads", kv or a),
        "head_dim": r.head_dim(h, a, head_dim),
        "vocab_size": r.req_int("vocab_size"),
        "mlp_kind": r.mlp_kind(act[0], act[1], gated=act[2]),
        "tied_embeddings": r.opt_bool("tie_word_embeddings", tied),
        "max_position_embeddings": r.opt_int(*max_pos),
        "position_embedding": pos,
        "norm": norm,
    }


def _biases(qkv: bool, out: bool, mlp: bool) -> Spec:
    return {"qkv_bias": qkv, "out_proj_bias": out, "mlp_bias": mlp}


_GPT2_NAMES = (("n_embd",), ("n_head",), ("n_layer",))
_GPT2_ACT = (("activation_function",), "gelu_new", False)


def _gpt2(r: ConfigReader) -> Spec:
    r.refuse("add_cross_attention", True, "encoder-decoder cross-attention")
    s = _base(
        r, _GPT2_NAMES, act=_GPT2_ACT, tied=True, max_pos=("n_positions", 1024), pos="learned"
    )
    s["ffn_hidden_size"] = r.opt_int("n_inner", 4 * s["hidden_size"])  # GPT2MLP: 4h if None
    return s | _biases(True, True, True)


def _gptj(r: ConfigReader) -> Spec:
    s = _base(r, _GPT2_NAMES, act=_GPT2_ACT, tied=False, max_pos=("n_positions", 2048))
    s["ffn_hidden_size"] = r.opt_int("n_inner", 4 * s["hidden_size"])  # GPTJMLP: 4h if None
    s |= {"norms_per_layer": 1, "parallel_attn_mlp": True}  # GPTJBlock: one ln_1 feeds both
    s["lm_head_bias"] = True  # GPTJForCausalLM.lm_head = nn.Linear(n_embd, vocab_size)
    return s | _biases(False, False, True)  # GPTJAttention projections have no bias


def _gpt_neox(r: ConfigReader) -> Spec:
    s = _base(r, act=(("hidden_act",), "gelu", False), tied=False, max_pos=(_MAX_POS, 2048))
    s["ffn_hidden_size"] = r.req_int("intermediate_size")
    s["parallel_attn_mlp"] = r.opt_bool("use_parallel_residual", True)
    bias = r.opt_bool("attention_bias", True)  # GPTNeoXConfig default
    return s | _biases(bias, bias, True)  # GPTNeoXMLP always has biases


def _bloom(r: ConfigReader) -> Spec:
    names = (
        ("hidden_size", "n_embed"),
        ("n_head", "num_attention_heads"),
        ("n_layer", "num_hidden_layers"),
    )
    # ALiBi has no position table; BLOOM trained at 2048 tokens (model card, "Sequence length")
    s = _base(r, names, act=((), "gelu", False), tied=True, max_pos=("seq_length", 2048))
    s |= {"position_embedding": "alibi", "ffn_hidden_size": 4 * s["hidden_size"]}  # BloomMLP
    s["embedding_norm"] = True  # BloomModel.word_embeddings_layernorm
    return s | _biases(True, True, True)


def _opt(r: ConfigReader) -> Spec:
    act = (("activation_function",), "relu", False)
    s = _base(r, act=act, tied=True, max_pos=(_MAX_POS, 2048), pos="learned")
    # OPTLearnedPositionalEmbedding stores 2 extra rows (its offset); they are not counted.
    if r.opt_int("word_embed_proj_dim", s["hidden_size"]) != s["hidden_size"]:
        raise r.fail("word_embed_proj_dim", "embedding projections (OPT-350m) are not supported")
    r.refuse("layer_norm_elementwise_affine", False, "norms without parameters")
    s["ffn_hidden_size"] = r.req_int("ffn_dim")
    pre_norm = r.opt_bool("do_layer_norm_before", True)
    s["final_norm"] = pre_norm and not r.opt_bool("_remove_final_layer_norm", False)
    bias = r.opt_bool("enable_bias", True)
    return s | _biases(bias, bias, bias)


def _falcon(r: ConfigReader) -> Spec:
    names = (
        ("hidden_size", "n_embed"),
        ("num_attention_heads", "n_head"),
        ("num_hidden_layers", "n_layer"),
    )
    act = (("activation",), "gelu", False)
    s = _base(r, names, act=act, tied=True, max_pos=(_MAX_POS, 2048))
    new_arch = r.opt_bool("new_decoder_architecture", False)
    kv_key = "num_kv_heads" if "num_kv_heads" in r.data else "n_head_kv"
    # FalconAttention: num_kv_heads if new_decoder_architecture or not multi_query, else 1
    multi_query = not new_arch and r.opt_bool("multi_query", True)
    s["num_kv_heads"] = 1 if multi_query else r.opt_int(kv_key, s["num_attention_heads"])
    s["ffn_hidden_size"] = r.opt_int("ffn_hidden_size", 4 * s["hidden_size"])
    parallel = r.opt_bool("parallel_attn", True)
    # FalconDecoderLayer: two norms unless a parallel block uses one (new arch defaults to two)
    lns = r.opt_int("num_ln_in_parallel_attn", 2 if new_arch else 1)
    s |= {"norms_per_layer": 2 if not parallel or lns == 2 else 1, "parallel_attn_mlp": parallel}
    s["position_embedding"] = "alibi" if r.opt_bool("alibi", False) else "rope"
    bias = r.opt_bool("bias", False)
    return s | _biases(bias, bias, bias)


_SILU = (("hidden_act",), "silu", True)


def _llama(r: ConfigReader) -> Spec:
    s = _base(r, act=_SILU, tied=False, max_pos=(_MAX_POS, 2048), norm="rmsnorm")
    s["ffn_hidden_size"] = r.req_int("intermediate_size")
    bias = r.opt_bool("attention_bias", False)
    return s | _biases(bias, bias, r.opt_bool("mlp_bias", False))


def _mistral(r: ConfigReader) -> Spec:
    s = _base(r, act=_SILU, tied=False, max_pos=(_MAX_POS, 4096 * 32), norm="rmsnorm")
    s["ffn_hidden_size"] = r.req_int("intermediate_size")
    # MistralConfig: sliding_window defaults to 4096 when absent; an explicit null means none.
    window = r.opt_int("sliding_window", 0) if "sliding_window" in r.data else 4096
    return s | {"sliding_window": window or None}


def _qwen_window(r: ConfigReader, num_layers: int, alternate: bool) -> Spec:
    """Qwen2 family: windows only with use_sliding_window; which layers per the config class."""
    if not r.opt_bool("use_sliding_window", False):
        return {}
    cut = r.opt_int("max_window_layers", 28)  # Qwen2Config / Qwen2MoeConfig default
    if alternate:  # Qwen2MoeConfig: odd-numbered (1-based) layers below max_window_layers
        default = [bool((i + 1) % 2) and i < cut for i in range(num_layers)]
    else:  # Qwen2Config: layers from max_window_layers on
        default = [i >= cut for i in range(num_layers)]
    layers = r.window_layers(num_layers, default)
    if not any(layers):
        return {}
    return {"sliding_window": r.opt_int("sliding_window", 4096), "sliding_window_layers": layers}


def _qwen2(r: ConfigReader) -> Spec:
    s = _base(r, act=_SILU, tied=False, max_pos=(_MAX_POS, 32768), norm="rmsnorm")
    s["ffn_hidden_size"] = r.req_int("intermediate_size")
    s |= _qwen_window(r, s["num_layers"], alternate=False)
    return s | _biases(True, False, False)  # Qwen2Attention: q/k/v biased, o_proj not


def _nemotron(r: ConfigReader) -> Spec:
    # NemotronLayerNorm1P is a LayerNorm with weight and bias; MLP up -> relu^2 -> down
    act = (("hidden_act",), "relu2", False)
    s = _base(r, act=act, tied=False, max_pos=(_MAX_POS, 4096))
    s["ffn_hidden_size"] = r.req_int("intermediate_size")
    bias = r.opt_bool("attention_bias", False)
    return s | _biases(bias, bias, r.opt_bool("mlp_bias", False))


def _gemma(r: ConfigReader) -> Spec:
    # GemmaConfig defaults: gelu_pytorch_tanh (gated), tied embeddings, head_dim 256
    act = (("hidden_activation", "hidden_act"), "gelu_pytorch_tanh", True)
    s = _base(r, act=act, tied=True, max_pos=(_MAX_POS, 8192), norm="rmsnorm", head_dim=256)
    s["ffn_hidden_size"] = r.req_int("intermediate_size")
    bias = r.opt_bool("attention_bias", False)
    return s | _biases(bias, bias, False)


def _moe(r: ConfigReader, experts: tuple[str, ...], width: str, mask: list[bool] | None) -> Spec:
    """Expert count, k and width; `moe_layers` only when some layers are dense."""
    spec: Spec = {
        "num_experts": r.req_int(*experts),
        "experts_per_token": r.req_int("num_experts_per_tok", "experts_per_token"),
        "moe_ffn_hidden_size": r.req_int(width),
        "ffn_hidden_size": 0,
    }
    if mask is not None and not all(mask):
        spec["moe_layers"] = tuple(mask)
        spec["ffn_hidden_size"] = r.req_int("intermediate_size")  # the dense layers' width
    return spec


def _mixtral(r: ConfigReader) -> Spec:
    s = _base(r, act=_SILU, tied=False, max_pos=(_MAX_POS, 4096 * 32), norm="rmsnorm")
    s |= _moe(r, ("num_local_experts",), "intermediate_size", None)
    return s | {"sliding_window": r.opt_int("sliding_window", 0) or None}  # default None


def _qwen_moe(r: ConfigReader, *, shared: bool) -> Spec:
    """Qwen2-MoE / Qwen3-MoE: a layer is MoE unless in mlp_only_layers or off decoder_sparse_step."""
    s = _base(r, act=_SILU, tied=False, max_pos=(_MAX_POS, 32768), norm="rmsnorm")
    layers, step = s["num_layers"], r.opt_int("decoder_sparse_step", 1)
    dense_only = r.layer_indices("mlp_only_layers")
    mask = [i not in dense_only and (i + 1) % max(step, 1) == 0 for i in range(layers)]
    s |= _moe(r, ("num_experts",), "moe_intermediate_size", mask)
    s |= _qwen_window(r, layers, alternate=shared)
    if shared:  # Qwen2MoeSparseMoeBlock: one shared expert with a sigmoid gate (h -> 1)
        s |= {"num_shared_experts": 1, "shared_expert_gate": True}
        s["shared_expert_ffn_hidden_size"] = r.req_int("shared_expert_intermediate_size")
        return s | _biases(r.opt_bool("qkv_bias", True), False, False)
    bias = r.opt_bool("attention_bias", False)
    return s | {"qk_norm": True} | _biases(bias, bias, False)  # Qwen3MoeAttention q/k_norm


def _deepseek(r: ConfigReader, *, first_dense: int, shared: int, max_pos: int) -> Spec:
    """DeepSeek-V2 / V3 (MLA and DeepSeekMoE); the arguments are the config class's defaults of
    first_k_dense_replace, n_shared_experts and max_position_embeddings."""
    # head_dim=1 is a placeholder: the MLA head widths are set below
    pos = (_MAX_POS, max_pos)
    s = _base(r, act=_SILU, tied=False, max_pos=pos, norm="rmsnorm", head_dim=1)
    first = r.opt_int("first_k_dense_replace", first_dense)
    freq = r.opt_int("moe_layer_freq", 1)  # DeepSeek's own config.json; HF treats every layer as 1
    mask = [i >= first and i % max(freq, 1) == 0 for i in range(s["num_layers"])]
    s |= _moe(r, ("n_routed_experts", "num_local_experts"), "moe_intermediate_size", mask)
    # DeepseekV2Moe / DeepseekV3MoE: one shared MLP of width moe_intermediate_size *
    # n_shared_experts; DeepseekV2Moe builds none when the key is an explicit null.
    if "n_shared_experts" in r.data:
        shared = r.opt_int("n_shared_experts", 0)
    s |= {"num_shared_experts": shared, "shared_expert_ffn_hidden_size": s["moe_ffn_hidden_size"]}
    # q_lora_rank: an explicit null means a plain q_proj (DeepSeek-V2-Lite); absent means 1536.
    q_rank = r.opt_int("q_lora_rank", 0) if "q_lora_rank" in r.data else 1536
    rope, nope = r.opt_int("qk_rope_head_dim", 64), r.opt_int("qk_nope_head_dim", 128)
    s |= {"q_lora_rank": q_rank or None, "kv_lora_rank": r.opt_int("kv_lora_rank", 512)}
    s |= {"qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "head_dim": nope + rope}
    s |= {"v_head_dim": r.opt_int("v_head_dim", 128), "num_kv_heads": s["num_attention_heads"]}
    bias = r.opt_bool("attention_bias", False)  # MLA widths above: both classes' defaults
    return s | _biases(bias, bias, False)


def _gpt_oss(r: ConfigReader) -> Spec:
    # GptOssConfig defaults: 8 KV heads, head_dim 64, window 128, attention_bias true
    pos = (_MAX_POS, 131072)
    s = _base(r, act=_SILU, tied=False, max_pos=pos, norm="rmsnorm", kv=8, head_dim=64)
    s |= _moe(r, ("num_local_experts", "num_experts"), "intermediate_size", None)
    # GptOssConfig: layer_types defaults to sliding, full, sliding, full, ...
    sliding = r.window_layers(s["num_layers"], [bool((i + 1) % 2) for i in range(s["num_layers"])])
    if any(sliding):
        s |= {"sliding_window": r.opt_int("sliding_window", 128), "sliding_window_layers": sliding}
    s |= {"attention_sinks": True, "router_bias": True}  # GptOssAttention.sinks, router bias
    bias = r.opt_bool("attention_bias", True)
    return s | _biases(bias, bias, True)  # GptOssExperts: gate_up_proj_bias, down_proj_bias


READERS: dict[str, Callable[[ConfigReader], Spec]] = {
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "gptj": _gptj,
    "bloom": _bloom,
    "opt": _opt,
    "falcon": _falcon,
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "nemotron": _nemotron,
    "gemma": _gemma,
    "mixtral": _mixtral,
    "qwen2_moe": lambda r: _qwen_moe(r, shared=True),
    "qwen3_moe": lambda r: _qwen_moe(r, shared=False),
    # DeepseekV2Config: first_k_dense_replace 0, n_shared_experts 2, 2048 positions;
    # DeepseekV3Config: 3, 1 and 4096. Their routers differ (data/hf_training.yaml).
    "deepseek_v2": lambda r: _deepseek(r, first_dense=0, shared=2, max_pos=2048),
    "deepseek_v3": lambda r: _deepseek(r, first_dense=3, shared=1, max_pos=4096),
    "gpt_oss": _gpt_oss,
}


def supported_model_types() -> tuple[str, ...]:
    """The `model_type` values this importer reads."""
    return tuple(READERS)


def spec_from_hf_dict(
    data: Any, doc: Document | None = None, *, name: str | None = None, key_path: KeyPath = ()
) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json (`data`, found at `key_path` in `doc`)."""
    label = doc.name if doc is not None else "<config>"
    r = ConfigReader(data if isinstance(data, dict) else {}, doc, key_path, label)
    if not isinstance(data, dict):
        raise r.fail(None, f"a Hugging Face config must be a mapping, not {type(data).__name__}")
    # Every number of the config, read or not, must be one parplan can compute with: a float
    # field read later (rope_theta, norm_eps, rope_scaling.factor) would overflow or be inf.
    bad = next(unusable_numbers(data), None)
    if bad is not None:
        raise InputError(bad[1], r.ref(*bad[0]))
    model_type = data.get("model_type")
    if model_type is None:
        raise r.fail(None, "missing required field 'model_type'")
    reader = READERS.get(model_type) if isinstance(model_type, str) else None
    if reader is None:
        hint = did_you_mean(model_type, READERS) if isinstance(model_type, str) else ""
        raise r.fail(
            "model_type",
            f"unknown model_type {shown_value(model_type)}{hint} (supported: {', '.join(READERS)})",
        )
    fields = reader(r)
    rope, moe = fields["position_embedding"] == "rope", bool(fields.get("num_experts"))
    fields["training"] = training_settings(r, rope=rope, moe=moe)
    title = name or (data["_name_or_path"] if isinstance(data.get("_name_or_path"), str) else "")
    try:
        return ModelSpec(name=title or model_type, model_type=model_type, **fields)
    except ValidationError as exc:
        detail = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in detail["loc"])
        message = detail["msg"].removeprefix("Value error, ")
        message = f"{field}: {message}" if field else message
        raise r.fail(None, f"inconsistent {model_type} config: {message}") from None


def load_hf_config(path: str | Path, *, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face `config.json` file. The name defaults to the folder of a `config.json`,
    else the file's stem (`llama-3-8b.json` -> `llama-3-8b`)."""
    p = Path(path)
    doc = load_document(p)
    default = name_from_path(p.parent.name if p.name == "config.json" and p.parent.name else p.stem)
    return spec_from_hf_dict(doc.data, doc, name=name or default)
