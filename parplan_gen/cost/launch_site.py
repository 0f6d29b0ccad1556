"""What a cluster's site needs for a launch: node names, CPUs, SLURM account / partition / time
limit, the NICs and interface NCCL uses and its RoCE settings (`LaunchSettings`: a cluster
file's `ClusterSetup.launch`, plan.json's `launch`).

None of it changes the cost model (`Cluster` is the hardware alone); the renderer writes it into
launch_slurm.sbatch, the hostfile and nccl.env. Every text is checked against a character set
that no shell, sbatch directive or DeepSpeed hostfile reads as anything but a name, so a
cluster file or a flag cannot smuggle a command into them (the renderer checks again:
render/shell_quote.py). Sources:
- sbatch(1) (https://slurm.schedmd.com/sbatch.html): `-A/--account`, `-p/--partition` (a comma
  separated list of partitions), `-t/--time` (its accepted formats, below), `--cpus-per-task`;
- NVIDIA NCCL env.html (templates/nccl/nccl_env.yaml): NCCL_IB_GID_INDEX (int, min -1,
  default -1), NCCL_IB_TC (int 0..255, default 0);
- rdma-core libibverbs/verbs.h `struct ibv_global_route`: `uint8_t sgid_index`, where NCCL puts
  NCCL_IB_GID_INDEX (src/transport/net_ib: `ah_attr.grh.sgid_index`), so at most 255;
- RFC 1123 section 2.1 for host names (letters, digits, hyphens, dot-separated labels), and
  RFC 4343 section 2: host names compare case-insensitively (`node1` and `NODE1` are one host).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parplan_gen.cost.data_checks import RawData
from parplan_gen.cost.layout import MAX_GPUS
from parplan_gen.inputs.errors import UsageError, shown_value

# A host name (RFC 1123 labels; `_` too, as some sites name nodes so): never starts with `-`,
# which a launcher would read as an option.
NODE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$"
NODE_NAME_MAX = 253  # RFC 1123 / RFC 1035: a host name holds at most 253 characters
SHOWN_REPEATS = 5  # repeated node names an error lists (the rest are counted): one short line
# A SLURM account (`--account`) or partition name: letters, digits, `_`, `.`, `-`.
SLURM_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
SLURM_ACCOUNT_PATTERN = rf"^{SLURM_NAME}$"
SLURM_PARTITION_PATTERN = rf"^{SLURM_NAME}(,{SLURM_NAME})*$"  # sbatch -p takes a list
SLURM_NAME_MAX = 200
# sbatch -t: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
# "days-hours:minutes" and "days-hours:minutes:seconds". ASCII digits: `\d` would also take
# '١٢' or '１２' (pydantic's regex engine and Python's `re` read it as any Unicode digit).
SLURM_TIME_PATTERN = r"^([0-9]{1,6}(:[0-9]{1,2}){0,2}|[0-9]{1,4}-[0-9]{1,2}(:[0-9]{1,2}){0,2})$"
# NCCL env.html (nccl_env.yaml): NCCL_IB_GID_INDEX int, min -1 (NCCL reads it as an int64_t,
# src/include/param.h NCCL_PARAM); NCCL_IB_TC int 0..255. The GID index becomes the
# `uint8_t sgid_index` of rdma-core's `struct ibv_global_route` (libibverbs/verbs.h), so an
# index above 255 names no GID of any port: it is refused, not wrapped.
NCCL_GID_INDEX_MIN, NCCL_GID_INDEX_MAX = -1, 255
NCCL_TC_MIN, NCCL_TC_MAX = 0, 255
# sbatch --cpus-per-task is a uint16_t in Slurm (slurm/slurm.h, job_desc_msg_t.cpus_per_task),
# whose top two values are reserved (slurm.h NO_VAL16 0xfffe, INFINITE16 0xffff): a node's CPUs
# (cluster file `cpus_per_node`, `--cpus-per-node`) are a whole number from 1 to 0xfffd.
SLURM_CPUS_MAX = 0xFFFD

HCA_PATTERN = r"^[\^=]{0,2}[A-Za-z0-9_.:\-]+$"  # NCCL_IB_HCA item: mlx5_0, mlx5_0:1, ^mlx5_1
IFNAME_PATTERN = r"^[\^=]{0,2}[A-Za-z0-9_.:\-]+(,[A-Za-z0-9_.:\-]+)*$"  # NCCL_SOCKET_IFNAME

NodeName = Annotated[str, Field(pattern=NODE_NAME_PATTERN, max_length=NODE_NAME_MAX)]
HcaName = Annotated[str, Field(pattern=HCA_PATTERN)]
InterfaceNames = Annotated[str, Field(pattern=IFNAME_PATTERN)]
SlurmAccount = Annotated[str, Field(pattern=SLURM_ACCOUNT_PATTERN, max_length=SLURM_NAME_MAX)]
SlurmPartition = Annotated[str, Field(pattern=SLURM_PARTITION_PATTERN, max_length=SLURM_NAME_MAX)]
SlurmTime = Annotated[str, Field(pattern=SLURM_TIME_PATTERN)]
# strict, as CpuCount: `true` or "3" is no index or class, in a cluster file, Python or plan.json
GidIndex = Annotated[int, Field(strict=True, ge=NCCL_GID_INDEX_MIN, le=NCCL_GID_INDEX_MAX)]
TrafficClass = Annotated[int, Field(strict=True, ge=NCCL_TC_MIN, le=NCCL_TC_MAX)]
# strict: 96.0, "96" and True are not a count of CPUs
CpuCount = Annotated[int, Field(strict=True, gt=0, le=SLURM_CPUS_MAX)]
# each SLURM setting: its flag, and what it takes (shown when a flag's value is refused)
SLURM_FLAGS = {
    "account": ("--slurm-account", "a name of letters, digits, _ . - (not first . or -)"),
    "partition": ("--slurm-partition", "partition names (letters, digits, _ . -), comma-separated"),
    "time": ("--slurm-time", "MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"),
    "cpus_per_node": ("--cpus-per-node", f"a whole number from 1 to {SLURM_CPUS_MAX}"),
}


def repeated_names(names: Sequence[str]) -> str | None:
    """Which host names repeat, compared without case (RFC 4343: `node1` and `NODE1` are one
    host), or None. One pass with a dict: 2^20 names take milliseconds."""
    first: dict[str, str] = {}
    repeated: dict[str, list[str]] = {}
    for name in names:
        key = name.lower()  # host names are ASCII (NODE_NAME_PATTERN): lower() is their case
        if key in first:
            repeated.setdefault(key, [first[key]]).append(name)
        else:
            first[key] = name
    if not repeated:
        return None
    spelled = [list(dict.fromkeys(spellings)) for spellings in repeated.values()]
    shown = ", ".join(" = ".join(s) for s in spelled[:SHOWN_REPEATS])
    more = f" and {len(spelled) - SHOWN_REPEATS} more" if len(spelled) > SHOWN_REPEATS else ""
    cased = any(len(s) > 1 for s in spelled)
    note = " (host names are case-insensitive, RFC 4343)" if cased else ""
    return f"node_names repeats {shown}{more}{note}"


class SlurmSpec(RawData):
    """`slurm:` in a cluster file: what sbatch needs to accept the job at this site."""

    account: SlurmAccount | None = Field(None, description="sbatch --account.")
    partition: SlurmPartition | None = Field(None, description="sbatch --partition.")
    time: SlurmTime | None = Field(None, description="sbatch --time, e.g. 2-00:00:00.")


class LaunchSettings(BaseModel):
    """A cluster's launch site (a cluster file's node names, CPUs, `slurm:` and `nccl:`; the
    SLURM flags); every field None when not given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_names: tuple[NodeName, ...] | None = Field(
        None, min_length=1, max_length=MAX_GPUS, description="One per node, in rank order."
    )
    cpus_per_node: CpuCount | None = Field(None, description="CPUs SLURM counts per node.")
    slurm_account: SlurmAccount | None = None
    slurm_partition: SlurmPartition | None = None
    slurm_time: SlurmTime | None = None
    ib_hcas: tuple[HcaName, ...] | None = Field(None, min_length=1, description="NCCL_IB_HCA.")
    socket_ifname: InterfaceNames | None = Field(None, description="NCCL_SOCKET_IFNAME.")
    ib_gid_index: GidIndex | None = Field(None, description="NCCL_IB_GID_INDEX (RoCE).")
    ib_tc: TrafficClass | None = Field(None, description="NCCL_IB_TC (traffic class).")

    def names_problem(self, num_nodes: int) -> str | None:
        """Why `node_names` does not name `num_nodes` distinct nodes, or None."""
        names = self.node_names
        if names is None:
            return None
        if len(names) != num_nodes:
            return f"{len(names)} node_names for a cluster of {num_nodes} node(s)"
        return repeated_names(names)

    def with_slurm(self, **given: str | int | None) -> LaunchSettings:
        """A copy with the SLURM settings that are given (account, partition, time,
        cpus_per_node) replaced."""
        fields = type(self).model_fields
        update = {k if k in fields else f"slurm_{k}": v for k, v in given.items() if v is not None}
        return LaunchSettings.model_validate(self.model_dump() | update)

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())


def with_slurm_flags(
    launch: LaunchSettings | None, **given: str | int | None
) -> LaunchSettings | None:
    """`launch` with the SLURM `account`, `partition`, `time` and `cpus_per_node` replaced where
    given (the flags --slurm-account, --slurm-partition, --slurm-time, --cpus-per-node); a
    UsageError names a bad one, a TypeError an unknown keyword."""
    unknown = sorted(set(given) - set(SLURM_FLAGS))
    if unknown:
        raise TypeError(f"with_slurm() got unexpected keyword arguments {unknown}")
    if all(v is None for v in given.values()):
        return launch
    try:
        return (launch or LaunchSettings()).with_slurm(**given)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        flag, takes = SLURM_FLAGS[str(error["loc"][0]).removeprefix("slurm_")]
        raise UsageError(f"{flag}: expected {takes}, got {shown_value(error['input'])}") from None
