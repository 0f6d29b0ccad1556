"""Backends are real (issue 13): every plan names the backend that runs it, passes that
backend's constraints, and its files run exactly that plan. The reproductions of the issue's
"Why" are here, each showing the fixed behaviour; the constraints' sources are in
parplan_gen/backends/deepspeed/constraints.yaml and docs/backends.md."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.api import Plan, check, estimate, load_cluster_spec, load_model, plan
from parplan_gen.backends.deepspeed.reader import deepspeed_values
from parplan_gen.backends.megatron.reader import megatron_values
from parplan_gen.cost.layout import build_layout
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.checks import RenderError
from parplan_gen.render.plan_files import render_plan

from conftest import builtin_rules

H100 = {"gpu": "h100"}
OWN_FILE = {"deepspeed": "ds_config.json", "megatron": "megatron_args.sh"}


@functools.cache
def planned(model: str, gpus: int, batch: int, seq: int, backend: str = "any") -> Plan:
    """The plan with the whole GPU usable (headroom 0): these tests are about which backend
    runs what, on the layouts the issues name, not about the memory margin."""
    return plan(
        model, {"gpus": gpus, **H100}, global_batch=batch, seq_len=seq, backend=backend,
        headroom=0,
    )  # fmt: skip


def written(result: Plan, folder: Path, **options: Any) -> dict[str, Path]:
    folder.mkdir()
    paths = {}
    for name, text in render_plan(result.document, **options).items():
        paths[name] = folder / name
        paths[name].write_text(text, encoding="utf-8")
    return paths


def runs_on(result: Plan) -> list[str]:
    """Every candidate passes its own backend's capabilities; the backend names returned."""
    names = []
    for c in result.document.candidates:
        assert c.backend is not None
        assert BACKENDS[c.backend.name].refuses(c.plan) is None, c
        names.append(c.backend.name)
    return names


# ---- llama-3-70b on 64 H100, batch 512 x 4096 ------------------------------------------------
# Before: dp=32 tp=2 zero=3 sequence_parallel, a ds_config.json without tensor parallelism and a
# megatron_args.sh with --use-distributed-optimizer for the ZeRO-3 (262 GiB per GPU by parplan's
# own estimate). Now the plan is one backend's and only that backend's file is written.


def test_llama_3_70b_fsdp_with_tp_on_torchtitan_writes_only_its_file(tmp_path: Path) -> None:
    # The issue's plan (dp 32, tp 2, ZeRO-3, sequence parallelism) that neither DeepSpeed nor
    # Megatron-LM's own ZeRO runs: on torchtitan it is FSDP2 x TP, and its file says exactly it.
    issue_layout = {"dp": 32, "tp": 2, "zero_stage": 3, "sequence_parallel": True}
    result = plan(
        "llama-3-70b", {"gpus": 64, **H100}, global_batch=512, seq_len=4096,
        backend="torchtitan", headroom=0, pins=issue_layout,
    )  # fmt: skip
    chosen = result.chosen
    assert chosen.backend is not None and chosen.backend.name == "torchtitan"
    p = chosen.plan
    assert (p.dp, p.tp, p.pp, p.zero_stage, p.sequence_parallel) == (32, 2, 1, 3, True)
    files = written(result, tmp_path / "out")
    assert "megatron_args.sh" not in files and "ds_config.json" not in files
    script = files["torchtitan_run.sh"].read_text(encoding="utf-8")
    assert "--parallelism.data_parallel_shard_degree 32" in script
    assert "--config llama3_70b" in script
    # the allocator as torchtitan's run_train.sh starts it, which the plan's headroom assumes
    # (rules/constraints/headroom.yaml); a value the user exports wins
    assert 'export PYTORCH_ALLOC_CONF="${PYTORCH_ALLOC_CONF:-expandable_segments:True}"' in script
    why = result.document.backends["megatron"]
    assert f"megatron_args.sh: not written, Megatron-LM does not run this layout ({why})" in (
        files["plan.md"].read_text(encoding="utf-8")
    )


ISSUE_70B_LAYOUT = {"dp": 32, "tp": 2, "zero_stage": 3, "sequence_parallel": True}


def test_llama_3_70b_plan_is_one_backend_runs_and_its_file_is_that_plan(tmp_path: Path) -> None:
    result = plan(
        "llama-3-70b", {"gpus": 64, **H100}, global_batch=512, seq_len=4096,
        backend="megatron", headroom=0, pins=ISSUE_70B_LAYOUT,
    )  # fmt: skip
    runs_on(result)
    chosen = result.chosen
    assert chosen.backend is not None and chosen.backend.name == "megatron"
    # Megatron-FSDP's ZeRO-3 (dp 32 x tp 2, the issue's layout), on core_v0.16 (the one release)
    assert (chosen.plan.zero_stage, chosen.backend.version) == (3, "core_v0.16")
    files = written(result, tmp_path / "out")
    # The Megatron-LM arguments read back are the chosen layout, field for field.
    layout = build_layout(64, **megatron_values(files["megatron_args.sh"], 80))
    assert layout == chosen.plan
    # The re-estimate of what the file runs is the plan's own figure: nothing substituted.
    again = estimate("llama-3-70b", {"gpus": 64, **H100}, layout, backend="megatron")
    assert again.estimate.memory.total == chosen.memory.total
    # DeepSpeed does not run this layout, so there is no ds_config.json, and plan.md says why.
    why = result.document.backends["deepspeed"]
    assert why is not None
    assert "ds_config.json" not in files
    assert f"ds_config.json: not written, DeepSpeed does not run this layout ({why})" in (
        files["plan.md"].read_text(encoding="utf-8")
    )


def test_backend_deepspeed_never_picks_megatron_tensor_or_sequence_parallelism() -> None:
    # Before: `--backend deepspeed` still chose tp 2 with sequence parallelism.
    result = planned("llama-3-70b", 64, 512, 4096, "deepspeed")
    assert set(runs_on(result)) == {"deepspeed"}
    for c in result.document.candidates:
        p = c.plan
        assert (p.sequence_parallel, p.cp, p.vpp, p.distributed_optimizer) == (False, 1, 1, False)
        if p.tp > 1:  # AutoTP: no pipeline engine (constraints.yaml), any ZeRO stage (v0.19.8)
            assert p.pp == 1
        if p.pp > 1:  # pipeline engine: ZeRO <= 1
            assert p.zero_stage <= 1


def test_a_deepspeed_tp_plan_writes_autotp_in_ds_config(tmp_path: Path) -> None:
    # ZeRO-1 with AutoTP over 2 ranks of each node: DeepSpeed v0.19.8 runs it
    # (tensor_parallel.autotp_size), Megatron-LM does not (ZeRO-1).
    layout = build_layout(8, tp=2, mbs=1, global_batch=64, seq_len=4096, zero_stage=1)
    found = estimate("llama-3-8b", {"gpus": 8, **H100}, layout)
    assert found.estimate.backend is not None and found.estimate.backend.name == "deepspeed"
    assert found.runnable
    doc = PlanDocument.from_parts(
        rules=builtin_rules(),
        model=load_model("llama-3-8b"),
        cluster=load_cluster_spec({"gpus": 8, **H100}),
        chosen=found.estimate,
    )
    files = render_plan(doc)
    assert "megatron_args.sh" not in files
    path = tmp_path / "ds_config.json"
    path.write_text(files["ds_config.json"], encoding="utf-8")
    values = deepspeed_values(path)
    assert (values["tp"], values["zero_stage"], values["global_batch"]) == (2, 1, 64)


# ---- Mixtral on 64 H100: DeepSpeed-MoE is not run with ZeRO-3 ----------------------------------


def test_mixtral_expert_parallel_plans_never_pair_deepspeed_moe_with_zero_3() -> None:
    # Before: dp=64 ep=2 zero=3 with plan.md pointing at deepspeed.moe.layer.MoE(ep_size=2),
    # which DeepSpeed refuses ("MoE not supported with Stage 3", engine.py).
    result = planned("mixtral-8x7b", 64, 512, 4096)
    runs_on(result)
    for c in result.document.candidates:
        if c.backend.name == "deepspeed" and c.plan.ep > 1:  # type: ignore[union-attr]
            assert c.plan.zero_stage <= 2
    layout = build_layout(64, ep=2, mbs=1, global_batch=512, seq_len=4096, zero_stage=3)
    found = estimate("mixtral-8x7b", {"gpus": 64, **H100}, layout, backend="deepspeed")
    assert [v.rule_id for v in found.violations if v.severity == "invalid"] == [
        "deepspeed.moe_zero_at_most_2"
    ]


# ---- DeepSeek-V3: ZeRO-1 is DeepSpeed's, the distributed optimizer Megatron-LM's --------------


def test_a_zero_1_plan_is_not_rendered_as_megatrons_distributed_optimizer() -> None:
    # Before: a ZeRO-1 plan became --use-distributed-optimizer with fp32 gradients (94.75 GiB,
    # not the ZeRO-1 estimate) without a note. Now Megatron-LM's file is not written for it.
    layout = build_layout(
        1024, tp=8, pp=16, ep=8, mbs=1, global_batch=4096, seq_len=4096, zero_stage=1
    )
    found = estimate("deepseek-v3", {"gpus": 1024, **H100}, layout, backend="megatron")
    assert [v.rule_id for v in found.violations][:1] == ["backend.capabilities"]
    assert "Megatron-LM has no ZeRO-1 sharding" in found.violations[0].reason


def test_deepseek_v3_megatron_plan_is_read_back_as_the_sharding_it_runs(
    tmp_path: Path,
) -> None:
    result = planned("deepseek-v3", 1024, 4096, 4096)
    chosen = result.chosen
    assert chosen.backend is not None and chosen.backend.name == "megatron"
    files = written(result, tmp_path / "out")
    layout = build_layout(1024, **megatron_values(files["megatron_args.sh"], 61))
    assert layout == chosen.plan
    # 671B parameters on 1024 GPUs: the optimizer state is sharded, by the distributed
    # optimizer (zero 0) or by Megatron-FSDP (zero 2 / 3), never replicated.
    assert layout.distributed_optimizer or layout.zero_stage >= 2
    script = files["megatron_args.sh"].read_text(encoding="utf-8")
    assert "--use-distributed-optimizer" in script  # Megatron-FSDP requires it too


# ---- the HF Trainer runs ZeRO data parallelism only -------------------------------------------


def test_hf_trainer_refuses_a_layout_the_trainer_cannot_run() -> None:
    result = planned("llama-3-70b", 64, 512, 4096, "megatron")  # Megatron with tp > 1
    with pytest.raises(RenderError, match=r"--hf-trainer: .* this plan has tp \d+"):
        render_plan(result.document, hf_trainer=True)
    # dp 64 ZeRO-3 (pinned: unpinned, DeepSpeed's AutoTP at tp 2 fits the whole GPU, 79.8 GiB)
    zero = plan(
        "llama-3-70b", {"gpus": 64, **H100}, global_batch=512, seq_len=4096, backend="deepspeed",
        headroom=0, pins={"tp": 1, "pp": 1},
    )  # fmt: skip
    assert (zero.chosen.plan.tp, zero.chosen.plan.pp, zero.chosen.plan.zero_stage) == (1, 1, 3)
    config = render_plan(zero.document, hf_trainer=True)["ds_config.json"]
    assert '"train_batch_size": "auto"' in config


# ---- check: the backend you run, and a better plan on it only ----------------------------------


def test_check_offers_a_better_plan_on_the_layouts_own_backend_unless_any_backend() -> None:
    cluster = {"gpus": 8, **H100}
    layout = build_layout(8, tp=8, global_batch=64, seq_len=4096)
    same = check("llama-2-7b", cluster, layout, backend="megatron")
    assert same.estimate.backend.name == "megatron"  # type: ignore[union-attr]
    assert same.better is not None and same.better.backend.name == "megatron"  # type: ignore[union-attr]
    anywhere = check("llama-2-7b", cluster, layout, backend="megatron", any_backend=True)
    assert anywhere.better is not None
    assert anywhere.better.time.step_s <= same.better.time.step_s


def test_ddp_runs_data_parallelism_and_nothing_more() -> None:
    result = planned("llama-2-7b", 8, 64, 4096, "ddp")
    for c in result.document.candidates:
        p = c.plan
        assert (p.dp, p.tp, p.pp, p.cp, p.ep, p.zero_stage, p.recompute) == (
            8, 1, 1, 1, 1, 0, "none"
        )  # fmt: skip


# ---- the command line --------------------------------------------------------------------------


def test_backend_is_repeatable_and_each_candidate_names_one_of_them(cli) -> None:
    run = cli(
        "plan", "llama-2-7b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64",
        "--backend", "ddp", "--backend", "megatron", "--top", "20", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    names = {c["backend"]["name"] for c in run.json()["candidates"]}
    assert names <= {"ddp", "megatron"} and "deepspeed" not in names


def test_check_reads_a_rendered_megatron_script_on_megatron_and_refuses_it_on_deepspeed(
    cli, tmp_path: Path
) -> None:
    out = tmp_path / "plan"
    argv = ("llama-3-70b", "--gpus", "64", "--gpu", "h100", "--seq-len", "4096")
    plan = ("plan", *argv, "--global-batch", "512", "--backend", "megatron", "--headroom", "0")
    plan = (*plan, "--dp", "32", "--tp", "2", "--zero", "3", "--sequence-parallel", "--out", out)
    assert cli(*plan).code == 0
    script = out / "megatron_args.sh"
    run = cli("check", *argv, "--from-megatron", script)
    assert run.code == 0, run.out
    assert "backend: megatron core_v0.16\n" in run.out and "Constraints: all met" in run.out
    # The same layout on DeepSpeed: Megatron's sequence parallelism is not DeepSpeed's.
    run = cli("check", *argv, "--from-megatron", script, "--backend", "deepspeed")
    assert run.code == 1
    assert "[backend.capabilities, invalid]" in run.out
