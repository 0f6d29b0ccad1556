"""Import an ONNX model as a `ModelGraph` (the optional extra `parplan-gen[onnx]`).

One graph node per ONNX node of the main graph, in file order (ONNX keeps nodes in
topological order); an edge from each tensor's producer to each of its consumers, once per
pair. Nodes that compute data rather than work are folded away: `Constant`, and any node
whose inputs are all initializers or folded data (a weight's Cast, Transpose or
DequantizeLinear, a ConstantOfShape); their outputs count as weights where they are used.
Nodes inside control-flow subgraphs (`If`, `Loop`, `Scan`) are not expanded.

Ops are mapped to the rules' vocabulary (`OP_MAP`): MatMul/Gemm -> MatMul, Conv -> Conv2d
(any spatial rank; `spatial_dims` says which), element-wise activations -> Activation,
BatchNormalization -> BatchNorm, LayerNormalization -> LayerNorm, attention ops -> Attention,
a Gather whose table is an initializer -> Embedding; any other op keeps its ONNX name. A mapped
node records its ONNX op as `onnx_op`; an op from another domain records `domain`.

Shapes come from ONNX shape inference, after a dynamic (symbolic or missing) first dimension of
every graph input is bound to `batch_size`; other symbolic dimensions can be bound by name with
`dims`. Every node carries:

* `params`: elements of the weights it reads, directly or through folded nodes, each weight
  counted once, on its first reader (a tied weight is counted once). Weights are the
  initializers and constants of a floating-point type or of an integer type of 8 bits or fewer
  (quantized); int16/32/64, bool and string tensors are shapes, axes and indices. A
  BatchNormalization's running mean and variance are buffers, not parameters (as in PyTorch
  and the `resnet-50` preset).
* `flops`: forward FLOPs of the whole batch, 2 x multiply-adds, for matrix products only:
  MatMul, Gemm, Conv (groups included: the weight holds C_in/groups channels), ConvTranspose
  and the two products of the standard `Attention` op (no causal discount). Every other op
  counts 0, as element-wise ops do in the transformer graph and Megatron-LM's count. Absent when
  a matrix product's shapes are unknown.
* `activation_bytes`: bytes of the node's outputs at their element type, for the whole batch,
  and `activation_elements`: their elements (the cost model sizes them at the training
  precision). Absent when an output's shape is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from parplan_gen.inputs.errors import SHOWN_MESSAGE_CHARS, GraphError, InputError, SourceRef
from parplan_gen.inputs.safe_text import name_from_path, printable
from parplan_gen.models.graph import ModelGraph, build_graph
from parplan_gen.models.graph_node import Node
from parplan_gen.models.onnx_attrs import DEFAULT_DOMAINS, Tensors, node_attrs
from parplan_gen.models.onnx_file import bind_dims, import_onnx, read_model

_ACTIVATION_NAMES = (  # element-wise nonlinearities (ONNX and com.microsoft spellings)
    "Relu LeakyRelu PRelu Elu Selu Celu Gelu FastGelu BiasGelu QuickGelu Sigmoid HardSigmoid "
    "Swish Silu HardSwish Mish Tanh Softplus Softsign ThresholdedRelu"
)
ACTIVATIONS = tuple(_ACTIVATION_NAMES.split())
OP_MAP: dict[str, str] = {
    **dict.fromkeys(("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul"), "MatMul"),
    **dict.fromkeys(("Conv", "ConvInteger", "QLinearConv"), "Conv2d"),
    **dict.fromkeys(ACTIVATIONS, "Activation"),
    "BatchNormalization": "BatchNorm",
    **dict.fromkeys(("LayerNormalization", "SkipLayerNormalization"), "LayerNorm"),
    **dict.fromkeys(
        ("RMSNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"),
        "RMSNorm",
    ),
    **dict.fromkeys(
        ("Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"), "Attention"
    ),
}
_GRAPH, _GRAPHS = 5, 10  # onnx.AttributeProto.GRAPH, GRAPHS


def load_onnx_graph(
    path: str | Path, *, batch_size: int = 1, dims: Mapping[str, int] | None = None
) -> ModelGraph:
    """Read an ONNX model; a dynamic batch dimension becomes `batch_size`, and each symbolic
    dimension named in `dims` (e.g. `{"sequence_length": 2048}`) takes the value given."""
    where = SourceRef(str(path))
    onnx = import_onnx(where)
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1, not {batch_size}", where)
    model = read_model(onnx, Path(path), where)
    bind_dims(model.graph, batch_size, dict(dims or {}))
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # noqa: BLE001  # InferenceError, ValidationError, RuntimeError
        message = printable(str(exc).strip().replace("\n", " "), SHOWN_MESSAGE_CHARS)
        raise InputError(f"ONNX shape inference failed: {message}", where) from None
    nodes, edges = _convert(model.graph, Tensors(onnx, model.graph, where))
    try:
        return build_graph(name_from_path(Path(path).stem), nodes, edges)
    except GraphError as exc:
        raise GraphError(exc.message, where) from None


def _convert(graph: Any, tensors: Tensors) -> tuple[list[Node], list[tuple[str, str]]]:
    nodes: list[Node] = []
    edges: dict[tuple[str, str], None] = {}  # insertion-ordered set
    producer: dict[str, str] = {}
    counted: set[str] = set()
    for node, node_id in zip(graph.node, _node_ids(graph.node), strict=True):
        if _is_folded(node, tensors):
            tensors.fold(node)
            continue
        for name in node.input:
            src = producer.get(name)
            if src is not None and src != node_id:
                edges[(src, node_id)] = None
        for name in node.output:
            if name:
                producer[name] = node_id
        op = _mapped_op(node, tensors)
        nodes.append(Node(id=node_id, op=op, attrs=node_attrs(node, op, tensors, counted)))
    return nodes, list(edges)


def _is_folded(node: Any, tensors: Tensors) -> bool:
    """A Constant, or a node computed from data alone (and holding no subgraph)."""
    if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
        return True
    inputs = [name for name in node.input if name]
    has_subgraph = any(a.type in (_GRAPH, _GRAPHS) for a in node.attribute)
    return bool(inputs) and not has_subgraph and all(tensors.is_data(n) for n in inputs)


def _node_ids(onnx_nodes: Iterable[Any]) -> list[str]:
    """The ONNX node name, or `<op>_<index>` when it is empty or taken."""
    ids: list[str] = []
    used: set[str] = set()
    for index, node in enumerate(onnx_nodes):
        node_id = node.name if node.name and node.name not in used else f"{node.op_type}_{index}"
        while node_id in used:
            node_id += "_"
        used.add(node_id)
        ids.append(node_id)
    return ids


def _mapped_op(node: Any, tensors: Tensors) -> str:
    if node.op_type == "Gather" and node.input:
        table = node.input[0]
        if tensors.is_data(table) and tensors.is_weight(tensors.get(table)):
            return "Embedding"
    return OP_MAP.get(node.op_type, node.op_type)
