"""Megatron's EP all-to-all overlap (rules/cost/moe.yaml moe_a2a_overlapped, ep_exposed_s):
priced only for the layouts Megatron-Core core_v0.16.1 runs it with, rendered exactly then, and
the rendered megatron_args.sh accepted by Megatron-Core's own TransformerConfig checks.

NeMo 25.11's Qwen3-30B-A3B on 16 H100 (Megatron-Bridge v0.2.0 QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG:
pp 2, vpp 12, ep 8, moe_a2a_overlap=True), global batch 512, micro-batch 1, dp 8: 64 micro-batches.
The first rank's unpaired passes: warm-up (pp - 1) x 2 + (vpp - 1) x pp = 2 + 22, plus the extra
micro-batch the overlap schedules, 25 of 64 x 12 = 768 chunk passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from formula_env import formula_env, formula_value

from parplan_gen.api import load_cluster_spec, load_model
from parplan_gen.cost.layout import build_layout
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.render.render_options import RenderOptions, render_files

import consumer_megatron
from conftest import builtin_rules

QWEN3 = {"pp": 2, "vpp": 12, "ep": 8, "mbs": 1, "global_batch": 512, "seq_len": 4096}


def _env(backend: str, **layout: Any) -> dict[str, Any]:
    options = QWEN3 | {"recompute": "selective"} | layout
    return formula_env("qwen3-30b-a3b", {"gpus": 16, "gpu": "h100"}, backend, **options)


_value = formula_value


def _holds(name: str, env: dict[str, Any]) -> bool:
    return bool(builtin_rules().library.compile(name, SourceRef("test"), "estimate").evaluate(env))


def test_the_paired_passes_hide_their_all_to_all() -> None:
    env = _env("megatron")
    assert _holds("moe_a2a_overlapped", env)
    assert _value("moe_unpaired_fraction", env) == pytest.approx(25 / 768, rel=1e-12)
    traffic, compute = _value("ep_traffic_s", env), _value("layers_compute_s", env)
    assert 0 < traffic < compute  # the partner's compute outlasts the all-to-alls
    assert _value("ep_comm_s", env) == pytest.approx(traffic * 25 / 768, rel=1e-12)


@pytest.mark.parametrize(
    ("backend", "layout"),
    [
        ("megatron", {"vpp": 1}),  # pp > 1 needs an interleaved pipeline
        ("megatron", {"recompute": "full"}),  # refused with full recompute
        ("megatron", {"tp": 2, "etp": 1, "ep": 8, "pp": 1, "vpp": 1, "sequence_parallel": True}),
        ("deepspeed", {"pp": 1, "vpp": 1}),  # no such schedule
    ],
)
def test_the_all_to_all_is_exposed_where_megatron_does_not_overlap_it(
    backend: str, layout: dict[str, Any]
) -> None:
    env = _env(backend, **layout)
    assert not _holds("moe_a2a_overlapped", env)
    assert _value("ep_comm_s", env) == _value("ep_traffic_s", env)


def test_an_overlapped_plan_names_the_release_that_has_the_flag() -> None:
    """Megatron's one release, core_v0.16 (core_v0.16.1), has the overlap: every plan names it,
    overlapped or not."""
    megatron = BACKENDS["megatron"]
    for vpp in (12, 1):
        env = _env("megatron", vpp=vpp)
        layout = build_layout(16, **(QWEN3 | {"vpp": vpp, "recompute": "selective"}))
        holds = lambda name, env=env: _holds(name, env)  # noqa: E731
        assert megatron.version_for(layout, holds) == "core_v0.16"


@pytest.mark.parametrize(("vpp", "overlapped"), [(12, True), (1, False)])
def test_megatron_core_takes_the_overlap_parplan_renders(
    tmp_path: Path, vpp: int, overlapped: bool
) -> None:
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster_spec({"gpus": 16, "gpu": "h100"})
    plan = build_layout(16, **(QWEN3 | {"vpp": vpp, "recompute": "selective"}))
    found = Evaluator(builtin_rules(), backend="megatron").evaluate(model, cluster, plan)
    doc = PlanDocument.from_parts(
        rules=builtin_rules(), model=model, cluster=cluster, chosen=found.estimate
    )
    path = tmp_path / "megatron_args.sh"
    path.write_text(render_files(doc, RenderOptions())["megatron_args.sh"], encoding="utf-8")
    words = path.read_text(encoding="utf-8").split()
    flags = {"--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"}
    assert flags <= set(words) if overlapped else not flags & set(words)
    reading = consumer_megatron.megatron_reading(path)  # TransformerConfig.__post_init__ checks
    config = reading.config
    assert (config.overlap_moe_expert_parallel_comm, config.delay_wgrad_compute) == (
        overlapped,
        overlapped,
    )
    assert (reading.world, reading.dp) == (16, 8)


def test_megatron_core_takes_the_overlap_without_a_pipeline(tmp_path: Path) -> None:
    # pp = 1: combined_1f1b_schedule_for_no_pipelining (core_v0.16.1); Qwen3-30B-A3B has no MTP
    # layer, which TransformerConfig would refuse with the overlap at pp = 1
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster_spec({"gpus": 16, "gpu": "h100"})
    layout = QWEN3 | {"pp": 1, "vpp": 1, "recompute": "selective", "distributed_optimizer": True}
    plan = build_layout(16, **layout)
    found = Evaluator(builtin_rules(), backend="megatron").evaluate(model, cluster, plan)
    doc = PlanDocument.from_parts(
        rules=builtin_rules(), model=model, cluster=cluster, chosen=found.estimate
    )
    path = tmp_path / "megatron_args.sh"
    path.write_text(render_files(doc, RenderOptions())["megatron_args.sh"], encoding="utf-8")
    config = consumer_megatron.megatron_reading(path).config
    assert config.overlap_moe_expert_parallel_comm and config.delay_wgrad_compute
    assert config.pipeline_model_parallel_size == 1
