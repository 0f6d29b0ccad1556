"""`parplan plan --all-backends` and `parplan_gen.plan_all_backends`: each backend's own best plan.

Every figure is checked against the searches it stands for: a backend's own best is what
`plan(..., backend=name)` chooses, the overall best is what the unrestricted `plan` chooses, and
the backend that runs nothing is ddp, whose replicated model states alone (mixed-precision Adam:
2 + 2 + 12 bytes per parameter, ZeRO paper sec. 3.1) outgrow an 80 GB GPU for a 70B model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import NothingFitsError, ParplanError
from parplan_gen.planning.document import load_plan_document
from parplan_gen.planning.planner import PlanError

from conftest import Run

REQUEST = ("llama-3-70b", "--gpus", "64", "--gpu", "h100", "--global-batch", "512")
KWARGS = {"global_batch": 512, "seq_len": 4096}
CLUSTER = {"gpus": 64, "gpu": "h100"}
MODEL_STATE_BYTES = 2 + 2 + 12  # bf16 weights + bf16 grads + fp32 Adam (ZeRO paper, sec. 3.1)


@pytest.fixture(scope="module")
def found() -> dict[str, parplan_gen.api.BackendOutcome]:
    return parplan_gen.plan_all_backends("llama-3-70b", CLUSTER, **KWARGS)


def test_each_backend_gets_the_best_plan_of_its_own_search(found: dict) -> None:
    assert list(found) == list(parplan_gen.api.load_model("llama-3-70b").backends)
    for name, one in found.items():
        if isinstance(one, ParplanError):
            continue
        alone = parplan_gen.plan("llama-3-70b", CLUSTER, backend=name, **KWARGS)
        assert one.chosen == alone.chosen
        assert one.chosen.backend is not None and one.chosen.backend.name == name
        assert one.document.best_on == name
        assert one.document.contract()["best_on"] == name


def test_a_backend_that_runs_nothing_says_why(found: dict) -> None:
    why = found["ddp"]
    assert isinstance(why, NothingFitsError) and why.message.startswith("nothing fits")
    assert why.exit_code == 3  # as `parplan plan --backend ddp` ends
    need = float(why.message.split("needs ")[1].split(" GiB")[0])
    spec = parplan_gen.api.load_model("llama-3-70b")
    assert need * GIB >= spec.total_params() * MODEL_STATE_BYTES > 80e9  # ddp replicates it all


def test_the_overall_best_is_the_unrestricted_searchs_choice(
    cli: Callable[..., Run], found: dict
) -> None:
    unrestricted = parplan_gen.plan("llama-3-70b", CLUSTER, **KWARGS).chosen
    run = cli("plan", *REQUEST, "--seq-len", "4096", "--all-backends", "--json")
    assert run.code == 0, run.err
    data = run.json()
    assert data["best"] == unrestricted.backend.name
    assert list(data["backends"]) == ["megatron", "deepspeed", "torchtitan", "accelerate"]
    assert data["runs_nothing"] == {"ddp": found["ddp"].message}
    for name, contract in data["backends"].items():
        # each backend's plan as plan.json holds it (`plan --json`'s shape)
        assert contract == json.loads(found[name].document.to_json())
        assert contract["best_on"] == name and contract["chosen"]["backend"]["name"] == name
    assert data["backends"][data["best"]]["chosen"]["plan"] == unrestricted.contract()["plan"]


def test_a_backend_that_no_layout_runs_on_is_a_plan_error() -> None:
    """Llama 3 8B has 32 attention heads: pinned to tp 3, no layout of it exists on any backend;
    each one's reason is the PlanError `plan(..., backend=name)` raises, its words the API's."""
    found = parplan_gen.plan_all_backends(
        "llama-3-8b", {"gpus": 6, "gpu": "h100"}, global_batch=60, pins={"tp": 3},
        backend=["megatron", "deepspeed"],
    )  # fmt: skip
    assert list(found) == ["megatron", "deepspeed"]
    for name, why in found.items():
        assert isinstance(why, PlanError)
        with pytest.raises(PlanError) as alone:
            parplan_gen.plan("llama-3-8b", {"gpus": 6, "gpu": "h100"}, global_batch=60,
                             pins={"tp": 3}, backend=name)  # fmt: skip
        assert why.message == alone.value.message
        assert why.message.startswith("tp 3: no layout of 6 GPUs with these can run llama-3-8b: ")


def test_out_writes_one_labelled_folder_per_backend_that_runs(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    out = tmp_path / "all"
    run = cli("plan", *REQUEST, "--seq-len", "4096", "--all-backends", "--out", out)
    assert run.code == 0, run.err
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "accelerate", "deepspeed", "megatron", "torchtitan",
    ]  # fmt: skip
    assert "ddp: runs nothing: nothing fits" in run.out
    best = parplan_gen.plan("llama-3-70b", CLUSTER, **KWARGS).chosen.backend.name
    assert f"Overall best: {best}" in run.out
    assert (out / "README.md").read_text(encoding="utf-8") == run.out
    for name, title in (("megatron", "Megatron-LM"), ("deepspeed", "DeepSpeed")):
        doc = load_plan_document(out / name / "plan.json")
        assert doc.best_on == name and doc.chosen.backend.name == name
        assert f"This is the best plan on {title} alone" in (out / name / "plan.md").read_text()
    assert (out / "megatron" / "megatron_args.sh").exists()
    assert (out / "deepspeed" / "ds_config.json").exists()
    # re-rendering keeps the label; a plain plan's plan.json has no `best_on` at all
    again = cli("render", out / "deepspeed" / "plan.json", "--out", tmp_path / "again")
    assert again.code == 0, again.err
    assert load_plan_document(tmp_path / "again" / "plan.json").best_on == "deepspeed"
    plain = cli("plan", *REQUEST, "--out", tmp_path / "plain")
    assert plain.code == 0, plain.err
    assert '"best_on"' not in (tmp_path / "plain" / "plan.json").read_text()


def test_backend_narrows_the_backends_compared(cli: Callable[..., Run]) -> None:
    run = cli(
        "plan", *REQUEST, "--all-backends", "--backend", "ddp", "--backend", "deepspeed", "--json"
    )
    assert run.code == 0, run.err
    data = run.json()
    assert list(data["backends"]) == ["deepspeed"] and list(data["runs_nothing"]) == ["ddp"]
    assert data["best"] == "deepspeed"


def test_out_with_no_backend_that_runs_is_refused(cli: Callable[..., Run], tmp_path: Path) -> None:
    run = cli("plan", *REQUEST, "--all-backends", "--backend", "ddp", "--out", tmp_path / "x")
    assert run.code != 0
    assert "no backend runs a plan of this request" in run.err
    assert not (tmp_path / "x").exists()


def test_out_is_one_change_a_refusal_writes_no_backend_folder(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    """A second run refused for one backend's different file writes none of its folders (the
    probe's case: the new DIR/megatron/ was left beside the old run's folders and README), and
    with --force a backend that no longer runs leaves no folder behind."""
    out, small = tmp_path / "all", ("llama-3-8b", "--gpus", "8", "--gpu", "h100")

    def files() -> dict[str, bytes]:
        return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    first = cli("plan", *small, "--global-batch", "64", "--all-backends", "--backend", "deepspeed",
                "--out", out)  # fmt: skip
    assert first.code == 0, first.err
    before = files()
    both = ("--all-backends", "--backend", "deepspeed", "--backend", "megatron", "--out", out)
    refused = cli("plan", *small, "--global-batch", "128", *both)
    assert refused.code == 1
    assert "will not overwrite deepspeed/ds_config.json, " in refused.err
    assert "deepspeed/plan.json, README.md (content differs)" in refused.err
    assert files() == before and not (out / "megatron").exists()
    forced = cli("plan", *small, "--global-batch", "128", *both, "--force")
    assert forced.code == 0, forced.err
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "deepspeed", "megatron"]
    alone = ("--all-backends", "--backend", "megatron", "--out", out)
    kept = cli("plan", *small, "--global-batch", "128", *alone)
    assert kept.code == 1 and "will not remove deepspeed/plan.json" in kept.err
    retired = cli("plan", *small, "--global-batch", "128", *alone, "--force")
    assert retired.code == 0, retired.err
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "megatron"]
    assert "removed    " + str(out / "deepspeed" / "plan.json") in retired.err
