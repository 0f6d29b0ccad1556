"""The planner: search space, pruning against brute force, ranking, infeasible requests, API."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from parplan_gen.api import Plan, check, plan
from parplan_gen.api.plans import search_plan
from parplan_gen.cost.hardware import Cluster, cluster_from_flags
from parplan_gen.cost.layout import PLAN_FIELDS, build_layout, plan_values
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.presets import load_preset
from parplan_gen.planning.backend_planner import OUTRANKED, Candidate
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.constraints import Constraints, estimate_env, first_violation
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.memory_order import DOMINATED, DOMINATED_RESHARD
from parplan_gen.planning.pins import Pins, SearchLimits
from parplan_gen.planning.planner import PlanError, Planner
from parplan_gen.planning.search_result import ranking_key
from parplan_gen.planning.search_space import (
    Request,
    SearchOptions,
    mbs_options,
    memory_options,
    structures,
    vpp_options,
)
from parplan_gen.planning.step_cutoff import StepCutoff
from parplan_gen.rules.ruleset import load_rules

from conftest import builtin_rules

CONTRACT_PLAN_KEYS = {
    "dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "global_batch", "grad_accum", "zero_stage",
    "distributed_optimizer", "sequence_parallel", "recompute", "seq_len",
}  # fmt: skip
_CACHE: dict[str, Planner] = {}


def planner() -> Planner:
    """One Planner for the module (hypothesis refuses function-scoped fixtures)."""
    if not _CACHE:
        _CACHE["planner"] = Planner(load_rules())
    return _CACHE["planner"]


def brute_force(p: Planner, request: Request) -> tuple[list[tuple[Any, ...]], int]:
    """Every candidate of every backend checked against every rule of that backend with the
    full cost model: the keys of those that pass, and how many candidates there are (the
    layouts a rule that bounds the search refuses are none: the micro-batch limit)."""
    keys, total = [], 0
    for backend in request.options.backends:
        constraints, options = Constraints(p.rules, backend=backend), request.options.on(backend)
        bounds = [c for c in constraints.layout if c.rule.bounds_search]
        cost = p.on(backend).cost
        env = cost.base_env(
            request.spec,
            request.cluster,
            global_batch=request.global_batch,
            seq_len=request.seq_len,
            precision=request.precision,
        )
        for dp, tp, pp, cp, ep, etp in structures(
            request.cluster.num_gpus, request.spec.is_moe, options
        ):
            for vpp in vpp_options(request.spec.num_layers, pp, options):
                for mbs in mbs_options(request.global_batch, dp):
                    for mem in memory_options(tp, options):
                        accum = request.global_batch // (mbs * dp)
                        plan_ = (dp, tp, pp, cp, ep, etp, vpp, mbs, accum, *mem)
                        names = zip(PLAN_FIELDS, plan_, strict=True)
                        env.update({f"plan.{k}": v for k, v in names})
                        if first_violation(bounds, env) is not None:
                            continue  # outside the search
                        total += 1
                        if constraints.check(env, "layout"):
                            continue
                        figures = cost.figures(env)
                        env.update(estimate_env(figures))
                        if not constraints.check(env, "estimate"):
                            keys.append(ranking_key(figures, Candidate(*plan_), request.objective))
    return keys, total


REQUESTS = st.builds(
    Request,
    spec=st.sampled_from(["llama-2-7b", "megatron-gpt-1.7b", "mixtral-8x7b", "gpt-neox-20b"]).map(
        load_preset
    ),
    cluster=st.sampled_from([1, 2, 4, 6, 8, 16]).map(lambda n: cluster_from_flags(n, "h100")),
    global_batch=st.sampled_from([8, 12, 32, 64]),
    seq_len=st.sampled_from([1024, 2048, 4096]),
    objective=st.sampled_from(["time", "memory"]),
    options=st.builds(
        SearchOptions,
        interleave=st.booleans(),
        sequence_parallel_fixed=st.booleans(),
        fsdp_reshard=st.sampled_from([("default",), ("never", "default")]),
    ),
)


# Memory is not monotone in the micro-batch here: with Accelerate, a step of one micro-batch (mbs
# 8, accum 1) holds less than mbs 4 with accum 2, which keeps FSDP2's unsharded gradients
# between its micro-batches (rules/cost/memory.yaml fsdp2_grads_unsynced).
NOT_MONOTONE = Request(
    spec=load_preset("mixtral-8x7b"), cluster=cluster_from_flags(16, "h100"), global_batch=8,
    seq_len=1024, objective="time", options=SearchOptions(fsdp_reshard=("never", "default")),
)  # fmt: skip


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=REQUESTS)
@example(request=NOT_MONOTONE)
def test_the_pruned_search_finds_what_brute_force_finds(request: Request) -> None:
    p = planner()
    keys, total = brute_force(p, request)
    try:
        result = p.plan(request)
    except PlanError:
        return
    assert result.searched == total
    # Every candidate is ranked or counted; dominated ones fit but are never faster; outranked
    # ones fit, but the rules that read their time figures were not checked (some may break one).
    ranked = total - sum(result.rejected.values())
    passed = ranked + result.rejected.get(DOMINATED, 0) + result.rejected.get(DOMINATED_RESHARD, 0)
    assert passed <= len(keys) <= passed + result.rejected.get(OUTRANKED, 0)
    if keys:
        assert result.feasible
        best = min(keys)
        chosen = ranking_key(_figures(result.chosen), result.chosen.plan, request.objective)
        assert chosen == pytest.approx(best, rel=1e-9)  # Estimate rounds bytes to integers
    else:
        assert not result.feasible


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=REQUESTS)
def test_every_chosen_plan_is_whole_and_meets_every_rule(request: Request) -> None:
    p = planner()
    try:
        result = p.plan(request)
    except PlanError as exc:
        assert "no layout of" in exc.message
        return
    layout = result.chosen.plan
    assert layout.dp * layout.tp * layout.pp * layout.cp == request.cluster.num_gpus
    assert layout.mbs * layout.grad_accum * layout.dp == request.global_batch
    document = PlanDocument.from_parts(
        rules=builtin_rules(),
        model=request.spec, cluster=request.cluster, chosen=result.chosen,
        candidates=result.candidates, rejected=result.rejected, feasible=result.feasible,
    )  # fmt: skip
    contract = json.loads(json.dumps(document.contract()))
    assert {"chosen", "candidates", "rejected", "feasible", "advice"} <= set(contract)
    assert contract["feasible"] is result.feasible
    assert set(contract["chosen"]) == {"backend", "plan", "memory", "time", "throughput"}
    assert set(contract["chosen"]["plan"]) >= CONTRACT_PLAN_KEYS
    env = _full_env(p, request, result.chosen)
    violations = Constraints(p.rules, backend=result.chosen.backend.name).check(env)
    assert BACKENDS[result.chosen.backend.name].refuses(result.chosen.plan) is None
    if result.feasible:
        assert violations == []
        times = [c.time.step_s for c in result.candidates]
        assert times == sorted(times) or request.objective == "memory"
    else:
        assert {v.rule_id for v in violations} == {"memory.fits"}


def _full_env(p: Planner, request: Request, estimate: Any) -> dict[str, Any]:
    cost = p.on(estimate.backend.name).cost
    env = cost.base_env(
        request.spec, request.cluster, global_batch=request.global_batch, seq_len=request.seq_len
    )
    env.update(plan_values(estimate.plan))
    env.update(estimate_env(cost.figures(env)))
    return env


def _figures(estimate: Any) -> dict[str, float]:
    return {"time_step_s": estimate.time.step_s, "memory_total": estimate.memory.total}


def _tuple(estimate: Any) -> tuple[Any, ...]:
    return tuple(getattr(estimate.plan, f) for f in PLAN_FIELDS)


# ---- cases known by hand -------------------------------------------------------------------


def test_a_7b_model_on_eight_80gb_gpus_needs_no_pipeline() -> None:
    request = Request(load_preset("llama-2-7b"), cluster_from_flags(8, "a100-80gb"), 512, 4096)
    chosen = planner().plan(request).chosen
    assert chosen.memory.fits
    assert chosen.plan.pp == 1


def test_gpt3_175b_on_1536_a100s_is_not_pure_zero3_data_parallelism() -> None:
    # Narayanan et al. 2021 Table 2: ZeRO-3 without model parallelism reached 44 TFLOP/s per
    # GPU at 1536 GPUs, PTD-P (t=8, p=12) 141 TFLOP/s, batch 1536, sequence 2048.
    request = Request(load_preset("gpt3-175b"), cluster_from_flags(1536, "a100-80gb"), 1536, 2048)
    layout = planner().plan(request).chosen.plan
    assert not (layout.tp == 1 and layout.pp == 1 and layout.zero_stage == 3)


def test_an_infeasible_request_gets_the_closest_candidate_and_advice() -> None:
    result = plan("llama-3-405b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=8192)
    assert not result.feasible
    memory = [c.memory.total for c in result.document.candidates]
    assert memory == sorted(memory)
    assert not result.chosen.memory.fits
    assert result.advice, "never an empty answer"
    more = result.advice[-1]
    assert more.fits and more.change.endswith("GPUs")
    assert int(more.change.split()[0]) > 8


def test_objective_memory_never_uses_more_memory_than_objective_time() -> None:
    spec, cluster = load_preset("llama-2-7b"), cluster_from_flags(8, "h100")
    fast = planner().plan(Request(spec, cluster, 64, 4096)).chosen
    small = planner().plan(Request(spec, cluster, 64, 4096, objective="memory")).chosen
    assert small.memory.total <= fast.memory.total
    assert fast.time.step_s <= small.time.step_s


def test_nothing_valid_is_a_plan_error_that_lists_the_reasons() -> None:
    spec = load_preset("llama-2-7b").model_copy(update={"num_layers": 2})
    request = Request(spec, cluster_from_flags(5, "h100"), 4, 2048)
    with pytest.raises(PlanError, match=r"no layout of 5 GPUs can run llama-2-7b: "):
        planner().plan(request)


def test_rejections_are_counted_by_rule() -> None:
    result = planner().plan(
        Request(load_preset("llama-3-8b"), cluster_from_flags(16, "h100"), 64, 4096)
    )
    assert (
        result.rejected[
            "key/value heads (8) do not divide by tp (16) [parallel.kv_heads_divisible_by_tp]"
        ]
        > 0
    )
    assert result.searched > sum(result.rejected.values()) >= 1


def test_the_rejections_count_only_layouts_the_search_considered(tmp_path: Path) -> None:
    """Llama 3 8B on 8 H100s, 512 sequences: dp 1 would take micro-batches up to 512, but
    batch.micro_batch_limit bounds the search (bounds_search) at 16 (layout.yaml mg_max_mbs):
    the larger ones are no candidates, so no rejection counts them and no range reaches past 16.
    The same space made by the pins instead (the rule disabled, --max-mbs 16) searches and
    rejects exactly the same."""
    llama = load_preset("llama-3-8b")
    bounded = plan(llama, {"gpus": 8, "gpu": "h100"}, global_batch=512, seq_len=8192)
    labels = list(bounded.document.rejected)
    assert not [label for label in labels if "batch.micro_batch_limit" in label]
    ranges = [re.search(r"\bmbs (\d+)\.\.(\d+)", label) for label in labels]
    assert all(int(m.group(2)) <= 16 for m in ranges if m)
    assert bounded.bounded == [
        "micro-batch above 16 sequences (not searched) [batch.micro_batch_limit, bounds the search]"
    ]
    (tmp_path / "no_limit.yaml").write_text("disable: [batch.micro_batch_limit]\n")
    pinned = plan(
        llama, {"gpus": 8, "gpu": "h100"}, global_batch=512, seq_len=8192,
        rules=[tmp_path], bounds={"max_mbs": 16},
    )  # fmt: skip
    assert (pinned.searched, pinned.document.rejected) == (
        bounded.searched,
        bounded.document.rejected,
    )
    assert pinned.bounded == []


def test_a_pin_the_search_bound_leaves_out_names_the_bound() -> None:
    bound = r"mbs 32: no layout .*\[batch\.micro_batch_limit, bounds the search\]$"
    with pytest.raises(PlanError, match=bound):
        plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512, pins={"mbs": 32})


def test_a_subtree_with_no_layout_left_counts_no_rejection() -> None:
    """--vpp 4 leaves DeepSpeed, which does not interleave, no layout: its pipeline rules
    reject nothing rather than a subtree of none (no `0` line)."""
    found = plan(
        "llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512,
        pins={"mbs": 8, "tp": 2, "pp": 2, "vpp": 4},
    )  # fmt: skip
    assert found.document.rejected and all(n > 0 for n in found.document.rejected.values())
    assert not [r for r in found.document.rejected if "deepspeed." in r]


@pytest.mark.parametrize("backend", ["megatron", "deepspeed", "ddp"])
def test_a_backend_limits_the_search_to_what_it_runs(backend: str) -> None:
    options = SearchOptions(backends=(backend,))  # type: ignore[arg-type]
    request = Request(
        load_preset("llama-2-7b"), cluster_from_flags(16, "h100"), 64, 4096, options=options
    )
    for c in planner().plan(request).candidates:
        assert c.backend is not None and c.backend.name == backend
        p = c.plan
        if backend == "megatron":  # its distributed optimizer, or Megatron-FSDP's ZeRO-2/3
            assert p.zero_stage in (0, 2, 3) and not (p.zero_stage and p.pp > 1)
            assert c.backend.version == "core_v0.16"  # one release, Megatron-FSDP or not
        elif backend == "deepspeed":  # no cp, interleaving, Megatron SP or distributed optimizer
            assert (p.cp, p.vpp, p.sequence_parallel, p.distributed_optimizer) == (
                1, 1, False, False
            )  # fmt: skip
        else:  # data parallelism and nothing more
            assert (p.dp, p.zero_stage, p.recompute) == (16, 0, "none")


# ---- the API --------------------------------------------------------------------------------


def _plan_on(spec_name: str, gpus: int, **layout: Any) -> Plan:
    result = plan(spec_name, {"gpus": gpus, "gpu": "h100"}, global_batch=64, seq_len=4096, top=1)
    fixed = build_layout(gpus, global_batch=64, seq_len=4096, **layout)
    chosen = result.chosen.model_copy(update={"plan": fixed})
    doc = result.document  # made again: which backends run `fixed`, and what their files say
    document = PlanDocument.from_parts(
        model=doc.model, cluster=doc.cluster, chosen=chosen, rules=builtin_rules()
    )
    return result.model_copy(update={"document": document})


def test_deepspeed_config_batch_sizes_multiply_out() -> None:
    p = _plan_on("llama-2-7b", 8, mbs=2, zero_stage=3)
    config = p.deepspeed_config()
    # 64 sequences = 2 per GPU x 4 accumulation steps x 8 data-parallel ranks.
    assert config["train_batch_size"] == 64
    assert config["train_micro_batch_size_per_gpu"] == 2
    assert config["gradient_accumulation_steps"] == 4
    assert config["bf16"]["enabled"] is True
    assert config["zero_optimization"]["stage"] == 3


def test_megatron_args_for_uneven_interleaved_stages() -> None:
    p = _plan_on(
        "llama-3-405b", 128, tp=8, pp=16, vpp=2, mbs=1, sequence_parallel=True,
        distributed_optimizer=True, recompute="full",
    )  # fmt: skip
    args = p.megatron_args()
    # 126 layers over 16 stages x 2 chunks: middle stages 2 * ceil(126 / 32) = 8 layers, the
    # first and last share 126 - 8 * 14 = 14 as 8 and 6 (multiples of vpp, first the larger).
    pairs = dict(itertools.pairwise(args))
    assert pairs["--tensor-model-parallel-size"] == "8"
    assert pairs["--pipeline-model-parallel-size"] == "16"
    assert pairs["--decoder-first-pipeline-num-layers"] == "8"
    assert pairs["--decoder-last-pipeline-num-layers"] == "6"
    assert pairs["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert "--overlap-p2p-comm" not in args  # not a Megatron-LM flag: P2P overlap is its default
    assert {"--sequence-parallel", "--use-distributed-optimizer", "--bf16"} <= set(args)
    assert pairs["--recompute-granularity"] == "full"


def test_plan_write_renders_every_file(tmp_path: Path) -> None:
    p = plan("llama-2-7b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=4096)
    paths = p.write(tmp_path)
    # Each backend's file exactly when it runs the chosen layout (the document's verdicts).
    own = {"deepspeed": "ds_config.json", "megatron": "megatron_args.sh"}
    names = {path.name for path in paths}
    assert p.document.backends[p.chosen.backend.name] is None
    for backend, why in p.document.backends.items():
        if backend in own:
            assert (own[backend] in names) is (why is None), (backend, why)
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["chosen"] == p.chosen.contract()
    assert data["rejected"] == dict(sorted(p.document.rejected.items()))


def test_check_reports_violations_and_a_better_plan() -> None:
    cluster = cluster_from_flags(8, "h100")
    layout = build_layout(8, tp=8, global_batch=64, seq_len=4096)  # no sequence parallelism
    report = check("llama-2-7b", cluster, layout)
    assert report.runnable and report.violations == ()
    assert report.better is not None
    assert report.better.time.step_s < report.estimate.time.step_s
    bad = check(
        "llama-2-7b",
        cluster,
        build_layout(8, global_batch=64, seq_len=4096, zero_stage=3, sequence_parallel=True),
    )
    # Neither backend runs it: DeepSpeed has no sequence parallelism, Megatron-LM's (which runs
    # ZeRO-3 as Megatron-FSDP) needs tp > 1; the fewest invalid rules are Megatron-LM's
    assert [v.rule_id for v in bad.violations] == ["parallel.sequence_parallel_needs_tp"]
    assert not bad.runnable and bad.better is not None


def test_check_compares_with_the_plans_choice_by_its_search_alone(monkeypatch) -> None:
    # `check` needs the chosen layout of `plan` for the same batch, not the rest of a plan: no
    # advice (several searches when nothing fits), backend verdicts or document.
    cluster = cluster_from_flags(8, "h100")
    layout = build_layout(8, tp=8, global_batch=64, seq_len=4096)
    same = plan("llama-2-7b", cluster, global_batch=64, seq_len=4096, backend="megatron", top=1)
    for name in (
        "api.plans.advise",
        "planning.document.backend_verdicts",
        "api.plans.sanity_warnings",
    ):
        monkeypatch.setattr(f"parplan_gen.{name}", lambda *_, n=name: pytest.fail(f"{n} ran"))
    report = check("llama-2-7b", cluster, layout)  # Megatron-LM runs it: planned on Megatron-LM
    assert report.estimate.backend.name == "megatron"
    assert report.better == same.chosen
    # llama-3-405b does not fit on 8 GPUs at all: the planner finds nothing, without advice.
    huge = check("llama-3-405b", cluster, build_layout(8, tp=8, global_batch=64, seq_len=8192))
    assert (huge.better, huge.planner_found) == (None, False)


def test_cluster_dicts_are_checked() -> None:
    with pytest.raises(InputError, match=r"unknown keys \['gpu_count'\]"):
        plan("llama-2-7b", {"gpu_count": 8, "gpus": 8, "gpu": "h100"}, global_batch=8)
    assert isinstance(cluster_from_flags(8, "h100"), Cluster)


def test_the_same_request_on_the_same_rules_is_searched_once(tmp_path):
    """A repeated request gives the result searched before (planner._SEARCHED); a rule set
    loaded anew (an overlay, even an empty one) is searched again, and gives the same plan."""
    request = Request(load_preset("llama-3-8b"), cluster_from_flags(8, "h100"), 64, 4096)
    rules = builtin_rules()
    first = Planner(rules).plan(request)
    assert Planner(rules).plan(request) is first
    (tmp_path / "empty").mkdir()
    again = Planner(load_rules([tmp_path / "empty"])).plan(request)
    assert again is not first
    assert again.chosen.plan == first.chosen.plan


def test_later_backends_skip_what_the_earlier_ones_outrank(tmp_path: Path) -> None:
    """Llama 3 8B on 16 H100s, all backends: each backend's search leaves out the candidates
    whose floor (time.floor_s: compute and bubble) already exceeds the 5th best step found before
    it. The ranking is the one an unpruned search gives: with the floor disabled (an overlay
    that sets it to 0, so nothing is outranked) the top 5 are the same layouts, same times."""
    request = Request(load_preset("llama-3-8b"), cluster_from_flags(16, "h100"), 256, 8192)
    pruned = Planner(builtin_rules()).plan(request)
    assert pruned.rejected[OUTRANKED] > 0
    (tmp_path / "floor.yaml").write_text("estimate:\n  time:\n    floor_s: 0\n")
    full = Planner(load_rules([tmp_path])).plan(request)
    assert OUTRANKED not in full.rejected
    assert [(c.backend, c.plan, c.time.step_s) for c in pruned.candidates] == [
        (c.backend, c.plan, c.time.step_s) for c in full.candidates
    ]
    assert pruned.evaluated == full.evaluated  # outranked ones still had their memory checked
    # the steps the backends before pass on: torchtitan's search alone, then given the five
    # best plans' steps, outranks more of its candidates
    planner = Planner(builtin_rules()).on("torchtitan")
    part = replace(request, options=request.options.on("torchtitan"))
    alone = planner.plan(part).rejected.get(OUTRANKED, 0)
    steps = StepCutoff(5)
    for c in pruned.candidates:
        steps.add(c.time.step_s, c.plan.cp)
    assert planner.plan(part, steps).rejected[OUTRANKED] > alone


def test_one_backend_skips_what_it_has_outranked_itself(tmp_path: Path) -> None:
    """Within one backend's search the K-th best step found so far is a cutoff too: Megatron-LM
    alone leaves candidates that fit at their floor, and ranks what the unpruned search
    (time.floor_s 0) ranks: GPT-3 175B on 1,024 A100s, and Llama 3 8B at 131,072 tokens on 64
    H100s, whose best layout uses CP and whose best layout without it is kept exact too."""
    (tmp_path / "floor.yaml").write_text("estimate:\n  time:\n    floor_s: 0\n")
    for model, gpus, gpu, batch, seq, top in (
        ("gpt3-175b", 1024, "a100-80gb", 1536, 2048, 5),
        ("llama-3-8b", 64, "h100", 64, 131072, 1),
    ):
        spec, cluster = load_preset(model), cluster_from_flags(gpus, gpu)
        request = dict(global_batch=batch, seq_len=seq, precision="bf16", objective="time",
                       top=top, flash_attention=True, backend="megatron")  # fmt: skip
        pruned = search_plan(spec, cluster, builtin_rules(), **request).result
        full = search_plan(spec, cluster, load_rules([tmp_path]), **request).result
        assert pruned.rejected[OUTRANKED] > 0 and OUTRANKED not in full.rejected
        assert [(c.plan, c.time.step_s) for c in pruned.candidates] == [
            (c.plan, c.time.step_s) for c in full.candidates
        ]
        assert pruned.without_cp == full.without_cp
    assert full.without_cp is not None and full.candidates[0].plan.cp > 1


def test_the_step_cutoff_is_the_kth_best_found_before() -> None:
    steps = StepCutoff(top=2)
    assert steps.now(without_cp=False) is None  # fewer than K found: any ranks
    steps.add(4.0, cp=2)
    assert steps.now(without_cp=False) is None
    steps.add(5.0, cp=2)
    assert steps.now(without_cp=False) == 5.0  # the 2nd best
    assert steps.now(without_cp=True) is None  # no step without CP known: any such ranks
    steps.add(3.0, cp=1)
    assert steps.now(without_cp=False) == 4.0  # 3 and 4 now the two best
    assert steps.now(without_cp=True) == 4.0  # the slower of 4 and the best without CP, 3
    steps.add(1.0, cp=2)
    assert (steps.now(without_cp=False), steps.now(without_cp=True)) == (3.0, 3.0)


def test_a_floor_above_the_step_time_is_an_error(tmp_path: Path) -> None:
    """time.floor_s promises step_s never goes below it: a rule that breaks the promise stops the
    search with an error naming both figures, rather than pruning good plans away."""
    floor = "estimate:\n  time:\n    floor_s: step_time * 2\n"
    (tmp_path / "floor.yaml").write_text(floor)
    request = Request(load_preset("llama-3-8b"), cluster_from_flags(8, "h100"), 64, 4096)
    with pytest.raises(InputError, match=r"time\.step_s \(.* s\) is below time\.floor_s"):
        Planner(load_rules([tmp_path])).plan(request)


def test_a_plan_with_context_parallelism_keeps_the_best_layout_without_it() -> None:
    """Llama 3 405B on 16,384 H100s at 2048 x 8192 tokens (the speed benchmark's request):
    the cost model's best has cp 2, and the search's `without_cp` is exactly the plan that a
    search pinned to cp 1 chooses, on any backend (the cutoffs keep cp 1 candidates that
    could beat it); a search whose best has cp 1 keeps none."""
    spec, cluster = load_preset("llama-3-405b"), cluster_from_flags(16384, "h100")
    rules = builtin_rules()
    result = Planner(rules).plan(Request(spec, cluster, 2048, 8192))
    assert result.chosen.plan.cp == 2
    one = SearchOptions(limits=SearchLimits(pins=Pins(cp=1)))
    alone = Planner(rules).plan(Request(spec, cluster, 2048, 8192, options=one))
    assert result.without_cp is not None
    assert (result.without_cp.backend, result.without_cp.plan) == (
        alone.chosen.backend,
        alone.chosen.plan,
    )
    assert result.without_cp.time.step_s == alone.chosen.time.step_s
    assert alone.without_cp is None
