"""The memory bandwidth: one large device-to-device copy (`dst.copy_(src)`, bytes), far larger
than any cache; bytes moved = `copy_bytes_per_byte` (a read and a write, as STREAM's Copy
counts) x the bytes copied."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parplan_gen.cost.catalog import GIGA
from parplan_gen.cost.measured import MemoryBandwidth, rate, significant
from parplan_gen.profile.points import Point
from parplan_gen.profile.runtime import Device
from parplan_gen.profile.sweeps import Level, SweepFile
from parplan_gen.profile.timing import median_time_s

SWEEP = "memory"


def bandwidth_points(device: Device, level: Level, data: SweepFile) -> list[Point]:
    size = level.memory.copy_bytes
    return [Point(SWEEP, SWEEP, f"memory copy {size} B", _measure(device, level, data))]


def _measure(device: Device, level: Level, data: SweepFile) -> Callable[[], MemoryBandwidth]:
    def measure() -> MemoryBandwidth:
        torch, where = device.torch, device.handle()
        size = level.memory.copy_bytes
        src = torch.ones(size, device=where, dtype=torch.uint8)
        dst = torch.empty(size, device=where, dtype=torch.uint8)

        def copy() -> Any:
            return dst.copy_(src)

        time_s = significant(median_time_s(device, copy, level.timing))
        moved = data.conventions.copy_bytes_per_byte * size
        return MemoryBandwidth(bytes=moved, time_s=time_s, gb_per_s=rate(moved, time_s, GIGA))

    return measure
