"""Planning op-graph models: `plan` and `check` on ResNet-50, a property test over random
graph plans, and an ONNX convolution block through `parplan estimate` and `parplan plan`.

Expected numbers are worked by hand from the architecture and the catalog figures (see
tests/test_graph_cost.py for the constants and the formulas' sources).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan_gen.api import check, plan
from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.layout import build_layout
from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.load import load_model
from parplan_gen.rules.ruleset import load_rules

from conftest import Run

DERANDOMIZED = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
RULES = load_rules()
RESNET = load_model("resnet-50")
assert isinstance(RESNET, GraphModelSpec)

HOST = 73.4e-6  # host_s_per_node (rules/cost/graph.yaml)
LINK = 0.8413  # link_efficiency (rules/cost/efficiency.yaml)
NVLINK_A100 = 300e9  # 600 GB/s both directions, one direction
NVLINK_LATENCY = 3.4e-6
HDR_PER_GPU = 25e9  # 8 HDR ports of 200 Gb/s per 8-GPU DGX A100, one direction
NET_LATENCY = 14e-6
A100_HBM = 2.039e12


def layouts(result: Any) -> list[Estimate]:
    return [result.chosen, *result.document.candidates]


def test_resnet50_on_64_a100s_plans_plain_data_parallelism() -> None:
    # Why dp 64, tp 1, ZeRO 0, mbs 64, one micro-batch (figures in test_graph_cost.py):
    #  - Every micro-batch costs the host 3 x 174 launches x 73.4 us = 38.3 ms, on every rank
    #    whatever tp; 64 images of GPU work take 7.0 ms (convolutions) + 16.6 ms (element-wise),
    #    so the step is the launch floor: one micro-batch of 64 is the fewest launches.
    #  - tp 2 (dp 32, mbs 128) keeps the floor and adds the channel all-reduces, 11.6 ms.
    #  - ZeRO 0: DDP's all-reduce (1.77 ms) hides behind 2/3 of the 38.3 ms. ZeRO-1/2 add the
    #    weight all-gather after the step, across 8 nodes (0.30 ms + 56 x 3.4 us + 7 x 14 us =
    #    0.59 ms), more than the 63/64 x 0.376 = 0.37 ms of Adam they save; ZeRO-3 adds 3 x 107
    #    hook launches per micro-batch.
    #  - 5.05 GiB per GPU fits in 80 without recomputation.
    result = plan(RESNET, {"gpus": 64, "gpu": "a100-80gb"}, global_batch=4096, rules=RULES)
    chosen = result.chosen.plan
    assert result.feasible
    assert (chosen.dp, chosen.tp, chosen.zero_stage, chosen.mbs, chosen.grad_accum) == (
        64, 1, 0, 64, 1,
    )  # fmt: skip
    assert chosen.recompute == "none"
    assert result.chosen.time.step_s == pytest.approx(3 * 174 * HOST + 30 * 25_557_032 / A100_HBM)


def test_resnet50_on_256_a100s_never_trains_batchnorm_on_16_images_unsynced() -> None:
    # 4096 images on 256 GPUs: 16 per data-parallel rank with tp 1. Either the statistics are
    # synchronised (SyncBatchNorm: bn_comm_s > 0), or channel parallelism makes the replicas
    # fewer and their micro-batches reach 32 (tp 2: dp 128, mbs 32). By hand (figures in
    # test_graph_cost.py), per step:
    #  - tp 1, dp 256, mbs 16, SyncBatchNorm: the launch floor with 2 x 53 exchanges,
    #    (3 x 174 + 106) x 73.4 us = 46.10 ms, + the exchanges, latency-bound even with NCCL's
    #    node-crossing latencies: 63.69 ms forward + 9.95 ms backward = 73.63 ms, + Adam
    #    0.38 ms = 120.1 ms.
    #  - tp 2, dp 128, mbs 32: the floor 3 x 174 x 73.4 us = 38.31 ms (32 images / 2 ranks of
    #    GPU work: 5.9 ms), + the channel all-reduces of 32 images over NVLink: 2 x 1/2 x
    #    11,114,984 x 32 x 2 B / (300 GB/s x 0.8413) = 2.82 ms + 54 x 2 x 3.4 us = 0.37 ms,
    #    + Adam on half the parameters 0.19 ms = 41.69 ms. The gradient all-reduce hides.
    #  - tp 4, dp 64, mbs 64: the same floor, channel traffic 2 x 3/4 x 11,114,984 x 64 x 2 B
    #    / 252.39 GB/s + 54 x 6 x 3.4 us = 9.56 ms: slower.
    result = plan(RESNET, {"gpus": 256, "gpu": "a100-80gb"}, global_batch=4096, rules=RULES)
    chosen = result.chosen
    assert (chosen.plan.dp, chosen.plan.tp, chosen.plan.mbs, chosen.plan.zero_stage) == (
        128, 2, 32, 0,
    )  # fmt: skip
    tp_comm = 11_114_984 * 32 * 2 / (NVLINK_A100 * LINK) + 54 * 2 * NVLINK_LATENCY
    floor = 3 * 174 * HOST
    assert chosen.time.tp_comm_s == pytest.approx(tp_comm)
    assert chosen.time.step_s == pytest.approx(floor + tp_comm + 30 * 25_557_032 / 2 / A100_HBM)
    for estimate in layouts(result):
        layout = estimate.plan
        unsynced_small = layout.mbs < 32 and layout.dp > 1 and estimate.time.bn_comm_s == 0
        assert not unsynced_small, layout
    # The SyncBatchNorm layout, checked: runnable, and the planner's choice is better.
    layout = build_layout(256, mbs=16, global_batch=4096, seq_len=1)
    synced = check(RESNET, {"gpus": 256, "gpu": "a100-80gb"}, layout)
    assert synced.runnable
    bus = 8 * HDR_PER_GPU * LINK  # the group's 8 NICs per node, under NVLink's 300 GB/s
    gather = 224 * NVLINK_LATENCY + 31 * NET_LATENCY  # 32 nodes: 31 of 255 ring steps cross
    tree = 2 * (7 * NVLINK_LATENCY + 5 * NET_LATENCY)  # 8 ranks per node, log2(32) = 5
    forward = 255 * (2 * 26_560 + 53) * 4 / bus + 53 * gather
    backward = 2 * 255 / 256 * 2 * 26_560 * 4 / bus + 53 * tree
    assert synced.estimate.time.bn_comm_s == pytest.approx(forward + backward)  # 73.63 ms
    step = (3 * 174 + 2 * 53) * HOST + forward + backward + 30 * 25_557_032 / A100_HBM
    assert synced.estimate.time.step_s == pytest.approx(step)  # 120.1 ms
    assert synced.better is not None
    assert (synced.better.plan.dp, synced.better.plan.tp) == (128, 2)


GPUS = (1, 2, 3, 4, 6, 8, 16, 24, 32, 64, 128, 256)


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, int]:
    """(GPUs, global batch) with at least one runnable layout: the batch divides by
    GPUs / t for a tp t that divides the GPUs, the node (8) and the widths' gcd (8)."""
    gpus = draw(st.sampled_from(GPUS))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if gpus % t == 0]))
    return gpus, gpus // tp * draw(st.integers(1, 48))


@settings(DERANDOMIZED, max_examples=40)
@given(requests())
def test_every_graph_plan_is_data_and_channel_parallel(request: tuple[int, int]) -> None:
    gpus, batch = request
    result = plan(RESNET, {"gpus": gpus, "gpu": "a100-80gb"}, global_batch=batch, rules=RULES)
    assert result.feasible
    for estimate in layouts(result):
        p = estimate.plan
        assert p.dp * p.tp == gpus
        assert (p.pp, p.cp, p.ep, p.vpp) == (1, 1, 1, 1)
        assert p.mbs * p.grad_accum * p.dp == batch
        assert p.recompute in ("none", "full")
        assert not p.sequence_parallel
        assert not p.distributed_optimizer
        assert p.dp > 1 or p.zero_stage == 0  # zero.needs_data_parallel
        assert RESNET.split_width_gcd % p.tp == 0
        # BatchNorm sees 32 images, or synchronises over the replicas, or has none to sync.
        synced = estimate.time.bn_comm_s > 0
        assert synced == (p.mbs < 32 and p.dp > 1)


def test_check_a_resnet50_layout() -> None:
    cluster = {"gpus": 64, "gpu": "a100-80gb"}
    # dp 64 with 4 micro-batches of 16: runnable, but SyncBatchNorm and 4 launch floors.
    accumulating = build_layout(64, mbs=16, global_batch=4096, seq_len=1)
    report = check(RESNET, cluster, accumulating)
    assert report.runnable
    assert report.violations == ()
    assert report.estimate.time.bn_comm_s > 0
    # (3 x 174 launches + 2 x 53 SyncBatchNorm exchanges) x 73.4 us, 4 times.
    assert report.estimate.time.compute_s == pytest.approx(4 * (3 * 174 + 2 * 53) * HOST)
    assert report.better is not None
    assert (report.better.plan.mbs, report.better.plan.grad_accum) == (64, 1)
    # tp 16 splits nothing evenly (the widths' gcd is 8) and leaves the 8-GPU node.
    split = build_layout(64, tp=16, mbs=64, global_batch=256, seq_len=1)
    report = check(RESNET, cluster, split)
    assert not report.runnable
    assert {v.rule_id for v in report.violations} == {
        "graph.channels_divisible_by_tp",
        "parallel.tp_within_node",
    }
    reasons = " ".join(v.reason for v in report.violations)
    assert "divide by tp (16); their greatest common divisor is 8" in reasons
    # 256 images on 64 GPUs: the planner's choice gives BatchNorm 32 images per micro-batch
    # with channel parallelism over the node (tp 8, dp 8) rather than sync 4-image statistics.
    assert report.better is not None
    better = report.better.plan
    assert (better.dp, better.tp, better.mbs) == (8, 8, 32)
    assert report.better.time.bn_comm_s == 0


# ---- an ONNX convolution block through the CLI ------------------------------------------------


def conv_block(ox: Any, path: Path) -> Path:
    """x [N, 3, 32, 32] -> Conv 3x3 (16, pad 1, bias) -> BatchNormalization -> Relu ->
    MaxPool 2 -> Flatten -> Gemm 10 (weights of zeros: only shapes matter)."""
    h = ox.helper
    f32 = ox.TensorProto.FLOAT

    def weight(name: str, *dims: int) -> Any:
        count = 1
        for d in dims:
            count *= d
        return h.make_tensor(name, f32, list(dims), [0] * count)

    nodes = [
        h.make_node(
            "Conv", ["x", "Wc", "Bc"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4
        ),
        h.make_node("BatchNormalization", ["c", "s", "o", "mean", "var"], ["b"], name="bn"),
        h.make_node("Relu", ["b"], ["r"], name="relu"),
        h.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        h.make_node("Gemm", ["f", "Wf", "Bf"], ["y"], name="fc", transB=1),
    ]
    inits = [weight("Wc", 16, 3, 3, 3), weight("Bc", 16)]
    inits += [weight(n, 16) for n in ("s", "o", "mean", "var")]
    inits += [weight("Wf", 10, 4096), weight("Bf", 10)]
    graph = h.make_graph(
        nodes,
        "cnn",
        [h.make_tensor_value_info("x", f32, ["N", 3, 32, 32])],
        [h.make_tensor_value_info("y", f32, None)],
        inits,
    )
    ox.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return path


# Per image (the importer binds the batch dimension N to 1):
#   conv: 16*3*3*3 + 16 = 448 params; 16 x 32 x 32 = 16,384 outputs x 27 MACs = 442,368 MACs
#   bn: 2 x 16 = 32 params (running mean/var are buffers); relu: 16,384 outputs
#   pool, flatten: 16 x 16 x 16 = 4,096 outputs each
#   fc: 4096 x 10 + 10 = 40,970 params; 40,960 MACs; 10 outputs
ONNX_PARAMS = 448 + 32 + 40_970  # 41,450
ONNX_FLOPS = 2 * (442_368 + 40_960)  # 966,656
ONNX_ELEMENTS = 3 * 16_384 + 2 * 4_096 + 10  # 57,354
# Kept for the backward: bn's input (the conv's output, 16,384), relu's output (in place over
# bn's; also pool's input), fc's input (flatten's output, 4,096). Not kept: the input image (no
# node), bn's output, pool's output (read only by flatten, which keeps nothing), fc's output.
ONNX_STORED = 16_384 + 16_384 + 4_096  # 36,864
ONNX_NODES = 6


def test_onnx_conv_block_estimate(tmp_path: Path, cli: Callable[..., Run]) -> None:
    ox = pytest.importorskip("onnx")
    model = conv_block(ox, tmp_path / "cnn.onnx")
    spec = load_model(str(model))
    assert isinstance(spec, GraphModelSpec)
    assert (spec.params, spec.forward_flops, spec.activation_elements, spec.nodes) == (
        ONNX_PARAMS, ONNX_FLOPS, ONNX_ELEMENTS, ONNX_NODES,
    )  # fmt: skip
    assert spec.stored_elements == ONNX_STORED
    assert (spec.batchnorm_layers, spec.batchnorm_channels, spec.split_width_gcd) == (1, 16, 2)
    run = cli(
        "estimate", model, "--gpus", 8, "--gpu", "a100-80gb", "--mbs", 32,
        "--global-batch", 256, "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    out = run.json()
    assert (out["plan"]["dp"], out["plan"]["tp"], out["plan"]["grad_accum"]) == (8, 1, 1)
    memory = out["memory"]
    assert memory["params"] == 2 * ONNX_PARAMS  # 82,900 B
    assert memory["grads"] == 4 * ONNX_PARAMS  # 165,800 B
    assert memory["optimizer"] == 12 * ONNX_PARAMS  # 497,400 B
    assert memory["activations"] == ONNX_STORED * 2 * 32  # 2,359,296 B
    # Six nodes: the launch floor (3 x 6 x 73.4 us = 1.32 ms) dwarfs 32 images of GPU work
    # (< 0.02 ms); the all-reduce inside the node, 7/8 x 8 B x 41,450 over NVLink plus 14 steps
    # of 3.4 us = 0.049 ms, hides behind 2/3 of it; Adam: 30 B x 41,450 at 2.039 TB/s.
    time = out["time"]
    floor = 3 * ONNX_NODES * HOST
    assert time["compute_s"] == pytest.approx(floor)
    sync = 7 / 8 * 8 * ONNX_PARAMS / (NVLINK_A100 * LINK) + 14 * NVLINK_LATENCY
    assert time["dp_comm_s"] == pytest.approx(sync)
    assert time["bn_comm_s"] == 0  # 32 images per GPU
    step = floor + 30 * ONNX_PARAMS / A100_HBM  # 1.3218 ms
    assert time["step_s"] == pytest.approx(step)
    assert out["throughput"]["tokens_per_s"] == pytest.approx(256 / step)  # images/s
    tflops = 3 * ONNX_FLOPS * 256 / step / 8 / 1e12
    assert out["throughput"]["model_tflops_per_gpu"] == pytest.approx(tflops)


def test_onnx_conv_block_plan(tmp_path: Path, cli: Callable[..., Run]) -> None:
    ox = pytest.importorskip("onnx")
    model = conv_block(ox, tmp_path / "cnn.onnx")
    run = cli("plan", model, "--gpus", 8, "--gpu", "a100-80gb", "--global-batch", 256, "--json")
    assert run.code == 0, run.err
    out = run.json()
    # The launch floor is per micro-batch: one micro-batch of 32 per GPU is the fastest; tp 2
    # (the widths 16 and 10 have gcd 2) adds channel traffic; ZeRO-1/2 add an exposed gather.
    chosen = out["chosen"]["plan"]
    assert (chosen["dp"], chosen["tp"], chosen["mbs"], chosen["grad_accum"]) == (8, 1, 32, 1)
    assert chosen["zero_stage"] == 0
    assert all(c["plan"]["tp"] in (1, 2) for c in out["candidates"])
    assert any("greatest common divisor is 2" in reason for reason in out["rejected"])


def test_onnx_conv_with_a_symbolic_height_is_refused(
    tmp_path: Path, cli: Callable[..., Run]
) -> None:
    # x [N, 3, H, 32] with H left symbolic: the convolutions' outputs have no size, so neither
    # do their FLOPs; the global average pool's output [1, 8, 1, 1] does again, and the fc's.
    # Counting the convolutions as no work would plan a model of 160 FLOPs.
    ox = pytest.importorskip("onnx")
    h = ox.helper
    f32 = ox.TensorProto.FLOAT

    def weight(name: str, *dims: int) -> Any:
        return h.make_tensor(name, f32, list(dims), [0] * math.prod(dims))

    conv = {"kernel_shape": [3, 3], "pads": [1] * 4}
    nodes = [
        h.make_node("Conv", ["x", "W1"], ["c1"], name="conv1", **conv),
        h.make_node("Relu", ["c1"], ["r1"], name="relu"),
        h.make_node("Conv", ["r1", "W2"], ["c2"], name="conv2", **conv),
        h.make_node("GlobalAveragePool", ["c2"], ["g"], name="pool"),
        h.make_node("Flatten", ["g"], ["f"], name="flatten", axis=1),
        h.make_node("Gemm", ["f", "Wf", "Bf"], ["y"], name="fc", transB=1),
    ]
    inits = [weight("W1", 8, 3, 3, 3), weight("W2", 8, 8, 3, 3)]
    inits += [weight("Wf", 10, 8), weight("Bf", 10)]
    graph = h.make_graph(
        nodes,
        "cnn",
        [h.make_tensor_value_info("x", f32, ["N", 3, "H", 32])],
        [h.make_tensor_value_info("y", f32, None)],
        inits,
    )
    model = tmp_path / "cnn_h.onnx"
    ox.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(model))
    run = cli("plan", model, "--gpus", 8, "--gpu", "a100-80gb", "--global-batch", 256)
    assert run.code == 1
    assert run.out == ""
    assert run.err == (
        f"parplan: error: {model}: node 'conv1' and 1 more: a Conv2d/MatMul without a number "
        "for `flops` would count as no work (an ONNX model has none where a dimension other "
        "than the batch is symbolic: export it with fixed sizes)\n"
    )


def test_resnet50_on_one_gpu_shards_no_optimizer(cli: Callable[..., Run]) -> None:
    # One GPU is one data-parallel rank: ZeRO 1-3 would shard over nothing
    # (zero.needs_data_parallel). Every searched micro-batch (the 9 divisors of 256, 1 to 256)
    # with each recomputation (none, full) and ZeRO 1, 2, 3 is rejected for it: 9 x 2 x 3 = 54;
    # the 9 ZeRO 0 layouts with full recomputation are dominated (they fit without).
    run = cli(
        "plan", "resnet-50", "--gpus", 1, "--gpu", "a100-80gb", "--global-batch", 256, "--json"
    )
    assert run.code == 0, run.err
    out = run.json()
    assert out["chosen"]["plan"]["zero_stage"] == 0
    assert {c["plan"]["zero_stage"] for c in out["candidates"]} == {0}
    assert out["rejected"] == {
        "optimizer sharding over a single rank (dp x cp = 1) shards nothing [zero.needs_data_parallel: zero_stage 1..3]": 54,
        "dominated: fits with less recomputation, which is never slower": 9,
    }
    # ZeRO 0 keeps fp32 gradients and the whole Adam state: 2 + 4 + 12 B per parameter.
    memory = out["chosen"]["memory"]
    assert (memory["params"], memory["grads"], memory["optimizer"]) == (
        2 * 25_557_032, 4 * 25_557_032, 12 * 25_557_032,
    )  # fmt: skip
