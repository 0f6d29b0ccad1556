"""The gradient reduction's overlap as a layout field (Layout.overlap_grad_reduce,
plan.overlap_grad_reduce): priced as each backend runs it, searched on request, written and
read back.

Without the overlap, Megatron-LM's DDP and distributed optimizer reduce after the backward
(core_v0.16.1 megatron/core/distributed/distributed_data_parallel.py: one bucket, synchronous
in finish_grad_sync), DeepSpeed ZeRO-1/2 reduce on the compute stream and keep one staging
buffer instead of two (runtime/zero/stage_1_and_2.py setup_buckets: "double buffers ... when
overlap_comm is enabled"), and DeepSpeed ZeRO-3 gathers and reduce-scatters on the default
stream (stage3.py reduce_and_partition_stream, parameter_offload.py's all-gather stream).
FSDP2, DDP and Megatron-FSDP have no switch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parplan_gen.api import estimate, plan
from parplan_gen.backends.deepspeed.reader import deepspeed_reading, deepspeed_values
from parplan_gen.backends.megatron.reader import megatron_values
from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.layout import build_layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.loading import load_cluster_spec, load_model
from parplan_gen.render.labels import layout_labels
from parplan_gen.rules.ruleset import load_rules

MODEL = load_model("llama-3-8b")
CLUSTER = load_cluster_spec({"gpus": 16, "gpu": "h100", "gpus_per_node": 8})
RULES = load_rules()
# DeepSpeed's reduce_bucket_size default, elements (runtime/zero/config.py: 5e8)
DS_REDUCE_BUCKET = 500_000_000


def figures(backend: str, overlap: bool, **fields: object) -> dict[str, float]:
    """Llama 3 8B on 16 H100s, dp 16, 64 x 4096 tokens, two micro-batches per step."""
    layout = build_layout(
        16, mbs=2, global_batch=64, seq_len=4096, overlap_grad_reduce=overlap, **fields
    )
    cost = CostModel(RULES, backend=backend)
    return cost.figures(cost.layout_env(MODEL, CLUSTER, layout))


@pytest.mark.parametrize(
    ("backend", "fields"),
    [
        ("megatron", {}),
        ("megatron", {"distributed_optimizer": True}),
        ("deepspeed", {"zero_stage": 1}),
        ("deepspeed", {"zero_stage": 2}),
        ("deepspeed", {"zero_stage": 3}),
    ],
)
def test_without_the_overlap_the_whole_sync_is_exposed(backend: str, fields: dict) -> None:
    on, off = figures(backend, True, **fields), figures(backend, False, **fields)
    # the same traffic either way; none of it hidden, and no overlap cost paid for it
    assert off["time_dp_comm_s"] == on["time_dp_comm_s"] > 0
    assert off["time_dp_exposed_s"] == pytest.approx(off["time_dp_comm_s"])
    assert on["time_dp_exposed_s"] < on["time_dp_comm_s"]
    assert off["time_step_s"] > on["time_step_s"]


def test_deepspeed_keeps_one_reduce_buffer_without_the_overlap() -> None:
    for stage in (1, 2):
        on = figures("deepspeed", True, zero_stage=stage)
        off = figures("deepspeed", False, zero_stage=stage)
        # one bf16 buffer of reduce_bucket_size elements less (the run's 16-bit gradients)
        assert on["memory_grads"] - off["memory_grads"] == 2 * DS_REDUCE_BUCKET


def test_a_deepspeed_zero0_sync_is_after_the_backward_either_way() -> None:
    """ZeRO-0 reduces after the backward whatever overlap_comm says (engine.py
    allreduce_gradients): there is no switch, and a layout cannot say off."""
    assert (0, False) not in BACKENDS["deepspeed"].overlap_switch
    layout = build_layout(16, mbs=2, global_batch=64, seq_len=4096, overlap_grad_reduce=False)
    assert "no switch" in (BACKENDS["deepspeed"].refuses(layout) or "")
    on = figures("deepspeed", True)
    assert on["time_dp_exposed_s"] == pytest.approx(on["time_dp_comm_s"])


@pytest.mark.parametrize(
    ("backend", "zero"),
    [("torchtitan", 3), ("accelerate", 3), ("ddp", 0), ("megatron", 2), ("megatron", 3)],
)
def test_backends_without_the_switch_refuse_off(backend: str, zero: int) -> None:
    layout = build_layout(
        16, mbs=2, global_batch=64, seq_len=4096, zero_stage=zero, overlap_grad_reduce=False
    )
    assert "overlap_grad_reduce off" in (BACKENDS[backend].refuses(layout) or "")  # type: ignore[index]


def test_a_plan_with_the_overlap_off_searches_the_switched_shardings_only() -> None:
    result = plan(
        "llama-3-8b",
        cluster={"gpus": 16, "gpu": "h100", "gpus_per_node": 8},
        global_batch=64,
        seq_len=4096,
        search={"overlap_grad_reduce": False},
    )
    for candidate in result.document.candidates:
        layout, backend = candidate.plan, candidate.backend
        assert backend is not None
        assert not layout.overlap_grad_reduce
        sharding = (layout.zero_stage, layout.distributed_optimizer)
        assert sharding in BACKENDS[backend.name].overlap_switch


def test_a_plan_for_backends_that_always_overlap_is_refused() -> None:
    with pytest.raises(InputError, match="torchtitan always overlaps"):
        plan(
            "llama-3-8b",
            cluster={"gpus": 16, "gpu": "h100", "gpus_per_node": 8},
            global_batch=64,
            seq_len=4096,
            backend="torchtitan",
            search={"overlap_grad_reduce": False},
        )


def test_megatron_reads_the_switch(tmp_path: Path) -> None:
    script = tmp_path / "args.sh"
    script.write_text("--use-distributed-optimizer\n")
    assert megatron_values(script, 32)["overlap_grad_reduce"] is False
    script.write_text("--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather\n")
    assert megatron_values(script, 32)["overlap_grad_reduce"] is True
    # Megatron-FSDP's optim_grads_params overlaps whatever the script says
    script.write_text(
        "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
        "--use-distributed-optimizer\n"
    )
    assert "overlap_grad_reduce" not in megatron_values(script, 32)


@pytest.mark.parametrize(
    ("stage", "said", "read"),
    [
        (1, None, False),  # left out: DeepSpeed's default below ZeRO-3 (overlap_comm_valid)
        (2, None, False),
        (3, None, True),
        (2, False, False),
        (2, True, True),
        (3, False, False),
        (0, False, None),  # ZeRO-0 reads it not
        (2, "auto", False),  # DeepSpeed reads "auto" as unset (runtime/config_utils.py)
        (3, "auto", True),
    ],
)
def test_deepspeed_reads_overlap_comm(
    stage: int, said: bool | str | None, read: bool | None, tmp_path: Path
) -> None:
    zero: dict[str, object] = {"stage": stage}
    if said is not None:
        zero["overlap_comm"] = said
    config = {"train_batch_size": 64, "bf16": {"enabled": True}, "zero_optimization": zero}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    assert deepspeed_values(path).get("overlap_grad_reduce") == read


def test_deepspeed_overlap_comm_must_be_a_switch(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    config = {"bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "overlap_comm": 1}}
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match="overlap_comm is true or false, not 1"):
        deepspeed_values(path)


def test_deepspeed_zero0_counts_overlap_comm_as_another_stages(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    config = {"bf16": {"enabled": True}, "zero_optimization": {"stage": 0, "overlap_comm": True}}
    path.write_text(json.dumps(config))
    reading = deepspeed_reading(path)
    assert "overlap_grad_reduce" not in reading.values
    assert reading.beside.no_effect["settings of another ZeRO stage"] == (
        "zero_optimization.overlap_comm",
    )


def test_a_pipelined_deepspeed_zero1_holds_two_reduce_buffers_either_way() -> None:
    """The pipeline engine turns overlap_comm off itself (engine.py _configure_zero_optimizer)
    and reduce_gradients(pipeline_parallel=True) appends a second buffer: the same run."""
    on = figures("deepspeed", True, zero_stage=1, pp=2)
    off = figures("deepspeed", False, zero_stage=1, pp=2)
    assert on["memory_grads"] == off["memory_grads"]
    assert on["time_step_s"] == off["time_step_s"]


@pytest.mark.parametrize(
    ("backend", "pins", "says"),
    [
        ("megatron", {"zero_stage": 3}, "ZeRO-3 on megatron has no switch"),
        ("deepspeed", {"zero_stage": 0}, "ZeRO-0 on deepspeed has no switch"),
    ],
)
def test_a_pinned_sharding_without_the_switch_is_named(backend: str, pins: dict, says: str):
    with pytest.raises(InputError, match=f"overlap_grad_reduce off: {says}"):
        plan(
            "llama-3-8b",
            cluster={"gpus": 16, "gpu": "h100", "gpus_per_node": 8},
            global_batch=64,
            seq_len=4096,
            backend=backend,
            pins=pins,
            search={"overlap_grad_reduce": False},
        )


def test_megatron_refuses_the_parameter_gather_overlap_alone(tmp_path: Path) -> None:
    script = tmp_path / "args.sh"
    script.write_text("--use-distributed-optimizer --overlap-param-gather\n")
    with pytest.raises(InputError, match="Must use --overlap-param-gather with --overlap-grad"):
        megatron_values(script, 32)


def test_compare_names_the_overlap() -> None:
    layout = {"mbs": 2, "global_batch": 64, "seq_len": 4096, "zero_stage": 2}
    estimates = [
        estimate(MODEL, CLUSTER, layout | {"overlap_grad_reduce": o}, backend="deepspeed").estimate
        for o in (True, False)
    ]
    assert layout_labels(estimates, MODEL.layout_dims) == [
        "deepspeed tp1 pp1 dp16 mbs2 zero2",
        "deepspeed tp1 pp1 dp16 mbs2 zero2 no-overlap",
    ]
