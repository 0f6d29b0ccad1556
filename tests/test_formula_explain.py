"""The formula tree explainer (`parplan_gen.explain`, rules/formula_explain.py): why a figure or
a named formula has its value, down to the inputs."""

from __future__ import annotations

import json

import pytest

import parplan_gen
from parplan_gen.inputs.errors import InputError
from parplan_gen.rules.formula_explain import FormulaNode, explain_name
from parplan_gen.rules.ruleset import load_rules

# A cost model small enough to work by hand: Kaplan et al. 2020 (arXiv:2001.08361) Sec. 2.1
# counts 6 FLOPs per parameter and token for a training step.
TOY = """
formulas:
  tokens_per_step: {value: "train.global_batch * train.seq_len", unit: tokens}
  step_flops:
    value: "6 * model.params * tokens_per_step"
    unit: FLOP
    source: "Kaplan et al. 2020 Sec. 2.1"
  achieved_flops: {value: "cluster.peak_flops * efficiency", unit: FLOP/s}
  efficiency: {value: 0.5, unit: fraction, source: "an assumption"}
  flops_again: "step_flops * 1"
  twice: "step_flops + flops_again"
  pick: "step_flops if train.seq_len > 100 else achieved_flops"
  long_and_slow: "train.seq_len > 4096 and efficiency < 0.6"
estimate:
  time:
    step_s: "step_flops / achieved_flops"
"""
# 8 sequences of 1024 tokens: 8192 tokens; 6 x 1e9 x 8192 = 4.9152e13 FLOP; at half of 1e15
# FLOP/s, 0.098304 s.
ENV = {
    "train.global_batch": 8,
    "train.seq_len": 1024,
    "model.params": 1e9,
    "cluster.peak_flops": 1e15,
}


@pytest.fixture
def toy(write, tmp_path):
    path = write("toy/cost.yaml", TOY)
    return load_rules([path.parent], builtin=False), path


def _names(node: FormulaNode) -> list[str]:
    return [child.name for child in node.children]


def test_a_figure_is_explained_down_to_the_inputs(toy):
    rules, path = toy
    tree = explain_name(rules, ENV, "time.step_s")
    assert (tree.name, tree.kind, tree.value, tree.unit) == ("time.step_s", "figure", 0.098304, "s")
    assert (tree.formula, tree.where) == ("step_flops / achieved_flops", f"{path}:15")
    assert _names(tree) == ["step_flops", "achieved_flops"]
    flops = tree.children[0]
    assert (flops.value, flops.unit, flops.source) == (
        4.9152e13,
        "FLOP",
        "Kaplan et al. 2020 Sec. 2.1",
    )
    assert _names(flops) == ["model.params", "tokens_per_step"]  # in the order it reads them
    assert flops.children[1].value == 8192
    assert _names(flops.children[1]) == ["train.global_batch", "train.seq_len"]
    leaf = flops.children[1].children[0]
    assert (leaf.kind, leaf.value, leaf.unit, leaf.children) == ("input", 8, "sequences", ())
    assert tree.children[1].value == 5e14
    assert tree.children[1].children[1].value == 0.5


def test_the_tree_as_text(toy):
    rules, path = toy
    assert explain_name(rules, ENV, "estimate.time.step_s").render() == (
        f"time.step_s = 0.0983 s  [step_flops / achieved_flops; {path}:15]\n"
        f"  step_flops = 4.915e+13 FLOP  [6 * model.params * tokens_per_step; {path}:3; "
        "Kaplan et al. 2020 Sec. 2.1]\n"
        "    model.params = 1e+09 parameters  [input]\n"
        f"    tokens_per_step = 8192 tokens  [train.global_batch * train.seq_len; {path}:2]\n"
        "      train.global_batch = 8 sequences  [input]\n"
        "      train.seq_len = 1024 tokens  [input]\n"
        f"  achieved_flops = 5e+14 FLOP/s  [cluster.peak_flops * efficiency; {path}:7]\n"
        "    cluster.peak_flops = 1e+15 FLOP/s  [input]\n"
        f"    efficiency = 0.5 fraction  [0.5; {path}:8; an assumption]\n"
    )


def test_a_named_formula_shown_before_is_shown_again_by_name(toy):
    rules, _ = toy
    tree = explain_name(rules, ENV, "twice")
    assert tree.value == 2 * 4.9152e13
    first, again = tree.children
    assert first.children and first.note is None
    (second,) = again.children
    assert (second.name, second.value, second.children, second.note) == (
        "step_flops",
        4.9152e13,
        (),
        "shown above",
    )


def test_only_the_branch_taken_is_explained(toy):
    rules, _ = toy
    pick = explain_name(rules, ENV, "pick")  # 1024 tokens > 100: the step's FLOPs
    assert (pick.value, _names(pick)) == (4.9152e13, ["step_flops", "train.seq_len"])
    assert pick.note == "not taken here: achieved_flops"
    both = explain_name(rules, ENV, "long_and_slow")  # 1024 > 4096 is false: `and` stops
    assert (both.value, _names(both), both.note) == (
        False,
        ["train.seq_len"],
        "not taken here: efficiency",
    )


def test_depth_and_size_bounds(toy):
    rules, _ = toy
    shallow = explain_name(rules, ENV, "time.step_s", max_depth=1)
    assert _names(shallow) == ["step_flops", "achieved_flops"]
    assert shallow.children[0].children == ()
    assert shallow.children[0].note == "2 names below not shown: depth limit 1"
    small = explain_name(rules, ENV, "time.step_s", max_nodes=3)
    assert _names(small) == ["step_flops"]
    assert small.note == "1 name more not shown: 3 lines at most"
    assert _names(small.children[0]) == ["model.params"]
    assert small.children[0].note == "1 name more not shown: 3 lines at most"


def test_a_name_without_a_value_here_says_so(toy):
    rules, _ = toy
    tree = explain_name(rules, {**ENV, "cluster.peak_flops": 0}, "time.step_s")
    assert tree.value is None
    assert (
        tree.note
        == "not computed here: formula 'step_flops / achieved_flops' failed: division by zero"
    )
    missing = explain_name(rules, {}, "tokens_per_step")
    assert missing.value is None
    assert missing.children[0].note == "no value here"


def test_an_unknown_name_is_an_error_with_a_hint(toy):
    rules, _ = toy
    with pytest.raises(
        InputError,
        match=r"nothing to explain named 'step_flop' \(did you mean "
        r"'step_flops'\?\)",
    ):
        explain_name(rules, ENV, "step_flop")


def test_the_api_explains_an_estimate_as_the_cost_model_computed_it():
    model, cluster = "llama-3-8b", {"gpus": 8, "gpu": "h100"}
    layout = {"tp": 2, "global_batch": 512, "seq_len": 8192}
    found = parplan_gen.estimate(model, cluster, layout)
    tree = parplan_gen.explain(model, cluster, layout, "time.step_s")
    assert tree.value == found.estimate.time.step_s
    assert parplan_gen.explain(model, cluster, found.estimate, "time.step_s") == tree
    (step,) = tree.children
    assert step.name == "step_time"
    # rules/cost/time.yaml step_time, from the values of the names it reads:
    part = {child.name: child.value for child in step.children}
    assert step.value == pytest.approx(
        part["stage_work_s"] * (1 + part["bubble_fraction"])
        + part["pp_comm_s"]
        + part["dp_exposed_s"]
        + part["dp_overlap_cost_s"]
        + part["optimizer_s"]
    )
    nodes, stack = {}, [tree]
    while stack:
        node = stack.pop()
        nodes.setdefault(node.name, node)
        stack += node.children
    assert nodes["plan.tp"].value == 2
    assert tree.contract()["children"][0]["name"] == "step_time"
    # rules/cost/memory.yaml: without ZeRO-3, memory.params is held_weight_bytes, that is
    # weight_bytes * params_per_gpu less the FP8 parameters' saving (none in a bf16 run).
    params = parplan_gen.explain(model, cluster, layout, "memory.params")
    assert round(params.value) == found.estimate.memory.params  # bytes, rounded as the estimate
    assert {child.name for child in params.children} == {"plan.zero_stage", "held_weight_bytes"}
    [held] = [child for child in params.children if child.name == "held_weight_bytes"]
    part = {child.name: child for child in held.children}
    assert set(part) == {"weight_bytes", "params_per_gpu", "fp8_weight_saving_bytes"}
    assert part["fp8_weight_saving_bytes"].value == 0
    assert (part["weight_bytes"].value, part["weight_bytes"].unit) == (2, "B/param")
    assert "ZeRO" in str(part["weight_bytes"].source)
    assert str(part["weight_bytes"].where).startswith("<built-in>/cost/memory.yaml:")
    assert params.value == pytest.approx(2 * part["params_per_gpu"].value)


def test_estimate_explain_prints_the_tree_of_the_figure(capsys) -> None:
    from parplan_gen.cli.main import main

    args = ["llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64", "--tp", "2"]
    assert main(["estimate", *args, "--json"]) == 0
    step_s = json.loads(capsys.readouterr().out)["time"]["step_s"]
    assert main(["estimate", *args, "--explain", "time.step_s", "--json"]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["name"] == "time.step_s" and tree["unit"] == "s"
    assert tree["value"] == pytest.approx(step_s)
    assert main(["estimate", *args, "--explain", "time.step_s"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("time.step_s = ") and "cost/time.yaml:" in first
