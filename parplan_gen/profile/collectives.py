"""The collective sweep, through torch.distributed, as nccl-tests measures (profile_sweeps.yaml
[NCCL-TESTS]): all_reduce, all_gather (into one tensor), reduce_scatter (from one tensor),
all_to_all (single tensor) and send_recv (each rank sends to the next and receives from the
previous, at once), by size S, for each group of ranks (`ranks.Group`).

S is nccl-tests' size: the buffer of all_reduce and all_to_all, the whole gathered output of
all_gather, the whole input of reduce_scatter, one rank's message of send_recv (rounded down to
whole elements, split evenly over the ranks). A point is warm-up operations, then rounds of
operations back to back, each round's time per operation; the median round is averaged over the
ranks. Algorithm bandwidth = S / time; bus bandwidth = algorithm bandwidth x nccl-tests' factor
for the operation and rank count (`bus_bandwidth` in profile_sweeps.yaml).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from parplan_gen.cost.catalog import GIGA
from parplan_gen.cost.measured import COLLECTIVES, CollectivePoint, rate, significant
from parplan_gen.profile.points import Point
from parplan_gen.profile.ranks import Group, Ranks
from parplan_gen.profile.runtime import Device
from parplan_gen.profile.sweeps import CollectiveTiming, Level, SweepFile

SWEEP = "collectives"
SHARDED = frozenset({"all_gather", "reduce_scatter", "all_to_all"})  # S splits over the ranks


def collective_points(device: Device, level: Level, data: SweepFile, ranks: Ranks) -> list[Point]:
    """The points of the collective sweep; every rank builds the same list, in the same order."""
    dtype = device.dtype(data.dtypes.collectives)
    element = device.torch.tensor([], dtype=dtype).element_size()
    points = []
    for group in ranks.groups:
        for op in COLLECTIVES:
            for size in level.collectives.bytes.values():
                count = size // element
                if op in SHARDED:
                    count -= count % group.ranks
                if count == 0:
                    continue
                points.append(
                    Point(
                        SWEEP,
                        f"{SWEEP}.{op}",
                        f"{op} {count * element} B, {group.ranks} ranks ({group.span})",
                        _measure(device, level, data, ranks, group, op, (count, dtype, element)),
                    )
                )
    return points


def _measure(
    device: Device,
    level: Level,
    data: SweepFile,
    ranks: Ranks,
    group: Group,
    op: str,
    buffer: tuple[int, Any, int],
) -> Callable[[], CollectivePoint]:
    def measure() -> CollectivePoint:
        count, dtype, element = buffer
        call = _operation(device, ranks, group, op, count, dtype)
        time_s = significant(_time_s(device, ranks, group, call, level.collectives.timing))
        size = count * element
        algbw = rate(size, time_s, GIGA)
        factor = data.bus_bandwidth.factors[op].factor(group.ranks)
        return CollectivePoint(
            bytes=size,
            ranks=group.ranks,
            span=group.span,
            time_s=time_s,
            alg_gb_per_s=algbw,
            bus_gb_per_s=significant(algbw * factor),
        )

    return measure


def _operation(
    device: Device, ranks: Ranks, group: Group, op: str, count: int, dtype: Any
) -> Callable[[], Any]:
    torch, dist, g = device.torch, ranks.dist, group.handle
    where = device.handle()

    def buffer(elements: int) -> Any:
        return torch.zeros(elements, dtype=dtype, device=where)

    if op == "all_reduce":
        whole = buffer(count)
        return lambda: dist.all_reduce(whole, group=g)
    if op == "all_gather":  # torch 2.13 names it all_gather_single
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        out, mine = buffer(count), buffer(count // group.ranks)
        return lambda: gather(out, mine, group=g)
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        mine, whole = buffer(count // group.ranks), buffer(count)
        return lambda: scatter(mine, whole, group=g)
    if op == "all_to_all":
        out, whole = buffer(count), buffer(count)
        return lambda: dist.all_to_all_single(out, whole, group=g)
    me = ranks.group_rank(group)
    after = ranks.global_rank(group, (me + 1) % group.ranks)
    before = ranks.global_rank(group, (me - 1) % group.ranks)
    sent, received = buffer(count), buffer(count)

    def send_recv() -> None:
        pair = [dist.P2POp(dist.isend, sent, after, g), dist.P2POp(dist.irecv, received, before, g)]
        for work in dist.batch_isend_irecv(pair):
            work.wait()

    return send_recv


def _time_s(
    device: Device, ranks: Ranks, group: Group, call: Callable[[], Any], timing: CollectiveTiming
) -> float:
    """Seconds per operation: the median round on this rank, averaged over the group's ranks."""
    torch, dist = device.torch, ranks.dist
    for _ in range(timing.warmup):
        call()
    rounds = []
    for _ in range(timing.repetitions):
        _line_up(device, ranks, group)
        start = time.perf_counter()
        for _ in range(timing.iterations):
            call()
        device.synchronize()
        rounds.append((time.perf_counter() - start) / timing.iterations)
    mine = torch.tensor([statistics.median(rounds)], dtype=torch.float64, device=device.handle())
    dist.all_reduce(mine, group=group.handle)
    return float(mine.item()) / group.ranks


def _line_up(device: Device, ranks: Ranks, group: Group) -> None:
    """Every rank of `group` starts the round together (a one-element all_reduce, waited on)."""
    torch = device.torch
    token = torch.zeros(1, dtype=torch.float32, device=device.handle())
    ranks.dist.all_reduce(token, group=group.handle)
    device.synchronize()
