"""Local ranks for a CPU profile run without torchrun: this process is rank 0 and starts the
others (`spawn_ranks` of the cpu level, torch.multiprocessing with the spawn method), which only
take part in the collective sweep over gloo; they meet through a file store in a folder of
their own. The others start first, so that loading torch in them overlaps rank 0's own sweeps;
they wait for rank 0 in the rendezvous, and are ended when rank 0 leaves the block, whatever
happened in it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parplan_gen.profile.budget import Budget, Progress
from parplan_gen.profile.collectives import collective_points
from parplan_gen.profile.points import Results, measure_points
from parplan_gen.profile.ranks import Launch, join
from parplan_gen.profile.runtime import Device, load_torch
from parplan_gen.profile.sweeps import LevelName, sweeps

STORE_FILE = "store"


@dataclass(frozen=True)
class LocalRanks:
    """What rank 0 needs to join the others: the launch and the store's address."""

    launch: Launch
    init_method: str


@contextmanager
def local_ranks(
    torch: Any, count: int, level: LevelName, budget_s: float, timeout_s: float
) -> Iterator[LocalRanks]:
    """Start ranks 1..count-1 of a local CPU run; end them when the block is left."""
    folder = Path(tempfile.mkdtemp(prefix="parplan-profile-"))
    init_method = (folder / STORE_FILE).as_uri()
    context = torch.multiprocessing.get_context("spawn")
    others = [
        context.Process(
            target=run_rank,
            args=(rank, count, init_method, level, budget_s, timeout_s),
            daemon=True,
        )
        for rank in range(1, count)
    ]
    try:
        for process in others:
            process.start()
        yield LocalRanks(Launch(0, count, 0, count), init_method)
    finally:
        # past the block, rank 0 has all it needs (the last collective was every rank's):
        # the others are ended rather than waited for while they unload torch
        for process in others:
            if process.is_alive():
                process.terminate()
            process.join()
        shutil.rmtree(folder, ignore_errors=True)


def run_rank(
    rank: int, count: int, init_method: str, level: LevelName, budget_s: float, timeout_s: float
) -> None:
    """One of the other ranks: the collective sweep, as rank 0 decides (its figures are rank
    0's to record)."""
    device = Device(load_torch(), "cpu")
    data = sweeps()
    threads = data.levels[level].threads
    if threads is not None:
        device.torch.set_num_threads(threads)
    ranks = join(device, Launch(rank, count, rank, count), timeout_s, init_method)
    try:
        points = collective_points(device, data.levels[level], data, ranks)
        budget = Budget(budget_s, data.budget_shares)
        progress = Progress(len(points), budget, shown=False)
        measure_points(points, device, budget, progress, Results(), agree=ranks.agree)
    finally:
        ranks.close()
