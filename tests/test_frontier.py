"""`parplan frontier` and `parplan_gen.frontier`: the Pareto front and the `--days` /
`--budget` marks on hand-made points (pure functions), each point's figures against
`parplan_gen.plan`'s budget, infeasible points, the JSON contract and the files of `--out`."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.planning.frontier import (
    Frontier,
    FrontierPoint,
    Pick,
    cheapest_within,
    marked,
    pareto_front,
    soonest_within,
)

from conftest import REPO, Run

SMALL = ("megatron-gpt-1.7b", "--global-batch", "64", "--seq-len", "2048", "--tokens", "10B")
SVG = "{http://www.w3.org/2000/svg}"


def point(gpu: str, gpus: int, days: float | None, cost: float | None, hours: float = 1.0):
    """A hand-made point: `days` None has no plan; `cost` None has no price."""
    figures = {"wall_days": days, "gpu_hours": None if days is None else hours, "cost": cost}
    return FrontierPoint(
        gpu=gpu, gpus=gpus, feasible=days is not None, reason=None if days else "no plan",
        backend=None, layout=None, layout_label=None, step_s=None, mfu=None,
        gpu_hour_price=None, **figures,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("pairs", "front"),
    [
        # (days, cost): a point is off the front when another is at least as soon and as
        # cheap, and better in one
        ([(10, 100), (5, 200), (20, 50)], [True, True, True]),
        ([(10, 100), (10, 90), (12, 100)], [False, True, False]),
        ([(10, 100), (10, 100)], [True, True]),  # equal points: neither is better
        ([(10, 100), None, (5, 50)], [False, False, True]),  # None: no plan, never on it
        ([], []),
    ],
)
def test_pareto_front_on_hand_made_points(pairs: list, front: list[bool]) -> None:
    assert pareto_front(pairs) == front


def test_the_front_compares_gpu_hours_when_a_gpu_type_has_no_price() -> None:
    points = [point("h100", 8, 10, 100, hours=40), point("b200", 8, 6, None, hours=30)]
    done, basis, note, _, _ = marked(points, ["b200"])
    assert (basis, note) == ("gpu_hours", "compared on GPU-hours: no price given for b200")
    assert [p.on_front for p in done] == [False, True]  # b200: sooner and fewer GPU-hours
    done, basis, note, _, _ = marked(points[:1], [])
    assert (basis, note, done[0].on_front) == ("cost", None, True)


def test_days_marks_the_cheapest_point_within_the_deadline_and_budget_the_soonest() -> None:
    points = [
        point("h100", 64, 40, 300),
        point("h100", 128, 22, 330),
        point("b200", 64, 25, 280),
        point("b200", 128, 13, 310),
        point("b200", 256, None, None),
    ]
    pick = cheapest_within(points, 30, "cost")
    assert (pick.gpu, pick.gpus) == ("b200", 64)
    assert pick.why == "the least cost of the 3 point(s) that train within 30 days"
    pick = soonest_within(points, 320)
    assert (pick.gpu, pick.gpus, pick.limit) == ("b200", 128, 320)
    assert cheapest_within(points, 10, "cost").gpu is None
    assert soonest_within(points, 100).why == "no priced point costs 100 or less"


def test_a_point_has_the_days_and_cost_that_plan_gives() -> None:
    """One point of the frontier is `plan --tokens` on its GPU and count: the same figures,
    exactly."""
    rules, model = parplan_gen.load_rules(), parplan_gen.api.load_model("megatron-gpt-1.7b")
    args = {"global_batch": 64, "seq_len": 2048, "tokens": "10B", "rules": rules}
    found = parplan_gen.frontier(model, "h100", [8], gpu_hour_price=2.5, **args)
    budget = parplan_gen.plan(
        model, {"gpus": 8, "gpu": "h100"}, gpu_hour_price=2.5, **args
    ).document.budget
    assert budget is not None
    (p,) = found.points
    assert (p.wall_days, p.gpu_hours, p.cost) == (budget.wall_days, budget.gpu_hours, budget.cost)
    assert p.on_front and p.feasible and p.reason is None


def test_forked_workers_give_the_same_points() -> None:
    args = {"global_batch": 64, "seq_len": 2048, "tokens": "10B", "gpu_hour_price": 2.5}
    alone = parplan_gen.frontier("megatron-gpt-1.7b", "h100", [8, 16], **args)
    forked = parplan_gen.frontier("megatron-gpt-1.7b", "h100", [8, 16], jobs=2, **args)
    assert forked == alone


def test_infeasible_points_say_why_in_one_line() -> None:
    found = parplan_gen.frontier(
        "llama-3-8b", "a100-40gb", [1, 12], global_batch=64, seq_len=8192, tokens="10B"
    )
    assert [p.reason for p in found.points] == [
        "nothing fits in GPU memory (the closest layout needs 139.7 GiB per GPU, the GPU has 40.0 GiB)",
        "gpus/gpus_per_node: num_gpus(12) is not a multiple of gpus_per_node(8)",
    ]
    assert not any(p.on_front or p.feasible for p in found.points)


def test_frontier_json_is_the_documented_contract(cli: Callable[..., Run]) -> None:
    run = cli("frontier", *SMALL, "--gpu", "h100,a100-80gb", "--gpus", "8,12", "--jobs", "1",
              "--gpu-hour-price", "h100=2.5,a100=1.5", "--days", "30", "--json")  # fmt: skip
    assert run.code == 0, run.err
    data = run.json()
    assert list(data) == list(Frontier.model_fields)
    assert data["format_version"] == 1
    assert data["gpu_types"] == ["h100-sxm-80gb", "a100-80gb"]
    assert data["basis"] == "cost" and data["deadline"]["gpu"] is not None
    assert [p["reason"] is None for p in data["points"]] == [True, False, True, False]
    assert Frontier.model_validate(data).points[0].layout is not None
    assert run.err == ""  # no progress line: stderr is no terminal


@pytest.mark.parametrize(
    ("section", "model"),
    [("", Frontier), (": points", FrontierPoint), (": deadline, budget", Pick)],
)
def test_docs_list_every_frontier_json_key(section: str, model: type) -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split(f"<!-- frontier.json{section} -->\n", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"^\| `([a-z0-9_]+)` \|", table, re.M) == list(model.model_fields)


def test_the_view_marks_the_front_and_the_picks(cli: Callable[..., Run]) -> None:
    run = cli("frontier", *SMALL, "--gpu", "h100", "--gpus", "8,16", "--jobs", "1",
              "--gpu-hour-price", "2.5", "--days", "1", "--budget", "1000")  # fmt: skip
    assert run.code == 0, run.err
    assert "front: no other point trains at least as soon for as little cost" in run.out
    assert "\ndays: h100-sxm-80gb x " in run.out
    assert "\nbudget: h100-sxm-80gb x 16: the soonest of the 2 priced point(s)" in run.out
    assert " front budget\n" in run.out


def test_out_writes_the_three_files(cli: Callable[..., Run], tmp_path: Path) -> None:
    argv = ("frontier", *SMALL, "--gpu", "h100,b200", "--gpus", "8,16", "--jobs", "1",
            "--gpu-hour-price", "h100=2.5,b200=4", "--days", "1", "--out", tmp_path)  # fmt: skip
    run = cli(*argv)
    assert run.code == 0, run.err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "frontier.json", "frontier.md", "frontier.svg",
    ]  # fmt: skip
    data = json.loads((tmp_path / "frontier.json").read_text(encoding="utf-8"))
    assert len(data["points"]) == 4
    md = (tmp_path / "frontier.md").read_text(encoding="utf-8")
    assert "| GPU | GPUs | backend | layout |" in md and "](frontier.svg)" in md
    svg = (tmp_path / "frontier.svg").read_bytes()
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "days to train (log scale)" in texts
    assert "cost, in the units of --gpu-hour-price (log scale)" in texts
    assert "h100-sxm-80gb" in texts and "b200" in texts  # the legend: one series per GPU type
    assert len(list(root.iter(f"{SVG}circle"))) >= 4
    assert root.find(f"{SVG}polyline[@class='front']") is not None
    assert cli(*argv).out.count("unchanged") == 3  # byte-deterministic: nothing rewritten
    cairosvg = pytest.importorskip("cairosvg")
    png = cairosvg.svg2png(bytestring=svg)
    assert png.startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--gpu", "h100", "--gpu-hour-price", "h100=2.5,b200:4"),
         "parplan: error: --gpu-hour-price: item 'b200:4' is not GPU=PRICE "
         "(h100=2.5,b200=4.0, or one price for every GPU: 2.5)\n"),
        (("--gpu", "h100", "--gpu-hour-price", "h100=abc"),
         "parplan: error: --gpu-hour-price: item 'h100=abc': expected a number (digits 0-9), "
         "got 'abc'\n"),
        (("--gpu", "h100", "--gpu-hour-price", "b200=4"),
         "parplan: error: --gpu-hour-price: a price for b200, which is not among the GPUs "
         "asked (h100-sxm-80gb)\n"),
        (("--gpu", "h100", "--budget", "100"),
         "parplan: error: --budget: give --gpu-hour-price too (the budget is a cost)\n"),
    ],
)  # fmt: skip
def test_errors_are_one_line(cli: Callable[..., Run], flags: tuple, message: str) -> None:
    run = cli("frontier", *SMALL, "--gpus", "8", *flags)
    assert (run.code, run.err) == (1, message)


def test_an_unknown_gpu_is_the_catalog_error(cli: Callable[..., Run]) -> None:
    run = cli("frontier", *SMALL, "--gpus", "8", "--gpu", "h100,h1000")
    assert run.code == 1
    assert run.err.startswith("parplan: error: --gpu: unknown GPU 'h1000'; did you mean 'h100'? ")
    assert run.err.count("\n") == 1
    assert cli("frontier", *SMALL, "--gpus", "8,x", "--gpu", "h100").err == (
        "parplan: error: --gpus: item 'x' is not a whole number of GPUs\n"
    )
