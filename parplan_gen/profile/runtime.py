"""torch, loaded when a profile runs and nowhere else: the rest of the package never imports it,
so parplan installs, runs and type-checks without it. It is loaded by name, so its objects are
`Any` to the type checker (a torch installation is not needed to check the package).

Owns the refusal when the device asked for cannot be profiled (one line, exit 1: what is
missing, and what to do), and the device's own facts (which device, its name, fp8 support).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.safe_text import printable

PROFILE_EXTRA = "pip install -e '.[profile]'"
CPU_HINT = "`--device cpu` runs a tiny CPU profile"
# A reason for a skipped sweep quotes at most this much of torch's own message.
REASON_CHARS = 300


class DeviceMissingError(InputError):
    """The device asked for cannot be profiled on this machine: torch is not installed, or no
    CUDA GPU is usable (exit 1)."""


class MeasurementError(InputError):
    """The ranks failed to measure a collective (an NCCL or gloo error, a rank that did not
    come): the machine or the launch must be fixed (exit 1)."""


def load_torch() -> Any:
    """The torch module, or DeviceMissingError saying how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise DeviceMissingError(
            f"profile needs torch, which is not installed: {PROFILE_EXTRA} installs it; "
            f"then {CPU_HINT} where no CUDA GPU is"
        ) from None


def require_device(torch: Any, device: str) -> None:
    """DeviceMissingError when `device` ("cuda" or "cpu") cannot run here."""
    if device == "cuda" and not torch.cuda.is_available():
        build = "" if torch.version.cuda or _hip(torch) else ", a CPU-only build"
        raise DeviceMissingError(
            f"--device cuda: no usable CUDA GPU (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}{build}); {CPU_HINT}; torch comes with {PROFILE_EXTRA}"
        )


def _hip(torch: Any) -> str | None:
    return getattr(torch.version, "hip", None)


@dataclass(frozen=True)
class Device:
    """The device one process profiles: torch, the torch device, and its kind."""

    torch: Any
    kind: str  # "cuda" or "cpu"
    index: int = 0

    @property
    def cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def name(self) -> str:
        """The device name as it reports it (a CPU: its architecture)."""
        if self.cuda:
            return str(self.torch.cuda.get_device_name(self.index))
        import platform

        return f"CPU ({platform.machine() or 'unknown'})"

    def handle(self) -> Any:
        """The torch.device."""
        return self.torch.device(self.kind, self.index) if self.cuda else self.torch.device("cpu")

    def dtype(self, name: str) -> Any:
        """torch.<name> (bfloat16, float8_e4m3fn...); None when this torch has no such type."""
        return getattr(self.torch, name, None)

    def synchronize(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.index)

    def point_failures(self) -> tuple[type[BaseException], ...]:
        """What a point on this device alone may fail with and the run go on: out of memory
        (torch's OutOfMemoryError is a RuntimeError), an operation this device or build does
        not run (RuntimeError, NotImplementedError)."""
        return (RuntimeError, MemoryError)

    def free(self) -> None:
        """Give cached memory back after a point (so the next, larger one fits)."""
        if self.cuda:
            self.torch.cuda.empty_cache()


@contextmanager
def cpu_threads(torch: Any, count: int | None) -> Iterator[None]:
    """torch's intra-op CPU threads set to `count` (None: left alone) in the block, then put
    back as they were."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def reason_of(exc: BaseException) -> str:
    """torch's message for a failed probe or point, one bounded line."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return printable(f"{type(exc).__name__}: {first}", REASON_CHARS)
