"""Megatron-FSDP (issue 13): ZeRO-2/3 on Megatron is Megatron-FSDP's optim_grads /
optim_grads_params, planned with Megatron-LM core_v0.16 (core_v0.16.1, the pinned release; the
first with --use-megatron-fsdp is core 0.14), priced with Megatron's fp32 main gradients,
rendered with the flags its validate_args and user guide require, and read back as the same
sharding."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan_gen.api import estimate, load_cluster_spec, load_model
from parplan_gen.backends.megatron.reader import megatron_values
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.checks import RenderError
from parplan_gen.render.plan_files import render_plan

from conftest import builtin_rules

GPUS = 16
ZERO3 = {"tp": 2, "global_batch": 256, "seq_len": 8192, "sequence_parallel": True, "zero_stage": 3}
LLAMA_3_8B_LAYERS = 32


def _estimate(layout: dict, backend: str):
    cluster = load_cluster_spec({"gpus": GPUS, "gpu": "h100"})
    return estimate("llama-3-8b", cluster, layout, backend=backend)


def _document(layout: dict, backend: str) -> PlanDocument:
    evaluation = _estimate(layout, backend)
    assert evaluation.runnable and evaluation.fits, evaluation.violations
    cluster = load_cluster_spec({"gpus": GPUS, "gpu": "h100"})
    return PlanDocument.from_parts(
        rules=builtin_rules(),
        model=load_model("llama-3-8b"),
        cluster=cluster,
        chosen=evaluation.estimate,
    )


def test_zero3_and_the_distributed_optimizer_on_megatron_name_its_one_release():
    fsdp = _estimate(ZERO3, "megatron").estimate.backend
    dist_opt = {**ZERO3, "zero_stage": 0, "distributed_optimizer": True}
    assert (fsdp.name, fsdp.version) == ("megatron", "core_v0.16")
    assert _estimate(dist_opt, "megatron").estimate.backend.version == "core_v0.16"


def test_megatron_fsdp_keeps_fp32_gradients_deepspeed_zero_16_bit_ones():
    # ZeRO-3 over dp 8 (16 GPUs / tp 2): every GPU holds params / (tp x dp) of the gradients,
    # 4 bytes each under Megatron (fp32 main grads), 2 under DeepSpeed ZeRO (memory.yaml).
    # Besides the shards: Megatron-FSDP holds one layer's unsharded fp32 grads (32 layers, tp 2)
    # and DeepSpeed a reduce bucket of 5e8 16-bit grads, or the LM head's whole gradient, which
    # is larger and reduced alone (stage3.py; memory.yaml zero3_live_grad_bytes).
    model = load_model("llama-3-8b")
    params = model.total_params()
    per_gpu = params / (2 * 8)
    layer = (params - 2 * 128256 * 4096) / 32 / 2  # untied embedding and LM head
    megatron = _estimate(ZERO3, "megatron").estimate.memory.grads
    deepspeed = _estimate({**ZERO3, "tp": 1, "sequence_parallel": False}, "deepspeed")
    assert megatron == pytest.approx(4 * per_gpu + 4 * layer, rel=0.02)
    lm_head = 128256 * 4096
    assert deepspeed.estimate.memory.grads == pytest.approx(
        2 * params / 16 + 2 * max(5e8, lm_head), rel=0.01
    )


def test_megatron_fsdp_with_pipeline_parallelism_is_rejected():
    evaluation = _estimate({**ZERO3, "pp": 2}, "megatron")
    assert "megatron.fsdp_no_pipeline" in {v.rule_id for v in evaluation.violations}


def test_rendered_script_has_the_flags_megatron_fsdp_needs(tmp_path: Path):
    files = render_plan(_document(ZERO3, "megatron"))
    script = files["megatron_args.sh"]
    assert "Megatron-LM (core_v0.16)" in script
    for flag in (
        "--use-megatron-fsdp",
        "--data-parallel-sharding-strategy optim_grads_params",
        "--use-distributed-optimizer",  # the user guide's required flags
        "--no-gradient-accumulation-fusion",
        "--ckpt-format fsdp_dtensor",  # validate_args: fsdp_dtensor only
    ):
        assert flag in script
    # validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 with Megatron-FSDP, even at tp 2
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in script + files["nccl.env"]
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in script
    path = tmp_path / "megatron_args.sh"
    path.write_text(script, encoding="utf-8")
    read = megatron_values(path, LLAMA_3_8B_LAYERS)
    assert read["zero_stage"] == 3 and "distributed_optimizer" not in read


def test_a_release_that_is_not_shipped_is_refused_by_name():
    """core_r0.13, which plans named before the one release (it had no Megatron-FSDP)."""
    doc = _document(ZERO3, "megatron").with_render_options(megatron_version="core_r0.13")
    with pytest.raises(RenderError, match=r"'core_r0\.13' is not available \(have: core_v0\.16\)"):
        render_plan(doc)


def test_a_zero3_plan_priced_on_deepspeed_writes_no_megatron_fsdp_script():
    layout = {**ZERO3, "tp": 1, "sequence_parallel": False}
    files = render_plan(_document(layout, "deepspeed"))
    assert "megatron_args.sh" not in files
    assert (
        "megatron_args.sh: not written, Megatron-LM does not run this layout (its ZeRO-3 is a "
        "sharding of its own, priced apart: plan with --backend megatron)"
    ) in files["plan.md"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # optim_grads(_params) overlap the reduction whatever the script says (megatron_fsdp.py)
        ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", {"zero_stage": 2}),
        # the others do so only with --overlap-grad-reduce, which these scripts leave out
        ("--use-megatron-fsdp --data-parallel-sharding-strategy optim",
         {"distributed_optimizer": True, "overlap_grad_reduce": False}),
        ("--data-parallel-sharding-strategy optim_grads_params",  # not used without FSDP
         {"overlap_grad_reduce": False}),
    ],
)  # fmt: skip
def test_reader_takes_megatron_fsdp_strategies(tmp_path: Path, args: str, expected: dict):
    path = tmp_path / "args.sh"
    path.write_text(f"--tensor-model-parallel-size 1 {args}\n", encoding="utf-8")
    assert megatron_values(path, LLAMA_3_8B_LAYERS) == {"tp": 1, **expected}


def test_reader_refuses_an_unknown_strategy(tmp_path: Path):
    path = tmp_path / "args.sh"
    path.write_text("--use-megatron-fsdp --data-parallel-sharding-strategy full\n")
    with pytest.raises(
        InputError,
        match=r"args\.sh:1: --data-parallel-sharding-strategy: 'full' is not one of "
        r"\('no_shard', 'optim', 'optim_grads', 'optim_grads_params'\)",
    ):
        megatron_values(path, LLAMA_3_8B_LAYERS)
