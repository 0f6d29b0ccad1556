"""ONNX import (built in the tests with onnx.helper, no downloads) and MODEL resolution.

The ONNX tests need the `onnx` extra and are skipped without it (fixture `ox`); the tests of
`model_source` and of the missing-extra message run everywhere.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.inputs import reading
from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.graph import build_graph, load_graph
from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.graph_node import Node
from parplan_gen.models.hf_config import load_hf_config
from parplan_gen.models.load import load_graph_for
from parplan_gen.models.onnx_file import MAX_ONNX_BYTES, MISSING_EXTRA, _drop_weight_data
from parplan_gen.models.onnx_import import load_onnx_graph
from parplan_gen.models.presets import load_graph_preset, load_preset
from parplan_gen.models.transformer_graph import model_graph
from parplan_gen.rules.engine import analyze
from parplan_gen.rules.ruleset import load_rules

from conftest import REPO

F32 = 1  # onnx.TensorProto.FLOAT
I64 = 7  # onnx.TensorProto.INT64


@pytest.fixture
def ox() -> Any:
    """The onnx module; the test is skipped where the extra is not installed."""
    return pytest.importorskip("onnx")


def weight(ox: Any, name: str, *dims: int, dtype: int = F32) -> Any:
    """An initializer of zeros: only its shape and type matter to the importer."""
    count = 1
    for d in dims:
        count *= d
    return ox.helper.make_tensor(name, dtype, list(dims), [0] * count)


def save(
    ox: Any,
    tmp_path: Path,
    nodes: list[Any],
    inputs: list[tuple[str, int, list[Any] | None]],
    outputs: list[str],
    inits: list[Any],
    *,
    opset: int = 17,
    name: str = "model",
) -> Path:
    """Write an ONNX model; `inputs` are (name, elem_type, shape with ints / names / None).
    Skips the test where the installed onnx predates `opset` (Gelu: 20, Attention: 23)."""
    if ox.defs.onnx_opset_version() < opset:
        pytest.skip(f"onnx {ox.__version__} predates opset {opset}")
    h = ox.helper
    graph = h.make_graph(
        nodes,
        "main_graph",
        [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [h.make_tensor_value_info(n, F32, None) for n in outputs],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    path = tmp_path / f"{name}.onnx"
    ox.save(model, str(path))
    return path


def attrs(graph: Any, node_id: str) -> dict[str, Any]:
    node = graph.node(node_id)
    return {"op": node.op, **node.attrs}


# --- an MLP: MatMul + Add + Relu ------------------------------------------------------------


def mlp(ox: Any, tmp_path: Path, batch: list[Any] | None = None) -> Path:
    """x [batch, 784] -> fc1 (784x256) -> +b1 -> relu -> fc2 (256x10) -> +b2."""
    mk = ox.helper.make_node
    nodes = [
        mk("MatMul", ["x", "W1"], ["h1"], name="fc1"),
        mk("Add", ["h1", "b1"], ["a1"]),  # no name: id Add_1
        mk("Relu", ["a1"], ["r1"], name="act"),
        mk("MatMul", ["r1", "W2"], ["h2"], name="fc2"),
        mk("Add", ["h2", "b2"], ["y"]),  # no name: id Add_4
    ]
    inits = [weight(ox, "W1", 784, 256), weight(ox, "b1", 256)]
    inits += [weight(ox, "W2", 256, 10), weight(ox, "b2", 10)]
    shape = [*(batch if batch is not None else ["batch"]), 784]
    return save(ox, tmp_path, nodes, [("x", F32, shape)], ["y"], inits, name="mlp")


def test_mlp_ops_params_flops_and_bytes(ox: Any, tmp_path: Path) -> None:
    graph = load_onnx_graph(mlp(ox, tmp_path), batch_size=8)
    assert graph.name == "mlp"
    assert [n.id for n in graph.nodes] == ["fc1", "Add_1", "act", "fc2", "Add_4"]
    assert graph.edges == (("fc1", "Add_1"), ("Add_1", "act"), ("act", "fc2"), ("fc2", "Add_4"))
    # fc1: 784*256 = 200,704 weights; 2 * (8 rows * 256 outputs) * 784 = 3,211,264 FLOPs;
    # output 8 x 256 float32 = 8,192 bytes.
    assert attrs(graph, "fc1") == {
        "op": "MatMul",
        "params": 200_704,
        "flops": 3_211_264,
        "activation_bytes": 8_192,
        "activation_elements": 2_048,  # 8 x 256
        "in_features": 784,
        "out_features": 256,
    }
    # The bias add: 256 parameters, element-wise so 0 FLOPs.
    assert attrs(graph, "Add_1") == {
        "op": "Add",
        "params": 256,
        "flops": 0,
        "activation_bytes": 8_192,
        "activation_elements": 2_048,
    }
    assert attrs(graph, "act") == {
        "op": "Activation",
        "params": 0,
        "flops": 0,
        "activation_bytes": 8_192,
        "activation_elements": 2_048,
        "onnx_op": "Relu",
    }
    # fc2: 256*10 = 2,560 weights; 2 * (8 * 10) * 256 = 40,960 FLOPs; 8 x 10 x 4 = 320 bytes.
    assert attrs(graph, "fc2")["params"] == 2_560
    assert attrs(graph, "fc2")["flops"] == 40_960
    assert attrs(graph, "Add_4")["activation_bytes"] == 320
    # 200,704 + 256 + 2,560 + 10
    assert graph.stats.attr_sums["params"] == 203_530
    assert graph.stats.attr_sums["flops"] == 3_211_264 + 40_960


@pytest.mark.parametrize(
    ("batch", "batch_size", "rows"),
    [
        (["batch"], 8, 8),  # symbolic: bound
        ([None], 4, 4),  # missing: bound
        ([2], 8, 2),  # fixed in the model: kept
    ],
)
def test_dynamic_batch_is_bound(
    ox: Any, tmp_path: Path, batch: list[Any], batch_size: int, rows: int
) -> None:
    graph = load_onnx_graph(mlp(ox, tmp_path, batch), batch_size=batch_size)
    assert graph.node("fc1").attrs["flops"] == 2 * rows * 256 * 784
    assert graph.node("Add_4").attrs["activation_bytes"] == rows * 10 * 4


def test_a_batch_dimension_named_in_dims_takes_that_size(ox: Any, tmp_path: Path) -> None:
    graph = load_onnx_graph(mlp(ox, tmp_path), batch_size=8, dims={"batch": 3})
    assert graph.node("fc1").attrs["flops"] == 2 * 3 * 256 * 784


# --- a conv block: Conv -> BatchNormalization -> Relu -> MaxPool -> Flatten -> Gemm ----------


def conv_block(ox: Any, tmp_path: Path) -> Path:
    """x [N, 3, 32, 32] -> conv 3x3 (16, pad 1) -> bn -> relu -> maxpool 2 -> flatten -> gemm 10."""
    mk = ox.helper.make_node
    nodes = [
        mk("Conv", ["x", "Wc", "Bc"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
        mk("BatchNormalization", ["c", "s", "o", "mean", "var"], ["b"], name="bn"),
        mk("Relu", ["b"], ["r"], name="relu"),
        mk("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        mk("Flatten", ["p"], ["f"], name="flatten", axis=1),
        mk("Gemm", ["f", "Wf", "Bf"], ["y"], name="fc", transB=1),
    ]
    inits = [weight(ox, "Wc", 16, 3, 3, 3), weight(ox, "Bc", 16)]
    inits += [weight(ox, n, 16) for n in ("s", "o", "mean", "var")]
    inits += [weight(ox, "Wf", 10, 4096), weight(ox, "Bf", 10)]
    shape = ["N", 3, 32, 32]
    return save(ox, tmp_path, nodes, [("x", F32, shape)], ["y"], inits, name="cnn")


def test_conv_block_ops_params_flops(ox: Any, tmp_path: Path) -> None:
    graph = load_onnx_graph(conv_block(ox, tmp_path), batch_size=2)
    ops = [(n.id, n.op) for n in graph.nodes]
    assert ops == [
        ("conv", "Conv2d"),
        ("bn", "BatchNorm"),
        ("relu", "Activation"),
        ("pool", "MaxPool"),
        ("flatten", "Flatten"),
        ("fc", "MatMul"),
    ]
    # conv: 16*3*3*3 + 16 bias = 448 params; output 2 x 16 x 32 x 32 = 32,768 elements, each
    # 3*3*3 = 27 MACs -> 884,736 MACs = 1,769,472 FLOPs; 32,768 x 4 = 131,072 bytes.
    assert attrs(graph, "conv") == {
        "op": "Conv2d",
        "params": 448,
        "flops": 1_769_472,
        "activation_bytes": 131_072,
        "activation_elements": 32_768,
        "onnx_op": "Conv",
        "in_channels": 3,
        "out_channels": 16,
        "groups": 1,
        "spatial_dims": 2,
    }
    # bn: scale + bias = 32 parameters; the running mean and variance are buffers.
    assert attrs(graph, "bn")["params"] == 32
    assert attrs(graph, "bn")["channels"] == 16
    # pool: 2 x 16 x 16 x 16 = 8,192 floats.
    assert attrs(graph, "pool")["activation_bytes"] == 32_768
    # fc: 10*4096 + 10 = 40,970 params; 2 * (2 x 10) * 4096 = 163,840 FLOPs.
    fc = attrs(graph, "fc")
    assert (fc["params"], fc["flops"], fc["onnx_op"]) == (40_970, 163_840, "Gemm")
    assert (fc["in_features"], fc["out_features"]) == (4096, 10)
    assert graph.stats.attr_sums["params"] == 448 + 32 + 40_970


def test_grouped_conv_counts_channels_per_group(ox: Any, tmp_path: Path) -> None:
    # Depthwise 3x3 over 16 channels: W [16, 1, 3, 3]; output 1 x 16 x 8 x 8 = 1,024 elements,
    # 1 * 3 * 3 = 9 MACs each -> 9,216 MACs = 18,432 FLOPs (not 16 times that).
    node = ox.helper.make_node(
        "Conv", ["x", "W"], ["y"], name="dw", group=16, kernel_shape=[3, 3], pads=[1] * 4
    )
    path = save(
        ox, tmp_path, [node], [("x", F32, [1, 16, 8, 8])], ["y"], [weight(ox, "W", 16, 1, 3, 3)]
    )
    dw = load_onnx_graph(path).node("dw").attrs
    assert (dw["flops"], dw["params"], dw["in_channels"], dw["groups"]) == (18_432, 144, 16, 16)


def test_seed_rules_fire_as_on_the_native_graph(ox: Any, tmp_path: Path) -> None:
    graph = load_onnx_graph(conv_block(ox, tmp_path))
    native = build_graph("cnn", [Node(id=n.id, op=n.op) for n in graph.nodes], graph.edges)
    rules = load_rules()
    found = analyze(graph, rules)
    assert found == analyze(native, rules)
    best = {o.node_id: (o.type, round(o.estimated_speedup, 6)) for o in found}
    # 6 nodes: dp_speedup = 2.0 * clamp(6/10, 1, 2) = 2.0; Conv2d data parallel 2.0 * 1.1 = 2.2
    # beats its model parallel 2.0; depth 6 > 4 gives pipeline 6 * (1 - 1/6) = 5.0.
    assert best["conv"] == ("DataParallel", 2.2)
    assert best["bn"] == ("DataParallel", 1.8)
    assert best["fc"] == ("DataParallel", 2.0)
    assert best["pipeline_stages"] == ("PipelineParallel", 5.0)
    assert "pool" not in best  # the generic rule needs more than 10 nodes


# --- a transformer block ---------------------------------------------------------------------


def transformer_block(ox: Any, tmp_path: Path) -> Path:
    """ids [B, S] -> embedding (1000 x 64) -> pre-norm single-head attention -> MLP (64-256-64)."""
    mk = ox.helper.make_node
    nodes = [
        mk("Gather", ["E", "ids"], ["x"], name="embed"),
        mk("LayerNormalization", ["x", "g1", "n1"], ["l1"], name="ln1", axis=-1),
        mk("MatMul", ["l1", "Wq"], ["q"], name="q"),
        mk("MatMul", ["l1", "Wk"], ["k"], name="k"),
        mk("MatMul", ["l1", "Wv"], ["v"], name="v"),
        mk("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        mk("MatMul", ["q", "kt"], ["s"], name="scores"),
        mk("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        mk("MatMul", ["p", "v"], ["o"], name="context"),
        mk("MatMul", ["o", "Wo"], ["a"], name="out"),
        mk("Add", ["a", "x"], ["r1"], name="res1"),
        mk("LayerNormalization", ["r1", "g2", "n2"], ["l2"], name="ln2", axis=-1),
        mk("MatMul", ["l2", "W1"], ["f1"], name="fc1"),
        mk("Gelu", ["f1"], ["g"], name="gelu"),
        mk("MatMul", ["g", "W2"], ["f2"], name="fc2"),
        mk("Add", ["f2", "r1"], ["y"], name="res2"),
    ]
    inits = [weight(ox, "E", 1000, 64)]
    inits += [weight(ox, n, 64) for n in ("g1", "n1", "g2", "n2")]
    inits += [weight(ox, n, 64, 64) for n in ("Wq", "Wk", "Wv", "Wo")]
    inits += [weight(ox, "W1", 64, 256), weight(ox, "W2", 256, 64)]
    ids = ("ids", I64, ["batch", "seq"])
    return save(ox, tmp_path, nodes, [ids], ["y"], inits, opset=20, name="block")


def test_transformer_block(ox: Any, tmp_path: Path) -> None:
    graph = load_onnx_graph(transformer_block(ox, tmp_path), batch_size=2, dims={"seq": 16})
    ops = {n.id: n.op for n in graph.nodes}
    assert ops["embed"] == "Embedding"
    assert (ops["ln1"], ops["softmax"], ops["gelu"], ops["kt"]) == (
        "LayerNorm",
        "Softmax",
        "Activation",
        "Transpose",
    )
    assert graph.stats.op_counts["MatMul"] == 8
    # 2 x 16 = 32 tokens. embedding 1000 x 64 = 64,000 params, output 32 x 64 x 4 = 8,192 bytes.
    embed = attrs(graph, "embed")
    assert (embed["params"], embed["activation_bytes"]) == (64_000, 8_192)
    assert (embed["vocab_size"], embed["hidden_size"]) == (1000, 64)
    # q: 32 tokens x 64 outputs x 64 inputs x 2 = 262,144; scores: [2,16,64] x [2,64,16]:
    # 2 x 16 x 16 outputs x 64 x 2 = 65,536; context: [2,16,16] x [2,16,64]: 2048 x 16 x 2.
    flops = {n.id: n.attrs["flops"] for n in graph.nodes}
    assert (flops["q"], flops["scores"], flops["context"]) == (262_144, 65_536, 65_536)
    # fc1 and fc2: 32 x 64 x 256 x 2 = 1,048,576 each; the rest (norms, softmax, adds) is 0.
    assert (flops["fc1"], flops["fc2"], flops["softmax"], flops["ln1"]) == (1_048_576,) * 2 + (0, 0)
    # Per token: 2 x (4 x 64^2 + 2 x 64 x 256) + 2 x 2 x 16 x 64 = 102,400; x 32 tokens.
    assert graph.stats.attr_sums["flops"] == 3_276_800
    # 64,000 + 4 x 64 (norms) + 4 x 4,096 (q, k, v, out) + 2 x 16,384 (fc1, fc2)
    assert graph.stats.attr_sums["params"] == 113_408
    assert ("ln1", "k") in graph.edges and ("embed", "res1") in graph.edges


def test_unbound_symbolic_dims_leave_sizes_absent(ox: Any, tmp_path: Path) -> None:
    graph = load_onnx_graph(transformer_block(ox, tmp_path), batch_size=2)  # `seq` unbound
    q = graph.node("q").attrs
    assert q["params"] == 4096
    assert "flops" not in q and "activation_bytes" not in q
    assert graph.node("softmax").attrs["flops"] == 0  # not a matrix product: 0 regardless


def test_standard_attention_op(ox: Any, tmp_path: Path) -> None:
    # Q (B, 4 heads, 8, 16), K (B, 2 kv heads, 10 keys, 16), V (B, 2, 10, 32) -> Y (B, 4, 8, 32).
    # Q K^T: 2 x 4 x 8 x 10 x 16 = 10,240 MACs; P V: 2 x 4 x 8 x 10 x 32 = 20,480 MACs.
    node = ox.helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn")
    inputs = [
        ("q", F32, ["B", 4, 8, 16]),
        ("k", F32, ["B", 2, 10, 16]),
        ("v", F32, ["B", 2, 10, 32]),
    ]
    path = save(ox, tmp_path, [node], inputs, ["y"], [], opset=23)
    attn = attrs(load_onnx_graph(path, batch_size=2), "attn")
    assert (attn["op"], attn["flops"], attn["activation_bytes"]) == ("Attention", 61_440, 8_192)


# --- details: constants, shared weights, ids, edges ------------------------------------------


def test_constants_shared_weights_ids_and_edges(ox: Any, tmp_path: Path) -> None:
    mk, h = ox.helper.make_node, ox.helper
    nodes = [
        mk("Constant", [], ["W"], value=weight(ox, "w", 4, 3)),  # folded: a weight, no node
        mk("MatMul", ["x", "W"], ["a"], name="mm"),
        mk("MatMul", ["x", "W"], ["b"], name="mm"),  # duplicate name: MatMul_2; W counted once
        mk("Mul", ["a", "a"], ["c"], name=""),  # one edge mm -> Mul_3, not two
        mk("Add", ["c", "b"], ["d"], name="MatMul_2"),  # taken by the generated id
        mk("Reshape", ["d", "shape"], ["y"], name="reshape"),  # int64 shape: not a parameter
    ]
    shape = h.make_tensor("shape", I64, [1], [-1])
    path = save(ox, tmp_path, nodes, [("x", F32, [2, 4])], ["y"], [shape])
    graph = load_onnx_graph(path)
    assert [n.id for n in graph.nodes] == ["mm", "MatMul_2", "Mul_3", "Add_4", "reshape"]
    params = {n.id: n.attrs["params"] for n in graph.nodes}
    assert params == {"mm": 12, "MatMul_2": 0, "Mul_3": 0, "Add_4": 0, "reshape": 0}
    assert graph.edges == (
        ("mm", "Mul_3"),
        ("Mul_3", "Add_4"),
        ("MatMul_2", "Add_4"),
        ("Add_4", "reshape"),
    )


def test_weight_preprocessing_is_folded(ox: Any, tmp_path: Path) -> None:
    mk = ox.helper.make_node
    nodes = [
        mk("Cast", ["E16"], ["E"], name="cast", to=F32),  # fp16 table -> fp32: folded
        mk("Gather", ["E", "ids"], ["x"], name="embed"),
        mk("Shape", ["E"], ["shape"], name="shape"),  # int64 [100, 8]: folded, not a weight
        mk("Reshape", ["x", "shape"], ["rows"], name="reshape"),  # [5, 20, 8] -> [100, 8]
        mk("Transpose", ["E"], ["Et"], name="tie", perm=[1, 0]),  # tied head: folded
        mk("MatMul", ["rows", "Et"], ["y"], name="head"),
    ]
    inits = [weight(ox, "E16", 100, 8, dtype=10)]  # 10: onnx.TensorProto.FLOAT16
    path = save(ox, tmp_path, nodes, [("ids", I64, [5, 20])], ["y"], inits)
    graph = load_onnx_graph(path)
    assert [(n.id, n.op) for n in graph.nodes] == [
        ("embed", "Embedding"),
        ("reshape", "Reshape"),
        ("head", "MatMul"),
    ]
    # The 100 x 8 table is counted once, on its first reader; head: 100 x 100 x 8 x 2 FLOPs.
    params = {n.id: n.attrs["params"] for n in graph.nodes}
    assert params == {"embed": 800, "reshape": 0, "head": 0}
    assert graph.node("head").attrs["flops"] == 160_000
    assert graph.node("head").attrs["activation_bytes"] == 100 * 100 * 4
    assert graph.edges == (("embed", "reshape"), ("reshape", "head"))


def test_onnx_resnet50_matches_the_preset(ox: Any) -> None:
    # The onnx wheel ships ResNet-50 with its weights replaced by ConstantOfShape nodes.
    path = Path(ox.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    if not path.is_file():
        pytest.skip("this onnx version ships no light_resnet50.onnx")
    graph, preset = load_onnx_graph(path), load_graph_preset("resnet-50")
    for key in ("params", "flops"):  # 25,557,032 and 2 x 4,089,184,256
        assert graph.stats.attr_sums[key] == preset.stats.attr_sums[key]
    for op in ("Conv2d", "BatchNorm", "MatMul"):
        assert graph.stats.op_counts[op] == preset.stats.op_counts[op]
    # What the backward keeps, from two graphs built independently (ONNX: Sum for the residual
    # adds, AveragePool + Reshape before the fc, a final Softmax): the same tensors, plus the
    # Softmax's 1,000 outputs, which its gradient reads.
    onnx_spec, preset_spec = GraphModelSpec.from_graph(graph), GraphModelSpec.from_graph(preset)
    assert onnx_spec.stored_elements == preset_spec.stored_elements + 1000 == 20_926_440


# --- errors ----------------------------------------------------------------------------------


def test_missing_extra_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` now raises ImportError
    path = tmp_path / "model.onnx"
    with pytest.raises(InputError) as caught:
        load_onnx_graph(path)
    assert caught.value.message == MISSING_EXTRA
    assert MISSING_EXTRA == (
        "reading .onnx files needs the onnx extra: pip install 'parplan-gen[onnx]'"
    )
    assert str(path) in caught.value.render()


def test_error_not_a_file(ox: Any, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)  # no writer: opening it to read would wait forever
    for path, message in [
        (tmp_path / "no.onnx", "file not found"),
        (tmp_path, "not a regular file (a folder)"),
        (fifo, "not a regular file (a named pipe)"),
    ]:
        with pytest.raises(InputError) as caught:
            load_onnx_graph(path)
        assert caught.value.render() == f"{path}: {message}"


RAISE = "raise it with `parplan --max-input-mib N` or PARPLAN_MAX_INPUT_MIB=N"


def chain(ox: Any, tmp_path: Path, count: int) -> Path:
    """A chain of `count` Relu nodes."""
    mk = ox.helper.make_node
    nodes = [mk("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(count)]
    return save(ox, tmp_path, nodes, [("t0", F32, ["batch", 4])], [f"t{count}"], [])


def test_the_node_count_is_bounded_before_the_model_is_parsed(ox: Any, tmp_path: Path) -> None:
    path = chain(ox, tmp_path, 600)
    with reading.input_limit(MIB):  # 1 MiB at 2 KiB a node: 512 nodes
        with pytest.raises(InputError) as caught:
            load_onnx_graph(path)
        assert caught.value.render() == (
            f"{path}: the ONNX graph has more than 512 nodes, the most the limit of 1 MiB "
            f"allows at 2 KiB a node ({RAISE})"
        )
    assert load_onnx_graph(path).stats.node_count == 600


def test_an_oversized_onnx_file_is_refused_unread(ox: Any, tmp_path: Path) -> None:
    path = tmp_path / "huge.onnx"
    with path.open("wb") as handle:
        handle.truncate(MAX_ONNX_BYTES + 1)  # sparse
    with pytest.raises(InputError) as caught:
        load_onnx_graph(path)
    assert caught.value.render() == (
        f"{path}: file is 536,870,913 bytes; the limit is 512 MiB ({RAISE})"
    )


def test_weight_data_is_dropped_and_shapes_still_count(ox: Any, tmp_path: Path) -> None:
    # A float Constant and a float initializer lose their data; an int64 Constant read by
    # shape inference (Reshape's target) keeps it.
    mk, h = ox.helper.make_node, ox.helper
    nodes = [
        mk("Constant", [], ["c"], value=weight(ox, "cv", 4, 784)),
        mk("MatMul", ["x", "W"], ["h"], name="fc"),
        mk("Constant", [], ["shape"], value=h.make_tensor("sv", I64, [2], [2, 128])),
        mk("Reshape", ["h", "shape"], ["r"], name="reshape"),
    ]
    path = save(ox, tmp_path, nodes, [("x", F32, [4, 784])], ["r"], [weight(ox, "W", 784, 64)])
    model = ox.load(str(path))
    _drop_weight_data(ox, model.graph)
    kept = [len(t.raw_data) + len(t.float_data) + len(t.int64_data) for t in (
        model.graph.initializer[0], model.graph.node[0].attribute[0].t,
        model.graph.node[2].attribute[0].t)]  # fmt: skip
    assert kept == [0, 0, 2]
    graph = load_onnx_graph(path)
    assert attrs(graph, "fc")["params"] == 784 * 64
    assert attrs(graph, "reshape")["activation_elements"] == 256


@pytest.mark.parametrize(
    "content",
    [
        b"\x3a\xff\xff\xff\x0f",  # graph (field 7) of 4 GiB in a 5-byte file
        b"\x3a\x02\x0a",  # a node field cut short
        b"\x3b",  # wire type 3 (a group): not in ONNX
        b"\x08" + b"\xff" * 11,  # a varint of 11 bytes
    ],
    ids=["length-past-end", "truncated", "group", "long-varint"],
)
def test_a_malformed_wire_format_is_not_an_onnx_model(
    ox: Any, tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        load_onnx_graph(path)
    assert caught.value.render() == f"{path}: not an ONNX model (the file does not parse as one)"


@pytest.mark.parametrize("content", [b"name: x\nnodes: []\n", b""])
def test_error_not_an_onnx_model(ox: Any, tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "fake.onnx"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        load_onnx_graph(path)
    assert caught.value.render().startswith(f"{path}: not an ONNX model")


def test_error_shape_inference(ox: Any, tmp_path: Path) -> None:
    node = ox.helper.make_node("MatMul", ["x", "W"], ["y"])
    path = save(ox, tmp_path, [node], [("x", F32, ["N", 4])], ["y"], [weight(ox, "W", 5, 3)])
    with pytest.raises(InputError) as caught:
        load_onnx_graph(path)
    assert caught.value.render().startswith(f"{path}: ONNX shape inference failed: ")
    assert "MatMul" in caught.value.message


def test_error_batch_size(ox: Any, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="batch_size must be at least 1, not 0"):
        load_onnx_graph(mlp(ox, tmp_path), batch_size=0)


# --- model_source: MODEL is a file or a preset name ------------------------------------------


def test_source_hf_config_json_is_a_transformer_graph() -> None:
    path = REPO / "examples" / "hf" / "gpt2.json"
    graph = load_graph_for(str(path), seq_len=1024)
    expected = model_graph(load_hf_config(path), seq_len=1024)
    assert (graph.name, graph.nodes, graph.edges) == (expected.name, expected.nodes, expected.edges)
    assert graph.node("layers.0.attention.qkv").op == "MatMul"


def test_source_hf_config_yaml(write: Any) -> None:
    text = (REPO / "examples" / "hf" / "gpt2.json").read_text(encoding="utf-8")
    path = write("gpt2.yaml", text)  # JSON is YAML
    assert load_graph_for(str(path)).name == "gpt2"


def test_source_native_file() -> None:
    path = REPO / "examples" / "tiny_mlp.yaml"
    graph, expected = load_graph_for(str(path)), load_graph(path)
    assert (graph.name, graph.nodes, graph.edges) == (expected.name, expected.nodes, expected.edges)


def test_source_presets() -> None:
    resnet = load_graph_for("resnet-50")
    assert resnet.nodes == load_graph_preset("resnet-50").nodes
    assert resnet.stats.attr_sums["params"] == 25_557_032
    llama = load_graph_for("llama-3-8b", seq_len=4096)
    assert llama.nodes == model_graph(load_preset("llama-3-8b"), seq_len=4096).nodes


def test_source_onnx_file(ox: Any, tmp_path: Path) -> None:
    graph = load_graph_for(str(mlp(ox, tmp_path)), batch_size=8)
    assert graph.node("fc1").attrs["flops"] == 3_211_264


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("resnet50", "; did you mean 'resnet-50'?"),
        ("Llama-3-8B", "; did you mean 'llama-3-8b'?"),
    ],
)
def test_source_unknown_name(name: str, hint: str) -> None:
    with pytest.raises(InputError) as caught:
        load_graph_for(name)
    expected = f"{name}: not a file or known model name{hint} (`parplan models` lists the names)"
    assert caught.value.render() == expected


def test_source_missing_file_is_not_found() -> None:
    with pytest.raises(InputError) as caught:
        load_graph_for("no/such/model.onnx")
    assert caught.value.render() == "no/such/model.onnx: file not found"


def test_source_unknown_suffix(write: Any) -> None:
    path = write("model.txt", "name: x\nnodes: []\n")
    with pytest.raises(InputError) as caught:
        load_graph_for(str(path))
    assert caught.value.render() == (
        f"{path}: unknown model file type '.txt'; expected .yaml, .yml, .json, .onnx"
    )


def test_micro_batch_binds_the_dynamic_batch_for_rules_that_read_node_sizes(
    ox: Any, tmp_path: Path, cli: Any, write: Any
) -> None:
    # A rule that reports a MatMul's forward FLOPs as its memory: fc1 does 2 * rows * 256 * 784
    # FLOPs, 401,408 for one row and 3,211,264 for a micro-batch of 8 rows.
    rules = write(
        "r/flops.yaml",
        """
        opportunities:
          - id: seed.matmul.data_parallel
            op: MatMul
            type: DataParallel
            min_devices: 2
            memory_per_device: "node.attr.flops"
            communication_overhead: 0.05
            speedup: 9
        """,
    ).parent
    path = mlp(ox, tmp_path)
    memory = {}
    for batch in ("1", "8"):
        run = cli("analyze", path, "--micro-batch", batch, "--rules", rules, "--json")
        found = {o["node_id"]: o for o in run.json()["opportunities"]}
        memory[batch] = found["fc1"]["resource_requirements"]["memory_per_device"]
    assert memory == {"1": 401_408, "8": 3_211_264}
