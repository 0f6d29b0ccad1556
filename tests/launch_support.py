"""What the launch tests share: running a rendered launcher as 2 CPU processes on this machine.

NPROC_PER_NODE and NNODES, which launch_torchrun.sh documents as overridable, make it 2 ranks on
one node (the plan's GPUs are not present); MASTER_ADDR/MASTER_PORT point the rendezvous at this
machine's loopback, on a port free at the time of the call.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_cpu_ranks(
    launcher: Path, args: list[str], timeout: int, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """Run `bash launcher *args` with torchrun on 2 local CPU ranks (this interpreter's
    environment first on PATH); `extra_env` adds variables such as DS_ACCELERATOR."""
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        NNODES="1",
        NPROC_PER_NODE="2",
        OMP_NUM_THREADS="1",
        **extra_env,
    )
    return subprocess.run(
        ["bash", str(launcher), *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
