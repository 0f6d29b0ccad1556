"""The ranks of the collective sweep: how this process was started (torchrun's environment, or
alone), the process group it joins (nccl on GPUs, gloo on CPUs), the groups the collectives
run over with their span, and rank 0's word on whether the next point starts.

The span of a group is `node` when all its ranks are on one host (torchrun's LOCAL_WORLD_SIZE
is its WORLD_SIZE), else `cross-node`; across nodes, each node's own ranks are measured too
(span `node`), so the file has both curves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from parplan_gen.cost.measured import Span
from parplan_gen.inputs.errors import UsageError
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.profile.runtime import Device

# torchrun's environment (torch/distributed/run.py): this process's rank and the counts.
TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
# The largest rank count read from the environment: far beyond any job, it bounds the number.
MAX_RANKS = 1 << 20
BACKENDS = {"cuda": "nccl", "cpu": "gloo"}


@dataclass(frozen=True)
class Launch:
    """This process among the ranks: its rank and local rank, the counts in all and per host."""

    rank: int
    world: int
    local_rank: int
    local_world: int

    @property
    def span(self) -> Span:
        # all ranks on this host: torchrun starts LOCAL_WORLD_SIZE of them per node
        return "node" if self.local_world == self.world else "cross-node"


def torchrun_launch(environ: Mapping[str, str]) -> Launch | None:
    """The launch torchrun's environment describes; None when not under torchrun (no
    WORLD_SIZE)."""
    if "WORLD_SIZE" not in environ:
        return None
    values = {}
    for key in TORCHRUN_KEYS:
        text = environ.get(key, "0" if key.endswith("RANK") else environ["WORLD_SIZE"])
        try:
            values[key] = whole_number(text, MAX_RANKS, 0)
        except ValueError as exc:
            raise UsageError(f"{key} (from torchrun): {exc}") from None
    world, local_world = values["WORLD_SIZE"], values["LOCAL_WORLD_SIZE"]
    if not values["RANK"] < world or not values["LOCAL_RANK"] < local_world <= world:
        shown = ", ".join(f"{k}={values[k]}" for k in TORCHRUN_KEYS)
        raise UsageError(f"torchrun's environment does not add up: {shown}")
    return Launch(values["RANK"], world, values["LOCAL_RANK"], local_world)


@dataclass(frozen=True)
class Group:
    """A group the collectives run over: torch's handle (None: all ranks), size, span."""

    handle: Any
    ranks: int
    span: Span


class Ranks:
    """This process in the collective sweep's process group."""

    def __init__(self, device: Device, launch: Launch, groups: list[Group]) -> None:
        self.device = device
        self.dist = device.torch.distributed
        self.rank = launch.rank
        self.groups = groups

    def agree(self, allowed: bool) -> bool:
        """Rank 0's `allowed`, on every rank: all ranks run the same points."""
        torch = self.device.torch
        flag = torch.tensor([int(allowed)], dtype=torch.int32, device=self.device.handle())
        self.dist.broadcast(flag, src=0)
        return bool(flag.item())

    def group_rank(self, group: Group) -> int:
        return int(self.dist.get_rank(group.handle))

    def global_rank(self, group: Group, group_rank: int) -> int:
        """The rank in all ranks of `group`'s rank `group_rank`."""
        if group.handle is None:
            return group_rank
        return int(self.dist.get_global_rank(group.handle, group_rank))

    def close(self) -> None:
        self.dist.destroy_process_group()


def join(device: Device, launch: Launch, timeout_s: float, init_method: str | None = None) -> Ranks:
    """Join the process group (torchrun's environment, or `init_method` for local processes)
    and make the groups the collectives run over."""
    dist = device.torch.distributed
    options: dict[str, Any] = {
        "backend": BACKENDS[device.kind],
        "timeout": timedelta(seconds=timeout_s),
    }
    if init_method is not None:
        options.update(init_method=init_method, rank=launch.rank, world_size=launch.world)
    dist.init_process_group(**options)
    groups = [Group(None, launch.world, launch.span)]
    if (
        launch.span == "cross-node"
        and launch.local_world > 1
        and launch.world % launch.local_world == 0
    ):
        node, _ = dist.new_subgroups(group_size=launch.local_world)
        groups.append(Group(node, launch.local_world, "node"))
    return Ranks(device, launch, groups)
