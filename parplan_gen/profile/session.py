"""One profile run, from the options to the `measured:` section: load torch and check the
device (one-line refusal otherwise), name the catalog GPU (before measuring anything), run the
GEMM, attention and memory sweeps on this process's device, then the collective sweep over the
ranks there are (torchrun's; for a CPU run alone, local gloo processes it starts), all within
the budget, and gather the curves with their provenance.

Every rank runs the sweeps (its own device, under torchrun); rank 0's figures are the run's, and
only rank 0 has a file to write (`ProfileRun.writes`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from parplan_gen.cost.measured import COLLECTIVES, Collectives, GemmCurves, Measured, Provenance
from parplan_gen.profile.attention import attention_points
from parplan_gen.profile.bandwidth import bandwidth_points
from parplan_gen.profile.budget import Budget, Progress
from parplan_gen.profile.collectives import collective_points
from parplan_gen.profile.context_memory import SWEEP as OUTSIDE_ALLOCATOR
from parplan_gen.profile.context_memory import outside_allocator
from parplan_gen.profile.gemm import gemm_points
from parplan_gen.profile.gpu_name import catalog_gpu
from parplan_gen.profile.launch import torchrun_commands
from parplan_gen.profile.moe_host import SWEEP as MOE_HOST
from parplan_gen.profile.moe_host import moe_host
from parplan_gen.profile.options import ProfileOptions
from parplan_gen.profile.points import Results, measure_points
from parplan_gen.profile.provenance import started_at, versions
from parplan_gen.profile.ranks import BACKENDS, Launch, Ranks, join, torchrun_launch
from parplan_gen.profile.runtime import (
    Device,
    MeasurementError,
    cpu_threads,
    load_torch,
    reason_of,
    require_device,
)
from parplan_gen.profile.spawned import local_ranks
from parplan_gen.profile.sweeps import sweeps
from parplan_gen.profile.writer import cluster_document, cluster_yaml, header


@dataclass(frozen=True)
class ProfileRun:
    """What a profile measured, the cluster it describes (`gpu`: a catalog name), and what to
    tell the user."""

    measured: Measured
    gpu: str
    num_gpus: int
    gpus_per_node: int
    writes: bool  # rank 0: the process that writes the file
    torchrun: tuple[str, ...]  # commands that measure the collectives too (several GPUs)

    def document(self) -> dict[str, Any]:
        return cluster_document(self.gpu, self.num_gpus, self.gpus_per_node, self.measured)

    def text(self) -> str:
        """The cluster file, as YAML."""
        return cluster_yaml(self.document(), header(self.measured, self.gpu))


def run_profile(
    options: ProfileOptions,
    *,
    out: str | None = None,
    environ: Mapping[str, str] | None = None,
    announce: Callable[[tuple[str, ...], int], None] | None = None,
) -> ProfileRun:
    """Run the profile `options` ask for. `out` (the file it will be written to) only goes into
    the torchrun commands; `announce(commands, gpus)` is told them before the sweeps start when
    this process runs alone on a machine of several GPUs (it measures no collective)."""
    # --gpu is checked before torch loads (seconds); the device's own name only after
    named = options.gpu is not None or options.device == "cpu"
    gpu = catalog_gpu(options.gpu, None) if named else None
    torch = load_torch()
    require_device(torch, options.device)
    launch = torchrun_launch(os.environ if environ is None else environ)
    index = launch.local_rank if launch is not None and options.device == "cuda" else 0
    if options.device == "cuda":
        torch.cuda.set_device(index)
    device = Device(torch, options.device, index)
    gpu = gpu or catalog_gpu(None, device.name)
    num_gpus, per_node = _sizes(device, launch, options.level.spawn_ranks)
    several = launch is None and device.cuda and per_node > 1
    commands = tuple(torchrun_commands(options, out, per_node)) if several else ()
    if commands and announce is not None:
        announce(commands, per_node)
    date = started_at()
    budget = Budget(options.budget, sweeps().budget_shares)
    results, ranked = _sweep(device, options, launch, budget)
    provenance = Provenance(
        gpu_name=device.name,
        **versions(device),
        date=date,
        device=options.device,
        quick=options.quick,
        budget_s=options.budget,
        stopped_early=budget.stopped_early,
    )
    return ProfileRun(
        measured=_measured(provenance, results, BACKENDS[options.device] if ranked else None),
        gpu=gpu,
        num_gpus=num_gpus,
        gpus_per_node=per_node,
        writes=launch is None or launch.rank == 0,
        torchrun=commands,
    )


def _sweep(
    device: Device, options: ProfileOptions, launch: Launch | None, budget: Budget
) -> tuple[Results, bool]:
    """The points measured (and skipped), and whether the collectives ran over several ranks."""
    data, level = sweeps(), options.level
    results = Results()
    timeout_s = max(level.collectives.timeout_s, options.budget)
    with ExitStack() as stack:
        stack.enter_context(cpu_threads(device.torch, level.threads))
        spawned = None
        if launch is None and level.spawn_ranks is not None:
            spawned = stack.enter_context(
                local_ranks(
                    device.torch, level.spawn_ranks, options.level_name, options.budget, timeout_s
                )
            )
        points = gemm_points(device, level, data, results)
        points += attention_points(device, level, data)
        points += bandwidth_points(device, level, data)
        rank = 0 if launch is None else launch.rank
        progress = Progress(len(points), budget, shown=None if rank == 0 else False)
        measure_points(points, device, budget, progress, results)
        # before any process group: no NCCL buffer in the device's memory yet
        _record(results, OUTSIDE_ALLOCATOR, outside_allocator(device))
        _record(results, MOE_HOST, moe_host(device, data.moe_host))
        among = launch if spawned is None else spawned.launch
        if among is None or among.world < 2:
            results.skip("collectives", _why_no_collectives(device, launch))
            progress.close()
            return results, False
        init = None if spawned is None else spawned.init_method
        try:
            with _joined(device, among, timeout_s, init) as ranks:
                mine = collective_points(device, level, data, ranks)
                progress.total += len(mine)
                measure_points(mine, device, budget, progress, results, agree=ranks.agree)
        except RuntimeError as exc:  # torch.distributed's errors (DistBackendError...) are
            raise MeasurementError(f"collectives: {reason_of(exc)}") from None
        finally:
            progress.close()
    return results, True


def _record(results: Results, sweep: str, found: BaseModel | str | None) -> None:
    """A one-figure measurement (context_memory.py, moe_host.py): its figure, the reason it was
    skipped (str), or nothing where the device has none to measure (None)."""
    if isinstance(found, str):
        results.skip(sweep, found)
    elif found is not None:
        results.curves[sweep] = [found]


@contextmanager
def _joined(device: Device, launch: Launch, timeout_s: float, init: str | None) -> Iterator[Ranks]:
    ranks = join(device, launch, timeout_s, init)
    try:
        yield ranks
    finally:
        ranks.close()


def _why_no_collectives(device: Device, launch: Launch | None) -> str:
    if launch is not None:
        return "torchrun started one process: a collective needs two ranks or more"
    count = int(device.torch.cuda.device_count()) if device.cuda else 1
    if count > 1:
        return f"{count} GPUs, one process: run the torchrun command shown to measure them"
    return "one GPU: no collective to measure"


def _sizes(device: Device, launch: Launch | None, spawned: int | None) -> tuple[int, int]:
    """(num_gpus, gpus_per_node) of the cluster measured."""
    if launch is not None:
        return launch.world, launch.local_world
    if spawned is not None:
        return spawned, spawned
    count = int(device.torch.cuda.device_count()) if device.cuda else 1
    return count, count


def _measured(provenance: Provenance, results: Results, backend: str | None) -> Measured:
    curves = results.curves
    memory = curves.get("memory")
    outside = curves.get(OUTSIDE_ALLOCATOR)
    host = curves.get(MOE_HOST)
    gemm = {p: curves.get(f"gemm.{p}", []) for p in ("bf16", "fp8")}
    collectives = None
    if backend is not None:
        by_op = {op: curves.get(f"collectives.{op}", []) for op in COLLECTIVES}
        collectives = Collectives.model_validate({"backend": backend, **by_op})
    return Measured.model_validate(
        {
            "provenance": provenance,
            "gemm": GemmCurves.model_validate(gemm),
            "attention": curves.get("attention", []),
            "memory_bandwidth": memory[0] if memory else None,
            "outside_allocator": outside[0] if outside else None,
            "moe_host": host[0] if host else None,
            "collectives": collectives,
            "skipped": results.skipped,
        }
    )
