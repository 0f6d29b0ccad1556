"""Each backend fact has one home that the rules and the renderer both read (issue 12, item 6).

The pipeline split and the learned-position limit are Python functions of `parplan_gen.models`
that the constraint rules call through the formula vocabulary and the renderer calls directly;
SyncBatchNorm is read from the estimate (its bn_comm_s, which plan.json keeps); the gradients'
type in ds_config.json from the rules' grad_bytes. Each test here fails when the rules' verdict
or figure and the rendered file disagree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from formula_env import formula_value

from parplan_gen.api import estimate, load_cluster_spec, load_model
from parplan_gen.backends.megatron import facts as megatron_facts
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.models import pipeline_split as split_module
from parplan_gen.models.pipeline_split import (
    PipelineSplit,
    pipeline_split,
    pipeline_split_ok,
    stage_layers,
)
from parplan_gen.planning.decisions import TYPE_BYTES
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluation, Evaluator
from parplan_gen.render.checks import RenderError
from parplan_gen.render.render_options import RenderOptions, render_files
from parplan_gen.rules import vocabulary
from parplan_gen.rules.ruleset import RuleSet, load_rules

from conftest import builtin_rules

A100S = {"gpus": 8, "gpu": "a100-80gb"}


def rendered(evaluation: Evaluation, model: object, cluster: object) -> dict[str, str]:
    doc = PlanDocument.from_parts(
        rules=builtin_rules(), model=model, cluster=cluster, chosen=evaluation.estimate
    )
    return render_files(doc, RenderOptions())


# ---- the pipeline split -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "split"),
    [
        (32, 4, 1, (8, 8, 8)),
        (32, 2, 2, (16, 16, 16)),
        (126, 16, 1, (7, 8, 7)),  # Llama 3 405B (Sec. 3.3.2): one layer less on each end
        (61, 8, 1, (7, 8, 6)),  # DeepSeek-V3: 6 middle stages of 8, 13 left for the ends
        (30, 4, 2, (8, 8, 6)),  # middle 2 x ceil(30 / 8) = 8, ends share 14 in multiples of 2
    ],
)
def test_stage_layers(layers: int, pp: int, vpp: int, split: tuple[int, int, int]) -> None:
    assert stage_layers(layers, pp, vpp) == split
    assert pipeline_split_ok(layers, pp, vpp)


@pytest.mark.parametrize(
    ("layers", "pp", "vpp"),
    [(5, 4, 1), (32, 24, 1), (7, 1, 2), (7.5, 2, 1), (0, 2, 1), (32, 0, 1), (32, 2, float("nan"))],
)
def test_a_split_that_does_not_exist_is_refused(layers: float, pp: float, vpp: float) -> None:
    assert not pipeline_split_ok(layers, pp, vpp)


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "split"),
    [
        # Llama 3 405B on pp 16 x vpp 8: 126 + 2 = 128 = 16 x 8, one layer per virtual stage;
        # the first virtual stage is the embedding alone, the last the loss alone. Uneven
        # stages cannot: middle 8 x ceil(126 / 128) = 8, the ends share 126 - 8 x 14 = 14 < 16.
        (126, 16, 8, PipelineSplit(7, 8, 7, embedding=True, loss=True)),
        # Qwen3-235B-A22B (94 layers) on pp 8 x vpp 4 (Megatron-Bridge's 256-H100 preset):
        # 94 + 2 = 96 = 8 x 4 x 3; uneven stages cannot (middle 12, ends 22: first 14 > 12).
        (94, 8, 4, PipelineSplit(11, 12, 11, embedding=True, loss=True)),
        # 127 + 1 = 128: the loss alone is counted (the embedding too would give 129)
        (127, 16, 8, PipelineSplit(8, 8, 7, embedding=False, loss=True)),
        (126, 16, 1, PipelineSplit(7, 8, 7)),  # uneven stages first, as Llama 3 did
        (32, 4, 2, PipelineSplit(8, 8, 8)),
    ],
)
def test_pipeline_split(layers: int, pp: int, vpp: int, split: PipelineSplit) -> None:
    assert pipeline_split(layers, pp, vpp) == split
    assert stage_layers(layers, pp, vpp) == split[:3]
    assert pipeline_split_ok(layers, pp, vpp)


def test_the_rule_and_the_renderer_call_the_one_split() -> None:
    assert vocabulary.FUNCTION_BY_NAME["pipeline_split_ok"].impl is split_module.pipeline_split_ok
    assert megatron_facts.pipeline_split is split_module.pipeline_split


def test_an_uneven_split_is_allowed_and_rendered_as_checked() -> None:
    # Llama 3 8B (32 layers) on pp 6: middle stages of ceil(32 / 6) = 6, the ends share 8.
    model, cluster = load_model("llama-3-8b"), load_cluster_spec({"gpus": 48, "gpu": "h100"})
    found = estimate(model, cluster, {"pp": 6, "mbs": 1, "global_batch": 64, "seq_len": 4096})
    assert "pipeline.layers_split" not in {v.rule_id for v in found.violations}
    args = rendered(found, model, cluster)["megatron_args.sh"]
    assert "--decoder-first-pipeline-num-layers 4" in args
    assert "--decoder-last-pipeline-num-layers 4" in args
    # pp 24 leaves nothing for the ends: the rule refuses it and so does the renderer.
    cluster = load_cluster_spec({"gpus": 24, "gpu": "h100"})
    found = estimate(model, cluster, {"pp": 24, "mbs": 1, "global_batch": 24, "seq_len": 4096})
    assert "pipeline.layers_split" in {v.rule_id for v in found.violations}
    with pytest.raises(RenderError, match=r"constraint pipeline\.layers_split"):
        rendered(found, model, cluster)


# ---- the learned-position limit -----------------------------------------------------------


@pytest.mark.parametrize("position", ["learned", "rope"])
@pytest.mark.parametrize("seq_len", [1024, 2048, 4096])
def test_the_position_rule_and_the_renderer_agree(position: str, seq_len: int) -> None:
    # GPT-3's positions are a learned table of 2048 rows (Brown et al. 2020, Table 2.1).
    model = load_model("gpt3-175b").model_copy(update={"position_embedding": position})
    cluster = load_cluster_spec(A100S)
    found = estimate(model, cluster, {"tp": 8, "mbs": 1, "global_batch": 8, "seq_len": seq_len})
    refused = "model.seq_len_within_learned_positions" in {v.rule_id for v in found.violations}
    assert refused == (position == "learned" and seq_len > 2048)
    assert model.positions_cover(seq_len) is not refused
    if refused:
        with pytest.raises(RenderError, match=r"exceeds the learned position table"):
            rendered(found, model, cluster)
        return
    args = rendered(found, model, cluster)["megatron_args.sh"]
    assert f"--max-position-embeddings {max(2048, seq_len)}" in args


# ---- SyncBatchNorm ------------------------------------------------------------------------


def _sync_batchnorm_rule(rules: RuleSet) -> object:
    where = SourceRef("tests/test_backend_facts.py")
    return rules.library.compile("sync_batchnorm", where, "estimate", "bool", ("graph",))


@pytest.mark.parametrize("overlay", [None, 8])
@pytest.mark.parametrize(("mbs", "batch"), [(4, 256), (16, 256), (32, 256), (16, 16)])
def test_sync_batchnorm_is_what_the_cost_model_states(
    overlay: int | None, mbs: int, batch: int, tmp_path: Path
) -> None:
    # The rules say when BatchNorm statistics are synchronised (rules/cost/graph.yaml
    # sync_batchnorm, below bn_min_local_batch images per GPU); an overlay that lowers the
    # limit moves the estimate and the rendered note with it.
    dirs = []
    if overlay is not None:
        (tmp_path / "bn.yaml").write_text(f"formulas:\n  bn_min_local_batch: {overlay}\n")
        dirs = [tmp_path]
    rules = load_rules(dirs)
    model, cluster = load_model("resnet-50"), load_cluster_spec(A100S)
    layout = {"mbs": mbs, "global_batch": batch} | ({"tp": 8} if batch == 16 else {})
    found = estimate(model, cluster, layout, rules=rules)
    env = Evaluator(rules, "graph").env(model, cluster, found.estimate.plan, flash_attention=True)
    stated = _sync_batchnorm_rule(rules).evaluate(env)  # type: ignore[attr-defined]
    assert found.estimate.time.sync_batchnorm is stated
    assert stated == (mbs < (overlay or 32) and found.estimate.plan.dp > 1)
    launch = rendered(found, model, cluster)["launch_torchrun.sh"]
    assert ("SyncBatchNorm:" in launch) is stated


# ---- the gradients' type ------------------------------------------------------------------


@pytest.mark.parametrize("zero", [0, 1, 3])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_ds_config_reduces_gradients_in_the_type_the_estimate_counts(
    zero: int, precision: str
) -> None:
    # Without ZeRO-2 the grads and the 16-bit weights are held for the same parameters (all of
    # them, or ZeRO-3's shard), so the estimate's grads / params is grad_bytes / 2 once ZeRO-3's
    # whole weights in use and its reduce bucket (memory.yaml zero3_live_*), or ZeRO-1's reduce
    # buffers (deepspeed_reduce_buffer_bytes), are set aside.
    model, cluster = load_model("llama-3-8b"), load_cluster_spec(A100S)
    layout = {"zero_stage": zero, "mbs": 1, "global_batch": 64, "precision": precision}
    found = estimate(model, cluster, layout | {"seq_len": 2048}, backend="deepspeed")
    memory = found.estimate.memory
    backend = found.estimate.backend.name  # type: ignore[union-attr]
    env = Evaluator(builtin_rules(), backend=backend).env(  # type: ignore[arg-type]
        model, cluster, found.estimate.plan, flash_attention=True
    )
    live_params = live_grads = 0.0
    if zero == 3:
        live_params = formula_value("zero3_live_params", env)
        live_grads = formula_value("zero3_live_grad_bytes", env)
    else:
        live_grads = formula_value("deepspeed_reduce_buffer_bytes", env)
    counted = 2 * (memory.grads - live_grads) / (memory.params - 2 * live_params)
    config = json.loads(rendered(found, model, cluster)["ds_config.json"])
    written = config["communication_data_type"]
    assert written == ("fp32" if zero == 0 else precision)
    assert TYPE_BYTES[written] == pytest.approx(counted, rel=1e-6)


# ---- optimizer sharding -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zero", "distributed_optimizer"), [(0, False), (0, True), (1, False), (2, False)]
)
def test_megatron_shards_the_optimizer_when_the_estimate_does(
    zero: int, distributed_optimizer: bool
) -> None:
    # The estimate holds the optimizer states (12 bytes per parameter) of a 1/dp shard or of
    # every parameter (6 x the 16-bit weights); megatron_args.sh says which the same way.
    model, cluster = load_model("llama-3-8b"), load_cluster_spec(A100S)
    layout = {"zero_stage": zero, "distributed_optimizer": distributed_optimizer}
    found = estimate(model, cluster, layout | {"mbs": 1, "global_batch": 64, "seq_len": 2048})
    memory = found.estimate.memory
    sharded = memory.optimizer < 6 * memory.params
    assert sharded == (zero > 0 or distributed_optimizer)
    files = rendered(found, model, cluster)
    if zero > 0:  # Megatron-LM has no ZeRO stages: the layout is DeepSpeed's, no Megatron file
        assert found.estimate.backend.name == "deepspeed"
        assert "megatron_args.sh" not in files
        return
    assert ("--use-distributed-optimizer" in files["megatron_args.sh"]) is sharded
