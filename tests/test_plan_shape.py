"""One plan shape: the plan.* formula names are the Layout's fields, plan.json, `plan --json`
and the text view read one PlanDocument, and the rules engine's Proposal is what plan.json keeps."""

from __future__ import annotations

import json

import pytest

import parplan_gen
from parplan_gen.cost.layout import PLAN_FIELDS, Layout, build_layout, plan_values
from parplan_gen.planning.backend_planner import LEVEL_OF
from parplan_gen.planning.document import PlanDocument
from parplan_gen.rules import vocabulary
from parplan_gen.rules.engine import Proposal

TRAIN_FIELDS = ("global_batch", "seq_len", "precision")  # the request's, read as train.*


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
        "plan.recompute": "none",
    }  # fmt: skip


@pytest.fixture(scope="module")
def plan() -> parplan_gen.api.Plan:
    return parplan_gen.plan("llama-2-7b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=4096)


def test_plan_json_lists_rejections_by_reason_the_views_most_first(plan) -> None:
    doc = plan.document
    counts = list(doc.rejected.values())
    assert counts == sorted(counts, reverse=True) and len(counts) > 1
    assert list(doc.contract()["rejected"]) == list(doc.rejected)
    written = json.loads(doc.to_json())["rejected"]
    assert list(written) == sorted(doc.rejected) and written == doc.rejected
    assert PlanDocument.model_validate_json(doc.to_json()).to_json() == doc.to_json()


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
