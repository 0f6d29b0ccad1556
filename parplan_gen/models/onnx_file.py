"""Reading an .onnx file within bounds (the optional extra `parplan-gen[onnx]`): the `onnx`
import, the size cap and the node count (counted on protobuf's wire format, before the file is
parsed), the weights' data dropped before shape inference copies the model, and the dynamic
dimensions of the graph inputs bound to sizes. `onnx_import` turns the result into a graph.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.reading import RAISE_HINT, read_bytes, size_limit

MISSING_EXTRA = "reading .onnx files needs the onnx extra: pip install 'parplan-gen[onnx]'"
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


def import_onnx(where: SourceRef) -> Any:
    try:
        import onnx
    except ImportError:
        raise InputError(MISSING_EXTRA, where) from None
    return onnx


def read_model(onnx: Any, path: Path, where: SourceRef) -> Any:
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
    for field in _fields(raw, 0, len(raw)):
        if field.number == _GRAPH_FIELD:
            for inner in _fields(raw, field.start, field.end):
                count += inner.number == _NODE_FIELD
                if count >= stop:
                    return count
    return count


class _Field(NamedTuple):
    """A length-delimited field of a serialized message: its number and where its bytes are."""

    number: int
    start: int
    end: int


def _fields(raw: bytes, at: int, end: int) -> Iterator[_Field]:
    """Each length-delimited field of the message in raw[at:end] (protobuf's wire format); the
    other fields are stepped over."""
    sizes = {0: None, 1: 8, 5: 4}  # wire type -> bytes (None: a varint)
    while at < end:
        tag, at = _varint(raw, at)
        wire = tag & 7
        if wire == 2:
            length, at = _varint(raw, at)
            yield _Field(tag >> 3, at, at + length)
            at += length
        elif wire in sizes:
            size = sizes[wire]
            if size is None:
                _value, at = _varint(raw, at)
            else:
                at += size
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


def bind_dims(graph: Any, batch_size: int, dims: dict[str, int]) -> None:
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
