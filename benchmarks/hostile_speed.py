"""Print how long each hostile-input case takes to be refused (tests/hostile/).

Run: python benchmarks/hostile_speed.py [--repeat N] [--only PREFIX]

The test suite checks what each case prints, writes and allocates, and stops a run that never
ends (tests/hostile_support.HANG_S); it asserts no speed, because a busy machine makes any such
assertion flaky. The speed targets live here instead (issue 12):
- a hostile formula or template is refused within MARGIN_S of a harmless run of the
  same command (the harmless rules or template of tests/test_hostile.py);
- a hostile input, size or name is refused within INPUT_LIMIT_S (the defects took minutes).
Each case runs in this process through `parplan_gen.cli.main.main`, as the tests run it, best
of N. Exit status 1 when a case misses its target.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))  # the corpora's builders are the tests' own

import test_hostile  # noqa: E402

from parplan_gen.cli.main import main as cli  # noqa: E402

from hostile_support import HOSTILE, materialize, memory_ceiling, text  # noqa: E402

MARGIN_S = 0.100  # over a harmless run of the same command
INPUT_LIMIT_S = 5.0  # a refusal takes milliseconds; the defects took minutes, or forever
Case = tuple[str, Callable[[Path], list[str]], dict[str, str]]  # id, setup -> argv, env


@contextlib.contextmanager
def quiet_in(folder: Path, env: dict[str, str]) -> Iterator[None]:
    """Run in `folder` with `env` added and PARPLAN_MAX_INPUT_MIB unset, output discarded."""
    saved_cwd, saved_env = Path.cwd(), dict(os.environ)
    os.chdir(folder)
    os.environ.pop("PARPLAN_MAX_INPUT_MIB", None)
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def timed(setup: Callable[[Path], list[str]], env: dict[str, str], repeat: int) -> float:
    """Best wall time of `repeat` runs, each in a fresh folder that `setup` fills."""
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            argv = setup(folder)
            with quiet_in(folder, env), memory_ceiling():
                start = time.perf_counter()
                cli(argv)
                best = min(best, time.perf_counter() - start)
    return best


def _rules(folder: Path, case: dict[str, Any]) -> None:
    (folder / "h").mkdir()
    (folder / "h" / "rules.yaml").write_text(test_hostile.rule_file(case), encoding="utf-8")


def formula_cases() -> Iterator[tuple[str, str, Callable[[Path], list[str]]]]:
    """(id, command, setup) of each hostile formula; "harmless" cases first, one per command."""

    def setup(case: dict[str, Any], command: str) -> Callable[[Path], list[str]]:
        def build(folder: Path) -> list[str]:
            _rules(folder, case)
            return [*test_hostile.COMMANDS[command], "--rules", "h"]

        return build

    for case in test_hostile.FORMULAS:
        command = case.get("command", "propose")
        yield case["id"], command, setup(case, command)
    for command in test_hostile.COMMANDS:
        yield "harmless", command, setup({}, command)


def template_setup(files: dict[str, Any]) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        (folder / "plan.json").write_text(test_hostile.PLAN_JSON, encoding="utf-8")
        test_hostile._write_templates(folder / "t", files)
        return ["render", "plan.json", "--out", "out", "--templates", "t"]

    return build


def input_cases(pattern: str) -> Iterator[Case]:
    """(id, setup, env) of each case of tests/hostile/<pattern> (inputs*.yaml, sizes*.yaml)."""
    for path in sorted(HOSTILE.glob(pattern)):
        for case in YAML(typ="safe").load(path.read_text(encoding="utf-8")):

            def build(folder: Path, case: dict[str, Any] = case) -> list[str]:
                materialize(folder, case.get("files", {}))
                return [text(a) for a in case["argv"]]

            yield case["id"], build, case.get("env", {})


# Distinct node names: the 32,768 (~30 s when the duplicate check was quadratic), and
# as many as a cluster file under the 2 MiB YAML cap holds (~1.8 MB; 4 GPUs per node: 2^20 GPUs).
NODE_LISTS = ((32_768, 8), (262_140, 4))
LINEAR_SLACK = 1.5  # a longer list may cost this much more per name (a quadratic step: 8x)


def node_name_cases() -> Iterator[tuple[str, Callable[[Path], list[str]]]]:
    """(id, setup) of `plan --out` on a cluster file naming many distinct nodes."""
    for count, per_node in NODE_LISTS:

        def build(folder: Path, count: int = count, per_node: int = per_node) -> list[str]:
            names = ",".join(f"n{i:05x}" for i in range(count))
            text = f"gpu: h100\ngpus_per_node: {per_node}\nnode_names: [{names}]\n"
            (folder / "c.yaml").write_text(text, encoding="utf-8")
            batch = str(count * per_node)
            return ["plan", "llama-3-8b", "--cluster", "c.yaml", "--global-batch", batch,
                    "--seq-len", "2048", "--out", "out"]  # fmt: skip

        yield f"values.names.{count}_distinct_node_names", build


def report(label: str, seconds: float, limit: float, note: str = "") -> bool:
    """Print one row; True when it is within its limit."""
    ok = seconds < limit
    print(f"{seconds * 1e3:9.1f} ms  {'ok  ' if ok else 'SLOW'}  {label}{note}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best counts")
    parser.add_argument("--only", default="", help="only the cases whose id starts with this")
    args = parser.parse_args(argv)
    slow = 0

    print(f"hostile formulas (target: a harmless run + {MARGIN_S * 1e3:.0f} ms)")
    cases = list(formula_cases())
    harmless = {
        cmd: timed(build, {}, args.repeat) for key, cmd, build in cases if key == "harmless"
    }
    for command, seconds in harmless.items():
        print(f"{seconds * 1e3:9.1f} ms  base  harmless {command}")
    for key, command, build in cases:
        if key != "harmless" and key.startswith(args.only):
            seconds = timed(build, {}, args.repeat)
            over = f"  ({(seconds - harmless[command]) * 1e3:+.1f} ms over harmless {command})"
            slow += not report(key, seconds, harmless[command] + MARGIN_S, over)

    print(f"\nhostile templates (target: a harmless render + {MARGIN_S * 1e3:.0f} ms)")
    base = timed(
        template_setup({"launch/hostfile.j2": {"file": "harmless_hostfile.j2"}}), {}, args.repeat
    )
    print(f"{base * 1e3:9.1f} ms  base  harmless render")
    for case in test_hostile.TEMPLATES:
        if case["id"].startswith(args.only):
            seconds = timed(template_setup(case["files"]), {}, args.repeat)
            over = f"  ({(seconds - base) * 1e3:+.1f} ms over harmless render)"
            slow += not report(case["id"], seconds, base + MARGIN_S, over)

    for pattern in ("inputs*.yaml", "sizes*.yaml", "values*.yaml"):
        print(f"\nhostile {pattern} (target: under {INPUT_LIMIT_S:g} s)")
        for key, build, env in input_cases(pattern):
            if key.startswith(args.only):
                slow += not report(key, timed(build, env, args.repeat), INPUT_LIMIT_S)

    print(
        f"\nlong lists of node names, planned and written (target: the first under "
        f"{INPUT_LIMIT_S:g} s, the next linear: within {LINEAR_SLACK:g}x its share of the first)"
    )
    first: tuple[int, float] | None = None
    for (key, build), (count, _) in zip(node_name_cases(), NODE_LISTS, strict=True):
        if key.startswith(args.only):
            seconds = timed(build, {}, args.repeat)
            limit = INPUT_LIMIT_S if first is None else first[1] * count / first[0] * LINEAR_SLACK
            first = first or (count, seconds)
            slow += not report(key, seconds, limit, f"  ({seconds / count * 1e6:.1f} us per name)")

    print(f"\n{slow} case(s) over their target")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
