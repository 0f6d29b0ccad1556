"""One plan shape: the plan.* formula names are the Layout's fields (the search's candidates
too), plan.json and `plan --json` are one document, the text view reads it, rejections are
counted by rule, and the rules engine's Proposal is what plan.json keeps."""

from __future__ import annotations

import json

import pytest

import parplan_gen
from parplan_gen.cost.layout import DS_SETTINGS, PLAN_FIELDS, Layout, build_layout, plan_values
from parplan_gen.planning.backend_planner import OUTRANKED, Candidate
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.memory_order import DOMINATED
from parplan_gen.planning.rejections import Rejection, merge
from parplan_gen.planning.search_levels import LEVEL_OF
from parplan_gen.planning.search_result import SearchResult
from parplan_gen.rules import vocabulary
from parplan_gen.rules.engine import Proposal

# the request's, the loss kernel and its compile, DeepSpeed's buffers (a backend's, not searched),
# read as train.*
TRAIN_FIELDS = (
    "global_batch", "seq_len", "precision", "cross_entropy_fusion", "loss_compiled", *DS_SETTINGS
)  # fmt: skip
H100_64 = {"gpus": 64, "gpu": "h100"}


def test_plan_names_are_the_layout_fields_the_search_varies() -> None:
    declared = [n.name for n in vocabulary.NAMES if n.namespace == "plan"]
    assert declared == [f"plan.{f}" for f in PLAN_FIELDS]  # the same names, in the same order
    assert set(Layout.model_fields) == {*PLAN_FIELDS, *TRAIN_FIELDS}
    assert all(vocabulary.lookup(f"train.{f}") for f in TRAIN_FIELDS)
    assert set(LEVEL_OF) == set(declared)  # the planner sets each at one search level


def test_plan_values_give_every_plan_name() -> None:
    layout = build_layout(64, tp=4, pp=2, vpp=3, mbs=2, global_batch=256, seq_len=4096)
    values = plan_values(layout)
    assert values == {
        "plan.dp": 8, "plan.tp": 4, "plan.pp": 2, "plan.cp": 1, "plan.ep": 1,
        "plan.etp": 4,  # the experts' tensor parallelism defaults to tp
        "plan.vpp": 3,
        "plan.mbs": 2, "plan.grad_accum": 16, "plan.zero_stage": 0,
        "plan.distributed_optimizer": False, "plan.sequence_parallel": False,
        "plan.recompute": "none", "plan.grad_reduce_dtype": "default",
        "plan.fp8_param_gather": False, "plan.precision_aware_optimizer": False,
        "plan.offload_layers": 0, "plan.fsdp_reshard": "default",
        "plan.overlap_grad_reduce": True,
    }  # fmt: skip


@pytest.fixture(scope="module")
def plan() -> parplan_gen.api.Plan:
    return parplan_gen.plan("llama-2-7b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=4096)


def test_plan_json_lists_rejections_by_rule_the_views_most_first(plan) -> None:
    doc = plan.document
    counts = list(doc.rejected.values())
    assert counts == sorted(counts, reverse=True) and len(counts) > 1
    written = json.loads(doc.to_json())["rejected"]
    assert list(written) == sorted(doc.rejected) and written == doc.rejected
    assert PlanDocument.model_validate_json(doc.to_json()).to_json() == doc.to_json()


def test_plan_json_is_plan_json_printed(cli, tmp_path) -> None:
    """One shape: `plan --json` prints what `plan --out` writes as plan.json, `feasible` and
    `advice` included; the written one also records the template versions it was rendered
    with (`render`), which the printed plan leaves to the renderer (null: the latest)."""
    request = ("llama-2-7b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64")
    printed = cli("plan", *request, "--json")
    written = cli("plan", *request, "--out", tmp_path / "out")
    assert (printed.code, written.code) == (0, 0), printed.err + written.err
    plan_json = json.loads((tmp_path / "out" / "plan.json").read_text(encoding="utf-8"))
    data = printed.json()
    assert list(data) == list(plan_json)  # the same keys, in the same order
    assert data["render"] == {"megatron_version": None, "deepspeed_version": None}
    assert {**data, "render": plan_json["render"]} == plan_json
    assert data["feasible"] is True and data["advice"] == []


def test_the_search_candidate_is_the_layouts_plan_fields() -> None:
    assert Candidate._fields == PLAN_FIELDS  # search_space.layout_of reads them in this order


@pytest.fixture(scope="module")
def llama_3_8b_on_64() -> SearchResult:
    from parplan_gen.api.plans import search_plan

    return search_plan(
        parplan_gen.api.load_model("llama-3-8b"), parplan_gen.api.load_cluster_spec(H100_64),
        parplan_gen.api.load_rules(), global_batch=512, seq_len=2048, precision="bf16",
        objective="time", top=5, flash_attention=True, backend="megatron",
    ).result  # fmt: skip


def test_rejections_are_counted_by_rule_with_the_range_of_what_varied(llama_3_8b_on_64) -> None:
    """Llama 3 8B has 32 attention heads and 8 key/value heads (Meta's config.json). On 64 GPUs
    tp is a divisor of 64: 16 and 32 split the 8 KV heads, 64 the 32 heads too, and the heads
    rule comes first in rules/constraints/layout.yaml: one line per rule, each with the range of
    the tp values it rejected."""
    # each rule once; the search's own prunings (no rule) one line each
    by_rule = {r.rule or r.reason: r for r in llama_3_8b_on_64.rejections}
    assert len(by_rule) == len(llama_3_8b_on_64.rejections)
    kv = by_rule["parallel.kv_heads_divisible_by_tp"]
    assert kv.ranges == {"tp": (16, 32)}
    assert kv.reason == "key/value heads (8) do not divide by tp (16)"  # the first one met
    assert kv.label == f"{kv.reason} [parallel.kv_heads_divisible_by_tp: tp 16..32]"
    heads = by_rule["parallel.heads_divisible_by_tp"]
    assert heads.ranges == {"tp": (64, 64)}
    assert (
        heads.label
        == "attention heads (32) do not divide by tp (64) [parallel.heads_divisible_by_tp]"
    )
    assert by_rule[DOMINATED].rule is None and by_rule[DOMINATED].label == DOMINATED
    # fits, but a floor slower than the 5th best step found before it (planning/step_cutoff.py)
    assert by_rule[OUTRANKED].rule is None and by_rule[OUTRANKED].layouts > 0
    assert llama_3_8b_on_64.rejected == {r.label: r.layouts for r in llama_3_8b_on_64.rejections}
    layouts = [r.layouts for r in llama_3_8b_on_64.rejections]
    assert layouts == sorted(layouts, reverse=True)


def test_a_rule_of_several_backends_is_one_line_its_ranges_joined() -> None:
    """`merge`: the same rule met on two backends' searches is counted once, its ranges joined;
    switches are shown as false..true and recomputation in the order of its savings."""
    megatron = [Rejection(rule="r", layouts=3, reason="first", ranges={"tp": (2, 4)})]
    deepspeed = [
        Rejection(rule="r", layouts=5, reason="second", ranges={"tp": (8, 8)}),
        Rejection(rule="s", layouts=1, reason="s", ranges={"recompute": ("full", "full")}),
    ]
    other = [
        Rejection(rule="s", layouts=1, reason="s", ranges={"recompute": ("none", "selective")})
    ]
    switched = [
        Rejection(rule="t", layouts=1, reason="t", ranges={"sequence_parallel": (False, True)})
    ]
    merged = merge([megatron, deepspeed, other, switched])
    assert [r.label for r in merged] == [
        "first [r: tp 2..8]", "s [s: recompute none..full]", "t [t: sequence_parallel false..true]",
    ]  # fmt: skip
    assert [r.layouts for r in merged] == [8, 2, 1]


def test_plan_json_keeps_the_engine_proposals(plan) -> None:
    proposals = plan.document.proposals
    assert proposals and all(isinstance(p, Proposal) for p in proposals)
    record = json.loads(plan.document.to_json())["proposals"][0]
    assert list(record) == [
        "rule_id", "group", "type", "description", "estimated_speedup", "settings",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="extra"):
        Proposal.model_validate({**record, "unknown": 1})


def test_the_plan_holds_its_document_and_the_search_figures(plan) -> None:
    assert plan.chosen is plan.document.chosen
    assert plan.feasible and not plan.advice and plan.document.advice == []
    assert plan.searched > sum(plan.document.rejected.values()) >= 1
    assert plan.evaluated >= len(plan.document.candidates)
