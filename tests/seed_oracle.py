"""An independent transliteration of the seed's ParallelPlannerAgent, as a test oracle.

It follows shared/seed/000_3bd637f12122e258.txt line by line, in float32 as the Rust code does,
with one intended change: depth is the true critical path (nodes on the longest path). It does
not use the package's rules or engine, so comparing the two checks that the YAML rules express
the seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

f32 = np.float32
GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024


@dataclass
class Opp:
    node_id: str
    type: str
    speedup: float
    min_devices: int
    memory: int
    overhead: float


def true_depth(ops: list[str], edges: list[tuple[int, int]]) -> int:
    """Nodes on the longest path (0 for an empty graph); edges go from lower to higher index."""
    level = [1] * len(ops)
    for src, dst in sorted(edges, key=lambda e: e[1]):
        level[dst] = max(level[dst], level[src] + 1)
    return max(level, default=0)


def dp_speedup(n: int) -> np.float32:
    return f32(2.0) * min(max(f32(n) / f32(10.0), f32(1.0)), f32(2.0))


def tp_speedup(n: int) -> np.float32:
    return f32(1.8) * min(max(f32(n) / f32(20.0), f32(0.8)), f32(1.5))


def pipeline_speedup(depth: int) -> np.float32:
    return f32(depth) * (f32(1.0) - f32(1.0) / f32(depth))


def analyze(ops: list[str], edges: list[tuple[int, int]]) -> list[Opp]:
    n = len(ops)
    found: list[Opp] = []
    for i, op in enumerate(ops):
        nid = f"n{i}"
        if op == "MatMul":
            found.append(Opp(nid, "DataParallel", dp_speedup(n), 2, GiB, 0.05))
            found.append(Opp(nid, "TensorParallel", tp_speedup(n), 4, 512 * MiB, 0.15))
        elif op in ("Activation", "BatchNorm"):
            found.append(Opp(nid, "DataParallel", dp_speedup(n) * f32(0.9), 2, 256 * MiB, 0.02))
        elif op == "Conv2d":
            found.append(Opp(nid, "DataParallel", dp_speedup(n) * f32(1.1), 2, 2048 * MiB, 0.08))
            found.append(Opp(nid, "ModelParallel", f32(2.0), 2, GiB, 0.12))
        elif n > 10:
            found.append(Opp(nid, "DataParallel", f32(1.5), 2, 512 * MiB, 0.1))
    depth = true_depth(ops, edges)
    if depth > 4:
        found.append(
            Opp(
                "pipeline_stages",
                "PipelineParallel",
                pipeline_speedup(depth),
                min(depth, 8),
                GiB,
                float(f32(0.05) * f32(depth)),
            )
        )
    found.sort(key=lambda o: -o.speedup)  # Rust's sort_by is stable, as is Python's sort
    seen: set[str] = set()
    return [o for o in found if not (o.node_id in seen or seen.add(o.node_id))]


def propose(
    ops: list[str], edges: list[tuple[int, int]], devices: int
) -> list[tuple[str, str, float]]:
    n = len(ops)
    out: list[tuple[str, str, float]] = []
    if n > 5:
        dp = min(max(n // 5, 2), 8)
        s = dp_speedup(n)
        out.append(
            (
                "DataParallel",
                f"Apply data parallelism across {dp} devices for {n} compute "
                f"nodes (estimated {s:.1f}x speedup)",
                s,
            )
        )
        if n > 20:
            out.append(
                (
                    "DataParallel",
                    "Use gradient compression (TopK or random) to reduce "
                    "all-reduce communication overhead",
                    f32(1.4),
                )
            )
    depth = true_depth(ops, edges)
    if depth > 4:
        s = pipeline_speedup(depth)
        out.append(
            (
                "PipelineParallel",
                f"Implement {min(depth, 8)}-stage pipeline parallelism "
                f"for depth-{depth} graph (estimated {s:.1f}x speedup)",
                s,
            )
        )
        if depth > 6:
            out.append(
                (
                    "PipelineParallel",
                    f"Use {depth * 2} micro-batches to reduce pipeline bubble overhead",
                    f32(1.3),
                )
            )
        if depth > 8:
            out.append(
                (
                    "PipelineParallel",
                    "Apply interleaved 1F1B schedule to reduce peak memory usage by 50%",
                    f32(1.2),
                )
            )
    matmuls = ops.count("MatMul")
    convs = ops.count("Conv2d")
    if matmuls > 0:
        s = tp_speedup(n)
        out.append(
            (
                "TensorParallel",
                f"Apply column-parallel tensor splitting to {matmuls} MatMul "
                f"operations (estimated {s:.1f}x speedup)",
                s,
            )
        )
    if convs > 0:
        out.append(
            (
                "TensorParallel",
                f"Apply channel-parallel splitting to {convs} Conv2d operations",
                f32(2.0),
            )
        )
    if matmuls > 10:
        out.append(
            (
                "TensorParallel",
                "Apply sequence parallelism for attention computation to reduce memory footprint",
                f32(1.8),
            )
        )
    if devices > 2:
        if devices >= 4:
            out.append(
                (
                    "CommunicationOptimization",
                    f"Use ring all-reduce pattern for {devices} "
                    "devices to achieve 2(n-1)/n bandwidth efficiency",
                    f32(1.5),
                )
            )
        if devices >= 8:
            out.append(
                (
                    "CommunicationOptimization",
                    "Apply hierarchical all-reduce (intra-node "
                    f"then inter-node) for {devices} devices",
                    f32(1.8),
                )
            )
        out.append(
            (
                "CommunicationOptimization",
                f"Overlap gradient all-reduce with backward computation for {devices} devices",
                f32(1.3),
            )
        )
        if devices > 4:
            out.append(
                (
                    "CommunicationOptimization",
                    "Enable NCCL tree algorithm for large tensor all-reduce operations",
                    f32(1.2),
                )
            )
    return out
