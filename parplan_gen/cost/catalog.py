"""Hardware catalog: the GPUs, networks and intra-node links shipped in `parplan_gen/data/`
(`gpus.yaml`, `networks.yaml`: every figure with its source, units in the key names, and each
figure's physical range), and the conversion of those figures to SI (bytes, FLOP/s, bytes/s in
one direction, seconds). `load_catalog` reads and checks it once per process; `gpu` looks a GPU
up by name or alias. `docs/clusters.md` documents the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from parplan_gen.cost.data_checks import (
    Bounds,
    FigureRange,
    RawData,
    Sourced,
    check_ranges,
    check_sources,
    read_ranges,
)
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import InputError, SourceRef, did_you_mean, shown_value
from parplan_gen.inputs.source import Document, read_package_data
from parplan_gen.inputs.validation import validate

# Unit definitions (not figures: every figure lives in the YAML with its source).
TERA = 1e12
GIGA = 1e9
BITS_PER_BYTE = 8
NANOS_PER_MICRO = 1000
NANOS_PER_S = 10**9
DIRECTIONS = 2  # vendors add both directions of a link ("bidirectional" bandwidth)

Vendor = Literal["nvidia", "amd"]
Architecture = Literal["volta", "ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"]
FormFactor = Literal["sxm", "pcie", "oam"]
LinkKind = Literal["nvlink", "xgmi", "pcie"]
NetworkKind = Literal["infiniband", "roce", "ethernet"]
Precision = Literal["bf16", "fp16", "fp8"]
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp8")


class GPUFigures(RawData):
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


class ReferenceNode(RawData):
    """The vendor system whose scale-out network is a GPU's default inter-node network."""

    system: str
    network: str
    nics_per_node: PositiveInt
    gpus_per_node: PositiveInt
    nvlink_domain: PositiveInt | None = Field(
        None, description="GPUs on one NVLink fabric (GB200 NVL72: 72); None: the node."
    )
    host_memory_gb: PositiveFloat | None = Field(
        None,
        description="The system's host (CPU) memory per node, 1e9 bytes, as its published "
        "system description prints it; None: no published figure.",
    )


class MaxAchievable(RawData):
    """A vendor's measured maximum-achievable dense GEMM rates (AMD's MAF), 1e12 FLOP/s."""

    bf16: PositiveFloat | None = None
    fp16: PositiveFloat | None = None
    fp8: PositiveFloat | None = None


class CatalogGPU(GPUFigures, Sourced):
    display_name: str
    vendor: Vendor
    architecture: Architecture
    form_factor: FormFactor
    aliases: list[str] = Field(default_factory=list)
    reference_node: ReferenceNode
    max_achievable_tflops: MaxAchievable | None = Field(
        None, description="The vendor's measured maximum-achievable GEMM rates, if published."
    )

    @model_validator(mode="after")
    def _nvlink_domain(self) -> CatalogGPU:
        ref = self.reference_node
        if ref.nvlink_domain is not None:
            problem = nvlink_domain_problem(
                ref.nvlink_domain, ref.gpus_per_node, self.intra_node_link
            )
            if problem:
                raise ValueError(problem)
        return self

    @field_validator("max_achievable_tflops")
    @classmethod
    def _within_peak(
        cls, measured: MaxAchievable | None, info: ValidationInfo
    ) -> MaxAchievable | None:
        for precision in () if measured is None else PRECISIONS:
            key = f"{precision}_dense_tflops"
            if key not in info.data:
                continue  # the peak's own error is the one reported
            rate, peak = getattr(measured, precision), info.data[key]
            if rate is not None and (peak is None or rate > peak):
                shown = "none" if peak is None else f"{peak:g}"
                raise ValueError(
                    f"{precision} ({rate:g}) exceeds the dense {precision} peak ({shown})"
                )
        return measured

    def max_fraction(self, precision: Precision) -> float | None:
        """The measured maximum rate at `precision` over the peak it was measured against."""
        rate = getattr(self.max_achievable_tflops, precision, None)
        peak = getattr(self, f"{precision}_dense_tflops")
        return None if rate is None or peak is None else rate / peak

    def figure_keys(self) -> tuple[str, ...]:
        """The figures this entry gives, each of which must name its source."""
        extra = () if self.max_achievable_tflops is None else ("max_achievable_tflops",)
        return (*GPU_FIGURE_KEYS, *extra)


def nvlink_domain_of(gpu_: GPU, gpus_per_node: int, given: int | None) -> int:
    """The NVLink domain: as given, else the reference system's if whole nodes, else the node."""
    domain = gpu_.reference_node.nvlink_domain  # GB200 NVL72: 72 GPUs on trays of 4
    if given is None and domain is not None and domain % gpus_per_node == 0:
        return domain
    return gpus_per_node if given is None else given


def nvlink_domain_problem(domain: int, gpus_per_node: int, link: str) -> str | None:
    """Why `domain` GPUs cannot share one NVLink fabric of nodes of `gpus_per_node`, or None:
    a domain is whole nodes, and a domain beyond one node needs NVLink (NVLink Switch trays)."""
    if domain % gpus_per_node:
        return f"nvlink_domain({domain}) is not a multiple of gpus_per_node({gpus_per_node})"
    if domain > gpus_per_node and link != "nvlink":
        return (
            f"nvlink_domain({domain}) spans nodes, which needs NVLink (this GPU links over {link})"
        )
    return None


class CatalogNetwork(Sourced):
    display_name: str
    kind: NetworkKind
    aliases: list[str] = Field(default_factory=list)
    gbps_per_port: PositiveFloat
    latency_us: PositiveFloat


class CatalogLink(Sourced):
    display_name: str
    latency_us: PositiveFloat


class _GPUFile(RawData):
    ranges: dict[str, FigureRange]
    gpus: dict[str, CatalogGPU]


class _Links(RawData):
    nvlink: CatalogLink
    xgmi: CatalogLink
    pcie: CatalogLink


class _NetworkFile(RawData):
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
# A node's host memory (reference_node.host_memory_gb, a cluster file's host_memory_gb_per_node)
NODE_RANGED_KEYS = ("host_memory_gb",)


class SIModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GPU(SIModel):
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
    # The vendor's measured maximum-achievable GEMM rate over the catalog peak it was measured
    # against: a cluster file's overridden peak scales the rate with it.
    bf16_max_fraction: float | None = Field(None, gt=0, le=1, description="BF16 GEMM rate / peak.")
    fp16_max_fraction: float | None = Field(None, gt=0, le=1, description="FP16 GEMM rate / peak.")
    fp8_max_fraction: float | None = Field(None, gt=0, le=1, description="FP8 GEMM rate / peak.")

    @model_serializer(mode="wrap")
    def _without_unmeasured(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # measured fractions only where given: plan.json keeps its keys for every other GPU
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None or not k.endswith("_max_fraction")}

    def gemm_max_fraction(self, precision: Precision) -> float:
        """The vendor's measured maximum-achievable GEMM rate at `precision` over the dense
        peak; 0.0 where none is published."""
        return float(getattr(self, f"{precision}_max_fraction") or 0.0)

    def peak_flops(self, precision: Precision) -> float:
        """Dense peak FLOP/s for `precision`; an InputError when the GPU has no such mode."""
        peak = {"bf16": self.bf16_flops, "fp16": self.fp16_flops, "fp8": self.fp8_flops}[precision]
        if peak is None:
            have = [p for p in ("bf16", "fp16", "fp8") if getattr(self, f"{p}_flops") is not None]
            raise InputError(
                f"{self.name} has no {precision} tensor-core peak (it has: {', '.join(have)})"
            )
        return peak


class Network(SIModel):
    """An inter-node network (one NIC port) in SI units."""

    name: str
    display_name: str
    kind: NetworkKind
    port_bytes_per_s: PositiveFloat = Field(description="One port, one direction, B/s.")
    latency_s: PositiveFloat = Field(description="Per-step latency of a collective, s.")


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
        return self.gpus[lookup("GPU", name, self.gpu_names)]

    def network(self, name: str) -> Network:
        return self.networks[lookup("network", name, self.network_names)]


def _alias_map(doc: Document, section: str, entries: dict[str, Any]) -> dict[str, str]:
    names: dict[str, str] = {}
    for name, entry in entries.items():
        for alias in (name, *entry.aliases):
            key = normal_name(alias)
            if names.setdefault(key, name) != name:
                raise InputError(f"name '{alias}' is used twice", doc.ref((section, name)))
    return names


def si(value: float, unit: float) -> float:
    """`value` in `unit` as a whole number of SI units (no float noise: 2.039 TB/s -> 2.039e12)."""
    return float(round(value * unit))


def seconds(microseconds: float) -> float:
    """Microseconds to seconds, via whole nanoseconds (5.7 us -> exactly 5.7e-6)."""
    return round(microseconds * NANOS_PER_MICRO) / NANOS_PER_S


def gpu_from_figures(name: str, spec: CatalogGPU, figures: GPUFigures) -> GPU:
    """Convert catalog-unit figures to a `GPU` in SI units."""

    def tera(value: float | None) -> float | None:
        return None if value is None else si(value, TERA)

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
        memory_bandwidth_bytes_per_s=si(figures.memory_bandwidth_tb_per_s, TERA),
        intra_node_link=figures.intra_node_link,
        intra_node_bytes_per_s=si(figures.intra_node_gb_per_s_bidirectional, GIGA / DIRECTIONS),
        nvswitch=figures.nvswitch,
        reference_node=spec.reference_node,
        **{f"{precision}_max_fraction": spec.max_fraction(precision) for precision in PRECISIONS},
    )


@cache
def load_catalog() -> Catalog:
    """Read the shipped catalog (once per process), checking every figure has a source and lies
    in its physical range."""
    gdoc, ndoc = read_package_data("gpus.yaml"), read_package_data("networks.yaml")
    gfile = validate(_GPUFile, gdoc.data, gdoc)
    nfile = validate(_NetworkFile, ndoc.data, ndoc)
    ranges = read_ranges(gdoc, gfile.ranges, GPU_RANGED_KEYS + NODE_RANGED_KEYS)
    ranges |= read_ranges(ndoc, nfile.ranges, NETWORK_RANGED_KEYS)
    networks: dict[str, Network] = {}
    for name, net in nfile.networks.items():
        check_sources(ndoc, ("networks", name), net, NETWORK_FIGURE_KEYS)
        figures = net.model_dump(include=set(NETWORK_FIGURE_KEYS))
        check_ranges(ranges, figures, ndoc, ("networks", name))
        networks[name] = Network(
            name=name,
            display_name=net.display_name,
            kind=net.kind,
            port_bytes_per_s=si(net.gbps_per_port, GIGA / BITS_PER_BYTE),
            latency_s=seconds(net.latency_us),
        )
    link_latency: dict[str, float] = {}
    for kind in _Links.model_fields:
        link: CatalogLink = getattr(nfile.intra_node_links, kind)
        check_sources(ndoc, ("intra_node_links", kind), link, LINK_FIGURE_KEYS)
        check_ranges(ranges, {"latency_us": link.latency_us}, ndoc, ("intra_node_links", kind))
        link_latency[kind] = seconds(link.latency_us)
    gpus: dict[str, GPU] = {}
    for name, spec in gfile.gpus.items():
        check_sources(gdoc, ("gpus", name), spec, spec.figure_keys())
        figures = spec.model_dump(include=set(GPU_RANGED_KEYS))
        check_ranges(ranges, figures, gdoc, ("gpus", name))
        host = {"host_memory_gb": spec.reference_node.host_memory_gb}
        check_ranges(ranges, host, gdoc, ("gpus", name, "reference_node"))
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


def normal_name(name: str) -> str:
    """`name` as the catalog's name tables key it: case-insensitive, `_` and spaces as `-`."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def lookup(kind: str, name: str, names: dict[str, str], where: SourceRef | None = None) -> str:
    """The canonical name for `name` (case-insensitive, aliases allowed), or an InputError."""
    key = normal_name(name)
    if key in names:
        return names[key]
    known = ", ".join(sorted(set(names.values())))
    hint = did_you_mean(key, names)
    raise InputError(f"unknown {kind} {shown_value(name)}{hint} (known: {known})", where)


def gpu(name: str) -> GPU:
    """The catalog GPU called `name` or one of its aliases (case-insensitive)."""
    return load_catalog().gpu(name)
