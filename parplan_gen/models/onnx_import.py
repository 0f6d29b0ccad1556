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

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parplan_gen.inputs.errors import SHOWN_MESSAGE_CHARS, GraphError, InputError, SourceRef
from parplan_gen.inputs.safe_text import name_from_path, printable
from parplan_gen.inputs.source import MIB, RAISE_HINT, read_bytes, size_limit
from parplan_gen.models.graph import ModelGraph, Node, build_graph

MISSING_EXTRA = "reading .onnx files needs the onnx extra: pip install 'parplan-gen[onnx]'"
DEFAULT_DOMAINS = ("", "ai.onnx")
# An .onnx file is read and parsed whole, its embedded weights too (the weights' data is then
# dropped, before shape inference copies the model): about twice the file in memory at the
# peak. Every CNN and BERT-base fit; larger models keep their weights in external data files,
# which are never read.
MAX_ONNX_BYTES = 512 * MIB
# Each node counts this much against the limit: importing one costs ~4 KB of memory and
# ~40 us, a hundred times its bytes in the file. 512 MiB allows 262,144 nodes (~10 s); the
# largest exported LLMs have ~30,000. Counted in the file's bytes, before it is parsed.
ONNX_NODE_BYTES = 2048
_GRAPH_FIELD, _NODE_FIELD = 7, 1  # ModelProto.graph, GraphProto.node (protobuf field numbers)
# A floating-point tensor of more elements than this is a weight: shape inference never reads
# its values (shapes, axes and pads are integers; Resize scales have a few elements).
_SHAPE_DATA_ELEMENTS = 64
_FLOAT_TYPES = ("FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE")
_DATA_FIELDS = ("raw_data", "float_data", "double_data", "int32_data")

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
BUFFER_INPUTS = {"BatchNormalization": (3, 4)}  # running mean and variance are not parameters
_CONV_WEIGHT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}  # input index of the weight
_GRAPH, _GRAPHS = 5, 10  # onnx.AttributeProto.GRAPH, GRAPHS
Shape = tuple[int | None, ...]
Attr = int | float | str | bool


@dataclass(frozen=True)
class _Tensor:
    """What shape inference (or an initializer) says about one tensor."""

    shape: Shape | None  # None: rank unknown; a None dimension: size unknown
    elem_type: int

    @property
    def known(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    @property
    def elements(self) -> int:
        return math.prod(self.shape or ())  # type: ignore[arg-type]  # callers check `known`


class _Tensors:
    """Tensor name -> _Tensor; which tensors are data, and the weights each data tensor holds."""

    def __init__(self, onnx: Any, graph: Any) -> None:
        self._onnx = onnx
        self._sizes: dict[int, int] = {}
        self.table: dict[str, _Tensor] = {}
        for info in (*graph.input, *graph.value_info, *graph.output):
            self.table[info.name] = _from_value_info(info)
        self.weights: dict[str, tuple[str, ...]] = {}  # data tensor -> the weights it derives from
        for init in graph.initializer:
            t = self.table[init.name] = _Tensor(tuple(init.dims), init.data_type)
            self.weights[init.name] = (init.name,) if self.is_weight(t) else ()

    def is_data(self, name: str) -> bool:
        return name in self.weights

    def fold(self, node: Any) -> None:
        """Record the outputs of a folded node as data; a weight-like output carries the weights
        of its inputs, or is a weight itself when they hold none (Constant, ConstantOfShape)."""
        inherited = tuple(
            dict.fromkeys(w for name in node.input for w in self.weights.get(name, ()))
        )
        for name in node.output:
            weight_like = self.is_weight(self.get(name))
            self.weights[name] = (inherited or (name,)) if weight_like else ()

    def get(self, name: str) -> _Tensor:
        return self.table.get(name) or _Tensor(None, 0)

    def shape(self, name: str) -> Shape | None:
        """The full shape of `name`, or None when any dimension is unknown."""
        t = self.get(name)
        return t.shape if t.known else None

    def item_bytes(self, elem_type: int) -> int | None:
        if elem_type not in self._sizes:
            try:
                dtype = self._onnx.helper.tensor_dtype_to_np_dtype(elem_type)
            except (KeyError, ValueError, TypeError):
                return None
            self._sizes[elem_type] = int(dtype.itemsize)
        return self._sizes[elem_type]

    def is_weight(self, t: _Tensor) -> bool:
        """Floating point, or an integer of 8 bits or fewer (a quantized weight)."""
        tp = self._onnx.TensorProto
        if t.elem_type in (tp.BOOL, tp.STRING):
            return False
        size = self.item_bytes(t.elem_type)
        is_float = t.elem_type in (tp.FLOAT, tp.DOUBLE, tp.FLOAT16, tp.BFLOAT16)
        return size is not None and (is_float or size == 1)


def _from_value_info(info: Any) -> _Tensor:
    tensor_type = info.type.tensor_type
    dims = tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
        for d in tensor_type.shape.dim
    )
    return _Tensor(dims if tensor_type.HasField("shape") else None, tensor_type.elem_type)


# --- reading and shape inference -------------------------------------------------------------


def load_onnx_graph(
    path: str | Path, *, batch_size: int = 1, dims: Mapping[str, int] | None = None
) -> ModelGraph:
    """Read an ONNX model; a dynamic batch dimension becomes `batch_size`, and each symbolic
    dimension named in `dims` (e.g. `{"sequence_length": 2048}`) takes the value given."""
    where = SourceRef(str(path))
    onnx = _import_onnx(where)
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1, not {batch_size}", where)
    model = _read_model(onnx, Path(path), where)
    _bind_dims(model.graph, batch_size, dict(dims or {}))
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # noqa: BLE001  # InferenceError, ValidationError, RuntimeError
        message = printable(str(exc).strip().replace("\n", " "), SHOWN_MESSAGE_CHARS)
        raise InputError(f"ONNX shape inference failed: {message}", where) from None
    nodes, edges = _convert(model.graph, _Tensors(onnx, model.graph))
    try:
        return build_graph(name_from_path(Path(path).stem), nodes, edges)
    except GraphError as exc:
        raise GraphError(exc.message, where) from None


def _import_onnx(where: SourceRef) -> Any:
    try:
        import onnx
    except ImportError:
        raise InputError(MISSING_EXTRA, where) from None
    return onnx


def _read_model(onnx: Any, path: Path, where: SourceRef) -> Any:
    """The ModelProto in `path`, its weights without their data (only shapes are needed);
    external weight data is never read. The size and the node count are checked first."""
    raw = read_bytes(path, max_bytes=MAX_ONNX_BYTES)
    limit = size_limit(MAX_ONNX_BYTES)
    max_nodes = limit // ONNX_NODE_BYTES
    try:
        if _count_nodes(raw, stop=max_nodes + 1) > max_nodes:
            raise InputError(
                f"the ONNX graph has more than {max_nodes:,} nodes, the most the limit of "
                f"{limit / MIB:g} MiB allows at {ONNX_NODE_BYTES // 1024} KiB a node "
                f"({RAISE_HINT})",
                where,
            )
        model = onnx.load_model_from_string(raw)
    except (ValueError, IndexError):  # see _count_nodes; protobuf's DecodeError too
        raise InputError("not an ONNX model (the file does not parse as one)", where) from None
    del raw
    if not model.HasField("graph") or not model.graph.node:
        raise InputError("not an ONNX model (it holds no graph nodes)", where)
    _drop_weight_data(onnx, model.graph)
    return model


def _count_nodes(raw: bytes, stop: int) -> int:
    """The nodes of the main graph of a serialized ModelProto, counted from the wire format
    without parsing it (up to `stop`); a ValueError or IndexError when it is malformed."""
    count = 0
    for number, start, end in _fields(raw, 0, len(raw)):
        if number == _GRAPH_FIELD:
            for inner, _, _ in _fields(raw, start, end):
                count += inner == _NODE_FIELD
                if count >= stop:
                    return count
    return count


def _fields(raw: bytes, at: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of the message in
    raw[at:end] (protobuf's wire format); the other fields are stepped over."""
    sizes = {0: None, 1: 8, 5: 4}  # wire type -> bytes (None: a varint)
    while at < end:
        tag, at = _varint(raw, at)
        wire = tag & 7
        if wire == 2:
            length, at = _varint(raw, at)
            yield tag >> 3, at, at + length
            at += length
        elif wire in sizes:
            size = sizes[wire]
            at = _varint(raw, at)[1] if size is None else at + size
        else:
            raise ValueError(f"wire type {wire}")
    if at != end:
        raise ValueError("truncated")


def _varint(raw: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while raw[at] & 0x80:
        value |= (raw[at] & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if shift > 63:
            raise ValueError("varint too long")
    return value | raw[at] << shift, at + 1


def _drop_weight_data(onnx: Any, graph: Any) -> None:
    """Clear the data of floating-point weights, initializers and Constant values alike:
    shape inference copies the model several times and needs only their shapes."""
    floats = {getattr(onnx.TensorProto, name) for name in _FLOAT_TYPES}
    constants = [a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute]
    for tensor in (*graph.initializer, *constants):
        if tensor.data_type in floats and math.prod(tensor.dims) > _SHAPE_DATA_ELEMENTS:
            for name in _DATA_FIELDS:
                tensor.ClearField(name)


def _bind_dims(graph: Any, batch_size: int, dims: dict[str, int]) -> None:
    """Bind the dynamic first dimension of each graph input, and named symbolic dimensions."""
    initializers = {init.name for init in graph.initializer}
    for info in graph.input:
        tensor_type = info.type.tensor_type
        if info.name in initializers or not tensor_type.shape.dim:
            continue
        first = tensor_type.shape.dim[0]
        if not first.HasField("dim_value") or first.dim_value <= 0:
            name = first.dim_param
            # A size given by name in `dims` wins; setting dim_value clears dim_param (a oneof).
            first.dim_value = dims.setdefault(name, batch_size) if name else batch_size
    for info in (*graph.input, *graph.output, *graph.value_info):
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = dims[d.dim_param]


# --- nodes and edges -------------------------------------------------------------------------


def _convert(graph: Any, tensors: _Tensors) -> tuple[list[Node], list[tuple[str, str]]]:
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
        nodes.append(Node(id=node_id, op=op, attrs=_attrs(node, op, tensors, counted)))
    return nodes, list(edges)


def _is_folded(node: Any, tensors: _Tensors) -> bool:
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


def _mapped_op(node: Any, tensors: _Tensors) -> str:
    if node.op_type == "Gather" and node.input:
        table = node.input[0]
        if tensors.is_data(table) and tensors.is_weight(tensors.get(table)):
            return "Embedding"
    return OP_MAP.get(node.op_type, node.op_type)


def _attrs(node: Any, op: str, tensors: _Tensors, counted: set[str]) -> dict[str, Attr]:
    attrs: dict[str, Attr] = {"params": _params(node, tensors, counted)}
    sizes = {
        "flops": _flops(node, tensors),
        "activation_bytes": _output_bytes(node, tensors),
        "activation_elements": _output_elements(node, tensors),
    }
    attrs.update({key: value for key, value in sizes.items() if value is not None})
    if op != node.op_type:
        attrs["onnx_op"] = node.op_type
    if node.domain not in DEFAULT_DOMAINS:
        attrs["domain"] = node.domain
    attrs.update(_shape_facts(node, op, tensors))
    return attrs


def _params(node: Any, tensors: _Tensors, counted: set[str]) -> int:
    """Elements of the weights this node is the first to read."""
    skip = BUFFER_INPUTS.get(node.op_type, ())
    total = 0
    for index, name in enumerate(node.input):
        if index in skip:
            continue
        for weight in tensors.weights.get(name, ()):
            t = tensors.get(weight)
            if weight not in counted and t.known:
                counted.add(weight)
                total += t.elements
    return total


def _output_bytes(node: Any, tensors: _Tensors) -> int | None:
    total = 0
    for name in filter(None, node.output):
        t = tensors.get(name)
        size = tensors.item_bytes(t.elem_type)
        if not t.known or size is None:
            return None
        total += t.elements * size
    return total


def _output_elements(node: Any, tensors: _Tensors) -> int | None:
    total = 0
    for name in filter(None, node.output):
        t = tensors.get(name)
        if not t.known:
            return None
        total += t.elements
    return total


# --- FLOPs: 2 x multiply-adds of matrix products ---------------------------------------------


def _flops(node: Any, tensors: _Tensors) -> int | None:
    """Forward FLOPs; 0 for ops that are not matrix products, None when shapes are unknown."""
    count = _FLOPS.get(node.op_type) if node.domain in DEFAULT_DOMAINS else None
    if count is None:
        return 0
    shapes = [tensors.shape(name) if name else None for name in node.input]
    outputs = [tensors.shape(name) if name else None for name in node.output]
    try:
        macs = count(node, shapes, outputs)
    except (TypeError, IndexError):  # a shape is unknown (None) or too short
        return None
    return 2 * macs


def _matmul(node: Any, inputs: list[Shape | None], outputs: list[Shape | None]) -> int:
    # out [..., M, N] = A [..., M, K] x B [..., K, N]: one multiply-add per output and K.
    return math.prod(outputs[0]) * inputs[0][-1]  # type: ignore[arg-type, index]


def _gemm(node: Any, inputs: list[Shape | None], outputs: list[Shape | None]) -> int:
    # Y (M, N) = A' (M, K) x B' (K, N) (+ C, element-wise: not counted); A is (K, M) if transA.
    trans_a = _int_attr(node, "transA", 0)
    return math.prod(outputs[0]) * inputs[0][0 if trans_a else 1]  # type: ignore[arg-type, index]


def _conv(node: Any, inputs: list[Shape | None], outputs: list[Shape | None]) -> int:
    # W (C_out, C_in / groups, k...): each output element takes C_in / groups x prod(k) MACs.
    weight = inputs[_CONV_WEIGHT[node.op_type]]
    return math.prod(outputs[0]) * math.prod(weight[1:])  # type: ignore[arg-type, index]


def _conv_transpose(node: Any, inputs: list[Shape | None], outputs: list[Shape | None]) -> int:
    # W (C_in, C_out / groups, k...): each input element scatters into C_out/groups x prod(k).
    return math.prod(inputs[0]) * math.prod(inputs[1][1:])  # type: ignore[arg-type, index]


def _attention(node: Any, inputs: list[Shape | None], outputs: list[Shape | None]) -> int:
    # Q K^T: one MAC per element of Q and key; softmax(.) V: one per element of Y and key.
    # Keys: K is (B, S_kv, H_kv x D) or (B, H_kv, S_kv, D); `present_key` includes any past.
    present = outputs[1] if len(outputs) > 1 else None
    keys = (present or inputs[1])[-2]  # type: ignore[index]
    return keys * (math.prod(inputs[0]) + math.prod(outputs[0]))  # type: ignore[arg-type]


_MacCount = Callable[[Any, list[Shape | None], list[Shape | None]], int]
_FLOPS: dict[str, _MacCount] = {
    **dict.fromkeys(("MatMul", "MatMulInteger", "QLinearMatMul"), _matmul),
    **dict.fromkeys(_CONV_WEIGHT, _conv),
    "Gemm": _gemm,
    "ConvTranspose": _conv_transpose,
    "Attention": _attention,
}


def _int_attr(node: Any, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


# --- shape facts that rules may read (node.attr.*) -------------------------------------------


def _shape_facts(node: Any, op: str, tensors: _Tensors) -> dict[str, Attr]:
    """Layer sizes, where the shapes say them: features, channels, vocabulary."""
    first = tensors.shape(node.input[0]) if node.input else None
    out = tensors.shape(node.output[0]) if node.output else None
    if op == "Conv2d" and node.op_type in _CONV_WEIGHT:
        weight = tensors.shape(node.input[_CONV_WEIGHT[node.op_type]])
        if weight is None or len(weight) < 3:
            return {}
        groups = _int_attr(node, "group", 1)
        return {
            "in_channels": weight[1] * groups,  # type: ignore[operator]
            "out_channels": weight[0],  # type: ignore[dict-item]
            "groups": groups,
            "spatial_dims": len(weight) - 2,
        }
    if op == "MatMul" and first and out and node.op_type in ("MatMul", "Gemm"):
        k = first[0] if _int_attr(node, "transA", 0) else first[-1]
        return {"in_features": k, "out_features": out[-1]}  # type: ignore[dict-item]
    if op == "BatchNorm" and len(node.input) > 1 and (scale := tensors.shape(node.input[1])):
        return {"channels": math.prod(scale)}  # type: ignore[arg-type]
    if op == "Embedding" and first and len(first) == 2:
        return {"vocab_size": first[0], "hidden_size": first[1]}  # type: ignore[dict-item]
    return {}
