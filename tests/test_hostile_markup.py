"""Hostile text on its way to what people read (issue 31, class 3; tests/hostile/markup.yaml).

Free text from inputs (a graph's name, node ids and ops, `--rules` descriptions, settings and
reasons, every text of a plan.json) reaches plan.md and DIR/README.md only through
`safe_text.markdown`, and the terminal only through `safe_text.printable` and the views'
`printable_lines`: no raw HTML, remote image, link or code span in the Markdown, no control
character sent to the terminal, whichever command shows it. And plan.md shows a pin of 1 (or 0)
as the number it is, not as `true` (`false`).
"""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.cli.main import main
from parplan_gen.inputs.safe_text import markdown, printable, printable_lines
from parplan_gen.render.report_rows import pin_text

from hostile_support import REPO, corpus

CASES: list[dict[str, Any]] = corpus("markup.yaml")
TEXTS = [case["text"] for case in CASES]
BY_ID = {case["id"]: case["text"] for case in CASES}
# The graph's name (a name may hold no control character, and a title shows 200 characters).
NAME = " ".join(BY_ID[i] for i in ("html.script", "markdown.remote_image", "markdown.link"))
JOINED = " ~ ".join(TEXTS)  # every payload in one description and one reason
CLUSTER = ("--gpus", "8", "--gpu", "h100", "--global-batch", "64")
# Raw Markdown or HTML that no input may put into plan.md or README.md: a tag, comment or
# autolink; an image other than plan.md's two charts; an inline or reference link; an entity
# other than the `&amp;` and `&lt;` of the escaping.
RAW_MARKUP = re.compile(
    r"<[A-Za-z/!?]|!\[(?!Memory per GPU|Step time)|(?<!\\)\]\((?!plan_)|(?<!\\)\][\[:]"
    r"|&(?!amp;|lt;)#?\w+;"
)
CHART_IMAGES = 2


def _unsafe_chars(text: str) -> list[str]:
    """The characters of `text` a terminal would act on: controls (but the line feed) and
    format or line-break characters."""
    return [
        c
        for c in set(text)
        if c != "\n" and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
    ]


def _markup(text: str) -> list[str]:
    """Raw Markdown or HTML in `text` that no input should have put there."""
    return [m.group() for m in RAW_MARKUP.finditer(text)]


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _graph(name: str, ids: list[str]) -> str:
    """A chain graph (JSON, which YAML reads) that plans on 8 GPUs: a Conv2d, then one node per
    id; the second node's op is a payload too."""
    nodes = [
        {"id": "conv", "op": "Conv2d", "in_channels": 3, "out_channels": 64, "kernel": 3,
         "flops": 3538944, "params": 1792, "activation_elements": 65536},
        *({"id": i, "op": "Activation" if k else TEXTS[0], "flops": 65536,
           "activation_elements": 65536} for k, i in enumerate(ids)),
    ]  # fmt: skip
    edges = [list(pair) for pair in itertools.pairwise(["conv", *ids])]
    return json.dumps({"name": name, "nodes": nodes, "edges": edges})


def _rules(folder: Path, *, backend: str | None = None) -> Path:
    """A `--rules` overlay: a proposal whose description and settings hold every payload, and
    a constraint whose reason does (rejecting ZeRO-1, or every layout of `backend`)."""
    folder.mkdir(parents=True, exist_ok=True)
    quoted = json.dumps(JOINED)  # a YAML double-quoted string
    condition = f'backend: {backend}\n    require: "False"' if backend else (
        'when: "plan.zero_stage == 1"\n    require: "False"'
    )  # fmt: skip
    (folder / "hostile.yaml").write_text(
        "proposals:\n"
        "  - id: hostile.proposal\n    group: data\n    type: DataParallel\n"
        '    when: "graph.node_count > 1"\n    speedup: 2.0\n'
        "    settings:\n      mode: \"'<img src=http://evil.example/s.png>'\"\n"
        f"    description: {quoted}\n    source: tests/hostile/markup.yaml\n"
        "constraints:\n  - id: hostile.constraint\n"
        f"    {condition}\n    reason: {quoted}\n    severity: invalid\n"
        "    source: tests/hostile/markup.yaml\n",
        encoding="utf-8",
    )
    return folder


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The hostile graph and overlays, and the folder `plan --out` wrote from them (once)."""
    root = tmp_path_factory.mktemp("markup")
    graph = root / "graph.yaml"
    graph.write_text(_graph(NAME, TEXTS), encoding="utf-8")
    found = {"graph": graph, "rules": _rules(root / "rules"), "out": root / "plan"}
    for backend in ("deepspeed", "megatron"):
        found[f"{backend}_rules"] = _rules(root / f"{backend}_rules", backend=backend)
    argv = ["plan", graph, *CLUSTER, "--rules", found["rules"], "--tp", "1", "--out", found["out"]]
    assert main([str(a) for a in argv]) == 0
    return found


# ---- the two escapings, one payload at a time ---------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_markdown_shows_the_payload_as_typed_and_inert(case: dict[str, Any]) -> None:
    shown = markdown(case["text"])
    assert shown == case["markdown"]
    assert not _unsafe_chars(shown) and "\n" not in shown


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_the_terminal_shows_every_control_character_escaped(case: dict[str, Any]) -> None:
    assert printable(case["text"], limit=len(case["text"])) == case["terminal"]
    view = f"head\n{case['text']}\n"
    assert not _unsafe_chars(printable_lines(view))
    assert printable_lines(view).startswith("head\n") and printable_lines(view).endswith("\n")


def test_plain_views_are_written_as_they_are() -> None:
    view = "llama-3-8b (8.03B params) on 8 x h100\n  tp=1 pp=1 | 51.6%\n"
    assert printable_lines(view) is view


@pytest.mark.parametrize(("value", "shown"), [(1, "1"), (0, "0"), (8, "8"), (True, "true"),
                                               (False, "false"), ("full", "full")])  # fmt: skip
def test_a_pin_shows_as_its_value(value: object, shown: str) -> None:
    assert pin_text(value) == shown


# ---- plan.md and README.md ----------------------------------------------------------------------


def test_plan_md_holds_every_payload_escaped(hostile: dict[str, Path]) -> None:
    text = (hostile["out"] / "plan.md").read_text(encoding="utf-8")
    assert _markup(text) == [] and not _unsafe_chars(text)
    assert text.count("![") == CHART_IMAGES
    assert f"Model: {markdown(NAME)} (" in text
    assert "hostile.proposal" not in text  # the seed's proposals are plan.json's only
    assert f"| {markdown(JOINED)}" in text  # the rejected candidates
    assert "| pinned | tp=1 |" in text  # a pin of 1 is 1, not `true`


def test_render_of_a_hostile_plan_json_writes_no_markup(
    hostile: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every free text of a plan.json given to `parplan render`: the model's name, advice,
    warnings, rejection reasons, the proposals' text and settings, the headroom's source."""
    doc = json.loads((hostile["out"] / "plan.json").read_text(encoding="utf-8"))
    doc["model"]["name"] = BY_ID["html.remote_image"]
    doc["advice"] = [JOINED]
    doc["warnings"] = [JOINED]
    doc["rejected"] = {text: 1 for text in TEXTS}
    doc["proposals"][0] |= {"description": JOINED, "settings": {"mode": JOINED}}
    doc["search"]["headroom_source"] = JOINED
    (tmp_path / "plan.json").write_text(json.dumps(doc), encoding="utf-8")
    code, _, err = _run(capsys, "render", tmp_path / "plan.json", "--out", tmp_path / "o")
    assert code == 0, err
    text = (tmp_path / "o" / "plan.md").read_text(encoding="utf-8")
    assert _markup(text) == [] and not _unsafe_chars(text)
    assert text.count("![") == CHART_IMAGES
    assert f"- {markdown(JOINED)}\n" in text  # advice and warnings, each a list item
    for case in CASES:
        assert f"| {case['markdown']} | 1 |" in text  # each reason in its own table row


def test_plan_md_says_why_a_file_is_not_written_escaped(
    hostile: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An overlay refuses every Megatron-LM layout (ZeRO 0 pinned: one Megatron-LM would run
    but for it): plan.md says megatron_args.sh is not written and why, escaped."""
    argv = (
        "plan",
        "llama-3-8b",
        *CLUSTER,
        "--seq-len",
        "4096",
        "--zero",
        "0",
        "--out",
        tmp_path / "o",
    )
    code, _, err = _run(capsys, *argv, "--rules", hostile["megatron_rules"])
    assert code == 0, err
    text = (tmp_path / "o" / "plan.md").read_text(encoding="utf-8")
    assert _markup(text) == [] and not _unsafe_chars(text)
    assert (
        f"- megatron_args.sh: not written, Megatron-LM does not run this layout ({markdown(JOINED)})\n"
        in text
    )


def test_readme_of_all_backends_shows_the_model_escaped(
    hostile: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --all-backends --out DIR`: DIR/README.md is the text view, and names the model."""
    out = tmp_path / "all"
    code, view, err = _run(
        capsys, "plan", hostile["graph"], *CLUSTER, "--rules", hostile["rules"], "--all-backends",
        "--out", out,
    )  # fmt: skip
    assert code == 0, err
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert readme == view
    assert _markup(readme) == [] and not _unsafe_chars(readme)
    assert readme.startswith(f"{markdown(NAME)} (")


def test_readme_of_all_backends_shows_why_a_backend_runs_nothing_escaped(
    hostile: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An overlay refuses every DeepSpeed layout with the payloads as its reason: README.md
    says why DeepSpeed runs nothing, escaped."""
    out = tmp_path / "all"
    code, view, err = _run(
        capsys, "plan", "llama-3-8b", *CLUSTER, "--seq-len", "4096", "--rules",
        hostile["deepspeed_rules"], "--all-backends", "--out", out,
    )  # fmt: skip
    assert code == 0, err
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert readme == view
    assert _markup(readme) == [] and not _unsafe_chars(readme)
    assert (
        f"deepspeed: runs nothing: no layout of 8 GPUs can run llama-3-8b: {markdown(JOINED)}"
        in readme
    )


# ---- the terminal -------------------------------------------------------------------------------


def _commands(hostile: dict[str, Path]) -> dict[str, list[object]]:
    g, r = hostile["graph"], ("--rules", hostile["rules"])
    return {
        "analyze": ["analyze", g, *r],
        "propose": ["propose", g, "--devices", "8", *r],
        "plan": ["plan", g, *CLUSTER, *r, "--tp", "1"],
        "check": ["check", g, *CLUSTER, *r, "--dp", "8", "--zero", "1"],
        "compare": ["compare", g, *CLUSTER, *r, "--layout", "dp=8 zero=1"],
        "estimate": ["estimate", g, *CLUSTER, *r, "--dp", "8"],
        "rules list": ["rules", "list", *r],
        "rules explain": ["rules", "explain", g, *r, "--devices", "8"],
    }


@pytest.mark.parametrize(
    "command", ["analyze", "propose", "plan", "check", "compare", "estimate", "rules list",
                "rules explain"],
)  # fmt: skip
def test_no_view_sends_a_control_character(
    command: str, hostile: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, *_commands(hostile)[command])
    assert code in (0, 1), err  # `check` of a layout the overlay refuses exits 1
    assert out and not _unsafe_chars(out) and not _unsafe_chars(err)
    shown = out + err
    if command not in ("rules list", "estimate"):  # these show no payload text
        assert "\\x1b[2J\\x1b[Hall good" in shown and "\\x1b]0;pwned\\x07" in shown
    if command in ("analyze", "propose", "plan", "check", "compare", "rules explain"):  # one line
        assert "a\\x0a# heading" in shown and "\n# heading" not in shown


def test_a_proposal_cannot_take_the_header_line(
    hostile: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, *_commands(hostile)["propose"])
    lines = out.split("\n")
    assert code == 0
    assert lines[0] == f"Proposals for {NAME}: 19 nodes, 18 edges, depth 19 on 8 devices"
    assert lines[1] == ""
    mine = next(i for i, line in enumerate(lines) if "(rule hostile.proposal)" in line)
    assert lines[mine - 1].endswith(f"[DataParallel] 2.00x  {printable(JOINED, len(JOINED))}")


def test_benign_pins_of_one_and_zero_show_as_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = REPO / "examples" / "cnn_block.yaml"
    pins = ("--tp", "1", "--pp", "1", "--zero", "0")
    code, out, err = _run(capsys, "plan", graph, *CLUSTER, *pins, "--out", tmp_path / "o")
    assert code == 0, err
    assert "| pinned | tp=1 pp=1 zero_stage=0 |" in (tmp_path / "o" / "plan.md").read_text()
    assert "Search: pinned tp=1 pp=1 zero_stage=0; " in out
