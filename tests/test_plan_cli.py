"""`parplan plan` and `parplan check` through the real entry point."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from parplan_gen.api import plan
from parplan_gen.inputs.defaults import GIB

from conftest import Run

H100_8 = ("--gpus", "8", "--gpu", "h100")


def test_plan_json_is_the_contract(cli: Callable[..., Run]) -> None:
    run = cli("plan", "llama-2-7b", *H100_8, "--global-batch", "64", "--seq-len", "4096", "--json")
    assert run.code == 0, run.err
    data = run.json()
    # plan.json's keys: feasible and advice say whether it fits, and what would when not;
    # search: pins, headroom and the search options
    assert list(data) == [
        "format_version", "model", "cluster", "chosen", "candidates", "rejected", "advice",
        "feasible", "proposals", "backends", "decisions", "render", "search",
    ]  # fmt: skip
    assert set(data["chosen"]) == {"backend", "plan", "memory", "time", "throughput"}
    assert data["chosen"]["backend"] in (
        {"name": "megatron", "version": "core_v0.16"},
        {"name": "deepspeed", "version": "0.19"},
        {"name": "ddp", "version": "torch 2.13"},
    )
    assert data["candidates"][0] == data["chosen"]
    assert all(isinstance(n, int) and n > 0 for n in data["rejected"].values())
    plan = data["chosen"]["plan"]
    assert plan["dp"] * plan["tp"] * plan["pp"] * plan["cp"] == 8
    assert plan["mbs"] * plan["grad_accum"] * plan["dp"] == 64


def test_plan_human_view_explains_the_choice(cli: Callable[..., Run]) -> None:
    run = cli("plan", "llama-2-7b", *H100_8, "--global-batch", "64", "--top", "3")
    assert run.code == 0, run.err
    assert re.search(
        r"^Chosen: (megatron core_v0\.16|deepspeed 0\.19|ddp torch 2\.13): dp=", run.out, re.M
    )
    for text in (
        "Memory per GPU",
        "Time per step",
        "Top 3",
        "Searched ",
    ):
        assert text in run.out
    # the default headroom, GMLake's 9.2 GB of 80 as a share of each layout's tensors
    reason = "does not fit in GPU memory (80 GiB, keeping 0.0 GiB and 11.5% of its tensors free)"
    assert f"{reason} [memory.fits]" in run.out


def test_an_infeasible_plan_shows_the_closest_candidate_and_advice(cli: Callable[..., Run]) -> None:
    """Nothing fits: the view (closest candidate, advice), then one error line, exit 3 (not 0,
    which a script would take for a plan; not 1, which is bad input)."""
    run = cli("plan", "llama-3-70b", *H100_8, "--global-batch", "16", "--seq-len", "8192")
    assert run.code == 3
    assert "NOTHING FITS. Closest candidate: " in run.out
    assert "What would make it fit:" in run.out
    assert " GPUs: dp=" in run.out
    assert run.err.startswith("parplan: error: nothing fits on 8 x h100-sxm-80gb (the closest ")
    assert run.err.count("\n") == 1


def test_an_infeasible_plan_json_says_so_and_why(cli: Callable[..., Run], tmp_path: Path) -> None:
    """`plan --json` is the document's contract with `feasible` and `advice`; `--out` writes
    nothing. llama-3-405b's 405B parameters need 16 bytes each of model state (ZeRO paper,
    sec. 3.1) on one 40 GB GPU: no layout of one GPU can fit."""
    out = tmp_path / "out"
    argv = ("plan", "llama-3-405b", "--gpus", "1", "--gpu", "a100-40gb", "--global-batch", "8")
    run = cli(*argv, "--json", "--out", out)
    assert run.code == 3
    data = run.json()
    assert data["feasible"] is False and data["chosen"]["memory"]["fits"] is False
    assert data["advice"] and all(isinstance(a, str) for a in data["advice"])
    assert data["chosen"]["memory"]["total"] > 405e9 * 16  # more than the model state alone
    assert run.err == (
        "parplan: error: --out " + str(out) + ": nothing fits on 1 x a100-40gb (the closest "
        "layout needs 6813.3 GiB per GPU, the GPU has 40.0 GiB); 256 GPUs: dp=1 tp=8 pp=32 fits "
        "with 32.4 GiB per GPU; no files written\n"
    )
    assert not out.exists()
    fits = cli("plan", "llama-2-7b", *H100_8, "--global-batch", "64", "--json")
    assert fits.code == 0 and fits.json()["feasible"] is True and fits.json()["advice"] == []


def test_plan_out_writes_plan_json_and_refuses_to_overwrite(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    args = ("plan", "llama-2-7b", *H100_8, "--global-batch", "64", "--out", tmp_path)
    assert cli(*args).code == 0
    assert (tmp_path / "plan.json").is_file()
    assert cli(*args).code == 0  # the same plan again: nothing to overwrite
    other = cli("plan", "llama-2-7b", *H100_8, "--global-batch", "32", "--out", tmp_path)
    assert other.code == 1
    assert "will not overwrite" in other.err and "plan.json" in other.err
    assert "pass --force to replace them" in other.err
    forced = cli(
        "plan", "llama-2-7b", *H100_8, "--global-batch", "32", "--out", tmp_path, "--force"
    )
    assert forced.code == 0


def test_plan_needs_a_global_batch(cli: Callable[..., Run]) -> None:
    run = cli("plan", "llama-2-7b", *H100_8)
    assert run.code == 2
    assert "--global-batch" in run.err


def test_check_lists_broken_rules_and_exits_1_when_the_layout_cannot_run(
    cli: Callable[..., Run],
) -> None:
    run = cli("check", "llama-3-8b", *H100_8, "--tp", "3", "--global-batch", "64", "--json")
    assert run.code == 1  # 8 GPUs do not divide by tp 3
    assert "tp(3)" in run.err
    run = cli(
        "check", "llama-3-8b", *H100_8, "--tp", "8", "--global-batch", "64", "--mbs", "32",
        "--seq-len", "256", "--recompute", "full",
    )  # fmt: skip
    assert run.code == 0, run.err  # a reject-level rule that is no memory rule: it runs
    assert (
        "  - micro-batch above 16 sequences (not searched) [batch.micro_batch_limit, reject]"
        in run.out
    )
    assert "global batch (64) does not divide by mbs x dp" not in run.out


def test_check_json_reports_fit_and_a_better_plan(cli: Callable[..., Run]) -> None:
    run = cli("check", "llama-2-7b", *H100_8, "--tp", "8", "--global-batch", "64", "--json")
    assert run.code == 0, run.err
    data = run.json()
    assert data["runnable"] is True and data["violations"] == []
    assert data["over_capacity_bytes"] == 0
    assert data["better"]["time"]["step_s"] < data["time"]["step_s"]


def test_check_reads_a_deepspeed_config(
    cli: Callable[..., Run], write: Callable[..., Path]
) -> None:
    config = write(
        "ds_config.json",
        """
        {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
         "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 3},
         "bf16": {"enabled": true}}
        """,
    )
    run = cli("check", "llama-2-7b", *H100_8, "--from-deepspeed", config, "--json")
    assert run.code == 0, run.err
    plan = run.json()["plan"]
    assert (plan["mbs"], plan["grad_accum"], plan["zero_stage"], plan["dp"]) == (2, 4, 3, 8)
    wrong = cli("check", "llama-2-7b", *H100_8, "--from-deepspeed", config, "--tp", "2")
    assert wrong.code == 1
    assert "gradient_accumulation_steps(4) != global batch(64) / (mbs(2) * dp(4)) = 8" in wrong.err


def test_check_reads_megatron_arguments(
    cli: Callable[..., Run], write: Callable[..., Path]
) -> None:
    args = write(
        "train.sh",
        """
        # launch
        torchrun pretrain_gpt.py \\
            --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 \\
            --num-layers-per-virtual-pipeline-stage 5 --sequence-parallel \\
            --micro-batch-size 1 --global-batch-size=128 --seq-length 4096 \\
            --recompute-granularity selective --use-distributed-optimizer --bf16
        """,
    )
    run = cli(
        "check", "llama-3-70b", "--gpus", "64", "--gpu", "h100", "--from-megatron", args, "--json"
    )
    assert run.code == 0, run.err
    plan = run.json()["plan"]
    assert (plan["tp"], plan["pp"], plan["vpp"], plan["dp"], plan["global_batch"]) == (
        8,
        2,
        8,
        4,
        128,
    )
    assert plan["sequence_parallel"] and plan["distributed_optimizer"]
    assert plan["recompute"] == "selective"


def test_check_refuses_shell_variables(cli: Callable[..., Run], write: Callable[..., Path]) -> None:
    args = write("train.sh", "--tensor-model-parallel-size $TP --global-batch-size 64\n")
    run = cli("check", "llama-3-8b", *H100_8, "--from-megatron", args)
    assert run.code == 1
    assert run.err == (
        f"parplan: error: {args}:1: --tensor-model-parallel-size: expected a whole number "
        "(digits 0-9), got '$TP' (a variable the script does not set; the environment is not "
        "read): give --tp\n"
    )


def test_check_says_what_the_planner_offers(cli: Callable[..., Run]) -> None:
    # tp 8 for a 7B model on one node: the planner's tp 1 / ZeRO layout is faster.
    run = cli("check", "llama-2-7b", *H100_8, "--tp", "8", "--global-batch", "64")
    # The layout is judged on the first backend that runs it (Megatron-LM) and the better plan
    # is that backend's, not DeepSpeed's: Megatron-FSDP sharding the gradients too (ZeRO-2,
    # optim_grads), which leaves room for micro-batches of 4, whose linear layers run closer to
    # the GEMM's peak than 2's (rules/cost/efficiency.yaml linear_gemm_efficiency: 1 / M).
    assert "backend: megatron core_v0.16\n" in run.out
    better = "Better plan: megatron core_v0.16: dp=8 tp=1 pp=1 mbs=4 grad_accum=2"
    assert better in run.out and "zero=2" in run.out
    assert "x faster)" in run.out
    # a micro-batch of 32 breaks a reject rule: the planner's plan is shown as the one that meets
    # every rule, without a speed-up over a layout that may not be chosen
    run = cli("check", "llama-3-8b", *H100_8, "--tp", "8", "--global-batch", "64", "--mbs", "32")
    assert "Plan that meets every rule: megatron core_v0.16: dp=8 tp=1" in run.out
    assert "faster" not in run.out
    # 405B on one 40 GB GPU: nothing the planner could offer fits
    run = cli("check", "llama-3-405b", "--gpus", "1", "--gpu", "a100-40gb", "--global-batch", "8")
    assert "Better plan: none (no layout of this request fits and meets every rule)" in run.out


def test_advice_never_offers_what_a_rule_rules_out(cli: Callable[..., Run]) -> None:
    # Llama 3 8B on one H100 does not fit; the closest candidate is Megatron-LM's, and its
    # ZeRO-3 (Megatron-FSDP) on a single replica shards nothing (zero.needs_data_parallel), as
    # DeepSpeed's does, so it is not offered as a way to fit (advice stays on that backend).
    run = cli("plan", "llama-3-8b", "--gpus", "1", "--gpu", "h100", "--global-batch", "16")
    assert "Closest candidate: megatron core_v0.16:" in run.out
    assert (
        "  - ZeRO-3: not possible with this layout (optimizer sharding over a single "
        "rank (dp x cp = 1) shards nothing)\n" in run.out
    )
    run = cli(
        "plan", "llama-3-8b", "--gpus", "1", "--gpu", "h100", "--global-batch", "16",
        "--backend", "deepspeed",
    )  # fmt: skip
    assert (
        "  - ZeRO-3: not possible with this layout (optimizer sharding over a single "
        "rank (dp x cp = 1) shards nothing)\n" in run.out
    )
    # DeepSpeed ZeRO-3 over 2 ranks: 16 / 2 bytes per parameter of model state (ZeRO paper,
    # sec. 3.1; 59.8 GiB for 8.03B) plus the reduce bucket and the prefetched weights in use
    # (memory.yaml zero3_live_*) and the activations fit in 80 GiB as two replicas, with the
    # default headroom (11.5 % of the tensors) kept free.
    found = re.search(r"\n  - 2 GPUs: dp=2 tp=1 pp=1 fits with ([0-9.]+) GiB per GPU\n", run.out)
    assert found is not None, run.out
    two = plan("llama-3-8b", {"gpus": 2, "gpu": "h100"}, global_batch=16, backend="deepspeed")
    memory = two.chosen.memory
    assert (two.chosen.plan.zero_stage, float(found[1])) == (3, round(memory.total / GIB, 1))
    assert memory.total > 59.8 * GIB and memory.needed <= memory.capacity


def test_text_views_show_a_hostile_model_name_escaped(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    """A config named `\\x1b[2J<240 x>.json`: plan and check print the name escaped and cut (the
    name taken from the path is already escaped: 7 + 240 characters, 200 shown)."""
    config = Path(__file__).resolve().parent.parent / "examples" / "hf" / "llama-3-8b.json"
    path = tmp_path / ("\x1b[2J" + "x" * 240 + ".json")
    path.write_bytes(config.read_bytes())
    for argv in (
        ("plan", path, *H100_8, "--global-batch", "64"),
        ("check", path, *H100_8, "--global-batch", "64", "--tp", "2"),
    ):
        run = cli(*argv)
        assert run.code == 0, run.err
        first = run.out.splitlines()[0]
        assert first.startswith("\\x1b[2Jxxxx"), first[:40]
        assert "... (47 more characters) (8.03B params) on 8 x h100-sxm-80gb" in first
        assert "\x1b" not in run.out


# ---- the layout flags, defined once (cli/common.py) -------------------------------------------

LAYOUT_DESTS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "global_batch", "seq_len")
MEMORY_DESTS = ("zero", "distributed_optimizer", "recompute", "sequence_parallel", "precision")


def _parsed(*argv: str):
    from parplan_gen.cli.main import build_parser

    return build_parser().parse_args(list(argv))


def test_estimate_defaults_every_layout_flag() -> None:
    args = _parsed("estimate", "llama-3-8b", *H100_8, "--global-batch", "64")
    got = {k: getattr(args, k) for k in (*LAYOUT_DESTS, *MEMORY_DESTS)}
    assert got == {
        "tp": 1, "pp": 1, "dp": None, "cp": 1, "ep": 1, "vpp": 1, "mbs": 1, "global_batch": 64,
        "seq_len": None, "zero": 0, "distributed_optimizer": False, "recompute": "none",
        "sequence_parallel": False, "precision": "bf16",
    }  # fmt: skip
    assert args.no_flash_attention is False


def test_check_leaves_unset_layout_flags_none_for_the_from_files() -> None:
    args = _parsed("check", "llama-3-8b", *H100_8)
    assert all(getattr(args, k) is None for k in (*LAYOUT_DESTS, *MEMORY_DESTS))
    assert (args.from_deepspeed, args.from_megatron, args.no_flash_attention) == (None, None, False)


def test_plan_estimate_and_check_share_the_batch_flags() -> None:
    from parplan_gen.cli.main import build_parser

    helps = {}
    for command in ("plan", "estimate", "check"):
        sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        actions = {a.dest: a for a in sub._actions}
        helps[command] = [
            (actions[d].help, actions[d].metavar) for d in ("global_batch", "seq_len")
        ]
    assert helps["plan"] == helps["estimate"] == helps["check"]
    assert _parsed("plan", "resnet-50", *H100_8, "--global-batch", "8").precision == "bf16"


def test_estimate_needs_the_global_batch(cli: Callable[..., Run]) -> None:
    run = cli("estimate", "llama-3-8b", *H100_8)
    assert run.code == 2
    assert "the following arguments are required: --global-batch" in run.err


def test_check_judges_on_the_backend_named_and_offers_its_plans_only(
    cli: Callable[..., Run],
) -> None:
    request = ("check", "llama-2-7b", *H100_8, "--tp", "8", "--global-batch", "64", "--json")
    for backend in ("megatron", "deepspeed"):  # both run tp 8 (DeepSpeed by AutoTP, ZeRO <= 2)
        data = cli(*request, "--backend", backend).json()
        assert data["backend"]["name"] == data["better"]["backend"]["name"] == backend
    # Megatron-LM's own best is its distributed optimizer; on any backend, the fastest overall
    mine = cli(*request, "--backend", "megatron").json()["better"]
    anywhere = cli(*request, "--backend", "megatron", "--any-backend").json()["better"]
    assert anywhere["time"]["step_s"] <= mine["time"]["step_s"]
    best = cli("plan", "llama-2-7b", *H100_8, "--global-batch", "64", "--json").json()["chosen"]
    assert anywhere["plan"] == best["plan"] and anywhere["backend"] == best["backend"]
