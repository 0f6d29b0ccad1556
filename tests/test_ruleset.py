"""Rule files: schema, layering (overlays by id), and errors that point at file:line."""

from __future__ import annotations

import os

import pytest

from parplan_gen.inputs.errors import InputError, RuleError
from parplan_gen.rules.ruleset import MAX_RULE_FILE_BYTES, load_rules

from conftest import chain_graph

GENERIC_SMALL = """
opportunities:
  - id: seed.generic.data_parallel
    op: "*"
    type: DataParallel
    when: "graph.node_count > 3"
    min_devices: 2
    memory_per_device: "512 * MiB"
    communication_overhead: 0.1
    speedup: 1.5
"""


def test_overlay_replaces_a_rule_by_id(cli, write):
    graph = write("g.yaml", chain_graph(["Add"] * 4))
    assert cli("analyze", graph, "--json").json() == {"opportunities": []}
    write("mine/generic.yaml", GENERIC_SMALL)
    got = cli("analyze", graph, "--json", "--rules", graph.parent / "mine").json()
    # n = 4 > 3 now: each generic node gets the overlay's DP 1.5.
    assert [(o["node_id"], o["estimated_speedup"]) for o in got["opportunities"]] == [
        ("n0", 1.5),
        ("n1", 1.5),
        ("n2", 1.5),
        ("n3", 1.5),
    ]


def test_overlay_keeps_the_replaced_rules_position(write):
    write("mine/r.yaml", GENERIC_SMALL)
    base = [r.rule.id for r in load_rules().opportunities]
    layered = load_rules([write("mine/r.yaml", GENERIC_SMALL).parent])
    assert [r.rule.id for r in layered.opportunities] == base
    assert layered.opportunities[base.index("seed.generic.data_parallel")].origin.layer.endswith(
        "mine"
    )
    assert [o.id for o in layered.overrides] == ["seed.generic.data_parallel"]


def test_a_new_op_rule_changes_the_output(cli, write):
    # A rule for a new op: Softmax nodes now get TensorParallel 3.0 instead of nothing.
    write(
        "mine/softmax.yaml",
        """
        opportunities:
          - id: mine.softmax.tensor
            op: Softmax
            type: TensorParallel
            min_devices: "min(4, graph.node_count)"
            memory_per_device: "64 * MiB"
            communication_overhead: 0.2
            speedup: "node.attr.flops / 1e9 if node.has.flops else 3.0"
        """,
    )
    graph = write(
        "g.yaml",
        """
        nodes:
          - {id: s, op: Softmax, flops: 2.5e9}
          - {id: t, op: Softmax}
        edges: [[s, t]]
        """,
    )
    got = cli("analyze", graph, "--json", "--rules", graph.parent / "mine").json()
    assert got["opportunities"] == [
        {
            "node_id": "t",
            "type": "TensorParallel",
            "estimated_speedup": 3.0,
            "resource_requirements": {
                "min_devices": 2,
                "memory_per_device": 67108864,
                "communication_overhead": 0.2,
            },
        },
        {
            "node_id": "s",
            "type": "TensorParallel",
            "estimated_speedup": 2.5,
            "resource_requirements": {
                "min_devices": 2,
                "memory_per_device": 67108864,
                "communication_overhead": 0.2,
            },
        },
    ]


def test_redefining_a_named_formula_changes_every_user(cli, write):
    # dp_speedup is used by the MatMul, Activation, BatchNorm and Conv2d DP rules.
    write("mine/f.yaml", "formulas:\n  dp_speedup: 10\n")
    graph = write("g.yaml", chain_graph(["MatMul", "Activation"]))
    got = cli("analyze", graph, "--json", "--rules", graph.parent / "mine").json()
    assert [o["estimated_speedup"] for o in got["opportunities"]] == [10.0, 9.0]


def test_a_threshold_change_in_yaml(cli, write):
    # The pipeline proposal fires from depth 3 instead of depth 5.
    write(
        "mine/p.yaml",
        """
        proposals:
          - id: seed.pipeline.stages
            group: pipeline
            type: PipelineParallel
            when: "graph.depth > 2"
            speedup: pipeline_speedup
            settings: {pp: "min(graph.depth, 8)"}
            description: "{settings.pp} stages"
        """,
    )
    graph = write("g.yaml", chain_graph(["Add"] * 3))
    got = cli("propose", graph, "--devices", 1, "--json", "--rules", graph.parent / "mine")
    assert got.json()["proposals"] == [
        {
            "type": "PipelineParallel",
            "description": "3 stages",
            "estimated_speedup": 2.0,
            "settings": {"pp": 3},
        }
    ]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("opportunities:\n  - id: x\n    op: MatMul\n    typo: 1\n", 4, "unknown key 'typo'"),
        (
            "opportunities:\n  - id: x\n    op: MatMul\n    type: DataParallel\n"
            "    min_devices: 2\n    memory_per_device: 1\n    communication_overhead: 0.1\n"
            "    speedup: graph.nodecount\n",
            8,
            "did you mean 'graph.node_count'?",
        ),
        ("proposals:\n  - id: p\n    group: data\n    type: Bogus\n", 4, "type"),
        ("formulas:\n  a: b\n  b: a\n", 2, "a -> b -> a"),
        ("- just a list\n", 1, "must be a mapping"),
        ("opportunties: []\n", 1, "did you mean 'opportunities'?"),
        (
            "opportunities:\n  - id: g\n    scope: graph\n    type: DataParallel\n"
            "    min_devices: 2\n    memory_per_device: 1\n    communication_overhead: 0.1\n"
            "    speedup: 1\n",
            2,
            "needs `node_id`",
        ),
        (
            "proposals:\n  - id: p\n    group: data\n    type: DataParallel\n    speedup: 1\n"
            "    description: x\n    settings: {Bad-Key: 1}\n",
            7,
            "setting name 'Bad-Key'",
        ),
    ],
)
def test_rule_errors_point_at_the_line(write, text, line, fragment):
    path = write("bad/r.yaml", text)
    with pytest.raises(RuleError) as info:
        load_rules([path.parent])
    assert fragment in str(info.value)
    assert info.value.where.file == str(path)
    assert info.value.where.line == line


def test_duplicate_id_in_one_layer_names_both_places(write):
    rule = (
        "  - id: dup\n    op: MatMul\n    type: DataParallel\n    min_devices: 2\n"
        "    memory_per_device: 1\n    communication_overhead: 0.1\n    speedup: 1\n"
    )
    write("bad/a.yaml", "opportunities:\n" + rule)
    b = write("bad/b.yaml", "opportunities:\n" + rule)
    with pytest.raises(RuleError) as info:
        load_rules([b.parent])
    assert "duplicate rule id 'dup' (first defined at" in str(info.value)
    assert "a.yaml:2" in str(info.value)
    assert str(info.value).startswith(f"{b}:2")


def test_override_must_keep_the_kind(write):
    path = write(
        "bad/r.yaml",
        """
        proposals:
          - id: seed.matmul.data_parallel
            group: data
            type: DataParallel
            speedup: 1
            description: x
        """,
    )
    with pytest.raises(RuleError, match="is under `proposals` here but under `opportunities` at"):
        load_rules([path.parent])


def test_missing_rules_dir_is_bad_input(cli, write, tmp_path):
    graph = write("g.yaml", chain_graph(["MatMul"]))
    result = cli("analyze", graph, "--rules", tmp_path / "nope")
    assert result.code == 1
    assert result.err == f"parplan: error: {tmp_path / 'nope'}: rules directory not found\n"


# --- what a rules directory may hold -------------------------------------------------------------

SECRET = "root:$6$secret-hash:19000:0:99999:7:::\n"  # a file no rule loader may read


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("r/x.yaml", "../outside/shadow"),  # a rule file that is a link out
        ("r/sub/x.yml", "../../outside/shadow"),  # deeper
        ("r/x.yaml", "y.yaml"),  # a link to a link that leads out
        ("r/etc", "../outside"),  # a folder link out (folder links are never followed)
    ],
    ids=["file", "nested", "chain", "folder"],
)
def test_a_link_out_of_the_rules_directory_is_refused_unread(cli, tmp_path, link, target):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "shadow").write_text(SECRET, encoding="utf-8")
    (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "r" / "y.yaml").symlink_to("../outside/shadow")  # the chain's second link
    (tmp_path / link).unlink(missing_ok=True)
    (tmp_path / link).symlink_to(target)
    graph = tmp_path / "g.yaml"
    graph.write_text(chain_graph(["MatMul"]), encoding="utf-8")
    result = cli("analyze", graph, "--rules", tmp_path / "r")
    first = tmp_path / (
        "r/etc" if link == "r/etc" else "r/sub/x.yml" if "sub" in link else "r/x.yaml"
    )
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"parplan: error: {first}: a link out of the rules directory {tmp_path / 'r'}; "
        "rule files must be inside it\n"
    )
    assert "secret" not in result.err


def test_links_inside_the_rules_directory_are_fine(write, tmp_path):
    write("r/real/generic.yaml", GENERIC_SMALL)
    (tmp_path / "r" / "alias.yaml").symlink_to("real/generic.yaml")  # the same file twice
    (tmp_path / "r" / "again").symlink_to("real")  # a folder link: not followed
    with pytest.raises(RuleError, match=r"duplicate rule id 'seed\.generic\.data_parallel'"):
        load_rules([tmp_path / "r"])
    (tmp_path / "r" / "alias.yaml").unlink()
    assert len(load_rules([tmp_path / "r"]).overrides) == 1


def test_a_link_loop_and_a_pipe_are_refused_without_waiting(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a.yaml").symlink_to("b.yaml")
    (tmp_path / "r" / "b.yaml").symlink_to("a.yaml")
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path / "r"])
    assert (
        str(info.value) == f"{tmp_path / 'r' / 'a.yaml'}: a link that cannot be followed (a loop?)"
    )
    (tmp_path / "p").mkdir()
    os.mkfifo(tmp_path / "p" / "x.yaml")  # no writer: opening it to read would wait forever
    with pytest.raises(InputError) as info:
        load_rules([tmp_path / "p"])
    assert str(info.value) == f"{tmp_path / 'p' / 'x.yaml'}: not a regular file (a named pipe)"


def test_a_rule_file_over_its_cap_is_refused_unread(tmp_path):
    (tmp_path / "r").mkdir()
    with (tmp_path / "r" / "big.yaml").open("wb") as handle:
        handle.truncate(MAX_RULE_FILE_BYTES + 1)  # sparse
    with pytest.raises(InputError) as info:
        load_rules([tmp_path / "r"])
    assert str(info.value) == (
        f"{tmp_path / 'r' / 'big.yaml'}: file is 1,048,577 bytes; the limit is 1 MiB "
        "(raise it with `parplan --max-input-mib N` or PARPLAN_MAX_INPUT_MIB=N)"
    )


def test_names_from_a_rule_file_are_escaped_and_bounded_in_messages(write):
    long_id = "x\x1b[2J" + "y" * 5_000
    path = write("r/a.yaml", f'disable: ["{long_id.encode("unicode_escape").decode()}"]\n')
    with pytest.raises(RuleError) as info:
        load_rules([path.parent])
    message = info.value.message
    assert message.startswith("cannot disable rule 'x\\x1b[2Jyyy") and len(message) < 300
    assert message.endswith("more characters)': no earlier layer defines it")


def test_rules_check_reports_a_link_out_without_reading_it(cli, tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "shadow").write_text(SECRET, encoding="utf-8")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x.yaml").symlink_to("../outside/shadow")
    result = cli("rules", "check", tmp_path / "r")
    assert result.code == 1
    assert f"{tmp_path / 'r' / 'x.yaml'}: a link out of the rules directory" in result.out
    assert "secret" not in result.out + result.err


ONE_CONSTRAINT = """
constraints:
  - id: mine.tp_bound
    require: "plan.tp <= 8"
    reason: "tp above 8"
"""


def test_overlays_without_named_formulas_share_one_library(write):
    """Loading an overlay compiles its own rules, not the ~300 built-in named formulas again:
    two overlays that leave the named formulas alone share one library (and the formulas it
    compiled); an overlay that redefines a named formula gets a library of its own
    (test_redefining_a_named_formula_changes_every_user shows its users take the new value)."""
    first = load_rules([write("mine/c.yaml", ONE_CONSTRAINT).parent])
    second = load_rules([write("other/c.yaml", ONE_CONSTRAINT).parent])
    assert second.library is first.library
    named = load_rules([write("named/n.yaml", "formulas:\n  grad_bytes: 2\n").parent])
    assert named.library is not first.library


def test_a_rule_file_changed_between_loads_points_at_its_new_lines(write):
    """A formula compiled before is handed back only for the same place in the same parse: the
    same file with two lines added above the rule points at the new line."""
    path = write("mine/c.yaml", ONE_CONSTRAINT)
    first = next(c for c in load_rules([path.parent]).constraints if c.rule.id == "mine.tp_bound")
    path.write_text("\n\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    again = next(c for c in load_rules([path.parent]).constraints if c.rule.id == "mine.tp_bound")
    assert again.require.where.line == first.require.where.line + 2
