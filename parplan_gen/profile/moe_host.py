"""The host's time per kernel launch of a Megatron MoE layer's experts (rules/cost/moe.yaml
moe_host_exposed_s; efficiency.yaml host_launch_s), measured where Transformer Engine is
installed: its GroupedLinear, the layer Megatron-Core's TEGroupedMLP runs, forward and backward
in BF16 at two expert counts (profile_sweeps.yaml `moe_host`). With a few tokens an expert the
GPU runs each GEMM in microseconds and the host paces: the host's wall time of a pass, with no
synchronization inside the timed loop, is what it spends launching. The difference between the
two counts over the launches the extra experts add is the time per launch, free of what a pass
costs whatever its experts (the loss, autograd's start)."""

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
    try:
        te = importlib.import_module(TE_MODULE)
    except ImportError:
        return (
            "Transformer Engine is not installed: MoE layers are priced with the fitted "
            "host_launch_fit_s (rules/cost/efficiency.yaml)"
        )
    try:
        times = [_pass_s(device, te, experts, passes) for experts in passes.experts]
    except device.point_failures() as exc:
        return f"Transformer Engine's GroupedLinear did not run ({reason_of(exc)})"
    added = (passes.experts[1] - passes.experts[0]) * passes.launches_per_expert
    launch_s = (times[1] - times[0]) / added
    if launch_s <= 0:
        return (
            f"the host's time did not grow with the experts ({times[0]:.6f} s at "
            f"{passes.experts[0]}, {times[1]:.6f} s at {passes.experts[1]})"
        )
    version = str(getattr(importlib.import_module("transformer_engine"), "__version__", "?"))
    return MoeHost(
        launch_s=launch_s,
        experts=list(passes.experts),
        pass_s=times,
        transformer_engine=version,
    )


def _pass_s(device: Device, te: Any, experts: int, passes: MoeHostPasses) -> float:
    """The host's wall time of one forward and backward pass over `experts` experts, s."""
    torch = device.torch
    where, dtype = device.handle(), device.dtype("bfloat16")
    layer = te.GroupedLinear(
        experts, passes.width, passes.width, bias=False, params_dtype=dtype, device=where
    )
    rows = experts * passes.tokens_per_expert
    tokens = torch.randn(rows, passes.width, device=where, dtype=dtype, requires_grad=True)
    splits = [passes.tokens_per_expert] * experts

    def once() -> None:
        layer(tokens, splits).sum().backward()

    for _ in range(passes.warmup):
        once()
    device.synchronize()
    start = time.perf_counter()
    for _ in range(passes.passes):
        once()
    host_s = (time.perf_counter() - start) / passes.passes
    device.synchronize()
    device.free()
    return host_s
