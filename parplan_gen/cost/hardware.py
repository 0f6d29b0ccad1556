"""Hardware: the GPU and network catalog, and the cluster a plan runs on.

Owns the catalog shipped in `parplan_gen/data/` (`gpus.yaml`, `networks.yaml`: every figure with
its source, units in the key names), the conversion of those figures to SI (bytes, FLOP/s,
bytes/s in one direction, seconds), and the `Cluster` value object, built from a cluster file
(`load_cluster`) or from command-line flags (`cluster_from_flags`). The cluster invariant (whole
nodes, or one partial node) is checked once, when a `Cluster` is built. `docs/clusters.md`
documents the cluster file format and the catalog.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from parplan_gen.cost.layout import MAX_GPUS, size_problem
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import InputError, SourceRef, UsageError, did_you_mean, shown_value
from parplan_gen.inputs.source import (
    Document,
    KeyPath,
    is_finite_number,
    load_document,
    parse_document,
)
from parplan_gen.inputs.validation import validate

# Unit definitions (not figures: every figure lives in the YAML with its source).
TERA = 1e12
GIGA = 1e9
BITS_PER_BYTE = 8
NANOS_PER_MICRO = 1000
NANOS_PER_S = 10**9
DIRECTIONS = 2  # vendors add both directions of a link ("bidirectional" bandwidth)

DEFAULT_GPUS_PER_NODE = 8  # the documented CLI default (`--gpus-per-node 8`)

Vendor = Literal["nvidia", "amd"]
Architecture = Literal["volta", "ampere", "ada", "hopper", "blackwell", "cdna3"]
FormFactor = Literal["sxm", "pcie", "oam"]
LinkKind = Literal["nvlink", "xgmi", "pcie"]
NetworkKind = Literal["infiniband", "roce", "ethernet"]
Precision = Literal["bf16", "fp16", "fp8"]

HCA_PATTERN = r"^[\^=]{0,2}[A-Za-z0-9_.:\-]+$"  # NCCL_IB_HCA item: mlx5_0, mlx5_0:1, ^mlx5_1
IFNAME_PATTERN = r"^[\^=]{0,2}[A-Za-z0-9_.:\-]+(,[A-Za-z0-9_.:\-]+)*$"  # NCCL_SOCKET_IFNAME
HcaName = Annotated[str, Field(pattern=HCA_PATTERN)]


class _Raw(BaseModel):
    """Data as written in YAML: strict types, no unknown keys, no NaN/inf."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class GPUFigures(_Raw):
    """A GPU's figures in catalog units; a cluster file's `overrides:` may set any of them."""

    memory_gib: PositiveFloat = Field(description="GPU memory, GiB (2**30 bytes).")
    bf16_dense_tflops: PositiveFloat | None = Field(description="Dense BF16 peak, 1e12 FLOP/s.")
    fp16_dense_tflops: PositiveFloat | None = Field(description="Dense FP16 peak, 1e12 FLOP/s.")
    fp8_dense_tflops: PositiveFloat | None = Field(description="Dense FP8 peak, 1e12 FLOP/s.")
    memory_bandwidth_tb_per_s: PositiveFloat = Field(description="Memory bandwidth, 1e12 B/s.")
    intra_node_link: LinkKind = Field(description="How GPUs of one node talk to each other.")
    intra_node_gb_per_s_bidirectional: PositiveFloat = Field(
        description="GPU-to-GPU bandwidth per GPU in a node, both directions added, 1e9 B/s."
    )
    nvswitch: bool = Field(description="The node's GPUs meet in an NVSwitch (NVLS possible).")


class ReferenceNode(_Raw):
    """The vendor system whose scale-out network is a GPU's default inter-node network."""

    system: str
    network: str
    nics_per_node: PositiveInt
    gpus_per_node: PositiveInt


class _Sourced(_Raw):
    sources: dict[str, str] = Field(description="Figure key -> where the figure comes from.")
    unverified: list[str] = Field([], description="Figures not re-checked against a primary.")


class CatalogGPU(GPUFigures, _Sourced):
    display_name: str
    vendor: Vendor
    architecture: Architecture
    form_factor: FormFactor
    aliases: list[str] = []
    reference_node: ReferenceNode


class CatalogNetwork(_Sourced):
    display_name: str
    kind: NetworkKind
    aliases: list[str] = []
    gbps_per_port: PositiveFloat
    latency_us: PositiveFloat


class CatalogLink(_Sourced):
    display_name: str
    latency_us: PositiveFloat


class FigureRange(_Raw):
    """The physical range of one figure (`ranges:` in the data files), in catalog units."""

    min: PositiveFloat
    max: PositiveFloat
    source: str = Field(min_length=1, description="Where the ends come from.")


class _GPUFile(_Raw):
    ranges: dict[str, FigureRange]
    gpus: dict[str, CatalogGPU]


class _Links(_Raw):
    nvlink: CatalogLink
    xgmi: CatalogLink
    pcie: CatalogLink


class _NetworkFile(_Raw):
    ranges: dict[str, FigureRange]
    networks: dict[str, CatalogNetwork]
    intra_node_links: _Links


GPU_FIGURE_KEYS = (*GPUFigures.model_fields, "reference_node")
NETWORK_FIGURE_KEYS = ("gbps_per_port", "latency_us")
LINK_FIGURE_KEYS = ("latency_us",)
# Figures with a physical range, by data file: every number a GPU, network, link or cluster has.
GPU_RANGED_KEYS = (
    "memory_gib", "bf16_dense_tflops", "fp16_dense_tflops", "fp8_dense_tflops",
    "memory_bandwidth_tb_per_s", "intra_node_gb_per_s_bidirectional",
)  # fmt: skip
NETWORK_RANGED_KEYS = ("gbps_per_port", "gbps_per_gpu", "latency_us")


@dataclass(frozen=True)
class Bounds:
    """A figure's physical range and the data file entry that gives it (with its source)."""

    low: float
    high: float
    origin: str  # `parplan_gen/data/gpus.yaml ranges.memory_gib`

    def problem(self, value: float) -> str | None:
        """Why `value` is not a physical value of the figure, or None."""
        if self.low <= value <= self.high:
            return None
        return (
            f"{shown_value(value)} is outside the physical range {self.low:g} to {self.high:g} "
            f"({self.origin})"
        )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GPU(_Model):
    """One GPU in SI units (dense peaks; bandwidths in one direction)."""

    name: str = Field(description="Catalog name, e.g. `h100-sxm-80gb`.")
    display_name: str
    vendor: Vendor
    architecture: Architecture
    form_factor: FormFactor
    memory_bytes: PositiveInt
    bf16_flops: PositiveFloat | None = Field(description="Dense BF16 peak, FLOP/s; None: none.")
    fp16_flops: PositiveFloat | None = Field(description="Dense FP16 peak, FLOP/s; None: none.")
    fp8_flops: PositiveFloat | None = Field(description="Dense FP8 peak, FLOP/s; None: none.")
    memory_bandwidth_bytes_per_s: PositiveFloat
    intra_node_link: LinkKind
    intra_node_bytes_per_s: PositiveFloat = Field(description="Per GPU, one direction, B/s.")
    nvswitch: bool
    reference_node: ReferenceNode

    def peak_flops(self, precision: Precision) -> float:
        """Dense peak FLOP/s for `precision`; an InputError when the GPU has no such mode."""
        peak = {"bf16": self.bf16_flops, "fp16": self.fp16_flops, "fp8": self.fp8_flops}[precision]
        if peak is None:
            have = [p for p in ("bf16", "fp16", "fp8") if getattr(self, f"{p}_flops") is not None]
            raise InputError(
                f"{self.name} has no {precision} tensor-core peak (it has: {', '.join(have)})"
            )
        return peak


class Network(_Model):
    """An inter-node network (one NIC port) in SI units."""

    name: str
    display_name: str
    kind: NetworkKind
    port_bytes_per_s: PositiveFloat = Field(description="One port, one direction, B/s.")
    latency_s: PositiveFloat = Field(description="Per-step latency of a collective, s.")


def whole_nodes_problem(num_gpus: int, gpus_per_node: int) -> str | None:
    """Why `num_gpus` cannot be laid out on nodes of `gpus_per_node`, or None."""
    if num_gpus > MAX_GPUS:
        return f"num_gpus({shown_value(num_gpus)}) is above the limit of {MAX_GPUS} GPUs"
    if num_gpus > gpus_per_node and num_gpus % gpus_per_node:
        return f"num_gpus({num_gpus}) is not a multiple of gpus_per_node({gpus_per_node})"
    return None


class Cluster(_Model):
    """The GPUs a plan runs on: validated once here; nothing downstream re-checks the layout."""

    name: str
    gpu: GPU
    num_gpus: PositiveInt
    gpus_per_node: PositiveInt
    intra_node_latency_s: PositiveFloat = Field(description="Per-step latency inside a node, s.")
    inter_node_bytes_per_s: PositiveFloat = Field(description="Per GPU, one direction, B/s.")
    inter_node_latency_s: PositiveFloat = Field(description="Per-step latency between nodes, s.")
    network: str | None = Field(description="Catalog network, None when given as a bandwidth.")
    ib_hcas: tuple[str, ...] | None = Field(None, description="For NCCL_IB_HCA.")
    socket_ifname: str | None = Field(None, description="For NCCL_SOCKET_IFNAME.")

    @model_validator(mode="after")
    def _whole_nodes(self) -> Cluster:
        problem = whole_nodes_problem(self.num_gpus, self.gpus_per_node)
        if problem:
            raise ValueError(problem)
        return self

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


@dataclass(frozen=True)
class Catalog:
    """The loaded catalog: SI models by canonical name, plus the raw entries and alias maps."""

    gpus: dict[str, GPU]
    gpu_specs: dict[str, CatalogGPU]
    networks: dict[str, Network]
    link_latency_s: dict[str, float]  # intra-node link kind -> per-step latency, s
    gpu_names: dict[str, str]  # normalized name or alias -> canonical name
    network_names: dict[str, str]
    ranges: dict[str, Bounds]  # figure key -> its physical range, catalog units

    def gpu(self, name: str) -> GPU:
        return self.gpus[_lookup("GPU", name, self.gpu_names)]

    def network(self, name: str) -> Network:
        return self.networks[_lookup("network", name, self.network_names)]


def _read_data(filename: str) -> Document:
    path = resources.files("parplan_gen").joinpath("data").joinpath(filename)
    return parse_document(path.read_text(encoding="utf-8"), f"parplan_gen/data/{filename}")


def _check_sources(doc: Document, path: KeyPath, entry: _Sourced, keys: tuple[str, ...]) -> None:
    """Every figure names a source; `sources` and `unverified` name only figures."""
    for key in keys:
        if not entry.sources.get(key, "").strip():
            raise InputError(f"figure '{key}' names no source", doc.ref((*path, "sources")))
    for group, named in (("sources", list(entry.sources)), ("unverified", entry.unverified)):
        for key in named:
            if key not in keys:
                where = doc.ref((*path, group))
                raise InputError(f"'{key}' is not a figure (figures: {', '.join(keys)})", where)


def _alias_map(doc: Document, section: str, entries: dict[str, Any]) -> dict[str, str]:
    names: dict[str, str] = {}
    for name, entry in entries.items():
        for alias in (name, *entry.aliases):
            key = _normalize(alias)
            if names.setdefault(key, name) != name:
                raise InputError(f"name '{alias}' is used twice", doc.ref((section, name)))
    return names


def _si(value: float, unit: float) -> float:
    """`value` in `unit` as a whole number of SI units (no float noise: 2.039 TB/s -> 2.039e12)."""
    return float(round(value * unit))


def _seconds(microseconds: float) -> float:
    """Microseconds to seconds, via whole nanoseconds (5.7 us -> exactly 5.7e-6)."""
    return round(microseconds * NANOS_PER_MICRO) / NANOS_PER_S


def gpu_from_figures(name: str, spec: CatalogGPU, figures: GPUFigures) -> GPU:
    """Convert catalog-unit figures to a `GPU` in SI units."""

    def tera(value: float | None) -> float | None:
        return None if value is None else _si(value, TERA)

    return GPU(
        name=name,
        display_name=spec.display_name,
        vendor=spec.vendor,
        architecture=spec.architecture,
        form_factor=spec.form_factor,
        memory_bytes=round(figures.memory_gib * GIB),
        bf16_flops=tera(figures.bf16_dense_tflops),
        fp16_flops=tera(figures.fp16_dense_tflops),
        fp8_flops=tera(figures.fp8_dense_tflops),
        memory_bandwidth_bytes_per_s=_si(figures.memory_bandwidth_tb_per_s, TERA),
        intra_node_link=figures.intra_node_link,
        intra_node_bytes_per_s=_si(figures.intra_node_gb_per_s_bidirectional, GIGA / DIRECTIONS),
        nvswitch=figures.nvswitch,
        reference_node=spec.reference_node,
    )


def _ranges(
    doc: Document, ranges: dict[str, FigureRange], keys: tuple[str, ...]
) -> dict[str, Bounds]:
    """The `ranges:` of a data file, which must give exactly `keys`, each with min <= max."""
    missing, unknown = sorted(set(keys) - set(ranges)), sorted(set(ranges) - set(keys))
    if missing or unknown:
        raise InputError(
            f"ranges must give exactly {', '.join(keys)} (missing: {', '.join(missing) or '-'}; "
            f"unknown: {', '.join(unknown) or '-'})",
            doc.ref(("ranges",)),
        )
    bounds = {}
    for key, r in ranges.items():
        if r.min > r.max:
            raise InputError(f"min({r.min:g}) > max({r.max:g})", doc.ref(("ranges", key)))
        bounds[key] = Bounds(r.min, r.max, f"{doc.name} ranges.{key}")
    return bounds


def _check_ranges(
    ranges: Mapping[str, Bounds], figures: Mapping[str, float | None], doc: Document, path: KeyPath
) -> None:
    """An InputError at `path.key` in `doc` for the first of `figures` (key -> value in catalog
    units; None: not given) outside its physical range."""
    for key, value in figures.items():
        problem = None if value is None else ranges[key].problem(value)
        if problem:
            raise InputError(problem, doc.ref((*path, key)))


@cache
def load_catalog() -> Catalog:
    """Read the shipped catalog (once per process), checking every figure has a source and lies
    in its physical range."""
    gdoc, ndoc = _read_data("gpus.yaml"), _read_data("networks.yaml")
    gfile = validate(_GPUFile, gdoc.data, gdoc)
    nfile = validate(_NetworkFile, ndoc.data, ndoc)
    ranges = _ranges(gdoc, gfile.ranges, GPU_RANGED_KEYS)
    ranges |= _ranges(ndoc, nfile.ranges, NETWORK_RANGED_KEYS)
    networks: dict[str, Network] = {}
    for name, net in nfile.networks.items():
        _check_sources(ndoc, ("networks", name), net, NETWORK_FIGURE_KEYS)
        figures = net.model_dump(include=set(NETWORK_FIGURE_KEYS))
        _check_ranges(ranges, figures, ndoc, ("networks", name))
        networks[name] = Network(
            name=name,
            display_name=net.display_name,
            kind=net.kind,
            port_bytes_per_s=_si(net.gbps_per_port, GIGA / BITS_PER_BYTE),
            latency_s=_seconds(net.latency_us),
        )
    link_latency: dict[str, float] = {}
    for kind in _Links.model_fields:
        link: CatalogLink = getattr(nfile.intra_node_links, kind)
        _check_sources(ndoc, ("intra_node_links", kind), link, LINK_FIGURE_KEYS)
        _check_ranges(ranges, {"latency_us": link.latency_us}, ndoc, ("intra_node_links", kind))
        link_latency[kind] = _seconds(link.latency_us)
    gpus: dict[str, GPU] = {}
    for name, spec in gfile.gpus.items():
        _check_sources(gdoc, ("gpus", name), spec, GPU_FIGURE_KEYS)
        figures = spec.model_dump(include=set(GPU_RANGED_KEYS))
        _check_ranges(ranges, figures, gdoc, ("gpus", name))
        if spec.reference_node.network not in networks:
            where = gdoc.ref(("gpus", name, "reference_node", "network"))
            raise InputError(f"unknown network '{spec.reference_node.network}'", where)
        gpus[name] = gpu_from_figures(name, spec, spec)
    return Catalog(
        gpus=gpus,
        gpu_specs=dict(gfile.gpus),
        networks=networks,
        link_latency_s=link_latency,
        gpu_names=_alias_map(gdoc, "gpus", gfile.gpus),
        network_names=_alias_map(ndoc, "networks", nfile.networks),
        ranges=ranges,
    )


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _lookup(kind: str, name: str, names: dict[str, str], where: SourceRef | None = None) -> str:
    """The canonical name for `name` (case-insensitive, aliases allowed), or an InputError."""
    key = _normalize(name)
    if key in names:
        return names[key]
    known = ", ".join(sorted(set(names.values())))
    hint = did_you_mean(key, names)
    raise InputError(f"unknown {kind} {shown_value(name)}{hint} (known: {known})", where)


def gpu(name: str) -> GPU:
    """The catalog GPU called `name` or one of its aliases (case-insensitive)."""
    return load_catalog().gpu(name)


class InterNodeSpec(_Raw):
    """`inter_node:` in a cluster file: a catalog network, or a bandwidth per GPU."""

    network: str | None = Field(None, description="Catalog network name, e.g. `ndr`.")
    nics_per_node: PositiveInt | None = Field(
        None, le=MAX_GPUS, description="Default: one per GPU."
    )
    gbps_per_gpu: PositiveFloat | None = Field(None, description="Gb/s per GPU, one direction.")
    latency_us: PositiveFloat | None = Field(None, description="Default: the network's.")


class NcclSpec(_Raw):
    """`nccl:` in a cluster file: settings later written to nccl.env."""

    ib_hcas: list[HcaName] | None = Field(None, min_length=1, description="NCCL_IB_HCA items.")
    socket_ifname: str | None = Field(None, pattern=IFNAME_PATTERN)


class ClusterFile(_Raw):
    """A cluster file (YAML or JSON); `docs/clusters.md` documents every key."""

    name: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[^\r\n]+$")
    gpu: str = Field(description="Catalog GPU name or alias.")
    overrides: dict[str, Any] | None = Field(None, description="GPU figures, catalog units.")
    num_gpus: PositiveInt | None = None
    nodes: PositiveInt | None = Field(None, le=MAX_GPUS)
    gpus_per_node: PositiveInt = Field(DEFAULT_GPUS_PER_NODE, le=MAX_GPUS)
    inter_node: InterNodeSpec | None = None
    nccl: NcclSpec | None = None


def _inter_node(
    catalog: Catalog, gpu_: GPU, gpus_per_node: int, spec: InterNodeSpec
) -> tuple[float, float, str | None]:
    """(bytes/s per GPU one direction, latency s, network name) for an inter-node spec."""
    ref = gpu_.reference_node
    default = catalog.networks[ref.network]
    if spec.gbps_per_gpu is not None:
        latency = default.latency_s if spec.latency_us is None else _seconds(spec.latency_us)
        return _si(spec.gbps_per_gpu, GIGA / BITS_PER_BYTE), latency, None
    if spec.network is None:  # the GPU's reference system, as a share per GPU
        share = default.port_bytes_per_s * ref.nics_per_node / ref.gpus_per_node
        return share, default.latency_s, default.name
    net = catalog.network(spec.network)
    nics = gpus_per_node if spec.nics_per_node is None else spec.nics_per_node
    latency = net.latency_s if spec.latency_us is None else _seconds(spec.latency_us)
    return net.port_bytes_per_s * nics / gpus_per_node, latency, net.name


def cluster_from_flags(
    gpus: int,
    gpu: str,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    inter_node_gbps: float | None = None,
    *,
    name: str | None = None,
) -> Cluster:
    """`--gpus N --gpu NAME [--gpus-per-node 8] [--inter-node-gbps X]` (X: Gb/s per GPU)."""
    for flag, value in (("--gpus", gpus), ("--gpus-per-node", gpus_per_node)):
        problem = size_problem("gpus", value)
        if problem:
            raise UsageError(f"{flag}: {problem}")
    problem = whole_nodes_problem(gpus, gpus_per_node)
    if problem:
        raise UsageError(f"--gpus/--gpus-per-node: {problem}")
    catalog = load_catalog()
    if inter_node_gbps is not None:
        if not is_finite_number(inter_node_gbps):
            raise UsageError(
                f"--inter-node-gbps: expected a number, got {shown_value(inter_node_gbps)}"
            )
        problem = catalog.ranges["gbps_per_gpu"].problem(inter_node_gbps)
        if problem:
            raise UsageError(f"--inter-node-gbps: {problem}")
    gpu_ = catalog.gpus[_lookup("GPU", gpu, catalog.gpu_names, SourceRef("--gpu"))]
    spec = InterNodeSpec(gbps_per_gpu=None if inter_node_gbps is None else float(inter_node_gbps))
    name = name or f"{gpus}x{gpu_.name}"
    return _build(catalog, name, gpu_, gpus, gpus_per_node, spec, NcclSpec())


def _build(
    catalog: Catalog,
    name: str,
    gpu_: GPU,
    num_gpus: int,
    gpus_per_node: int,
    inter: InterNodeSpec,
    nccl: NcclSpec,
) -> Cluster:
    bandwidth, latency, net = _inter_node(catalog, gpu_, gpus_per_node, inter)
    return Cluster(
        name=name,
        gpu=gpu_,
        num_gpus=num_gpus,
        gpus_per_node=gpus_per_node,
        intra_node_latency_s=catalog.link_latency_s[gpu_.intra_node_link],
        inter_node_bytes_per_s=bandwidth,
        inter_node_latency_s=latency,
        network=net,
        ib_hcas=None if nccl.ib_hcas is None else tuple(nccl.ib_hcas),
        socket_ifname=nccl.socket_ifname,
    )


def load_cluster(path: str | Path) -> Cluster:
    """Read a cluster file; every mistake is an InputError at `file:line:col`."""
    doc = load_document(path)
    if not isinstance(doc.data, dict):
        got = "an empty file" if doc.data is None else type(doc.data).__name__
        raise InputError(f"a cluster file is a mapping of keys (got {got})", doc.ref())
    spec = validate(ClusterFile, doc.data, doc)
    catalog = load_catalog()
    gpu_name = _lookup("GPU", spec.gpu, catalog.gpu_names, doc.ref(("gpu",)))
    base = catalog.gpu_specs[gpu_name]
    figures = base
    if spec.overrides:
        merged = {**base.model_dump(include=set(GPUFigures.model_fields)), **spec.overrides}
        figures = validate(GPUFigures, merged, doc, ("overrides",))
        given = figures.model_dump(include=set(spec.overrides) & set(GPU_RANGED_KEYS))
        _check_ranges(catalog.ranges, given, doc, ("overrides",))
    try:
        gpu_ = gpu_from_figures(gpu_name, base, figures)
    except ValidationError as exc:  # a positive figure that rounds to 0 bytes or 0 FLOP/s
        message = exc.errors(include_url=False)[0]["msg"]
        where = doc.ref(("overrides",))
        raise InputError(f"overrides give an impossible GPU: {message}", where) from None

    gpn = spec.gpus_per_node
    if spec.num_gpus is None and spec.nodes is None:
        raise InputError("give num_gpus or nodes (nodes of gpus_per_node GPUs)", doc.ref())
    num_gpus = spec.num_gpus if spec.num_gpus is not None else (spec.nodes or 0) * gpn
    if spec.nodes is not None and num_gpus != spec.nodes * gpn:
        message = f"num_gpus({num_gpus}) != nodes({spec.nodes}) * gpus_per_node({gpn})"
        raise InputError(message, doc.ref(("num_gpus",)))
    problem = whole_nodes_problem(num_gpus, gpn)
    if problem:
        raise InputError(problem, doc.ref(("num_gpus",)))

    if spec.inter_node is not None:
        _check_inter_node(doc, spec.inter_node, catalog, gpn)
    inter, nccl = spec.inter_node or InterNodeSpec(), spec.nccl or NcclSpec()
    name = spec.name or Path(path).stem
    return _build(catalog, name, gpu_, num_gpus, gpn, inter, nccl)


def _check_inter_node(doc: Document, inter: InterNodeSpec, catalog: Catalog, gpn: int) -> None:
    figures = {"gbps_per_gpu": inter.gbps_per_gpu, "latency_us": inter.latency_us}
    _check_ranges(catalog.ranges, figures, doc, ("inter_node",))
    where = doc.ref(("inter_node",))
    if (inter.network is None) == (inter.gbps_per_gpu is None):
        raise InputError("give either network (with nics_per_node) or gbps_per_gpu", where)
    if inter.nics_per_node is not None and inter.network is None:
        where = doc.ref(("inter_node", "nics_per_node"))
        raise InputError("nics_per_node goes with network, not with gbps_per_gpu", where)
    if inter.network is not None:
        where = doc.ref(("inter_node", "network"))
        net = catalog.networks[_lookup("network", inter.network, catalog.network_names, where)]
        if inter.nics_per_node is not None:  # the ports' bandwidth, shared by a node's GPUs
            port = net.port_bytes_per_s * BITS_PER_BYTE / GIGA
            problem = catalog.ranges["gbps_per_gpu"].problem(port * inter.nics_per_node / gpn)
            if problem:
                where = doc.ref(("inter_node", "nics_per_node"))
                share = (
                    f"nics_per_node({inter.nics_per_node}) x {port:g} Gb/s / gpus_per_node({gpn})"
                )
                raise InputError(f"{share}: {problem}", where)
