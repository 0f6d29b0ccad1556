"""The planner against published layouts (issue "parplan plan", Done when): at the same model,
GPUs, batch, sequence and precision its choice is at least as fast, by our own cost model, as
the layout the run used. benchmarks/plan_vs_published.py does this for every calibration run;
here a handful of them, copied inline (CI may not have ../shared/calibration)."""

from __future__ import annotations

from typing import Any

import pytest
from ruamel.yaml import YAML

from parplan_gen.api import plan
from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.cost.layout import build_layout, plan_values
from parplan_gen.models.presets import load_preset
from parplan_gen.planning.constraints import Constraints
from parplan_gen.planning.search_space import Request, mbs_options, outside_search
from parplan_gen.rules.ruleset import RuleSet, load_rules

from conftest import load_benchmark

SELENE = """\
  hardware: {gpu: NVIDIA A100-SXM 80GB, gpu_memory_gb: 80, gpus_per_node: 8,
             inter_node: 8x NVIDIA Mellanox 200 Gb/s HDR InfiniBand HCAs per node,
             peak_16bit_dense_tflops: 312}
"""
GPT_175B = """\
  model: {num_layers: 96, hidden_size: 12288, num_attention_heads: 96, num_query_groups: null,
          ffn_hidden_size: 49152, vocab_size: 51200, seq_length: 2048, moe: null,
          notes: GeLU MLP}
"""
MPT_NOTES = "MPT: ALiBi, no biases, expansion_ratio 4"
# The fields the comparison reads, copied from published_runs.yaml (entry names as there).
RUNS = f"""\
# Not in published_runs.yaml: Narayanan et al. 2021 Table 2, GPT-3 175B with PTD-P (t = 8,
# p = 12) on 1536 A100s, batch 1536, 141 TFLOP/s per GPU (ZeRO-3 without model parallelism:
# 44), the layout tests/test_estimate.py also estimates (mbs 1, full recompute, fp16).
- name: narayanan2021_table2_gpt3_175B_1536gpus
{GPT_175B}{SELENE}
  total_gpus: 1536
  parallelism: {{tp: 8, pp: 12, cp: 1, ep: 1, sequence_parallel: false}}
  micro_batch_size: 1
  global_batch_size: 1536
  activation_recompute: full
  precision: fp16
  measured: {{tflops_per_gpu: 141}}
- name: narayanan2021_table1_gpt_1T
  model: {{num_layers: 128, hidden_size: 25600, num_attention_heads: 160,
          num_query_groups: null, ffn_hidden_size: 102400, vocab_size: 51200,
          seq_length: 2048, moe: null, notes: GeLU MLP}}
{SELENE}
  total_gpus: 3072
  parallelism: {{tp: 8, pp: 64, dp: 6, cp: 1, ep: 1, virtual_pipeline_stages: null,
                sequence_parallel: false}}
  zero_stage: 0
  micro_batch_size: 1
  global_batch_size: 3072
  activation_recompute: full (every layer)
  precision: fp16 mixed precision
  measured: {{tflops_per_gpu: 163}}
- name: korthikanti2022_175B_sp_selective
{GPT_175B}{SELENE}
  total_gpus: 64
  parallelism: {{tp: 8, pp: 8, dp: 1, cp: 1, ep: 1, virtual_pipeline_stages: 3,
                sequence_parallel: true}}
  zero_stage: 0
  micro_batch_size: 1
  global_batch_size: 64
  activation_recompute: selective (attention core)
  precision: mixed precision (16-bit)
  measured: {{mfu_pct: 51.4}}
- name: mpt_30b_h100_80gb_32gpus_seq2048
  model: {{num_layers: 48, hidden_size: 7168, num_attention_heads: 56, num_query_groups: null,
          ffn_hidden_size: 28672, vocab_size: 50368, seq_length: 2048, moe: null,
          notes: "{MPT_NOTES}"}}
  hardware: {{gpu: NVIDIA H100 80GB, gpu_memory_gb: 80, gpus_per_node: 8,
             inter_node: not stated, peak_16bit_dense_tflops: 989}}
  total_gpus: 32
  parallelism: {{tp: 1, pp: 1, dp: 32, cp: 1, ep: 1}}
  zero_stage: 3
  distributed_optimizer: true
  micro_batch_size: 14
  global_batch_size: 1344
  activation_recompute: full (FSDP activation checkpointing)
  precision: amp_bf16
  measured: {{mfu_pct: 43.92}}
- name: mpt_7b_a100_40gb_128gpus_seq2048
  model: {{num_layers: 32, hidden_size: 4096, num_attention_heads: 32, num_query_groups: null,
          ffn_hidden_size: 16384, vocab_size: 50368, seq_length: 2048, moe: null,
          notes: "{MPT_NOTES}"}}
  hardware: {{gpu: NVIDIA A100 40GB, gpu_memory_gb: 40, gpus_per_node: 8,
             inter_node: 1600 Gbps node-node interconnect (RoCE), peak_16bit_dense_tflops: 312}}
  total_gpus: 128
  parallelism: {{tp: 1, pp: 1, dp: 128, cp: 1, ep: 1}}
  zero_stage: 3
  distributed_optimizer: true
  micro_batch_size: 18
  global_batch_size: 2304
  activation_recompute: full (FSDP activation checkpointing)
  precision: bf16 (FSDP mixed_precision PURE)
  measured: {{mfu_pct: 50.14}}
"""
ENTRIES: list[dict[str, Any]] = YAML(typ="safe").load(RUNS)
NAMES = [entry["name"] for entry in ENTRIES]


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


@pytest.fixture(scope="module")
def comparisons(rules: RuleSet) -> dict[str, Any]:
    """Each inline run through the benchmark: the published layout estimated, then planned."""
    calibration, _ = load_benchmark("calibration"), load_benchmark("plan_speed")
    bench = load_benchmark("plan_vs_published")
    return {
        entry["name"]: bench.compare(calibration.case_from_entry(entry), rules) for entry in ENTRIES
    }


@pytest.mark.parametrize("name", NAMES)
def test_the_plan_is_at_least_as_fast_as_the_published_layout(
    comparisons: dict[str, Any], name: str
) -> None:
    c = comparisons[name]
    assert c.feasible and c.chosen is not None
    # published step time / planned step time >= 1 (up to float noise on exact ties)
    assert c.planner_wins, (c.speedup, c.admissible)


def test_which_published_layouts_the_planner_could_have_chosen(
    comparisons: dict[str, Any],
) -> None:
    # Korthikanti 2022's 175B layout (SP, selective recompute, vpp 3) passes every rule and is
    # searched but for its gradient all-reduce after the backward: its Megatron-LM had no
    # --overlap-grad-reduce (calibration_rows.yaml), which the planner's files turn on.
    korthikanti = comparisons["korthikanti2022_175B_sp_selective"]
    assert korthikanti.violations == ()
    assert korthikanti.outside == (
        "the gradient reduction's overlap off is not searched on megatron (search option "
        "--overlap-grad-reduce)"
    )
    # MPT-30B's micro-batch of 14 is searched now that micro-batches are the divisors of the
    # per-replica batch, not only powers of two.
    mpt30 = comparisons["mpt_30b_h100_80gb_32gpus_seq2048"]
    assert (mpt30.violations, mpt30.outside) == ((), None)
    # 2021 Megatron had no sequence parallelism; the planner always turns it on with tp > 1.
    assert "sequence parallelism" in (comparisons["narayanan2021_table1_gpt_1T"].outside or "")
    # MPT-7B's 18 sequences per micro-batch (FSDP) are above the search limit rule.
    mpt7 = comparisons["mpt_7b_a100_40gb_128gpus_seq2048"]
    assert [v.rule_id for v in mpt7.violations] == ["batch.micro_batch_limit"]


def test_the_175b_plan_keeps_tensor_parallel_groups_inside_nodes(rules: RuleSet) -> None:
    # 96 heads divide by 3, but tp = 3 on 8-GPU nodes puts ranks 6, 7, 8 in one group across
    # two nodes; the planner chose tp = 3 here while the rule only read tp <= 8.
    spec, cluster = load_preset("gpt3-175b"), cluster_from_flags(1536, "a100-80gb")
    chosen = plan(spec, cluster, global_batch=1536, seq_len=2048, top=1, rules=rules).chosen
    assert cluster.gpus_per_node % chosen.plan.tp == 0
    layout = build_layout(1536, tp=3, pp=8, mbs=1, global_batch=1536, seq_len=2048)
    cost = CostModel(rules)
    env = cost.base_env(spec, cluster, global_batch=1536, seq_len=2048)
    env.update(plan_values(layout))
    assert "parallel.tp_within_node" in [v.rule_id for v in Constraints(rules).check(env, "layout")]


def test_micro_batches_are_the_divisors_of_the_per_replica_batch() -> None:
    assert mbs_options(1344, 32) == [1, 2, 3, 6, 7, 14, 21, 42]  # MPT-30B: 42 per replica
    assert mbs_options(2048, 4096) == [1]  # more replicas than sequences: the rules reject it


def test_a_layout_of_another_request_is_outside_the_search() -> None:
    spec, cluster = load_preset("gpt3-175b"), cluster_from_flags(64, "a100-80gb")
    layout = build_layout(64, tp=8, pp=8, mbs=1, global_batch=128, seq_len=2048)
    assert "batch" in (outside_search(layout, Request(spec, cluster, 64, 2048)) or "")
    assert outside_search(layout, Request(spec, cluster, 128, 2048)) is None
