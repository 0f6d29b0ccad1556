"""The device memory a process uses outside PyTorch's caching allocator: the CUDA context with
the kernels loaded into it so far. Read after the compute sweeps (cuBLAS and attention kernels
loaded) and before any process group (no NCCL buffer yet) as the device's memory in use
(`torch.cuda.mem_get_info`: total - free) less what the allocator holds
(`torch.cuda.memory_reserved`). The device's figure counts every process on it: a profile runs
one process per GPU."""

from __future__ import annotations

from parplan_gen.cost.measured import OutsideAllocator
from parplan_gen.profile.runtime import Device, reason_of

SWEEP = "outside_allocator"


def outside_allocator(device: Device) -> OutsideAllocator | str | None:
    """What this process holds outside the allocator; a reason (str) where a GPU's cannot be
    read; None on a CPU, which has no such memory to measure."""
    if not device.cuda:
        return None
    torch = device.torch
    device.synchronize()
    try:  # a virtual GPU or an old ROCm may not report its free memory
        free, total = torch.cuda.mem_get_info(device.index)
        reserved = torch.cuda.memory_reserved(device.index)
    except (RuntimeError, AttributeError) as exc:
        return f"the device's memory in use cannot be read ({reason_of(exc)})"
    outside = int(total) - int(free) - int(reserved)
    if outside <= 0:
        return f"the device reports {outside} B in use outside the caching allocator"
    return OutsideAllocator(context_bytes=outside)
