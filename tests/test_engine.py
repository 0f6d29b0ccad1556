"""The rule engine's opportunity analysis: the shortcut for node-independent ops gives what
evaluating every rule at every node gives, and ties keep file order."""

from __future__ import annotations

from parplan_gen.models.graph import build_graph
from parplan_gen.models.graph_node import Node
from parplan_gen.rules.engine import analyze, best_per_node
from parplan_gen.rules.ruleset import load_rules

OPS = ("Conv2d", "MatMul", "Softmax", "Activation", "Gather", "BatchNorm")


def test_shared_opportunities_equal_rule_by_rule_evaluation():
    nodes = [Node(id=f"n{i}", op=OPS[i % len(OPS)], attrs={"flops": i}) for i in range(60)]
    edges = [(f"n{i}", f"n{i + 1}") for i in range(59)] + [("n0", "n3"), ("n3", "n6")]
    graph = build_graph("g", nodes, edges)
    rules = load_rules()
    shared = analyze(graph, rules)
    traced = analyze(graph, rules, trace=lambda *_: None)  # tracing evaluates every rule
    assert shared == traced
    assert [o.node_id for o in shared[:3]] == ["pipeline_stages", "n0", "n6"]
    assert {o.node_id for o in shared} == {"pipeline_stages"} | {n.id for n in nodes}


def test_best_per_node_is_stable_and_keeps_each_nodes_best():
    nodes = [Node(id=n, op="Conv2d") for n in ("a", "b", "c")]
    found = analyze(build_graph("g", nodes, []), load_rules())
    assert [(o.node_id, o.rule_id) for o in found] == [
        ("a", "seed.conv2d.data_parallel"),
        ("b", "seed.conv2d.data_parallel"),
        ("c", "seed.conv2d.data_parallel"),
    ]
    ranked = best_per_node([found[2], found[0], found[1], found[0].for_node("c")])
    assert [o.node_id for o in ranked] == ["c", "a", "b"]
