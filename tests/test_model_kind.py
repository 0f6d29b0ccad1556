"""Rules for one kind of model: `model_kind` on constraints and estimate sections, the load-time
check of the model.* names a formula reads, and which rules reach which planner."""

from __future__ import annotations

from dataclasses import replace

import pytest

from parplan_gen.cost.estimate import CostModel
from parplan_gen.inputs.errors import FormulaError, RuleError
from parplan_gen.planning.constraints import Constraints
from parplan_gen.rules.ruleset import load_rules


def test_a_constraint_for_any_model_may_not_read_a_transformer_name(write):
    path = write(
        "r/c.yaml",
        """
        constraints:
          - id: my.heads
            model_kind: any
            require: "model.heads % plan.tp == 0"
            reason: "heads"
        """,
    )
    with pytest.raises(FormulaError) as info:
        load_rules([path.parent])
    assert info.value.message == (
        "formula 'model.heads % plan.tp == 0': 'model.heads' has no value for graph models, which "
        "this rule applies to (it has one for transformer models: `model_kind: transformer`)"
    )
    assert (info.value.where.file, info.value.where.line) == (str(path), 4)


def test_without_model_kind_a_constraint_applies_where_its_names_have_values(write):
    # Overlays written before model kinds existed keep loading: the names say the kind.
    path = write(
        "r/c.yaml",
        """
        formulas:
          narrow: "model.split_width_gcd < 64"
        constraints:
          - id: my.heads
            require: "model.heads % plan.tp == 0"
            reason: "heads"
          - id: my.narrow
            require: "not narrow"
            reason: "narrow"
          - id: my.batch
            require: "plan.mbs <= 64"
            reason: "micro-batch"
        """,
    )
    rules = load_rules([path.parent])
    kinds = {c.rule.id: c.model_kinds for c in rules.constraints if c.rule.id.startswith("my.")}
    assert kinds == {
        "my.heads": ("transformer",),
        "my.narrow": ("graph",),  # through the named formula
        "my.batch": ("transformer", "graph"),
    }


def test_a_constraint_reading_both_kinds_names_is_refused(write):
    path = write(
        "r/c.yaml",
        """
        constraints:
          - id: my.mixed
            require: "model.heads % plan.tp == 0 or model.split_width_gcd > 0"
            reason: "mixed"
        """,
    )
    with pytest.raises(RuleError) as info:
        load_rules([path.parent])
    assert info.value.message == (
        "constraint 'my.mixed' reads names of transformer models (model.heads) and of graph "
        "models (model.split_width_gcd): no model has both; split it in two"
    )
    assert info.value.where.line == 3


def test_the_check_follows_named_formulas(write):
    path = write(
        "r/c.yaml",
        """
        formulas:
          wide: "model.split_width_gcd >= 64"
        constraints:
          - id: my.wide
            model_kind: transformer
            require: "wide"
            reason: "narrow"
        """,
    )
    with pytest.raises(FormulaError) as info:
        load_rules([path.parent])
    assert "'model.split_width_gcd' (read by named formula 'wide') has no value for " in str(
        info.value
    )
    assert "transformer models" in str(info.value)
    assert info.value.where.line == 6


def test_a_graph_estimate_may_not_read_a_transformer_name(write):
    path = write(
        "r/e.yaml",
        """
        estimate:
          model_kind: graph
          memory:
            activations: "model.hidden * plan.mbs"
        """,
    )
    with pytest.raises(FormulaError, match=r"'model\.hidden' has no value for graph models"):
        load_rules([path.parent])


def test_a_kind_specific_constraint_reaches_only_its_planner(write):
    path = write(
        "r/c.yaml",
        """
        constraints:
          - id: my.graph_only
            model_kind: graph
            require: "plan.mbs <= 64"
            reason: "micro-batch above 64"
          - id: my.both
            require: "plan.mbs <= 1024"
            reason: "micro-batch above 1024"
        """,
    )
    rules = load_rules([path.parent])
    transformer = {c.rule.id for c in Constraints(rules, "transformer").all}
    graph = {c.rule.id for c in Constraints(rules, "graph").all}
    assert {"my.both", "parallel.heads_divisible_by_tp"} <= transformer
    assert (
        "my.graph_only" not in transformer and "graph.channels_divisible_by_tp" not in transformer
    )
    assert {"my.graph_only", "my.both", "graph.channels_divisible_by_tp"} <= graph
    assert "parallel.heads_divisible_by_tp" not in graph
    # kind-neutral built-in rules apply to both
    assert {"batch.divisible", "memory.fits"} <= transformer & graph


def test_an_estimate_figure_is_replaced_only_for_its_kind(write):
    path = write(
        "r/e.yaml",
        """
        estimate:
          model_kind: graph
          time:
            optimizer_s: 0.25
        """,
    )
    rules = load_rules([path.parent])
    graph = CostModel(rules, "graph").formulas[("time", "optimizer_s")]
    transformer = CostModel(rules, "transformer").formulas[("time", "optimizer_s")]
    assert graph.formula.evaluate({}) == 0.25
    assert transformer.origin.where.file.endswith("time.yaml")
    assert graph.label == "estimate.time.optimizer_s (graph models)"
    assert transformer.label == "estimate.time.optimizer_s"


def test_a_cost_model_needs_every_figure_of_its_kind(write):
    path = write("r/d.yaml", "disable: []\n")
    rules = load_rules([path.parent])
    trimmed = replace(rules, estimate=tuple(e for e in rules.estimate if e.key != "bn_comm_s"))
    with pytest.raises(
        RuleError, match=r"no formula for estimate\.time\.bn_comm_s \(graph models\)"
    ):
        CostModel(trimmed, "graph")
    with pytest.raises(RuleError, match=r"no formula for estimate\.time\.bn_comm_s$"):
        CostModel(trimmed, "transformer")


def test_rules_list_names_graph_figures_by_kind(cli):
    run = cli("rules", "list")
    assert run.code == 0
    assert "estimate.time.bn_comm_s (graph models)" in run.out
    assert "graph.channels_divisible_by_tp" in run.out


def test_each_kind_gives_exactly_its_model_names():
    from parplan_gen.models.graph_model import GraphModelSpec
    from parplan_gen.models.presets import load_graph_preset, load_preset
    from parplan_gen.rules import vocabulary

    def declared(kind: str) -> set[str]:
        return {n.name for n in vocabulary.NAMES if n.namespace == "model" and kind in n.models}

    resnet = GraphModelSpec.from_graph(load_graph_preset("resnet-50"))
    assert set(resnet.formula_values(1)) == declared("graph")
    assert set(load_preset("llama-3-8b").formula_values(2048)) == declared("transformer")


# ---- one model interface (models/kind.py) -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "title", "unit", "heading", "batch", "layers", "backends", "dims"),
    [
        (
            "llama-3-8b", "transformer", "llama-3-8b (8.03B params)", "tokens",
            "Memory per GPU (most loaded stage)", "global batch 512 x 8192 tokens", 32,
            ("megatron", "deepspeed", "ddp", "torchtitan", "accelerate"),
            ("dp", "tp", "pp", "cp", "ep", "vpp", "sp"),
        ),
        (
            "resnet-50", "graph", "resnet-50 (25.6M params, op graph)", "samples",
            "Memory per GPU", "global batch 512 samples", 1, ("deepspeed",), ("dp", "tp"),
        ),
    ],
)  # fmt: skip
def test_each_kind_answers_the_model_interface(
    name, kind, title, unit, heading, batch, layers, backends, dims
):
    from parplan_gen.models.load import load_model

    model = load_model(name)
    assert model.kind == kind
    assert model.title == title
    assert model.unit == unit
    assert model.memory_heading == heading
    assert model.batch_text(512, 8192) == batch
    assert model.pipeline_layers == layers
    assert model.backends == backends
    assert model.layout_dims == dims
    assert model.op_graph(2048).nodes
    assert "model.kind" in model.facts()


def test_a_graph_model_has_no_sequence_length():
    from parplan_gen.inputs.errors import InputError
    from parplan_gen.models.load import load_model

    resnet = load_model("resnet-50")
    assert resnet.sequence_length(None) == resnet.sequence_length(1) == 1
    with pytest.raises(InputError, match="--seq-len 4096: resnet-50 is an op-graph model"):
        resnet.sequence_length(4096)
    assert load_model("llama-3-8b").sequence_length(None) == 2048


def test_no_module_outside_models_asks_which_class_a_model_is():
    import re

    from conftest import REPO

    asks = re.compile(r"isinstance\([^)]*(ModelSpec|GraphModelSpec)|model_kind\(")
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for folder in ("parplan_gen", "benchmarks")
        for path in sorted((REPO / folder).rglob("*.py"))
        if "models" not in path.relative_to(REPO).parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if asks.search(line)
    ]
    assert found == []


def test_the_lower_layers_import_one_way_lazy_imports_included():
    """No import cycle through `inputs`, `models` or `cost`, counting every import: those
    inside functions and under TYPE_CHECKING too (a lazy import that closes a cycle is still
    one). The shared piece lives in the module both sides import."""
    import ast

    import networkx as nx

    from conftest import REPO

    package = REPO / "parplan_gen"
    graph = nx.DiGraph()
    for path in package.rglob("*.py"):
        source = ".".join(("parplan_gen", *path.relative_to(package).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parplan_gen."):
                graph.add_edge(source, node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("parplan_gen."):
                        graph.add_edge(source, alias.name)
    lower = ("parplan_gen.inputs.", "parplan_gen.models.", "parplan_gen.cost.")
    cycles = [c for c in nx.simple_cycles(graph) if any(m.startswith(lower) for m in c)]
    assert cycles == []
