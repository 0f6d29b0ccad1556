"""The GEMM sweep: (m x k) @ (k x n) by tokens m for the layer shapes (n, k) of the level, in
BF16 (`torch.mm`) and, where the device multiplies FP8, in FP8 (`torch._scaled_mm`, per-tensor
scales, BF16 out). The weight is laid out as nn.Linear keeps it (n x k, used transposed).
FLOPs: `gemm_flops_per_mnk` x m n k (profile_sweeps.yaml `conventions`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parplan_gen.cost.catalog import TERA
from parplan_gen.cost.measured import GemmPoint, rate, significant
from parplan_gen.profile.points import Point, Results
from parplan_gen.profile.runtime import Device, reason_of
from parplan_gen.profile.sweeps import Level, SweepFile
from parplan_gen.profile.timing import median_time_s

SWEEP = "gemm"


def gemm_points(device: Device, level: Level, data: SweepFile, results: Results) -> list[Point]:
    """The points of the GEMM sweep; an FP8 sweep the device cannot run is recorded skipped."""
    dtypes = [("bf16", device.dtype(data.dtypes.bf16))]
    fp8, reason = fp8_dtype(device, data.dtypes.fp8, data.dtypes.fp8_probe_size)
    if fp8 is None:
        results.skip(f"{SWEEP}.fp8", reason)
    else:
        dtypes.append(("fp8", fp8))
    return [
        Point(
            SWEEP,
            f"{SWEEP}.{precision}",
            f"gemm {precision} m={m} n={shape.n} k={shape.k}",
            _measure(device, level, data, dtype, precision == "fp8", (m, shape.n, shape.k)),
        )
        for precision, dtype in dtypes
        for shape in level.gemm.shapes
        for m in level.gemm.m.values()
    ]


def fp8_dtype(device: Device, names: list[str], size: int) -> tuple[Any, str]:
    """The first FP8 type of `names` that torch._scaled_mm multiplies on the device (tried on
    `size` x `size` operands), or None and why none does."""
    torch = device.torch
    if not hasattr(torch, "_scaled_mm"):
        return None, f"torch {torch.__version__} has no torch._scaled_mm"
    reasons = []
    for name in names:
        dtype = device.dtype(name)
        if dtype is None:
            reasons.append(f"torch {torch.__version__} has no {name}")
            continue
        try:
            _scaled_mm_call(device, dtype, size, size, size)()
            device.synchronize()
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            reasons.append(f"{name}: {reason_of(exc)}")
            continue
        return dtype, ""
    return None, "; ".join(reasons)


def _scaled_mm_call(device: Device, dtype: Any, m: int, n: int, k: int) -> Callable[[], Any]:
    torch, where = device.torch, device.handle()
    a = torch.randn(m, k, device=where).to(dtype)
    b = torch.randn(n, k, device=where).to(dtype).t()  # column-major k x n, as cuBLASLt wants
    scale = torch.ones((), device=where, dtype=torch.float32)
    out = torch.bfloat16

    def call() -> Any:
        return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=out)

    return call


def _mm_call(device: Device, dtype: Any, m: int, n: int, k: int) -> Callable[[], Any]:
    torch, where = device.torch, device.handle()
    a = torch.randn(m, k, device=where, dtype=dtype)
    b = torch.randn(n, k, device=where, dtype=dtype).t()
    out = torch.empty(m, n, device=where, dtype=dtype)

    def call() -> Any:
        return torch.mm(a, b, out=out)

    return call


def _measure(
    device: Device, level: Level, data: SweepFile, dtype: Any, fp8: bool, mnk: tuple[int, int, int]
) -> Callable[[], GemmPoint]:
    def measure() -> GemmPoint:
        m, n, k = mnk
        make = _scaled_mm_call if fp8 else _mm_call
        call = make(device, dtype, m, n, k)
        time_s = significant(median_time_s(device, call, level.timing))
        flops = data.conventions.gemm_flops_per_mnk * m * n * k
        return GemmPoint(
            m=m, n=n, k=k, flops=flops, time_s=time_s, tflops=rate(flops, time_s, TERA)
        )

    return measure
