"""The model graph: native file checks (exact messages and lines), statistics, levels."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan_gen.inputs.errors import GraphError, SourceError
from parplan_gen.inputs.source import parse_document
from parplan_gen.models.graph import ModelGraph, build_graph, graph_from_document, load_graph
from parplan_gen.models.graph_dag import GraphStats
from parplan_gen.models.graph_node import Node, canonical_op

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def graph_of(text: str, kind: str = "yaml") -> ModelGraph:
    """The graph of inline YAML (or JSON) text, named g.yaml (g.json) in errors."""
    return graph_from_document(parse_document(textwrap.dedent(text), f"g.{kind}", kind))


def error_of(text: str, kind: str = "yaml") -> str:
    """The rendered GraphError (`file:line:col: key.path: message`) that `text` raises."""
    with pytest.raises(GraphError) as info:
        graph_of(text, kind)
    return str(info.value)


def chain(n: int) -> str:
    nodes = "".join(f"  - {{id: n{i}, op: MatMul}}\n" for i in range(n))
    edges = "".join(f"  - [n{i}, n{i + 1}]\n" for i in range(n - 1))
    return f"nodes:\n{nodes}edges:\n{edges}" if n > 1 else f"nodes:\n{nodes or '  []'}\n"


# --- statistics -------------------------------------------------------------------------------


def stats(**fields: object) -> GraphStats:
    return GraphStats(**{"op_counts": {}, "attr_sums": {}, **fields})


def test_empty_graph():
    g = graph_of("nodes: []\n")
    assert g.stats == stats(node_count=0, edge_count=0, depth=0)
    assert g.name == "g"  # the file's stem
    assert g.nodes == () and g.edges == ()


def test_one_node():
    g = graph_of("name: one\nnodes: [{id: a, op: Conv2d}]\n")
    assert g.name == "one"
    assert g.stats == stats(node_count=1, edge_count=0, depth=1, op_counts={"Conv2d": 1})
    assert (g.level("a"), g.in_degree("a"), g.out_degree("a")) == (1, 0, 0)


@pytest.mark.parametrize("n", [2, 3, 10])
def test_chain_depth_is_its_length(n):
    g = graph_of(chain(n))
    assert (g.stats.node_count, g.stats.edge_count, g.stats.depth) == (n, n - 1, n)
    assert [g.level(f"n{i}") for i in range(n)] == list(range(1, n + 1))


DIAMOND = """
nodes:
  - {id: a, op: MatMul}
  - {id: b, op: Activation}
  - {id: c, op: "Compute::MatMul"}
  - {id: d, op: Add}
edges:
  - [a, b]
  - [a, c]
  - [b, d]
  - {from: c, to: d}
"""


def test_diamond():
    g = graph_of(DIAMOND)
    assert g.stats == stats(
        node_count=4, edge_count=4, depth=3, op_counts={"MatMul": 2, "Activation": 1, "Add": 1}
    )
    assert [g.level(x) for x in "abcd"] == [1, 2, 2, 3]
    assert [(g.in_degree(x), g.out_degree(x)) for x in "abcd"] == [(0, 2), (1, 1), (1, 1), (2, 0)]
    assert g.edges == (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"))


def test_depth_is_the_longest_path_not_the_shortest():
    # a -> d directly and a -> b -> c -> d: depth counts the longer way.
    g = graph_of(
        """
        nodes: [{id: a, op: X}, {id: b, op: X}, {id: c, op: X}, {id: d, op: X}]
        edges: [[a, d], [a, b], [b, c], [c, d]]
        """
    )
    assert (g.stats.depth, g.level("d")) == (4, 4)


def test_wide_fan_out():
    leaves = [f"leaf{i}" for i in range(50)]
    nodes = "".join(f"  - {{id: {leaf}, op: Activation}}\n" for leaf in leaves)
    edges = "".join(f"  - [root, {leaf}]\n" for leaf in leaves)
    g = graph_of(f"nodes:\n  - {{id: root, op: MatMul}}\n{nodes}edges:\n{edges}")
    assert g.stats == stats(
        node_count=51, edge_count=50, depth=2, op_counts={"MatMul": 1, "Activation": 50}
    )
    assert (g.out_degree("root"), g.in_degree("leaf49"), g.level("leaf49")) == (50, 1, 2)


def test_disconnected_components_take_the_deepest():
    g = graph_of(
        "nodes: [{id: a, op: X}, {id: b, op: X}, {id: c, op: X}, {id: lone, op: Y}]\n"
        "edges: [[a, b], [b, c]]\n"
    )
    assert (g.stats.depth, g.level("lone")) == (3, 1)


def test_attributes_and_their_sums():
    g = graph_of(
        """
        nodes:
          - {id: a, op: MatMul, flops: 1.5, params: 10, fused: true, dtype: bf16}
          - {id: b, op: MatMul, flops: 2, fused: false, dtype: fp8}
          - {id: c, op: Activation, params: 5}
        """
    )
    assert g.node("a").attrs == {"flops": 1.5, "params": 10, "fused": True, "dtype": "bf16"}
    assert type(g.node("a").attrs["params"]) is int
    assert g.node("c").attrs == {"params": 5}
    # Bools and strings are not summed; ints and floats are, as floats, in first-seen order.
    assert g.stats.attr_sums == {"flops": 3.5, "params": 15.0}
    assert list(g.stats.attr_sums) == ["flops", "params"]


def test_attr_sums_are_exactly_rounded():
    g = graph_of("nodes: [{id: a, op: X, w: 1e16}, {id: b, op: X, w: 1}, {id: c, op: X, w: -1e16}]")
    assert g.stats.attr_sums == {"w": 1.0}  # a naive left-to-right sum gives 0.0


def test_attr_sum_overflow_is_an_error():
    text = "nodes: [{id: a, op: X, w: 1.5e308}, {id: b, op: X, w: 1.5e308}]\n"
    expected = "g.yaml:1:1: nodes: attribute 'w': the sum over all nodes overflows a float"
    assert error_of(text) == expected


@pytest.mark.parametrize(
    ("op", "canonical"),
    [
        ("MatMul", "MatMul"),
        ("Compute::MatMul", "MatMul"),
        ("Compute::Softmax", "Softmax"),
        ("compute::MatMul", "compute::MatMul"),
        ("Conv2d", "Conv2d"),
    ],
)
def test_canonical_op(op, canonical):
    assert canonical_op(op) == canonical
    assert Node(id="n", op=op).op == canonical


def test_aliases_are_counted_under_the_canonical_op():
    g = graph_of(
        """
        nodes:
          - {id: a, op: "Compute::Activation"}
          - {id: b, op: MatMul}
          - {id: c, op: Activation}
          - {id: d, op: "Compute::MatMul"}
        """
    )
    assert [n.op for n in g.nodes] == ["Activation", "MatMul", "Activation", "MatMul"]
    assert g.stats.op_counts == {"Activation": 2, "MatMul": 2}


def test_integer_ids_become_strings():
    g = graph_of("nodes: [{id: 1, op: X}, {id: 2, op: X}]\nedges: [[1, 2]]\n")
    assert [n.id for n in g.nodes] == ["1", "2"]
    assert g.edges == (("1", "2"),)
    assert g.level("2") == 2


def test_nodes_keep_file_order():
    g = graph_of("nodes: [{id: z, op: X}, {id: a, op: X}, {id: m, op: X}]\nedges: [[m, z]]\n")
    assert [n.id for n in g.nodes] == ["z", "a", "m"]
    assert [g.level(x) for x in "zam"] == [2, 1, 1]


def test_unknown_node_lookup_is_a_key_error():
    g = graph_of(DIAMOND)
    with pytest.raises(KeyError, match="has no node 'zz'"):
        g.level("zz")


def test_graph_is_immutable():
    g = graph_of(DIAMOND)
    with pytest.raises(AttributeError, match="immutable"):
        g.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot assign to field 'op'"):
        g.nodes[0].op = "Add"  # type: ignore[misc]


def test_digraph_view():
    g = graph_of(DIAMOND)
    dg = g.digraph
    assert dg is g.digraph  # built once
    assert list(dg.nodes) == ["a", "b", "c", "d"]
    assert list(dg.edges) == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    assert dg.nodes["c"]["node"] == Node(id="c", op="MatMul")
    assert nx.is_frozen(dg)
    with pytest.raises(nx.NetworkXError):
        dg.add_edge("d", "a")


EXAMPLE_STATS = {
    "tiny_mlp.yaml": (3, 2, 3, {"MatMul": 2, "Activation": 1}),
    "cnn_block.yaml": (12, 11, 12, {"Conv2d": 3, "BatchNorm": 3, "Activation": 3,
                                    "MaxPool2d": 1, "Flatten": 1, "MatMul": 1}),
    "transformer_block.yaml": (25, 28, 21, {"Input": 1, "LayerNorm": 2, "MatMul": 8,
                                            "Reshape": 4, "Mul": 1, "CausalMask": 1,
                                            "Softmax": 1, "Dropout": 3, "Add": 2,
                                            "Activation": 1, "Output": 1}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXAMPLE_STATS))
def test_examples(name):
    g = load_graph(EXAMPLES / name)
    nodes, edges, depth, ops = EXAMPLE_STATS[name]
    assert (g.stats.node_count, g.stats.edge_count, g.stats.depth) == (nodes, edges, depth)
    assert g.stats.op_counts == ops
    assert list(g.stats.op_counts) == list(ops)


def test_example_sums():
    assert load_graph(EXAMPLES / "tiny_mlp.yaml").stats.attr_sums == {
        "flops": 4.2e9,
        "params": 2097152.0,
    }
    cnn = load_graph(EXAMPLES / "cnn_block.yaml").stats.attr_sums
    assert (cnn["flops"], cnn["params"]) == (457801728.0, 305802.0)
    block = load_graph(EXAMPLES / "transformer_block.yaml")
    # 12·768² + 13·768 parameters: one GPT-2 small layer.
    assert block.stats.attr_sums["params"] == 12 * 768**2 + 13 * 768 == 7087872
    assert block.stats.attr_sums["flops"] == 17839423488.0
    assert block.level("out") == 21


def test_transformer_example_json_equals_yaml():
    from_yaml = load_graph(EXAMPLES / "transformer_block.yaml")
    from_json = load_graph(EXAMPLES / "transformer_block.json")
    assert from_json.name == from_yaml.name == "transformer-block"
    assert from_json.nodes == from_yaml.nodes
    assert from_json.edges == from_yaml.edges
    assert from_json.stats == from_yaml.stats


def test_load_graph_missing_file(tmp_path):
    with pytest.raises(SourceError, match="file not found"):
        load_graph(tmp_path / "nope.yaml")


def test_load_100k_node_chain_from_json(tmp_path):
    n = 100_000
    data = {
        "nodes": [{"id": f"n{i}", "op": "MatMul", "flops": 1.0} for i in range(n)],
        "edges": [[f"n{i}", f"n{i + 1}"] for i in range(n - 1)],
    }
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    g = load_graph(path)  # its speed is measured by benchmarks/large_graph.py
    assert (g.stats.node_count, g.stats.depth, g.level(f"n{n - 1}")) == (n, n, n)
    assert g.stats.attr_sums == {"flops": float(n)}


def test_integer_ids_are_their_strings_on_every_path():
    ints = graph_of('{"nodes": [{"id": 1, "op": "A"}, {"id": 2, "op": "B"}], "edges": [[1, 2]]}')
    strings = graph_of("nodes: [{id: '1', op: A}, {id: '2', op: B}]\nedges: [{from: 1, to: '2'}]\n")
    assert (
        (ints.nodes, ints.edges)
        == (strings.nodes, strings.edges)
        == (
            (Node(id="1", op="A"), Node(id="2", op="B")),
            (("1", "2"),),
        )
    )


def test_nodes_share_their_op_strings_and_are_slotted():
    g = graph_of("nodes: [{id: a, op: Compute::MatMul}, {id: b, op: MatMul}]\n")
    assert g.nodes[0].op is g.nodes[1].op
    assert not hasattr(g.nodes[0], "__dict__")  # ~250 bytes a node with its attributes


def test_a_graph_file_over_its_cap_is_refused_unread(tmp_path, monkeypatch):
    from parplan_gen.models import graph

    monkeypatch.setattr(graph, "MAX_GRAPH_BYTES", 1024)
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"nodes": [{"id": f"n{i}", "op": "A"} for i in range(100)]}))
    with pytest.raises(
        SourceError, match=r"^\S+: file is 2,[0-9]{3} bytes; the limit is 1,024 bytes"
    ):
        load_graph(path)


def test_many_nodes_are_validated_in_chunks_and_errors_still_point_at_the_node():
    nodes = [{"id": f"n{i}", "op": "A", "w": i} for i in range(10_000)]
    nodes[9_000]["w"] = [1]
    with pytest.raises(GraphError) as info:
        graph_of(json.dumps({"nodes": nodes}, indent=0), "json")
    # indent=0: `{`, `"nodes": [`, then five lines a node ({, id, op, w, }): w of node i is on
    # line 6 + 5i
    assert str(info.value).startswith("g.json:45006:1: nodes[9000].w: node 'n9000': attribute 'w'")


# --- errors: exact message and position ---------------------------------------------------------

ABC = "nodes:\n  - {id: a, op: MatMul}\n  - {id: b, op: MatMul}\n  - {id: c, op: MatMul}\n"
MAPPING = "a graph file must be a mapping with `nodes` (and optional `edges`, `name`)"
EDGE_SHAPE = "an edge must be a 2-item list [from, to] or a mapping {from: ..., to: ...}"
EDGE_END = "an edge end must be a node id (a non-empty string or an integer)"
NODE_ID = "node `id` must be a non-empty string or an integer"
ATTR = "must be a finite number, a string or a boolean"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- a\n", f"g.yaml:1:1: {MAPPING}, got a list of 1 item"),
        ("hello\n", f"g.yaml:1:1: {MAPPING}, got a string ('hello')"),
        ("name: g\nnodez: []\n",
         "g.yaml:2:1: nodez: unknown key 'nodez'; did you mean 'nodes'? (allowed: name, nodes, edges)"),
        ("nodes: []\nextra: 1\n", "g.yaml:2:1: extra: unknown key 'extra' (allowed: name, nodes, edges)"),
        ("name: g\n", "g.yaml:1:1: missing `nodes` (a list of {id, op, ...})"),
        ("name: g\nnodes: {a: 1}\n", "g.yaml:2:1: nodes: `nodes` must be a list, got a mapping (keys: a)"),
        ("nodes:\n", "g.yaml:1:1: nodes: `nodes` must be a list, got null"),
        ("nodes: []\nedges: {a: b}\n", "g.yaml:2:1: edges: `edges` must be a list, got a mapping (keys: a)"),
        ("name: 3\nnodes: []\n", "g.yaml:1:1: name: `name` must be a non-empty string, got a number (3)"),
        ("nodes: []\nname: ''\n", "g.yaml:2:1: name: `name` must be a non-empty string, got an empty string"),
    ],
)  # fmt: skip
def test_top_level_errors(text, expected):
    assert error_of(text) == expected


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ("fc1", "2:5: nodes[0]: a node must be a mapping with `id` and `op`, got a string ('fc1')"),
        ("{op: MatMul}", "2:5: nodes[0]: node has no `id`"),
        ("{id: '', op: MatMul}", f"2:6: nodes[0].id: {NODE_ID}, got an empty string"),
        ("{id: 1.5, op: MatMul}", f"2:6: nodes[0].id: {NODE_ID}, got a number (1.5)"),
        ("{id: true, op: MatMul}", f"2:6: nodes[0].id: {NODE_ID}, got a boolean (true)"),
        ("{id: null, op: MatMul}", f"2:6: nodes[0].id: {NODE_ID}, got null"),
        ("{id: fc1, flops: 1}", "2:5: nodes[0]: node 'fc1' has no `op`"),
        ("{id: fc1, op: ''}", "2:15: nodes[0].op: node 'fc1': `op` must be a non-empty string, got an empty string"),
        ("{id: fc1, op: 'Compute::'}",
         "2:15: nodes[0].op: node 'fc1': `op` must be a non-empty string, got 'Compute::', which names no op"),
        ("{id: fc1, op: 7}", "2:15: nodes[0].op: node 'fc1': `op` must be a non-empty string, got a number (7)"),
        ("{id: fc1, op: [MatMul]}",
         "2:15: nodes[0].op: node 'fc1': `op` must be a non-empty string, got a list of 1 item"),
        ("{id: fc1, op: X, shape: [1, 2]}", f"2:22: nodes[0].shape: node 'fc1': attribute 'shape' {ATTR}, got a list of 2 items"),
        ("{id: fc1, op: X, meta: {a: 1}}", f"2:22: nodes[0].meta: node 'fc1': attribute 'meta' {ATTR}, got a mapping (keys: a)"),
        ("{id: fc1, op: X, flops: null}", f"2:22: nodes[0].flops: node 'fc1': attribute 'flops' {ATTR}, got null"),
        ("{id: fc1, op: X, flops: .nan}", f"2:22: nodes[0].flops: node 'fc1': attribute 'flops' {ATTR}, got a number (nan)"),
        ("{id: fc1, op: X, flops: .inf}", f"2:22: nodes[0].flops: node 'fc1': attribute 'flops' {ATTR}, got a number (inf)"),
        ("{id: fc1, op: X, flops: -.inf}", f"2:22: nodes[0].flops: node 'fc1': attribute 'flops' {ATTR}, got a number (-inf)"),
        ("{id: fc1, op: X, n: " + "9" * 400 + "}",
         f"2:22: nodes[0].n: node 'fc1': attribute 'n' {ATTR}, got an integer of 400 digits, too large for a float"),
    ],
)  # fmt: skip
def test_node_errors(node, expected):
    assert error_of(f"nodes:\n  - {node}\n") == f"g.yaml:{expected}"


def test_bad_attribute_is_found_after_good_nodes():
    text = "nodes:\n  - {id: ok, op: X, flops: 1}\n  - id: fc1\n    op: MatMul\n    flops: .nan\n"
    assert (
        error_of(text)
        == f"g.yaml:5:5: nodes[1].flops: node 'fc1': attribute 'flops' {ATTR}, got a number (nan)"
    )


def test_duplicate_node_id():
    text = "nodes:\n  - {id: fc1, op: MatMul}\n  - {id: act, op: Activation}\n  - {id: fc1, op: MatMul}\n"
    assert (
        error_of(text)
        == "g.yaml:4:6: nodes[2].id: duplicate node id 'fc1' (first defined at g.yaml:2)"
    )


def test_duplicate_node_id_integer_and_string():
    text = "nodes:\n  - {id: 1, op: X}\n  - {id: '1', op: X}\n"
    assert (
        error_of(text)
        == "g.yaml:3:6: nodes[1].id: duplicate node id '1' (first defined at g.yaml:2)"
    )


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ("[a, b, c]", f"6:5: edges[0]: {EDGE_SHAPE}, got a list of 3 items"),
        ("a", f"6:5: edges[0]: {EDGE_SHAPE}, got a string ('a')"),
        ("{src: a, dst: b}", f"6:5: edges[0]: {EDGE_SHAPE}, got a mapping (keys: src, dst)"),
        ("{from: a, to: b, w: 1}", f"6:5: edges[0]: {EDGE_SHAPE}, got a mapping (keys: from, to, w)"),
        ("[a, null]", f"6:9: edges[0][1]: {EDGE_END}, got null"),
        ("{from: a, to: 1.5}", f"6:15: edges[0].to: {EDGE_END}, got a number (1.5)"),
        ("[zz, a]", "6:6: edges[0][0]: edge [zz, a]: unknown node 'zz'"),
        ("{from: a, to: zz}", "6:15: edges[0].to: edge [a, zz]: unknown node 'zz'"),
        ("[b, b]", "6:5: edges[0]: edge [b, b]: self-loop on node 'b'"),
    ],
)  # fmt: skip
def test_edge_errors(edges, expected):
    assert error_of(f"{ABC}edges:\n  - {edges}\n") == f"g.yaml:{expected}"


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ("[a, b], [a, zz]", "7:9: edges[1][1]: edge [a, zz]: unknown node 'zz'"),
        ("[a, b], [b, c], [a, b]", "8:5: edges[2]: duplicate edge [a, b] (first at g.yaml:6)"),
        ("[a, b], {from: a, to: b}", "7:5: edges[1]: duplicate edge [a, b] (first at g.yaml:6)"),
        ("[a, b], [b, c], [c, a]", "8:5: edges[2]: cycle: a -> b -> c -> a"),
        ("[b, c], [c, b], [a, b]", "7:5: edges[1]: cycle: b -> c -> b"),
        # The first bad edge in file order is reported, whatever its kind.
        ("[a, b], [c, c], [a, b]", "7:5: edges[1]: edge [c, c]: self-loop on node 'c'"),
        ("[a, b], [a, b], [c, zz]", "7:5: edges[1]: duplicate edge [a, b] (first at g.yaml:6)"),
    ],
)  # fmt: skip
def test_edge_list_errors(edges, expected):
    items = "".join(f"  - {e}\n" for e in _split_edges(edges))
    assert error_of(f"{ABC}edges:\n{items}") == f"g.yaml:{expected}"


def _split_edges(text: str) -> list[str]:
    """'[a, b], {from: a, to: b}' -> ['[a, b]', '{from: a, to: b}']."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    return [*out, text[start:].strip()]


def test_cycle_starts_at_its_first_listed_node_and_skips_the_tail():
    text = """\
    nodes:
      - {id: x, op: A}
      - {id: w, op: A}
      - {id: y, op: A}
      - {id: z, op: A}
    edges:
      - [x, y]
      - [y, z]
      - [z, w]
      - [w, y]
    """
    assert error_of(text) == "g.yaml:9:5: edges[2]: cycle: w -> y -> z -> w"  # the closing edge


def test_errors_in_json_have_lines_too():
    text = '{\n  "nodes": [\n    {"id": "a", "op": "X"},\n    {"id": "a", "op": "Y"}\n  ]\n}\n'
    assert (
        error_of(text, "json")
        == "g.json:4:6: nodes[1].id: duplicate node id 'a' (first defined at g.json:3)"
    )


# --- build_graph (importers) ------------------------------------------------------------------


def test_build_graph_without_a_document():
    nodes = [Node(id="a", op="X"), Node(id="b", op="Compute::Y", attrs={"w": 2})]
    g = build_graph("imported", nodes, [("a", "b")])
    assert (g.name, g.stats.depth, g.node("b").op) == ("imported", 2, "Y")
    with pytest.raises(GraphError) as info:
        build_graph("imported", nodes, [("a", "b"), ("b", "a")])
    assert str(info.value) == "cycle: a -> b -> a"
    with pytest.raises(GraphError) as info:
        build_graph("imported", [*nodes, Node(id="a", op="Z")], [])
    assert str(info.value) == "duplicate node id 'a' (first defined at nodes[0].id)"


def test_build_graph_with_a_foreign_document_points_at_the_file():
    doc = parse_document('{"model_type": "gpt2"}', "config.json", "json")
    with pytest.raises(GraphError) as info:
        build_graph("gpt2", [Node(id="a", op="X")], [("a", "zz")], doc=doc)
    assert str(info.value) == "config.json: edge [a, zz]: unknown node 'zz'"


def test_node_model_refuses_bad_values():
    with pytest.raises(ValueError, match="names no op"):
        Node(id="a", op="Compute::")
    with pytest.raises(ValueError):
        Node(id="", op="X")
    with pytest.raises(ValueError):
        Node(id="a", op="X", attrs={"w": float("nan")})
    with pytest.raises(ValueError):
        Node(id="a", op="X", attrs={"w": [1]})
    with pytest.raises(ValueError):
        Node(id="a", op="X", other=1)  # type: ignore[call-arg]
    assert Node(id="a", op="X", attrs={"b": True, "i": 1}).attrs == {"b": True, "i": 1}


# --- properties ---------------------------------------------------------------------------------

OPS = ["MatMul", "Conv2d", "Activation", "BatchNorm", "Add", "Compute::MatMul"]


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[Node], list[tuple[str, str]]]:
    """Random DAGs: edges only from a lower to a higher index, any attributes."""
    n = draw(st.integers(min_value=0, max_value=20))
    ops = draw(st.lists(st.sampled_from(OPS), min_size=n, max_size=n))
    values = st.integers(-(10**6), 10**6) | st.floats(-1e6, 1e6) | st.booleans()
    flops = draw(st.lists(values, min_size=n, max_size=n))
    params = draw(st.lists(st.none() | values, min_size=n, max_size=n))
    nodes = []
    for i in range(n):
        attrs = (
            {"flops": flops[i]} if params[i] is None else {"params": params[i], "flops": flops[i]}
        )
        nodes.append(Node(id=f"n{i}", op=ops[i], attrs=attrs))
    pairs = [(f"n{i}", f"n{j}") for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=60)) if pairs else []
    return nodes, edges


@settings(max_examples=100, deadline=None)
@given(dags(), st.randoms(use_true_random=False))
def test_depth_and_levels_match_networkx_and_ignore_listing_order(dag, rnd):
    nodes, edges = dag
    g = build_graph("g", nodes, edges)
    dg = nx.DiGraph()
    dg.add_nodes_from(n.id for n in nodes)
    dg.add_edges_from(edges)
    assert g.stats.depth == len(nx.dag_longest_path(dg))
    for node in nodes:
        preds = [g.level(p) for p in dg.predecessors(node.id)]
        assert g.level(node.id) == 1 + max(preds, default=0)
        assert g.in_degree(node.id) == dg.in_degree(node.id)
        assert g.out_degree(node.id) == dg.out_degree(node.id)

    shuffled_nodes, shuffled_edges = list(nodes), list(edges)
    rnd.shuffle(shuffled_nodes)
    rnd.shuffle(shuffled_edges)
    h = build_graph("g", shuffled_nodes, shuffled_edges)
    assert h.stats.model_dump(exclude={"op_counts"}) == g.stats.model_dump(exclude={"op_counts"})
    assert sorted(h.stats.op_counts.items()) == sorted(g.stats.op_counts.items())
    assert all(h.level(n.id) == g.level(n.id) for n in nodes)
    assert [n.id for n in h.nodes] == [n.id for n in shuffled_nodes]


def test_an_integer_just_above_the_float_range_is_refused_like_any_other():
    # int(max float) + 1 still rounds to a float; the file's rule refuses it all the same
    big = int(sys.float_info.max) + 1
    text = json.dumps({"nodes": [{"id": "a", "op": "A", "w": 1}, {"id": "b", "op": "A", "w": big}]})
    assert error_of(text, "json") == (
        "g.json:1:67: nodes[1].w: node 'b': attribute 'w' must be a finite number, a string or "
        "a boolean, got an integer of 309 digits, too large for a float"
    )
