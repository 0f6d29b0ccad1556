"""The built-in rules reproduce the seed's ParallelPlannerAgent (with true graph depth).

Expected numbers are worked by hand from shared/seed/000_3bd637f12122e258.txt; the arithmetic is
in the comments. The property tests compare against tests/seed_oracle.py, an independent
float32 transliteration of the seed that does not use the rules.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan_gen.models.graph import build_graph
from parplan_gen.models.graph_node import Node
from parplan_gen.rules.engine import analyze, propose
from parplan_gen.rules.ruleset import load_rules

import seed_oracle
from conftest import REPO, chain_graph

GiB = 1073741824
MiB = 1048576
RULES = load_rules()


def opp(node_id, kind, speedup, devices, memory, overhead):
    return {
        "node_id": node_id,
        "type": kind,
        "estimated_speedup": speedup,
        "resource_requirements": {
            "min_devices": devices,
            "memory_per_device": memory,
            "communication_overhead": overhead,
        },
    }


def assert_close(actual, expected):
    """Equal structure; floats equal within 1e-4 relative (the seed computes in f32)."""
    if isinstance(expected, float):
        assert math.isclose(actual, expected, rel_tol=1e-4), (actual, expected)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_close(actual[key], expected[key])
    elif isinstance(expected, list):
        assert len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e)
    else:
        assert actual == expected


def run_analyze(cli, write, text):
    result = cli("analyze", write("g.yaml", text), "--json")
    assert result.code == 0, result.err
    return result.json()["opportunities"]


def run_propose(cli, write, text, devices):
    result = cli("propose", write("g.yaml", text), "--devices", devices, "--json")
    assert result.code == 0, result.err
    return result.json()["proposals"]


def test_empty_graph(cli, write):
    # No nodes: no node arms run; depth 0 is not > 4; n = 0 is not > 5.
    assert run_analyze(cli, write, chain_graph([])) == []
    assert run_propose(cli, write, chain_graph([]), 2) == []
    # Only the communication group looks at the device count: 8 > 2, 8 >= 4, 8 >= 8, 8 > 4.
    speedups = [p["estimated_speedup"] for p in run_propose(cli, write, chain_graph([]), 8)]
    assert speedups == [1.5, 1.8, 1.3, 1.2]


def test_single_matmul(cli, write):
    # n = 1: DP = 2.0 * clamp(0.1, 1, 2) = 2.0; TP = 1.8 * clamp(0.05, 0.8, 1.5) = 1.44 < 2.0,
    # so the de-duplication keeps DP. depth 1 is not > 4: no pipeline entry.
    expected = [opp("n0", "DataParallel", 2.0, 2, GiB, 0.05)]
    assert_close(run_analyze(cli, write, chain_graph(["MatMul"])), expected)


def test_chain_of_5_matmuls(cli, write):
    # depth 5 > 4: pipeline speedup 5 * (1 - 1/5) = 4.0, min_devices min(5, 8) = 5,
    # overhead 0.05 * 5 = 0.25; it sorts before the five DP entries (2.0 each, n = 5).
    expected = [opp("pipeline_stages", "PipelineParallel", 4.0, 5, GiB, 0.25)]
    expected += [opp(f"n{i}", "DataParallel", 2.0, 2, GiB, 0.05) for i in range(5)]
    text = chain_graph(["MatMul"] * 5)
    assert_close(run_analyze(cli, write, text), expected)
    # n = 5 is not > 5: no data proposals. Tensor: 5 MatMuls, TP 1.8 * clamp(5/20) = 1.44.
    # Devices 4: ring (4 >= 4) and overlap (4 > 2); not hierarchical (< 8), not tree (not > 4).
    expected_p = [
        (
            "PipelineParallel",
            "Implement 5-stage pipeline parallelism for depth-5 graph (estimated 4.0x speedup)",
            4.0,
            {"pp": 5},
        ),
        (
            "TensorParallel",
            "Apply column-parallel tensor splitting to 5 MatMul operations "
            "(estimated 1.4x speedup)",
            1.44,
            {"matmul_split": "column"},
        ),
        (
            "CommunicationOptimization",
            "Use ring all-reduce pattern for 4 devices to achieve 2(n-1)/n bandwidth efficiency",
            1.5,
            {"nccl_algo": "Ring"},
        ),
        (
            "CommunicationOptimization",
            "Overlap gradient all-reduce with backward computation for 4 devices",
            1.3,
            {"overlap_grad_reduce": True},
        ),
    ]
    got = run_propose(cli, write, text, 4)
    assert_close(
        got,
        [
            {"type": t, "description": d, "estimated_speedup": s, "settings": st_}
            for t, d, s, st_ in expected_p
        ],
    )


def test_chain_of_6_generic_ops(cli, write):
    # n = 6 is not > 10: generic ops get no DP entry. depth 6: pipeline 6 * (5/6) = 5.0,
    # min_devices 6, overhead 0.3.
    text = chain_graph(["Add"] * 6)
    assert_close(
        run_analyze(cli, write, text),
        [opp("pipeline_stages", "PipelineParallel", 5.0, 6, GiB, 0.3)],
    )
    # n = 6 > 5: dp = clamp(6 // 5, 2, 8) = 2, speedup 2 * clamp(0.6, 1, 2) = 2.0.
    # depth 6 is not > 6: no micro-batch proposal. 2 devices: no communication proposals.
    got = run_propose(cli, write, text, 2)
    assert [p["description"] for p in got] == [
        "Apply data parallelism across 2 devices for 6 compute nodes (estimated 2.0x speedup)",
        "Implement 6-stage pipeline parallelism for depth-6 graph (estimated 5.0x speedup)",
    ]
    assert [p["settings"] for p in got] == [{"dp": 2}, {"pp": 6}]


def test_chain_of_9_conv_blocks(cli, write):
    # n = 9: DP base 2 * clamp(0.9, 1, 2) = 2.0. Conv2d DP 2.0 * 1.1 = 2.2 beats its
    # ModelParallel 2.0; BatchNorm and Activation DP 2.0 * 0.9 = 1.8. depth 9: pipeline
    # 9 * (8/9) = 8.0, min_devices min(9, 8) = 8, overhead 0.45. Equal speedups keep node order.
    ops = ["Conv2d", "BatchNorm", "Activation"] * 3
    expected = [opp("pipeline_stages", "PipelineParallel", 8.0, 8, GiB, 0.45)]
    expected += [opp(f"n{i}", "DataParallel", 2.2, 2, 2048 * MiB, 0.08) for i in (0, 3, 6)]
    expected += [opp(f"n{i}", "DataParallel", 1.8, 2, 256 * MiB, 0.02) for i in (1, 2, 4, 5, 7, 8)]
    text = chain_graph(ops)
    assert_close(run_analyze(cli, write, text), expected)
    # Proposals on 16 devices: dp = clamp(9 // 5 = 1, 2, 8) = 2 at 2.0x; 8 stages at 8.0x;
    # depth 9 > 6: 18 micro-batches; 9 > 8: interleaved 1F1B; 3 Conv2d: channel-parallel 2.0x;
    # no MatMul; 16 devices: ring, hierarchical, overlap, tree.
    got = run_propose(cli, write, text, 16)
    assert [(p["type"], p["estimated_speedup"]) for p in got] == [
        ("DataParallel", 2.0),
        ("PipelineParallel", 8.0),
        ("PipelineParallel", 1.3),
        ("PipelineParallel", 1.2),
        ("TensorParallel", 2.0),
        ("CommunicationOptimization", 1.5),
        ("CommunicationOptimization", 1.8),
        ("CommunicationOptimization", 1.3),
        ("CommunicationOptimization", 1.2),
    ]
    assert got[2]["description"] == "Use 18 micro-batches to reduce pipeline bubble overhead"
    assert got[2]["settings"] == {"micro_batches": 18}
    assert got[4]["description"] == "Apply channel-parallel splitting to 3 Conv2d operations"


def test_chain_of_20_matmuls(cli, write):
    # n = 20: DP 2 * clamp(2.0, 1, 2) = 4.0, TP 1.8 * clamp(1.0, 0.8, 1.5) = 1.8.
    # depth 20: pipeline 20 * (19/20) = 19.0, min_devices 8, overhead 0.05 * 20 = 1.0.
    text = chain_graph(["MatMul"] * 20)
    expected = [opp("pipeline_stages", "PipelineParallel", 19.0, 8, GiB, 1.0)]
    expected += [opp(f"n{i}", "DataParallel", 4.0, 2, GiB, 0.05) for i in range(20)]
    assert_close(run_analyze(cli, write, text), expected)
    got = run_propose(cli, write, text, 8)
    assert [p["description"] for p in got] == [
        # dp = clamp(20 // 5 = 4, 2, 8) = 4; n = 20 is not > 20: no gradient compression.
        "Apply data parallelism across 4 devices for 20 compute nodes (estimated 4.0x speedup)",
        "Implement 8-stage pipeline parallelism for depth-20 graph (estimated 19.0x speedup)",
        "Use 40 micro-batches to reduce pipeline bubble overhead",
        "Apply interleaved 1F1B schedule to reduce peak memory usage by 50%",
        "Apply column-parallel tensor splitting to 20 MatMul operations (estimated 1.8x speedup)",
        "Apply sequence parallelism for attention computation to reduce memory footprint",
        "Use ring all-reduce pattern for 8 devices to achieve 2(n-1)/n bandwidth efficiency",
        "Apply hierarchical all-reduce (intra-node then inter-node) for 8 devices",
        "Overlap gradient all-reduce with backward computation for 8 devices",
        "Enable NCCL tree algorithm for large tensor all-reduce operations",
    ]


DIAMOND = """
name: diamond
nodes:
  - {id: a, op: MatMul}
  - {id: b, op: Activation}
  - {id: c, op: Compute::Conv2d}
  - {id: d, op: Add}
edges:
  - [a, b]
  - [a, c]
  - [b, d]
  - [c, d]
"""


def test_diamond(cli, write):
    # n = 4, depth 3 (a -> b -> d): no pipeline. DP base 2.0: c (Conv2d alias) 2.2, a 2.0,
    # b 1.8; d is generic and n = 4 is not > 10.
    expected = [
        opp("c", "DataParallel", 2.2, 2, 2048 * MiB, 0.08),
        opp("a", "DataParallel", 2.0, 2, GiB, 0.05),
        opp("b", "DataParallel", 1.8, 2, 256 * MiB, 0.02),
    ]
    assert_close(run_analyze(cli, write, DIAMOND), expected)


def test_wide_fan_out(cli, write):
    # One source feeding 14 generic leaves: n = 15 > 10, so each gets DP 1.5; depth 2.
    # The MatMul source: DP 2 * clamp(1.5, 1, 2) = 3.0.
    leaves = [f"l{i}" for i in range(14)]
    nodes = "\n".join(
        ["  - {id: src, op: MatMul}"] + [f"  - {{id: {x}, op: Softmax}}" for x in leaves]
    )
    edges = "\n".join(f"  - [src, {x}]" for x in leaves)
    text = f"nodes:\n{nodes}\nedges:\n{edges}\n"
    expected = [opp("src", "DataParallel", 3.0, 2, GiB, 0.05)]
    expected += [opp(x, "DataParallel", 1.5, 2, 512 * MiB, 0.1) for x in leaves]
    assert_close(run_analyze(cli, write, text), expected)


# --------------------------------------------------------------------------------------------
# Property: for any DAG, the rules agree with the independent oracle.

OPS = ["MatMul", "Conv2d", "Activation", "BatchNorm", "Add", "Softmax", "Compute::MatMul"]


@st.composite
def dags(draw):
    n = draw(st.integers(min_value=0, max_value=40))
    ops = draw(st.lists(st.sampled_from(OPS), min_size=n, max_size=n))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, min(n, i + 6))]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=60)) if pairs else []
    return ops, sorted(edges)


def _graph(ops, edges):
    nodes = [Node(id=f"n{i}", op=op) for i, op in enumerate(ops)]
    return build_graph("g", nodes, [(f"n{a}", f"n{b}") for a, b in edges])


@settings(max_examples=150, deadline=None)
@given(dags(), st.integers(min_value=1, max_value=64))
def test_rules_match_the_seed_on_random_dags(dag, devices):
    ops, edges = dag
    canonical = [op.removeprefix("Compute::") for op in ops]
    graph = _graph(ops, edges)
    want = seed_oracle.analyze(canonical, edges)
    got = analyze(graph, RULES)
    assert [(o.node_id, o.type) for o in got] == [(o.node_id, o.type) for o in want]
    for g, w in zip(got, want, strict=True):
        assert math.isclose(g.estimated_speedup, float(w.speedup), rel_tol=1e-4)
        r = g.resource_requirements
        assert (r.min_devices, r.memory_per_device) == (w.min_devices, w.memory)
        assert math.isclose(r.communication_overhead, w.overhead, rel_tol=1e-4)
    want_p = seed_oracle.propose(canonical, edges, devices)
    got_p = propose(graph, RULES, devices)
    assert [(p.type, p.description) for p in got_p] == [(t, d) for t, d, _ in want_p]
    for p, (_, _, s) in zip(got_p, want_p, strict=True):
        assert math.isclose(p.estimated_speedup, float(s), rel_tol=1e-4)


@pytest.mark.parametrize("depth", range(5, 200))
def test_pipeline_speedup_matches_float32_for_every_depth(depth):
    # The seed computes depth * (1 - 1/depth) in f32; the rule computes it in f64.
    assert math.isclose(
        depth * (1 - 1 / depth), float(seed_oracle.pipeline_speedup(depth)), rel_tol=1e-6
    )


def test_cnn_block_example(cli):
    # examples/cnn_block.yaml: a 12-node chain. n = 12: DP base 2 * clamp(1.2, 1, 2) = 2.4.
    # Conv2d DP 2.4 * 1.1 = 2.64 (beats ModelParallel 2.0); the MatMul fc DP 2.4 (beats TP
    # 1.8 * clamp(0.6, 0.8, 1.5) = 1.44); BatchNorm/Activation 2.4 * 0.9 = 2.16; MaxPool2d and
    # Flatten are generic and n = 12 > 10, so 1.5. depth 12: pipeline 12 * 11/12 = 11.0,
    # min_devices min(12, 8) = 8, overhead 0.05 * 12 = 0.6.
    got = cli("analyze", REPO / "examples" / "cnn_block.yaml", "--json").json()["opportunities"]
    expected = [opp("pipeline_stages", "PipelineParallel", 11.0, 8, GiB, 0.6)]
    expected += [
        opp(c, "DataParallel", 2.64, 2, 2048 * MiB, 0.08) for c in ("conv1", "conv2", "conv3")
    ]
    expected += [opp("fc", "DataParallel", 2.4, 2, GiB, 0.05)]
    expected += [
        opp(n, "DataParallel", 2.16, 2, 256 * MiB, 0.02)
        for n in ("bn1", "relu1", "bn2", "relu2", "bn3", "relu3")
    ]
    expected += [opp(n, "DataParallel", 1.5, 2, 512 * MiB, 0.1) for n in ("pool", "flatten")]
    assert_close(got, expected)
    proposals = cli("propose", REPO / "examples" / "cnn_block.yaml", "--devices", 8, "--json")
    assert [p["description"] for p in proposals.json()["proposals"]] == [
        # dp = clamp(12 // 5 = 2, 2, 8) = 2.
        "Apply data parallelism across 2 devices for 12 compute nodes (estimated 2.4x speedup)",
        "Implement 8-stage pipeline parallelism for depth-12 graph (estimated 11.0x speedup)",
        "Use 24 micro-batches to reduce pipeline bubble overhead",
        "Apply interleaved 1F1B schedule to reduce peak memory usage by 50%",
        "Apply column-parallel tensor splitting to 1 MatMul operations (estimated 1.4x speedup)",
        "Apply channel-parallel splitting to 3 Conv2d operations",
        "Use ring all-reduce pattern for 8 devices to achieve 2(n-1)/n bandwidth efficiency",
        "Apply hierarchical all-reduce (intra-node then inter-node) for 8 devices",
        "Overlap gradient all-reduce with backward computation for 8 devices",
        "Enable NCCL tree algorithm for large tensor all-reduce operations",
    ]


@pytest.mark.parametrize("name", ["transformer_block.yaml", "transformer_block.json"])
def test_transformer_block_example(cli, name):
    # examples/transformer_block.*: 25 nodes, 8 of them MatMul (two spelled Compute::MatMul),
    # one Activation. Longest path x -> ln1 -> q_proj -> q_heads -> scores -> scale -> mask ->
    # softmax -> attn_dropout -> context -> merge_heads -> o_proj -> resid_dropout -> add1 ->
    # ln2 -> mlp_up -> gelu -> mlp_down -> mlp_dropout -> add2 -> out: depth 21.
    # n = 25: DP base 2 * clamp(2.5, 1, 2) = 4.0 (MatMul), gelu 4.0 * 0.9 = 3.6, the 16 generic
    # nodes 1.5 (n > 10). Pipeline 21 * 20/21 = 20.0, min_devices 8, overhead 0.05 * 21 = 1.05.
    path = REPO / "examples" / name
    got = cli("analyze", path, "--json").json()["opportunities"]
    matmuls = ["q_proj", "k_proj", "v_proj", "scores", "context", "o_proj", "mlp_up", "mlp_down"]
    generic = ["x", "ln1", "q_heads", "k_heads", "v_heads", "scale", "mask", "softmax",
               "attn_dropout", "merge_heads", "resid_dropout", "add1", "ln2", "mlp_dropout",
               "add2", "out"]  # fmt: skip
    expected = [opp("pipeline_stages", "PipelineParallel", 20.0, 8, GiB, 1.05)]
    expected += [opp(m, "DataParallel", 4.0, 2, GiB, 0.05) for m in matmuls]
    expected += [opp("gelu", "DataParallel", 3.6, 2, 256 * MiB, 0.02)]
    expected += [opp(g, "DataParallel", 1.5, 2, 512 * MiB, 0.1) for g in generic]
    assert_close(got, expected)
    proposals = cli("propose", path, "--devices", 8, "--json").json()["proposals"]
    assert [p["description"] for p in proposals[:6]] == [
        # dp = clamp(25 // 5 = 5, 2, 8) = 5; n = 25 > 20: gradient compression too.
        "Apply data parallelism across 5 devices for 25 compute nodes (estimated 4.0x speedup)",
        "Use gradient compression (TopK or random) to reduce all-reduce communication overhead",
        "Implement 8-stage pipeline parallelism for depth-21 graph (estimated 20.0x speedup)",
        "Use 42 micro-batches to reduce pipeline bubble overhead",
        "Apply interleaved 1F1B schedule to reduce peak memory usage by 50%",
        # TP 1.8 * clamp(25 / 20, 0.8, 1.5) = 2.25, printed "2.2" (half to even, as Rust's f32).
        "Apply column-parallel tensor splitting to 8 MatMul operations (estimated 2.2x speedup)",
    ]
    assert proposals[0]["settings"] == {"dp": 5}
    assert len(proposals) == 10  # 8 MatMuls is not > 10: no sequence parallelism; 4 comm.
