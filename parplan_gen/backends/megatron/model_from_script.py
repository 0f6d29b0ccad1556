"""The model a Megatron-LM script trains, read from its arguments (`parplan check --from-megatron
FILE` without MODEL; `parplan_gen.check(None, cluster, from_megatron=FILE)`).

Megatron-LM builds the model its arguments state (core_v0.16.1 gpt_builders.py: a GPTModel of
core_transformer_config_from_args, with `vocab_size=args.padded_vocab_size` and
`share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights`), so the
script alone says what is trained. Its words are read as bash expands them, nothing run
(inputs/shell_script.py: every branch of an `if` taken), and as argparse takes them: the last
value of an argument wins, a switch anywhere is on. An argument the script leaves out takes
Megatron-LM's own default in the release the megatron backend follows (core_v0.16.1:
megatron/training/arguments.py, the TransformerConfig field defaults it generates arguments
from, and validate_args' derived values), each named where it is used below.

The vocabulary is the embedding's rows as Megatron-LM builds them (tokenizer.py build_tokenizer
and _vocab_size_with_padding): --padded-vocab-size, else the tokenizer's size padded up to a
multiple of --make-vocab-size-divisible-by x the script's tensor-parallel size. The tokenizer's
size is --vocab-size where the script gives one (a NullTokenizer adds its end-of-document token;
for a tokenizer read from files, which parplan does not read, the script's --vocab-size stands
for their size), else the size the tokenizer type fixes (TOKENIZER_SIZES); else the model is
not known, an InputError naming the line of --tokenizer-type.

What the model needs and the script does not say, where Megatron-LM has no default (the
arguments validate_args requires), and what parplan's transformer cannot hold from a script
(multi-latent attention, a YAML or per-layer config file), are InputErrors naming the file.
"""

from __future__ import annotations

import ast
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import ascii_decimal, whole_number
from parplan_gen.inputs.safe_text import name_from_path
from parplan_gen.inputs.shell_script import unexpanded_hint
from parplan_gen.models.training_settings import TrainingSettings
from parplan_gen.models.transformer import ModelSpec
from parplan_gen.models.transformer_shape import MAX_LAYERS, MAX_WIDTH
from parplan_gen.render.mapping_inverse import argument_value, read_choice, script_words

# What the model is read as: Megatron-LM's GPT model (pretrain_gpt.py, gpt_builders.py GPTModel).
MODEL_TYPE = "gpt"
GIVE_MODEL = "give MODEL"
# arguments.py validate_args: `required_args` (_check_arg_is_not_none).
REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads", "--max-position-embeddings")
# Arguments whose model parplan does not read from a script (a model's config.json holds it).
REFUSED = {
    "--multi-latent-attention": "multi-latent attention: parplan reads its ranks and head "
    "widths (MLATransformerConfig's) from a model's config.json",
    "--yaml-cfg": "the arguments come from a YAML file, which parplan does not read",
    "--heterogeneous-layers-config-path": "the layers come from a per-layer config file, which "
    "parplan does not read",
}
# A hybrid (Mamba) model's layers come from its pattern (arguments.py validate_args): no MODEL
# parplan has prices its Mamba layers.
HYBRID = ("--hybrid-layer-pattern", "--hybrid-override-pattern")
# validate_args, ffn_hidden_size left None: 4 x hidden; with --swiglu
# `int((4 * hidden_size * 2 / 3) / 64) * 64` (two thirds, kept a multiple of 64).
FFN_EXPANSION = 4
SWIGLU_SHARE = (2, 3)
SWIGLU_MULTIPLE = 64
# TransformerConfig.num_query_groups: argparse_meta default 1 (--group-query-attention without
# --num-query-groups: one group); without --group-query-attention core_transformer_config_from_args
# passes None, which __post_init__ makes num_attention_heads.
GQA_DEFAULT_GROUPS = 1
# TransformerConfig.normalization (Literal, default "LayerNorm").
NORMS = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
DEFAULT_NORM = "LayerNorm"
# --position-embedding-type (arguments.py choices, default 'learned_absolute'); mrope, relative
# and none are no position kind of parplan's transformer.
POSITIONS = {"learned_absolute": "learned", "rope": "rope"}
POSITION_CHOICES = ("learned_absolute", "rope", "mrope", "relative", "none")
DEFAULT_POSITION = "learned_absolute"
# TransformerConfig.moe_router_topk default 2; moe_router_score_function Literal, "softmax".
DEFAULT_TOPK = 2
ROUTER_SCORES = ("softmax", "sigmoid")
SEQ_AUX = "seq_aux_loss"  # --moe-router-load-balancing-type: the balance loss per sequence
DEFAULT_ROUTER_SCORE = "softmax"
# arguments.py --make-vocab-size-divisible-by default 128; ModelParallelConfig
# tensor_model_parallel_size default 1.
DEFAULT_VOCAB_MULTIPLE = 128
DEFAULT_TP = 1
# tokenizer.py: _NullTokenizer (and _NullMultimodalTokenizer) `vocab_size` is --vocab-size + 1,
# its end-of-document token.
NULL_TOKENIZERS = ("NullTokenizer", "NullMultimodalTokenizer")
NULL_EOD_TOKENS = 1
# The size a tokenizer type fixes without --vocab-size. GPT2BPETokenizer: GPT-2's byte-level
# BPE, 50,257 tokens (Radford et al. 2019, Sec. 2.2), the gpt2-vocab.json / gpt2-merges.txt
# pair Megatron-LM's docs/user-guide/data-preparation.md and examples/gpt3 name; TikTokenizer:
# tokenizer.py CustomTikTokenizer, "Fallback vocab size is 131072" (2**17).
TOKENIZER_SIZES = {"GPT2BPETokenizer": 50257, "TikTokenizer": 2**17}
# TrainingSettings field -> the argument it is read from (named in a validation error).
SETTING_FLAGS = {
    "rope_theta": "--rotary-base",
    "rope_fraction": "--rotary-percent",
    "norm_eps": "--norm-epsilon",
    "attention_dropout": "--attention-dropout",
    "hidden_dropout": "--hidden-dropout",
    "topk_scale": "--moe-router-topk-scaling-factor",
    "aux_loss_coeff": "--moe-aux-loss-coeff",
}


class _Arguments:
    """A script's `--name` arguments as argparse takes them: each one's last value and line."""

    def __init__(self, path: str) -> None:
        self.path = path
        words = script_words(path)
        self.words = [word for word, _ in words]
        self.last: dict[str, tuple[str, int]] = {}
        self.index: dict[str, int] = {}  # flag -> the position of its last word
        for i, (word, line) in enumerate(words):
            flag = word.partition("=")[0]
            if flag.startswith("--"):
                self.last[flag] = (argument_value(words, i), line)
                self.index[flag] = i

    def said(self, flag: str) -> bool:
        return flag in self.last

    def values(self, flag: str) -> list[str]:
        """The values of an argument of nargs='+': the words after its last occurrence up to
        the next `--name` (its inline `=value` alone)."""
        if flag not in self.index:
            return []
        at = self.index[flag]
        if "=" in self.words[at]:
            return [self.words[at].partition("=")[2]]
        found: list[str] = []
        for word in self.words[at + 1 :]:
            if word.startswith("--"):
                break
            found.append(word)
        return found

    def at(self, flag: str) -> SourceRef:
        """The line of the last `flag` (the file alone where the script does not give it)."""
        return SourceRef(self.path, self.last[flag][1] if flag in self.last else None)

    def fail(self, flag: str, message: str) -> InputError:
        return InputError(f"{flag}: {message}", self.at(flag))

    def _parsed(self, flag: str, parse: Callable[[str], Any]) -> Any:
        raw = self.last[flag][0]
        try:
            return parse(raw)
        except ValueError as exc:
            raise self.fail(flag, f"{exc}{unexpanded_hint(raw)}") from None

    def optional(self, flag: str, maximum: int, minimum: int = 1) -> int | None:
        """The whole number the script gives, or None."""
        if flag not in self.last:
            return None
        return int(self._parsed(flag, lambda raw: whole_number(raw, maximum, minimum)))

    def whole(self, flag: str, maximum: int, default: int, minimum: int = 1) -> int:
        """The whole number the script gives, else Megatron-LM's `default`."""
        found = self.optional(flag, maximum, minimum)
        return default if found is None else found

    def number(self, flag: str, maximum: int) -> int:
        """A whole number the script must give (REQUIRED is checked first)."""
        return int(self._parsed(flag, lambda raw: whole_number(raw, maximum)))

    def decimal(self, flag: str) -> float | None:
        return float(self._parsed(flag, ascii_decimal)) if flag in self.last else None

    def choice(self, flag: str, choices: tuple[str, ...], default: str) -> str:
        if flag not in self.last:
            return default
        raw, line = self.last[flag]
        return str(read_choice(raw, choices, SourceRef(self.path, line, path=flag)))


def megatron_model(path: str | Path) -> ModelSpec:
    """The transformer the Megatron-LM script at `path` trains (the module's docstring)."""
    args = _Arguments(str(path))
    for flag in HYBRID:
        if args.said(flag):
            raise args.fail(flag, "a hybrid Mamba model, whose Mamba layers parplan does not price")
    for flag, what in REFUSED.items():
        if args.said(flag):
            raise args.fail(flag, f"{what}: {GIVE_MODEL}")
    missing = [flag for flag in REQUIRED if not args.said(flag)]
    if missing:
        raise InputError(
            f"the script gives no {', '.join(missing)}, which Megatron-LM requires "
            f"(arguments.py validate_args), so it states no model: {GIVE_MODEL}",
            SourceRef(str(path)),
        )
    layers = args.number("--num-layers", MAX_LAYERS)
    fields = _attention(args) | _mlp(args, layers)
    fields |= {
        "num_layers": layers,
        "vocab_size": _vocabulary(args),
        "tied_embeddings": not args.said("--untie-embeddings-and-output-weights"),
        "max_position_embeddings": args.number("--max-position-embeddings", MAX_WIDTH),
        "position_embedding": _position(args),
        "norm": NORMS[args.choice("--normalization", tuple(NORMS), DEFAULT_NORM)],
        "qk_norm": args.said("--qk-layernorm"),
    }
    name = name_from_path(Path(path).name)
    try:
        training = _training(args, fields)
        return ModelSpec(name=name, model_type=MODEL_TYPE, training=training, **fields)
    except ValidationError as exc:
        detail = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in detail["loc"])
        flag = SETTING_FLAGS.get(field, field)
        message = detail["msg"].removeprefix("Value error, ")
        shown = f"{flag}: {message}" if flag else message
        raise InputError(f"the script's model is not consistent: {shown}", args.at(flag)) from None


def _attention(args: _Arguments) -> dict[str, Any]:
    """Width, heads, query groups, head width and biases."""
    hidden = args.number("--hidden-size", MAX_WIDTH)
    heads = args.number("--num-attention-heads", MAX_WIDTH)
    head_dim = args.optional("--kv-channels", MAX_WIDTH)
    if head_dim is None:  # validate_args: kv_channels = hidden_size // num_attention_heads
        if hidden % heads:  # ... after asserting that the heads divide the width
            raise InputError(
                f"--hidden-size {hidden} does not divide by --num-attention-heads {heads} and "
                "no --kv-channels gives the head width (arguments.py validate_args asserts it)",
                args.at("--hidden-size"),
            )
        head_dim = hidden // heads
    groups = heads
    if args.said("--group-query-attention"):
        groups = args.whole("--num-query-groups", MAX_WIDTH, GQA_DEFAULT_GROUPS)
    # TransformerConfig.add_bias_linear (--disable-bias-linear) default True: biases on the QKV,
    # attention output and MLP (experts too) linears; add_qkv_bias default False, and
    # validate_args sets it with add_bias_linear.
    bias = not args.said("--disable-bias-linear")
    return {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": groups,
        "head_dim": head_dim,
        "qkv_bias": bias or args.said("--add-qkv-bias"),
        "out_proj_bias": bias,
        "mlp_bias": bias,
    }


def _mlp(args: _Arguments, layers: int) -> dict[str, Any]:
    """The MLP's activation and width, and the experts."""
    switches = [flag for flag in ("--swiglu", "--squared-relu", "--quick-geglu") if args.said(flag)]
    if len(switches) > 1:  # core_transformer_config_from_args: assert not args.swiglu
        raise args.fail(switches[1], f"Megatron-LM takes one of {', '.join(switches)}")
    # --swiglu: F.silu gated; --squared-relu; --quick-geglu: quick_gelu gated; else F.gelu.
    kinds = {"--swiglu": "swiglu", "--squared-relu": "squared_relu", "--quick-geglu": "geglu"}
    kind = kinds[switches[0]] if switches else "gelu"
    hidden = args.number("--hidden-size", MAX_WIDTH)
    ffn = args.optional("--ffn-hidden-size", MAX_WIDTH)
    if ffn is None and kind == "swiglu":
        share, whole = SWIGLU_SHARE
        ffn = FFN_EXPANSION * hidden * share // (whole * SWIGLU_MULTIPLE) * SWIGLU_MULTIPLE
    elif ffn is None:
        ffn = FFN_EXPANSION * hidden
    fields: dict[str, Any] = {"mlp_kind": kind, "ffn_hidden_size": ffn}
    # --num-experts default None (0 is None too: validate_args)
    experts = args.whole("--num-experts", MAX_WIDTH, 0, minimum=0)
    if not experts:
        return fields
    shared = args.optional("--moe-shared-expert-intermediate-size", MAX_WIDTH)
    mask = _moe_layers(args, layers)
    fields |= {
        "num_experts": experts,
        "experts_per_token": args.whole("--moe-router-topk", MAX_WIDTH, DEFAULT_TOPK),
        # validate_args: moe_ffn_hidden_size defaults to ffn_hidden_size
        "moe_ffn_hidden_size": args.whole("--moe-ffn-hidden-size", MAX_WIDTH, ffn),
        # one shared MLP of the total width (TransformerConfig: "Shared expert total ffn
        # hidden size"), as parameters and FLOPs count it
        "num_shared_experts": 1 if shared else 0,
        "shared_expert_ffn_hidden_size": shared or 0,
        "shared_expert_gate": bool(shared) and args.said("--moe-shared-expert-gate"),
        "moe_layers": () if all(mask) else mask,
        # the dense MLP's width, where some layer has one
        "ffn_hidden_size": 0 if all(mask) else ffn,
    }
    return fields


def _moe_layers(args: _Arguments, layers: int) -> tuple[bool, ...]:
    """--moe-layer-freq (TransformerConfig default 1) as gpt_layer_specs.py reads it: N is an
    MoE layer every N layers from the first, `[1]*3+[0]` a pattern (arguments.py
    moe_freq_type), of exactly --num-layers entries."""
    flag = "--moe-layer-freq"
    if not args.said(flag):
        return (True,) * layers
    raw = args.last[flag][0]
    if "[" not in raw:
        every = args.number(flag, MAX_LAYERS)
        return tuple(i % every == 0 for i in range(layers))
    pattern = _pattern(raw, args.fail(flag, f"{raw!r} is no list of 0 and 1 Megatron-LM reads"))
    if len(pattern) != layers:
        raise args.fail(flag, f"{len(pattern)} entries for {layers} layers (gpt_layer_specs.py)")
    return tuple(bool(x) for x in pattern)


def _pattern(text: str, error: InputError) -> list[int]:
    """A moe_freq_type list expression (`([0]*3+[1]*58)`, `[1,0,1]`), evaluated over lists of 0
    and 1, `+` and `*` only, and never longer than MAX_LAYERS; else `error`."""

    def value(node: ast.AST) -> list[int] | int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return int(node.value)
        if isinstance(node, ast.List):
            entries = [value(e) for e in node.elts]
            flags = [e for e in entries if isinstance(e, int) and e in (0, 1)]
            if len(flags) == len(entries) <= MAX_LAYERS:
                return flags
        elif isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                if len(left) + len(right) <= MAX_LAYERS:
                    return left + right
            elif isinstance(node.op, ast.Mult):
                items, times = (right, left) if isinstance(left, int) else (left, right)
                if (
                    isinstance(items, list)
                    and isinstance(times, int)
                    and 0 <= times * len(items) <= MAX_LAYERS
                ):
                    return items * times
        raise error

    try:
        result = value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise error from None
    if not isinstance(result, list):
        raise error
    return result


def _position(args: _Arguments) -> str:
    """--position-embedding-type (--use-rotary-position-embeddings: rope, validate_args)."""
    flag = "--position-embedding-type"
    kind = args.choice(flag, POSITION_CHOICES, DEFAULT_POSITION)
    if args.said("--use-rotary-position-embeddings"):
        kind = "rope"
    if kind not in POSITIONS:
        raise args.fail(
            flag, f"{kind} positions are not parplan's (learned_absolute, rope): {GIVE_MODEL}"
        )
    return POSITIONS[kind]


def _vocabulary(args: _Arguments) -> int:
    """The embedding's rows (the module's docstring)."""
    padded = args.optional("--padded-vocab-size", MAX_WIDTH)
    if padded is not None:  # tokenizer.py build_tokenizer: only when not set already
        return padded
    kind_flag = "--tokenizer-type"
    kind = args.last[kind_flag][0] if args.said(kind_flag) else None
    size = args.optional("--vocab-size", MAX_WIDTH)
    if size is not None and kind in NULL_TOKENIZERS:
        size += NULL_EOD_TOKENS
    elif size is None and kind in TOKENIZER_SIZES:
        size = TOKENIZER_SIZES[kind]
    elif size is None and kind is not None:
        raise args.fail(
            kind_flag,
            f"{kind} is sized by its tokenizer files, which parplan does not read, so the "
            f"model's vocabulary is unknown: add --vocab-size to the script, or {GIVE_MODEL}",
        )
    elif size is None:
        raise InputError(
            "the script gives no --tokenizer-type (Megatron-LM builds no tokenizer without one: "
            "tokenizer.py build_tokenizer) and no --vocab-size, so the model's vocabulary is "
            "unknown: add --tokenizer-type (GPT2BPETokenizer for GPT-2's gpt2-vocab.json and "
            f"gpt2-merges.txt) or --vocab-size to the script, or {GIVE_MODEL}",
            args.at("--vocab-file"),
        )
    tp = args.whole("--tensor-model-parallel-size", MAX_WIDTH, DEFAULT_TP)
    multiple = tp * args.whole("--make-vocab-size-divisible-by", MAX_WIDTH, DEFAULT_VOCAB_MULTIPLE)
    return math.ceil(size / multiple) * multiple  # _vocab_size_with_padding


def _training(args: _Arguments, fields: dict[str, Any]) -> TrainingSettings:
    """What the script says of how the model trains (models/training_settings.py): None where it
    does not say, so that a script rendered from the model states Megatron-LM's default."""
    rope, moe = fields["position_embedding"] == "rope", bool(fields.get("num_experts"))
    base = args.optional("--rotary-base", sys.maxsize) if rope else None  # type=int
    settings: dict[str, Any] = {
        "rope_theta": None if base is None else float(base),
        "rope_fraction": args.decimal("--rotary-percent") if rope else None,
        "norm_eps": args.decimal("--norm-epsilon"),
        "attention_dropout": args.decimal("--attention-dropout"),
        "hidden_dropout": args.decimal("--hidden-dropout"),
        "mtp_layers": args.whole("--mtp-num-layers", MAX_LAYERS, 0, minimum=0),
    }
    if moe:
        score = args.choice("--moe-router-score-function", ROUTER_SCORES, DEFAULT_ROUTER_SCORE)
        k = fields["experts_per_token"]
        # moe_utils.py topk_routing_with_score_function: a softmax over the top k sums to 1
        # unless --moe-router-pre-softmax; a sigmoid score is renormalised whenever k > 1.
        norm = not args.said("--moe-router-pre-softmax") if score == "softmax" else k > 1
        # --moe-router-load-balancing-type and --moe-aux-loss-coeff take a list (nargs='+'),
        # default aux_loss and 0.0: a single value is the model's; a list, one per type, is
        # more than TrainingSettings holds and is left unsaid.
        balancing = args.values("--moe-router-load-balancing-type")
        coeffs = args.values("--moe-aux-loss-coeff")
        coeff = args.decimal("--moe-aux-loss-coeff") if len(coeffs) == 1 else None
        settings |= {
            "seq_aux": balancing == [SEQ_AUX],
            "aux_loss_coeff": coeff,
            "router_score": score,
            "topk_norm": norm,
            "expert_bias": args.said("--moe-router-enable-expert-bias"),
            "topk_scale": args.decimal("--moe-router-topk-scaling-factor"),
            "router_groups": args.optional("--moe-router-num-groups", MAX_WIDTH),
            "router_group_topk": args.optional("--moe-router-group-topk", MAX_WIDTH),
        }
    return TrainingSettings(**settings)
