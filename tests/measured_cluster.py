"""A cluster file of H100s with a `measured:` section, for the tests of what one measured figure
changes in the cost model (the provenance of a profile run on one H100)."""

from __future__ import annotations

HEADER = """\
gpu: h100
num_gpus: {gpus}
gpus_per_node: 8
measured:
  provenance:
    gpu_name: NVIDIA H100 80GB HBM3
    driver: null
    cuda: "12.8"
    hip: null
    torch: 2.13.0
    nccl: 2.27.3
    date: "2026-12-07T22:00:00Z"
    device: cuda
    quick: true
    budget_s: 60
    stopped_early: false
"""


def measured_cluster(gpus: int, section: str) -> str:
    """The file's text: `gpus` H100s, and `section` (YAML, indented under `measured:`)."""
    return HEADER.format(gpus=gpus) + section
