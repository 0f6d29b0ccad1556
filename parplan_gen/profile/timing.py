"""Timing one operation on one device: warm-up calls, then timed rounds, the median kept.

On a GPU a round is timed by CUDA events around its calls (the GPU's own clock, no host
launch gaps once the queue is full); on a CPU by `time.perf_counter`. A round makes as many
calls as fill `min_repetition_s` (at least one), so that a kernel of microseconds is timed over
many launches; the time is per call.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

from parplan_gen.profile.runtime import Device
from parplan_gen.profile.sweeps import Timing

MS_PER_S = 1000  # CUDA events measure milliseconds


def median_time_s(device: Device, call: Callable[[], object], timing: Timing) -> float:
    """The median time of one `call`, s."""
    for _ in range(timing.warmup):
        call()
    device.synchronize()
    start = time.perf_counter()
    call()
    device.synchronize()
    once = time.perf_counter() - start
    calls = max(1, math.ceil(timing.min_repetition_s / once)) if once > 0 else 1
    rounds = [_round_s(device, call, calls) / calls for _ in range(timing.repetitions)]
    return statistics.median(rounds)


def _round_s(device: Device, call: Callable[[], object], calls: int) -> float:
    if device.cuda:
        cuda = device.torch.cuda
        begin, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(calls):
            call()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / MS_PER_S
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return time.perf_counter() - start
