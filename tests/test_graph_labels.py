"""Layout labels name only what the model's kind is laid out over (issue 14 items 3 and 6):
an op-graph model (resnet-50, the graph examples) is laid out over dp and tp only
(`GraphModelSpec.layout_dims`), so `parplan compare`, plan.md's "Why this plan" and both charts say
`deepspeed tp1 dp16`, never `pp1`; a transformer keeps `tp8 pp1 dp16`."""

from __future__ import annotations

import re

import pytest

import parplan_gen
from parplan_gen.cli.main import main
from parplan_gen.render.plan_files import render_plan

from conftest import REPO

GRAPH_ONLY = re.compile(r"\b(pp|cp|ep|vpp)\d+\b|\bsp\b")  # words a graph layout never has
GRAPHS = ["resnet-50", str(REPO / "examples" / "cnn_block.yaml")]


def words_of(label: str) -> list[str]:
    return label.split(" (")[0].split()


@pytest.mark.parametrize("model", GRAPHS)
def test_compare_labels_of_a_graph_model_name_dp_and_tp_only(model):
    found = parplan_gen.compare(model, {"gpus": 16, "gpu": "h100"}, global_batch=1024)
    assert len(found.columns) == 2  # the chosen plan and the runner-up
    for column in found.columns:
        p = column.estimate.plan
        assert p.tp * p.dp == 16 and p.pp == 1  # 16 GPUs over tp and dp only
        words = words_of(column.label)
        assert words[:3] == ["deepspeed", f"tp{p.tp}", f"dp{p.dp}"], column.label
        assert not GRAPH_ONLY.search(column.label), column.label
    for _, sentences in found.sentences:
        for sentence in sentences:
            assert not GRAPH_ONLY.search(sentence), sentence


def test_a_transformer_label_keeps_its_pipeline_size():
    found = parplan_gen.compare("llama-3-8b", {"gpus": 16, "gpu": "h100"}, global_batch=256)
    p = found.columns[0].estimate.plan
    assert words_of(found.columns[0].label)[1:4] == [f"tp{p.tp}", f"pp{p.pp}", f"dp{p.dp}"]


def test_the_compare_command_shows_a_graph_layout_without_pp(capsys):
    argv = ["compare", "resnet-50", "--gpus", "16", "--gpu", "h100", "--global-batch", "1024"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    legend = out.splitlines()[0]  # the terse view names each layout by a letter first
    assert legend.startswith("A  ") and "deepspeed tp1 dp16" in legend, legend
    assert not GRAPH_ONLY.search(out), out


def test_plan_md_and_the_charts_of_a_graph_model_name_dp_and_tp_only():
    result = parplan_gen.plan("resnet-50", {"gpus": 16, "gpu": "h100"}, global_batch=1024)
    files = render_plan(result.document)
    start = files["plan.md"].index("## Why this plan")
    why = files["plan.md"][start : files["plan.md"].index("\n## ", start + 1)]
    assert "deepspeed tp1 dp16" in why and not GRAPH_ONLY.search(why), why
    for chart in ("plan_time.svg", "plan_memory.svg"):
        texts = " ".join(re.findall(r">([^<>]+)<", files[chart]))  # text and tspan
        assert "dp16" in texts and not GRAPH_ONLY.search(texts), (chart, texts)
