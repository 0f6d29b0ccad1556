"""Planning op-graph models: `plan` and `check` on ResNet-50, a property test over random
graph plans, and an ONNX convolution block through `parplan estimate` and `parplan plan`.

Expected numbers are worked by hand from the architecture and the catalog figures (see
tests/test_graph_cost.py for the constants and the formulas' sources).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan_gen.api import check, plan
from parplan_gen.estimate import Estimate
from parplan_gen.graph_model import GraphModelSpec
from parplan_gen.layout import build_layout
from parplan_gen.model_source import load_model
from parplan_gen.ruleset import load_rules

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
A100_HBM = 2.039e12


def layouts(result: Any) -> list[Estimate]:
    return [result.chosen, *result.result.candidates]


def test_resnet50_on_64_a100s_plans_plain_data_parallelism() -> None:
    # Why dp 64, tp 1, ZeRO 0, mbs 64, one micro-batch (figures in test_graph_cost.py):
    #  - Every micro-batch costs the host 3 x 174 launches x 73.4 us = 38.3 ms, on every rank
    #    whatever tp; 64 images of GPU work take 7.0 ms (convolutions) + 16.6 ms (element-wise),
    #    so the step is the launch floor: one micro-batch of 64 is the fewest launches.
    #  - tp 2 (dp 32, mbs 128) keeps the floor and adds the channel all-reduces, 11.6 ms.
    #  - ZeRO 0: DDP's all-reduce (2.96 ms) hides behind 2/3 of the 38.3 ms. ZeRO-1/2 add the
    #    weight all-gather after the step, across nodes (0.30 ms + 63 x 14 us = 1.18 ms), more
    #    than the 0.37 ms of Adam they save; ZeRO-3 adds 3 x 107 hook launches per micro-batch.
    #  - 7.1 GiB per GPU fits in 80 without recomputation.
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
    # fewer and their micro-batches reach 32 (tp 2: dp 128, mbs 32). The planner takes tp 2:
    # the SyncBatchNorm exchanges are latency-bound (0.20 s per step at dp 256), the channel
    # all-reduces of 32 images over NVLink take 3.2 ms.
    result = plan(RESNET, {"gpus": 256, "gpu": "a100-80gb"}, global_batch=4096, rules=RULES)
    chosen = result.chosen
    assert chosen.time.bn_comm_s > 0 or chosen.plan.tp > 1
    assert (chosen.plan.dp, chosen.plan.tp, chosen.plan.mbs) == (128, 2, 32)
    for estimate in layouts(result):
        layout = estimate.plan
        unsynced_small = layout.mbs < 32 and layout.dp > 1 and estimate.time.bn_comm_s == 0
        assert not unsynced_small, layout


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
    assert report.violations == []
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
ONNX_NODES = 6


def test_onnx_conv_block_estimate(tmp_path: Path, cli: Callable[..., Run]) -> None:
    ox = pytest.importorskip("onnx")
    model = conv_block(ox, tmp_path / "cnn.onnx")
    spec = load_model(str(model))
    assert isinstance(spec, GraphModelSpec)
    assert (spec.params, spec.forward_flops, spec.activation_elements, spec.nodes) == (
        ONNX_PARAMS, ONNX_FLOPS, ONNX_ELEMENTS, ONNX_NODES,
    )  # fmt: skip
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
    assert memory["activations"] == ONNX_ELEMENTS * 2 * 32  # 3,670,656 B
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
