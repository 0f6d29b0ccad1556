"""plan_time.svg and plan_memory.svg read back as a reader would: axes with units, one row or
column per charted layout labelled by its layout, the overlapped communication drawn once (a
band under compute, not added to the bar), and the capacity and headroom lines where the plan's
own figures put them on the chart's own scale."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from functools import cache

import pytest

from parplan_gen.api import plan
from parplan_gen.inputs.defaults import GIB
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.charts import chart_rows, nice_ticks
from parplan_gen.render.labels import seconds
from parplan_gen.render.plan_files import render_plan

NS = {"s": "http://www.w3.org/2000/svg"}
PX = 0.15  # coordinates are written to 0.1 px: the roundings of a position and of the scale
CHART_ROWS = 5  # templates/mapping.yaml report.chart_rows


@cache
def planned(name: str) -> tuple[PlanDocument, dict[str, str]]:
    requests = {
        # ZeRO data parallelism on one node: the gradient traffic hides under the backward
        "dense": ("llama-3-8b", 8, 256, 8192),
        # Megatron tp 4-8 with sequence parallelism: --tp-comm-overlap hides TP traffic
        "tp": ("llama-3-70b", 64, 1024, 8192),
    }
    model, gpus, batch, seq = requests[name]
    doc = plan(model, {"gpus": gpus, "gpu": "h100"}, global_batch=batch, seq_len=seq).document
    return doc, render_plan(doc)


def svg(text: str) -> ET.Element:
    return ET.fromstring(text)


def number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


def x_scale(root: ET.Element) -> tuple[float, float, str]:
    """(x of 0, pixels per axis unit, unit) from the time axis's tick labels."""
    ticks = [t for t in root.iterfind(".//s:text[@class='tick']", NS)]
    xs = [float(t.get("x")) for t in ticks]
    values = [number(t.text) for t in ticks]
    units = {t.text.split()[1] for t in ticks}
    assert len(units) == 1
    return xs[0], (xs[-1] - xs[0]) / (values[-1] - values[0]), units.pop()


def test_nice_ticks_step_by_one_two_or_five_to_cover_the_top():
    # 126.9 / 5 = 25.4 -> step 50 (1, 2 or 5 x 10^k at or above), 3 steps reach 150
    assert nice_ticks(126.9) == [0, 50, 100, 150]
    # 0.0318 / 5 = 0.00636 -> step 0.01, 4 steps reach 0.04
    assert nice_ticks(0.0318) == pytest.approx([0, 0.01, 0.02, 0.03, 0.04])
    assert nice_ticks(80) == [0, 20, 40, 60, 80]  # 16 -> 20; exactly 4 steps


@pytest.mark.parametrize("name", ["dense", "tp"])
def test_time_chart_has_a_seconds_axis_and_one_row_per_charted_layout(name):
    doc, files = planned(name)
    root = svg(files["plan_time.svg"])
    _, _, unit = x_scale(root)
    assert unit == ("s" if doc.chosen.time.step_s >= 1 else "ms")
    ticks = [t.text for t in root.iterfind(".//s:text[@class='tick']", NS)]
    assert ticks[0] == f"0 {unit}" and len(ticks) >= 3
    rows = chart_rows(doc, CHART_ROWS)
    labels = [t.text for t in root.iterfind(".//s:text[@class='row-label']", NS)]
    assert len(labels) == len(rows) == min(CHART_ROWS, 1 + len(doc.candidates))
    for label, (chosen, e) in zip(labels, rows, strict=True):
        p = e.plan
        assert label.startswith(f"{e.backend.name} tp{p.tp} pp{p.pp} dp{p.dp}")
        assert label.endswith("(chosen)") == chosen
        assert "#" not in label
    assert len(set(labels)) == len(labels)
    title = root.find("s:title", NS).text
    assert doc.model.name in title and f"{doc.cluster.num_gpus} x " in title


@pytest.mark.parametrize(("name", "part"), [("dense", "dp comm"), ("tp", "tp comm")])
def test_time_chart_draws_overlapped_communication_once(name, part):
    doc, files = planned(name)
    root = svg(files["plan_time.svg"])
    x0, per_unit, unit = x_scale(root)
    per_s = per_unit * (1 if unit == "s" else 1000)
    bars = root.findall(".//s:rect[@class='part']", NS)
    bands = root.findall(".//s:rect[@class='hidden']", NS)
    steps = root.findall(".//s:line[@class='step']", NS)
    key = part.replace(" ", "_") + "_s"
    exposed_key = key.replace("_comm_s", "_exposed_s")
    overlapped = 0
    for _, e in chart_rows(doc, CHART_ROWS):
        t = e.time.model_dump()
        hidden = t[key] - t[exposed_key]
        # the step mark sits at time.step_s on the axis
        assert any(abs(float(s.get("x1")) - (x0 + e.time.step_s * per_s)) < PX for s in steps)
        if hidden <= 0:
            continue
        overlapped += 1
        title = f"{part} hidden under compute: {seconds(hidden)}"
        band = next(b for b in bands if b.find("s:title", NS).text == title)
        assert float(band.get("width")) == pytest.approx(hidden * per_s, abs=2 * PX)
        exposed = f"{part} exposed: {seconds(t[exposed_key])} of {seconds(t[key])}"
        drawn = [b for b in bars if b.find("s:title", NS).text == exposed]
        if t[exposed_key] == 0:  # all hidden: nothing in the bar
            assert not drawn
            continue
        assert float(drawn[0].get("width")) == pytest.approx(t[exposed_key] * per_s, abs=2 * PX)
    assert overlapped  # the plan overlaps this communication


def test_each_time_bar_ends_at_its_step_not_at_the_parts_added_up():
    doc, files = planned("dense")
    root = svg(files["plan_time.svg"])
    x0, per_unit, unit = x_scale(root)
    per_s = per_unit * (1 if unit == "s" else 1000)
    ends = sorted(
        float(r.get("x")) + float(r.get("width"))
        for r in root.iterfind(".//s:rect[@class='part']", NS)
    )
    for _, e in chart_rows(doc, CHART_ROWS):
        t = e.time
        assert t.dp_exposed_s < t.dp_comm_s  # overlapped: the parts add up past the step
        # rules/cost/time.yaml step_time: the stage's work and bubble, pp, exposed dp, optimizer
        assert any(abs(end - (x0 + t.step_s * per_s)) < 10 * PX for end in ends)


@pytest.mark.parametrize("name", ["dense", "tp"])
def test_memory_chart_columns_capacity_and_headroom_on_the_charts_scale(name):
    doc, files = planned(name)
    root = svg(files["plan_memory.svg"])
    ticks = root.findall(".//s:text[@class='tick']", NS)
    assert all(t.text.endswith(" GiB") for t in ticks) and ticks[0].text == "0 GiB"
    y0 = float(ticks[0].get("y"))
    per_gib = (y0 - float(ticks[1].get("y"))) / (number(ticks[1].text) - number(ticks[0].text))
    grid = root.findall(".//s:line[@class='grid']", NS)
    zero_y = float(grid[0].get("y1"))
    limits = {
        line.find("s:title", NS).text.split(" ")[0]: float(line.get("y1"))
        for line in root.iterfind(".//s:line[@class='limit']", NS)
    }
    capacity = doc.chosen.memory.capacity
    assert limits["GPU"] == pytest.approx(zero_y - capacity / GIB * per_gib, abs=2 * PX)
    assert set(limits) == {"GPU"}  # what is kept free is drawn per column
    # the default headroom: GMLake's 9.2 GB of 80 as a share of each layout's tensors
    assert doc.search.headroom_share == pytest.approx(9.2 / 80)
    rows = chart_rows(doc, CHART_ROWS)
    labels = root.findall(".//s:text[@class='column-label']", NS)
    assert len(labels) == len(rows)
    parts = root.findall(".//s:rect[@class='part']", NS)
    kept = root.findall(".//s:rect[@class='kept-free']", NS)
    assert len(kept) == len(rows)
    for label, (chosen, e), box in zip(labels, rows, kept, strict=True):
        m = e.memory
        assert m.kept_free == pytest.approx(9.2 / 80 * (m.total - m.other), abs=1)
        assert float(box.get("height")) == pytest.approx(m.kept_free / GIB * per_gib, abs=PX)
        top = float(box.get("y")) + float(box.get("height"))  # its bottom: the parts' top
        assert top == pytest.approx(zero_y - m.total / GIB * per_gib, abs=6 * PX)
        lines = [t.text for t in label.iterfind("s:tspan", NS)]
        assert lines[-1] == f"{e.memory.total / GIB:,.1f} GiB"
        assert (" ".join(lines[:-1]).endswith("(chosen)")) == chosen
        x = label.find("s:tspan", NS).get("x")
        column = [
            r
            for r in parts
            if float(r.get("x")) + float(r.get("width")) / 2 == pytest.approx(float(x), abs=PX)
        ]
        height = sum(float(r.get("height")) for r in column)
        assert height == pytest.approx(e.memory.total / GIB * per_gib, abs=len(column) * PX)


def test_a_layout_that_does_not_fit_says_so_in_its_label():
    # and the closest candidate of a search where nothing fits is not called "chosen"
    # llama-3-70b on 8 H100: 16 B/param of weights, grads and Adam state alone exceed 8 x 80 GB
    doc = plan("llama-3-70b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=8192).document
    assert not doc.chosen.memory.fits
    root = svg(render_plan(doc)["plan_memory.svg"])
    first = root.find(".//s:text[@class='column-label']", NS)
    assert " ".join(t.text for t in first.iterfind("s:tspan", NS)).endswith(
        f"(does not fit) (closest) {doc.chosen.memory.total / GIB:,.1f} GiB"
    )  # nothing fits: the chosen row is the closest candidate, as the text view says


def test_charts_are_deterministic():
    doc, files = planned("dense")
    again = render_plan(PlanDocument.model_validate_json(doc.model_dump_json()))
    assert again["plan_time.svg"] == files["plan_time.svg"]
    assert again["plan_memory.svg"] == files["plan_memory.svg"]


def test_a_plan_json_without_exposed_parts_draws_communication_in_full_and_says_so():
    doc, _ = planned("dense")
    data = doc.model_dump(mode="json")
    for e in (data["chosen"], *data["candidates"]):
        e["time"].pop("tp_exposed_s"), e["time"].pop("dp_exposed_s")
    older = PlanDocument.model_validate(data)
    assert older.chosen.time.dp_exposed_s is None
    root = svg(render_plan(older)["plan_time.svg"])
    assert not root.findall(".//s:rect[@class='hidden']", NS)
    titles = [r.find("s:title", NS).text for r in root.iterfind(".//s:rect[@class='part']", NS)]
    assert f"dp comm: {seconds(older.chosen.time.dp_comm_s)}" in titles
    note = root.find(".//s:text[@class='note']", NS)
    assert note is not None and "drawn in full" in note.text
    assert json_keys(older) == json_keys(doc) - {"tp_exposed_s", "dp_exposed_s"}


def json_keys(doc: PlanDocument) -> set[str]:
    return set(doc.model_dump(mode="json")["chosen"]["time"])
