"""Hostile formulas and templates (tests/hostile/) through the real command line.

Each payload is refused when it is loaded or stopped when it runs, with one clear line on
stderr and exit 1, without the process growing by more than MAX_GROWTH, without creating the
MARKER file any payload aims at, and without writing anything. A run that never ends fails at
the hang guard (hostile_support.HANG_S); how long each payload takes next to a harmless run of
the same command is printed by `python benchmarks/hostile_speed.py`, not asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_render import rendered_cases

from parplan_gen.cli.main import main

from hostile_support import HOSTILE, REPO, hang_guard, memory_ceiling, peak_rss, snapshot

FORMULAS: list[dict[str, Any]] = YAML(typ="safe").load(
    (HOSTILE / "formulas.yaml").read_text(encoding="utf-8")
)
TEMPLATES: list[dict[str, Any]] = YAML(typ="safe").load(
    (HOSTILE / "templates.yaml").read_text(encoding="utf-8")
)
PLAN_JSON = rendered_cases()["single_node"]["plan.json"]  # test_render's scenario
MARKER = "MARKER"
MAX_GROWTH = 64 * 1024 * 1024  # bytes the process's peak may grow by during one payload
COMMANDS = {
    "propose": ["propose", str(REPO / "examples" / "tiny_mlp.yaml"), "--devices", "8"],
    "analyze": ["analyze", str(REPO / "examples" / "tiny_mlp.yaml")],
    "plan": ["plan", "llama-2-7b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64"],
    "estimate": [
        "estimate", "llama-2-7b", "--gpus", "8", "--gpu", "h100", "--tp", "1", "--pp", "1",
        "--mbs", "1", "--global-batch", "64",
    ],
}  # fmt: skip


# ---- building the inputs ---------------------------------------------------------------------


def payload_text(spec: Any) -> str:
    """A payload: text, or one of the generators described at the head of formulas.yaml."""
    if isinstance(spec, str):
        return spec
    if "wrap" in spec:
        opening, closing = spec["wrap"]
        body = opening * spec["times"] + spec["inner"] + closing * spec["times"]
    elif "join" in spec:
        body = spec["join"].join([spec["item"]] * spec["times"])
    else:
        body = spec["repeat"] * spec["times"]
    return spec.get("head", "") + body + spec.get("tail", "")


def named_formulas(spec: dict[str, Any]) -> dict[str, str]:
    if "chain" in spec:
        start = spec.get("chain_start", "graph.depth")
        return {"f0": start, **{f"f{i}": f"f{i - 1} + 1" for i in range(1, spec["chain"] + 1)}}
    if "diamond" in spec:
        n, op = spec["diamond"], spec.get("op", "+")
        start = spec.get("diamond_start", "graph.depth")
        return {"f0": start, **{f"f{i}": f"f{i - 1} {op} f{i - 1}" for i in range(1, n + 1)}}
    if "hub" in spec:  # 36 chains of 62 links, their sum, and N formulas that use the sum
        links = {
            f"c{c}_{i}": f"c{c}_{i - 1}" if i else "graph.depth"
            for c in range(36)
            for i in range(62)
        }
        hub = " + ".join(f"c{c}_61" for c in range(36))
        return {**links, "hub": hub, **{f"t{k}": "hub" for k in range(spec["hub"])}}
    if "wide" in spec:
        sums = {f"w{i}": " + ".join(["graph.depth"] * 60) for i in range(spec["wide"])}
        return {**sums, "wide": " + ".join(sums)}
    return {name: payload_text(value) for name, value in spec.items()}


def rule_file(case: dict[str, Any]) -> str:
    """rules.yaml for a case: the proposal first (so that its lines never move), then the rest,
    cost-model figures (`estimate.<section>.<key>`) last."""
    sections: dict[str, dict[str, Any]] = {
        "proposal": {
            "id": "hostile.p", "group": "data", "type": "DataParallel", "when": "true",
            "speedup": 1.5, "description": "hostile", "settings": {"dp": 2},
        },
        "constraint": {"id": "hostile.c", "require": "true", "reason": "hostile"},
        "opportunity": {
            "id": "hostile.o", "op": "MatMul", "type": "DataParallel", "min_devices": 2,
            "memory_per_device": 1, "communication_overhead": 0.1, "speedup": 1.5,
        },
        "estimate": {},
    }  # fmt: skip
    used = {"proposal"}
    for dotted, value in case.get("set", {}).items():
        section, *path = dotted.split(".")
        used.add(section)
        target = sections[section]
        if section == "estimate":
            target = target.setdefault(path[0], {})
            path = path[1:]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = payload_text(value)
    lines = ["proposals:", *_item(sections["proposal"])]
    if "constraint" in used:
        lines += ["constraints:", *_item(sections["constraint"])]
    if "opportunity" in used:
        lines += ["opportunities:", *_item(sections["opportunity"])]
    if "formulas" in case:
        lines.append("formulas:")
        lines += [f"  {name}: {_scalar(v)}" for name, v in named_formulas(case["formulas"]).items()]
    if "estimate" in used:
        lines.append("estimate:")
        for figures, formulas in sections["estimate"].items():
            lines += [f"  {figures}:", *(f"    {k}: {_scalar(v)}" for k, v in formulas.items())]
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON scalar is a YAML flow scalar


def _item(fields: dict[str, Any]) -> list[str]:
    lines = []
    for i, (key, value) in enumerate(fields.items()):
        lead = "  - " if i == 0 else "    "
        if isinstance(value, dict):
            lines.append(f"{lead}{key}:")
            lines += [f"      {k}: {_scalar(v)}" for k, v in value.items()]
        else:
            lines.append(f"{lead}{key}: {_scalar(value)}")
    return lines


# ---- running one payload ---------------------------------------------------------------------


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, growth of the peak RSS in bytes) of one run, under the hang
    guard and the memory ceiling."""
    capsys.readouterr()
    before = peak_rss()
    with memory_ceiling(), hang_guard():
        code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err, peak_rss() - before


def check_refused(argv: list[str], expected: str, folder: Path, capsys: Any) -> None:
    before = snapshot(folder)
    code, out, err, growth = run(argv, capsys)
    assert (code, err) == (1, f"parplan: error: {expected}\n")
    assert out == ""
    assert growth < MAX_GROWTH, f"peak memory grew by {growth / 2**20:.0f} MiB"
    assert not (folder / MARKER).exists()
    assert snapshot(folder) == before


# ---- formulas --------------------------------------------------------------------------------


def _formula_case(case: dict[str, Any]) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=case["xfail"])] if "xfail" in case else []
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_formula_case(c) for c in FORMULAS])
def test_hostile_formula_is_refused_or_stopped(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "rules.yaml").write_text(rule_file(case), encoding="utf-8")
    argv = [*COMMANDS[case.get("command", "propose")], "--rules", "h"]
    check_refused(argv, case["error"], tmp_path, capsys)


@pytest.mark.parametrize("case", [_formula_case(c) for c in FORMULAS if c.get("check")])
def test_rules_check_reports_the_load_errors(case, tmp_path, monkeypatch, capsys):
    """`parplan rules check` names the same problem (a load error) at the same place."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "rules.yaml").write_text(rule_file(case), encoding="utf-8")
    code, out, err, _ = run(["rules", "check", "h"], capsys)
    assert (code, err) == (1, "")
    assert out == f"{case['error']}\nchecked 1 rule file in h: 1 error\n"


# ---- templates -------------------------------------------------------------------------------


def _write_templates(folder: Path, files: dict[str, Any]) -> None:
    for name, spec in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, dict) and "hex" in spec:
            path.write_bytes(bytes.fromhex(spec["hex"]))
        elif isinstance(spec, dict) and "sparse" in spec:
            with path.open("wb") as handle:
                handle.truncate(spec["sparse"])
        elif isinstance(spec, dict) and "file" in spec:
            path.write_bytes((HOSTILE / "templates" / spec["file"]).read_bytes())
        else:
            path.write_text(payload_text(spec), encoding="utf-8")


@pytest.mark.parametrize("case", TEMPLATES, ids=[c["id"] for c in TEMPLATES])
def test_hostile_template_is_refused_or_stopped(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text(PLAN_JSON, encoding="utf-8")
    _write_templates(tmp_path / "t", case["files"])
    argv = ["render", "plan.json", "--out", "out", "--templates", "t"]
    check_refused(argv, case["error"], tmp_path, capsys)
    assert not (tmp_path / "out").exists()


def test_the_corpora_are_large_enough():
    assert len(FORMULAS) + len(TEMPLATES) >= 40
    ids = [c["id"] for c in FORMULAS] + [c["id"] for c in TEMPLATES]
    assert len(ids) == len(set(ids))
    referenced = {
        spec["file"]
        for case in TEMPLATES
        for spec in case["files"].values()
        if isinstance(spec, dict) and "file" in spec
    }
    assert referenced | {"harmless_hostfile.j2"} == {
        p.name for p in (HOSTILE / "templates").glob("*.j2")
    }


# ---- non-finite numbers never reach JSON output ----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [*COMMANDS["plan"], "--json"],
        [*COMMANDS["estimate"], "--json"],
        [*COMMANDS["propose"], "--json"],
    ],
    ids=["plan", "estimate", "propose"],
)
def test_a_non_finite_formula_is_an_error_not_invalid_json(argv, tmp_path, capsys):
    rules = tmp_path / "r" / "rules.yaml"
    rules.parent.mkdir()
    rules.write_text(
        'estimate:\n  time:\n    compute_s: "1e308 * 10"\n'
        + rule_file({"set": {"proposal.speedup": "1e308 * 10"}}),
        encoding="utf-8",
    )
    code, out, err, _ = run([*argv, "--rules", str(tmp_path / "r")], capsys)
    assert (code, out, err.count("\n")) == (1, "", 1)
