"""Print how long `parplan plan` takes, stage by stage and as a whole command.

Run: python benchmarks/plan_speed.py [--repeat N]

The target (issue "parplan plan", DESIGN speed): the whole command
`parplan plan llama-3-405b --gpus 16384 --gpu h100 --global-batch 2048 --seq-len 8192` in
<= 1 s wall on a 2-core machine. Stages are timed in one process (best of N, wall and CPU), the
whole command in fresh processes (each pays the imports and the YAML loading again), with the
modules' bytecode cached as an installed package has it (the target's measure), and again
compiling every module from source, as a machine with PYTHONDONTWRITEBYTECODE set runs them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

COMMAND = [
    "plan", "llama-3-405b", "--gpus", "16384", "--gpu", "h100",
    "--global-batch", "2048", "--seq-len", "8192",
]  # fmt: skip
CLI_CODE = "import sys; from parplan_gen.cli.main import main; sys.exit(main(sys.argv[1:]))"
OTHER = [  # (model, gpus, gpu, global batch, seq len; None for a graph model)
    ("llama-3-8b", 8, "h100", 512, 8192),
    ("resnet-50", 64, "a100-80gb", 4096, None),  # op graph: its own cost model
    ("gpt3-175b", 1536, "a100-80gb", 1536, 2048),
    ("mixtral-8x7b", 64, "h100", 256, 4096),
    ("llama-3-405b", 8, "h100", 64, 8192),  # infeasible: closest candidate and advice
]


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(best wall s, best CPU s, last result) over `repeat` runs, each searching anew (the
    planner's memo of repeated requests is emptied before each)."""
    from parplan_gen.planning.planner import forget_searches

    walls, cpus, result = [], [], None
    for _ in range(repeat):
        forget_searches()
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def stages(repeat: int) -> None:
    """Each stage of the 405B command, in this process."""
    from parplan_gen.api import load_model, proposals_for
    from parplan_gen.cost.hardware import cluster_from_flags
    from parplan_gen.planning.planner import Planner
    from parplan_gen.planning.search_choices import SearchChoices, choose
    from parplan_gen.planning.search_space import Request, SearchOptions
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules()
    spec = load_model("llama-3-405b")
    cluster = cluster_from_flags(16384, "h100")
    chosen = choose(SearchChoices(), rules, spec, cluster, global_batch=2048, seq_len=8192)
    options = SearchOptions.for_model(spec, chosen)
    request = Request(spec, cluster, 2048, 8192, options=options)
    planner = Planner(rules)
    rows = [
        ("load_rules()", lambda: load_rules()),
        ("proposals (op graph + rules engine)", lambda: proposals_for(spec, cluster, rules, 8192)),
        ("Planner(rules)", lambda: Planner(rules)),
        ("search + top-5 estimates", lambda: planner.plan(request)),
    ]
    print(f"stages of `parplan {' '.join(COMMAND)}` (best of {repeat})")
    for label, fn in rows:
        wall, cpu, result = best_of(repeat, fn)
        print(f"  {label:<38} {wall * 1e3:8.1f} ms wall {cpu * 1e3:8.1f} ms CPU")
    result = planner.plan(request)
    print(
        f"  searched {result.searched:,} candidates, {result.evaluated:,} estimated, "
        f"{sum(result.rejected.values()):,} rejected under {len(result.rejected)} reasons"
    )


def others(repeat: int) -> None:
    """The search alone for other requests."""
    from parplan_gen.api import plan
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules()
    print(f"\napi.plan() with the rules loaded (best of {repeat})")
    for model, gpus, gpu, batch, seq in OTHER:
        wall, cpu, result = best_of(
            repeat,
            lambda m=model, n=gpus, g=gpu, b=batch, s=seq: plan(
                m, {"gpus": n, "gpu": g}, global_batch=b, seq_len=s, rules=rules
            ),
        )
        r = result
        print(
            f"  {model:<14} {gpus:>6} x {gpu:<10} {wall * 1e3:8.1f} ms wall "
            f"{cpu * 1e3:8.1f} ms CPU  searched {r.searched:>8,} estimated {r.evaluated:>6,}"
            f"  {'fits' if r.feasible else 'nothing fits (advice: ' + str(len(r.advice)) + ')'}"
        )


@dataclass(frozen=True)
class CommandTiming:
    """Wall seconds of one `parplan` command line run in fresh processes."""

    best_s: float
    worst_s: float
    returncode: int  # of the last run (a failing run stops the series)
    stderr: str


def _environment(bytecode: bool, cache: str) -> dict[str, str]:
    """The environment of a timed run. With `bytecode`, Python reads the modules' compiled
    bytecode from `cache` (PYTHONPYCACHEPREFIX, written by an untimed first run), as an
    installed package runs: pip compiles a wheel's modules at install, and an editable install
    writes them at the first import, unless PYTHONDONTWRITEBYTECODE is set, as some sandboxes
    and CI images do. Without, every module is compiled from source in every process."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = cache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def time_command(args: Sequence[str], repeat: int, *, bytecode: bool = True) -> CommandTiming:
    """Run `parplan ARGS` `repeat` times, each in a fresh process as a user runs it (paying
    the imports and the YAML loading again); stops at the first failure. `bytecode`: the
    modules' bytecode cached, as an installed package has it (`_environment`; one untimed run
    writes it first), else compiled from source in every run."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, not {repeat}")
    walls: list[float] = []
    runs: list[subprocess.CompletedProcess[str]] = []
    with tempfile.TemporaryDirectory(prefix="parplan-bytecode-") as cache:
        env = _environment(bytecode, cache)
        command = [sys.executable, "-c", CLI_CODE, *args]
        if bytecode:  # untimed: writes the bytecode the timed runs read
            subprocess.run(command, capture_output=True, env=env, check=False)
        for _ in range(repeat):
            start = time.perf_counter()
            runs.append(
                subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            )
            walls.append(time.perf_counter() - start)
            if runs[-1].returncode:
                break
    return CommandTiming(min(walls), max(walls), runs[-1].returncode, runs[-1].stderr.strip())


def whole_command(repeat: int) -> None:
    """The whole command and `parplan --help` in fresh processes, as a user runs them: with the
    bytecode cached (the target's measure), and compiling every module, as this machine runs
    them when PYTHONDONTWRITEBYTECODE is set."""
    for bytecode, label in ((True, "bytecode cached"), (False, "every module compiled")):
        run = time_command(COMMAND, repeat, bytecode=bytecode)
        if run.returncode:
            print(f"\nwhole command failed ({run.returncode}): {run.stderr[:200]}")
            return
        helped = time_command(["--help"], repeat, bytecode=bytecode)
        print(
            f"\n{label}: whole command, fresh process: best {run.best_s:.2f} s, "
            f"worst {run.worst_s:.2f} s; `parplan --help`: best {helped.best_s:.2f} s, "
            f"worst {helped.worst_s:.2f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    stages(args.repeat)
    others(args.repeat)
    whole_command(args.repeat)


if __name__ == "__main__":
    main()
