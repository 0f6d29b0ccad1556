"""Rule files: schema, layering (overlays by id), and errors that point at file:line."""

from __future__ import annotations

import pytest

from parplan_gen.errors import RuleError
from parplan_gen.ruleset import load_rules

from conftest import chain_graph

GENERIC_SMALL = """
opportunities:
  - id: seed.generic.data_parallel
    op: "*"
    type: DataParallel
    when: "graph.node_count > 3"
    min_devices: 2
    memory_per_device: "512 * MiB"
    communication_overhead: 0.1
    speedup: 1.5
"""


def test_overlay_replaces_a_rule_by_id(cli, write):
    graph = write("g.yaml", chain_graph(["Add"] * 4))
    assert cli("analyze", graph, "--json").json() == {"opportunities": []}
    write("mine/generic.yaml", GENERIC_SMALL)
    got = cli("analyze", graph, "--json", "--rules", graph.parent / "mine").json()
    # n = 4 > 3 now: each generic node gets the overlay's DP 1.5.
    assert [(o["node_id"], o["estimated_speedup"]) for o in got["opportunities"]] == [
        ("n0", 1.5),
        ("n1", 1.5),
        ("n2", 1.5),
        ("n3", 1.5),
    ]


def test_overlay_keeps_the_replaced_rules_position(write):
    write("mine/r.yaml", GENERIC_SMALL)
    base = [r.rule.id for r in load_rules().opportunities]
    layered = load_rules([write("mine/r.yaml", GENERIC_SMALL).parent])
    assert [r.rule.id for r in layered.opportunities] == base
    assert layered.opportunities[base.index("seed.generic.data_parallel")].origin.layer.endswith(
        "mine"
    )
    assert [o.id for o in layered.overrides] == ["seed.generic.data_parallel"]


def test_a_new_op_rule_changes_the_output(cli, write):
    # A rule for a new op: Softmax nodes now get TensorParallel 3.0 instead of nothing.
    write(
        "mine/softmax.yaml",
        """
        opportunities:
          - id: mine.softmax.tensor
            op: Softmax
            type: TensorParallel
            min_devices: "min(4, graph.node_count)"
            memory_per_device: "64 * MiB"
            communication_overhead: 0.2
            speedup: "node.attr.flops / 1e9 if node.has.flops else 3.0"
        """,
    )
    graph = write(
        "g.yaml",
        """
        nodes:
          - {id: s, op: Softmax, flops: 2.5e9}
          - {id: t, op: Softmax}
        edges: [[s, t]]
        """,
    )
    got = cli("analyze", graph, "--json", "--rules", graph.parent / "mine").json()
    assert got["opportunities"] == [
        {
            "node_id": "t",
            "type": "TensorParallel",
            "estimated_speedup": 3.0,
            "resource_requirements": {
                "min_devices": 2,
                "memory_per_device": 67108864,
                "communication_overhead": 0.2,
            },
        },
        {
            "node_id": "s",
            "type": "TensorParallel",
            "estimated_speedup": 2.5,
            "resource_requirements": {
                "min_devices": 2,
                "memory_per_device": 67108864,
                "communication_overhead": 0.2,
            },
        },
    ]


def test_redefining_a_named_formula_changes_every_user(cli, write):
    # dp_speedup is used by the MatMul, Activation, BatchNorm and Conv2d DP rules.
    write("mine/f.yaml", "formulas:\n  dp_speedup: 10\n")
    graph = write("g.yaml", chain_graph(["MatMul", "Activation"]))
    got = cli("analyze", graph, "--json", "--rules", graph.parent / "mine").json()
    assert [o["estimated_speedup"] for o in got["opportunities"]] == [10.0, 9.0]


def test_a_threshold_change_in_yaml(cli, write):
    # The pipeline proposal fires from depth 3 instead of depth 5.
    write(
        "mine/p.yaml",
        """
        proposals:
          - id: seed.pipeline.stages
            group: pipeline
            type: PipelineParallel
            when: "graph.depth > 2"
            speedup: pipeline_speedup
            settings: {pp: "min(graph.depth, 8)"}
            description: "{settings.pp} stages"
        """,
    )
    graph = write("g.yaml", chain_graph(["Add"] * 3))
    got = cli("propose", graph, "--devices", 1, "--json", "--rules", graph.parent / "mine")
    assert got.json()["proposals"] == [
        {
            "type": "PipelineParallel",
            "description": "3 stages",
            "estimated_speedup": 2.0,
            "settings": {"pp": 3},
        }
    ]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("opportunities:\n  - id: x\n    op: MatMul\n    typo: 1\n", 4, "unknown key 'typo'"),
        (
            "opportunities:\n  - id: x\n    op: MatMul\n    type: DataParallel\n"
            "    min_devices: 2\n    memory_per_device: 1\n    communication_overhead: 0.1\n"
            "    speedup: graph.nodecount\n",
            8,
            "did you mean 'graph.node_count'?",
        ),
        ("proposals:\n  - id: p\n    group: data\n    type: Bogus\n", 4, "type"),
        ("formulas:\n  a: b\n  b: a\n", 2, "a -> b -> a"),
        ("- just a list\n", 1, "must be a mapping"),
        ("opportunties: []\n", 1, "did you mean 'opportunities'?"),
        (
            "opportunities:\n  - id: g\n    scope: graph\n    type: DataParallel\n"
            "    min_devices: 2\n    memory_per_device: 1\n    communication_overhead: 0.1\n"
            "    speedup: 1\n",
            2,
            "needs `node_id`",
        ),
        (
            "proposals:\n  - id: p\n    group: data\n    type: DataParallel\n    speedup: 1\n"
            "    description: x\n    settings: {Bad-Key: 1}\n",
            7,
            "setting name 'Bad-Key'",
        ),
    ],
)
def test_rule_errors_point_at_the_line(write, text, line, fragment):
    path = write("bad/r.yaml", text)
    with pytest.raises(RuleError) as info:
        load_rules([path.parent])
    assert fragment in str(info.value)
    assert info.value.where.file == str(path)
    assert info.value.where.line == line


def test_duplicate_id_in_one_layer_names_both_places(write):
    rule = (
        "  - id: dup\n    op: MatMul\n    type: DataParallel\n    min_devices: 2\n"
        "    memory_per_device: 1\n    communication_overhead: 0.1\n    speedup: 1\n"
    )
    write("bad/a.yaml", "opportunities:\n" + rule)
    b = write("bad/b.yaml", "opportunities:\n" + rule)
    with pytest.raises(RuleError) as info:
        load_rules([b.parent])
    assert "duplicate rule id 'dup' (first defined at" in str(info.value)
    assert "a.yaml:2" in str(info.value)
    assert str(info.value).startswith(f"{b}:2")


def test_override_must_keep_the_kind(write):
    path = write(
        "bad/r.yaml",
        """
        proposals:
          - id: seed.matmul.data_parallel
            group: data
            type: DataParallel
            speedup: 1
            description: x
        """,
    )
    with pytest.raises(RuleError, match="is under `proposals` here but under `opportunities` at"):
        load_rules([path.parent])


def test_missing_rules_dir_is_bad_input(cli, write, tmp_path):
    graph = write("g.yaml", chain_graph(["MatMul"]))
    result = cli("analyze", graph, "--rules", tmp_path / "nope")
    assert result.code == 1
    assert result.err == f"parplan: error: {tmp_path / 'nope'}: rules directory not found\n"
