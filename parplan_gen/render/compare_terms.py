"""The terms a comparison of layouts sets side by side (templates/report/compare.yaml), its
columns and rows, and what the full sentences (render/compare.py) and the terse lines
(render/compare_terse.py) both read: a figure as shown, a layout's plan fields as drivers, which
drivers differ, the link a tp group runs on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.inputs.defaults import GIB, MIB
from parplan_gen.inputs.source import load_document
from parplan_gen.inputs.validation import validate
from parplan_gen.render.checks import RenderError
from parplan_gen.render.labels import MS_PER_S, gib, seconds
from parplan_gen.render.template_env import Templates

COMPARE_FILE = "report/compare.yaml"
STEP_TERMS = ("overlap_s", "step_s")  # time rows every kind of model has
# The MFU rows of each count of the model FLOPs (cost/mfu_convention.py)
MFU_ROWS = {"full": "mfu", "causal": "mfu_causal"}
KEYS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # the terse view's names of the columns
_STRICT = ConfigDict(extra="forbid", frozen=True)


class Term(BaseModel):
    model_config = _STRICT
    term: str
    label: str
    group: Literal["memory", "time", "throughput"]
    what: str
    better: Literal["low", "high"]
    drivers: list[str]


class Material(BaseModel):
    """Which differences the terse view says: at least `share` of the step or memory gap."""

    model_config = _STRICT
    share: float = Field(gt=0, le=1)
    reason: str = Field(min_length=1)


class CompareFile(BaseModel):
    """templates/report/compare.yaml."""

    model_config = _STRICT
    terms: list[Term]
    sentences: dict[str, str]
    fields: dict[str, str]
    material: Material
    terse: dict[str, str]
    names: dict[str, str]


@lru_cache(maxsize=1)
def compare_file() -> CompareFile:
    """The built-in templates/report/compare.yaml, validated (read once)."""
    doc = load_document(Templates.at().find(COMPARE_FILE))
    return validate(CompareFile, doc.data, doc, error=RenderError)


@dataclass(frozen=True)
class Column:
    """One layout compared: its label (the layout itself), its estimate, what it is (`chosen`,
    `runner-up`, `yours`), why the planner would not run it (None: it runs as given) and its
    letter in the terse view (`A`, `B`, ...)."""

    label: str
    role: str
    estimate: Estimate
    problem: str | None = None
    key: str = ""


@dataclass(frozen=True)
class Row:
    """One term: its value in each column (bytes, seconds or a fraction) and as shown."""

    term: str
    label: str
    group: str
    values: tuple[float, ...]
    shown: tuple[str, ...]


@dataclass(frozen=True)
class Terse:
    """The terse view's explanation of the first column against another: the step line, then
    one line per material term (`terms`: the time parts, then the memory, the largest
    difference first; render/compare_terse.py)."""

    step: str
    terms: tuple[str, ...]
    lines: tuple[str, ...]


def shown(term: str, group: str, value: float) -> str:
    """Memory in GiB, time in s or ms (the step to the millisecond), fractions in %."""
    if group == "memory":
        return gib(value) if abs(value) >= GIB / 10 or value == 0 else f"{value / MIB:,.0f} MiB"
    if term == "step_s":  # to a thousandth, so that close steps still differ
        return f"{value:,.3f} s" if abs(value) >= 1 else f"{value * MS_PER_S:,.2f} ms"
    return seconds(value) if group == "time" else f"{value:.1%}"


def saving(va: float, vb: float) -> str:
    """How much of `vb` the first value saves, in % (`-` where `vb` is 0)."""
    return f"{(vb - va) / vb:.2%}" if vb else "-"


def plan_fields(c: Column) -> dict[str, Any]:
    """The column's plan fields and its backend's name (`backend`), as drivers read them."""
    backend = c.estimate.backend and c.estimate.backend.name
    return {**c.estimate.plan.model_dump(), "backend": backend}


def differing(drivers: Sequence[str], pa: dict[str, Any], pb: dict[str, Any]) -> list[str]:
    """The drivers in which two layouts' plan fields differ (etp follows tp unless set apart:
    named only when one of the two sets it apart)."""
    own_etp = pa["etp"] != pa["tp"] or pb["etp"] != pb["tp"]
    return [k for k in drivers if pa[k] != pb[k] and (k != "etp" or own_etp)]


def tp_link(cluster: Cluster, tp: int) -> str:
    """`NVLink` when the tp group lies inside the job's NVLink domain, else `network`
    (rules/cost/time.yaml tp_inside_nvlink; cluster.nvlink_domain is the job's GPUs on one
    NVLink domain, cost/estimate.py cluster_env: Cluster.nvlink_gpus)."""
    return "NVLink" if cluster.nvlink_gpus % tp == 0 else "network"


def word(value: Any) -> str:
    """A plan field's value as the sentences say it (booleans: on / off; an unnamed loss kernel,
    Layout.cross_entropy_fusion None on a backend without one: none)."""
    if value is None:
        return "none"
    return ("on" if value else "off") if isinstance(value, bool) else str(value)
