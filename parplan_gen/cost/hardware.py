"""Hardware: the cluster a plan runs on, and the cluster file that describes it.

Owns the `Cluster` value object, the hardware the cost model prices (a catalog GPU from
`cost.catalog`, how many, how they are grouped in nodes and NVLink domains and linked between
nodes), built from command-line flags (`cluster_from_flags`) or a cluster file. The cluster
invariant (whole nodes, or one partial node) is checked once, when a `Cluster` is built.

A cluster file (`ClusterFile`; `docs/clusters.md` documents its format) gives more than the
hardware: `load_cluster_file` parses it into a `ClusterSetup`, the hardware (`Cluster`), the
launch site (`launch_site.LaunchSettings`: node names, SLURM, the NCCL NICs and RoCE settings,
read by the renderer) and the budget inputs (`budget_figures.BudgetInputs`: price, MTBF,
storage, read by the training budget). `load_cluster` gives its hardware alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from parplan_gen.cost.budget_figures import (
    BUDGET_KEYS,
    BudgetInputs,
    GpuHourPrice,
    MtbfGpuHours,
    StorageGbPerS,
)
from parplan_gen.cost.catalog import (
    BITS_PER_BYTE,
    GIGA,
    GPU,
    GPU_RANGED_KEYS,
    Catalog,
    GPUFigures,
    SIModel,
    gpu_from_figures,
    load_catalog,
    lookup,
    nvlink_domain_of,
    nvlink_domain_problem,
    seconds,
    si,
)
from parplan_gen.cost.data_checks import RawData, check_ranges
from parplan_gen.cost.launch_site import (
    IFNAME_PATTERN,
    CpuCount,
    GidIndex,
    HcaName,
    LaunchSettings,
    NodeName,
    SlurmSpec,
    TrafficClass,
    with_slurm_flags,
)
from parplan_gen.cost.layout import MAX_GPUS, size_problem
from parplan_gen.cost.measured import MeasuredFigures, measured_figures, validate_measured
from parplan_gen.inputs.errors import InputError, SourceRef, UsageError, shown_value
from parplan_gen.inputs.source import (
    Document,
    is_finite_number,
    load_mapping_document,
)
from parplan_gen.inputs.validation import validate

FLAG_CLUSTER_NAME = "{gpus}x{gpu}"  # a cluster made from flags, e.g. 8xh100-sxm-80gb


def whole_nodes_problem(num_gpus: int, gpus_per_node: int) -> str | None:
    """Why `num_gpus` cannot be laid out on nodes of `gpus_per_node`, or None."""
    if num_gpus > MAX_GPUS:
        return f"num_gpus({shown_value(num_gpus)}) is above the limit of {MAX_GPUS} GPUs"
    if num_gpus > gpus_per_node and num_gpus % gpus_per_node:
        return f"num_gpus({num_gpus}) is not a multiple of gpus_per_node({gpus_per_node})"
    return None


class Cluster(SIModel):
    """The GPUs a plan runs on, as the cost model prices them: validated once here; nothing
    downstream re-checks the layout."""

    name: str
    gpu: GPU
    num_gpus: PositiveInt
    gpus_per_node: PositiveInt
    nvlink_domain: PositiveInt = Field(
        description="GPUs on one NVLink fabric, consecutive ranks: the node, or a multi-node "
        "NVLink domain (GB200 NVL72: 72)."
    )
    intra_node_latency_s: PositiveFloat = Field(description="Per-step latency inside a node, s.")
    inter_node_bytes_per_s: PositiveFloat = Field(description="Per GPU, one direction, B/s.")
    inter_node_latency_s: PositiveFloat = Field(description="Per-step latency between nodes, s.")
    network: str | None = Field(description="Catalog network, None when given as a bandwidth.")
    measured: MeasuredFigures | None = Field(
        None, description="From a cluster file's `measured:` section (`parplan profile`)."
    )
    host_memory_gb_per_node: PositiveFloat | None = Field(
        None,
        description="A node's host (CPU) memory, 1e9 bytes, from the cluster file; None: the "
        "GPU's reference system's (host_memory_per_gpu).",
    )

    @model_serializer(mode="wrap")
    def _without_unmeasured(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # plan.json names `measured` only for a cluster that was profiled, and the host memory
        # only where the cluster file gives it
        data = handler(self)
        optional = ("measured", "host_memory_gb_per_node")
        return {k: v for k, v in data.items() if k not in optional or v is not None}

    @property
    def host_memory_per_gpu(self) -> float:
        """Host memory per GPU, bytes: the cluster file's node over its GPUs, else the GPU's
        reference system's (catalog reference_node.host_memory_gb over its GPUs); 0 when
        neither gives one."""
        if self.host_memory_gb_per_node is not None:
            return self.host_memory_gb_per_node * GIGA / self.gpus_per_node
        ref = self.gpu.reference_node
        return 0.0 if ref.host_memory_gb is None else ref.host_memory_gb * GIGA / ref.gpus_per_node

    @model_validator(mode="after")
    def _whole_nodes(self) -> Cluster:
        problem = whole_nodes_problem(self.num_gpus, self.gpus_per_node) or nvlink_domain_problem(
            self.nvlink_domain, self.gpus_per_node, self.gpu.intra_node_link
        )
        if problem:
            raise ValueError(problem)
        return self

    @property
    def nvlink_gpus(self) -> int:
        # GPUs of this job that share one NVLink domain (a job smaller than a domain: all)
        return min(self.num_gpus, self.nvlink_domain)

    @property
    def num_nodes(self) -> int:
        # fewer GPUs than one node holds: a single partial node
        return max(1, self.num_gpus // self.gpus_per_node)

    @property
    def procs_per_node(self) -> int:
        # GPUs (ranks) used on each node: launchers' --nproc-per-node
        return min(self.num_gpus, self.gpus_per_node)

    @property
    def multi_node(self) -> bool:
        return self.num_nodes > 1

    @property
    def nvswitch(self) -> bool:
        return self.gpu.nvswitch

    @property
    def intra_node_bytes_per_s(self) -> float:
        # per GPU, one direction
        return self.gpu.intra_node_bytes_per_s


class ClusterSetup(BaseModel):
    """What a cluster file gives, in its three parts: the hardware the cost model prices, the
    launch site the renderer writes, and the training budget's inputs (each part None when the
    file gives none of it). The launch site's node names are checked against the hardware's
    node count once, here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: Cluster
    launch: LaunchSettings | None = None
    budget_inputs: BudgetInputs | None = None

    @model_validator(mode="after")
    def _names_fit(self) -> ClusterSetup:
        problem = None if self.launch is None else self.launch.names_problem(self.cluster.num_nodes)
        if problem:
            raise ValueError(problem)
        return self

    def with_slurm(self, **given: str | int | None) -> ClusterSetup:
        """A copy whose SLURM `account`, `partition`, `time` and `cpus_per_node` are replaced
        where given (the flags --slurm-account, --slurm-partition, --slurm-time,
        --cpus-per-node); a UsageError names a bad one, a TypeError an unknown keyword."""
        return self.model_copy(update={"launch": with_slurm_flags(self.launch, **given)})


class InterNodeSpec(RawData):
    """`inter_node:` in a cluster file: a catalog network, or a bandwidth per GPU."""

    network: str | None = Field(None, description="Catalog network name, e.g. `ndr`.")
    nics_per_node: PositiveInt | None = Field(
        None, le=MAX_GPUS, description="Default: one per GPU."
    )
    gbps_per_gpu: PositiveFloat | None = Field(None, description="Gb/s per GPU, one direction.")
    latency_us: PositiveFloat | None = Field(None, description="Default: the network's.")


class NcclSpec(RawData):
    """`nccl:` in a cluster file: settings later written to nccl.env."""

    ib_hcas: list[HcaName] | None = Field(None, min_length=1, description="NCCL_IB_HCA items.")
    socket_ifname: str | None = Field(None, pattern=IFNAME_PATTERN)
    ib_gid_index: GidIndex | None = Field(None, description="NCCL_IB_GID_INDEX (RoCE GID).")
    ib_tc: TrafficClass | None = Field(None, description="NCCL_IB_TC (traffic class).")


class ClusterFile(RawData):
    """A cluster file (YAML or JSON); `docs/clusters.md` documents every key."""

    name: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[^\r\n]+$")
    gpu: str = Field(description="Catalog GPU name or alias.")
    overrides: dict[str, Any] | None = Field(None, description="GPU figures, catalog units.")
    num_gpus: PositiveInt | None = None
    nodes: PositiveInt | None = Field(None, le=MAX_GPUS)
    gpus_per_node: PositiveInt | None = Field(
        None, le=MAX_GPUS, description="Default: the GPU's reference system (8 for most)."
    )
    nvlink_domain: PositiveInt | None = Field(
        None, le=MAX_GPUS, description="Default: the reference system's (GB200: 72), else the node."
    )
    inter_node: InterNodeSpec | None = None
    nccl: NcclSpec | None = None
    node_names: list[NodeName] | None = Field(None, min_length=1, max_length=MAX_GPUS)
    cpus_per_node: CpuCount | None = Field(None, description="CPUs SLURM counts per node.")
    slurm: SlurmSpec | None = None
    gpu_hour_price: GpuHourPrice | None = Field(None, description="Price of one GPU-hour.")
    mtbf_gpu_hours: MtbfGpuHours | None = Field(None, description="MTBF per GPU, GPU-hours.")
    storage_gb_per_s: StorageGbPerS | None = Field(None, description="Checkpoint write GB/s.")
    host_memory_gb_per_node: PositiveFloat | None = Field(
        None, description="A node's host (CPU) memory, 1e9 bytes."
    )
    measured: dict[str, Any] | None = Field(
        None, description="Curves measured by `parplan profile` (cost/measured.py)."
    )

    def launch_settings(self) -> LaunchSettings | None:
        """The launch site the file gives; None when it gives none."""
        slurm, nccl = self.slurm or SlurmSpec(), self.nccl or NcclSpec()
        settings = LaunchSettings(
            node_names=None if self.node_names is None else tuple(self.node_names),
            cpus_per_node=self.cpus_per_node,
            slurm_account=slurm.account,
            slurm_partition=slurm.partition,
            slurm_time=slurm.time,
            ib_hcas=None if nccl.ib_hcas is None else tuple(nccl.ib_hcas),
            socket_ifname=nccl.socket_ifname,
            ib_gid_index=nccl.ib_gid_index,
            ib_tc=nccl.ib_tc,
        )
        return None if settings.empty else settings

    def budget_inputs(self) -> BudgetInputs | None:
        """The budget inputs the file gives; None when it gives none."""
        inputs = BudgetInputs.model_validate(self.model_dump(include=set(BUDGET_KEYS)))
        return None if inputs.empty else inputs


def _inter_node(
    catalog: Catalog, gpu_: GPU, gpus_per_node: int, spec: InterNodeSpec
) -> tuple[float, float, str | None]:
    """(bytes/s per GPU one direction, latency s, network name) for an inter-node spec."""
    ref = gpu_.reference_node
    default = catalog.networks[ref.network]
    if spec.gbps_per_gpu is not None:
        latency = default.latency_s if spec.latency_us is None else seconds(spec.latency_us)
        return si(spec.gbps_per_gpu, GIGA / BITS_PER_BYTE), latency, None
    if spec.network is None:  # the GPU's reference system, as a share per GPU
        share = default.port_bytes_per_s * ref.nics_per_node / ref.gpus_per_node
        return share, default.latency_s, default.name
    net = catalog.network(spec.network)
    nics = gpus_per_node if spec.nics_per_node is None else spec.nics_per_node
    latency = net.latency_s if spec.latency_us is None else seconds(spec.latency_us)
    return net.port_bytes_per_s * nics / gpus_per_node, latency, net.name


def cluster_from_flags(
    gpus: int,
    gpu: str,
    gpus_per_node: int | None = None,
    inter_node_gbps: float | None = None,
    *,
    nvlink_domain: int | None = None,
    name: str | None = None,
) -> Cluster:
    """`--gpus N --gpu NAME [--gpus-per-node G] [--nvlink-domain D] [--inter-node-gbps X]` (X:
    Gb/s per GPU; G and D default to the GPU's reference system; docs/clusters.md). The SLURM
    flags are the launch site's: `ClusterSetup(cluster=...).with_slurm(...)`."""
    catalog = load_catalog()
    gpu_ = catalog.gpus[lookup("GPU", gpu, catalog.gpu_names, SourceRef("--gpu"))]
    ref = gpu_.reference_node
    gpus_per_node = ref.gpus_per_node if gpus_per_node is None else gpus_per_node
    for flag, value in (
        ("--gpus", gpus),
        ("--gpus-per-node", gpus_per_node),
        ("--nvlink-domain", nvlink_domain),
    ):
        problem = None if value is None else size_problem("gpus", value)
        if problem:
            raise UsageError(f"{flag}: {problem}")
    problem = whole_nodes_problem(gpus, gpus_per_node)
    if problem:
        raise UsageError(f"--gpus/--gpus-per-node: {problem}")
    domain = nvlink_domain_of(gpu_, gpus_per_node, nvlink_domain)
    problem = nvlink_domain_problem(domain, gpus_per_node, gpu_.intra_node_link)
    if problem:
        raise UsageError(f"--nvlink-domain/--gpus-per-node: {problem}")
    if inter_node_gbps is not None:
        if not is_finite_number(inter_node_gbps):
            raise UsageError(
                f"--inter-node-gbps: expected a number, got {shown_value(inter_node_gbps)}"
            )
        problem = catalog.ranges["gbps_per_gpu"].problem(inter_node_gbps)
        if problem:
            raise UsageError(f"--inter-node-gbps: {problem}")
    spec = InterNodeSpec(gbps_per_gpu=None if inter_node_gbps is None else float(inter_node_gbps))
    name = name or FLAG_CLUSTER_NAME.format(gpus=gpus, gpu=gpu_.name)
    return _build(catalog, name, gpu_, (gpus, gpus_per_node, domain), spec)


def _build(
    catalog: Catalog, name: str, gpu_: GPU, sizes: tuple[int, int, int], inter: InterNodeSpec
) -> Cluster:
    num_gpus, gpus_per_node, nvlink_domain = sizes  # GPUs, per node, per NVLink domain
    bandwidth, latency, net = _inter_node(catalog, gpu_, gpus_per_node, inter)
    return Cluster(
        name=name,
        gpu=gpu_,
        num_gpus=num_gpus,
        gpus_per_node=gpus_per_node,
        nvlink_domain=nvlink_domain,
        intra_node_latency_s=catalog.link_latency_s[gpu_.intra_node_link],
        inter_node_bytes_per_s=bandwidth,
        inter_node_latency_s=latency,
        network=net,
    )


def load_cluster(path: str | Path) -> Cluster:
    """A cluster file's hardware (`load_cluster_file` gives its launch site and budget inputs
    too); every mistake is an InputError at `file:line:col`."""
    return load_cluster_file(path).cluster


def load_cluster_file(path: str | Path) -> ClusterSetup:
    """Read a cluster file into its hardware, launch site and budget inputs; every mistake is
    an InputError at `file:line:col`."""
    doc = load_mapping_document(path, "a cluster file is a mapping of keys")
    spec = validate(ClusterFile, doc.data, doc)
    catalog = load_catalog()
    gpu_name = lookup("GPU", spec.gpu, catalog.gpu_names, doc.ref(("gpu",)))
    base = catalog.gpu_specs[gpu_name]
    figures: GPUFigures = base
    if spec.overrides:
        merged = {**base.model_dump(include=set(GPUFigures.model_fields)), **spec.overrides}
        figures = validate(GPUFigures, merged, doc, ("overrides",))
        given = figures.model_dump(include=set(spec.overrides) & set(GPU_RANGED_KEYS))
        check_ranges(catalog.ranges, given, doc, ("overrides",))
    try:
        gpu_ = gpu_from_figures(gpu_name, base, figures)
    except ValidationError as exc:  # a positive figure that rounds to 0 bytes or 0 FLOP/s
        message = exc.errors(include_url=False)[0]["msg"]
        where = doc.ref(("overrides",))
        raise InputError(f"overrides give an impossible GPU: {message}", where) from None

    gpn = base.reference_node.gpus_per_node if spec.gpus_per_node is None else spec.gpus_per_node
    nodes = spec.nodes
    if spec.num_gpus is None and nodes is None:
        if spec.node_names is None:
            raise InputError("give num_gpus or nodes (nodes of gpus_per_node GPUs)", doc.ref())
        nodes = len(spec.node_names)  # one node per name
    num_gpus = spec.num_gpus if spec.num_gpus is not None else (nodes or 0) * gpn
    if spec.nodes is not None and num_gpus != spec.nodes * gpn:
        message = f"num_gpus({num_gpus}) != nodes({spec.nodes}) * gpus_per_node({gpn})"
        raise InputError(message, doc.ref(("num_gpus",)))
    problem = whole_nodes_problem(num_gpus, gpn)
    if problem:
        raise InputError(problem, doc.ref(("num_gpus",)))

    domain = nvlink_domain_of(gpu_, gpn, spec.nvlink_domain)
    problem = nvlink_domain_problem(domain, gpn, gpu_.intra_node_link)
    if problem:
        key = "nvlink_domain" if spec.nvlink_domain is not None else "gpus_per_node"
        raise InputError(problem, doc.ref((key,) if key in doc.data else ()))

    if spec.inter_node is not None:
        _check_inter_node(doc, spec.inter_node, catalog, gpn)
    launch = spec.launch_settings()
    if launch is not None:
        problem = launch.names_problem(max(1, num_gpus // gpn))
        if problem:
            raise InputError(problem, doc.ref(("node_names",)))
    name = spec.name or Path(path).stem
    inter = spec.inter_node or InterNodeSpec()
    cluster = _build(catalog, name, gpu_, (num_gpus, gpn, domain), inter)
    if spec.host_memory_gb_per_node is not None:
        host = spec.host_memory_gb_per_node
        problem = catalog.ranges["host_memory_gb"].problem(host)
        if problem:
            raise InputError(problem, doc.ref(("host_memory_gb_per_node",)))
        cluster = cluster.model_copy(update={"host_memory_gb_per_node": host})
    if spec.measured is not None:
        measured = validate_measured(doc.data["measured"], doc)
        found = measured_figures(measured, lambda p: _peak_or_none(gpu_, p), gpn)
        cluster = cluster.model_copy(update={"measured": found})
    return ClusterSetup(cluster=cluster, launch=launch, budget_inputs=spec.budget_inputs())


def _peak_or_none(gpu: GPU, precision: str) -> float | None:
    """The dense peak of `gpu` at `precision`, None when it has no such mode."""
    try:
        return gpu.peak_flops(precision)  # type: ignore[arg-type]
    except InputError:
        return None


def _check_inter_node(doc: Document, inter: InterNodeSpec, catalog: Catalog, gpn: int) -> None:
    figures = {"gbps_per_gpu": inter.gbps_per_gpu, "latency_us": inter.latency_us}
    check_ranges(catalog.ranges, figures, doc, ("inter_node",))
    where = doc.ref(("inter_node",))
    if (inter.network is None) == (inter.gbps_per_gpu is None):
        raise InputError("give either network (with nics_per_node) or gbps_per_gpu", where)
    if inter.nics_per_node is not None and inter.network is None:
        where = doc.ref(("inter_node", "nics_per_node"))
        raise InputError("nics_per_node goes with network, not with gbps_per_gpu", where)
    if inter.network is not None:
        where = doc.ref(("inter_node", "network"))
        net = catalog.networks[lookup("network", inter.network, catalog.network_names, where)]
        if inter.nics_per_node is not None:  # the ports' bandwidth, shared by a node's GPUs
            port = net.port_bytes_per_s * BITS_PER_BYTE / GIGA
            problem = catalog.ranges["gbps_per_gpu"].problem(port * inter.nics_per_node / gpn)
            if problem:
                where = doc.ref(("inter_node", "nics_per_node"))
                share = (
                    f"nics_per_node({inter.nics_per_node}) x {port:g} Gb/s / gpus_per_node({gpn})"
                )
                raise InputError(f"{share}: {problem}", where)
