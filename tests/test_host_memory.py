"""The host's memory against activation offloading's pinned buffers (rules/constraints/memory.yaml
memory.offload_fits_host; formula name cluster.host_memory).

The figures, from the sources (not from the cost model): a node's host memory as its published
published description prints it (parplan_gen/data/gpus.yaml reference_node.host_memory_gb): an
8-GPU H100 SXM server 2 TB (MLCommons), a GB200 NVL72 tray of 4 GPUs 2 x 480 GB (its two Grace
CPUs' LPDDR5X, GB200 datasheet); per GPU 2,000 / 8 = 250 GB and 960 / 4 = 240 GB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.cost.hardware import cluster_from_flags, load_cluster
from parplan_gen.inputs.errors import InputError

GB = 1e9
GIB = 2**30
# Llama 3 70B on 64 GB200 at NeMo's layout family: Megatron-FSDP over 64, mbs 2, 50 of its 80
# layers offloaded (tests/test_activation_offload.py): 182.5 GiB of pinned buffers per GPU.
LAYOUT = {
    "tp": 1, "pp": 1, "mbs": 2, "global_batch": 256, "seq_len": 8192, "zero_stage": 3,
    "precision": "fp8", "offload_layers": 50,
}  # fmt: skip


def _cluster_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("gpu", "per_gpu"), [("h100", 2000 * GB / 8), ("gb200", 960 * GB / 4), ("l40s", 0.0)]
)
def test_the_reference_systems_host_memory_per_gpu(gpu: str, per_gpu: float) -> None:
    gpus = 8 if gpu != "gb200" else 4
    assert cluster_from_flags(gpus, gpu).host_memory_per_gpu == pytest.approx(per_gpu)


def test_a_cluster_file_gives_its_nodes_host_memory(tmp_path: Path) -> None:
    path = _cluster_file(tmp_path, "gpu: gb200\nnum_gpus: 64\nhost_memory_gb_per_node: 256\n")
    cluster = load_cluster(path)
    assert cluster.host_memory_per_gpu == pytest.approx(256 * GB / 4)
    assert cluster.model_dump(mode="json")["host_memory_gb_per_node"] == 256
    assert "host_memory_gb_per_node" not in cluster_from_flags(64, "gb200").model_dump()


def test_an_impossible_host_memory_is_refused_at_its_line(tmp_path: Path) -> None:
    path = _cluster_file(tmp_path, "gpu: gb200\nnum_gpus: 64\nhost_memory_gb_per_node: 2\n")
    with pytest.raises(InputError, match=r"cluster.yaml:3.*host_memory_gb_per_node.*8"):
        load_cluster(path)


def test_buffers_within_the_hosts_memory_are_kept() -> None:
    report = parplan_gen.check("llama-3-70b", {"gpus": 64, "gpu": "gb200"}, LAYOUT,
                               backend="megatron")  # fmt: skip
    host = report.estimate.memory.host_offload
    assert 182 * GIB < host < 183 * GIB < 960 * GB / 4
    assert report.runs_as_given
    assert not [v for v in report.violations if v.rule_id == "memory.offload_fits_host"]


def test_buffers_beyond_the_hosts_memory_do_not_fit(tmp_path: Path) -> None:
    path = _cluster_file(tmp_path, "gpu: gb200\nnum_gpus: 64\nhost_memory_gb_per_node: 256\n")
    report = parplan_gen.check("llama-3-70b", path, LAYOUT, backend="megatron")
    assert report.estimate.memory.total < report.estimate.memory.capacity  # the GPU's fits
    assert not report.fits and not report.runs_as_given
    problem = report.problem()
    assert problem is not None and problem.startswith(
        "the layout does not fit: the offloaded activations' pinned host buffers (182.5 GiB per "
        "GPU) do not fit in the host's memory (59.6 GiB per GPU) [memory.offload_fits_host"
    )
    # the planner keeps fewer layers offloaded, within the 64 GB per GPU
    better = report.better
    assert better is not None and better.memory.host_offload <= 256 * GB / 4


def test_without_offloading_or_a_host_figure_nothing_is_checked(tmp_path: Path) -> None:
    path = _cluster_file(tmp_path, "gpu: gb200\nnum_gpus: 64\nhost_memory_gb_per_node: 8\n")
    none = parplan_gen.check("llama-3-70b", path, {**LAYOUT, "offload_layers": 0, "tp": 4},
                             backend="megatron")  # fmt: skip
    assert not [v for v in none.violations if v.rule_id == "memory.offload_fits_host"]
    # an L40S has a host link (PCIe) but no host memory figure: offloading is not checked
    l40s = parplan_gen.check("llama-3-8b", {"gpus": 8, "gpu": "l40s"},
                             {"mbs": 1, "global_batch": 8, "seq_len": 4096, "zero_stage": 3,
                              "offload_layers": 31}, backend="megatron")  # fmt: skip
    assert l40s.estimate.memory.host_offload > 0
    assert not [v for v in l40s.violations if v.rule_id == "memory.offload_fits_host"]


def test_the_search_keeps_the_offloads_the_host_can_hold(tmp_path: Path) -> None:
    """The planner's memory bound prunes a structure whose most frugal option (the most layers
    offloaded) does not fit; the host's memory grows with offloading, so it bounds nothing.
    Llama 3 8B on 8 H100 at tp = pp = 1, mbs 1, seq 8192 does not fit the GPU without
    offloading; with 28 of its 32 layers offloaded (7/8, the most the search tries) the pinned
    buffers exceed the host's 250 GB / 8 per GPU, with fewer they need not."""
    path = _cluster_file(tmp_path, "gpu: h100\nnum_gpus: 8\nhost_memory_gb_per_node: 250\n")
    found = parplan_gen.plan(
        "llama-3-8b", path, global_batch=64, seq_len=8192, backend="megatron",
        pins={"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "distributed_optimizer": True,
              "recompute": "none"},
        search={"activation_offload": "search"},
    )  # fmt: skip
    doc = found.document
    assert doc.feasible
    chosen = doc.chosen
    assert 0 < chosen.plan.offload_layers < 28
    assert chosen.memory.host_offload <= 250 * GB / 8


def test_the_text_view_sets_the_buffers_beside_the_hosts_memory(cli) -> None:
    run = cli(
        "check", "llama-3-70b", "--gpus", "64", "--gpu", "gb200", "--global-batch", "256",
        "--seq-len", "8192", "--precision", "fp8", "--tp", "1", "--pp", "1", "--mbs", "2",
        "--zero", "3", "--offload-layers", "50", "--backend", "megatron",
    )  # fmt: skip
    assert run.code == 0, run.err
    [line] = [x for x in run.out.splitlines() if x.startswith("  host ")]
    # 960 GB / 4 GPUs = 240e9 bytes = 223.52 GiB
    assert line.endswith("pinned for offloaded activations, of 223.52 GiB host memory per GPU "
                         "(not in the total)")  # fmt: skip


def test_nothing_fits_says_the_host_memory_is_short(cli, tmp_path: Path) -> None:
    """8 GB of host memory per 8-GPU node, 1e9 bytes = 0.9 GiB a GPU: no offload fits the host,
    and without offloading Llama 3 8B at tp = pp = 1, seq 8192 does not fit the GPU."""
    path = _cluster_file(tmp_path, "gpu: h100\nnum_gpus: 8\nhost_memory_gb_per_node: 8\n")
    run = cli(
        "plan", "llama-3-8b", "--cluster", str(path), "--tp", "1", "--pp", "1", "--cp", "1",
        "--mbs", "1", "--global-batch", "64", "--seq-len", "8192", "--distributed-optimizer",
        "--recompute", "none", "--activation-offload", "search", "--backend", "megatron",
    )  # fmt: skip
    assert run.code == 3
    assert "GiB of pinned host memory per GPU, of the host's 0.9 GiB)" in run.err
