"""Feed a rendered megatron_args.sh to Megatron-Core, as Megatron-LM's training loop does.

The script's words are the ones bash gives its commands (inputs/shell_script.py expands the
variables the script sets, `${VAR:-default}` and arrays as bash does), and each `--foo-bar` argument becomes the config field `foo_bar`, the way
Megatron-LM's `core_transformer_config_from_args` (megatron/training/arguments.py) builds
Megatron-Core's configs: every dataclass field taken from the argument of the same name, plus
the few arguments it renames or derives (RENAMED, NEGATED and `_derived`). Constructing the
configs runs their checks (TransformerConfig/MLATransformerConfig.__post_init__,
DistributedDataParallelConfig, OptimizerConfig). The parallel layout then goes through
Megatron-Core's own `parallel_state.initialize_model_parallel` on a fake process group of the
script's world size (torchrun's --nnodes x --nproc_per_node), and the batch through its
num-microbatches calculator.

Megatron-LM's own argument parser (megatron/training/arguments.py) is not in the megatron-core
package, so arguments that only it reads are listed in TRAINING_ONLY, not parsed.
"""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parplan_gen.inputs.shell_script import script_words as bash_words

from consumer_support import consumer

# Megatron-LM argument -> Megatron-Core field where the names differ (core_transformer_config_
# from_args; --fp8-format has dest `fp8` in arguments.py).
RENAMED = {
    "num_experts": "num_moe_experts",
    "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
    "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
    "fp8_format": "fp8",
    "norm_epsilon": "layernorm_epsilon",  # TransformerConfig: arg_names ["--norm-epsilon"]
}
NEGATED = {  # store_false switches in arguments.py
    "disable_bias_linear": "add_bias_linear",
    "no_gradient_accumulation_fusion": "gradient_accumulation_fusion",
}
# Arguments no Megatron-Core config takes: Megatron-LM's training loop, data pipeline, GPTModel
# builder or validate_args read them (megatron/training/arguments.py, pretrain_gpt.py): the RoPE
# base, rotated share and scaling are GPTModel's constructor arguments (pretrain_gpt.py model_provider), the LR
# decay style and warmup the scheduler's (training.py get_optimizer_param_scheduler); the
# asynchronous save and its worker are save_checkpoint's (checkpointing.py; core_v0.16.1
# training_config.py CheckpointConfig async_save, use_persistent_ckpt_worker, ckpt_format); the
# throughput log, the time-limit exit and the SIGTERM save are the training loop's
# (training.py; core_v0.16.1 training_config.py LoggerConfig.log_throughput, TrainingConfig
# exit_duration_in_mins, exit_signal_handler).
TRAINING_ONLY = frozenset(
    """seq_length max_position_embeddings position_embedding_type untie_embeddings_and_output_
    weights swiglu squared_relu group_query_attention multi_latent_attention num_layers_per_
    virtual_pipeline_stage num_virtual_stages_per_pipeline_rank micro_batch_size global_batch_
    size train_iters log_interval eval_interval eval_iters data_path split tokenizer_type
    tokenizer_model mock_data vocab_size save load save_interval ckpt_format rotary_base rotary_
    percent use_rope_scaling rope_scaling_factor lr_decay_style lr_warmup_fraction async_save
    use_persistent_ckpt_worker log_throughput exit_duration_in_mins exit_signal_handler""".replace(
        "_\n    ", "_"
    ).split()
)


@dataclass(frozen=True)
class MegatronReading:
    config: Any  # TransformerConfig or MLATransformerConfig
    ddp: Any  # DistributedDataParallelConfig
    optimizer: Any  # OptimizerConfig
    world: int
    dp: int
    micro_batches: int
    unread: tuple[str, ...]  # arguments neither a core config nor TRAINING_ONLY knows


def script_words(path: Path) -> list[str]:
    """The words the script's commands get, as bash expands them."""
    return [word for word, _ in bash_words(path.read_text(encoding="utf-8"))]


def arguments(words: list[str], switches: set[str]) -> dict[str, str | bool]:
    """`--foo-bar VALUE` -> {"foo_bar": "VALUE"}, a switch -> True; a later one wins."""
    out: dict[str, str | bool] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        flag, eq, inline = word.partition("=")
        name = flag[2:].replace("-", "_")
        following = words[i + 1] if i + 1 < len(words) else "--"
        if eq:
            out[name] = inline
        elif name in switches or following.startswith("--"):
            out[name] = True
        else:
            out[name] = following
    return out


def _types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(name: str, raw: str | bool, hint: Any) -> Any:
    """An argument's text as the field's declared type (int, float, bool, Literal, str)."""
    options = (
        typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType)
        else (hint,)
    )
    if raw is True:
        return True
    for option in options:
        if typing.get_origin(option) is typing.Literal:
            if raw not in typing.get_args(option):
                raise ValueError(f"{name} = {raw!r}: Megatron-Core declares {option}")
            return raw
    for kind in (int, float):
        if kind in options:
            try:
                return kind(raw)
            except ValueError:
                continue
    if str in options:  # e.g. --moe-router-load-balancing-type: str or a list of them
        return raw
    if any(typing.get_origin(o) in (list, typing.List) for o in options):  # noqa: UP006
        return _pattern(raw)
    return raw


def _pattern(text: str) -> list[int]:
    """A --moe-layer-freq pattern such as `([0]*3+[1]*58)`, which arguments.py evaluates:
    lists of integers, `+` and `*` only."""

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(f"--moe-layer-freq {text}: not a list pattern")

    return value(ast.parse(text, mode="eval").body)


def _fill(cls: type, args: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """Every field of the dataclass `cls` that an argument of the same name sets."""
    hints, kwargs = _types(cls), {}
    for field in dataclasses.fields(cls):
        if field.name in args:
            kwargs[field.name] = _convert(field.name, args[field.name], hints[field.name])
            used.add(field.name)
    return kwargs


def _dtypes(args: dict[str, Any], torch: Any) -> dict[str, Any]:
    """The precision-aware optimizer's types as torch dtypes, as arguments.py parse_args maps
    them (map_dtype: fp32, bf16, fp16, fp8 -> float32, bfloat16, float16, uint8)."""
    names = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    names["fp8"] = torch.uint8
    fields = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
    return {field: names[args[field]] for field in fields if field in args}


def _derived(args: dict[str, Any], torch: Any) -> dict[str, Any]:
    """What core_transformer_config_from_args and validate_args derive rather than copy."""
    out: dict[str, Any] = {"num_query_groups": None}
    if args.get("group_query_attention"):
        out["num_query_groups"] = int(args["num_query_groups"])
    if args.get("swiglu"):
        out.update(activation_func=torch.nn.functional.silu, gated_linear_unit=True)
    if args.get("squared_relu"):
        out["activation_func"] = consumer("megatron.core.activations").squared_relu
    dtype = torch.bfloat16 if args.get("bf16") else torch.float16 if args.get("fp16") else None
    if dtype is not None:
        out.update(params_dtype=dtype, pipeline_dtype=dtype)
    pp = int(args.get("pipeline_model_parallel_size", 1))
    if "num_layers_per_virtual_pipeline_stage" in args:  # validate_args, even stages
        # with the embedding and the loss counted as layers when the script says so
        accounted = sum(
            bool(args.get(f"account_for_{part}_in_pipeline_split"))
            for part in ("embedding", "loss")
        )
        per_stage = (int(args["num_layers"]) + accounted) // pp
        out["virtual_pipeline_model_parallel_size"] = per_stage // int(
            args["num_layers_per_virtual_pipeline_stage"]
        )
    elif "num_virtual_stages_per_pipeline_rank" in args:
        out["virtual_pipeline_model_parallel_size"] = int(
            args["num_virtual_stages_per_pipeline_rank"]
        )
    if int(args.get("cpu_offloading_num_layers", 0)) > 0:  # validate_args (core_v0.16.0)
        out["cpu_offloading"] = True
    return out


_TORCHRUN = frozenset({"nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id"})
_SWITCHES = frozenset(
    {"swiglu", "squared_relu", "group_query_attention", "multi_latent_attention", "mock_data"}
    | {"untie_embeddings_and_output_weights", "use_rope_scaling", *NEGATED}
)


# The Transformer Engine functions TransformerConfig.__post_init__ requires for
# --moe-permute-fusion (megatron/core/transformer/moe/moe_utils.py imports them from TE >= 2.1;
# without it they are None or not defined).
TE_PERMUTATION = (
    "fused_permute",
    "fused_permute_with_probs",
    "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs",
    "fused_unpermute",
)


@contextmanager
def _transformer_engine_permutation() -> Iterator[None]:
    """Megatron-Core's MoE utilities as they are with Transformer Engine installed, which a
    Megatron-LM run has (--transformer-impl transformer_engine) and this CPU-only environment
    has not: TransformerConfig's check that TE's fused permutation exists then passes for the
    fields it is given, and every other check runs as it does on a GPU. The stand-ins refuse to
    be called."""
    utils = consumer("megatron.core.transformer.moe.moe_utils")

    def absent(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("Transformer Engine's fused permutation is not installed here")

    missing = object()
    saved = {name: getattr(utils, name, missing) for name in TE_PERMUTATION}
    for name, value in saved.items():
        if value is None or value is missing:  # None, or never defined, without TE
            setattr(utils, name, absent)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                delattr(utils, name)
            else:
                setattr(utils, name, value)


def megatron_reading(path: Path) -> MegatronReading:
    """Megatron-Core's configs, data-parallel size and micro-batches per step for the script at
    `path`; raises what Megatron-Core raises for arguments it refuses."""
    torch = consumer("torch")
    core = consumer("megatron.core.transformer.transformer_config")
    ddp_class = consumer("megatron.core.distributed").DistributedDataParallelConfig
    optimizer_class = consumer("megatron.core.optimizer").OptimizerConfig
    classes = (core.MLATransformerConfig, ddp_class, optimizer_class)
    switches = _SWITCHES | {
        name for cls in classes for name, hint in _types(cls).items() if hint is bool
    }
    args = arguments(script_words(path), switches)
    named = {RENAMED.get(k, k): v for k, v in args.items()}
    named.update({field: False for arg, field in NEGATED.items() if args.get(arg) is True})
    cls = (
        core.MLATransformerConfig if args.get("multi_latent_attention") else core.TransformerConfig
    )
    used: set[str] = set()
    with _transformer_engine_permutation():
        config = cls(**(_fill(cls, named, used) | _derived(args, torch)))
    ddp = ddp_class(**_fill(ddp_class, named, used))
    optimizer = optimizer_class(**(_fill(optimizer_class, named, used) | _dtypes(args, torch)))
    world = int(args["nnodes"]) * int(args["nproc_per_node"])
    dp, micro = _parallel_state(
        config, world, int(args["micro_batch_size"]), int(args["global_batch_size"])
    )
    unread = tuple(
        arg
        for arg in args
        if RENAMED.get(arg, NEGATED.get(arg, arg)) not in used
        and arg not in TRAINING_ONLY | _TORCHRUN
    )
    return MegatronReading(config, ddp, optimizer, world, dp, micro, unread)


def _parallel_state(config: Any, world: int, mbs: int, global_batch: int) -> tuple[int, int]:
    """Data-parallel size and micro-batches per step from Megatron-Core's own parallel_state and
    num-microbatches calculator, on a fake process group of `world` ranks (rank 0)."""
    dist = consumer("torch.distributed")
    fake = consumer("torch.testing._internal.distributed.fake_pg")
    state = consumer("megatron.core.parallel_state")
    calculator = consumer("megatron.core.num_microbatches_calculator")
    dist.init_process_group(backend="fake", store=fake.FakeStore(), world_size=world, rank=0)
    try:
        state.initialize_model_parallel(
            tensor_model_parallel_size=config.tensor_model_parallel_size,
            pipeline_model_parallel_size=config.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=config.virtual_pipeline_model_parallel_size,
            context_parallel_size=config.context_parallel_size,
            expert_model_parallel_size=config.expert_model_parallel_size,
            expert_tensor_parallel_size=config.expert_tensor_parallel_size,
            create_gloo_process_groups=False,
        )
        dp = state.get_data_parallel_world_size()
        calculator.init_num_microbatches_calculator(0, None, global_batch, mbs, dp, False)
        return dp, calculator.get_num_microbatches()
    finally:
        calculator.unset_num_microbatches_calculator()
        state.destroy_model_parallel()
        dist.destroy_process_group()


def layout_read(reading: MegatronReading) -> dict[str, Any]:
    """The plan fields Megatron-Core understood (names as in plan.json)."""
    c = reading.config
    return {
        "dp": reading.dp,
        "tp": c.tensor_model_parallel_size,
        "pp": c.pipeline_model_parallel_size,
        "cp": c.context_parallel_size,
        "ep": c.expert_model_parallel_size,
        "etp": c.expert_tensor_parallel_size,  # ModelParallelConfig: tp when not given
        "vpp": c.virtual_pipeline_model_parallel_size or 1,
        "sequence_parallel": c.sequence_parallel,
        "grad_accum": reading.micro_batches,
        "recompute": c.recompute_granularity or "none",
        "precision": "fp8" if c.fp8 else "bf16" if c.bf16 else "fp16" if c.fp16 else "fp32",
    }


def model_read(reading: MegatronReading) -> dict[str, Any]:
    """The model fields Megatron-Core understood (names as in plan.json's model)."""
    c = reading.config
    return {
        "num_layers": c.num_layers,
        "hidden_size": c.hidden_size,
        "num_attention_heads": c.num_attention_heads,
        "num_kv_heads": c.num_query_groups or c.num_attention_heads,
        "num_experts": c.num_moe_experts or 0,
        "experts_per_token": c.moe_router_topk if c.num_moe_experts else 0,
    }


def sharding_read(reading: MegatronReading) -> str:
    """How the script shards training state, in ZeRO's terms: the distributed optimizer shards
    the optimizer states (ZeRO-1); Megatron-FSDP's strategies optim / optim_grads /
    optim_grads_params are ZeRO-1/2/3."""
    ddp = reading.ddp
    if ddp.use_megatron_fsdp:
        strategies = ("no_shard", "optim", "optim_grads", "optim_grads_params")
        return f"zero-{strategies.index(ddp.data_parallel_sharding_strategy)}"
    return "zero-1" if ddp.use_distributed_optimizer else "zero-0"
