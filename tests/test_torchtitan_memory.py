"""torchtitan's op-level selective activation checkpointing in the memory model
(rules/cost/memory.yaml `tt_sac_token_layer`), worked by hand for Llama 3 8B.

torchtitan 0.3 distributed/activation_checkpoint.py, class SelectiveAC, keeps the outputs of the
compute-intensive ops except every second matmul and recomputes the rest. Per token and layer,
16-bit (2 bytes): the block input (h = 4096) and the attention output (h), plus half of the
matmul outputs: q 32 x 128 = 4096, k and v 8 x 128 = 1024 each, the output projection 4096,
w1 and w3 14336 each (SwiGLU), w2 4096; 43,008 in all, 21,504 kept.
  2 x (2 x 4096 + 21504) = 59,392 bytes.
"""

from __future__ import annotations

from typing import Any

from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.layout import build_layout
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.ruleset import builtin_rules

OP_SAC_BYTES = 59_392


def _act_per_token_layer(backend: str, **layout: Any) -> float:
    options = {"mbs": 1, "global_batch": 64, "seq_len": 8192, "zero_stage": 3} | layout
    plan = build_layout(8, **options)
    model, cluster = load_model("llama-3-8b"), load_cluster_spec({"gpus": 8, "gpu": "h100"})
    env = Evaluator(builtin_rules(), backend=backend).env(  # type: ignore[arg-type]
        model, cluster, plan, flash_attention=True
    )
    formula = builtin_rules().library.compile(
        "act_per_token_layer", SourceRef("test"), "estimate", "number"
    )
    return float(formula.evaluate(env))


def test_torchtitan_selective_keeps_half_the_matmul_outputs() -> None:
    assert _act_per_token_layer("torchtitan", recompute="selective") == OP_SAC_BYTES


def test_its_tensor_parallel_ranks_split_it() -> None:
    kept = _act_per_token_layer("torchtitan", recompute="selective", tp=2, sequence_parallel=True)
    assert kept == OP_SAC_BYTES / 2


def test_other_backends_keep_korthikantis_selective_recompute() -> None:
    # Megatron's selective recompute drops only the attention scores, which flash attention
    # never stores: the same bytes as no recompute, more than torchtitan keeps.
    megatron = _act_per_token_layer("megatron", recompute="selective", zero_stage=0)
    assert megatron == _act_per_token_layer("megatron", recompute="none", zero_stage=0)
    assert megatron > OP_SAC_BYTES
