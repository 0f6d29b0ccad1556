"""`parplan_gen.check` takes a layout as a Layout or as a dict of its sizes, as `estimate` does
(issue 30, item 8): the dict is built into a layout by `estimate`'s own path, and a bad key or
value is an InputError that names it as `layout.KEY`."""

from __future__ import annotations

import pytest

import parplan_gen
from parplan_gen.cost.layout import Layout, build_layout
from parplan_gen.inputs.errors import InputError

MODEL = "llama-3-8b"  # 32 layers, 32 heads, 8 KV heads (models/presets)
NODE = {"gpus": 8, "gpu": "h100"}


def test_a_dict_is_checked_as_the_layout_it_describes() -> None:
    report = parplan_gen.check(MODEL, NODE, {"tp": 2, "global_batch": 64})
    checked = report.estimate.plan
    # dp is what tp leaves of 8 GPUs; 64 sequences / (mbs 1 * dp 4) = 16 micro-batches; a
    # transformer's default sequence length is 2048 tokens (models/kind.py DEFAULT_SEQ_LEN).
    assert (checked.tp, checked.dp, checked.pp, checked.mbs) == (2, 4, 1, 1)
    assert (checked.global_batch, checked.grad_accum, checked.seq_len) == (64, 16, 2048)
    assert report.violations == ()
    assert report.runs_as_given
    given = build_layout(8, tp=2, global_batch=64, seq_len=2048)
    same = parplan_gen.check(MODEL, NODE, given)  # a Layout, as before
    assert same.estimate == report.estimate
    assert same.better == report.better


def test_a_broken_layout_given_as_a_dict_reports_the_rules_it_breaks() -> None:
    # tp 16 splits 8 KV heads 16 ways and spans two 8-GPU nodes.
    report = parplan_gen.check(MODEL, {"gpus": 16, "gpu": "h100"}, {"tp": 16, "global_batch": 64})
    assert report.estimate.plan.tp == 16
    broken = {v.rule_id: v.severity for v in report.violations}
    assert broken["parallel.kv_heads_divisible_by_tp"] == "invalid"
    assert "parallel.tp_within_node" in broken
    assert not report.runnable and not report.runs_as_given
    assert report.better is not None
    assert 8 % report.better.plan.tp == 0  # the planner's choice splits the KV heads evenly


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"tp": "x", "global_batch": 64}, "layout.tp: expected a whole number from 1 to "),
        ({"tp": 0, "global_batch": 64}, "layout.tp: expected a whole number from 1 to "),
        ({"tpp": 2, "global_batch": 64}, "layout.tpp: not a layout field (fields: dp, tp, "),
        ({1: 2, "global_batch": 64}, "layout.1: not a layout field"),
        ({"tp": 2}, "layout.global_batch: missing"),
        ({"global_batch": 64, "grad_accum": 8}, "layout.grad_accum: not given but derived"),
        ({"global_batch": 64, "zero_stage": 7}, "layout.zero_stage: Input should be 0, 1, 2 or 3"),
        ({"global_batch": 64, "recompute": "most"}, "layout.recompute: Input should be 'none'"),
        ({"tp": 3, "global_batch": 64}, "layout: tp(3) * pp(1) * cp(1) = 3 does not divide"),
        ({"global_batch": 64, "mbs": 3}, "layout: global_batch(64) is not divisible by mbs(3)"),
        (["tp", 2], "layout: expected a Layout or a dict of its sizes, got list"),
    ],
)
def test_a_bad_key_or_value_is_an_input_error_naming_it(layout: object, message: str) -> None:
    with pytest.raises(InputError) as info:
        parplan_gen.check(MODEL, NODE, layout)  # type: ignore[arg-type]
    assert info.value.message.startswith(message), info.value.message


def test_a_layout_object_is_checked_as_it_is() -> None:
    given = Layout(dp=8, tp=1, pp=1, cp=1, mbs=1, global_batch=64, grad_accum=8, seq_len=4096)
    report = parplan_gen.check(MODEL, NODE, given)
    # as it is, with the loss kernel its backend's plans write where it names none
    assert report.estimate.backend is not None and report.estimate.backend.name == "megatron"
    assert report.estimate.plan == given.model_copy(update={"cross_entropy_fusion": "te"})
