"""Time the whole `parplan analyze GRAPH --json` command on large native graphs.

Writes ResNet-like graphs (conv -> bn -> relu -> matmul -> add, with a skip edge into each add)
of 10k, 30k and 100k nodes as JSON, runs the command in a fresh interpreter (wall clock, best of
`--repeat`, output discarded) and prints seconds and microseconds per node. Linear growth shows
as a flat "marginal" column: the extra time per extra node from one size to the next.
The target (issue 8) is <= 2 s for 100,000 nodes.

Run: python benchmarks/large_graph.py [--sizes 10000 30000 100000] [--repeat 3] [--phases]
[--profile]. `--phases` times the stages of one in-process run of the largest size (rules, graph,
analysis, JSON output); `--profile` prints the top of a cProfile of that run.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 2.0
BLOCK = ("Conv2d", "BatchNorm", "Activation", "MatMul", "Add")
SIZE = {"Conv2d": (36_864, 231_211_008), "BatchNorm": (128, 0), "Activation": (0, 0)}
SIZE |= {"MatMul": (4_194_304, 8_388_608), "Add": (0, 0)}


def graph_document(nodes: int) -> dict[str, object]:
    """A native graph of `nodes` nodes: a chain of blocks, each add also fed by its block input."""
    node_list: list[dict[str, object]] = []
    edges: list[list[str]] = []
    for i in range(nodes):
        op = BLOCK[i % len(BLOCK)]
        params, flops = SIZE[op]
        node_list.append({"id": f"n{i}", "op": op, "params": params, "flops": flops})
        if i:
            edges.append([f"n{i - 1}", f"n{i}"])
        start = i - len(BLOCK) + 1
        if op == "Add" and start > 0:
            edges.append([f"n{start - 1}", f"n{i}"])  # the residual edge
    return {"name": f"large-{nodes}", "nodes": node_list, "edges": edges}


def write_graph(folder: Path, nodes: int) -> Path:
    path = folder / f"large_{nodes}.json"
    path.write_text(json.dumps(graph_document(nodes), separators=(",", ":")), encoding="utf-8")
    return path


def command(path: Path) -> list[str]:
    return [sys.executable, "-m", "parplan_gen.cli.main", "analyze", str(path), "--json"]


def time_command(argv: list[str], repeat: int) -> float:
    """Best wall-clock seconds of `repeat` runs; a failing run is an error."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()}")
        best = min(best, elapsed)
    return best


def phases(path: Path) -> str:
    """Seconds spent in each stage of one in-process `analyze --json` (no interpreter start)."""
    start = time.perf_counter()
    from parplan_gen.models.graph import load_graph
    from parplan_gen.rules.engine import analyze
    from parplan_gen.rules.ruleset import load_rules

    marks = [("imports", time.perf_counter())]
    rules = load_rules()
    marks.append(("load_rules", time.perf_counter()))
    graph = load_graph(path)
    marks.append(("load_graph", time.perf_counter()))
    found = analyze(graph, rules)
    marks.append(("analyze", time.perf_counter()))
    for o in found:  # as the CLI prints it: one item per line
        json.dumps(o.as_dict(), ensure_ascii=False)
    marks.append(("json output", time.perf_counter()))
    previous, parts = start, []
    for name, at in marks:
        parts.append(f"{name} {at - previous:.3f} s")
        previous = at
    return "phases: " + ", ".join(parts)


def profile(path: Path, top: int = 25) -> str:
    """cProfile of one in-process run of the command, by cumulative time."""
    from parplan_gen.cli.main import main

    profiler = cProfile.Profile()
    real_stdout, sys.stdout = sys.stdout, io.StringIO()
    try:
        profiler.runcall(main, ["analyze", str(path), "--json"])
    finally:
        sys.stdout = real_stdout
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        startup = time_command(
            [sys.executable, "-m", "parplan_gen.cli.main", "--help"], args.repeat
        )
        print(f"interpreter + `parplan --help`: {startup:.3f} s")
        print(f"{'nodes':>8} {'seconds':>8} {'us/node':>8} {'marginal us/node':>17}")
        previous: tuple[int, float] | None = None
        seconds = 0.0
        for nodes in sorted(args.sizes):
            path = write_graph(Path(tmp), nodes)
            seconds = time_command(command(path), args.repeat)
            marginal = ""
            if previous is not None:
                marginal = f"{(seconds - previous[1]) / (nodes - previous[0]) * 1e6:17.2f}"
            print(f"{nodes:8d} {seconds:8.3f} {seconds / nodes * 1e6:8.2f} {marginal}")
            previous = (nodes, seconds)
        largest = max(args.sizes)
        verdict = "meets" if seconds <= TARGET_S else "MISSES"
        print(f"{largest} nodes: {seconds:.3f} s {verdict} the {TARGET_S} s target")
        if args.phases:
            print(phases(write_graph(Path(tmp), largest)))
        if args.profile:
            print(profile(write_graph(Path(tmp), largest)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
