"""docs/rules.md against the code: its tables are checked against the one declaration of the
vocabulary and the rule schema, and its tutorials run, command by command, through the CLI."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from pydantic import BaseModel

from parplan_gen.cli.main import build_parser
from parplan_gen.rules import schema as rules_schema
from parplan_gen.rules import units, vocabulary

from conftest import REPO

DOC = REPO / "docs" / "rules.md"
TEXT = DOC.read_text(encoding="utf-8")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def table(marker: str) -> list[list[str]]:
    """The rows (cells without backticks) of the table right after `<!-- marker -->`."""
    lines = TEXT.split(f"<!-- {marker} -->\n", 1)[1].splitlines()
    rows = []
    for line in lines[2:]:  # the header and the |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip().replace("`", "") for cell in line.strip("|").split(" | ")])
    return rows


def _models_cell(models: tuple[str, ...]) -> str:
    """The *models* column: `any` for every kind of model, else the kinds in declared order."""
    assert models and len(set(models)) == len(models), models
    if set(models) == set(vocabulary.MODEL_KINDS):
        return "any"
    return ", ".join(models)


def test_names_table_is_the_vocabulary():
    rows = table("names")
    assert all(len(row) == 6 for row in rows), "name | type | unit | contexts | models | meaning"
    documented = {row[0]: tuple(row[1:5]) for row in rows}
    assert len(documented) == len(rows), "each name once"
    declared = {
        n.name: (
            n.kind,
            n.unit,
            ", ".join(c for c, spaces in vocabulary.CONTEXTS.items() if n.namespace in spaces),
            _models_cell(n.models),
        )
        for n in vocabulary.NAMES
    }
    assert documented == declared
    assert all(row[5] for row in rows), "every name has a meaning"


def test_only_model_names_depend_on_the_kind_of_model():
    """As docs/rules.md says: only model.* names lack a value for some kind of model."""
    for n in vocabulary.NAMES:
        if n.namespace != "model":
            assert set(n.models) == set(vocabulary.MODEL_KINDS), n.name


def test_functions_table_is_the_vocabulary():
    documented = {row[0]: row[1] for row in table("functions")}
    assert documented == {f.signature: f.returns for f in vocabulary.FUNCTIONS}


def test_units_table_is_the_vocabulary():
    documented = {row[0]: row[1] for row in table("units")}
    assert documented == {unit: meaning.replace("`", "") for unit, meaning in units.UNITS.items()}


def test_constants_table_is_the_vocabulary():
    documented = {row[0]: row[1] for row in table("constants")}
    shown = {True: "true", False: "false"}
    assert documented == {
        name: shown[value] if isinstance(value, bool) else str(value)
        for name, value in vocabulary.CONSTANTS.items()
    }


def test_the_explain_example_is_what_explain_prints():
    section = TEXT.split("<!-- explain example -->\n", 1)[1]
    (code, shown) = [body for _, body in BLOCK.findall(section)[:2]]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, {})  # the documented call, as written

    def lines(text: str) -> str:  # the example's `file:line`s move as the rule files change
        return re.sub(r"\.yaml:\d+", ".yaml:N", text)

    assert lines(printed.getvalue()) == lines(shown + "\n")


def test_contexts_table_is_the_vocabulary():
    documented = {
        row[0]: {name.removesuffix(".*") for name in row[2].split(", ")}
        for row in table("contexts")
    }
    assert documented == {c: set(spaces) for c, spaces in vocabulary.CONTEXTS.items()}


@pytest.mark.parametrize(
    "model",
    [
        rules_schema.RuleFile,
        rules_schema.OpportunityRule,
        rules_schema.ProposalRule,
        rules_schema.ConstraintRule,
        rules_schema.EstimateSection,
        rules_schema.NamedFormula,
    ],
)
def test_every_schema_field_is_documented(model: type[BaseModel]):
    documented = [row[0] for row in table(f"fields: {model.__name__}")]
    assert sorted(documented) == sorted(model.model_fields)
    assert len(documented) == len(set(documented))


def test_every_rules_subcommand_is_documented():
    sub = next(a for a in build_parser()._subparsers._group_actions if a.choices)
    rules = sub.choices["rules"]
    names = next(a for a in rules._subparsers._group_actions if a.choices).choices
    assert names, "parplan rules has subcommands"
    for name in names:
        assert f"`parplan rules {name}" in TEXT


def test_the_schema_line_for_editors_is_shown():
    assert "# yaml-language-server: $schema=" in TEXT


def _normal(line: str) -> str:
    """Whitespace runs as one space and dash rules as `---`: table widths may change."""
    return re.sub(r"-{3,}", "---", " ".join(line.split()))


def _matches(expected: str, actual: str) -> bool:
    """`actual` as `expected` shows it: a line `...` stands for any lines, `...` in a line for
    any text."""
    pattern = ""
    for line in expected.splitlines():
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += re.escape(_normal(line)).replace(re.escape("..."), ".*?") + r"\n"
    text = "".join(_normal(line) + "\n" for line in actual.splitlines())
    return re.fullmatch(pattern, text) is not None


def _commands(console: str) -> list[tuple[str, str]]:
    """(command, expected output) pairs of a console block."""
    pairs: list[tuple[str, str]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], ""))
        else:
            command, output = pairs[-1]
            pairs[-1] = (command, output + line + "\n")
    return pairs


def _tutorial(title: str) -> str:
    """The text of the section `## Tutorial: <title>`, up to the next `## ` heading."""
    start = TEXT.index(f"\n## Tutorial: {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start : end if end >= 0 else len(TEXT)]


TUTORIALS = [  # (title, commands it runs at least)
    ("a new op type and a new proposal", 9),
    ("a constraint for graph models", 9),
]


def test_every_tutorial_is_run():
    titles = re.findall(r"^## Tutorial: (.+)$", TEXT, re.MULTILINE)
    assert sorted(titles) == sorted(title for title, _ in TUTORIALS)


@pytest.mark.parametrize(("title", "commands"), TUTORIALS, ids=[t for t, _ in TUTORIALS])
def test_the_tutorial_runs_as_written(title, commands, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tutorial = _tutorial(title)
    ran = 0
    for kind, body in BLOCK.findall(tutorial):
        if kind == "yaml":
            name = re.match(r"# file: (\S+)\n", body)
            assert name, f"a tutorial YAML block names its file:\n{body}"
            Path(name.group(1)).parent.mkdir(parents=True, exist_ok=True)
            Path(name.group(1)).write_text(body, encoding="utf-8")
        elif kind == "console":
            for command, expected in _commands(body):
                argv = shlex.split(command)
                assert argv[0] == "parplan"
                result = cli(*argv[1:])
                assert result.err == "", command
                errors = re.search(r": \d+ errors?(, \d+ warnings?)?$", result.out.strip())
                assert result.code == (1 if errors else 0), command
                assert _matches(expected, result.out), f"$ {command}\n{result.out}"
                ran += 1
    assert ran >= commands


def test_the_other_yaml_examples_are_valid_overlays(cli, tmp_path):
    reference = TEXT[: TEXT.index("## Tutorial")]
    examples = [body for kind, body in BLOCK.findall(reference) if kind == "yaml"]
    assert examples
    for i, body in enumerate(examples):
        (tmp_path / f"example{i}").mkdir()
        (tmp_path / f"example{i}" / "rules.yaml").write_text(body, encoding="utf-8")
        result = cli("rules", "check", tmp_path / f"example{i}")
        assert result.code == 0, result.out


def test_the_matcher_is_strict_where_the_docs_are_explicit():
    assert _matches("a\n...\nc  d\n", "a\nb\nb\nc d\n")
    assert _matches("x: ...:19\n", "x: /somewhere/file.yaml:19\n")
    assert not _matches("a\nc\n", "a\nb\nc\n")
    assert not _matches("a 1.5\n", "a 1.50\n")
