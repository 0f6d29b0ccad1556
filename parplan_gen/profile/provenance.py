"""Where a profile's curves come from: the device's name, the driver, CUDA / HIP, torch and NCCL
versions, and when the run started. No host name, no user name, no path: the file may be
shared."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

from parplan_gen.inputs.safe_text import printable
from parplan_gen.profile.runtime import Device

# The NVIDIA kernel module says its version here ("NVRM version: NVIDIA UNIX x86_64 Kernel
# Module  550.54.15 ..."); nvidia-smi says it too, when the file is not there.
NVIDIA_VERSION_FILE = Path("/proc/driver/nvidia/version")
NVIDIA_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")
NVIDIA_SMI = ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
NVIDIA_SMI_TIMEOUT_S = 10
VERSION_CHARS = 100  # what Provenance keeps of a version string


def started_at() -> str:
    """Now, ISO 8601 in UTC to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Versions(TypedDict):
    driver: str | None
    cuda: str | None
    hip: str | None
    torch: str
    nccl: str | None


def versions(device: Device) -> Versions:
    """driver, cuda, hip, torch and nccl (None: not known, or not used on this device)."""
    torch = device.torch
    return {
        "driver": _driver() if device.cuda else None,
        "cuda": _text(torch.version.cuda),
        "hip": _text(getattr(torch.version, "hip", None)),
        "torch": _text(torch.__version__) or "unknown",
        "nccl": _nccl(torch) if device.cuda else None,
    }


def _text(value: object) -> str | None:
    return None if value is None else printable(str(value), VERSION_CHARS)


def _nccl(torch: Any) -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    if isinstance(version, tuple):
        return ".".join(str(part) for part in version)
    return _text(version)


def _driver() -> str | None:
    try:
        found = NVIDIA_VERSION.search(NVIDIA_VERSION_FILE.read_text(encoding="utf-8"))
    except OSError:
        found = None
    if found:
        return found.group(1)
    smi = shutil.which(NVIDIA_SMI[0])
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, *NVIDIA_SMI[1:]],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return _text(lines[0]) if done.returncode == 0 and lines else None
