"""Values that were accepted where they should be refused (issue 31, class 5 and the node names of
class 6): every number is read once, bounded and typed, wherever it enters: a flag, a cluster
file, a rule file (tests/hostile/values.yaml, through `parplan`), the Python API and plan.json
(here). A refusal is one printable `parplan: error:` line naming the flag, file or field, exit 1
(input) or 2 (usage), and nothing written. No test measures speed: the long lists of node names
run under the hang guard, and `python benchmarks/hostile_speed.py --only values.` prints times.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

import parplan_gen
from parplan_gen.cli.main import main
from parplan_gen.cost.budget_figures import (
    BUDGET_KEYS,
    BudgetInputs,
    budget_figure_problem,
    budget_ranges,
)
from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.cost.launch_site import LaunchSettings, repeated_names
from parplan_gen.cost.layout import MAX_GPUS
from parplan_gen.inputs.errors import InputError

from hostile_support import (
    PREFIX,
    REPO,
    corpus,
    hang_guard,
    refused_in_one_line,
)

CASES: list[dict[str, Any]] = corpus("values.yaml")
GOLDEN_PLAN = REPO / "tests" / "golden" / "dense_multinode" / "plan.json"
NAMES_IN_A_LONG_LIST = 32_768  # the reproduction: ~30 s before (quadratic)


def snapshot(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))}


def test_the_corpus_is_well_formed() -> None:
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for case in CASES:
        assert case["id"].startswith("values."), case["id"]
        assert set(case) in ({"id", "argv", "exit", "stderr"}, {"id", "files", "argv", "exit",
                                                                  "stderr"}), case["id"]  # fmt: skip
        assert case["exit"] in (1, 2), case["id"]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_a_value_is_refused_where_it_is_read(case, tmp_path, monkeypatch, capsys):
    refused_in_one_line(case, tmp_path, monkeypatch, capsys)


# ---- a. digits: the class ---------------------------------------------------------------------


@pytest.mark.parametrize("time", ["١٢:٠٠:٠٠", "１２:00:00", "٢-00:00:00", "1²"])
def test_slurm_time_takes_only_ascii_digits_in_python_too(time):
    with pytest.raises(ValidationError):
        LaunchSettings(slurm_time=time)
    assert LaunchSettings(slurm_time="2-00:00:00").slurm_time == "2-00:00:00"


# ---- b. NCCL_IB_GID_INDEX -----------------------------------------------------------------------


@pytest.mark.parametrize("index", [2**63, 2**70, 256, -2, True, "3"])
def test_a_gid_index_is_a_small_integer(index):
    with pytest.raises(ValidationError):
        LaunchSettings(ib_gid_index=index)
    assert LaunchSettings(ib_gid_index=255).ib_gid_index == 255
    assert LaunchSettings(ib_gid_index=-1).ib_gid_index == -1


# ---- c, d. node names --------------------------------------------------------------------------


def test_node_names_that_differ_only_in_case_are_one_host():
    assert repeated_names(["node1", "NODE1"]) == (
        "node_names repeats node1 = NODE1 (host names are case-insensitive, RFC 4343)"
    )
    assert repeated_names(["a", "b", "a"]) == "node_names repeats a"
    many = [f"n{i}" for i in range(8)] * 2
    assert repeated_names(many) == "node_names repeats n0, n1, n2, n3, n4 and 3 more"
    assert repeated_names(["gpu-a01", "gpu-a02"]) is None
    settings = LaunchSettings(node_names=("Gpu-A01", "gpu-a01"))
    assert settings.names_problem(2) == (
        "node_names repeats Gpu-A01 = gpu-a01 (host names are case-insensitive, RFC 4343)"
    )


def test_a_million_distinct_names_are_checked_in_one_pass():
    names = [f"node-{i}" for i in range(MAX_GPUS)]
    with hang_guard():
        assert repeated_names(names) is None
        assert repeated_names([*names, "NODE-7"]) == (
            "node_names repeats node-7 = NODE-7 (host names are case-insensitive, RFC 4343)"
        )


def test_a_cluster_of_32768_named_nodes_is_planned(tmp_path, monkeypatch, capsys):
    names = ", ".join(f"node{i:05d}" for i in range(NAMES_IN_A_LONG_LIST))
    (tmp_path / "c.yaml").write_text(f"gpu: h100\nnode_names: [{names}]\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    argv = ["plan", "llama-3-8b", "--cluster", "c.yaml", "--global-batch", "262144", "--out", "o"]

    with hang_guard():
        code = main(argv)

    capsys.readouterr()
    assert code == 0
    hosts = [line for line in (tmp_path / "o" / "hostfile").read_text().splitlines() if
             not line.startswith("#")]  # fmt: skip
    assert len(hosts) == NAMES_IN_A_LONG_LIST
    assert hosts[0] == "node00000 slots=8" and hosts[-1] == "node32767 slots=8"


# ---- e. budget figures --------------------------------------------------------------------------


def test_every_budget_range_has_its_reason_and_holds_the_defaults():
    data = YAML(typ="safe").load(
        (REPO / "parplan_gen" / "data" / "budget_ranges.yaml").read_text(encoding="utf-8")
    )
    assert set(data["ranges"]) == set(BUDGET_KEYS)
    assert all(len(r["source"]) > 40 for r in data["ranges"].values())
    # the defaults of rules/budget/budget.yaml, on one GPU and on the most parplan plans
    assert budget_figure_problem("mtbf_gpu_hours", 54 * 24 * 16384 / 419) is None
    per_gpu_gb = 2e12 / 16384 / 1e9
    assert budget_figure_problem("storage_gb_per_s", per_gpu_gb) is None
    assert budget_figure_problem("storage_gb_per_s", per_gpu_gb * MAX_GPUS) is None
    assert budget_ranges()["gpu_hour_price"].low > 0


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"gpu_hour_price": -5}, "gpu_hour_price: expected a number from 0.0001 to 1e+08 "
         "(parplan_gen/data/budget_ranges.yaml ranges.gpu_hour_price), got -5"),
        ({"gpu_hour_price": 1e308}, "gpu_hour_price: expected a number from 0.0001 to 1e+08 "
         "(parplan_gen/data/budget_ranges.yaml ranges.gpu_hour_price), got 1e+308"),
        ({"gpu_hour_price": math.nan}, "gpu_hour_price: expected a number from 0.0001 to 1e+08 "
         "(parplan_gen/data/budget_ranges.yaml ranges.gpu_hour_price), got nan"),
        ({"gpu_hour_price": True}, "gpu_hour_price: expected a number from 0.0001 to 1e+08 "
         "(parplan_gen/data/budget_ranges.yaml ranges.gpu_hour_price), got True"),
        ({"gpu_hour_price": "2.5"}, "gpu_hour_price: expected a number from 0.0001 to 1e+08 "
         "(parplan_gen/data/budget_ranges.yaml ranges.gpu_hour_price), got '2.5'"),
        ({"gpu_hour_price": -5, "days": 30}, "gpu_hour_price: expected a number from 0.0001 to "
         "1e+08 (parplan_gen/data/budget_ranges.yaml ranges.gpu_hour_price), got -5"),
        ({"tokens": "١T"}, "tokens: expected a count of tokens such as 15T, 300B or 2e12, got "
         "'١T'"),
    ],
)  # fmt: skip
def test_the_api_refuses_a_budget_figure_before_any_search(request_, message):
    request_ = {"tokens": "1T", **request_}
    with hang_guard(), pytest.raises(InputError) as refused:
        parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512, **request_)
    assert refused.value.render() == message


@pytest.mark.parametrize("key", BUDGET_KEYS)
@pytest.mark.parametrize("value", [-5, 0, 1e308, math.inf, math.nan, True, "2"])
def test_budget_inputs_built_in_python_refuse_a_budget_figure(key, value):
    with pytest.raises(ValidationError) as refused:
        BudgetInputs.model_validate({key: value})
    assert refused.value.errors()[0]["loc"][0] == key


def test_a_budget_figure_around_the_checks_is_refused_where_it_is_used():
    inputs = BudgetInputs().model_copy(update={"mtbf_gpu_hours": -5.0})
    cluster = cluster_from_flags(8, "h100")
    with pytest.raises(InputError, match=r"^mtbf_gpu_hours \(cluster file \(mtbf_gpu_hours\)\)"):
        parplan_gen.plan(
            "llama-3-8b", cluster, global_batch=512, seq_len=8192, tokens="1T", budget_inputs=inputs
        )


# ---- f. plan.json: every number has its JSON type ---------------------------------------------


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for key in parents:
        data = data[key]
    data[leaf] = value


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("model.num_layers", True, "Input should be a valid integer (got True)"),
        ("model.num_layers", 32.0, "Input should be a valid integer (got 32.0)"),
        ("model.hidden_size", "4096", "Input should be a valid integer (got '4096')"),
        ("chosen.plan.tp", "8", "Input should be a valid integer (got '8')"),
        ("chosen.plan.mbs", 1.5, "Input should be a valid integer (got 1.5)"),
        ("chosen.plan.sequence_parallel", 1, "Input should be a valid boolean (got 1)"),
        ("cluster.num_gpus", True, "Input should be a valid integer (got True)"),
        ("cluster.gpus_per_node", 8.0, "Input should be a valid integer (got 8.0)"),
        ("launch.ib_gid_index", 2**70, "Input should be less than or equal to 255 (got "
         "1180591620717411303424)"),
        ("launch.cpus_per_node", "96", "Input should be a valid integer (got '96')"),
        ("launch.socket_ifname", "eth0$(id)", "String should match pattern "
         "'^[\\^=]{0,2}[A-Za-z0-9_.:\\-]+(,[A-Za-z0-9_.:\\-]+)*$' (got 'eth0$(id)')"),
        ("chosen.time.step_s", "1.5", "Input should be a valid number (got '1.5')"),
    ],
)  # fmt: skip
def test_plan_json_refuses_a_value_of_the_wrong_type(tmp_path, monkeypatch, capsys, path, value,
                                                     message):  # fmt: skip
    data = json.loads(GOLDEN_PLAN.read_text(encoding="utf-8"))
    _set(data, path, value)
    (tmp_path / "plan.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)

    with hang_guard():
        code = main(["render", "plan.json", "--out", "out"])

    out, err = capsys.readouterr()
    assert (code, out, err.count("\n")) == (1, "", 1), err
    assert re.fullmatch(rf"{PREFIX}plan\.json:\d+:\d+: {re.escape(path)}: {re.escape(message)}\n",
                        err), err  # fmt: skip
    assert snapshot(tmp_path) == before


def test_plan_json_as_written_still_renders(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["render", str(GOLDEN_PLAN), "--out", "out"]) == 0
    capsys.readouterr()
    assert (tmp_path / "out" / "plan.json").read_bytes() == GOLDEN_PLAN.read_bytes()
