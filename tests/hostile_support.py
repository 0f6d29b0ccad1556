"""What the hostile-input tables share: building a case's files, bounding a run's memory, a hang
guard, and the one check every refusal passes (one printable line on stderr, nothing on stdout).

No test here measures speed: `hang_guard` only turns a run that never ends into a failure.
How long each case takes is printed by `python benchmarks/hostile_speed.py`."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.inputs.safe_text import printable

REPO = Path(__file__).resolve().parent.parent
HOSTILE = REPO / "tests" / "hostile"
PREFIX = "parplan: error: "
HEADROOM = 1024 * 1024 * 1024  # address space a run may add before allocations fail
HANG_S = 30.0  # a watchdog, not a speed target: a refusal takes milliseconds, a defect forever


def corpus(name: str) -> list[dict[str, Any]]:
    """The cases of tests/hostile/NAME (a YAML list)."""
    from ruamel.yaml import YAML

    return YAML(typ="safe").load((HOSTILE / name).read_text(encoding="utf-8"))


def text(spec: Any) -> str:
    """An argument or a file's text: as written, or {repeat: T, times: N, head, tail}."""
    if isinstance(spec, str):
        return spec
    return spec.get("head", "") + spec["repeat"] * spec["times"] + spec.get("tail", "")


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder)."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


def graph_json(spec: dict[str, Any]) -> str:
    """A chain graph of spec["graph"] nodes and the extra nodes and edges, JSON with indent 1."""
    n = spec["graph"]
    nodes = [{"id": f"n{i}", "op": "A"} for i in range(n)] + spec.get("extra_nodes", [])
    edges = [[f"n{i}", f"n{i + 1}"] for i in range(n - 1)] + spec.get("extra_edges", [])
    return json.dumps({"nodes": nodes, "edges": edges}, indent=1)


def onnx_chain(path: Path, count: int) -> None:
    """An ONNX model of `count` Relu nodes in a chain (skips the test without `onnx`)."""
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    nodes = [h.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(count)]
    graph = h.make_graph(
        nodes,
        "chain",
        [h.make_tensor_value_info("t0", onnx.TensorProto.FLOAT, ["batch", 4])],
        [h.make_tensor_value_info(f"t{count}", onnx.TensorProto.FLOAT, None)],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))


def materialize(folder: Path, files: dict[str, Any]) -> None:
    """Make a case's files. A file is text, {repeat...} (see `text`), {sparse: BYTES} (a hole,
    never filled), {fifo: true}, {link: TARGET}, {folder: true}, {hex: BYTES}, {graph: N, ...}
    (see `graph_json`), {onnx_chain: N}, {json: DATA} or {copy: PATH-IN-REPO, set: {k: v}} (a
    JSON file of the repository with top-level keys set)."""
    for name, spec in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not isinstance(spec, dict) or "repeat" in spec:
            path.write_bytes(text(spec).encode("utf-8"))
        elif "sparse" in spec:
            with path.open("wb") as handle:
                handle.truncate(spec["sparse"])
        elif "fifo" in spec:
            os.mkfifo(path)
        elif "link" in spec:
            path.symlink_to(spec["link"])
        elif "folder" in spec:
            path.mkdir()
        elif "hex" in spec:
            path.write_bytes(bytes.fromhex(spec["hex"]))
        elif "graph" in spec:
            path.write_text(graph_json(spec), encoding="utf-8")
        elif "json" in spec:
            path.write_text(json.dumps(spec["json"]), encoding="utf-8")
        elif "copy" in spec:
            data = json.loads((REPO / spec["copy"]).read_text(encoding="utf-8"))
            path.write_text(json.dumps(data | spec["set"], indent=2), encoding="utf-8")
        else:
            onnx_chain(path, spec["onnx_chain"])


@contextlib.contextmanager
def hang_guard(seconds: float = HANG_S) -> Iterator[None]:
    """A run still going after `seconds` (reading a FIFO, waiting on a lock, a runaway loop)
    fails with TimeoutError instead of hanging the suite (SIGALRM: the main thread only)."""

    def stop(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _mapped_bytes() -> int | None:
    """The process's address space now (Linux), or None where it cannot be read."""
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return None


@contextlib.contextmanager
def memory_ceiling() -> Iterator[None]:
    """Cap the address space at what is mapped now plus HEADROOM: a blow-up becomes a
    MemoryError that fails the test instead of exhausting the machine."""
    mapped = _mapped_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if mapped is None or (soft != resource.RLIM_INFINITY and soft < mapped + HEADROOM):
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (mapped + HEADROOM, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def check_one_line(case: dict[str, Any], code: int, out: str, err: str) -> str:
    """The run ended as `case` says: its exit code, nothing on stdout and exactly its one
    printable error line on stderr (an `expected...` line is checked up to the cut). Returns
    the line."""
    line = err.removesuffix("\n")
    expected = text(case["stderr"])
    if expected.endswith("..."):  # a cut line: its start, then the note of what was left out
        assert line.startswith(PREFIX + expected.removesuffix("...")), line[:300]
        assert " more characters)" in line
    else:
        assert line == PREFIX + expected
    assert (code, out, err.count("\n")) == (case["exit"], "", 1)
    assert printable(line, len(line)) == line, "a control character reached the terminal"
    return line


def refused_in_one_line(
    case: dict[str, Any], folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> str:
    """Run a corpus case (`argv`, optional `files`) in `folder` under the hang guard: it ends as
    `check_one_line` says and leaves the folder as it was. Returns the error line."""
    from parplan_gen.cli.main import main

    materialize(folder, case.get("files", {}))
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    with hang_guard():
        code = main([text(a) for a in case["argv"]])
    out, err = capsys.readouterr()
    line = check_one_line(case, code, out, err)
    assert snapshot(folder) == before
    return line
