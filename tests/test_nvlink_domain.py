"""The catalog's newer GPUs (issue 15 item 2) and NVLink domains larger than a node.

Catalog figures are worked here from the datasheet tables the YAML cites, not read back from the
YAML: vendors print sparse tensor figures (2x dense) and rack or board totals, so each expected
value is the printed figure divided as the datasheet's own footnotes say. An NVLink domain (the
GPUs on one NVLink fabric) may exceed a node: on GB200 NVL72, 18 trays of 4 GPUs share 72-GPU
NVLink, and the link formulas of rules/cost/time.yaml price a group of consecutive ranks over
NVLink when its size divides the domain.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.cost.catalog import load_catalog
from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.hardware import Cluster, cluster_from_flags, load_cluster
from parplan_gen.cost.layout import build_layout
from parplan_gen.inputs.errors import InputError, SourceRef, UsageError
from parplan_gen.models.presets import load_preset
from parplan_gen.planning.constraints import Constraints
from parplan_gen.rules.ruleset import RuleSet, load_rules

T, P, GIB = 1e12, 1e15, 2**30


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


# ---- catalog figures, worked from the datasheets -------------------------------------------------

# (GPU, memory GiB, BF16 dense FLOP/s, FP8 dense FLOP/s, HBM B/s, NVLink/xGMI/PCIe B/s one way)
DATASHEETS = [
    # GB200 NVL72 table: BF16 360 PF and FP8 720 PF sparse per 72 GPUs, 372 GB per superchip of
    # 2 GPUs, 576 TB/s per 72 GPUs, NVLink 1.8 TB/s per GPU both directions.
    ("gb200", 372 / 2, 360 * P / 72 / 2, 720 * P / 72 / 2, 576 * T / 72, 1.8 * T / 2),
    # GB300 NVL72: 288 GB per GPU, 360 PF FP8 dense and 576 TB/s per 72 GPUs; BF16 2.5 PF dense.
    ("gb300", 288, 2.5 * P, 360 * P / 72, 576 * T / 72, 1.8 * T / 2),
    # HGX B300: BF16 36 PF and FP8 72 PF sparse per 8 GPUs, 288 GB and 8 TB/s per GPU.
    ("b300", 288, 36 * P / 8 / 2, 72 * P / 8 / 2, 8 * T, 1.8 * T / 2),
    # H100 datasheet, H100 NVL column: 94 GB, 1,671 / 3,341 TFLOPS sparse, 3.9 TB/s, PCIe Gen5
    # 128 GB/s both directions (the NVLink bridge joins pairs only).
    ("h100-nvl", 94, 1671 * T / 2, 3341 * T / 2, 3.9 * T, 128e9 / 2),
    # H800 = H100 SXM silicon (3,958 FP8 / 1,979 BF16 sparse) with NVLink cut to 400 GB/s; BF16
    # as the h100 entry, 989 (the Hopper whitepaper's 989.4, not 1,979 / 2 = 989.5).
    ("h800", 80, 989 * T, 3958 * T / 2, 3.35 * T, 400e9 / 2),
    # H20: 96 GB HBM3, 4.0 TB/s, FP16 148 dense, INT8 (= FP8 on Hopper) 296 dense, NVLink 900.
    ("h20", 96, 148 * T, 296 * T, 4.0 * T, 900e9 / 2),
    # A800 = A100 80GB SXM (312 dense, 2,039 GB/s, no FP8) with NVLink cut to 400 GB/s.
    ("a800", 80, 312 * T, None, 2039e9, 400e9 / 2),
    # MI325X: 256 GB, 1,307.4 / 2,614.9 dense, 6 TB/s, 7 xGMI links x 128 GB/s both directions.
    ("mi325x", 256, 1307.4 * T, 2614.9 * T, 6 * T, 7 * 128e9 / 2),
    # MI355X: 288 GB, 2,516.6 / 5,033.2 dense, 8 TB/s, 7 Infinity Fabric links x 153.6 GB/s.
    ("mi355x", 288, 2516.6 * T, 5033.2 * T, 8 * T, 7 * 153.6e9 / 2),
]


@pytest.mark.parametrize(("name", "gib", "bf16", "fp8", "hbm", "link"), DATASHEETS)
def test_new_catalog_gpus_load_with_their_datasheet_figures(
    name: str, gib: float, bf16: float, fp8: float | None, hbm: float, link: float
) -> None:
    gpu = load_catalog().gpu(name)
    assert gpu.memory_bytes == round(gib * GIB)
    assert gpu.bf16_flops == pytest.approx(bf16, rel=1e-12)
    assert gpu.fp16_flops == gpu.bf16_flops  # every datasheet above prints FP16 = BF16
    assert gpu.fp8_flops == (None if fp8 is None else pytest.approx(fp8, rel=1e-12))
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(hbm, rel=1e-12)
    assert gpu.intra_node_bytes_per_s == pytest.approx(link, rel=1e-12)


def test_nvl72_reference_systems_are_trays_of_four_on_a_72_gpu_nvlink_domain() -> None:
    catalog = load_catalog()
    for name, network in (("gb200", "ndr"), ("gb300", "xdr")):
        ref = catalog.gpu(name).reference_node
        # 36 superchips = 72 GPUs on 18 compute trays of 4, one compute-fabric NIC per GPU
        assert (ref.gpus_per_node, ref.nvlink_domain, ref.nics_per_node) == (4, 72, 4)
        assert ref.network == network
    assert catalog.gpu("h100").reference_node.nvlink_domain is None  # the node is the domain
    assert catalog.gpu("mi355x").architecture == "cdna4"


# ---- NVLink domains in the cost formulas --------------------------------------------------------


def link_env(rules: RuleSet, cluster: Cluster, **sizes: int) -> dict[str, Any]:
    layout = build_layout(cluster.num_gpus, mbs=1, global_batch=1152, seq_len=8192, **sizes)
    return CostModel(rules).layout_env(load_preset("llama-3-405b"), cluster, layout)


def named(rules: RuleSet, formula: str, env: dict[str, Any]) -> float:
    compiled = rules.library.compile(
        formula, SourceRef("test_nvlink_domain.py"), "estimate", "number"
    )
    return float(compiled.evaluate(env))


NVLINK5 = 1.8e12 / 2  # B/s per GPU, one direction
NDR_PORT = 400e9 / 8  # B/s, one direction; one port per GPU on GB200 trays
# The *_bandwidth formulas are bus bandwidths: on an unprofiled cluster, the link at
# rules/cost/efficiency.yaml's link_efficiency.


def test_gb200_nvl72_prices_a_64_gpu_group_over_nvlink(rules: RuleSet) -> None:
    cluster = cluster_from_flags(64, "gb200")
    assert (cluster.gpus_per_node, cluster.num_nodes, cluster.nvlink_domain) == (4, 16, 72)
    env = link_env(rules, cluster, tp=4, cp=2, dp=8)  # tp*cp*dp = 64 GPUs of one rack
    link = named(rules, "link_efficiency", env)
    assert env["cluster.nvlink_domain"] == 64  # the job is smaller than the domain
    for formula in ("tp_bandwidth", "cp_bandwidth", "dp_bandwidth"):
        assert named(rules, formula, env) == pytest.approx(NVLINK5 * link), formula
    assert named(rules, "dp_nodes", env) == 1  # NCCL's ring takes no inter-node step
    # The same 64 GPUs as 16 separate 4-GPU nodes: the 8-rank dp group (32-rank span) crosses
    # nodes; it has 4 / (tp*cp) -> clamped to 1 rank per node, so one NIC's bandwidth.
    trays = cluster_from_flags(64, "gb200", nvlink_domain=4)
    env = link_env(rules, trays, tp=4, cp=2, dp=8)
    assert named(rules, "tp_bandwidth", env) == pytest.approx(NVLINK5 * link)
    assert named(rules, "cp_bandwidth", env) == pytest.approx(NDR_PORT * link)
    assert named(rules, "dp_bandwidth", env) == pytest.approx(NDR_PORT * link)


def test_groups_that_do_not_divide_the_domain_cross_racks(rules: RuleSet) -> None:
    cluster = cluster_from_flags(144, "gb200")  # two NVL72 racks
    env = link_env(rules, cluster, tp=8, dp=18)
    link = named(rules, "link_efficiency", env)
    # 72 % 8 == 0: every tp group in a rack
    assert named(rules, "tp_bandwidth", env) == pytest.approx(NVLINK5 * link)
    # the dp group spans 144 ranks: 72 / tp = 9 of its ranks per rack, 9 NICs, under NVLink's 900
    assert min(NVLINK5, 9 * NDR_PORT) == 450e9
    assert named(rules, "dp_bandwidth", env) == pytest.approx(450e9 * link)
    env = link_env(rules, cluster, tp=16, dp=9)
    # ranks 64-79 sit in two racks
    assert named(rules, "tp_bandwidth", env) == pytest.approx(NDR_PORT * link)


def test_megatron_allows_tp_up_to_the_nvlink_domain(rules: RuleSet) -> None:
    env = link_env(rules, cluster_from_flags(64, "gb200"), tp=8, dp=8)
    assert "parallel.tp_within_node" not in [
        v.rule_id for v in Constraints(rules).check(env, "layout")
    ]
    env = link_env(rules, cluster_from_flags(64, "gb200", nvlink_domain=4), tp=8, dp=8)
    assert "parallel.tp_within_node" in [v.rule_id for v in Constraints(rules).check(env, "layout")]


# ---- the cluster file and the flags -------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def test_cluster_file_with_an_nvlink_domain(tmp_path: Path) -> None:
    # 16 trays per rack in use: the job's domain is 64 GPUs, two racks
    path = write(tmp_path, "gpu: gb200\nnodes: 32\nnvlink_domain: 64\n")
    cluster = load_cluster(path)
    assert (cluster.num_gpus, cluster.gpus_per_node, cluster.nvlink_domain) == (128, 4, 64)
    assert cluster.procs_per_node == 4  # what torchrun --nproc-per-node gets
    # a DGX H100 file without the key: the node is the domain
    assert load_cluster(write(tmp_path, "gpu: h100\nnodes: 2\n")).nvlink_domain == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "gpu: gb200\nnum_gpus: 72\ngpus_per_node: 4\nnvlink_domain: 70\n",
            "4:1: nvlink_domain: nvlink_domain(70) is not a multiple of gpus_per_node(4)",
        ),
        (
            "gpu: h100-pcie\nnodes: 2\nnvlink_domain: 16\n",
            "3:1: nvlink_domain: nvlink_domain(16) spans nodes, which needs NVLink "
            "(this GPU links over pcie)",
        ),
        ("gpu: gb200\nnodes: 2\nnvlink_domain: 0\n", "3:1: nvlink_domain: Input should be greater"),
        (
            "gpu: gb200\nnodes: 2\ngpus_per_node: 8\nnvlink_domain: 12\n",
            "4:1: nvlink_domain: nvlink_domain(12) is not a multiple of gpus_per_node(8)",
        ),
    ],
)
def test_a_bad_nvlink_domain_is_refused_at_its_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_cluster(path)
    assert str(info.value).startswith(f"{path}:{message}")


def test_nvlink_domain_flag() -> None:
    assert cluster_from_flags(128, "gb200", nvlink_domain=64).nvlink_domain == 64
    # nodes of 8 on a GB200 (not its trays of 4): NVL72's 72 GPUs are 9 of them
    assert cluster_from_flags(144, "gb200", gpus_per_node=8).nvlink_domain == 72
    with pytest.raises(UsageError, match=r"--nvlink-domain/--gpus-per-node: nvlink_domain\(6\)"):
        cluster_from_flags(64, "gb200", nvlink_domain=6)


def test_plan_md_names_the_nvlink_domain(rules: RuleSet) -> None:
    from parplan_gen.api import plan
    from parplan_gen.render.plan_files import render_plan

    doc = plan("llama-3-8b", {"gpus": 72, "gpu": "gb200"}, global_batch=576, seq_len=4096, top=1,
               rules=rules).document  # fmt: skip
    assert "18 node(s) x 4 GPUs, NVLink domains of 72 GPUs." in render_plan(doc)["plan.md"]
    assert doc.cluster.nvlink_domain == 72
