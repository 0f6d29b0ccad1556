"""Sanity warnings (issue 14 item 7) and the published-best data file they read.

Expected values are worked by hand from parplan_gen/data/published_best.yaml (the published
figures and the margin), parplan_gen/data/gpus.yaml (the FP8 dense peaks) and the models'
configs (parplan_gen/data/models/*.yaml max_position_embeddings)."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest
from causal_counts import (
    AMPERE_LARGE,
    GPT3_2048,
    HOPPER_MEDIUM,
    HOPPER_SMALL,
    HOPPER_SMALL_FP8,
    LLAMA_8B_8192,
    LLAMA_70B_8192,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

import parplan_gen
from parplan_gen.api import load_model
from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.cost.published import load_published, load_published_text
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.sanity import (
    context_warning,
    fp8_warnings,
    mfu_warning,
    sanity_warnings,
    short_context_warning,
)

from conftest import VENDORED_RUNS, run_entries

TEXT = resources.files("parplan_gen").joinpath("data/published_best.yaml").read_text("utf-8")
NAME = "published_best.yaml"


# ---- the data file ----------------------------------------------------------------------------


def test_file_loads_with_the_published_figures() -> None:
    data = load_published()
    assert data.margin == pytest.approx(0.05)  # margin.points: 5
    best = data.best
    # As published: Megatron-LM README model_table.png, 462B on H100 at 47 % MFU.
    assert best[("hopper", "dense-large", "bf16")].mfu == pytest.approx(0.47)
    assert best[("hopper", "dense-large", "bf16")].run == "megatron_core_h100_weak_scaling_462B"
    # Korthikanti 2022 Table 5: 1T at 56.3 %; llm-foundry MPT-7B on A100 80GB at 64.23 %.
    assert best[("ampere", "dense-large", "bf16")].mfu == pytest.approx(0.563)
    assert best[("ampere", "dense-small", "bf16")].mfu == pytest.approx(0.6423)
    # Model TFLOP/s over the catalog's dense FP8 peak: NeMo GPT-3 175B 771 / H100 1979;
    # Megatron-Bridge Llama 3 8B on B200 1576 / 4500; gpt-oss-120b BF16 153 / 989.
    assert best[("hopper", "dense-large", "fp8")].mfu == pytest.approx(771 / 1979)
    assert best[("blackwell", "dense-small", "fp8")].mfu == pytest.approx(1576 / 4500)
    assert best[("hopper", "moe", "bf16")].mfu == pytest.approx(153 / 989)
    assert set(data.fp8_generations) == {"hopper", "blackwell"}
    assert set(data.fp8_families) == {"llama", "gpt2", "qwen3_moe"}


def test_every_entry_names_its_run_and_source() -> None:
    for key, best in load_published().best.items():
        assert best.run and best.source, key
        assert re.search(r"arXiv|github\.com", best.source), key


@pytest.mark.parametrize(
    ("params", "moe", "size"),
    [(8.03e9, False, "dense-small"), (20e9, False, "dense-medium"), (99.9e9, False, "dense-medium"),
     (100e9, False, "dense-large"), (671e9, True, "moe"), (30e9, True, "moe")],
)  # fmt: skip
def test_size_classes(params: float, moe: bool, size: str) -> None:
    assert load_published().size_class(params, moe) == size


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("class: dense-medium", "class: dense-mid", "unknown class 'dense-mid'"),
        ("mfu_pct: 53.33", "mfu_pct: 53.33\n    tflops_per_gpu: 166", "exactly one of"),
        ("mfu_pct: 53.33", "mfu_pct: 153.33", "less than or equal to 100"),
        ("mfu_pct: 53.33", "mfu_pc: 53.33", "unknown key 'mfu_pc'"),
        ("gpu: b200", "gpu: h100-sxm-80gb", "h100-sxm-80gb is hopper, not blackwell"),
        ("tflops_per_gpu: 1576", "tflops_per_gpu: 5000", "above b200's peak"),
        ("attention: full\n    attention_source: >-\n      llm-foundry", "attention: fool\n    "
         "attention_source: >-\n      llm-foundry", "'full', 'causal' or 'tokens'"),
        ("    shape: {params_b: 64.86, layers: 80, attention_width: 8192, seq_len: 2048}\n", "",
         "needs the run's shape"),
        ("attention: tokens\n", "attention: tokens\n    shape: {params_b: 8, layers: 32, "
         "attention_width: 4096, seq_len: 8192}\n", "shape is only read for attention: full"),
        ("    model: llama-3-8b\n", "", "needs tokens_per_sec_per_gpu, model and seq_len"),
        ("model: llama-3-8b", "model: llama-3-9b", "llama-3-9b"),
        ("model: llama-3-8b", "model: llama-3-70b", "llama-3-70b is dense-medium, not dense-small"),
        ("    shape: {params_b: 64.86", "    seq_len: 2048\n    shape: {params_b: 64.86",
         "are read for attention: tokens"),
    ],
)  # fmt: skip
def test_a_bad_entry_is_a_file_line_error(old: str, new: str, expected: str) -> None:
    at = TEXT.index(old)
    bad = TEXT[:at] + new + TEXT[at + len(old) :]
    key_line = bad[:at].count("\n") + 1
    entry_line = bad[: bad.rfind("  - generation:", 0, at)].count("\n") + 1
    with pytest.raises(InputError) as caught:
        load_published_text(bad, NAME)
    shown = str(caught.value)
    assert expected in shown
    # The error names the file and the line of the key (or of the entry) that is wrong.
    found = re.match(rf"{re.escape(NAME)}:(\d+):", shown)
    assert found is not None, shown
    assert int(found.group(1)) in (key_line, entry_line), shown


def test_a_second_best_for_one_class_is_refused() -> None:
    entry = TEXT[
        TEXT.index("  - generation: ampere") : TEXT.index(
            "  - generation: ampere\n    class: dense-medium"
        )
    ]
    bad = TEXT.replace("best:\n", "best:\n" + entry, 1)
    with pytest.raises(InputError, match="a second best run for ampere/dense-small/bf16"):
        load_published_text(bad, NAME)


# ---- (a) sequence beyond the trained context ---------------------------------------------------


def test_context_warning() -> None:
    model = load_model("llama-3-8b")  # config: max_position_embeddings 8192
    assert context_warning(model, 8192) is None
    warning = context_warning(model, 8193)
    assert warning is not None
    assert "8193" in warning and "trained context of 8192" in warning
    assert "max_position_embeddings" in warning
    # GPT-3's config gives n_positions 2048 (parplan_gen/data/models/gpt3-175b.yaml).
    assert context_warning(load_model("gpt3-175b"), 2048) is None
    assert "of 2048 tokens" in (context_warning(load_model("gpt3-175b"), 4096) or "")


def test_no_context_warning_for_a_graph_model() -> None:
    assert context_warning(load_model("resnet-50"), 1) is None


# ---- (b) FP8 without calibration runs ----------------------------------------------------------


def test_fp8_warnings() -> None:
    data = load_published()
    llama, deepseek = load_model("llama-3-8b"), load_model("deepseek-v3")
    h100, mi300x = cluster_from_flags(gpus=8, gpu="h100"), cluster_from_flags(gpus=8, gpu="mi300x")
    b200 = cluster_from_flags(gpus=8, gpu="b200")
    assert fp8_warnings(llama, h100, "fp8", data) == []
    assert fp8_warnings(llama, b200, "fp8", data) == []
    assert fp8_warnings(llama, mi300x, "bf16", data) == []  # BF16: nothing to say
    (generation,) = fp8_warnings(llama, mi300x, "fp8", data)
    assert generation.startswith("FP8 on cdna3 GPUs") and "blackwell, hopper" in generation
    (family,) = fp8_warnings(deepseek, h100, "fp8", data)  # model_type deepseek_v3
    assert family.startswith("FP8 for model family deepseek_v3")
    assert len(fp8_warnings(deepseek, mi300x, "fp8", data)) == 2


# ---- (c) MFU above the best published run ------------------------------------------------------


def _estimate(model: str, gpu: str, gpus: int, mfu: float, **layout: object) -> Estimate:
    found = parplan_gen.estimate(model, {"gpus": gpus, "gpu": gpu}, layout)
    th = found.estimate.throughput.model_copy(update={"mfu": mfu})
    return found.estimate.model_copy(update={"throughput": th})


def test_bests_on_the_causal_count() -> None:
    best = load_published().best
    assert pytest.approx(0.467593, abs=1e-6) == HOPPER_SMALL  # 49 % x 0.95427
    assert best[("hopper", "dense-small", "bf16")].causal_mfu == pytest.approx(HOPPER_SMALL)
    assert best[("hopper", "dense-medium", "bf16")].causal_mfu == pytest.approx(HOPPER_MEDIUM)
    assert best[("ampere", "dense-large", "bf16")].causal_mfu == pytest.approx(AMPERE_LARGE)
    # Megatron-LM's FP8 example publishes the whole-matrix count (its tokens/s say so).
    fp8 = best[("hopper", "dense-small", "fp8")]
    assert fp8.attention == "full" and fp8.mfu == pytest.approx(800 / 1979)
    assert fp8.causal_mfu == pytest.approx(HOPPER_SMALL_FP8)  # 0.3615
    # Megatron-Bridge's own count: its tokens/s x the preset's causal count. Llama 3 8B at seq
    # 8192 (tests/causal_counts.py: matmuls 2 x 7,504,658,432, scores 4,294,967,296 forward):
    # 3 x (15,009,316,864 + 2,147,483,648) x 30,624 tokens/s over B200's 4500 TFLOP/s FP8 peak.
    b200 = best[("blackwell", "dense-small", "fp8")]
    assert b200.attention == "tokens" and b200.mfu == pytest.approx(1576 / 4500)
    causal_per_token = 3 * (2 * 7_504_658_432 + 4_294_967_296 / 2)
    assert b200.causal_mfu == pytest.approx(30624 * causal_per_token / 4500e12)  # 35.03 %


@pytest.mark.parametrize(
    ("model", "gpu", "gpus", "layout", "limit"),
    [
        # llama-3-8b (8.03B, dense-small) on Hopper, BF16: Megatron-Core 16B's 49 % on the causal
        # count (46.76 %) + 5, over the plan's own causal fraction.
        ("llama-3-8b", "h100", 8, {"global_batch": 64, "seq_len": 8192},
         (HOPPER_SMALL + 0.05) / LLAMA_8B_8192),
        # llama-3-70b (70.6B, dense-medium) on Hopper, BF16: MPT-30B's 43.92 % (42.93 %) + 5.
        ("llama-3-70b", "h100", 64, {"global_batch": 64, "seq_len": 8192, "tp": 8},
         (HOPPER_MEDIUM + 0.05) / LLAMA_70B_8192),
        # gpt3-175b (dense-large) on Ampere, BF16: Korthikanti 1T's 56.3 % (55.93 %) + 5.
        ("gpt3-175b", "a100-80gb", 64, {"global_batch": 64, "seq_len": 2048, "tp": 8, "pp": 8},
         (AMPERE_LARGE + 0.05) / GPT3_2048),
        # llama-3-8b on Hopper, FP8: 800 / 1979 (Megatron-LM Llama 3 8B FP8) on the causal
        # count + 5.
        ("llama-3-8b", "h100", 8, {"global_batch": 64, "seq_len": 8192, "precision": "fp8"},
         (HOPPER_SMALL_FP8 + 0.05) / LLAMA_8B_8192),
    ],
)  # fmt: skip
def test_mfu_warning_above_best_plus_margin(
    model: str, gpu: str, gpus: int, layout: dict[str, object], limit: float
) -> None:
    spec, cluster, data = (
        load_model(model),
        cluster_from_flags(gpus=gpus, gpu=gpu),
        load_published(),
    )
    assert mfu_warning(spec, cluster, _estimate(model, gpu, gpus, limit, **layout), data) is None
    above = _estimate(model, gpu, gpus, limit + 0.001, **layout)
    warning = mfu_warning(spec, cluster, above, data)
    assert warning is not None and "by more than 5 points" in warning


_LLAMA_8B_H100 = _estimate("llama-3-8b", "h100", 8, 0.0, global_batch=64, seq_len=8192)


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0))
def test_mfu_warning_exactly_above_the_limit(mfu: float) -> None:
    # Hopper dense-small BF16 at seq 8192: (46.76 % + 5 points) / 0.88876 = 58.24 % as the plan
    # counts it; the warning holds exactly above that.
    th = _LLAMA_8B_H100.throughput.model_copy(update={"mfu": mfu})
    estimate = _LLAMA_8B_H100.model_copy(update={"throughput": th})
    spec, cluster = load_model("llama-3-8b"), cluster_from_flags(gpus=8, gpu="h100")
    data = load_published()
    causal = mfu * LLAMA_8B_8192
    limit = data.best[("hopper", "dense-small", "bf16")].causal_mfu + data.margin
    assert (mfu_warning(spec, cluster, estimate, data) is not None) == (causal > limit)
    assert pytest.approx(0.58238, abs=1e-5) == (HOPPER_SMALL + 0.05) / LLAMA_8B_8192


def test_no_mfu_warning_without_a_published_run_of_the_class() -> None:
    # No BF16 Blackwell run is in the file: nothing to compare with.
    estimate = _estimate("llama-3-8b", "b200", 8, 0.95, global_batch=64)
    warning = mfu_warning(load_model("llama-3-8b"), cluster_from_flags(gpus=8, gpu="b200"),
                          estimate, load_published())  # fmt: skip
    assert warning is None


def test_moe_class_warning_names_the_run() -> None:
    # Mixtral is MoE: its class's best on Hopper BF16 is gpt-oss-120b's 153 / 989 = 15.5 %
    # as published, 18.6 % on the causal count from its 5630 tokens/s.
    estimate = _estimate("mixtral-8x7b", "h100", 64, 0.25, global_batch=64, seq_len=4096)
    warning = sanity_warnings(load_model("mixtral-8x7b"), cluster_from_flags(gpus=64, gpu="h100"),
                              estimate)  # fmt: skip
    assert warning == [
        w
        for w in warning
        if "hopper moe BF16 run (15.5% as published, 18.6% causal from its tokens/s; "
        "nemo2511_h100_gpt_oss_120b_64gpus" in w
    ]
    assert len(warning) == 1


# ---- where they show ---------------------------------------------------------------------------


def test_plan_json_text_and_plan_md_show_the_warnings(tmp_path, capsys) -> None:
    from parplan_gen.cli.main import main
    from parplan_gen.planning.document import load_plan_document

    found = parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=64,
                             seq_len=16384)  # fmt: skip
    (warning,) = [w for w in found.document.warnings if "trained context of 8192" in w]
    assert found.document.contract()["warnings"] == found.document.warnings
    found.write(tmp_path)
    written = json.loads((tmp_path / "plan.json").read_text())
    assert warning in written["warnings"]
    assert load_plan_document(tmp_path / "plan.json").warnings == found.document.warnings
    plan_md = (tmp_path / "plan.md").read_text()
    assert "## Sanity warnings" in plan_md and "trained context of 8192" in plan_md
    assert main(["plan", "llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64",
                 "--seq-len", "16384"]) == 0  # fmt: skip
    assert "Sanity warnings (not errors):\n  ! sequence length 16384" in capsys.readouterr().out


def test_no_warnings_key_when_there_is_none(tmp_path) -> None:
    found = parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=64,
                             seq_len=2048)  # fmt: skip
    assert found.document.warnings == []
    assert "warnings" not in json.loads(found.document.to_json())
    assert "warnings" not in found.document.contract()


def test_estimate_and_check_show_them(capsys) -> None:
    from parplan_gen.cli.main import main

    args = ["llama-3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64",
            "--seq-len", "16384", "--tp", "4", "--sequence-parallel"]  # fmt: skip
    assert main(["estimate", *args]) == 0
    assert (
        "! sequence length 16384 is beyond llama-3-8b's trained context" in capsys.readouterr().out
    )
    main(["estimate", *args, "--json"])
    assert "trained context of 8192" in json.loads(capsys.readouterr().out)["warnings"][0]
    main(["check", *args])  # exit 0 or 1 (a layout that does not fit): the report comes first
    assert "! sequence length 16384" in capsys.readouterr().out


def test_the_readme_example_is_real(capsys) -> None:
    from parplan_gen.cli.main import main

    from conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"```console\n\$ parplan (estimate llama-3-8b[^\n]*)\n(.*?)```", readme, re.S)
    assert found, "the README shows a sanity warning"
    assert main(found.group(1).split()) == 0
    out = capsys.readouterr().out.splitlines()
    for line in found.group(2).splitlines():
        assert line == "..." or line in out, line


def test_each_best_runs_shape_and_mfu_are_its_calibration_rows() -> None:
    """published_best.yaml copies each run's shape (and MFU) from the calibration set, which is
    not shipped with the package (the tests carry a copy): the copies agree with the rows they
    name."""
    rows = {entry["name"]: entry for entry in run_entries(*VENDORED_RUNS)}
    text = resources.files("parplan_gen").joinpath("data", NAME).read_text(encoding="utf-8")
    checked = 0
    for best in YAML(typ="safe").load(text)["best"]:
        row = rows[best["run"]]
        model, measured = row["model"], row["measured"]
        if measured.get("mfu_pct") is not None:
            assert best["mfu_pct"] == measured["mfu_pct"], best["run"]
        if best["attention"] == "tokens":
            assert best["tokens_per_sec_per_gpu"] == measured["tokens_per_sec_per_gpu"]
            assert best["tflops_per_gpu"] == measured["tflops_per_gpu"]
            assert best["seq_len"] == model["seq_length"], best["run"]
            preset = load_model(best["model"])  # the model the run trained
            assert (preset.num_layers, preset.hidden_size) == (
                model["num_layers"],
                model["hidden_size"],
            ), best["run"]
        shape = best.get("shape")
        if shape is None:
            continue
        # MHA / GQA with heads x head_dim = hidden: the attention width is the hidden size
        found = (model["params_b"], model["num_layers"], model["hidden_size"], model["seq_length"])
        assert found == tuple(shape.values()), best["run"]
        checked += 1
    assert checked == 9


# ---- context parallelism at short sequences ---------------------------------------------------


def test_context_parallelism_below_8k_tokens_per_rank_says_what_it_is_worth() -> None:
    """The Megatron Core guide names CP for 8K+ token sequences: cp 2 at seq 8192 (4,096 per
    rank) is explained against the search's best layout without CP (its step, its slowdown and
    the recomputation it needs), or said to be the only one that fits; cp 2 at seq 16384
    (8,192 per rank) and cp 1 are not; without a search the note points at `parplan plan`."""
    data = load_published()
    assert data.cp_min_tokens == 8192 and "8K+ Tokens" in data.cp_source
    cp2 = _estimate("llama-3-8b", "h100", 16, 0.3, global_batch=64, seq_len=8192, cp=2)
    no_cp = _estimate(
        "llama-3-8b", "h100", 16, 0.3, global_batch=64, seq_len=8192, recompute="full"
    )
    # the figures as given, whatever the cost model says of these two layouts
    cp2 = cp2.model_copy(update={"time": cp2.time.model_copy(update={"step_s": 2.0})})
    no_cp = no_cp.model_copy(update={"time": no_cp.time.model_copy(update={"step_s": 2.5})})
    said = short_context_warning(cp2, data, True, no_cp)
    assert said is not None and "(cp 2) at 4,096 tokens per rank" in said
    assert said.endswith(
        "the best layout without it (dp 16 tp 1 pp 1) takes 2.5 s per step, with full "
        "recomputation (+25% against 2 s), so the planner keeps it"
    )
    alone = short_context_warning(cp2, data, True, None)
    assert alone is not None and alone.endswith("no layout without it fits in memory")
    unsearched = short_context_warning(cp2, data, False, None)
    assert unsearched is not None and "`parplan plan` without a cp pin" in unsearched
    long = _estimate("llama-3-8b", "h100", 16, 0.3, global_batch=64, seq_len=16384, cp=2)
    assert short_context_warning(long, data, True, None) is None
    assert short_context_warning(no_cp, data, True, None) is None


def test_the_model_error_the_plans_quote_is_the_documented_cross_validation():
    """plan.md's near-tie paragraph quotes published_best.yaml `model_error`; it must be the
    leave-one-source-out MAPE docs/benchmarks.md's family table records (its `all` row) and
    README.md states, over the run count both give (it once said 9.6 % over 63 runs, two refits
    after the table had moved)."""
    from conftest import REPO

    data = load_published()
    table = (REPO / "docs" / "benchmarks.md").read_text()
    # runs, in-sample, LOSO, memory: the validation table's `all` row has no LOSO column
    rows = re.findall(r"^all\s+(\d+)\s+[\d.]+ %\s+([\d.]+) %\s+[\d.]+ %", table, re.MULTILINE)
    assert len(rows) == 1, "docs/benchmarks.md holds one cross-validation table with an all row"
    runs, loso = int(rows[0][0]), float(rows[0][1])
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"is **{loso} % MAPE overall**" in readme
    assert f"fitted on {runs} published training runs" in readme
    assert data.model_error == pytest.approx(loso / 100)
    assert f"over {runs} published runs" in data.model_error_source
