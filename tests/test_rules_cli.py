"""`parplan rules check|list|explain|schema` and `disable:` overlays."""

from __future__ import annotations

import json

import pytest

from parplan_gen.inputs.resources import builtin_rules_dir
from parplan_gen.rules.ruleset import load_rules
from parplan_gen.rules.schema import RuleFile

from conftest import REPO, chain_graph


def opportunity(rule_id: str = "x.rule", **fields: object) -> str:
    """YAML of one valid node opportunity rule (a list item), with `fields` replaced or added."""
    values: dict[str, object] = {
        "id": rule_id,
        "op": "MatMul",
        "type": "DataParallel",
        "min_devices": 2,
        "memory_per_device": 1,
        "communication_overhead": 0.1,
        "speedup": 1.5,
    }
    values.update(fields)
    lines = [f"{key}: {json.dumps(value)}" for key, value in values.items()]
    return "  - " + "\n    ".join(lines) + "\n"


# --- rules check: one problem each, exact message and position --------------------------------

CHECK_CASES = [
    pytest.param(
        "opportunities:\n" + opportunity(typo=1),
        "r.yaml:9:5: opportunities[0].typo: unknown key 'typo'; did you mean 'type'? (allowed: id, "
        "scope, op, node_id, type, when, min_devices, memory_per_device, communication_overhead, "
        "speedup, source)",
        id="unknown-key",
    ),
    pytest.param(
        "opportunities:\n" + opportunity(speedup="graph.nodecount / 2"),
        "r.yaml:8:5: opportunities[0].speedup: formula 'graph.nodecount / 2': unknown name "
        "'graph.nodecount' (did you mean 'graph.node_count'?)",
        id="unknown-name",
    ),
    pytest.param(
        "opportunities:\n" + opportunity(min_devices="flor(graph.depth)"),
        "r.yaml:5:5: opportunities[0].min_devices: formula 'flor(graph.depth)': unknown function "
        "'flor' (did you mean 'floor'?)",
        id="unknown-function",
    ),
    pytest.param(
        "opportunities:\n" + opportunity(speedup="dp_sped"),
        "r.yaml:8:5: opportunities[0].speedup: formula 'dp_sped': unknown name 'dp_sped' "
        "(did you mean 'dp_speedup'?)",
        id="undefined-named-formula",
    ),
    pytest.param(
        "formulas:\n  a: b + 1\n  b: c\n  c: a\n",
        "r.yaml:2:3: formulas.a: recursion between named formulas: a -> b -> c -> a",
        id="cycle",
    ),
    pytest.param(
        "opportunities:\n" + opportunity(min_devices=[2]),
        "r.yaml:5:5: opportunities[0].min_devices: expected a number or a string (got list)",
        id="wrong-value-type",
    ),
    pytest.param(
        "opportunities:\n" + opportunity(speedup="graph.depth > 2"),
        "r.yaml:8:5: opportunities[0].speedup: formula 'graph.depth > 2': gives a bool "
        "(true/false), but a number is needed here",
        id="wrong-formula-type",
    ),
    pytest.param(
        "opportunities:\n" + opportunity(when="cluster.devices > 2"),
        "r.yaml:9:5: opportunities[0].when: formula 'cluster.devices > 2': 'cluster.devices' is "
        "not available here (node rules may read graph.*, node.*)",
        id="name-out-of-context",
    ),
    pytest.param(
        "opportunities:\n" + opportunity() + opportunity(),
        "r.yaml:9:5: opportunities[1]: duplicate rule id 'x.rule' (first defined at r.yaml:2:5)",
        id="duplicate-id",
    ),
    pytest.param(
        "formulas:\n  a: 1\n  a: 2\n",
        'r.yaml:3:3: malformed YAML: found duplicate key "a"',
        id="duplicate-yaml-key",
    ),
    pytest.param(
        "disable: [seed.matmul.data_paralel]\n",
        "r.yaml:1:11: disable[0]: cannot disable rule 'seed.matmul.data_paralel': no earlier "
        "layer defines it (did you mean 'seed.matmul.data_parallel'?)",
        id="disable-unknown",
    ),
    pytest.param(
        "disable: [dp_speedup]\n",
        "r.yaml:1:11: disable[0]: cannot disable rule 'dp_speedup': it is a named formula "
        "(redefine it instead)",
        id="disable-formula",
    ),
    pytest.param(
        "proposals:\n  - {id: seed.matmul.data_parallel, group: data, type: DataParallel, "
        "speedup: 1, description: x}\n",
        "r.yaml:2:5: proposals[0]: rule 'seed.matmul.data_parallel' is under `proposals` here "
        "but under "
        "`opportunities` at {builtin}:19:5; an override must keep the kind",
        id="override-changes-kind",
    ),
    pytest.param(
        "proposals:\n  - {id: p, group: data, type: DataParallel, speedup: 1, "
        "description: 'on {cluster.devices devices'}\n",
        "r.yaml:2:58: proposals[0].description: text 'on {cluster.devices devices': unmatched "
        "'{' at column 4 (write '{{' for a literal brace)",
        id="description-brace",
    ),
    pytest.param(
        "- a list\n",
        "r.yaml:1:1: a rule file must be a mapping (formulas, opportunities, proposals)",
        id="not-a-mapping",
    ),
]


@pytest.mark.parametrize(("text", "expected"), CHECK_CASES)
def test_check_reports_the_problem_at_its_line(cli, write, monkeypatch, tmp_path, text, expected):
    write("mine/r.yaml", text)
    monkeypatch.chdir(tmp_path / "mine")
    builtin = builtin_rules_dir() / "seed" / "opportunities.yaml"
    result = cli("rules", "check", ".")
    assert result.err == ""
    assert result.out.splitlines() == [
        expected.replace("{builtin}", str(builtin)),
        "checked 1 rule file in .: 1 error",
    ]
    assert result.code == 1


def test_a_multi_error_file_reports_every_error_in_line_order(cli, write):
    path = write(
        "mine/many.yaml",
        """
        formulas:
          good: "2 * graph.depth"
          spare: 3
        opportunities:
          - id: a.broken
            op: MatMul
            typ: DataParallel
            min_devices: 2
            memory_per_device: 1
            communication_overhead: 0.1
            speedup: 1
          - id: b.formulas
            op: MatMul
            type: DataParallel
            when: "graph.depth + 1"
            min_devices: "graph.node_cnt"
            memory_per_device: "1 / 0"
            communication_overhead: 0.1
            speedup: good
        proposals:
          - id: c.proposal
            group: data
            type: DataParallel
            speedup: "node.index"
            description: "{settings.dp} devices"
            settings: {dp: "max()"}
        disable: [seed.nope]
        """,
    )
    result = cli("rules", "check", path.parent)
    assert result.out.splitlines() == [
        f"{path}:3:3: warning: named formula 'spare' is not used by any rule",
        f"{path}:7:5: opportunities[0].typ: unknown key 'typ'; did you mean 'type'? (allowed: id, "
        "scope, op, node_id, type, when, min_devices, memory_per_device, communication_overhead, "
        "speedup, source)",
        f"{path}:15:5: opportunities[1].when: formula 'graph.depth + 1': gives a number, but a "
        "bool (true/false) is needed here",
        f"{path}:16:5: opportunities[1].min_devices: formula 'graph.node_cnt': unknown name "
        "'graph.node_cnt' (did you mean 'graph.node_count'?)",
        f"{path}:17:5: opportunities[1].memory_per_device: formula '1 / 0' failed: division by zero",
        f"{path}:24:5: proposals[0].speedup: formula 'node.index': 'node.index' is not available "
        "here (proposal rules may read cluster.*, graph.*)",
        f"{path}:26:16: proposals[0].settings.dp: formula 'max()': max() takes at least 1 "
        "argument(s) (0 given)",
        f"{path}:27:11: disable[0]: cannot disable rule 'seed.nope': no earlier layer defines it",
        f"checked 1 rule file in {path.parent}: 7 errors, 1 warning",
    ]
    assert result.code == 1


def test_a_broken_named_formula_is_reported_once_not_at_every_user(cli, write):
    path = write(
        "mine/f.yaml",
        "formulas:\n  base: graph.dept\n  twice: 2 * base\nopportunities:\n"
        + opportunity("r1", speedup="twice")
        + opportunity("r2", speedup="base + 1"),
    )
    result = cli("rules", "check", path.parent)
    assert result.out.splitlines() == [
        f"{path}:2:3: formulas.base: formula 'graph.dept': unknown name 'graph.dept' "
        "(did you mean 'graph.depth'?)",
        f"checked 1 rule file in {path.parent}: 1 error",
    ]


def test_errors_in_several_files_and_layers_are_all_reported(cli, write):
    a = write("one/a.yaml", "opportunities:\n" + opportunity(speedup="nope"))
    b = write("one/b.yaml", "formulas: [1]\n")
    c = write("two/c.yaml", "opportunities:\n" + opportunity("y", op=None))
    result = cli("rules", "check", a.parent, c.parent)
    assert result.out.splitlines() == [
        f"{a}:8:5: opportunities[0].speedup: formula 'nope': unknown name 'nope'",
        f"{b}:1:1: formulas: Input should be a valid dictionary (got list)",
        f"{c}:2:5: opportunities[0]: a node rule needs `op` (an op name or `*`)",
        f"checked 3 rule files in {a.parent}, {c.parent}: 3 errors",
    ]


def test_a_clean_overlay_passes_with_a_one_line_summary(cli, write):
    path = write(
        "mine/ok.yaml", "formulas:\n  dp_speedup: 3\n" + "opportunities:\n" + opportunity()
    )
    result = cli("rules", "check", path.parent)
    assert (result.code, result.out) == (0, f"checked 1 rule file in {path.parent}: no problems\n")


def test_warnings_alone_exit_0(cli, write):
    path = write("mine/w.yaml", "formulas:\n  unused_one: 1\n")
    result = cli("rules", "check", path.parent)
    assert result.code == 0
    assert result.out.splitlines() == [
        f"{path}:2:3: warning: named formula 'unused_one' is not used by any rule",
        f"checked 1 rule file in {path.parent}: no errors, 1 warning",
    ]


def test_check_without_dir_checks_the_builtin_rules(cli):
    shared = [p for p in builtin_rules_dir().rglob("*") if p.suffix in (".yaml", ".yml")]
    own = list((REPO / "parplan_gen" / "backends").glob("*/constraints.yaml"))  # each backend's
    count = len(shared) + len(own)
    result = cli("rules", "check")
    assert (result.code, result.out) == (
        0,
        f"checked {count} rule files in the built-in rules: no problems\n",
    )


def test_check_of_a_missing_directory(cli, tmp_path):
    result = cli("rules", "check", tmp_path / "nope")
    assert result.code == 1
    assert result.out.splitlines()[0] == f"{tmp_path / 'nope'}: rules directory not found"


# --- disable ----------------------------------------------------------------------------------


def test_disable_switches_a_builtin_rule_off(cli, write):
    graph = write("g.yaml", chain_graph(["Activation", "Conv2d"]))
    before = cli("analyze", graph, "--json").json()["opportunities"]
    assert [o["type"] for o in before] == ["DataParallel", "DataParallel"]
    write("mine/d.yaml", "disable:\n  - seed.conv2d.data_parallel\n")
    after = cli("analyze", graph, "--json", "--rules", graph.parent / "mine").json()
    # Conv2d falls back to its other rule, model parallelism at a flat 2.0x.
    assert [(o["node_id"], o["type"]) for o in after["opportunities"]] == [
        ("n1", "ModelParallel"),
        ("n0", "DataParallel"),
    ]


def test_disable_is_recorded_and_a_later_layer_may_define_the_id_again(write, tmp_path):
    write("one/d.yaml", "disable: [seed.tensor.sequence_parallel]\n")
    write(
        "two/p.yaml",
        "proposals:\n  - {id: seed.tensor.sequence_parallel, group: memory, "
        "type: MemoryOptimization, speedup: 1, description: back}\n",
    )
    rules = load_rules([tmp_path / "one", tmp_path / "two"])
    disabled = [(o.id, o.disabled, o.by.layer) for o in rules.overrides]
    assert disabled == [("seed.tensor.sequence_parallel", True, str(tmp_path / "one"))]
    # Defined again after being disabled: a new rule, so it comes last (its group is new too).
    assert [p.rule.id for p in rules.proposals][-1] == "seed.tensor.sequence_parallel"
    only_disabled = [p.rule.id for p in load_rules([tmp_path / "one"]).proposals]
    assert "seed.tensor.sequence_parallel" not in only_disabled


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"one/a.yaml": "disable: [x.rule]\nopportunities:\n" + opportunity()},
            "cannot disable rule 'x.rule': it is defined in this same layer at {one}/a.yaml:3:5; "
            "delete it there instead",
        ),
        (
            {
                "one/a.yaml": "disable: [seed.graph.pipeline]\n",
                "two/b.yaml": "disable: [seed.graph.pipeline]\n",
            },
            "cannot disable rule 'seed.graph.pipeline': it is already disabled at {one}/a.yaml:1:11",
        ),
    ],
)
def test_disable_errors(write, tmp_path, files, message):
    for name, text in files.items():
        write(name, text)
    dirs = sorted({tmp_path / name.split("/")[0] for name in files})
    with pytest.raises(Exception, match="cannot disable") as info:
        load_rules(dirs)
    assert info.value.message == message.format(one=tmp_path / "one")


# --- rules list -------------------------------------------------------------------------------


def test_list_shows_layers_overrides_and_disables(cli, write):
    write("mine/o.yaml", "formulas:\n  dp_speedup: 3\nopportunities:\n" + opportunity("mine.new"))
    write("mine/p.yaml", "disable: [seed.data.parallel]\n")
    mine = write("mine/x.yaml", "").parent
    result = cli("rules", "list", "--rules", mine)
    assert result.code == 0
    rows = [line.split() for line in result.out.splitlines()]
    assert rows[0] == ["ID", "KIND", "OP/GROUP", "WHERE", "LAYER"]
    assert ["mine.new", "opportunity", "MatMul", f"{mine}/o.yaml:4", str(mine)] in rows
    assert [
        "seed.matmul.data_parallel",
        "opportunity",
        "MatMul",
        "<built-in>/seed/opportunities.yaml:19",
        "built-in",
    ] in rows
    assert rows[9][:3] == ["seed.graph.pipeline", "opportunity", "(graph)"]
    table = rows[: rows.index(["Overridden", "by", "a", "later", "layer:"])]
    assert not any(row[:1] == ["seed.data.parallel"] for row in table)
    tail = result.out[result.out.index("Overridden") :].splitlines()
    by_o, by_p = [f"{mine}/o.yaml:2", f"[{mine}]"], [f"{mine}/p.yaml:1", f"[{mine}]"]
    assert [line.split() for line in tail if line and not line.startswith("-")] == [
        ["Overridden", "by", "a", "later", "layer:"],
        ["ID", "DEFINED", "AT", "REPLACED", "BY"],
        ["dp_speedup", "<built-in>/seed/opportunities.yaml:11", "[built-in]", *by_o],
        ["Disabled", "by", "a", "later", "layer:"],
        ["ID", "DEFINED", "AT", "DISABLED", "BY"],
        ["seed.data.parallel", "<built-in>/seed/proposals.yaml:12", "[built-in]", *by_p],
    ]


def test_list_of_builtin_rules_has_no_override_sections(cli):
    result = cli("rules", "list")
    assert result.code == 0
    assert "Overridden" not in result.out and "Disabled" not in result.out
    rules = load_rules()
    count = sum(map(len, (rules.opportunities, rules.proposals, rules.constraints, rules.estimate)))
    assert len(result.out.splitlines()) == 2 + count


# --- rules explain ----------------------------------------------------------------------------

FLOPS_RULE = """
opportunities:
  - id: mine.big_matmul
    op: MatMul
    type: TensorParallel
    when: "node.has.flops and node.attr.flops > 1e9"
    min_devices: 2
    memory_per_device: "64 * MiB"
    communication_overhead: 0.2
    speedup: "node.attr.flops / 1e9"
"""


def test_explain_shows_fired_rules_values_and_failed_conditions(cli, write):
    graph = write(
        "g.yaml",
        "name: g\nnodes:\n  - {id: big, op: MatMul, flops: 3.0e9}\n  - {id: small, op: MatMul}\n"
        "  - {id: odd, op: Softmax}\nedges: [[big, small], [small, odd]]\n",
    )
    mine = write("mine/r.yaml", FLOPS_RULE).parent
    result = cli("rules", "explain", graph, "--rules", mine, "--node", "small")
    assert result.code == 0
    assert result.out == (
        "graph g: 3 nodes, 2 edges, depth 3\n"
        "\n"
        "node small (op MatMul): best seed.matmul.data_parallel\n"
        "  fired, best: seed.matmul.data_parallel (DataParallel)  "
        "<built-in>/seed/opportunities.yaml:19\n"
        "    when: true\n"
        "    min_devices: 2\n"
        "    memory_per_device: 1073741824  (1 * GiB)\n"
        "    communication_overhead: 0.05\n"
        "    speedup: 2.0  (dp_speedup; graph.node_count = 3)\n"
        "  fired: seed.matmul.tensor_parallel (TensorParallel)  "
        "<built-in>/seed/opportunities.yaml:27\n"
        "    when: true\n"
        "    min_devices: 4\n"
        "    memory_per_device: 536870912  (512 * MiB)\n"
        "    communication_overhead: 0.15\n"
        "    speedup: 1.44  (tp_speedup; graph.node_count = 3)\n"
        f"  not fired: mine.big_matmul (TensorParallel)  {mine}/r.yaml:2\n"
        "    when: false  (node.has.flops and node.attr.flops > 1e9; node.attr.flops = (no value), "
        "node.has.flops = false)\n"
        "      node.has.flops: false  (node.has.flops = false)\n"
    )
    big = cli("rules", "explain", graph, "--rules", mine, "--node", "big").out
    assert "node big (op MatMul): best mine.big_matmul\n" in big
    assert "    speedup: 3.0  (node.attr.flops / 1e9; node.attr.flops = 3000000000.0)\n" in big
    odd = cli("rules", "explain", graph, "--node", "odd").out.splitlines()
    assert odd[2:] == [
        "node odd (op Softmax): no opportunity (no rule fired)",
        "  not fired: seed.generic.data_parallel (DataParallel)  "
        "<built-in>/seed/opportunities.yaml:73",
        "    when: false  (graph.node_count > 10; graph.node_count = 3)",
    ]


def test_explain_a_graph_level_rule_and_an_op_without_rules(cli, write):
    graph = write("g.yaml", chain_graph(["Softmax"]))
    mine = write("mine/r.yaml", "disable: [seed.generic.data_parallel]\n").parent
    out = cli("rules", "explain", graph, "--rules", mine).out.splitlines()
    assert out[2:] == [
        "node n0 (op Softmax): no rule for this op, and no '*' rule",
        "",
        "graph-level pipeline_stages: no opportunity (no rule fired)",
        "  not fired: seed.graph.pipeline (PipelineParallel)  <built-in>/seed/opportunities.yaml:84",
        "    when: false  (graph.depth > 4; graph.depth = 1)",
    ]


def test_explain_proposals_show_why_each_fired_or_not(cli, write):
    graph = write("g.yaml", chain_graph(["MatMul"] * 6))
    out = cli("rules", "explain", graph, "--node", "n0", "--devices", 4).out
    proposals = out[out.index("proposals for 4 devices") :].splitlines()
    assert proposals[:6] == [
        "proposals for 4 devices",
        "  group data",
        "    fired: seed.data.parallel (DataParallel)  <built-in>/seed/proposals.yaml:12",
        "      when: true  (graph.node_count > 5; graph.node_count = 6)",
        "      speedup: 2.0  (dp_speedup; graph.node_count = 6)",
        "      settings.dp: 2  (clamp(graph.node_count // 5, 2, 8); graph.node_count = 6)",
    ]
    assert proposals[6].startswith("      description: Apply data parallelism across 2 devices")
    at = next(i for i, line in enumerate(proposals) if "hierarchical_allreduce" in line)
    assert proposals[at : at + 4] == [
        "    not fired: seed.communication.hierarchical_allreduce (CommunicationOptimization)  "
        "<built-in>/seed/proposals.yaml:109",
        "      when: false  (cluster.devices > 2 and cluster.devices >= 8; cluster.devices = 4)",
        "        cluster.devices > 2: true  (cluster.devices = 4)",
        "        cluster.devices >= 8: false  (cluster.devices = 4)",
    ]


@pytest.mark.parametrize(
    ("argv", "code", "err"),
    [
        (
            ["--node", "n00"],
            1,
            "parplan: error: --node: no node 'n00' in graph 'chain' (did you mean 'n0'?)\n",
        ),
        (["--devices", "0"], 2, None),
    ],
)
def test_explain_bad_arguments(cli, write, argv, code, err):
    graph = write("g.yaml", chain_graph(["MatMul"]))
    result = cli("rules", "explain", graph, *argv)
    assert result.code == code
    if err is not None:
        assert result.err == err


# --- rules schema and the bare command --------------------------------------------------------


def test_schema_is_the_json_schema_of_rule_files(cli):
    result = cli("rules", "schema")
    assert result.code == 0
    schema = json.loads(result.out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["properties"]) == set(RuleFile.model_fields)
    assert schema["additionalProperties"] is False
    assert set(schema["$defs"]["OpportunityRule"]["required"]) == {
        "id",
        "type",
        "min_devices",
        "memory_per_device",
        "communication_overhead",
        "speedup",
    }


def test_rules_without_a_subcommand_prints_help(cli):
    result = cli("rules")
    assert result.code == 2
    assert "check" in result.out and "explain" in result.out
