"""The sweeps `parplan profile` runs (`parplan_gen/data/profile_sweeps.yaml`): the sizes of each
level (`full`, `quick`, `cpu`), the timing and budget, the FLOP and byte conventions, the
nccl-tests bus-bandwidth factors, and the device names the catalog does not spell. `sweeps()`
reads and checks the file once per process; nothing here holds a figure of its own."""

from __future__ import annotations

import math
from functools import cache
from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from parplan_gen.cost.catalog import load_catalog
from parplan_gen.cost.data_checks import RawData
from parplan_gen.cost.measured import COLLECTIVES
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.source import read_package_data
from parplan_gen.inputs.validation import validate

DATA_FILE = "profile_sweeps.yaml"
LevelName = Literal["full", "quick", "cpu"]
SWEEPS = ("gemm", "attention", "memory", "collectives")  # in the order they run


class Geometric(RawData):
    """first, first x factor, ... up to last."""

    first: PositiveInt
    last: PositiveInt
    factor: int = Field(ge=2)

    @model_validator(mode="after")
    def _ordered(self) -> Geometric:
        if self.first > self.last:
            raise ValueError(f"first({self.first}) > last({self.last})")
        return self

    def values(self) -> list[int]:
        out, value = [], self.first
        while value <= self.last:
            out.append(value)
            value *= self.factor
        return out


class Timing(RawData):
    """Warm-up calls, then `repetitions` timed rounds (the median is kept), each of as many
    calls as fill `min_repetition_s` (at least one)."""

    warmup: int = Field(ge=0)
    repetitions: PositiveInt
    min_repetition_s: NonNegativeFloat


class CollectiveTiming(RawData):
    """nccl-tests' way: warm-up operations, then rounds of `iterations` back to back."""

    warmup: int = Field(ge=0)
    repetitions: PositiveInt
    iterations: PositiveInt


class Shape(RawData):
    n: PositiveInt
    k: PositiveInt


class GemmSweep(RawData):
    m: Geometric
    shapes: list[Shape] = Field(min_length=1)


class AttentionSweep(RawData):
    seq_len: Geometric
    head_dim: PositiveInt
    heads: PositiveInt
    tokens: PositiveInt = Field(description="batch x seq_len per point (batch at least 1).")


class MemorySweep(RawData):
    copy_bytes: PositiveInt


class CollectiveSweep(RawData):
    bytes: Geometric
    timing: CollectiveTiming
    timeout_s: PositiveFloat = Field(description="A rank waits this long for the others.")


class Level(RawData):
    budget_s: PositiveFloat
    timing: Timing
    gemm: GemmSweep
    attention: AttentionSweep
    memory: MemorySweep
    collectives: CollectiveSweep
    spawn_ranks: int | None = Field(None, ge=2, description="Local processes without torchrun.")
    threads: int | None = Field(None, ge=1, description="torch's CPU threads while it runs.")


class Conventions(RawData):
    gemm_flops_per_mnk: PositiveFloat
    attention_flops_per_score: PositiveFloat
    attention_causal_fraction: float = Field(gt=0, le=1)
    attention_mode_factor: dict[Literal["fwd", "fwd_bwd"], PositiveFloat]
    copy_bytes_per_byte: PositiveInt
    sources: dict[str, str] = Field(min_length=1)


class MoeHostPasses(RawData):
    """The grouped expert layer's passes (moe_host.py): two expert counts, their sizes."""

    experts: list[PositiveInt] = Field(min_length=2, max_length=2)
    tokens_per_expert: PositiveInt
    width: PositiveInt
    warmup: int = Field(ge=0)
    passes: PositiveInt
    launches_per_expert: PositiveInt
    gpu_paced_ratio: float = Field(
        gt=1,
        description="A pass whose synchronized wall time is above its host time this many "
        "times was paced by the GPU: skipped.",
    )

    @model_validator(mode="after")
    def _two_counts(self) -> MoeHostPasses:
        if self.experts[0] >= self.experts[1]:
            raise ValueError(f"experts: {self.experts[0]} is not below {self.experts[1]}")
        return self


class BusFactor(RawData):
    scale: PositiveFloat
    n_minus_1_over_n: bool

    def factor(self, ranks: int) -> float:
        """nccl-tests' busbw / algbw for `ranks` ranks."""
        share = (ranks - 1) / ranks if self.n_minus_1_over_n else 1.0
        return self.scale * share


class BusBandwidth(RawData):
    source: str = Field(min_length=1)
    factors: dict[str, BusFactor]


class Dtypes(RawData):
    bf16: str
    fp8: list[str] = Field(min_length=1)
    fp8_probe_size: PositiveInt
    collectives: str


class DeviceName(RawData):
    gpu: str
    source: str = Field(min_length=1)


class DeviceNames(RawData):
    vendor_prefixes: list[str]
    names: dict[str, DeviceName]


class SweepFile(RawData):
    """`parplan_gen/data/profile_sweeps.yaml`."""

    conventions: Conventions
    bus_bandwidth: BusBandwidth
    dtypes: Dtypes
    budget_shares: dict[str, PositiveFloat]
    moe_host: MoeHostPasses
    device_names: DeviceNames
    cpu_placeholder_gpu: str
    levels: dict[LevelName, Level]


@cache
def sweeps() -> SweepFile:
    """The shipped sweep file, checked: every collective has its factor, the budget shares
    cover the sweeps and add up to 1, every GPU named is in the catalog, every level given."""
    doc = read_package_data(DATA_FILE)
    data = validate(SweepFile, doc.data, doc)
    if sorted(data.bus_bandwidth.factors) != sorted(COLLECTIVES):
        where = doc.ref(("bus_bandwidth", "factors"))
        raise InputError(f"give exactly the collectives {', '.join(COLLECTIVES)}", where)
    shares = data.budget_shares
    if sorted(shares) != sorted(SWEEPS) or not math.isclose(sum(shares.values()), 1):
        message = f"give shares of {', '.join(SWEEPS)} that add up to 1"
        raise InputError(message, doc.ref(("budget_shares",)))
    if sorted(data.levels) != sorted(("full", "quick", "cpu")):
        raise InputError("give the levels full, quick and cpu", doc.ref(("levels",)))
    catalog = load_catalog()
    named = [(("cpu_placeholder_gpu",), data.cpu_placeholder_gpu)] + [
        (("device_names", "names", name, "gpu"), entry.gpu)
        for name, entry in data.device_names.names.items()
    ]
    for path, gpu in named:
        if gpu not in catalog.gpus:
            raise InputError(f"'{gpu}' is no catalog GPU name", doc.ref(path))
    return data
