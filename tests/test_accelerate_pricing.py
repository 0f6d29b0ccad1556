"""Accelerate's FSDP2 is priced from the same terms as torchtitan's, differing where its code
does (docs/backends.md, "accelerate"), and its model as the other Hugging Face backends' is.

Each difference is worked from the source it follows, on Llama 3 8B (V = 128256, h = 4096;
models/llama3/__init__.py, the preset's config) on 16 H100s, FSDP2 over dp 16:
- the shards are fp32 on both (accelerate 1.16.0 utils/fsdp_utils.py fsdp2_prepare_model
  upcasts them; torchtitan builds the model in fp32): the same optimizer figure;
- both keep only the final norm and LM head gathered from the forward to the backward and shard
  the untied embedding as a unit of its own, resharded after forward (fsdp2_prepare_model;
  torchtitan 0.3 distributed/fsdp.py apply_fsdp_to_decoder): the same parameters. The published
  runs' torchtitan (9dec370, e7c0cae: apply_fsdp) left the embedding to the root group, which
  stays gathered: 16-bit weights of the embedding, 2 x V x h bytes, more there;
- torchtitan reduces gradients in fp32 and Accelerate in the mixed-precision type
  (utils/dataclasses.py set_mixed_precision: reduce_dtype = param_dtype): a block's unsharded
  gradients before the reduce-scatter are 4 and 2 bytes a parameter;
- the activations of a transformers model (Korthikanti, fp32 logits) are DeepSpeed's;
- Accelerate accumulates gradients under no_sync (accelerator.py accumulate, no_sync:
  set_requires_gradient_sync(False) on FSDP2), so FSDP2 keeps every block's unsharded gradient
  until the step's last micro-batch reduce-scatters it; torchtitan syncs every micro-batch (its
  train loop never turns gradient sync off but for the chunked loss's LM head).
"""

from __future__ import annotations

import pytest

import parplan_gen
from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.layout import build_layout
from parplan_gen.planning.evaluate import named_formula
from parplan_gen.rules.ruleset import load_rules

CLUSTER = {"gpus": 16, "gpu": "h100"}
LAYOUT = {"zero_stage": 3, "mbs": 1, "global_batch": 16, "seq_len": 4096, "recompute": "full"}
VOCAB, HIDDEN, LAYERS = 128256, 4096, 32  # Llama 3 8B


def memory(backend: str, **changes: object):
    found = parplan_gen.estimate("llama-3-8b", CLUSTER, LAYOUT | changes, backend=backend)
    assert found.runnable, found.violations
    return found.estimate.memory


def formula(
    name: str, backend: str, env: dict[str, object] | None = None, **changes: object
) -> object:
    """The named formula `name` for the layout with `changes`, its names changed by `env`."""
    rules = load_rules()
    layout = build_layout(16, **(LAYOUT | changes))
    values = CostModel(rules, "transformer", backend).layout_env(
        load_model("llama-3-8b"), load_cluster_spec(CLUSTER), layout
    )
    return named_formula(rules, name).evaluate(values | (env or {}))


def test_accelerate_fsdp2_differs_from_torchtitans_where_its_code_does() -> None:
    titan, accelerate = memory("torchtitan"), memory("accelerate")
    assert accelerate.optimizer == pytest.approx(titan.optimizer)  # fp32 shards, 8 B moments
    # the embedding, resharded after forward on both (torchtitan 0.3's wrapping), gathered all
    # step under the published runs' torchtitan (train.tt_fsdp_units_03 false)
    assert titan.params == pytest.approx(accelerate.params)
    older = {"train.tt_fsdp_units_03": False}
    kept = formula("fsdp2_root_params", "torchtitan", env=older)
    assert kept - formula("fsdp2_root_params", "accelerate") == VOCAB * HIDDEN
    spec = load_model("llama-3-8b").formula_values(4096)
    per_layer = (spec["model.params"] - spec["model.params_embedding"]
                 - spec["model.params_output"]) / LAYERS  # fmt: skip
    # two 16-bit bytes less a parameter for the one block whose gradients wait for the reduce
    assert titan.grads - accelerate.grads == pytest.approx((4 - 2) * per_layer)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_accelerate_reduces_in_its_mixed_precision_type(precision: str) -> None:
    assert formula("zero3_reduce_bytes", "torchtitan") == 4
    assert formula("zero3_reduce_bytes", "accelerate", precision=precision) == 2
    assert formula("fsdp2_fp32_shards", "accelerate") is True


def test_accelerate_runs_a_transformers_model_as_deepspeed_does() -> None:
    assert memory("accelerate").activations == pytest.approx(memory("deepspeed").activations)


def test_accelerate_context_parallelism_is_torchs_allgather_rotation() -> None:
    cp = {"cp": 2, "seq_len": 8192}
    assert formula("cp_allgather_rotation", "accelerate", **cp) is True
    assert formula("cp_allgather_rotation", "torchtitan", **cp) is True
    assert formula("cp_allgather_rotation", "megatron", **cp) is False


def test_accelerate_accumulation_holds_the_whole_models_gradients_once_a_step() -> None:
    spec = load_model("llama-3-8b").formula_values(4096)
    per_layer = (spec["model.params"] - spec["model.params_embedding"]
                 - spec["model.params_output"]) / LAYERS  # fmt: skip
    one, four = memory("accelerate"), memory("accelerate", global_batch=64)  # accum 1, 4
    # four micro-batches: every 16-bit unsharded gradient (tp 1: the whole model) stays until the
    # last one's reduce-scatter, instead of one block's before its reduce-scatter
    assert four.grads - one.grads == pytest.approx(2 * (spec["model.params"] - per_layer))
    titan_one, titan_four = memory("torchtitan"), memory("torchtitan", global_batch=64)
    assert titan_four.grads == pytest.approx(titan_one.grads)


def test_accelerate_reduce_scatters_once_a_step_and_gathers_every_micro_batch() -> None:
    four = {"global_batch": 64}
    assert formula("zero3_scatter_rounds", "accelerate", **four) == 1
    assert formula("zero3_rounds", "accelerate", **four) == 4
    assert formula("zero3_scatter_rounds", "torchtitan", **four) == 4
    gather, scatter, layers = (
        formula(n, "accelerate", **four)
        for n in ("zero3_gather_s", "zero3_scatter_s", "layers_per_stage")
    )
    # forward and backward gathers of each of the four micro-batches, one reduce-scatter a layer
    comm = formula("zero3_comm_s", "accelerate", **four)
    assert comm == pytest.approx(layers * (4 * 2 * gather + scatter))  # type: ignore[operator]
