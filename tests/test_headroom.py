"""What `plan` keeps free on each GPU (rules/constraints/headroom.yaml): the default as a share
of each layout's tensors, what the memory rule keeps free shown as the estimate's
`memory.kept_free`, the words a layout that does not fit gets, an overlay of its own, and a
plan.json written before estimates carried the figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.cli.main import main
from parplan_gen.cost.estimate import MemoryBreakdown
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.pins import HeadroomRecord
from parplan_gen.render.report_rows import headroom_text

GOLDEN_PLAN = Path(__file__).parent / "golden" / "dense_multinode" / "plan.json"
H100_8 = {"gpus": 8, "gpu": "h100"}
SMALL = "megatron-gpt-1.7b"


def _memory(total_gib: float, kept_gib: float | None, capacity_gib: float = 80) -> MemoryBreakdown:
    total = round(total_gib * GIB)
    return MemoryBreakdown(
        params=total, grads=0, optimizer=0, activations=0, other=0, total=total,
        capacity=round(capacity_gib * GIB), fits=False,
        kept_free=None if kept_gib is None else round(kept_gib * GIB),
    )  # fmt: skip


def test_what_a_layout_needs_is_its_total_and_what_is_kept_free() -> None:
    # 75 GiB of tensors and 11.5 % of them kept free: 83.6 GiB asked of an 80 GiB GPU
    short = _memory(75, 75 * 0.115)
    assert short.needed == round(75 * GIB) + round(75 * 0.115 * GIB)
    assert short.shortfall() == "3.6 GiB over keeping 8.6 GiB free"
    assert short.kept_free_text() == " and 8.6 GiB kept free"  # the total alone would fit
    over = _memory(90, 10)  # over without it: the headroom is not why, and not named
    assert (over.shortfall(), over.kept_free_text()) == ("10.0 GiB over", "")
    assert _memory(90, 0).shortfall() == "10.0 GiB over"
    assert _memory(60, 6).shortfall() == ""  # fits: another memory rule is why, if any
    # a plan.json written before estimates carried it: nothing known kept free
    assert _memory(70, None).needed == round(70 * GIB)


def test_the_search_headroom_in_words() -> None:
    def record(gib: float, share: float) -> HeadroomRecord:
        return HeadroomRecord(
            headroom="x", headroom_bytes=round(gib * GIB), headroom_share=share,
            headroom_source="test",
        )  # fmt: skip

    assert headroom_text(record(0, 0.115)) == "11.5 % of each layout's tensors"
    assert headroom_text(record(4, 0)) == "4.0 GiB per GPU"
    assert headroom_text(record(0, 0)) == "0.0 GiB per GPU"  # --headroom 0
    # an overlay's memory_headroom (bytes) beside the default share
    assert headroom_text(record(2, 0.1)) == "2.0 GiB per GPU + 10.0 % of each layout's tensors"


def _overlay(tmp_path: Path, text: str) -> str:
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "h.yaml").write_text(text, encoding="utf-8")
    return str(folder)


def test_a_memory_rule_of_an_overlays_own_keeps_nothing_it_does_not_read(tmp_path: Path) -> None:
    # memory.fits replaced by one that reads the bytes alone: nothing else is kept free, and the
    # estimate does not claim otherwise
    rules = _overlay(
        tmp_path,
        "constraints:\n"
        "  - id: memory.fits\n"
        '    require: "estimate.memory_total + train.memory_headroom <= estimate.memory_capacity"\n'
        '    reason: "does not fit"\n'
        "    severity: reject\n"
        '    source: "test"\n',
    )
    found = parplan_gen.plan(SMALL, H100_8, global_batch=64, rules=[rules])
    assert found.feasible
    assert {c.memory.kept_free for c in found.document.candidates} == {0}
    default = parplan_gen.plan(SMALL, H100_8, global_batch=64)
    assert all(c.memory.kept_free for c in default.document.candidates)


@pytest.mark.parametrize("name", ["memory_headroom_default", "memory_headroom_fraction_default"])
def test_an_overlay_of_the_retired_headroom_names_is_refused(tmp_path: Path, name: str) -> None:
    rules = _overlay(tmp_path, f'formulas:\n  {name}: "4 * GiB"\n')
    with pytest.raises(InputError, match="no longer read") as raised:
        parplan_gen.plan(SMALL, H100_8, global_batch=64, rules=[rules])
    assert "memory_headroom_share_default" in raised.value.message
    assert raised.value.where is not None and raised.value.where.file.endswith("h.yaml")


def test_a_plan_json_written_before_keeps_its_headroom_in_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(GOLDEN_PLAN.read_text(encoding="utf-8"))
    for estimate in [data["chosen"], *data["candidates"]]:
        estimate["memory"].pop("kept_free", None)  # as estimates were written before
    del data["search"]["headroom_share"]
    data["search"]["headroom_bytes"] = 4 * GIB
    (tmp_path / "old.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["render", "old.json", "--out", "out"]) == 0
    capsys.readouterr()
    chart = (tmp_path / "out" / "plan_memory.svg").read_text(encoding="utf-8")
    columns = chart.count('class="column-label"')
    assert columns > 0
    assert chart.count("<title>kept free: 4.0 GiB</title>") == columns
    # written back as read: no figure the old file did not hold
    assert '"kept_free"' not in (tmp_path / "out" / "plan.json").read_text(encoding="utf-8")


def test_an_estimate_read_back_unfit_without_a_shortfall_names_the_other_memory_rules() -> None:
    # compare's columns: an estimate without its verdicts whose GPU memory holds the total and
    # what is kept free, yet the memory rules broke (the host's pinned buffers, an overlay's)
    from parplan_gen.planning.evaluate import Evaluation

    found = parplan_gen.estimate("llama-3-8b", H100_8, {"global_batch": 64, "zero_stage": 3})
    assert found.fits
    memory = found.estimate.memory.model_copy(update={"fits": False})
    problem = Evaluation(found.estimate.model_copy(update={"memory": memory}), ()).problem()
    assert problem is not None
    assert problem.endswith("(another memory rule breaks: the host's, or an overlay's)")


def test_estimate_keeps_free_what_plan_would_for_each_form_of_the_headroom() -> None:
    layout = {"tp": 2, "global_batch": 64, "seq_len": 4096, "distributed_optimizer": True}

    def kept(headroom: object) -> MemoryBreakdown:
        found = parplan_gen.estimate("llama-3-8b", H100_8, layout, headroom=headroom)  # type: ignore[arg-type]
        return found.estimate.memory

    whole = kept(None)  # the default: the whole GPU, as `parplan estimate` judges
    assert whole.kept_free == 0
    assert kept(4).kept_free == 4 * GIB
    assert kept("10%").kept_free == round(0.1 * 80 * GIB)
    # GMLake's share (rules/constraints/headroom.yaml: 9.2 / 80) of the tensors (total less other)
    tensors = whole.total - whole.other
    assert kept("default").kept_free == pytest.approx(9.2 / 80 * tensors, abs=1)
    # a plan's own headroom, as plan.json records it, is taken as is
    plan = parplan_gen.plan("llama-3-8b", H100_8, global_batch=64, seq_len=4096, headroom="10%")
    assert kept(plan.document.search.memory_headroom).kept_free == round(0.1 * 80 * GIB)
    with pytest.raises(InputError, match="or default, got 'lots'"):
        kept("lots")


def test_a_recorded_headroom_out_of_range_is_refused_and_explain_keeps_it_too() -> None:
    from parplan_gen.cost.estimate import MemoryHeadroom

    layout = {"tp": 2, "global_batch": 64, "seq_len": 4096}
    with pytest.raises(InputError, match="headroom: -5 bytes and 2 of the tensors"):
        parplan_gen.estimate("llama-3-8b", H100_8, layout, headroom=MemoryHeadroom(-5, 2.0))
    # explain takes estimate's arguments: what memory.fits keeps free is the headroom asked
    tree = parplan_gen.explain("llama-3-8b", H100_8, layout, "memory_kept_free", headroom="10%")
    assert tree.value == round(0.1 * 80 * GIB)
    assert parplan_gen.explain("llama-3-8b", H100_8, layout, "memory_kept_free").value == 0
    # a plan's default headroom, a share of the tensors, is carried as recorded
    plan = parplan_gen.plan("llama-3-8b", H100_8, global_batch=64, seq_len=4096)
    recorded = plan.document.search.memory_headroom
    assert (recorded.bytes, recorded.share) == (0, pytest.approx(9.2 / 80))
    kept = parplan_gen.estimate("llama-3-8b", H100_8, layout, headroom=recorded).estimate.memory
    assert kept.kept_free == pytest.approx(9.2 / 80 * (kept.total - kept.other), abs=1)
