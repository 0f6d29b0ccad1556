"""An op graph as a model to train: the per-sample sums the graph cost model reads as model.*.

Transformers are planned from their `ModelSpec`; any other model (a native graph file, an ONNX
model, the `resnet-50` preset) is planned from its op graph. `GraphModelSpec.from_graph` sums
the graph's node attributes into what rules/cost/graph.yaml needs, for one sample (one input of
the graph, e.g. one image): the graph is read at batch 1, so an ONNX model's dynamic batch
dimension is bound to 1 and the cost model scales by the micro-batch itself.

Channel (tensor) parallelism follows the seed's ModelParallel for Conv2d: a Conv2d or MatMul
splits its output channels (features) over the tensor-parallel ranks, and the per-channel nodes
that follow (BatchNorm) and an Embedding's table split with them.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.safe_text import printable
from parplan_gen.models.graph import ModelGraph
from parplan_gen.models.graph_node import Node
from parplan_gen.models.kind import BackendName, WorkUnit

SPLIT_LAYERS = ("Conv2d", "MatMul")  # channel-parallel layers: their outputs are exchanged
# What each op's backward keeps (PyTorch tools/autograd/derivatives.yaml): its inputs, except
# for the ops below, whose gradients need only shapes (an addition or ONNX's Sum, a reshape, a
# global average pool, which runs as `mean`), and for Softmax and the activations whose
# gradient reads their result (softmax_backward_data(grad, output); threshold_backward(grad,
# result) for ReLU, sigmoid_backward, tanh_backward), which keep their output instead. An
# Activation node says its function in `onnx_op` (ONNX) or `fn`; one that says none is taken
# for a ReLU. Other activations (GELU, SiLU, ...) keep their input.
SAVES_NO_INPUT = frozenset(
    ("Add", "Sum", "Sub", "Concat", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
     "Identity", "GlobalAveragePool")
)  # fmt: skip
KEEPS_RESULT = frozenset(("relu", "sigmoid", "tanh"))
SPLIT_PARAMS = (*SPLIT_LAYERS, "BatchNorm", "Embedding")  # nodes whose weights are split
WIDTH_ATTRS = {"Conv2d": "out_channels", "MatMul": "out_features"}
GRAPH_PARAMS_IN_MILLIONS = 100_000  # from here a graph model's count is shown as `25.6M`


class GraphModelSpec(BaseModel):
    """What the graph cost model knows of an op-graph model (per sample), as a
    `kind.TrainedModel`: one sample is one input of the graph; it is laid out over data and
    channel (tensor) parallelism only and runs under DeepSpeed / torchrun."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    unit: ClassVar[WorkUnit] = "samples"
    memory_heading: ClassVar[str] = "Memory per GPU"
    layout_dims: ClassVar[tuple[str, ...]] = ("dp", "tp")
    recompute_choices: ClassVar[tuple[str, ...]] = ("none", "full")
    time_parts: ClassVar[tuple[str, ...]] = (
        "compute_s", "tp_comm_s", "dp_comm_s", "bn_comm_s", "optimizer_s",
    )  # fmt: skip
    backends: ClassVar[tuple[BackendName, ...]] = ("deepspeed",)

    kind: Literal["graph"] = Field("graph", description="Always `graph` (a transformer has none).")
    name: str = Field(min_length=1, description="The graph's name.")
    nodes: int = Field(ge=1, description="Nodes of the op graph.")
    weighted_nodes: int = Field(ge=0, description="Nodes that hold parameters.")
    params: int = Field(ge=0, description="All parameters.")
    forward_flops: float = Field(gt=0, description="Forward FLOPs of one sample.")
    activation_elements: float = Field(gt=0, description="Output elements of every node.")
    stored_elements: float = Field(
        ge=0, description="Elements the backward keeps (SAVES_NO_INPUT, in-place activations)."
    )
    split_params: int = Field(ge=0, description="Parameters channel parallelism splits.")
    split_outputs: float = Field(ge=0, description="Output elements of Conv2d/MatMul nodes.")
    split_nodes: int = Field(ge=0, description="Conv2d and MatMul nodes.")
    split_width_gcd: int = Field(
        ge=0, description="GCD of the Conv2d/MatMul output widths (0: some width is not known)."
    )
    batchnorm_layers: int = Field(ge=0, description="BatchNorm nodes.")
    batchnorm_channels: int = Field(ge=0, description="Channels of all BatchNorm nodes.")
    _graph: ModelGraph | None = PrivateAttr(default=None)  # kept by from_graph, not serialised

    @property
    def graph(self) -> ModelGraph:
        """The op graph this was summed from (the rules engine's proposals read it)."""
        if self._graph is None:
            raise ValueError(
                f"{self.name}: this GraphModelSpec was read back without its graph; load the "
                "model again (parplan_gen.models.load.load_model)"
            )
        return self._graph

    @property
    def is_moe(self) -> bool:
        """An op graph has no routed experts (expert parallelism is for transformers)."""
        return False

    @property
    def title(self) -> str:
        params = self.params
        count = f"{params / 1e6:,.1f}M" if params >= GRAPH_PARAMS_IN_MILLIONS else f"{params:,}"
        return f"{printable(self.name)} ({count} params, op graph)"

    @property
    def pipeline_layers(self) -> int:
        return 1

    def batch_text(self, global_batch: int, seq_len: int) -> str:
        return f"global batch {global_batch} samples"

    def sequence_length(self, asked: int | None) -> int:
        if asked not in (None, 1):
            raise InputError(
                f"--seq-len {asked}: {self.name} is an op-graph model, which has no sequence "
                "length (a sample is one input of the graph; its sizes are in the graph); "
                "leave it out"
            )
        return 1

    def formula_values(self, seq_len: int) -> dict[str, Any]:
        return {f"model.{k}": v for k, v in self.model_dump(exclude={"kind", "name"}).items()}

    def op_graph(self, seq_len: int) -> ModelGraph:
        return self.graph

    def facts(self) -> dict[str, Any]:
        values = {f"model.{k}": v for k, v in self.model_dump().items()}
        return {**values, "model.gqa": False, "model.moe": False, "model.mla": False}

    @classmethod
    def from_graph(cls, graph: ModelGraph, where: SourceRef | None = None) -> GraphModelSpec:
        """Sum `graph`'s node attributes (`params`, `flops`, `activation_elements`, `channels`,
        `out_channels`, `out_features`); an InputError when it lacks FLOPs or activation sizes,
        which the cost model cannot do without."""
        where = where or SourceRef(graph.name)
        if not graph.nodes:
            raise InputError("the graph has no nodes: nothing to train", where)
        split = [n for n in graph.nodes if n.op in SPLIT_LAYERS]
        for attr, lost in (("flops", "no work"), ("activation_elements", "no memory or traffic")):
            unsized = [n.id for n in split if not _is_number(n, attr)]
            if unsized:
                more = f" and {len(unsized) - 1} more" if len(unsized) > 1 else ""
                raise InputError(
                    f"node {unsized[0]!r}{more}: a Conv2d/MatMul without a number for `{attr}` "
                    f"would count as {lost} (an ONNX model has none where a dimension other "
                    "than the batch is symbolic: export it with fixed sizes)",
                    where,
                )
        sums = graph.stats.attr_sums  # the rules' graph.sum.*: numeric attributes, exactly summed
        flops, elements = sums.get("flops", 0.0), sums.get("activation_elements", 0.0)
        for total, attr in ((flops, "flops"), (elements, "activation_elements")):
            if total <= 0:
                raise InputError(
                    f"no node gives `{attr}`: estimate and plan need each node's forward FLOPs "
                    "(`flops`) and output size (`activation_elements`) for one sample; the ONNX "
                    "importer and the graph presets set both",
                    where,
                )
        norms = [n for n in graph.nodes if n.op == "BatchNorm"]
        widths = [_width(n) for n in split]
        spec = cls(
            name=graph.name,
            nodes=len(graph.nodes),
            weighted_nodes=sum(_number(n, "params") > 0 for n in graph.nodes),
            params=round(sums.get("params", 0.0)),
            forward_flops=flops,
            activation_elements=elements,
            stored_elements=_stored_elements(graph),
            split_params=round(_total([n for n in graph.nodes if n.op in SPLIT_PARAMS], "params")),
            split_outputs=_total(split, "activation_elements"),
            split_nodes=len(split),
            split_width_gcd=math.gcd(*widths) if all(widths) else 0,
            batchnorm_layers=len(norms),
            batchnorm_channels=round(_total(norms, "channels")),
        )
        spec._graph = graph
        return spec


def _stored_elements(graph: ModelGraph) -> float:
    """Elements of the node outputs some backward keeps, each output counted once. A ReLU keeps
    only its output, so its input is freed unless another node keeps it: what running it in
    place (torchvision's ResNets: ReLU(inplace=True)) gives."""
    inputs: dict[str, list[str]] = {}
    for src, dst in graph.edges:
        inputs.setdefault(dst, []).append(src)
    kept: set[str] = set()
    for node in graph.nodes:
        if node.op == "Softmax" or (node.op == "Activation" and _function(node) in KEEPS_RESULT):
            kept.add(node.id)
        elif node.op not in SAVES_NO_INPUT:
            kept.update(inputs.get(node.id, ()))
    return math.fsum(_number(graph.node(i), "activation_elements") for i in sorted(kept))


def _function(node: Node) -> str:
    """An Activation's function, lower case (`relu` when the node does not say)."""
    name = node.attrs.get("onnx_op", node.attrs.get("fn", "relu"))
    return str(name).lower()


def _is_number(node: Node, attr: str) -> bool:
    value = node.attrs.get(attr)
    return type(value) is int or type(value) is float  # bools are not numbers


def _number(node: Node, attr: str) -> float:
    value = node.attrs.get(attr)
    return value if type(value) is int or type(value) is float else 0  # bools are not numbers


def _total(nodes: list[Node] | tuple[Node, ...], attr: str) -> float:
    return math.fsum(_number(n, attr) for n in nodes)


def _width(node: Node) -> int:
    """The node's output channels (features) when it says them as an integer, else 0 (unknown:
    then no tensor-parallel size is known to divide every width)."""
    value = node.attrs.get(WIDTH_ATTRS[node.op])
    return value if type(value) is int and value > 0 else 0
