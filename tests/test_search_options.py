"""`plan`'s search options (planning/search_choices.py): interleaving, sequence parallelism with
tp > 1 and the gradient-reduction overlap, each a request field whose default is a named
formula of rules/search/defaults.yaml, recorded in plan.json's `search`; the seed's rules
(rules/seed/) steer none of them.

The expected values are those the defaults' sources give: Korthikanti et al. 2022 Sec. 4.2.2
(sequence parallelism costs no extra traffic: on with tp > 1), Narayanan et al. 2021 Sec. 2.2.2
(interleaving trades the bubble for traffic: searched), DeepSpeed's overlap_comm / Megatron-LM's
--overlap-grad-reduce (on, as the backends without the switch always overlap).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.api import Plan
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.document import PlanDocument, PlanDocumentError, load_plan_document
from parplan_gen.rules.ruleset import load_rules

from conftest import builtin_rules

H100_8 = {"gpus": 8, "gpu": "h100"}
SMALL = "megatron-gpt-1.7b"  # 24 layers: pp 2 gives 12 layers a stage, vpp 2, 3, 4, 6, 12
# tp 2 and pp 2 on 8 GPUs: sequence parallelism, interleaving and dp 2's gradient reduction
# are all in play.
PINS = {"tp": 2, "pp": 2}
CLI_REQUEST = (SMALL, "--gpus", "8", "--gpu", "h100", "--global-batch", "64", "--tp", "2")
DEFAULTS = "rules/search/defaults.yaml"


def _plan(**request: object) -> Plan:
    request = {"pins": PINS, **request}
    return parplan_gen.plan(SMALL, H100_8, global_batch=64, **request)  # type: ignore[arg-type]


def _layouts(plan: Plan) -> list[tuple[int, int, int, bool]]:
    return [
        (c.plan.tp, c.plan.pp, c.plan.vpp, c.plan.sequence_parallel)
        for c in plan.document.candidates
    ]


def _overlay(write, name: str, text: str) -> Path:
    return write(f"{name}/overlay.yaml", text).parent


# ---- the defaults ---------------------------------------------------------------------------


def test_the_defaults_are_the_rules_and_plan_json_records_them() -> None:
    found = _plan(top=20)
    search = found.document.search
    assert search is not None
    assert (search.interleave, search.sequence_parallel, search.overlap_grad_reduce) == (
        "search", "on", True,
    )  # fmt: skip
    for field in ("interleave", "sequence_parallel", "overlap_grad_reduce"):
        source = getattr(search, f"{field}_source")
        assert source == f"default: rule search_{field}_default ({DEFAULTS})"
    layouts = _layouts(found)
    assert all(sp for tp, _, _, sp in layouts if tp > 1)  # on with tp > 1
    assert any(vpp > 1 for _, _, vpp, _ in layouts)  # interleaving searched


def test_one_gpu_plans_with_the_overlap_on_as_a_layout_says_by_default() -> None:
    """With nothing to reduce the switch changes nothing, and off would leave out every backend
    that always overlaps (torchtitan, DDP, Accelerate): on, the Layout's own default."""
    one = parplan_gen.plan(SMALL, {"gpus": 1, "gpu": "h100"}, global_batch=8)
    assert one.document.search is not None and one.document.search.overlap_grad_reduce is True
    assert one.chosen.plan.overlap_grad_reduce is True


def test_a_graph_model_has_neither_interleaving_nor_sequence_parallelism() -> None:
    search = parplan_gen.plan("resnet-50", H100_8, global_batch=256).document.search
    assert search is not None
    assert (search.interleave, search.interleave_source) == (
        "off", "a graph model has no virtual pipeline stages",
    )  # fmt: skip
    assert (search.sequence_parallel, search.sequence_parallel_source) == (
        "off", "a graph model has no sequence parallelism",
    )  # fmt: skip
    assert search.overlap_grad_reduce is True


# ---- the request fields -----------------------------------------------------------------------


def test_interleave_off_searches_no_virtual_stages() -> None:
    searched, off = _plan(top=50), _plan(top=50, search={"interleave": "off"})
    assert off.document.search.interleave == "off"  # type: ignore[union-attr]
    assert off.document.search.interleave_source == "--interleave (requested)"  # type: ignore[union-attr]
    assert all(vpp == 1 for _, _, vpp, _ in _layouts(off))
    assert off.searched < searched.searched


def test_sequence_parallel_search_tries_both_and_off_none() -> None:
    on = _plan(top=50)
    both = _plan(top=50, search={"sequence_parallel": "search"})
    off = _plan(top=50, search={"sequence_parallel": "off"})
    # tp is pinned at 2: 'search' tries what 'on' and 'off' each try one way (on the backends
    # that run sequence parallelism: Megatron-LM, torchtitan)
    assert both.searched > on.searched == off.searched
    assert {sp for *_, sp in _layouts(off)} == {False}
    assert both.document.search.sequence_parallel == "search"  # type: ignore[union-attr]


def test_overlap_off_leaves_the_overlap_out_of_the_files_and_prices_it() -> None:
    on, off = _plan(), _plan(search={"overlap_grad_reduce": False}, backend="megatron")
    assert "--overlap-grad-reduce" in on.megatron_args()
    assert "--overlap-grad-reduce" not in off.megatron_args()
    assert off.chosen.plan.overlap_grad_reduce is False
    # the sync after the backward is exposed: no plan with it off is faster than the best on
    assert off.chosen.time.step_s > on.chosen.time.step_s
    assert off.chosen.time.dp_exposed_s == pytest.approx(off.chosen.time.dp_comm_s)


def test_the_cli_flags_reach_the_request(cli, tmp_path) -> None:
    run = cli(
        "plan", *CLI_REQUEST, "--interleave", "off", "--sequence-parallel-with-tp", "search",
        "--overlap-grad-reduce", "off", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    search = run.json()["search"]
    assert (search["interleave"], search["sequence_parallel"], search["overlap_grad_reduce"]) == (
        "off", "search", False,
    )  # fmt: skip
    assert search["sequence_parallel_source"] == "--sequence-parallel-with-tp (requested)"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--interleave", "off", "--vpp", "2"),
            "search option --interleave off excludes the pin --vpp 2",
        ),
        (
            ("--interleave", "off", "--min-vpp", "3"),
            "search option --interleave off excludes the bound --min-vpp 3",
        ),
        (
            ("--sequence-parallel-with-tp", "off", "--sequence-parallel"),
            "search option --sequence-parallel-with-tp off excludes the pin --sequence-parallel true",
        ),
        (
            ("--sequence-parallel-with-tp", "on", "--no-sequence-parallel"),
            "search option --sequence-parallel-with-tp on excludes the pin --sequence-parallel false",
        ),
    ],
)
def test_options_a_pin_excludes_are_one_line_errors(cli, flags, message) -> None:
    run = cli("plan", *CLI_REQUEST, *flags)
    assert run.code == 1
    assert message in run.err and len(run.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ({"interleaving": "off"}, "search.interleaving: Extra inputs are not permitted"),
        ({"sequence_parallel": "yes"}, "search.sequence_parallel: Input should be 'search', 'on'"),
        ({"overlap_grad_reduce": "on"}, "search.overlap_grad_reduce: Input should be a valid bool"),
    ],
)
def test_bad_search_options_name_the_key(search, message) -> None:
    with pytest.raises(InputError) as caught:
        parplan_gen.plan(SMALL, H100_8, global_batch=64, search=search)
    assert message in caught.value.message


def test_a_default_gives_way_to_a_pin() -> None:
    pinned = _plan(pins={**PINS, "sequence_parallel": False})
    assert {sp for *_, sp in _layouts(pinned)} == {False}
    assert pinned.document.search.sequence_parallel == "on"  # type: ignore[union-attr]


# ---- overlays -----------------------------------------------------------------------------------


def test_an_overlay_redefines_a_default(write) -> None:
    overlay = _overlay(
        write, "both", "formulas:\n  search_sequence_parallel_default: \"'search'\"\n"
    )
    found = _plan(rules=[overlay])
    search = found.document.search
    assert search is not None and search.sequence_parallel == "search"
    assert search.sequence_parallel_source == (
        "default: rule search_sequence_parallel_default (a --rules overlay)"
    )
    assert found.searched == _plan(search={"sequence_parallel": "search"}).searched


@pytest.mark.parametrize(
    ("formula", "message"),
    [
        (
            "\"'sometimes'\"",
            "search_interleave_default gives 'sometimes'; a default of interleave is one of",
        ),
        ('"plan.pp > 1"', "search_interleave_default.*plan.pp. has no value.*no plan"),
        ('"graph.depth > 8"', "search_interleave_default.*graph.depth. .*is not available here"),
    ],
)
def test_a_default_outside_its_choices_or_per_layout_is_refused(write, formula, message) -> None:
    overlay = _overlay(write, "bad", f"formulas:\n  search_interleave_default: {formula}\n")
    with pytest.raises(InputError, match=message):
        _plan(rules=[overlay])


def _seed_rule_ids() -> list[str]:
    rules = builtin_rules()
    found = [r.rule.id for r in (*rules.opportunities, *rules.proposals)]
    assert found and all(i.startswith("seed.") for i in found)
    return found


@pytest.mark.parametrize("rule_id", _seed_rule_ids())
def test_disabling_a_seed_rule_changes_nothing_but_the_proposals(write, rule_id: str) -> None:
    """The seed's heuristics are shown, never searched: the plan, its search record and its
    files are the same without any one of them."""
    base = _plan()
    overlay = _overlay(write, "off", f"disable: [{rule_id}]\n")
    rules = load_rules([overlay])
    without = _plan(rules=rules)
    if rule_id in {p.rule.id for p in builtin_rules().proposals}:
        assert rule_id not in {p.rule_id for p in without.document.proposals}
    assert _without_proposals(without.document) == _without_proposals(base.document)
    assert without.megatron_args() == base.megatron_args()
    assert (without.searched, without.evaluated) == (base.searched, base.evaluated)


def _without_proposals(doc: PlanDocument) -> dict:
    return doc.model_dump(mode="json", exclude={"proposals"})


# ---- plan.json -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["interleave", "sequence_parallel", "overlap_grad_reduce"])
def test_a_plan_json_without_an_option_is_refused_at_its_key(tmp_path, key: str) -> None:
    """plan.json format 3 records every search option: the files follow `search`, never the
    proposals."""
    data = json.loads(_plan().document.to_json())
    del data["search"][key]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(PlanDocumentError, match=rf"search\.{key}: missing required key '{key}'$"):
        load_plan_document(path)
    del data["search"]
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(PlanDocumentError, match=r"search: missing required key 'search'$"):
        load_plan_document(path)


def test_the_record_gives_back_the_options_searched() -> None:
    doc = _plan(search={"interleave": "off"}).document
    chosen = doc.search.options()
    assert chosen.interleave == "off"
    assert chosen.model_dump().items() <= doc.search.model_dump().items()


def test_fp8_parameters_asked_of_a_backend_without_them_are_an_error_not_dropped() -> None:
    """torchtitan 0.3 cannot gather FP8 parameters (docs/backends.md: torchao's all-gather
    needs tensorwise scaling, which its Float8 converter cannot name): asked outright on it
    alone, the request is refused with the backend that can; `search` plans without them, and
    every backend together plans them on Megatron-LM and the others without."""
    fp8 = {"global_batch": 64, "precision": "fp8"}
    with pytest.raises(InputError) as caught:
        parplan_gen.plan(
            "llama-3-8b", H100_8, **fp8, backend="torchtitan", search={"fp8_param_gather": "on"}
        )
    # the API's wording of the flag (api/wording.py); the CLI says --fp8-param-gather on
    assert caught.value.message == (
        "fp8_param_gather on: torchtitan cannot gather FP8 parameters (only megatron does; "
        "docs/backends.md)"
    )
    searched = parplan_gen.plan(
        "llama-3-8b", H100_8, **fp8, backend="torchtitan", search={"fp8_param_gather": "search"}
    )
    assert not searched.document.chosen.plan.fp8_param_gather
    anywhere = parplan_gen.plan(
        "llama-3-8b", H100_8, **fp8, search={"fp8_param_gather": "on"}, top=10
    )
    by_backend = {
        (c.backend.name if c.backend else "", c.plan.fp8_param_gather)
        for c in anywhere.document.candidates
    }
    # Megatron-LM's layouts gather them; the backends that cannot plan without them
    assert ("megatron", True) in by_backend and ("megatron", False) not in by_backend
    assert all(gathers is False for name, gathers in by_backend if name != "megatron")
