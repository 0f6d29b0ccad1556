"""What the launch tests share: running a rendered launcher as 2 CPU processes on this machine.

NPROC_PER_NODE and NNODES, which launch_torchrun.sh documents as overridable, make it 2 ranks on
one node (the plan's GPUs are not present); MASTER_ADDR/MASTER_PORT point the rendezvous at this
machine's loopback, on a port free at the time of the call.

The torchrun jobs (DDP, FSDP2, the DeepSpeed engine: tests/test_consumers_launch.py,
test_consumers_fsdp.py, test_consumers_launch_deepspeed.py) share one launch (`TORCHRUN`): each
start of torchrun and its 2 ranks costs ~3.5 s of CPU before any training, most of it importing
torch three times. Each module registers its job (the plan it renders and the training script
that takes the plan's files); the first test that asks for an outcome (the `torchrun_jobs`
fixture, tests/conftest.py) plans every registered job, checks that each job's launch_torchrun.sh
hands torchrun exactly what the one launched does, and runs that one launcher once, whose 2 ranks
run every job's training script in turn on one gloo process group.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_env(port: int, extra_env: Mapping[str, str], path_first: Path | None = None) -> dict:
    """The environment of a launch on 2 local CPU ranks (this interpreter's environment first on
    PATH, after `path_first` when given)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    if path_first is not None:
        path = f"{path_first}{os.pathsep}{path}"
    return dict(
        os.environ,
        PATH=path,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NNODES="1",
        NPROC_PER_NODE="2",
        OMP_NUM_THREADS="1",
        **extra_env,
    )


def launch_two_cpu_ranks(
    launcher: Path, args: list[str], timeout: int, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """Run `bash launcher *args` with torchrun on 2 local CPU ranks (this interpreter's
    environment first on PATH); `extra_env` adds variables such as DS_ACCELERATOR."""
    env = _launch_env(_free_port(), extra_env)
    return subprocess.run(
        ["bash", str(launcher), *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


# A stand-in for torchrun: it records the arguments and the environment it was started with.
_RECORDING_TORCHRUN = """\
#!/usr/bin/env bash
printf '%s\\0' "$@" > "$TORCHRUN_RECORD.args"
env -0 > "$TORCHRUN_RECORD.env"
"""


def torchrun_invocation(
    launcher: Path, args: list[str], stand_in: Path, **extra_env: str
) -> tuple[list[str], dict[str, str]]:
    """The arguments and the environment `bash launcher *args` starts torchrun with, as
    launch_two_cpu_ranks runs it (a fixed port): a stand-in torchrun, first on PATH in the folder
    `stand_in`, records them. A launcher's only effect is that start (it ends in `exec torchrun`),
    so two launchers that start torchrun alike launch alike."""
    stand_in.mkdir(parents=True, exist_ok=True)
    torchrun = stand_in / "torchrun"
    torchrun.write_text(_RECORDING_TORCHRUN, encoding="utf-8")
    torchrun.chmod(0o755)
    record = stand_in / "record"
    env = _launch_env(29500, {**extra_env, "TORCHRUN_RECORD": str(record)}, path_first=stand_in)
    done = subprocess.run(
        ["bash", str(launcher), *args], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{launcher}: {done.stderr[-2000:]}"
    argv = Path(f"{record}.args").read_bytes().decode().split("\0")[:-1]
    lines = Path(f"{record}.env").read_bytes().decode().split("\0")
    return argv, dict(line.split("=", 1) for line in lines if line)


# What each rank runs: every job's training script in turn (runpy, as `python script args`
# would), on one gloo process group that the scripts find initialized. Torn down after the last
# job, and then the rank leaves at once (os._exit, its output flushed, every result file written
# and closed by then): the interpreter's own exit destroys what the three frameworks left behind,
# and a thread still running there can abort the rank ("terminate called without an active
# exception", exit code -6), which failed the launch now and then even after the teardown.
_RANK_PROGRAM = """\
import json, os, runpy, sys
import torch.distributed as dist

dist.init_process_group("gloo")
for script, *args in json.load(open(sys.argv[1])):
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""

# The order the jobs run in: torch's own first, the DeepSpeed engine (whose import patches
# torch's namespace) last.
JOB_ORDER = ("ddp", "fsdp2", "deepspeed")


@dataclass(frozen=True)
class TorchrunJob:
    """One training job of the shared torchrun launch. `plan(folder)` writes the plan's files to
    `folder` and returns the Plan; `train` is the training script, run on each rank as
    `python train.py <folder>/ds_config.json <result>` on an initialized gloo process group; rank
    0 writes its JSON result to <result>. `needs`: the modules the script imports (a job whose
    modules are absent is left out; its test skips or fails on them, consumer_support.consumer);
    `env`: variables the launch must set for it."""

    name: str
    plan: Callable[[Path], Any]
    train: str
    needs: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobOutcome:
    """What the shared launch did for one job: its Plan and folder, the launch (one for every
    job) and the job's result (None: none written)."""

    plan: Any
    folder: Path
    run: subprocess.CompletedProcess[str]
    result: dict[str, Any] | None


class TorchrunLaunch:
    """The jobs registered for the shared torchrun launch, launched once (module docstring)."""

    def __init__(self) -> None:
        self.jobs: dict[str, TorchrunJob] = {}
        self._outcomes: dict[str, JobOutcome | BaseException] | None = None

    def register(self, job: TorchrunJob) -> None:
        assert job.name in JOB_ORDER, f"{job.name}: not in JOB_ORDER"
        self.jobs[job.name] = job

    def outcome(self, name: str, root: Path) -> JobOutcome:
        """The outcome of job `name`, launching every registered job in `root` on first use; a
        job whose plan raised raises that here, and every job what the launch raised (it is not
        tried again)."""
        if self._outcomes is None:
            try:
                self._outcomes = self._launch(root)
            except Exception as exc:  # noqa: BLE001 - raised in each job's test
                self._outcomes = dict.fromkeys(JOB_ORDER, exc)
        found = self._outcomes[name]
        if isinstance(found, BaseException):
            raise found
        return found

    def _launch(self, root: Path) -> dict[str, JobOutcome | BaseException]:
        outcomes: dict[str, JobOutcome | BaseException] = {}
        ready: list[tuple[TorchrunJob, Any, Path]] = []
        for name in JOB_ORDER:
            job = self.jobs.get(name)
            if job is None or not all(importlib.util.find_spec(m) for m in job.needs):
                continue
            folder = root / name / "plan"
            folder.parent.mkdir(parents=True)
            try:
                ready.append((job, job.plan(folder), folder))
            except Exception as exc:  # noqa: BLE001 - raised in the job's own test
                outcomes[name] = exc
        if not ready:
            return outcomes
        env: dict[str, str] = {}
        for job, _, _ in ready:
            clash = {k for k in job.env if env.get(k, job.env[k]) != job.env[k]}
            assert not clash, f"{job.name} sets {sorted(clash)} otherwise than another job"
            env.update(job.env)
        jobs = []
        for job, _, folder in ready:
            script = root / job.name / "train.py"
            script.write_text(job.train, encoding="utf-8")
            result = root / job.name / "result.json"
            jobs.append([str(script), str(folder / "ds_config.json"), str(result)])
        (root / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
        (root / "ranks.py").write_text(_RANK_PROGRAM, encoding="utf-8")
        args = [str(root / "ranks.py"), str(root / "jobs.json")]
        # The first job's launcher runs them all: every other job's must start torchrun alike.
        launcher, stand_in = ready[0][2] / "launch_torchrun.sh", root / "stand-in"
        started = torchrun_invocation(launcher, args, stand_in, **env)
        for job, _, folder in ready[1:]:
            other = torchrun_invocation(folder / "launch_torchrun.sh", args, stand_in, **env)
            assert other == started, (
                f"{job.name}'s launch_torchrun.sh starts torchrun otherwise than {launcher}: "
                "launch it apart (launch_two_cpu_ranks)"
            )
        run = launch_two_cpu_ranks(launcher, args, timeout=480, **env)
        for job, plan, folder in ready:
            path = root / job.name / "result.json"
            result = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            outcomes[job.name] = JobOutcome(plan, folder, run, result)
        return outcomes


# The launch every torchrun job module registers with (one per test process).
TORCHRUN = TorchrunLaunch()
