"""The `measured:` section of a cluster file: per-operation curves measured on the user's own
GPUs by `parplan profile` (GEMM rate by shape, attention rate by sequence length, the memory
copy bandwidth, collective bandwidth by message size, rank count and span), with the machine
and versions they came from. `docs/clusters.md` ("Measured curves") documents every key.

This module says what a valid section is (`Measured`), validates a loaded mapping into it
(`validate_measured`) and reduces it to the figures the cost model prices from
(`MeasuredFigures`, kept on the `Cluster`; rules/cost/efficiency.yaml reads them as
`cluster.measured_gemm_fraction*`). Every
rate is written beside the count and the time it was computed from, and must agree with them to
the digits written (`SIGNIFICANT_DIGITS`): a hand-edited rate that no longer matches its time
is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from parplan_gen.cost.catalog import GIGA, TERA
from parplan_gen.cost.data_checks import RawData
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.source import Document
from parplan_gen.inputs.validation import validate

# Figures are written to this many significant digits (a format, not a measurement: the timers'
# noise is far above it); a rate agrees with its count and time when within one unit of the last
# digit written.
SIGNIFICANT_DIGITS = 6
RATE_TOLERANCE = 10.0 ** (1 - SIGNIFICANT_DIGITS)
ISO_DATE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|[+-]\d{2}:\d{2})$"

Device = Literal["cuda", "cpu"]
Span = Literal["node", "cross-node"]
AttentionMode = Literal["fwd", "fwd_bwd"]
CollectiveBackend = Literal["nccl", "gloo"]
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

P = TypeVar("P")


def significant(value: float) -> float:
    """`value` to SIGNIFICANT_DIGITS significant digits, as the file holds it."""
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def rate(count: float, time_s: float, unit: float) -> float:
    """count / time in `unit` per second, to the digits written (time_s as written)."""
    return significant(count / time_s / unit)


def _check_rate(name: str, given: float, count: float, time_s: float, unit: float) -> None:
    """ValueError when the rate `given` is not `count` / `time_s` in `unit` to the digits
    written."""
    expected = count / time_s / unit
    if abs(given - expected) <= RATE_TOLERANCE * expected:
        return
    raise ValueError(
        f"{name} ({given:g}) is not its count over time_s ({expected:.{SIGNIFICANT_DIGITS}g})"
    )


def _unique(points: Sequence[P], key: Callable[[P], Hashable], what: str) -> None:
    seen: set[Hashable] = set()
    for point in points:
        k = key(point)
        if k in seen:
            raise ValueError(f"two {what} points for {k}: a curve has one point per shape")
        seen.add(k)


class Provenance(RawData):
    """Where the curves come from: the device, the software, when, and how the run went (no
    host name)."""

    gpu_name: str = Field(min_length=1, max_length=200, description="As the device reports it.")
    driver: str | None = Field(max_length=100, description="GPU driver version; None: unknown.")
    cuda: str | None = Field(max_length=100, description="CUDA version torch was built with.")
    hip: str | None = Field(max_length=100, description="ROCm/HIP version (AMD builds).")
    torch: str = Field(min_length=1, max_length=100)
    nccl: str | None = Field(max_length=100, description="NCCL (RCCL) version torch carries.")
    date: str = Field(pattern=ISO_DATE, description="When the run started, ISO 8601.")
    device: Device
    quick: bool = Field(description="`--quick`: the shorter sweeps.")
    budget_s: PositiveFloat = Field(description="The time the run was allowed, s.")
    stopped_early: bool = Field(description="The budget ran out before every point was measured.")


class GemmPoint(RawData):
    """One GEMM: (m x k) @ (k x n), m the tokens; flops = 2 m n k."""

    m: PositiveInt
    n: PositiveInt
    k: PositiveInt
    flops: PositiveFloat
    time_s: PositiveFloat
    tflops: PositiveFloat = Field(description="flops / time_s, 1e12 FLOP/s.")

    @model_validator(mode="after")
    def _consistent(self) -> GemmPoint:
        _check_rate("tflops", self.tflops, self.flops, self.time_s, TERA)
        return self


class GemmCurves(RawData):
    """GEMM points by precision; a precision the device lacks has none (`skipped` says why)."""

    bf16: list[GemmPoint] = Field(default_factory=list)
    fp8: list[GemmPoint] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_point_per_shape(self) -> GemmCurves:
        for name in ("bf16", "fp8"):
            _unique(getattr(self, name), lambda p: (p.m, p.n, p.k), f"gemm.{name}")
        return self


class AttentionPoint(RawData):
    """scaled_dot_product_attention on (batch, heads, seq_len, head_dim); flops by the
    FlashAttention benchmark's count (docs/clusters.md)."""

    seq_len: PositiveInt
    head_dim: PositiveInt
    heads: PositiveInt
    batch: PositiveInt
    causal: bool
    mode: AttentionMode = Field(description="fwd, or fwd_bwd (forward and backward).")
    flops: PositiveFloat
    time_s: PositiveFloat
    tflops: PositiveFloat

    @model_validator(mode="after")
    def _consistent(self) -> AttentionPoint:
        _check_rate("tflops", self.tflops, self.flops, self.time_s, TERA)
        return self


class MemoryBandwidth(RawData):
    """A large device-to-device copy: bytes read plus bytes written, over the time."""

    bytes: PositiveInt = Field(description="Bytes read + bytes written.")
    time_s: PositiveFloat
    gb_per_s: PositiveFloat = Field(description="bytes / time_s, 1e9 bytes/s.")

    @model_validator(mode="after")
    def _consistent(self) -> MemoryBandwidth:
        _check_rate("gb_per_s", self.gb_per_s, self.bytes, self.time_s, GIGA)
        return self


class CollectivePoint(RawData):
    """One collective of `bytes` (nccl-tests' size S) over `ranks` ranks."""

    bytes: PositiveInt = Field(description="nccl-tests' size S, bytes.")
    ranks: int = Field(ge=2)
    span: Span = Field(description="node: all ranks on one host; cross-node: not.")
    time_s: PositiveFloat = Field(description="Per operation, averaged over the ranks.")
    alg_gb_per_s: PositiveFloat = Field(description="bytes / time_s, 1e9 bytes/s.")
    bus_gb_per_s: PositiveFloat = Field(description="alg_gb_per_s x nccl-tests' factor.")

    @model_validator(mode="after")
    def _consistent(self) -> CollectivePoint:
        _check_rate("alg_gb_per_s", self.alg_gb_per_s, self.bytes, self.time_s, GIGA)
        return self


class Collectives(RawData):
    """Collective points by operation, through torch.distributed on `backend`."""

    backend: CollectiveBackend
    all_reduce: list[CollectivePoint] = Field(default_factory=list)
    all_gather: list[CollectivePoint] = Field(default_factory=list)
    reduce_scatter: list[CollectivePoint] = Field(default_factory=list)
    all_to_all: list[CollectivePoint] = Field(default_factory=list)
    send_recv: list[CollectivePoint] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_point_per_size(self) -> Collectives:
        for name in COLLECTIVES:
            _unique(getattr(self, name), lambda p: (p.bytes, p.ranks, p.span), name)
        return self


class OutsideAllocator(RawData):
    """Device memory in use that PyTorch's caching allocator does not hold, before any process
    group: the CUDA context with the kernels the sweeps loaded (cuBLAS, attention)."""

    context_bytes: PositiveInt = Field(
        description="Device memory in use (torch.cuda.mem_get_info) less memory_reserved, bytes."
    )


class MoeHost(RawData):
    """The host's time per kernel launch of Transformer Engine's grouped expert layer (the one
    Megatron-Core's TEGroupedMLP runs), from passes over two expert counts."""

    launch_s: PositiveFloat = Field(
        description="Host time per launch: the passes' difference over the launches the extra "
        "experts add (rules/cost/moe.yaml's count), seconds."
    )
    experts: list[PositiveInt] = Field(
        min_length=2, max_length=2, description="The two expert counts timed."
    )
    pass_s: list[PositiveFloat] = Field(
        min_length=2,
        max_length=2,
        description="Host wall time of one forward and backward pass at each, seconds.",
    )
    transformer_engine: str = Field(
        min_length=1, max_length=100, description="Transformer Engine's version."
    )


class Skipped(RawData):
    """A sweep, or part of one, that was not measured, and why."""

    sweep: str = Field(min_length=1, max_length=100)
    reason: str = Field(min_length=1, max_length=500)


class Measured(RawData):
    """The `measured:` section of a cluster file."""

    provenance: Provenance
    gemm: GemmCurves | None = None
    attention: list[AttentionPoint] = Field(default_factory=list)
    memory_bandwidth: MemoryBandwidth | None = None
    outside_allocator: OutsideAllocator | None = None
    moe_host: MoeHost | None = None
    collectives: Collectives | None = None
    skipped: list[Skipped] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_point_per_shape(self) -> Measured:
        _unique(
            self.attention,
            lambda p: (p.seq_len, p.head_dim, p.heads, p.batch, p.causal, p.mode),
            "attention",
        )
        return self


def validate_measured(data: Any, doc: Document, path: KeyPath = ("measured",)) -> Measured:
    """The `measured:` mapping found at `path` in `doc`, validated; an InputError at the
    offending key (`file:line:col`) otherwise."""
    if not isinstance(data, dict):
        got = "nothing" if data is None else type(data).__name__
        raise InputError(f"expected a mapping of keys (got {got})", doc.ref(path))
    return validate(Measured, data, doc, path)


class MeasuredFigures(BaseModel):
    """What the cost model reads from a `measured:` section, and where it came from (kept in
    plan.json's `cluster`, so a plan says it was priced from the user's own curves).

    `gemm_fraction_<precision>`: the fastest GEMM of the sweep over the GPU's dense peak at that
    precision (the catalog's, or a cluster file's override): the same best-shape figure as
    mamf-finder's "Maximum Achievable Matmul FLOPS", which rules/cost/efficiency.yaml compares
    with the figure of the calibrated generations. None: not measured."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    gpu_name: str = Field(description="The device the curves were measured on, as it reports it.")
    date: str = Field(description="When the profile ran, ISO 8601.")
    device: Device
    torch: str
    cuda: str | None
    nccl: str | None
    gemm_fraction_bf16: PositiveFloat | None = Field(
        description="Fastest measured BF16 GEMM / the BF16 dense peak."
    )
    gemm_fraction_fp8: PositiveFloat | None = Field(
        description="Fastest measured FP8 GEMM / the FP8 dense peak."
    )
    attention_max_fraction: PositiveFloat | None = Field(
        None,
        description="E of the causal forward+backward SDPA rate fitted as E x L / (L + L_half), "
        "over the 16-bit dense peak; None: not measured at two lengths or more.",
    )
    attention_half_seq: NonNegativeFloat | None = Field(
        None, description="L_half of that fit, tokens."
    )
    intra_bus_bytes_per_s: PositiveFloat | None = Field(
        None,
        description="The largest bus bandwidth of the ring collectives measured inside a node, "
        "B/s per GPU; None: not measured.",
    )
    inter_bus_bytes_per_s: PositiveFloat | None = Field(
        None,
        description="The largest bus bandwidth measured across nodes over the GPUs of a node "
        "that share it, B/s per GPU (nccl-tests' ring: min(NVLink, GPUs x network)); None: not "
        "measured.",
    )
    context_bytes: PositiveInt | None = Field(
        None,
        description="The CUDA context with the kernels the sweeps loaded: device memory in use "
        "outside the caching allocator before any process group, bytes; None: not measured.",
    )
    host_launch_s: PositiveFloat | None = Field(
        None,
        description="Host time per kernel launch of Transformer Engine's grouped expert layer, "
        "seconds; None: not measured.",
    )


def measured_figures(
    measured: Measured, peak_flops: Callable[[str], float | None], gpus_per_node: int
) -> MeasuredFigures:
    """The figures of `measured` on a GPU whose dense peak at a precision is `peak_flops(p)`
    (None: the GPU has no such mode), `gpus_per_node` to a node."""

    def fraction(points: Sequence[GemmPoint], precision: str) -> float | None:
        peak = peak_flops(precision)
        if not points or not peak:
            return None
        return max(p.tflops for p in points) * TERA / peak

    gemm = measured.gemm or GemmCurves()
    outside, host = measured.outside_allocator, measured.moe_host
    source = measured.provenance
    attention = saturating_fit(
        [
            (p.seq_len, p.tflops * TERA / peak)
            for p in measured.attention
            if p.causal and p.mode == "fwd_bwd" and (peak := peak_flops("bf16"))
        ]
    )
    return MeasuredFigures(
        gpu_name=source.gpu_name,
        date=source.date,
        device=source.device,
        torch=source.torch,
        cuda=source.cuda,
        nccl=source.nccl,
        gemm_fraction_bf16=fraction(gemm.bf16, "bf16"),
        gemm_fraction_fp8=fraction(gemm.fp8, "fp8"),
        attention_max_fraction=None if attention is None else attention[0],
        attention_half_seq=None if attention is None else attention[1],
        intra_bus_bytes_per_s=_bus(measured.collectives, "node", 1),
        inter_bus_bytes_per_s=_bus(measured.collectives, "cross-node", gpus_per_node),
        context_bytes=None if outside is None else outside.context_bytes,
        host_launch_s=None if host is None else host.launch_s,
    )


# The ring collectives whose bus bandwidth is the link's (nccl-tests doc/PERFORMANCE.md); an
# all-to-all's is not a ring's, and send/recv is one link.
RING_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def _bus(collectives: Collectives | None, span: Span, sharing: int) -> float | None:
    """The largest ring bus bandwidth measured over `span`, B/s, over the `sharing` GPUs whose
    traffic one link carries; None when none was measured."""
    if collectives is None:
        return None
    rates = [
        p.bus_gb_per_s
        for name in RING_COLLECTIVES
        for p in getattr(collectives, name)
        if p.span == span
    ]
    return max(rates) * GIGA / sharing if rates else None


def saturating_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(E, L_half) of y = E x L / (L + L_half) through `points` (L, y): the least-squares line
    of 1/y against 1/L, whose intercept is 1 / E and slope L_half / E (the form, and the fit,
    of rules/cost/context.yaml's FlashAttention curves). None with fewer than two lengths, or
    when the rate still doubles with the length (no saturation seen: intercept <= 0). A rate
    that falls with the length gives L_half 0 and E the mean rate."""
    if len({length for length, _ in points}) < 2:
        return None
    xs = [1 / length for length, _ in points]
    ys = [1 / y for _, y in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    intercept = mean_y - slope * mean_x
    if intercept <= 0:
        return None
    if slope < 0:
        return sum(y for _, y in points) / len(points), 0.0
    return 1 / intercept, slope / intercept
