"""The attributes an imported ONNX node carries: `params` (weights first read by it), `flops`
(2 x multiply-adds of matrix products), `activation_bytes`/`activation_elements` (its
outputs) and the layer sizes its shapes say (features, channels, vocabulary), all computed from
the tensor table (`Tensors`: shapes from shape inference, which tensors are data or weights).
`onnx_import` describes what each attribute counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parplan_gen.inputs.errors import InputError, SourceRef, shown_value

DEFAULT_DOMAINS = ("", "ai.onnx")
# A tensor of more elements than this cannot exist: ONNX sizes are int64 (TensorShapeProto's
# dim_value, TensorProto's dims), and ONNX Runtime and PyTorch count a tensor's elements in an
# int64 too. Products of such counts (FLOPs, bytes) then stay far below the largest float.
MAX_ELEMENTS = 2**63 - 1
# NumPy 2's NPY_MAXDIMS: onnx.numpy_helper cannot hold a tensor of more dimensions, and no
# exporter writes one; a larger rank is a malformed or hostile file.
MAX_RANK = 64
BUFFER_INPUTS = {"BatchNormalization": (3, 4)}  # running mean and variance are not parameters
_CONV_WEIGHT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}  # input index of the weight
Shape = tuple[int | None, ...]  # a None dimension: its size is unknown
Dims = tuple[int, ...]  # a shape whose every dimension is known
Attr = int | float | str | bool


class _ShapeUnknownError(Exception):
    """A shape that a count needs is not known."""


@dataclass(frozen=True)
class _Tensor:
    """What shape inference (or an initializer) says about one tensor."""

    shape: Shape | None  # None: rank unknown; a None dimension: size unknown
    elem_type: int

    @property
    def dims(self) -> Dims | None:
        """The shape when its rank and every dimension are known, else None."""
        if self.shape is None:
            return None
        dims = tuple(d for d in self.shape if d is not None)
        return dims if len(dims) == len(self.shape) else None

    @property
    def known(self) -> bool:
        return self.dims is not None

    @property
    def elements(self) -> int:
        return math.prod(self.dims or ())  # callers check `known`


class Tensors:
    """Tensor name -> _Tensor; which tensors are data, and the weights each data tensor holds."""

    def __init__(self, onnx: Any, graph: Any, where: SourceRef) -> None:
        """The tensors of `graph`, each shape checked (an InputError at `where`: the file)."""
        self._onnx = onnx
        self._sizes: dict[int, int] = {}
        self.table: dict[str, _Tensor] = {}
        # the weights first: the shapes inferred from an oversized one are oversized too
        weights = {
            i.name: _checked(_Tensor(tuple(i.dims), i.data_type), i.name, where)
            for i in graph.initializer
        }
        for info in (*graph.input, *graph.value_info, *graph.output):
            self.table[info.name] = _checked(_from_value_info(info), info.name, where)
        self.weights: dict[str, tuple[str, ...]] = {}  # data tensor -> the weights it derives from
        for init in graph.initializer:
            t = self.table[init.name] = weights[init.name]
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

    def shape(self, name: str) -> Dims | None:
        """The full shape of `name`, or None when any dimension is unknown."""
        return self.get(name).dims

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


def _checked(t: _Tensor, name: str, where: SourceRef) -> _Tensor:
    """`t`, unless its rank is above MAX_RANK, a dimension is negative or its known
    dimensions hold more than MAX_ELEMENTS (an InputError naming the tensor)."""
    shape = t.shape or ()
    if len(shape) > MAX_RANK:
        problem = f"has {len(shape):,} dimensions (at most {MAX_RANK})"
    elif any(d is not None and d < 0 for d in shape):  # an initializer's own dims
        problem = f"has a negative dimension ({min(d for d in shape if d is not None)})"
    elif (elements := math.prod(d for d in shape if d is not None)) > MAX_ELEMENTS:
        problem = f"has {shown_value(elements)} elements (at most 2^63 - 1: ONNX sizes are int64)"
    else:
        return t
    raise InputError(f"tensor {shown_value(name)} {problem}", where)


# --- reading and shape inference -------------------------------------------------------------


def node_attrs(node: Any, op: str, tensors: Tensors, counted: set[str]) -> dict[str, Attr]:
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


def _params(node: Any, tensors: Tensors, counted: set[str]) -> int:
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


def _output_bytes(node: Any, tensors: Tensors) -> int | None:
    total = 0
    for name in filter(None, node.output):
        t = tensors.get(name)
        size = tensors.item_bytes(t.elem_type)
        if not t.known or size is None:
            return None
        total += t.elements * size
    return total


def _output_elements(node: Any, tensors: Tensors) -> int | None:
    total = 0
    for name in filter(None, node.output):
        t = tensors.get(name)
        if not t.known:
            return None
        total += t.elements
    return total


# --- FLOPs: 2 x multiply-adds of matrix products ---------------------------------------------


def _flops(node: Any, tensors: Tensors) -> int | None:
    """Forward FLOPs; 0 for ops that are not matrix products, None when shapes are unknown."""
    count = _FLOPS.get(node.op_type) if node.domain in DEFAULT_DOMAINS else None
    if count is None:
        return 0
    shapes = [tensors.shape(name) if name else None for name in node.input]
    outputs = [tensors.shape(name) if name else None for name in node.output]
    try:
        macs = count(node, shapes, outputs)
    except (_ShapeUnknownError, IndexError):  # a shape unknown or too short, or no such input
        return None
    return 2 * macs


def _known(shapes: list[Dims | None], index: int) -> Dims:
    """The shape of a node's input or output `index` (_ShapeUnknownError when it is not known)."""
    shape = shapes[index]
    if shape is None:
        raise _ShapeUnknownError
    return shape


def _matmul(node: Any, inputs: list[Dims | None], outputs: list[Dims | None]) -> int:
    # out [..., M, N] = A [..., M, K] x B [..., K, N]: one multiply-add per output and K.
    return math.prod(_known(outputs, 0)) * _known(inputs, 0)[-1]


def _gemm(node: Any, inputs: list[Dims | None], outputs: list[Dims | None]) -> int:
    # Y (M, N) = A' (M, K) x B' (K, N) (+ C, element-wise: not counted); A is (K, M) if transA.
    trans_a = _int_attr(node, "transA", 0)
    return math.prod(_known(outputs, 0)) * _known(inputs, 0)[0 if trans_a else 1]


def _conv(node: Any, inputs: list[Dims | None], outputs: list[Dims | None]) -> int:
    # W (C_out, C_in / groups, k...): each output element takes C_in / groups x prod(k) MACs.
    weight = _known(inputs, _CONV_WEIGHT[node.op_type])
    return math.prod(_known(outputs, 0)) * math.prod(weight[1:])


def _conv_transpose(node: Any, inputs: list[Dims | None], outputs: list[Dims | None]) -> int:
    # W (C_in, C_out / groups, k...): each input element scatters into C_out/groups x prod(k).
    return math.prod(_known(inputs, 0)) * math.prod(_known(inputs, 1)[1:])


def _attention(node: Any, inputs: list[Dims | None], outputs: list[Dims | None]) -> int:
    # Q K^T: one MAC per element of Q and key; softmax(.) V: one per element of Y and key.
    # Keys: K is (B, S_kv, H_kv x D) or (B, H_kv, S_kv, D); `present_key` includes any past.
    present = outputs[1] if len(outputs) > 1 else None
    keys = (present or _known(inputs, 1))[-2]
    return keys * (math.prod(_known(inputs, 0)) + math.prod(_known(outputs, 0)))


_MacCount = Callable[[Any, list[Dims | None], list[Dims | None]], int]
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


def _shape_facts(node: Any, op: str, tensors: Tensors) -> dict[str, Attr]:
    """Layer sizes, where the shapes say them: features, channels, vocabulary."""
    first = tensors.shape(node.input[0]) if node.input else None
    out = tensors.shape(node.output[0]) if node.output else None
    if op == "Conv2d" and node.op_type in _CONV_WEIGHT:
        weight = tensors.shape(node.input[_CONV_WEIGHT[node.op_type]])
        if weight is None or len(weight) < 3:
            return {}
        groups = _int_attr(node, "group", 1)
        return {
            "in_channels": weight[1] * groups,
            "out_channels": weight[0],
            "groups": groups,
            "spatial_dims": len(weight) - 2,
        }
    if op == "MatMul" and first and out and node.op_type in ("MatMul", "Gemm"):
        k = first[0] if _int_attr(node, "transA", 0) else first[-1]
        return {"in_features": k, "out_features": out[-1]}
    if op == "BatchNorm" and len(node.input) > 1 and (scale := tensors.shape(node.input[1])):
        return {"channels": math.prod(scale)}
    if op == "Embedding" and first and len(first) == 2:
        return {"vocab_size": first[0], "hidden_size": first[1]}
    return {}
