"""The bad-input corpus (tests/bad_inputs/cases.yaml) through the real command line.

Every broken input gives exactly one line on stderr, exit 1 (bad input) or 2 (bad usage), no
exception out of `main`, nothing on stdout, and leaves the folder exactly as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_render import rendered_cases

from parplan_gen.cli.main import main

from hostile_support import snapshot

REPO = Path(__file__).resolve().parent.parent
CASES_FILE = REPO / "tests" / "bad_inputs" / "cases.yaml"
CASES: list[dict[str, Any]] = YAML(typ="safe").load(CASES_FILE.read_text(encoding="utf-8"))


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data[key]
    data[last] = value


def materialize(folder: Path, files: dict[str, Any]) -> None:
    """Write a case's files (see the head of cases.yaml) into `folder`."""
    for name, spec in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, str):
            path.write_bytes(spec.encode("utf-8"))
        elif "hex" in spec:
            path.write_bytes(bytes.fromhex(spec["hex"]))
        elif "repeat" in spec:
            text = spec.get("head", "") + spec["repeat"] * spec["times"] + spec.get("tail", "")
            path.write_bytes(text.encode("utf-8"))
        elif "sparse" in spec:
            with path.open("wb") as handle:
                handle.truncate(spec["sparse"])
        else:
            data = json.loads(
                rendered_cases()[spec["scenario"]]["plan.json"]
                if "scenario" in spec
                else (REPO / spec["copy"]).read_text(encoding="utf-8")
            )
            for dotted, value in spec.get("set", {}).items():
                _set(data, dotted, value)
            raw = spec.get("set_raw", {})
            for i, dotted in enumerate(raw):
                _set(data, dotted, f"@raw{i}@")
            text = json.dumps(data, indent=2)
            for i, value in enumerate(raw.values()):
                text = text.replace(f'"@raw{i}@"', value)
            path.write_text(text, encoding="utf-8")


def test_the_corpus_is_large_and_well_formed():
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len(CASES) >= 40
    inputs = {case_id.split(".")[0] for case_id in ids}
    assert inputs == {
        "graph",
        "onnx",
        "hf",
        "cluster",
        "rules",
        "flags",
        "plan_json",
        "from_deepspeed",
        "from_megatron",
    }
    for case in CASES:
        assert set(case) == {"id", "files", "argv", "exit", "stderr"}, case["id"]
        assert case["exit"] in (1, 2), case["id"]
        assert case["stderr"].startswith("parplan: error: "), case["id"]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_bad_input_gives_one_clear_line(case, tmp_path, monkeypatch, capsys):
    materialize(tmp_path, case["files"])
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)

    code = main([str(a) for a in case["argv"]])

    captured = capsys.readouterr()
    assert (code, captured.err) == (case["exit"], case["stderr"] + "\n")
    assert captured.out == ""
    assert snapshot(tmp_path) == before


def test_absurd_sizes_are_answered_at_once(tmp_path, capsys):
    """A 2^24-wide model on 8 GPUs: the advice stops at the GPU limit instead of searching
    divisors of 10^17 GPUs (which took minutes)."""
    config = json.loads((REPO / "examples" / "hf" / "llama-3-8b.json").read_text())
    config |= {"hidden_size": 1 << 24, "num_attention_heads": 1 << 10}
    config |= {"num_key_value_heads": 1 << 10}
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code = main(["plan", str(path), "--gpus", "8", "--gpu", "h100", "--global-batch", "8"])
    out = capsys.readouterr().out
    assert code == 3  # nothing fits: the view with its advice, then one error line
    assert "  - more GPUs: over 1048576 would be needed (the most parplan plans for)\n" in out
