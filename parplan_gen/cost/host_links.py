"""The host link of each catalog GPU (`parplan_gen/data/host_links.yaml`): the bandwidth, one
direction, over which an asynchronous checkpoint copies a GPU's state to host memory
(rules/budget/budget.yaml budget_checkpoint_copy_s), with its source. `host_link` reads and
checks the shipped file once per process; a GPU the file does not list has no figure (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pydantic import Field, PositiveFloat

from parplan_gen.cost.catalog import GIGA, load_catalog
from parplan_gen.cost.data_checks import RawData
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.source import read_package_data
from parplan_gen.inputs.validation import validate

DATA_FILE = "host_links.yaml"
DIRECTIONS = 2  # a full-duplex link: the datasheet figure adds both directions


class _Link(RawData):
    gb_per_s_bidirectional: PositiveFloat = Field(le=10_000, description="1e9 bytes/s, both ways.")
    source: str = Field(min_length=1)


class _File(RawData):
    host_links: dict[str, _Link]


@dataclass(frozen=True)
class HostLink:
    """One GPU's host link: bytes/s in one direction, and where the figure comes from."""

    bytes_per_s: float
    source: str


@cache
def _links() -> dict[str, HostLink]:
    doc = read_package_data(DATA_FILE)
    data = validate(_File, doc.data, doc)
    catalog = load_catalog()
    out = {}
    for gpu, link in data.host_links.items():
        if gpu not in catalog.gpus:
            raise InputError(f"'{gpu}' is no catalog GPU name", doc.ref(("host_links", gpu)))
        out[gpu] = HostLink(link.gb_per_s_bidirectional * GIGA / DIRECTIONS, link.source)
    return out


def host_link(gpu: str) -> HostLink | None:
    """The host link of the catalog GPU named `gpu` (its catalog name), None when not listed."""
    return _links().get(gpu)


def host_bytes_per_s(gpu: str) -> float:
    """The host link of `gpu`, bytes/s in one direction, 0 when not listed: the value of the
    formula names cluster.host_bandwidth and budget.host_bytes_per_s."""
    link = host_link(gpu)
    return 0.0 if link is None else link.bytes_per_s
