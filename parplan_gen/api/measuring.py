"""`measure`: `parplan profile` from Python. It measures this machine's GPUs (or, with
device="cpu", runs the tiny CPU profile) and returns the `measured:` section; with `out`, it also
writes the cluster file, as `parplan profile --out` does. Named `measure`, not `profile`:
`parplan_gen.profile` is the package that does the measuring."""

from __future__ import annotations

from pathlib import Path

from parplan_gen.api.wording import parameter_wording
from parplan_gen.cost.measured import Measured
from parplan_gen.profile.options import DeviceKind, ProfileOptions
from parplan_gen.profile.session import run_profile
from parplan_gen.profile.writer import write_file


@parameter_wording
def measure(
    device: DeviceKind = "cuda",
    *,
    quick: bool = False,
    gpu: str | None = None,
    budget_s: float | None = None,
    out: str | Path | None = None,
) -> Measured:
    """Measure the GEMM, attention, memory-copy and collective curves (docs/clusters.md,
    "Measured curves"); `out`: also write the cluster file there (from rank 0 under torchrun).
    Needs torch; without a usable CUDA GPU, device="cuda" raises an InputError saying so."""
    options = ProfileOptions(device=device, quick=quick, gpu=gpu, budget_s=budget_s)
    run = run_profile(options, out=None if out is None else str(out))
    if out is not None and run.writes:
        write_file(out, run.text())
    return run.measured
