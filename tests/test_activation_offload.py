"""Activation offloading to host memory (Layout.offload_layers; Megatron-LM
--cpu-offloading-num-layers N, Transformer Engine's CPU offload), priced by rules/cost/memory.yaml
offloaded_layers / offload_resident_bytes and time.yaml offload_copy_s / offload_exposed_s,
searched on request, written and read back.

Figures from the sources, not from the cost model:
  host links, one direction: H100 SXM PCIe Gen5 x16 128 GB/s both ways -> 64e9 bytes/s (H100
    datasheet); GB200 NVLink-C2C 900 GB/s both ways for the superchip's two GPUs -> 225e9
    (GB200 NVL72 specifications);
  Transformer Engine v2.9 pytorch/cpu_offload.py: the first N layers' saved tensors leave the
    GPU (L - N layers kept), one offloaded layer is still resident when the forward ends, before
    the logits exist; the copies hide behind the passes' compute, layer_window_map spreading
    them over all L layers (forward a third of a micro-batch's compute, backward two thirds:
    Narayanan et al. 2021 Appendix).
  Megatron-LM core_v0.16.0 transformer_config.py: N below the layers, pp 1, no recomputation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.inputs.errors import InputError

LLAMA_70B_LAYERS = 80
GB200_64 = {"gpus": 64, "gpu": "gb200"}
# NeMo 25.11's Llama 3 70B FP8-CS preset on GB200 (Megatron-Bridge v0.2.0
# LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG): Megatron-FSDP over 64, mbs 2, 40 layers offloaded.
PRESET = {
    "mbs": 2, "global_batch": 256, "seq_len": 8192, "zero_stage": 3, "precision": "fp8",
}  # fmt: skip
GIGA = 1e9


def _estimate(cluster: dict[str, Any], **layout: Any) -> Any:
    return parplan_gen.estimate(
        "llama-3-70b", cluster, {**PRESET, **layout}, backend="megatron"
    ).estimate


def _layer_bytes(kept: Any, more: Any, layers: int) -> float:
    """One layer's activations of a micro-batch: what `layers` more layers offloaded free."""
    return (kept.memory.activations - more.memory.activations) / layers


@pytest.mark.parametrize(("gpu", "one_way"), [("gb200", 900 / 2 / 2), ("h100", 128 / 2)])
def test_the_host_link_is_the_datasheets(gpu: str, one_way: float) -> None:
    from parplan_gen.cost.host_links import host_link

    link = host_link({"gb200": "gb200", "h100": "h100-sxm-80gb"}[gpu])
    assert link is not None and link.bytes_per_s == pytest.approx(one_way * GIGA)


def test_offloaded_layers_leave_the_gpu_and_one_layer_stays_while_the_forward_ends() -> None:
    none = _estimate(GB200_64)
    half = _estimate(GB200_64, offload_layers=40)
    more = _estimate(GB200_64, offload_layers=50)
    layer = _layer_bytes(half, more, 10)
    # Llama 3 70B at 16,384 tokens a micro-batch: one layer's activations are gigabytes, and the
    # fp32 logits (4 x 16,384 x 128,256 bytes) are more than one layer's: the resident layer
    # never adds to them
    logits = 4 * 16_384 * 128_256
    assert 2**30 < layer < logits
    assert none.memory.activations - half.memory.activations == pytest.approx(40 * layer)
    # they wait in pinned host memory, one micro-batch's, reported beside the GPU's total
    assert half.memory.host_offload == pytest.approx(40 * layer, rel=1e-9)
    assert none.memory.host_offload == 0
    m = half.memory
    assert m.total == m.params + m.grads + m.optimizer + m.activations + m.other
    # nothing but the activations moves
    assert (half.memory.params, half.memory.grads, half.memory.optimizer) == (
        none.memory.params,
        none.memory.grads,
        none.memory.optimizer,
    )


def test_copies_hide_behind_the_compute_on_nvlink_c2c_and_not_over_pcie() -> None:
    gb200 = _estimate(GB200_64, offload_layers=40)
    assert gb200.time.offload_s == 0
    h100 = {"gpus": 64, "gpu": "h100"}
    kept, off = _estimate(h100), _estimate(h100, offload_layers=72)
    layer = _layer_bytes(kept, off, 72)  # the logits still outweigh a layer
    copy = 72 * layer / (64 * GIGA)  # one direction of PCIe Gen5 x16
    micro = off.time.compute_s / off.plan.grad_accum
    exposed = max(0.0, copy - micro / 3) + max(0.0, copy - 2 * micro / 3)
    assert off.time.offload_s == pytest.approx(off.plan.grad_accum * exposed, rel=1e-9)
    assert off.time.offload_s > 0
    assert off.time.step_s - kept.time.step_s == pytest.approx(off.time.offload_s, rel=1e-6)


@pytest.mark.parametrize(
    ("gpu", "layout", "reason"),
    [
        ("gb200", {"offload_layers": 80}, "must be below the model's 80 layers"),
        ("gb200", {"offload_layers": 8, "pp": 2}, "only without a pipeline (pp 2)"),
        ("gb200", {"offload_layers": 8, "recompute": "selective"}, "with selective recomputation"),
        ("b200", {"offload_layers": 8}, "has no figure for this GPU"),
    ],
)
def test_what_megatron_refuses_and_what_is_not_priced(
    gpu: str, layout: dict[str, Any], reason: str
) -> None:
    report = parplan_gen.check(
        "llama-3-70b", {"gpus": 64, "gpu": gpu}, {**PRESET, **layout}, backend="megatron"
    )
    assert any(reason in v.reason for v in report.violations), report.violations


def test_other_backends_do_not_offload() -> None:
    report = parplan_gen.check(
        "llama-3-70b", GB200_64, {**PRESET, "offload_layers": 8}, backend="torchtitan"
    )
    reasons = [v.reason for v in report.violations]
    assert "torchtitan does not offload activations (offload_layers)" in reasons
    with pytest.raises(InputError, match="does not offload activations"):
        parplan_gen.plan(
            "llama-3-70b",
            GB200_64,
            global_batch=256,
            backend="torchtitan",
            pins={"offload_layers": 8},
        )


# ---- planning with it, the files and reading them back ----------------------------------------


def _preset_plan(**options: Any) -> Any:
    """NeMo's GB200 70B layout planned with offloading searched (the count is the search's)."""
    return parplan_gen.plan(
        "llama-3-70b",
        GB200_64,
        global_batch=256,
        seq_len=8192,
        precision="fp8",
        backend="megatron",
        pins={"tp": 1, "pp": 1, "cp": 1, "mbs": 2, "zero_stage": 3},
        search={"activation_offload": "search"},
        **options,
    )


@pytest.fixture(scope="module")
def offload_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    plan = _preset_plan()
    folder = tmp_path_factory.mktemp("offload_plan")
    plan.write(folder)
    return plan, folder


def test_searched_it_offloads_eighths_of_the_layers_when_memory_asks(offload_plan) -> None:
    plan, _ = offload_plan
    chosen = plan.document.chosen
    # the preset's layout does not fit 186 GB without offloading; the search tries 10, 20, ...
    assert chosen.plan.offload_layers in range(10, LLAMA_70B_LAYERS, 10)
    assert chosen.memory.fits
    assert plan.document.search.activation_offload == "search"
    default = parplan_gen.plan(
        "llama-3-70b", GB200_64, global_batch=256, seq_len=8192, backend="megatron"
    )
    assert default.document.search.activation_offload == "off"
    assert default.document.chosen.plan.offload_layers == 0


def test_the_script_offloads_what_was_priced_and_reads_back(offload_plan) -> None:
    plan, folder = offload_plan
    report = (folder / "plan.md").read_text(encoding="utf-8")
    assert "of pinned host memory per GPU beside this" in report
    words = (folder / "megatron_args.sh").read_text(encoding="utf-8").split()
    n = plan.document.chosen.plan.offload_layers
    assert words[words.index("--cpu-offloading-num-layers") + 1] == str(n)
    report = parplan_gen.check(
        "llama-3-70b", GB200_64, from_megatron=folder / "megatron_args.sh", backend="megatron"
    )
    assert report.estimate.plan == plan.document.chosen.plan


def test_megatron_core_takes_it(offload_plan) -> None:
    import consumer_megatron

    _, folder = offload_plan
    reading = consumer_megatron.megatron_reading(folder / "megatron_args.sh")
    assert reading.config.cpu_offloading
    assert 0 < reading.config.cpu_offloading_num_layers < reading.config.num_layers
    assert reading.unread == ()


def test_a_pinned_count_outside_the_search_says_why(cli) -> None:
    run = cli(
        "plan", "llama-3-70b", "--gpus", "64", "--gpu", "gb200", "--global-batch", "256",
        "--backend", "megatron", "--offload-layers", "-1",
    )  # fmt: skip
    assert run.code == 2 and "expected a whole number from 0 to" in run.err
    run = cli(
        "plan", "llama-3-70b", "--gpus", "64", "--gpu", "gb200", "--global-batch", "256",
        "--seq-len", "8192", "--backend", "megatron", "--pp", "1", "--tp", "1",
        "--offload-layers", "20", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    assert run.json()["chosen"]["plan"]["offload_layers"] == 20


def test_compare_takes_and_labels_an_offloading_layout() -> None:
    import argparse

    from parplan_gen.cli.compare import layout_text
    from parplan_gen.render.labels import layout_labels

    assert layout_text("tp=1 pp=1 offload=40") == {"tp": 1, "pp": 1, "offload_layers": 40}
    with pytest.raises(argparse.ArgumentTypeError, match="offload=x: expected a whole number"):
        layout_text("offload=x")
    estimate = _estimate(GB200_64, offload_layers=40)
    assert layout_labels([estimate], ("dp", "tp", "pp"))[0].endswith("zero3 offload40")


@pytest.mark.parametrize("gpu", ["gb200", "h100"])
def test_searching_offloads_never_plans_slower(gpu: str) -> None:
    """`--activation-offload search` adds candidates and prunes an offloading one only where its
    sharding fits without offloading (offloading only adds time), so its best step is at most
    the default search's, on a C2C host link and over PCIe alike."""
    request = {
        "global_batch": 256, "seq_len": 8192, "precision": "fp8", "backend": "megatron",
    }  # fmt: skip
    cluster = {"gpus": 64, "gpu": gpu}
    off = parplan_gen.plan("llama-3-70b", cluster, **request).document.chosen
    on = parplan_gen.plan(
        "llama-3-70b", cluster, **request, search={"activation_offload": "search"}
    ).document.chosen
    assert on.time.step_s <= off.time.step_s
    assert on.memory.fits and off.memory.fits
    if gpu == "gb200":  # NeMo's layout family wins once it may offload (docs/benchmarks.md)
        assert on.plan.offload_layers > 0 and on.time.step_s < off.time.step_s


def _parts_overlay(write, value: str) -> Path:
    text = f"formulas:\n  search_activation_offload_parts: {value}\n"
    return write(f"parts_{value}/overlay.yaml", text).parent


def test_the_grid_is_a_rule(write) -> None:
    """rules/search/defaults.yaml search_activation_offload_parts sets the grid: quarters of
    Llama 3 70B's 80 layers are 20, 40 and 60."""
    plan = _preset_plan(rules=[_parts_overlay(write, "4")])
    search = plan.document.search
    assert search is not None and search.activation_offload_parts == 4
    assert search.activation_offload_parts_source.endswith("(a --rules overlay)")
    assert plan.document.chosen.plan.offload_layers in (20, 40, 60)


@pytest.mark.parametrize("value", ["1", "2.5", "65", "true"])
def test_a_grid_that_is_no_whole_number_of_parts_is_refused(write, value: str) -> None:
    with pytest.raises(InputError, match=r"search_activation_offload_parts gives .*2 to 64"):
        parplan_gen.plan(
            "llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=64,
            rules=[_parts_overlay(write, value)],
        )  # fmt: skip


def test_more_offloading_than_fits_is_counted_as_dominated(offload_plan) -> None:
    """Once a count fits, offloading more layers only adds copies: the search counts those
    candidates under their own reason, not recomputation's."""
    from parplan_gen.planning.memory_order import DOMINATED_OFFLOAD

    plan, _ = offload_plan
    assert plan.document.rejected.get(DOMINATED_OFFLOAD, 0) > 0
