"""One evaluation path: `fits` is the memory rules' verdict everywhere (`check --json`,
`estimate --json`, `plan --json`, the API), also under an overlay that changes those rules."""

from __future__ import annotations

import json

import pytest

import parplan_gen
from parplan_gen.api import load_cluster_spec
from parplan_gen.cost.layout import build_layout
from parplan_gen.models.load import load_model
from parplan_gen.planning.evaluate import Evaluator, evaluate, is_memory_rule
from parplan_gen.rules.ruleset import load_rules

MODEL, CLUSTER = "llama-3-8b", ("--gpus", "8", "--gpu", "h100")
REQUEST = ("--global-batch", "64", "--seq-len", "4096")
# tp=2, no recomputation, distributed optimizer: 61 % of an H100's memory (48.62 of 80 GiB).
HALF_FULL = ("--tp", "2", *REQUEST, "--distributed-optimizer")
HEADROOM = """
    constraints:
      - id: memory.fits
        require: "estimate.memory_total <= {share} * estimate.memory_capacity"
        reason: "leaves less than {free} of the GPU memory free"
        severity: reject
    """


@pytest.fixture
def overlay(write):
    """A rule directory whose `memory.fits` asks for `share` of the memory at most."""

    def _overlay(share: float) -> str:
        text = HEADROOM.format(share=share, free=f"{1 - share:.0%}")
        return str(write(f"rules_{share}/headroom.yaml", text).parent)

    return _overlay


def run_json(cli, *argv: str) -> dict:
    result = cli(*argv, "--json")
    assert result.code in (0, 1, 3), result.err  # check: 1 when it does not run; plan: 3
    return json.loads(result.out)


def test_without_an_overlay_the_layout_fits(cli):
    checked = run_json(cli, "check", MODEL, *CLUSTER, *HALF_FULL)
    assert checked["memory"]["fits"] is True
    assert checked["violations"] == []
    assert checked["memory"]["total"] / checked["memory"]["capacity"] == pytest.approx(
        0.60, abs=0.01
    )


def test_an_overlay_that_asks_for_half_the_memory_free_is_the_fits_verdict(cli, overlay):
    rules = ("--rules", overlay(0.5))
    checked = run_json(cli, "check", MODEL, *CLUSTER, *HALF_FULL, *rules)
    estimated = run_json(cli, "estimate", MODEL, *CLUSTER, *HALF_FULL, *rules)
    assert [v["rule_id"] for v in checked["violations"]] == ["memory.fits"]
    assert checked["violations"][0]["reason"] == "leaves less than 50% of the GPU memory free"
    assert checked["memory"]["fits"] is False  # was true: total <= capacity
    assert estimated["memory"]["fits"] is False
    assert checked["over_capacity_bytes"] == 0  # it is under the GPU's capacity all the same
    planned = run_json(cli, "plan", MODEL, *CLUSTER, *REQUEST, *rules)
    chosen = planned["chosen"]
    assert chosen["memory"]["fits"] is True
    assert chosen["memory"]["total"] <= 0.5 * chosen["memory"]["capacity"]


def test_check_estimate_and_plan_agree_on_the_plans_own_layouts(cli, overlay):
    rules = ("--rules", overlay(0.5))
    planned = run_json(cli, "plan", MODEL, *CLUSTER, *REQUEST, *rules)
    for candidate in planned["candidates"]:
        p = candidate["plan"]
        flags = [f"--{k}={p[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs")]
        flags += [f"--recompute={p['recompute']}", *REQUEST]
        flags += ["--distributed-optimizer"] if p["distributed_optimizer"] else []
        flags += [] if p["distributed_optimizer"] else [f"--zero={p['zero_stage']}"]
        flags += [f"--backend={candidate['backend']['name']}"]
        flags += ["--sequence-parallel"] if p["sequence_parallel"] else []
        if p["zero_stage"] and p["distributed_optimizer"]:
            continue  # the flags cannot say both
        checked = run_json(cli, "check", MODEL, *CLUSTER, *flags, *rules)
        estimated = run_json(cli, "estimate", MODEL, *CLUSTER, *flags, *rules)
        assert checked["plan"] == estimated["plan"] == p
        fits = candidate["memory"]["fits"]
        assert checked["memory"]["fits"] is estimated["memory"]["fits"] is fits is True


def test_when_the_overlay_leaves_nothing_fitting_no_candidate_fits(cli, overlay):
    # 10 % of 80 GiB is less than the 16 GB of bf16 weights alone: nothing fits.
    planned = run_json(cli, "plan", MODEL, *CLUSTER, *REQUEST, "--rules", overlay(0.1))
    assert planned["feasible"] is False and planned["advice"]
    assert planned["candidates"]
    for candidate in planned["candidates"]:
        memory = candidate["memory"]
        assert memory["fits"] is False
        assert memory["total"] > 0.1 * memory["capacity"]


def test_the_text_view_says_which_verdict_it_is(cli, overlay):
    result = cli("estimate", MODEL, *CLUSTER, *HALF_FULL, "--rules", overlay(0.5))
    assert result.code == 1, result.err  # a layout that does not fit ends as check does
    total = next(line for line in result.out.splitlines() if line.startswith("  total"))
    assert (
        total
        == "  total           47.89 GiB of 80.00: DOES NOT FIT the memory rules, 32.11 GiB free"
    )


def test_the_public_estimate_returns_the_verdicts(overlay):
    layout = {"tp": 2, "global_batch": 64, "seq_len": 4096, "distributed_optimizer": True}
    cluster = {"gpus": 8, "gpu": "h100"}
    plain = parplan_gen.estimate(MODEL, cluster, layout)
    strict = parplan_gen.estimate(MODEL, cluster, layout, rules=[overlay(0.5)])
    assert (plain.fits, plain.runnable, plain.violations) == (True, True, ())
    assert strict.fits is False and strict.runnable is True
    assert [v.rule_id for v in strict.violations] == ["memory.fits"]
    assert strict.estimate.memory.total == plain.estimate.memory.total
    # The same path as `evaluate` with a loaded model, cluster and rule set.
    loaded = load_cluster_spec(cluster)
    again = evaluate(load_model(MODEL), loaded, strict.estimate.plan, load_rules([overlay(0.5)]))
    assert again == strict


def test_the_memory_rules_are_the_estimate_rules_that_read_memory_only(write):
    path = write(
        "r/c.yaml",
        """
        constraints:
          - id: my.fast_enough
            require: "estimate.time_step_s < 0.000001"
            reason: "too slow"
          - id: my.headroom
            require: "estimate.memory_total + estimate.memory_activations < estimate.memory_capacity"
            reason: "no headroom"
        """,
    )
    evaluator = Evaluator(load_rules([path.parent]))
    assert [c.rule.id for c in evaluator.memory_rules] == [
        "memory.fits",
        "memory.offload_fits_host",
        "my.headroom",
    ]
    assert all(is_memory_rule(c) for c in evaluator.memory_rules)
    found = evaluator.evaluate(
        load_model(MODEL), load_cluster_spec({"gpus": 8, "gpu": "h100"}),
        build_layout(8, tp=4, global_batch=64, seq_len=4096, distributed_optimizer=True),
    )  # fmt: skip
    assert [v.rule_id for v in found.violations] == ["my.fast_enough"]
    assert found.fits  # a slow layout still fits: only the memory rules decide that
