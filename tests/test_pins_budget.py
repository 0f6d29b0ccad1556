"""`plan` pins, bounds and headroom (planning/pins.py) and the training budget (rules/budget/).

Every expected figure is worked by hand from the sources the rules cite (Young 1974, Llama 3
Sec. 3.3.1 and 3.3.4, ZeRO Sec. 3.1, GMLake) or from the plan's own predicted step time, so
that a change of the cost model does not change these tests.
"""

from __future__ import annotations

import math
import re
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parplan_gen
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import token_count
from parplan_gen.planning.document import load_plan_document
from parplan_gen.planning.pins import parse_headroom
from parplan_gen.planning.planner import PlanError

from conftest import REPO, builtin_rules

H100_8 = {"gpus": 8, "gpu": "h100"}
SMALL = "megatron-gpt-1.7b"  # 24 layers, 24 heads: small and quick to plan
LLAMA3_MTBF_GPU_HOURS = 54 * 24 * 16384 / 419  # Llama 3 Sec. 3.3.4: 419 in 54 days, 16,384 GPUs


def budget_formula(name: str, env: dict[str, float]) -> float:
    library = builtin_rules().library
    return float(library.compile(name, SourceRef("test"), "budget").evaluate(env))


# ---- number parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("15T", 15e12), ("300B", 300e9), ("2e12", 2e12), ("1.5M", 1.5e6), ("500g", 500e9)],
)
def test_token_counts_take_scale_suffixes(text: str, tokens: float) -> None:
    assert token_count(text) == tokens


@pytest.mark.parametrize("text", ["", "15X", "-1T", "0", "T", "1e400"])
def test_bad_token_counts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="tokens"):
        token_count(text)


@pytest.mark.parametrize(
    ("text", "gib", "fraction"),
    [("4", 4.0, None), ("4GiB", 4.0, None), ("2.5 GiB", 2.5, None), ("10%", None, 0.1)],
)
def test_headroom_is_gib_or_a_percentage(text: str, gib: float | None, fraction: float) -> None:
    found = parse_headroom(text)
    assert (found.gib, found.fraction) == (gib, fraction)


@pytest.mark.parametrize("text", ["-1", "100%", "lots", "4 GB"])
def test_bad_headroom_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="headroom"):
        parse_headroom(text)


# ---- the budget rules, by hand ---------------------------------------------------------------


def test_young_interval_is_sqrt_of_twice_write_time_times_mtbf() -> None:
    # 1e9 params x (2 + 12) bytes = 14e9 bytes at 1.4e8 B/s: 100 s to write. 36 GPUs with a
    # per-GPU MTBF of 50 GPU-hours fail every 50 x 3600 / 36 = 5,000 s. Young 1974:
    # sqrt(2 x 100 x 5000) = 1,000 s.
    env = {
        "model.params": 1e9,
        "budget.storage_bytes_per_s": 1.4e8,
        "budget.mtbf_gpu_hours": 50,
        "cluster.gpus": 36,
        "train.backend": "deepspeed",  # no asynchronous write: the checkpoint blocks
        "plan.zero_stage": 1,
        "budget.host_bytes_per_s": 64e9,
    }
    assert budget_formula("budget_checkpoint_write_s", env) == pytest.approx(100)
    assert budget_formula("budget_job_mtbf_s", env) == pytest.approx(5000)
    assert budget_formula("budget_checkpoint_interval_s", env) == pytest.approx(1000)
    # Progress: 1 - (1000 / 2 + 100 restart) / 5000 = 0.88 of wall time is not lost.
    assert budget_formula("budget_progress", env) == pytest.approx(0.88)


def test_defaults_are_the_published_figures() -> None:
    assert budget_formula("budget_mtbf_gpu_hours_default", {}) == pytest.approx(
        LLAMA3_MTBF_GPU_HOURS
    )
    assert round(LLAMA3_MTBF_GPU_HOURS) == 50677
    # Llama 3 Sec. 3.3.1: 2 TB/s sustained for 16,384 GPUs, about 122 MB/s per GPU.
    per_gpu = budget_formula("budget_storage_bytes_per_s_per_gpu_default", {})
    assert per_gpu == pytest.approx(2e12 / 16384)
    # GMLake: 9.2 GB of an 80 GB A100 held by the caching allocator: 11.5 %.
    library = builtin_rules().library
    where = SourceRef("test")
    headroom = library.compile("memory_headroom_share_default", where, "estimate").evaluate({})
    assert headroom == pytest.approx(0.115)


def test_fifteen_trillion_tokens_take_steps_times_the_step_time(write) -> None:
    cluster = write(
        "c.yaml",
        """
        gpu: h100
        num_gpus: 8
        gpu_hour_price: 2.5
        mtbf_gpu_hours: 80000
        storage_gb_per_s: 10
        """,
    )
    # DeepSpeed writes its checkpoints blocking (rules/budget/budget.yaml): Young's interval on
    # the whole write.
    found = parplan_gen.plan(
        SMALL, cluster, global_batch=512, seq_len=2048, tokens="15T", backend="deepspeed"
    )
    budget, step_s = found.document.budget, found.chosen.time.step_s
    assert budget is not None and not budget.checkpoint_async
    assert budget is not None
    # 512 x 2048 = 1,048,576 tokens per step; 15e12 / 1,048,576 = 14,305,114.7 -> 14,305,115.
    assert budget.steps == 14_305_115
    assert budget.compute_days == pytest.approx(14_305_115 * step_s / 86400)
    # 1.65B params (the preset's count) x 14 bytes at 10 GB/s.
    params = budget.checkpoint_bytes / 14
    assert budget.checkpoint_write_s == pytest.approx(params * 14 / 10e9)
    assert budget.job_mtbf_hours == pytest.approx(80000 / 8)
    interval = math.sqrt(2 * budget.checkpoint_write_s * 10_000 * 3600)
    assert budget.checkpoint_interval_s == pytest.approx(interval)
    # Wall time: compute x (1 + write / interval) / (1 - (interval / 2 + write) / MTBF).
    progress = 1 - (interval / 2 + budget.checkpoint_write_s) / (10_000 * 3600)
    wall = budget.compute_days * (1 + budget.checkpoint_write_s / interval) / progress
    assert budget.wall_days == pytest.approx(wall)
    assert budget.interruptions == pytest.approx(wall * 24 / 10_000)
    assert budget.gpu_hours == pytest.approx(wall * 24 * 8)
    assert budget.cost == pytest.approx(wall * 24 * 8 * 2.5)
    assert budget.price_source == "cluster file (gpu_hour_price)"


def test_the_budget_inputs_come_from_the_cluster_file_or_the_parameter(write) -> None:
    cluster = write(
        "c.yaml", "gpu: h100\nnum_gpus: 8\ngpu_hour_price: 2.5\nmtbf_gpu_hours: 80000\n"
    )
    given = {"gpu_hour_price": 2.5, "mtbf_gpu_hours": 80000.0}
    from_file = parplan_gen.plan(SMALL, cluster, global_batch=512, tokens="1T").document
    assert from_file.contract()["budget_inputs"] == {**given, "storage_gb_per_s": None}
    assert from_file.budget is not None and from_file.budget.job_mtbf_hours == 80000 / 8
    request = {"global_batch": 512, "tokens": "1T", "budget_inputs": given}
    from_parameter = parplan_gen.plan(SMALL, H100_8, **request).document
    assert from_parameter.budget == from_file.budget
    assert from_parameter.budget_inputs == from_file.budget_inputs
    # --gpu-hour-price (the API's gpu_hour_price) goes before the inputs' price
    priced = parplan_gen.plan(SMALL, H100_8, **request, gpu_hour_price=2.0).document.budget
    assert priced is not None and (priced.gpu_hour_price, priced.price_source) == (
        2.0,
        "--gpu-hour-price",
    )
    with pytest.raises(InputError, match=r"^budget_inputs\.mtbf_gpu_hours: Input should be"):
        parplan_gen.plan(SMALL, H100_8, global_batch=512, budget_inputs={"mtbf_gpu_hours": "1"})


def test_without_a_price_there_is_no_cost_and_the_defaults_are_named() -> None:
    found = parplan_gen.plan(SMALL, H100_8, global_batch=512, tokens=1e12)
    budget = found.document.budget
    assert budget is not None and budget.cost is None and budget.gpu_hour_price is None
    assert budget.mtbf_gpu_hours == pytest.approx(LLAMA3_MTBF_GPU_HOURS)
    assert "Llama 3 Sec. 3.3.4" in budget.mtbf_source
    assert budget.storage_bytes_per_s == pytest.approx(8 * 2e12 / 16384)


def test_days_choose_the_fewest_whole_nodes_that_meet_the_deadline() -> None:
    found = parplan_gen.plan(SMALL, H100_8, global_batch=512, tokens="300B", days=7)
    budget = found.document.budget
    assert budget is not None and budget.deadline is not None
    gpus = found.document.cluster.num_gpus
    assert gpus == budget.deadline.gpus and gpus % 8 == 0
    assert budget.wall_days <= 7
    tried = {int(g): d for g, d in budget.deadline.tried.items()}
    assert tried[gpus] == pytest.approx(budget.wall_days)
    smaller = [g for g, d in tried.items() if g < gpus]
    assert smaller and all(tried[g] is None or tried[g] > 7 for g in smaller)
    if gpus > 8:  # the bisection tried the count one node below
        assert gpus - 8 in tried


# ---- pins and bounds --------------------------------------------------------------------------

PINS = st.fixed_dictionaries(
    {},
    optional={
        "tp": st.sampled_from([1, 2, 4]),
        "pp": st.sampled_from([1, 2]),
        "mbs": st.sampled_from([1, 2, 4]),
        "zero_stage": st.sampled_from([0, 1, 3]),
        "recompute": st.sampled_from(["none", "selective", "full"]),
        "sequence_parallel": st.booleans(),
    },
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pins=PINS, max_tp=st.sampled_from([None, 2, 8]))
def test_pins_and_bounds_are_always_honoured(pins: dict, max_tp: int | None) -> None:
    if max_tp is not None and pins.get("tp", 1) > max_tp:
        return
    bounds = {} if max_tp is None else {"max_tp": max_tp}
    try:
        found = parplan_gen.plan(SMALL, H100_8, global_batch=64, pins=pins, bounds=bounds, top=3)
    except PlanError as exc:  # no layout meets them: the error names the pins (API words)
        head = exc.message.split(":")[0]
        assert all(key in head.split() for key in pins) and "--" not in head
        return
    for estimate in found.document.candidates:
        layout = estimate.plan
        assert {k: getattr(layout, k) for k in pins} == pins
        assert max_tp is None or layout.tp <= max_tp
    assert found.document.search is not None
    assert found.document.search.pins == pins and found.document.search.bounds == bounds


def test_pins_no_layout_meets_are_one_line_errors(cli) -> None:
    gpus = ("--gpus", "8", "--gpu", "h100", "--global-batch", "64")
    run = cli("plan", SMALL, *gpus, "--tp", "16")
    assert run.code != 0
    assert run.err.strip().endswith(
        "no layout meets the pins: --tp 16: dp x tp x pp x cp = 8 GPUs, 16 does not divide 8"
    )
    run = cli("plan", SMALL, *gpus, "--tp", "8", "--max-tp", "4")
    assert run.err.strip().endswith("--tp 8 is outside its bounds [1, 4]")
    run = cli("plan", SMALL, *gpus, "--mbs", "3")
    assert run.err.strip().endswith(
        "--mbs 3: the global batch 64 does not divide by the micro-batch"
    )
    # A pin the rules refuse: the refusing rule's reason (24 heads do not divide by tp 32).
    run = cli("plan", SMALL, "--gpus", "32", "--gpu", "h100", "--global-batch", "64", "--tp", "32")
    assert "--tp 32: no layout of 32 GPUs with these can run megatron-gpt-1.7b:" in run.err
    assert "\n" not in run.err.strip()


def test_headroom_keeps_memory_free() -> None:
    for headroom in ("30", "40%"):
        found = parplan_gen.plan(SMALL, H100_8, global_batch=512, headroom=headroom)
        kept = 30 * GIB if headroom == "30" else 0.4 * 80 * GIB
        assert found.document.search.headroom_bytes == round(kept)
        for c in found.document.candidates:
            assert c.memory.total + kept <= c.memory.capacity
            assert c.memory.kept_free == round(kept)
    default = parplan_gen.plan(SMALL, H100_8, global_batch=512).document
    assert default.search.headroom_bytes == 0
    assert default.search.headroom_share == pytest.approx(0.115)
    assert default.search.headroom_source.startswith("default: rule memory_headroom_share_default")
    for c in default.candidates:  # 11.5 % of the tensors, the total less `other`
        kept = 0.115 * (c.memory.total - c.memory.other)
        assert c.memory.kept_free == pytest.approx(kept, abs=1)
        assert c.memory.total + kept <= c.memory.capacity


def test_the_default_headroom_holds_on_a_gpu_without_bf16() -> None:
    """The headroom rule is read at the request's precision: a V100 has no BF16 peak, and an
    FP16 plan on it gets the default headroom (11.5 % of each layout's tensors), not an
    error."""
    found = parplan_gen.plan(SMALL, {"gpus": 8, "gpu": "v100-32gb"}, global_batch=64,
                             precision="fp16")  # fmt: skip
    assert found.feasible
    assert found.document.search.headroom_share == pytest.approx(0.115)


def test_plan_json_records_the_search_and_the_budget(cli, tmp_path) -> None:
    run = cli(
        "plan", SMALL, "--gpus", "8", "--gpu", "h100", "--global-batch", "64", "--tp", "2",
        "--max-pp", "1", "--headroom", "10%", "--tokens", "1T", "--gpu-hour-price", "3",
        "--out", tmp_path,
    )  # fmt: skip
    assert run.code == 0, run.err
    document = load_plan_document(tmp_path / "plan.json")
    assert document.search.pins == {"tp": 2} and document.search.bounds == {"max_pp": 1}
    assert document.search.headroom == "10%"
    assert document.budget.cost == pytest.approx(document.budget.gpu_hours * 3)
    md = (tmp_path / "plan.md").read_text(encoding="utf-8")
    assert "## Training budget" in md


def test_the_readme_plan_examples_with_pins_and_budgets_run(cli) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = re.findall(
        r"^(parplan plan [^\n]*(?:--tokens|--tp |--headroom)[^\n]*)$", readme, re.M
    )
    assert len(commands) >= 3
    for command in commands:
        run = cli(*shlex.split(command)[1:])
        assert run.code == 0, (command, run.err)


@pytest.mark.parametrize(
    "section", ["search", "budget", "budget.deadline", "launch", "budget_inputs"]
)
def test_docs_list_every_plan_json_key_of_the_new_sections(section: str) -> None:
    from parplan_gen.cost.budget_figures import BudgetInputs
    from parplan_gen.cost.launch_site import LaunchSettings
    from parplan_gen.planning.budget import Budget, Deadline
    from parplan_gen.planning.pins import SearchRecord

    model = {
        "search": SearchRecord,
        "budget": Budget,
        "budget.deadline": Deadline,
        "launch": LaunchSettings,
        "budget_inputs": BudgetInputs,
    }[section]
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split(f"<!-- plan.json: {section} -->\n", 1)[1].split("\n\n", 1)[0]
    keys = re.findall(r"^\| `([a-z0-9_]+)` \|", table, re.M)
    assert keys == list(model.model_fields)


def test_a_budget_needs_tokens_a_transformer_and_a_plan_that_fits() -> None:
    with pytest.raises(InputError, match="resnet-50 is not a transformer"):
        parplan_gen.plan("resnet-50", H100_8, global_batch=256, tokens="1T")
    with pytest.raises(InputError, match="days: give tokens too"):
        parplan_gen.plan(SMALL, H100_8, global_batch=64, days=3)
    nothing = parplan_gen.plan("llama-3-70b", H100_8, global_batch=16, seq_len=8192, tokens="1T")
    assert not nothing.feasible and nothing.document.budget is None
