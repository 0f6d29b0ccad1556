"""The command line: exit codes, one-line errors, text and JSON views."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from parplan_gen import __version__

from conftest import REPO, chain_graph


def test_version(cli, capsys):
    with pytest.raises(SystemExit) as info:
        cli("--version")
    assert info.value.code == 0
    assert capsys.readouterr().out == f"parplan {__version__}\n"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["analyze"], "the following arguments are required: GRAPH"),
        (["propose", "g.yaml"], "the following arguments are required: --devices"),
        (
            ["propose", "g.yaml", "--devices", "0"],
            "expected a whole number from 1 to 1048576, got 0",
        ),
        (
            ["propose", "g.yaml", "--devices", "two"],
            "expected a whole number (digits 0-9), got 'two'",
        ),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(cli, argv, fragment):
    result = cli(*argv)
    assert result.code == 2
    assert result.err.count("\n") == 1
    assert result.err.startswith("parplan: error: ")
    assert fragment in result.err


def test_no_command_prints_help_and_exits_2(cli):
    result = cli()
    assert result.code == 2
    assert "analyze" in result.out


def test_bad_graph_is_exit_1_one_line_with_position(cli, write):
    path = write("g.yaml", "nodes:\n  - {id: a, op: MatMul}\nedges:\n  - [a, zz]\n")
    result = cli("analyze", path)
    assert result.code == 1
    assert result.out == ""
    assert result.err.count("\n") == 1
    assert result.err.startswith(f"parplan: error: {path}:4:")
    assert "'zz'" in result.err


def test_missing_graph_file(cli, tmp_path):
    result = cli("analyze", tmp_path / "none.yaml")
    assert (result.code, result.err) == (
        1,
        f"parplan: error: {tmp_path / 'none.yaml'}: file not found\n",
    )


def test_text_views_show_the_numbers(cli, write):
    path = write("g.yaml", chain_graph(["MatMul"] * 5, name="five"))
    text = cli("analyze", path).out
    assert "five: 5 nodes, 4 edges, depth 5" in text
    assert "pipeline_stages  PipelineParallel    4.00x" in text
    assert "seed.graph.pipeline" in text
    proposals = cli("propose", path, "--devices", 4).out
    assert "[PipelineParallel] 4.00x  Implement 5-stage pipeline parallelism" in proposals
    assert "settings: pp=5" in proposals


def test_json_output_is_deterministic(cli):
    example = REPO / "examples" / "transformer_block.yaml"
    first = cli("propose", example, "--devices", 8, "--json").out
    second = cli("propose", example, "--devices", 8, "--json").out
    assert first == second
    assert json.loads(first)["proposals"]


def test_help_of_every_command_has_an_example(cli, capsys):
    for command in ("analyze", "propose"):
        with pytest.raises(SystemExit):
            cli(command, "--help")
        assert f"example:\n  parplan {command}" in capsys.readouterr().out


def test_module_entry_point_runs(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "parplan_gen.cli.main",
            "analyze",
            str(REPO / "examples" / "tiny_mlp.yaml"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["opportunities"][0]["node_id"] == "fc1"


def test_models_lists_transformer_and_graph_presets(cli):
    run = cli("models", "--json")
    assert run.code == 0
    found = run.json()
    llama = next(r for r in found["transformers"] if r["name"] == "llama-3-8b")
    # Meta's model card: 8,030,261,248 parameters, 32 layers.
    assert (llama["params"], llama["layers"]) == (8_030_261_248, 32)
    # torchvision resnet50: 25,557,032 parameters, 4.09 G multiply-adds (2 FLOPs each) per image.
    assert found["graphs"] == [
        {"name": "resnet-50", "params": 25_557_032, "forward_flops": 2 * 4_089_184_256}
    ]
    text = cli("models").out
    assert "  resnet-50  25.56M params, 8.18 GFLOP forward\n" in text
