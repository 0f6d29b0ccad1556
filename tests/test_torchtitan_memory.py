"""What torchtitan keeps in memory (rules/cost/memory.yaml), worked by hand for Llama 3 8B
(h = 4096, 32 query and 8 KV heads of 128, SwiGLU ffn = 14336, V = 128,256, 32 layers).

Op-level selective checkpointing (torchtitan 9dec370 parallelisms/parallelize_llama.py
_apply_ac_to_transformer_block): the outputs of aten.mm and of the SDPA kernel are saved except
every second mm; a block's mms run wq, wk, wv, wo, w1, w3, w2, so wq (4096), wv (1024), w1
(14336) and w2 (4096) are kept, with the attention output (4096) and the block input (4096):
31,744 16-bit elements, plus the fp32 logsumexp of 32 heads (128 bytes).
  2 x 31,744 + 128 = 63,616 bytes per token and layer.
With tp = 2: the block input, q, v, w1 and attention outputs halve (2048 + 2048 + 512 + 7168 +
2048), w2's mm output is the full partial sum (4096) and both reduce-scatter outputs are kept
(2 x 2048): 22,016 elements, 64 bytes of logsumexp.
  2 x 22,016 + 64 = 44,096 bytes.
The loss (train.py loss_fn, cross_entropy over fp32 logits) peaks in its backward at 12 bytes
per token and vocabulary entry, and the final norm and LM head keep 4h + 2h + 2h = 8h bytes per
token: with mbs 2 x 8192 = 16,384 tokens,
  16,384 x (32 x 63,616 + 12 x 128,256 + 8 x 4096) = 59,106,131,968 bytes of activations.
That is the torchtitan the calibration rows ran. torchtitan 0.3, which a plan's files run, takes
the LM head and the loss a sequence chunk at a time (components/loss.py ChunkedLossWrapper,
num_chunks 8, the llama3 configs' loss): one chunk's 16-bit logits and loss tensors, (12 + 2) x
V / 8 bytes per token, an fp32 accumulator of the hidden states' gradient, 4h, the chunks
themselves, copies at mbs 2 (2h), and the LM head's fp32 gradient, which FSDP2 keeps unsharded
while chunks 0-6 run with gradient sync off (4 x V x h = 4 x 525,336,576):
  16,384 x (32 x 63,616 + 14 x 128,256 / 8 + 8 x 4096 + 6 x 4096) + 2,101,346,304
  = 40,071,331,840 bytes.
Compiled with the model (torchtitan since bbb1b616e with training.compile; 0.3 where the plan
compiles, an FP8 plan), the loss saves the 16-bit logits and two fp32 values a token, and its
backward writes one 16-bit gradient (benchmarks/compiled_loss_memory.py): 4 bytes per token and
vocabulary entry, the logits included, at tp 1:
  16,384 x (32 x 63,616 + 4 x 128,256 + 8 x 4096) = 42,295,361,536 bytes whole,
  16,384 x (32 x 63,616 + 4 x 128,256 / 8 + 8 x 4096 + 6 x 4096) + 2,101,346,304
  = 37,444,648,960 bytes chunked.
"""

from __future__ import annotations

from typing import Any

from formula_env import formula_env, formula_value

OP_SAC_BYTES = 63_616
OP_SAC_BYTES_TP2 = 44_096
TT_8B_ACTIVATION_BYTES = 59_106_131_968
TT03_8B_ACTIVATION_BYTES = 40_071_331_840
TT_8B_COMPILED_LOSS_BYTES = 42_295_361_536
TT03_8B_COMPILED_LOSS_BYTES = 37_444_648_960


def _value(
    name: str,
    backend: str,
    gpus: int = 8,
    *,
    chunked_loss: bool = False,
    loss_compiled: bool = False,
    fused_qkv: bool = False,
    **layout: Any,
) -> float:
    options = {"zero_stage": 3} | layout
    env = formula_env("llama-3-8b", {"gpus": gpus, "gpu": "h100"}, backend, **options)
    facts = {
        "train.chunked_loss": chunked_loss,
        "train.loss_compiled": loss_compiled,
        "train.tt_fused_qkv": fused_qkv,
    }
    return formula_value(name, env | facts)


def _act_per_token_layer(backend: str, **layout: Any) -> float:
    return _value("act_per_token_layer", backend, **layout)


def test_torchtitan_selective_keeps_half_the_matmul_outputs() -> None:
    assert _act_per_token_layer("torchtitan", recompute="selective") == OP_SAC_BYTES


def test_torchtitan_03_keeps_the_fused_qkv_projection_whole() -> None:
    """0.3's block runs one fused QKV mm first (models/llama3/__init__.py fuse_qkv=True): its
    output, 4096 + 2 x 1024 elements, is kept where 9dec370 kept wq's and wv's, 4096 + 1024: one
    more KV width, 2 x 1024 bytes a token and layer. The matmuls it recomputes are wo and w3,
    (4096 + 14336) / (2 x 4096 + 2 x 1024 + 3 x 14336) = 18,432 / 53,248 of the block's linear
    FLOPs; 9dec370 recomputed wk too: 19,456 / 53,248."""
    fused = _value("act_per_token_layer", "torchtitan", recompute="selective", fused_qkv=True)
    assert fused == OP_SAC_BYTES + 2 * 1024
    plan_env = formula_env("llama-3-8b", {"gpus": 8, "gpu": "h100"}, "torchtitan", zero_stage=3)
    assert plan_env["train.tt_fused_qkv"] is True  # a plan's files run 0.3
    share = {
        q: _value("linear_recompute_passes", "torchtitan", recompute="selective", fused_qkv=q)
        for q in (True, False)
    }
    assert share[True] == 18_432 / 53_248
    assert share[False] == 19_456 / 53_248
    full = _value("linear_recompute_passes", "torchtitan", recompute="full", fused_qkv=True)
    assert full == 1


def test_its_tensor_parallel_ranks_split_it() -> None:
    kept = _act_per_token_layer("torchtitan", recompute="selective", tp=2, sequence_parallel=True)
    assert kept == OP_SAC_BYTES_TP2


def test_torchtitan_8b_activations_hold_the_fp32_loss_backward() -> None:
    activations = _value(
        "activation_bytes", "torchtitan", mbs=2, global_batch=16, recompute="selective"
    )
    assert activations == TT_8B_ACTIVATION_BYTES


def test_torchtitan_03_chunks_the_loss() -> None:
    layout = {"mbs": 2, "global_batch": 16, "recompute": "selective"}
    chunked = _value("activation_bytes", "torchtitan", chunked_loss=True, **layout)
    assert chunked == TT03_8B_ACTIVATION_BYTES
    # a plan's files run torchtitan 0.3: the estimate of a plan is the chunked one
    plan_env = formula_env("llama-3-8b", {"gpus": 8, "gpu": "h100"}, "torchtitan", zero_stage=3)
    assert plan_env["train.chunked_loss"] is True
    # other backends: Korthikanti's 4 bytes per token and vocabulary entry, chunked or not
    megatron = {"zero_stage": 0, **layout}
    assert _value("logits_bytes", "megatron", chunked_loss=True, **megatron) == _value(
        "logits_bytes", "megatron", **megatron
    )


def test_a_compiled_loss_keeps_its_16_bit_logits_and_gradient() -> None:
    layout = {"mbs": 2, "global_batch": 16, "recompute": "selective"}
    whole = _value("activation_bytes", "torchtitan", loss_compiled=True, **layout)
    assert whole == TT_8B_COMPILED_LOSS_BYTES
    chunked = _value(
        "activation_bytes", "torchtitan", chunked_loss=True, loss_compiled=True, **layout
    )
    assert chunked == TT03_8B_COMPILED_LOSS_BYTES
    # the loss-parallel loss (tp > 1) is priced eager, compiled or not
    tp2 = {"tp": 2, "sequence_parallel": True, **layout}
    assert _value("logits_bytes", "torchtitan", loss_compiled=True, **tp2) == _value(
        "logits_bytes", "torchtitan", **tp2
    )


def test_torchtitan_plans_compile_their_loss_unless_the_layout_says_not() -> None:
    def compiled(backend: str, precision: str, **layout: Any) -> bool:
        env = formula_env(
            "llama-3-8b",
            {"gpus": 8, "gpu": "h100"},
            backend,
            zero_stage=3,
            precision=precision,
            **layout,
        )
        return bool(env["train.loss_compiled"])

    # torchtitan's plans write --compile.enable with "loss" in --compile.components
    # (CompileConfig.components; components/loss.py BaseLoss._maybe_compile), in either
    # precision; a layout read from a file that does not (Layout.loss_compiled) is priced eager
    assert compiled("torchtitan", "fp8") and compiled("torchtitan", "bf16")
    assert not compiled("torchtitan", "fp8", loss_compiled=False)
    assert not compiled("megatron", "fp8")  # Megatron-LM computes its own loss, uncompiled


def test_under_pp_fsdp2_keeps_the_stage_whole_with_fp32_grads() -> None:
    # apply_fsdp(reshard_after_forward=False) with pp and stage.py's no-sync backwards: every
    # weight of the stage stays gathered and its grads accumulate unsharded in fp32.
    layout = {"pp": 2, "mbs": 1, "global_batch": 64, "recompute": "full"}
    stage = _value("params_per_gpu", "torchtitan", 16, **layout)
    assert _value("zero3_live_params", "torchtitan", 16, **layout) == stage
    assert _value("zero3_live_grad_bytes", "torchtitan", 16, **layout) == 4 * stage


def test_other_backends_keep_korthikantis_selective_recompute() -> None:
    # Megatron's selective recompute drops only the attention scores, which flash attention
    # never stores: the same bytes as no recompute, more than torchtitan keeps.
    megatron = _act_per_token_layer("megatron", recompute="selective", zero_stage=0)
    assert megatron == _act_per_token_layer("megatron", recompute="none", zero_stage=0)
    assert megatron > OP_SAC_BYTES


def test_torch_pipelining_keeps_each_in_flight_stage_output() -> None:
    # torch/distributed/pipelining/stage.py forward_one_chunk caches each micro-batch's stage
    # output until its backward: 1F1B on 2 stages has 2 micro-batches in flight on the first;
    # interleaved with 2 chunks a rank, p v + p - 1 = 2 x 2 + 2 - 1 = 5 chunk forwards.
    layout = {"pp": 2, "mbs": 1, "global_batch": 64, "recompute": "full"}
    assert _value("pipeline_stage_outputs", "torchtitan", 16, **layout) == 2
    assert _value("pipeline_stage_outputs", "torchtitan", 16, vpp=2, **layout) == 5
    # no pipeline, nothing sent; Megatron-LM frees an output once sent (deallocate_output_tensor)
    assert _value("pipeline_stage_outputs", "torchtitan", 16, **(layout | {"pp": 1})) == 0
    assert _value("pipeline_stage_outputs", "megatron", 16, **(layout | {"zero_stage": 0})) == 0
    # DeepSpeed's pipeline engine keeps each micro-batch's outputs in its buffers until the
    # backward too (runtime/pipe/engine.py pipe_buffers['outputs'])
    assert _value("pipeline_stage_outputs", "deepspeed", 16, **(layout | {"zero_stage": 1})) == 2
    # ... each one [8,192 tokens, h 4,096] 16-bit tensor (no tp): 2 x 8,192 x 8,192 bytes more
    # than the blocks' checkpoints and the loss's peak
    extra = (
        "activation_bytes - tokens_per_microbatch * stored_layers * act_full_recompute_token_layer"
        " - max(recompute_layer_bytes, logits_bytes)"
    )
    assert _value(extra, "torchtitan", 16, **layout) == 2 * 8192 * 8192
