"""The model.* names of an op-graph model (native graph file, ONNX model or graph preset),
summed over its nodes by `graph_model.GraphModelSpec.from_graph`, per sample (one input of the
graph): (name, kind, unit, meaning). `vocabulary.NAMES` declares them for graph models."""

from __future__ import annotations

from typing import Literal

GRAPH_MODEL_NAMES: tuple[tuple[str, Literal["number"], str, str], ...] = (
    ("model.nodes", "number", "nodes", "Nodes of the op graph (each one or more kernels)."),
    (
        "model.weighted_nodes",
        "number",
        "nodes",
        "Nodes that hold parameters (the modules ZeRO-3 gathers one by one).",
    ),
    (
        "model.forward_flops",
        "number",
        "FLOP/sample",
        "Forward FLOPs of one sample: the sum of the nodes' `flops` (2 x multiply-adds).",
    ),
    (
        "model.activation_elements",
        "number",
        "elements/sample",
        "Output elements of every node for one sample: what the memory-bound element-wise work reads and writes (model.stored_elements is what the backward keeps).",
    ),
    (
        "model.stored_elements",
        "number",
        "elements/sample",
        "Output elements the backward keeps for one sample: the inputs of every op but additions, reshapes and average pools, and the activations' outputs (in place when they are their input's only consumer).",
    ),
    (
        "model.split_params",
        "number",
        "parameters",
        "Parameters of the nodes channel (tensor) parallelism splits: Conv2d, MatMul, BatchNorm and Embedding.",
    ),
    (
        "model.split_outputs",
        "number",
        "elements/sample",
        "Output elements of the Conv2d and MatMul nodes for one sample: what channel parallelism exchanges.",
    ),
    ("model.split_nodes", "number", "nodes", "Conv2d and MatMul nodes (channel-parallel layers)."),
    (
        "model.split_width_gcd",
        "number",
        "channels",
        "Greatest common divisor of the Conv2d output channels and MatMul output features (0 when a node does not say its width): channel parallelism must divide it.",
    ),
    ("model.batchnorm_layers", "number", "nodes", "BatchNorm nodes."),
    (
        "model.batchnorm_channels",
        "number",
        "channels",
        "Channels of all BatchNorm nodes (the statistics SyncBatchNorm exchanges).",
    ),
)
