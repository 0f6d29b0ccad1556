"""Hostile input files (tests/hostile/inputs*.yaml) through the real command line: inputs that
were slow or huge within the limits (YAML alias and merge-key bombs, errors deep in big JSON
graphs, oversized ONNX models), links out of a rules directory, and model paths that are no
regular file (a named pipe, /dev/zero).

Each case is refused with exit 1 (bad input) or 2 (bad usage), one line on stderr that holds no
control character, nothing on stdout, nothing written, and without the process's peak memory
growing by more than MAX_GROWTH (the defects took minutes and gigabytes, or waited forever on a
pipe: a run that never ends fails at the hang guard, hostile_support.HANG_S). How long each case
takes is printed by `python benchmarks/hostile_speed.py`, not asserted here.
"""

from __future__ import annotations

import contextlib
import stat
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from parplan_gen.cli.main import main

from hostile_support import (
    HOSTILE,
    check_one_line,
    hang_guard,
    materialize,
    memory_ceiling,
    onnx_chain,
    peak_rss,
    text,
)

CASES: list[dict[str, Any]] = [
    case
    for path in sorted(HOSTILE.glob("inputs*.yaml"))
    for case in YAML(typ="safe").load(path.read_text(encoding="utf-8"))
]
MAX_GROWTH = 128 * 1024 * 1024  # bytes the peak RSS may grow by in one case (a defect: GBs)
KINDS = {"yaml", "flags", "json", "onnx", "model", "rules"}


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `folder` with its type, size and change time, links and pipes not
    followed or opened."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        found[path.relative_to(folder).as_posix()] = (
            stat.S_IFMT(info.st_mode),
            info.st_size,
            info.st_mtime_ns,
        )
    return found


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import and load once what the cases use, so that a case's memory growth is its own."""
    folder = tmp_path_factory.mktemp("warm")
    materialize(folder, {"g.json": {"graph": 30_000}, "r/x.yaml": "disable: []\n"})
    assert main(["analyze", str(folder / "g.json"), "--rules", str(folder / "r")]) == 0
    assert main(["plan", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "8"]) == 0
    with contextlib.suppress(pytest.skip.Exception):
        onnx_chain(folder / "m.onnx", 2)
        assert main(["analyze", str(folder / "m.onnx")]) == 0


def test_the_corpus_is_large_and_well_formed() -> None:
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len(CASES) >= 40
    assert {i.split(".")[0] for i in ids} == KINDS
    for case in CASES:
        assert {"id", "argv", "exit", "stderr"} <= set(case) <= {
            "id", "files", "env", "argv", "exit", "stderr",
        }, case["id"]  # fmt: skip
        assert case["exit"] in (1, 2), case["id"]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_hostile_input_is_refused_at_once_in_one_line(case, warm, tmp_path, monkeypatch, capsys):
    materialize(tmp_path, case.get("files", {}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARPLAN_MAX_INPUT_MIB", raising=False)
    for name, value in case.get("env", {}).items():
        monkeypatch.setenv(name, value)
    before, peak = snapshot(tmp_path), peak_rss()
    capsys.readouterr()

    with memory_ceiling(), hang_guard():
        code = main([text(a) for a in case["argv"]])

    out, err = capsys.readouterr()
    line = check_one_line(case, code, out, err)
    assert "secret" not in line  # a file outside a rules directory is never read
    growth = peak_rss() - peak
    assert growth < MAX_GROWTH, f"peak memory grew by {growth / 2**20:.0f} MiB"
    assert snapshot(tmp_path) == before
