"""Constraint rules (rules/constraints/layout.yaml, memory.yaml and each backend's
constraints.yaml) and their evaluation (constraints.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.inputs.errors import FormulaError
from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.kind import BACKEND_NAMES
from parplan_gen.models.pipeline_split import pipeline_split, stage_layers
from parplan_gen.models.presets import load_graph_preset, load_preset
from parplan_gen.planning.constraints import Constraints, estimate_env, phase_of, violation
from parplan_gen.rules.ruleset import RuleSet, load_rules

PLAN_DEFAULTS: dict[str, Any] = {
    "plan.dp": 8, "plan.tp": 1, "plan.pp": 1, "plan.cp": 1, "plan.ep": 1, "plan.vpp": 1,
    "plan.mbs": 1, "plan.grad_accum": 64, "plan.zero_stage": 0,
    "plan.distributed_optimizer": False, "plan.sequence_parallel": False, "plan.recompute": "none",
    "plan.grad_reduce_dtype": "default", "plan.fp8_param_gather": False,
    "plan.precision_aware_optimizer": False, "plan.offload_layers": 0,
    "plan.fsdp_reshard": "default",
}  # fmt: skip


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def env_for(
    rules: RuleSet,
    model: str = "llama-3-8b",
    gpus: int = 8,
    gpu: str = "h100",
    *,
    global_batch: int = 512,
    seq_len: int = 4096,
    precision: str = "bf16",
    hardware: dict[str, Any] | None = None,
    **plan: Any,
) -> dict[str, Any]:
    """model.*, cluster.*, train.* of a real preset and cluster (with `hardware`'s cluster.*
    values instead), plus plan.* values."""
    env = CostModel(rules).base_env(
        load_preset(model),
        cluster_from_flags(gpus, gpu),
        global_batch=global_batch,
        seq_len=seq_len,
        precision=precision,
    )
    env.update(hardware or {})
    env.update(PLAN_DEFAULTS)
    env.update({f"plan.{k}": v for k, v in plan.items()})
    return env


def broken(rules: RuleSet, env: dict[str, Any]) -> dict[str, str]:
    """rule id -> rendered reason of every rule `env` breaks (layout phase), the shared rules
    and each backend's own."""
    return {
        v.rule_id: v.reason
        for backend in (None, *BACKEND_NAMES)
        for v in Constraints(rules, backend=backend).check(env, "layout")
    }


# Each rule: an environment that breaks it, and the exact reason it gives.
CASES = [
    (
        # GPT-3's positions are a learned table of 2048 rows (Brown et al. 2020, Table 2.1).
        "model.seq_len_within_learned_positions",
        {},
        {"model": "gpt3-175b", "seq_len": 4096},
        "sequence length (4096) exceeds the learned position table (2048 positions)",
    ),
    (
        "parallel.heads_divisible_by_tp",
        {"tp": 3},
        {},
        "attention heads (32) do not divide by tp (3)",
    ),
    (
        "parallel.kv_heads_divisible_by_tp",
        {"tp": 16},
        {"gpus": 16},
        "key/value heads (8) do not divide by tp (16)",
    ),
    ("parallel.ffn_divisible_by_tp", {"tp": 3}, {}, "MLP width (14336) does not divide by tp (3)"),
    (
        "parallel.tp_within_node",
        {"tp": 16},
        {"gpus": 16},
        "tp (16) spans more than one NVLink domain (8 GPUs each)",
    ),
    (
        "parallel.sequence_parallel_needs_tp",
        {"sequence_parallel": True},
        {},
        "sequence parallelism needs tp > 1",
    ),
    (
        "batch.divisible",
        {"dp": 8, "mbs": 3},
        {},
        "global batch (512) does not divide by mbs x dp",
    ),
    (
        "batch.micro_batch_limit",
        {"mbs": 32},
        {},
        "micro-batch above 16 sequences (not searched)",
    ),
    (
        "pipeline.layers_split",
        {"pp": 8, "vpp": 3},
        {},
        # 24 virtual stages: middle 3 x ceil(32 / 24) = 6 leaves 32 - 36 < 0 for the ends, and
        # neither 33 nor 34 layers (the loss, the embedding counted) divide by 24
        "layers (32) do not split over pp (8) x vpp (3) stages, not even with smaller first and "
        "last stages or the embedding and loss counted as layers",
    ),
    ("pipeline.interleave_needs_pp", {"vpp": 2}, {}, "interleaving (vpp 2) needs pp > 1"),
    (
        "pipeline.interleave_microbatches",
        {"pp": 4, "vpp": 2, "grad_accum": 6},
        {},
        "interleaving needs the micro-batches per step to be a multiple of pp (4)",
    ),
    (
        "context.seq_divisible",
        {"cp": 3},
        {"seq_len": 4096},
        "sequence length (4096) is not a multiple of 2 x cp (3)",
    ),
    ("experts.need_moe", {"ep": 2}, {}, "expert parallelism needs a mixture-of-experts model"),
    (
        "experts.divisible_by_ep",
        {"ep": 3},
        {"model": "mixtral-8x7b"},
        "experts (8) do not divide by ep (3)",
    ),
    # DeepSpeed's own (backends/deepspeed/constraints.yaml, `backend: deepspeed`)
    (
        "deepspeed.pipeline_zero_at_most_1",
        {"zero_stage": 3, "pp": 2},
        {},
        "DeepSpeed: ZeRO-3 does not work with pipeline parallelism",
    ),
    (
        "deepspeed.autotp_no_pipeline",
        {"tp": 2, "pp": 2},
        {},
        "DeepSpeed: AutoTP (tp 2) is not combined with the pipeline engine",
    ),
    (
        "deepspeed.moe_zero_at_most_2",
        {"zero_stage": 3, "ep": 2},
        {"model": "mixtral-8x7b"},
        "DeepSpeed: MoE layers (ep 2) do not run with ZeRO-3",
    ),
    (
        "megatron.fsdp_no_pipeline",
        {"zero_stage": 3, "pp": 2},
        {},
        "Megatron-FSDP with pipeline parallelism (pp 2) is not a documented combination",
    ),
    (
        "megatron.fsdp_not_fp16",
        {"zero_stage": 2},
        {"precision": "fp16"},
        "Megatron-FSDP is not documented for fp16",
    ),
    (
        # Megatron-LM reads --grad-reduce-in-bf16 only under `if args.bf16:` (arguments.py).
        "megatron.grad_reduce_bf16_needs_bf16",
        {"grad_reduce_dtype": "bf16"},
        {"precision": "fp16"},
        "Megatron-LM reads --grad-reduce-in-bf16 in --bf16 runs only (FP8 ones included): an fp16"
        " run would reduce fp16 gradients, not the bf16 ones priced",
    ),
    (
        # TransformerConfig.__post_init__: "fp8_param must be used together with fp8 mode."
        "megatron.fp8_param_gather_needs_fp8",
        {"fp8_param_gather": True, "distributed_optimizer": True},
        {},
        "FP8 parameters (--fp8-param-gather) need FP8 training, not bf16",
    ),
    (
        # arguments.py: "--fp8-param-gather only supported with distributed optimizer, ..."
        "megatron.fp8_param_gather_needs_distributed_optimizer",
        {"fp8_param_gather": True},
        {"precision": "fp8"},
        "--fp8-param-gather needs the distributed optimizer",
    ),
    (
        "megatron.fp8_param_gather_not_with_fsdp",
        {"fp8_param_gather": True, "zero_stage": 3},
        {"precision": "fp8"},
        "FP8 parameters with Megatron-FSDP (ZeRO-3) are not priced: the rules price them with the"
        " distributed optimizer",
    ),
    (
        # optimizer_config.py: "--use-precision-aware-optimizer only supported with distributed
        # optimizer"
        "megatron.precision_aware_optimizer_needs_distributed_optimizer",
        {"precision_aware_optimizer": True},
        {},
        "--use-precision-aware-optimizer needs the distributed optimizer",
    ),
    (
        "megatron.precision_aware_optimizer_not_with_fsdp",
        {"precision_aware_optimizer": True, "zero_stage": 3},
        {},
        "the precision-aware optimizer with Megatron-FSDP (ZeRO-3) is not priced: the rules price"
        " its states as the distributed optimizer shards them",
    ),
    (
        # transformer_config.py: "CPU offloading can be done only for layers less than" 32
        "megatron.offload_fewer_than_layers",
        {"offload_layers": 32},
        {},
        "--cpu-offloading-num-layers 32 must be below the model's 32 layers",
    ),
    (
        "megatron.offload_no_pipeline",
        {"offload_layers": 8, "pp": 2},
        {},
        "Megatron-LM offloads activations to the CPU only without a pipeline (pp 2)",
    ),
    (
        "megatron.offload_no_recompute",
        {"offload_layers": 8, "recompute": "selective"},
        {},
        "Megatron-LM does not offload activations with selective recomputation",
    ),
    (
        "megatron.offload_needs_host_link",
        {"offload_layers": 8},
        {"hardware": {"cluster.host_bandwidth": 0}},
        "offloaded activations are priced over the GPU's host link, and "
        "parplan_gen/data/host_links.yaml has no figure for this GPU",
    ),
    (
        # torchtitan 0.3's llama3 flavors are 8B, 70B and 405B; GPT-3's 96 layers are none.
        "torchtitan.has_config",
        {},
        {"model": "gpt3-175b", "seq_len": 2048},
        "torchtitan 0.3 has no config (--module/--config) that builds this model",
    ),
    (
        "torchtitan.config_precision",
        {},
        {"precision": "fp16"},
        "torchtitan 0.3 trains in bf16 (with float8 linear layers for fp8), not fp16",
    ),
    (
        # components/quantization/float8.py: NVIDIA SM 8.9+ or AMD gfx942+; an A100 is SM 8.0
        "torchtitan.float8_gpu",
        {},
        {"precision": "fp8", "hardware": {"cluster.architecture": "ampere"}},
        "torchtitan 0.3's float8 linear layers run on NVIDIA SM 8.9 or later (Ada, Hopper, "
        "Blackwell) or AMD gfx942 (MI300) or later, not on ampere",
    ),
    (
        # 32 layers + 2 = 34 weighted: ceil(34 / 20) = 2 per stage gives ceil(34 / 2) = 17
        # stages, not pp x vpp = 20.
        "torchtitan.virtual_stages",
        {"pp": 4, "vpp": 5},
        {},
        "torchtitan: no pipeline_parallel_layers_per_stage gives pp (4) x vpp (5) stages",
    ),
    (
        # No sharding (ZeRO 0): dp_shard is 1, so ep 2 must divide cp x tp = 1.
        "torchtitan.ep_within_dense_mesh",
        {"zero_stage": 0, "ep": 2},
        {"model": "mixtral-8x7b"},
        "torchtitan: ep (2) does not divide dp_shard x cp x tp",
    ),
    (
        # distributed/fsdp.py: with pp the default policy keeps the blocks gathered already
        "torchtitan.reshard_never_is_pipeline_default",
        {"zero_stage": 3, "pp": 2, "fsdp_reshard": "never"},
        {},
        "torchtitan: with pp (2) > 1 its default reshard policy already keeps the blocks "
        "gathered: fsdp_reshard never is the default's run, named default",
    ),
    (
        # ZeRO 0 is data_parallel_replicate_degree; with cp 2, FSDP shards over cp all the same.
        "torchtitan.replicate_without_cp",
        {"zero_stage": 0, "cp": 2},
        {},
        "torchtitan: with cp (2) > 1 the parameters are sharded over cp (FSDP), not replicated (ZeRO 0)",
    ),
    (
        # 4104 tokens over cp 2: 2052 a rank, which 8 chunks do not divide (2052 = 8 x 256 + 4)
        "torchtitan.loss_chunks_divide_sequence",
        {"cp": 2, "zero_stage": 3},
        {"seq_len": 4104},
        "torchtitan 0.3 splits each rank's sequence (seq_len / cp = 2052) into 8 chunks for the "
        "LM head and the loss, and refuses a length they do not divide",
    ),
    (
        "zero.needs_data_parallel",
        {"zero_stage": 2, "dp": 1, "tp": 8},
        {},
        "optimizer sharding over a single rank (dp x cp = 1) shards nothing",
    ),
    (
        # accelerate 1.16.0 parallelism_config.py _validate_accelerator: tp over all 8 GPUs
        # leaves FSDP2 neither dp_shard nor cp to shard over
        "accelerate.fsdp_shard_dimension",
        {"zero_stage": 3, "dp": 1, "tp": 8},
        {},
        "Accelerate: with tp (8) over every GPU, FSDP has no dimension to shard across "
        "(dp_shard x cp = 1)",
    ),
    (
        "accelerate.fp8_not_planned",
        {"zero_stage": 3},
        {"precision": "fp8"},
        "Accelerate's FP8 is not planned: parplan does not price the FP8 backend Accelerate picks "
        "at run time",
    ),
]

# The graph-only rules (rules/constraints/graph.yaml), on ResNet-50: its Conv2d/MatMul widths
# are 64..2048 channels and 1000 classes, whose greatest common divisor is 8.
GRAPH_CASES = [
    (
        "graph.data_and_channel_parallel_only",
        {"pp": 2, "dp": 4},
        "graph models are planned with data and channel (tensor) parallelism only: pp, cp, ep "
        "and vpp must be 1",
    ),
    (
        "graph.channels_divisible_by_tp",
        {"tp": 16, "dp": 1},
        "channel parallelism needs every Conv2d / MatMul output width to divide by tp (16); "
        "their greatest common divisor is 8 (0: a node does not say its width)",
    ),
    (
        "graph.no_sequence_parallel",
        {"tp": 2, "dp": 4, "sequence_parallel": True},
        "sequence parallelism splits a transformer's sequence; a graph model has none",
    ),
    (
        "graph.recompute_all_or_nothing",
        {"recompute": "selective"},
        "selective recomputation recomputes attention scores; a graph model recomputes all of "
        "its nodes (full) or none",
    ),
    (
        "graph.deepspeed_only",
        {"distributed_optimizer": True},
        "graph models are launched with DeepSpeed / torchrun, not Megatron-LM: shard the "
        "optimizer with ZeRO instead of the distributed optimizer",
    ),
]


def graph_env(rules: RuleSet, **plan: Any) -> dict[str, Any]:
    """The names a graph-model constraint reads: ResNet-50 on 8 H100s, batch 512."""
    spec = GraphModelSpec.from_graph(load_graph_preset("resnet-50"))
    cost = CostModel(rules, "graph")
    env = cost.base_env(spec, cluster_from_flags(8, "h100"), global_batch=512, seq_len=1)
    env.update(PLAN_DEFAULTS)
    env.update({f"plan.{k}": v for k, v in plan.items()})
    return env


@pytest.mark.parametrize(("rule_id", "plan", "reason"), GRAPH_CASES)
def test_each_graph_rule_gives_its_exact_reason(
    rules: RuleSet, rule_id: str, plan: dict[str, Any], reason: str
) -> None:
    found = {
        v.rule_id: v.reason
        for v in Constraints(rules, "graph").check(graph_env(rules, **plan), "layout")
    }
    assert found.get(rule_id) == reason


def test_every_graph_layout_rule_has_a_case(rules: RuleSet) -> None:
    graph_only = {c.rule.id for c in Constraints(rules, "graph").layout} - {c[0] for c in CASES}
    assert graph_only == {case[0] for case in GRAPH_CASES}
    # and the default graph layout (dp 8, data parallel only) breaks none of them
    assert Constraints(rules, "graph").check(graph_env(rules), "layout") == []


@pytest.mark.parametrize(("rule_id", "plan", "request_", "reason"), CASES)
def test_each_rule_gives_its_exact_reason(
    rules: RuleSet, rule_id: str, plan: dict[str, Any], request_: dict[str, Any], reason: str
) -> None:
    found = broken(rules, env_for(rules, **request_, **plan))
    assert found.get(rule_id) == reason


def test_every_layout_rule_has_a_case_and_a_source(rules: RuleSet) -> None:
    layout_rules = {
        c.rule.id for b in (None, *BACKEND_NAMES) for c in Constraints(rules, backend=b).layout
    }
    assert layout_rules == {case[0] for case in CASES}
    assert all(c.rule.source for c in rules.constraints)


def test_a_sound_layout_breaks_nothing(rules: RuleSet) -> None:
    env = env_for(rules, dp=2, tp=4, sequence_parallel=True, grad_accum=256)
    assert broken(rules, env) == {}


def test_memory_rule_runs_after_the_cost_model(rules: RuleSet) -> None:
    constraints = Constraints(rules)
    memory = next(c for c in rules.constraints if c.rule.id == "memory.fits")
    assert phase_of(memory) == "estimate"
    # memory.fits's (`other` for the tensors the default headroom keeps a share of), and
    # memory.offload_fits_host's pinned host buffers (memory.yaml)
    assert constraints.figures == {
        "memory_total",
        "memory_other",
        "memory_capacity",
        "memory_host_offload",
    }
    env = env_for(rules)
    env.update(
        estimate_env(
            {"memory_total": 90 * 2**30, "memory_other": 2**30, "memory_capacity": 80 * 2**30}
        )
    )
    [found] = constraints.check(env, "estimate")
    assert (found.rule_id, found.severity) == ("memory.fits", "reject")
    reason = "does not fit in GPU memory (80 GiB, keeping 0.0 GiB and 0.0% of its tensors free)"
    assert found.reason == reason
    assert found.describe() == f"{reason} [memory.fits, reject]"


def test_llama3_405b_on_16_stages_uses_uneven_first_and_last_stages(rules: RuleSet) -> None:
    env = env_for(rules, "llama-3-405b", 16384, global_batch=2048, pp=16, tp=8, dp=128)
    assert "pipeline.layers_split" not in broken(rules, env)
    assert stage_layers(126, 16) == (7, 8, 7)  # Llama 3 Sec. 3.3.2: one layer less on each end


def test_a_later_rules_dir_overrides_a_rule_by_id(rules: RuleSet, tmp_path: Path) -> None:
    (tmp_path / "relax.yaml").write_text(
        "constraints:\n"
        "  - id: parallel.tp_within_node\n"
        "    require: 'plan.tp <= 2 * cluster.gpus_per_node'\n"
        "    reason: 'tp ({plan.tp}) spans more than two nodes'\n"
        "    severity: reject\n",
        encoding="utf-8",
    )
    relaxed = load_rules([tmp_path])
    env = env_for(relaxed, "llama-3-70b", 16, tp=16, dp=1)
    assert "parallel.tp_within_node" not in broken(relaxed, env)
    assert "parallel.tp_within_node" in broken(rules, env_for(rules, "llama-3-70b", 16, tp=16))


def test_a_formula_that_fails_names_the_rule(rules: RuleSet) -> None:
    rule = next(c for c in rules.constraints if c.rule.id == "batch.divisible")
    env = env_for(rules, mbs=0)
    with pytest.raises(FormulaError, match=r"constraint 'batch\.divisible'"):
        violation(rule, env)


@settings(deadline=None)
@given(layers=st.integers(1, 200), pp=st.integers(1, 64), vpp=st.integers(1, 8))
def test_stage_layers_agrees_with_the_layers_rule(layers: int, pp: int, vpp: int) -> None:
    rules, base = _rules_and_env()
    env = {**base, "plan.pp": pp, "plan.vpp": vpp, "model.layers": layers}
    allowed = "pipeline.layers_split" not in broken(rules, env)
    try:
        first, middle, last, embedding, loss = pipeline_split(layers, pp, vpp)
    except ValueError:
        assert not allowed
        return
    assert allowed
    assert stage_layers(layers, pp, vpp) == (first, middle, last)
    stages = [first, *[middle] * (pp - 2), last] if pp > 1 else [first]
    assert sum(stages) == layers
    # what each stage's split counts: its layers, and the embedding (first) or loss (last)
    counted = [first + embedding, *stages[1:-1], last + loss] if pp > 1 else stages
    if embedding or loss:  # Megatron: every stage the same share, whole virtual stages
        assert counted == [middle] * pp and middle % vpp == 0 and min(stages) >= 0
    else:  # Megatron: uneven first/last stages, whole virtual stages, none above the middle
        assert all(s > 0 and s % vpp == 0 and s <= middle for s in stages)


_CACHE: dict[str, Any] = {}


def _rules_and_env() -> tuple[RuleSet, dict[str, Any]]:
    """Loaded once for the hypothesis tests (a fixture would be shared across examples too,
    but hypothesis refuses function-scoped fixtures)."""
    if not _CACHE:
        rules = load_rules()
        _CACHE.update(rules=rules, env=env_for(rules))
    return _CACHE["rules"], _CACHE["env"]
