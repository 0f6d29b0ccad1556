"""FSDP2's reshard policy (Layout.fsdp_reshard): `never` keeps every block's parameters gathered
from its forward to its backward, which skips the backward's all-gather; written by torchtitan's
and Accelerate's files, read back by check, accepted by each framework's own config code.

The figures, from Llama 3 8B's published shape (hidden 4096, 32 layers, 8 KV heads of 128, FFN
14336), not from the cost model: a block holds 4096 x 4096 (q) + 2 x 4096 x 1024 (k, v) + 4096
x 4096 (o) + 3 x 4096 x 14336 (the SwiGLU MLP) + 2 x 4096 (its norms) = 218,112,000
parameters. FSDP2's default keeps two blocks gathered at the peak (the one computing and the
one prefetched, rules/cost/memory.yaml zero3_live_params); `never` keeps all 32, so 30 more
blocks' 16-bit parameters: 2 x 30 x 218,112,000 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import consumer_accelerate
import consumer_torchtitan
import pytest
from formula_env import formula_env, formula_value
from plan_edit import rendered_with

import parplan_gen
from parplan_gen.backends.accelerate.reader import accelerate_values
from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.cost.layout import build_layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.presets import load_preset
from parplan_gen.planning.search_space import Request, SearchOptions, outside_search
from parplan_gen.render.mapping import load_mapping

from conftest import REPO

H100_8 = {"gpus": 8, "gpu": "h100"}
BLOCK_PARAMS = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
LAYERS = 32
EMBEDDING_PARAMS = 128_256 * 4096  # the vocabulary's embedding
LAYOUT = {"mbs": 1, "global_batch": 64, "seq_len": 8192, "zero_stage": 3}


def _estimate(backend: str, **layout: Any) -> Any:
    found = parplan_gen.estimate("llama-3-8b", H100_8, {**LAYOUT, **layout}, backend=backend)
    return found


@pytest.mark.parametrize("backend", ["torchtitan", "accelerate"])
def test_never_keeps_every_block_gathered(backend: str) -> None:
    """Both keep only [final norm, output] gathered by default; the embedding, a unit of its
    own, is resharded after its forward like a block, and kept with `never` (torchtitan 0.3
    distributed/fsdp.py apply_fsdp_to_decoder; Accelerate utils/fsdp_utils.py
    fsdp2_prepare_model)."""
    default = _estimate(backend).estimate.memory.params
    never = _estimate(backend, fsdp_reshard="never").estimate.memory.params
    assert never - default == 2 * ((LAYERS - 2) * BLOCK_PARAMS + EMBEDDING_PARAMS)


def test_under_torchtitans_pipeline_never_is_its_default() -> None:
    """With pp torchtitan's default policy keeps the stage gathered (distributed/fsdp.py
    get_fsdp_reshard_after_forward_policy): `never` is the same run, so the layout names it
    `default` (and the search does not try it twice)."""
    pp2 = {"pp": 2, "global_batch": 64, "mbs": 1}
    never = _estimate("torchtitan", fsdp_reshard="never", **pp2)
    assert [v.rule_id for v in never.violations] == ["torchtitan.reshard_never_is_pipeline_default"]
    assert _estimate("torchtitan", **pp2).runnable


@pytest.mark.parametrize("backend", ["torchtitan", "accelerate"])
def test_never_skips_the_backwards_gather(backend: str) -> None:
    """A step's FSDP2 traffic is, each micro-batch and block, a forward gather, a backward gather
    and a reduce-scatter (rules/cost/sharding.yaml); `never` drops the backward gather."""
    default = _estimate(backend).estimate.time.dp_comm_s
    never = _estimate(backend, fsdp_reshard="never").estimate.time.dp_comm_s
    env = formula_env("llama-3-8b", H100_8, backend, **LAYOUT)
    gather = formula_value("zero3_gather_s", env)
    micro_batches = LAYOUT["global_batch"] // (LAYOUT["mbs"] * 8)
    assert default - never == pytest.approx(micro_batches * LAYERS * gather, rel=1e-12)


@pytest.mark.parametrize(
    ("backend", "layout", "why"),
    [
        ("megatron", {}, "Megatron-LM has no FSDP2 reshard policy to set (fsdp_reshard)"),
        ("deepspeed", {}, "DeepSpeed has no FSDP2 reshard policy to set (fsdp_reshard)"),
        ("torchtitan", {"zero_stage": 0}, "fsdp_reshard never needs FSDP2's sharding (zero 3)"),
    ],
)
def test_only_fsdp2_sharding_takes_it(backend: str, layout: dict[str, Any], why: str) -> None:
    found = _estimate(backend, fsdp_reshard="never", **layout)
    reasons = [v.reason for v in found.violations if v.rule_id == "backend.capabilities"]
    assert reasons == [why]


def _never(plan_dir: Path, tmp_path: Path, cli: Any) -> Path:
    """The plan's plan.json with fsdp_reshard never, rendered again."""
    return rendered_with(plan_dir, tmp_path / "never", cli, fsdp_reshard="never")


def test_torchtitan_writes_it_and_reads_it_back(tmp_path: Path, cli: Any) -> None:
    out = tmp_path / "plan"
    parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=8192, backend="torchtitan",
        pins={"tp": 1, "zero_stage": 3}, search={"fsdp_reshard": "default"},
    ).write(out)  # fmt: skip
    assert "fsdp_reshard_after_forward" not in (out / "torchtitan_run.sh").read_text()
    script = _never(out, tmp_path, cli) / "torchtitan_run.sh"
    assert "    --parallelism.fsdp_reshard_after_forward never\n" in script.read_text()
    run = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--from-torchtitan", script,
              "--json")  # fmt: skip
    assert run.json()["plan"]["fsdp_reshard"] == "never"
    reading = consumer_torchtitan.torchtitan_reading(script, 8)
    assert consumer_torchtitan.layout_read(reading)["fsdp_reshard"] == "never"


def test_accelerate_writes_it_and_reads_it_back(tmp_path: Path, cli: Any) -> None:
    out = tmp_path / "plan"
    parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=8192, backend="accelerate"
    ).write(out)  # fmt: skip
    config = _never(out, tmp_path, cli) / "accelerate_config.yaml"
    assert "  fsdp_reshard_after_forward: false\n" in config.read_text()
    mapping = load_mapping(REPO / "templates" / "mapping.yaml")
    assert accelerate_values(config, mapping, num_gpus=8)["fsdp_reshard"] == "never"
    reading = consumer_accelerate.accelerate_reading(config)
    assert consumer_accelerate.layout_read(reading)["fsdp_reshard"] == "never"


def test_an_accelerate_reshard_that_is_no_switch_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "accelerate_config.yaml"
    config.write_text(
        "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\nfsdp_config:\n"
        "  fsdp_version: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
        "  fsdp_reshard_after_forward: sometimes\n",
        encoding="utf-8",
    )
    mapping = load_mapping(REPO / "templates" / "mapping.yaml")
    with pytest.raises(InputError) as caught:
        accelerate_values(config, mapping, num_gpus=8)
    assert str(caught.value) == (
        f"{config}:7:3: fsdp_config.fsdp_reshard_after_forward: 'sometimes' is no switch"
    )


def test_a_torchtitan_plan_sharded_over_cp_alone_reads_back(tmp_path: Path, cli: Any) -> None:
    """dp 1 x cp 8: FSDP2 shards over dp_shard x cp (distributed/parallel_dims.py), ZeRO-3."""
    out = tmp_path / "plan"
    parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=8, seq_len=65_536, backend="torchtitan",
        pins={"cp": 8, "tp": 1, "zero_stage": 3},
    ).write(out)  # fmt: skip
    script = _never(out, tmp_path, cli) / "torchtitan_run.sh"
    run = cli("check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--from-torchtitan", script,
              "--json")  # fmt: skip
    assert run.code == 0, run.err
    plan = run.json()["plan"]
    assert (plan["dp"], plan["cp"], plan["zero_stage"], plan["fsdp_reshard"]) == (1, 8, 3, "never")


# The search: both policies on torchtitan's and Accelerate's FSDP2 layouts (rules/search/
# defaults.yaml search_fsdp_reshard_default), the faster that fits winning.
PINNED = {"dp": 8, "zero_stage": 3, "mbs": 1, "recompute": "none"}


def _plan(seq_len: int, search: dict[str, str] | None = None) -> Any:
    return parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=seq_len, backend="torchtitan",
        pins=PINNED, search=search,
    )  # fmt: skip


def test_the_search_keeps_the_blocks_gathered_where_they_fit() -> None:
    searched, asked = _plan(4096).document, _plan(4096, {"fsdp_reshard": "default"}).document
    assert (searched.chosen.plan.fsdp_reshard, asked.chosen.plan.fsdp_reshard) == (
        "never",
        "default",
    )
    # the same layout but for the policy: the 30 more blocks and the embedding held, and a
    # step without the backward's all-gathers, never slower
    extra = searched.chosen.memory.total - asked.chosen.memory.total
    assert extra == pytest.approx(2 * ((LAYERS - 2) * BLOCK_PARAMS + EMBEDDING_PARAMS), abs=2)
    assert searched.chosen.time.step_s < asked.chosen.time.step_s
    record = json.loads(asked.to_json())["search"]
    assert (record["fsdp_reshard"], record["fsdp_reshard_source"]) == (
        "default",
        "--fsdp-reshard (requested)",
    )
    assert json.loads(searched.to_json())["search"]["fsdp_reshard"] == "search"


def test_the_search_reshards_where_the_gathered_blocks_do_not_fit() -> None:
    # at 12,288 tokens the activations leave no room for 14 GB more beside the plan's headroom
    # (at 8,192 the gathered blocks fit: 70.5 GiB of 80, the headroom's 11.5 % included)
    never = _plan(12288, {"fsdp_reshard": "never"}).document
    assert not never.feasible and list(never.rejected) == [
        "does not fit in GPU memory (80 GiB, keeping 0.0 GiB and 11.5% of its tensors free) "
        "[memory.fits]"
    ]
    assert _plan(12288).document.chosen.plan.fsdp_reshard == "default"


def test_never_asked_of_backends_without_the_policy_is_refused() -> None:
    with pytest.raises(InputError, match="fsdp_reshard never: megatron has no FSDP2 reshard"):
        parplan_gen.plan(
            "llama-3-8b", H100_8, global_batch=64, seq_len=4096, backend="megatron",
            search={"fsdp_reshard": "never"},
        )  # fmt: skip


def test_a_policy_the_search_did_not_try_is_named() -> None:
    layout = build_layout(
        8, zero_stage=3, mbs=1, global_batch=64, seq_len=4096, fsdp_reshard="never"
    )
    options = SearchOptions(backend="torchtitan")  # the default choice alone
    request = Request(load_preset("llama-3-8b"), cluster_from_flags(8, "h100"), 64, 4096,
                      options=options)  # fmt: skip
    assert outside_search(layout, request) == (
        "FSDP2 reshard policy never is not searched on torchtitan (search option --fsdp-reshard)"
    )
    searched = SearchOptions(backend="torchtitan", fsdp_reshard=("never", "default"))
    assert (
        outside_search(layout, Request(request.spec, request.cluster, 64, 4096, options=searched))
        is None
    )
