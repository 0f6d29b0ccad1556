"""The host's time per kernel launch of Transformer Engine's grouped expert layer, recorded
where TE is installed (cluster file `measured.moe_host`; the formula name
cluster.measured_host_launch_s): its GroupedLinear, the layer Megatron-Core's TEGroupedMLP
runs, forward and backward in BF16 at two expert counts (profile_sweeps.yaml `moe_host`). With
a few tokens an expert the GPU runs each GEMM in microseconds and the host paces: the host's
wall time of a pass, with no synchronization inside the timed loop, is what it spends
launching. The difference between the two counts over the launches the extra experts add is
the time per launch, free of what a pass costs whatever its experts (the loss, autograd's
start). The gradients are taken with torch.autograd.grad, so no weight's .grad accumulates
(Megatron accumulates into main_grad inside the wgrad GEMM: no launch of its own). A pass the
GPU paced instead (its wall time with the final synchronization well above the host's) is
skipped, not recorded."""

from __future__ import annotations

import importlib
import time
from typing import Any

from parplan_gen.cost.measured import MoeHost
from parplan_gen.profile.runtime import Device, reason_of
from parplan_gen.profile.sweeps import MoeHostPasses

SWEEP = "moe_host"
TE_MODULE = "transformer_engine.pytorch"


def moe_host(device: Device, passes: MoeHostPasses) -> MoeHost | str | None:
    """The host's time per launch; a reason (str) where it cannot be measured on this GPU;
    None on a CPU, which launches no kernels."""
    if not device.cuda:
        return None
    try:  # TE's import also fails with OSError, RuntimeError or AssertionError (its libraries)
        te = importlib.import_module(TE_MODULE)
        version = str(getattr(importlib.import_module("transformer_engine"), "__version__", "?"))
    except Exception as exc:  # noqa: BLE001 - any failure to load TE only skips this figure
        return f"Transformer Engine cannot be loaded ({reason_of(exc)})"
    failures: tuple[type[BaseException], ...] = (
        *device.point_failures(),
        ValueError,
        TypeError,
        AssertionError,
    )
    try:
        timed = [_pass_s(device, te, experts, passes) for experts in passes.experts]
    except failures as exc:
        return f"Transformer Engine's GroupedLinear did not run ({reason_of(exc)})"
    for experts, (host_s, wall_s) in zip(passes.experts, timed, strict=True):
        if wall_s > passes.gpu_paced_ratio * host_s:
            return (
                f"the GPU, not the host, paced the passes at {experts} experts ({wall_s:.6f} s a "
                f"pass with the synchronization, {host_s:.6f} s on the host)"
            )
    times = [host_s for host_s, _ in timed]
    added = (passes.experts[1] - passes.experts[0]) * passes.launches_per_expert
    launch_s = (times[1] - times[0]) / added
    if launch_s <= 0:
        return (
            f"the host's time did not grow with the experts ({times[0]:.6f} s at "
            f"{passes.experts[0]}, {times[1]:.6f} s at {passes.experts[1]})"
        )
    return MoeHost(
        launch_s=launch_s, experts=list(passes.experts), pass_s=times, transformer_engine=version
    )


def _pass_s(device: Device, te: Any, experts: int, passes: MoeHostPasses) -> tuple[float, float]:
    """(host, synchronized wall) time of one forward and backward pass over `experts` experts, s."""
    torch = device.torch
    where, dtype = device.handle(), device.dtype("bfloat16")
    layer = te.GroupedLinear(
        experts, passes.width, passes.width, bias=False, params_dtype=dtype, device=where
    )
    rows = experts * passes.tokens_per_expert
    tokens = torch.randn(rows, passes.width, device=where, dtype=dtype, requires_grad=True)
    wrt = [tokens, *layer.parameters()]
    splits = [passes.tokens_per_expert] * experts

    def once() -> None:
        torch.autograd.grad(layer(tokens, splits).sum(), wrt)

    for _ in range(passes.warmup):
        once()
    device.synchronize()
    start = time.perf_counter()
    for _ in range(passes.passes):
        once()
    host_s = (time.perf_counter() - start) / passes.passes
    device.synchronize()
    wall_s = (time.perf_counter() - start) / passes.passes
    device.free()
    return host_s, wall_s
