"""Write `parplan_gen/data/graphs/resnet-50.yaml`, the native op graph of ResNet-50.

Architecture: He et al. 2016, "Deep Residual Learning for Image Recognition" (arXiv:1512.03385),
Table 1, 50-layer column: conv1 7x7/2 (64), 3x3/2 max pool, then bottleneck stages
[1x1 64, 3x3 64, 1x1 256] x3, [128, 128, 512] x4, [256, 256, 1024] x6, [512, 512, 2048] x3,
global average pool, 1000-way fc. Projection shortcuts (1x1 conv + BN, option B of Sec. 3.3) on
the first block of each stage. Stride-2 placement: on the 3x3 conv ("ResNet-50 v1.5", the
torchvision / MLPerf model). He et al. put it on the first 1x1 conv, which gives Table 1's
3.8 x 10^9 multiply-adds; v1.5 gives the 4.1 x 10^9 quoted for torchvision's resnet50
(docs: "GFLOPS 4.09", 25,557,032 parameters). Parameters do not depend on the placement.

Counting: `params` = weights + BN scale/shift (running statistics are buffers), no conv biases,
fc with bias. `macs` = multiply-adds per 224x224 image, forward; `flops` = 2 * macs (the unit of
every other graph in parplan). BN, ReLU, pooling and adds count zero, like element-wise ops in
the transformer graphs. `activation_elements` = elements of the node's output per image
(channels x height x width), what the backward pass keeps.

Run from the repository root: `python tools/gen_resnet50.py` (it prints the totals).
"""

from __future__ import annotations

import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "parplan_gen" / "data" / "graphs" / "resnet-50.yaml"
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # width, blocks, first stride
EXPANSION = 4  # bottleneck output = 4 x width (Table 1)
IMAGE = 224
CLASSES = 1000


class Graph:
    def __init__(self) -> None:
        self.nodes: list[dict[str, object]] = []
        self.edges: list[tuple[str, str]] = []
        self.elements: dict[str, int] = {}  # node id -> output elements per image

    def add(self, node_id: str, op: str, inputs: list[str], **attrs: object) -> str:
        """A node; its output has as many elements as its first input's unless it says."""
        if "activation_elements" not in attrs:
            attrs["activation_elements"] = self.elements[inputs[0]]
        self.elements[node_id] = int(attrs["activation_elements"])  # type: ignore[call-overload]
        self.nodes.append({"id": node_id, "op": op, "params": 0, "flops": 0, **attrs})
        self.edges.extend((src, node_id) for src in inputs)
        return node_id

    def conv(
        self, node_id: str, src: str | None, cin: int, cout: int, k: int, stride: int, out: int
    ) -> str:
        macs = k * k * cin * cout * out * out
        return self.add(
            node_id,
            "Conv2d",
            [src] if src else [],
            params=k * k * cin * cout,
            flops=2 * macs,
            macs=macs,
            kernel=k,
            stride=stride,
            in_channels=cin,
            out_channels=cout,
            out_size=out,
            activation_elements=cout * out * out,
        )

    def bn(self, node_id: str, src: str, channels: int) -> str:
        return self.add(node_id, "BatchNorm", [src], params=2 * channels, channels=channels)


def build(stride_on_3x3: bool = True) -> Graph:
    g = Graph()
    size = IMAGE // 2  # conv1 7x7 stride 2, padding 3
    x = g.conv("conv1", None, 3, 64, 7, 2, size)
    x = g.bn("bn1", x, 64)
    x = g.add("relu", "Activation", [x], fn="relu")
    size //= 2  # 3x3 max pool stride 2
    x = g.add("maxpool", "MaxPool", [x], kernel=3, stride=2, activation_elements=64 * size * size)
    cin = 64
    for stage, (width, blocks, first_stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            stride = first_stride if block == 0 else 1
            out = size // stride
            p, cout = f"layer{stage}.{block}", width * EXPANSION
            s1, s2 = (1, stride) if stride_on_3x3 else (stride, 1)
            y = g.conv(f"{p}.conv1", x, cin, width, 1, s1, size // s1)
            y = g.add(f"{p}.relu1", "Activation", [g.bn(f"{p}.bn1", y, width)], fn="relu")
            y = g.conv(f"{p}.conv2", y, width, width, 3, s2, out)
            y = g.add(f"{p}.relu2", "Activation", [g.bn(f"{p}.bn2", y, width)], fn="relu")
            y = g.bn(f"{p}.bn3", g.conv(f"{p}.conv3", y, width, cout, 1, 1, out), cout)
            shortcut = x
            if block == 0:  # projection shortcut (He et al. Sec. 3.3, option B)
                d = g.conv(f"{p}.downsample.conv", x, cin, cout, 1, stride, out)
                shortcut = g.bn(f"{p}.downsample.bn", d, cout)
            y = g.add(f"{p}.add", "Add", [y, shortcut])
            x = g.add(f"{p}.relu3", "Activation", [y], fn="relu")
            cin, size = cout, out
    # torchvision's AdaptiveAvgPool2d(1), exported to ONNX as GlobalAveragePool
    x = g.add("avgpool", "GlobalAveragePool", [x], kernel=size, activation_elements=cin)
    macs = cin * CLASSES
    g.add(
        "fc",
        "MatMul",
        [x],
        params=cin * CLASSES + CLASSES,
        flops=2 * macs,
        macs=macs,
        in_features=cin,
        out_features=CLASSES,
        activation_elements=CLASSES,
    )
    return g


def totals(g: Graph) -> tuple[int, int]:
    return sum(int(n["params"]) for n in g.nodes), sum(int(n.get("macs", 0)) for n in g.nodes)


def render(g: Graph) -> str:
    params, macs = totals(g)
    head = [
        "# ResNet-50 (v1.5: stride 2 on the 3x3 conv) as a native parplan op graph.",
        "# Generated by tools/gen_resnet50.py; edit that script, not this file.",
        "# Architecture: He et al. 2016 (arXiv:1512.03385), Table 1, 50-layer column.",
        f"# Totals: {params:,} parameters (torchvision resnet50: 25,557,032);",
        f"# {macs:,} multiply-adds per 224x224 image (torchvision: 4.09 GFLOPS [MACs]);",
        f"# {sum(int(n['activation_elements']) for n in g.nodes):,} output elements per image.",
        "# flops = 2 x macs. He et al.'s original stride placement gives 3.8e9 (Table 1).",
        "name: resnet-50",
        "nodes:",
    ]
    for n in g.nodes:
        fields = ", ".join(f"{k}: {v}" for k, v in n.items())
        head.append(f"  - {{{fields}}}")
    head.append("edges:")
    head.extend(f"  - [{a}, {b}]" for a, b in g.edges)
    return "\n".join(head) + "\n"


def main() -> int:
    v15, v1 = build(stride_on_3x3=True), build(stride_on_3x3=False)
    for label, g in (("v1.5 (written)", v15), ("v1 (He et al.)", v1)):
        params, macs = totals(g)
        print(f"{label}: {params:,} params, {macs / 1e9:.3f} G multiply-adds, {len(g.nodes)} nodes")
    OUT.write_text(render(v15), encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
