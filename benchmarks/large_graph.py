"""Time `parplan analyze` on large native graphs: the whole command, its phases, its growth.

Two kinds of graph, written as JSON (and as YAML up to the YAML size cap):

* `chain`: ResNet-like blocks (conv -> bn -> relu -> matmul -> add, a skip edge into each add)
  whose nodes carry `params` and `flops`;
* `attrs`: nodes that carry six attributes (flops, params, activation_elements, out_features,
  a float and a string) and skip edges like residual connections: i -> i+1 for every node and
  i -> i+3 for every third.

The whole command runs as a user runs it, `parplan analyze FILE` (text) and `... --json`, in a
fresh interpreter (start-up included), best of `--repeat` wall-clock runs, output discarded.
The scaling table runs the text command at each of `--sizes` and prints the ratio of each time
to the one before it: linear growth reads 2.00 when the node count doubles. `--phases` times
the stages of one in-process run at the largest size (imports, rules, read + parse, node and
edge checks, DAG build with depth, levels and sums, the engine, text and JSON output);
`--profile` prints the top of a cProfile of the in-process text command. The target (issue 12)
is <= 2 s for the whole command on 100,000 `attrs` nodes. A benchmark prints figures; no test
asserts a time.

Run: python benchmarks/large_graph.py [--kind chain|attrs] [--sizes 25000 50000 100000 200000]
[--repeat 3] [--phases] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TARGET_S = 2.0
TARGET_NODES = 100_000
BLOCK = ("Conv2d", "BatchNorm", "Activation", "MatMul", "Add")
SIZE = {"Conv2d": (36_864, 231_211_008), "BatchNorm": (128, 0), "Activation": (0, 0)}
SIZE |= {"MatMul": (4_194_304, 8_388_608), "Add": (0, 0)}
ATTR_OPS = ("Conv2d", "BatchNorm", "Activation", "MatMul", "Add", "LayerNorm", "Softmax")
SKIP_EVERY, SKIP_SPAN = 3, 3  # every third node also feeds the node three places on
MIB = 1024 * 1024


def chain_document(nodes: int) -> dict[str, object]:
    """A chain of ResNet-like blocks, each add also fed by its block input."""
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
    return {"name": f"chain-{nodes}", "nodes": node_list, "edges": edges}


def attrs_document(nodes: int) -> dict[str, object]:
    """Nodes with six attributes each; edges i -> i+1 and, every third node, i -> i+3."""
    node_list: list[dict[str, object]] = []
    edges: list[list[str]] = []
    for i in range(nodes):
        node_list.append(
            {
                "id": f"n{i}",
                "op": ATTR_OPS[i % len(ATTR_OPS)],
                "flops": 1_000_000 * (i % 97 + 1),
                "params": 4096 * (i % 13),
                "activation_elements": 65_536 * (i % 7 + 1),
                "out_features": 256 * (i % 5 + 1),
                "dropout": 0.1,
                "dtype": "bf16",
            }
        )
        if i + 1 < nodes:
            edges.append([f"n{i}", f"n{i + 1}"])
        if i % SKIP_EVERY == 0 and i + SKIP_SPAN < nodes:
            edges.append([f"n{i}", f"n{i + SKIP_SPAN}"])  # the skip edge
    return {"name": f"attrs-{nodes}", "nodes": node_list, "edges": edges}


DOCUMENTS: dict[str, Callable[[int], dict[str, object]]] = {
    "chain": chain_document,
    "attrs": attrs_document,
}


def write_json(folder: Path, kind: str, nodes: int) -> Path:
    path = folder / f"{kind}_{nodes}.json"
    path.write_text(json.dumps(DOCUMENTS[kind](nodes), separators=(",", ":")), encoding="utf-8")
    return path


def yaml_text(doc: dict[str, object]) -> str:
    """The document as block YAML with one flow mapping per node and one flow list per edge."""
    lines = [f"name: {doc['name']}", "nodes:"]
    for node in doc["nodes"]:  # type: ignore[attr-defined]
        lines.append("  - {" + ", ".join(f"{k}: {v}" for k, v in node.items()) + "}")
    lines.append("edges:")
    lines += [f"  - [{a}, {b}]" for a, b in doc["edges"]]  # type: ignore[attr-defined]
    return "\n".join(lines) + "\n"


def write_largest_yaml(folder: Path, kind: str, cap: int) -> tuple[Path, int]:
    """The YAML graph of the most nodes (a multiple of 1,000) whose file fits under `cap`."""
    per_node = len(yaml_text(DOCUMENTS[kind](1000))) / 1000
    nodes = int(cap / per_node) // 1000 * 1000
    text = yaml_text(DOCUMENTS[kind](nodes))
    while len(text.encode()) > cap:
        nodes -= 1000
        text = yaml_text(DOCUMENTS[kind](nodes))
    path = folder / f"{kind}_{nodes}.yaml"
    path.write_text(text, encoding="utf-8")
    return path, nodes


def command(path: Path, *options: str) -> list[str]:
    """`parplan analyze PATH` in a fresh interpreter, allowing files over the graph cap."""
    mib = max(16, math.ceil(path.stat().st_size / MIB))
    cli = [sys.executable, "-m", "parplan_gen.cli.main", "--max-input-mib", str(mib)]
    return [*cli, "analyze", str(path), *options]


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


PHASES = """
import json, sys, time
from pathlib import Path
marks = [("start", time.perf_counter())]
from parplan_gen.cli.main import _opportunity_lines
from parplan_gen.cli.textview import opportunities_table
from parplan_gen.inputs.reading import input_limit
from parplan_gen.inputs.source import gc_paused, load_document
from parplan_gen.models.graph import build_graph, graph_parts
from parplan_gen.rules.engine import analyze
from parplan_gen.rules.ruleset import load_rules
marks.append(("imports", time.perf_counter()))
with gc_paused():
    rules = load_rules()
    marks.append(("rules", time.perf_counter()))
    doc = load_document(Path(sys.argv[1]), max_bytes=int(sys.argv[2]))
    marks.append(("read + parse", time.perf_counter()))
    name, nodes, edges = graph_parts(doc)
    marks.append(("node/edge checks", time.perf_counter()))
    graph = build_graph(name, nodes, edges, doc=doc)
    marks.append(("DAG build", time.perf_counter()))
    found = analyze(graph, rules)
    marks.append(("engine", time.perf_counter()))
    opportunities_table(graph, found)
    marks.append(("text output", time.perf_counter()))
    "\\n".join(_opportunity_lines(found))
    marks.append(("json output", time.perf_counter()))
print(json.dumps([[n, b - a] for (_, a), (n, b) in zip(marks, marks[1:])]))
"""


def phases(path: Path) -> str:
    """Seconds of each stage of one in-process run (a fresh interpreter, so imports count)."""
    limit = max(16, math.ceil(path.stat().st_size / MIB)) * MIB
    argv = [sys.executable, "-c", PHASES, str(path), str(limit)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    parts = json.loads(done.stdout)
    total = sum(seconds for _, seconds in parts)
    return ", ".join(f"{name} {seconds:.3f}" for name, seconds in parts) + f"; sum {total:.3f} s"


def profile(path: Path, top: int = 25) -> str:
    """cProfile of one in-process `parplan analyze PATH` (text), by internal time."""
    from parplan_gen.cli.main import main

    mib = str(max(16, math.ceil(path.stat().st_size / MIB)))
    profiler = cProfile.Profile()
    real_stdout, sys.stdout = sys.stdout, io.StringIO()
    try:
        profiler.runcall(main, ["--max-input-mib", mib, "analyze", str(path)])
    finally:
        sys.stdout = real_stdout
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def scaling(folder: Path, kind: str, sizes: list[int], repeat: int) -> dict[int, float]:
    """Print the text command's time at each size and its ratio to the size before."""
    print(f"{'nodes':>8} {'text s':>7} {'--json s':>8} {'us/node':>8} {'ratio':>6} {'nodes x':>7}")
    times: dict[int, float] = {}
    previous: tuple[int, float] | None = None
    for nodes in sorted(sizes):
        path = write_json(folder, kind, nodes)
        seconds = time_command(command(path), repeat)
        as_json = time_command(command(path, "--json"), repeat)
        ratio = growth = ""
        if previous is not None:
            ratio, growth = f"{seconds / previous[1]:6.2f}", f"{nodes / previous[0]:7.2f}"
        print(
            f"{nodes:8d} {seconds:7.3f} {as_json:8.3f} {seconds / nodes * 1e6:8.2f} {ratio} {growth}"
        )
        times[nodes] = seconds
        previous = (nodes, seconds)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(DOCUMENTS), default="attrs")
    parser.add_argument("--sizes", type=int, nargs="+", default=[25_000, 50_000, 100_000, 200_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    from parplan_gen.inputs.source import MAX_YAML_BYTES

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        startup = time_command([sys.executable, "-m", "parplan_gen.cli.main", "--help"], 1)
        print(f"interpreter + `parplan --help`: {startup:.3f} s")
        print(f"`{args.kind}` graphs as JSON, `parplan analyze FILE` (text) and `--json`:")
        times = scaling(folder, args.kind, args.sizes, args.repeat)
        if TARGET_NODES in times:
            seconds = times[TARGET_NODES]
            verdict = "meets" if seconds <= TARGET_S else "MISSES"
            print(f"{TARGET_NODES} nodes: {seconds:.3f} s {verdict} the {TARGET_S} s target")
        path, nodes = write_largest_yaml(folder, args.kind, MAX_YAML_BYTES)
        size = path.stat().st_size / MIB
        seconds = time_command(command(path), args.repeat)
        print(
            f"YAML at the {MAX_YAML_BYTES / MIB:g} MiB cap: {nodes} nodes ({size:.2f} MiB) ", end=""
        )
        print(f"{seconds:.3f} s")
        largest = write_json(folder, args.kind, max(args.sizes))
        if args.phases:
            print(f"phases at {max(args.sizes)} nodes (s): {phases(largest)}")
            print(f"phases of the YAML file (s): {phases(path)}")
        if args.profile:
            print(profile(largest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
