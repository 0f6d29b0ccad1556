"""The hardware catalog (GPUs, networks) and the cluster model: flags, files and their errors."""

from __future__ import annotations

import json
import math
import textwrap
from importlib import resources
from pathlib import Path

import pytest
from pydantic import ValidationError

from parplan_gen.cost import catalog as catalog_module
from parplan_gen.cost import data_checks, hardware
from parplan_gen.cost.budget_figures import BudgetInputs
from parplan_gen.cost.catalog import (
    GPU_FIGURE_KEYS,
    LINK_FIGURE_KEYS,
    NETWORK_FIGURE_KEYS,
    gpu,
    load_catalog,
)
from parplan_gen.cost.hardware import Cluster, cluster_from_flags, load_cluster, load_cluster_file
from parplan_gen.cost.launch_site import LaunchSettings, SlurmSpec
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import InputError, UsageError
from parplan_gen.inputs.source import parse_document
from parplan_gen.inputs.validation import validate

ROOT = Path(__file__).resolve().parent.parent
REQUIRED_GPUS = [
    "a100-40gb",
    "a100-80gb",
    "h100-sxm-80gb",
    "h100-pcie",
    "h200",
    "b200",
    "mi300x",
    "v100-32gb",
    "l40s",
]


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    """Write `text` (dedented) to a file in tmp_path and return its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def data_doc(filename: str):
    text = resources.files("parplan_gen").joinpath("data").joinpath(filename).read_text("utf-8")
    return parse_document(text, filename)


# --- catalog -------------------------------------------------------------------------------


def test_catalog_has_every_required_gpu():
    assert set(REQUIRED_GPUS) <= set(load_catalog().gpus)


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_every_gpu_loads_with_positive_figures(name):
    g = gpu(name)
    assert g.name == name
    assert g.memory_bytes > 0
    assert g.memory_bandwidth_bytes_per_s > 0
    assert g.intra_node_bytes_per_s > 0
    peaks = [g.bf16_flops, g.fp16_flops, g.fp8_flops]
    assert any(p is not None for p in peaks)
    assert all(p is None or (p > 0 and math.isfinite(p)) for p in peaks)
    assert g.reference_node.network in load_catalog().networks


def test_catalog_is_cached():
    assert load_catalog() is load_catalog()


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("h100", "h100-sxm-80gb"),
        ("H100", "h100-sxm-80gb"),
        (" H100_SXM ", "h100-sxm-80gb"),
        ("H100-SXM-80GB", "h100-sxm-80gb"),
        ("a100", "a100-80gb"),
        ("v100", "v100-32gb"),
        ("MI300X", "mi300x"),
        ("h200-sxm-141gb", "h200"),
    ],
)
def test_aliases_resolve_case_insensitively(alias, canonical):
    assert gpu(alias) is load_catalog().gpus[canonical]


def test_unknown_gpu_lists_known_names_and_suggests():
    with pytest.raises(InputError) as info:
        gpu("h10")
    message = str(info.value)
    assert message.startswith("unknown GPU 'h10'; did you mean 'h100'? (known: a100-40gb, ")
    for name in REQUIRED_GPUS:
        assert name in message


def test_unknown_network_suggests():
    with pytest.raises(InputError, match=r"unknown network 'ndr2'; did you mean 'ndr'\?"):
        load_catalog().network("ndr2")


def test_si_conversions_of_datasheet_figures():
    h100 = gpu("h100-sxm-80gb")
    assert h100.bf16_flops == 9.89e14  # 989 TFLOP/s dense
    assert h100.fp16_flops == 9.89e14
    assert h100.fp8_flops == 1.979e15
    assert h100.memory_bandwidth_bytes_per_s == 3.35e12
    assert h100.intra_node_bytes_per_s == 4.5e11  # 900 GB/s bidirectional -> 450 GB/s each way
    assert h100.nvswitch is True
    a100 = gpu("a100-80gb")
    assert a100.memory_bytes == 80 * 2**30 == 85_899_345_920
    assert a100.memory_bandwidth_bytes_per_s == 2.039e12
    assert a100.bf16_flops == 3.12e14
    assert a100.fp8_flops is None
    assert gpu("a100-40gb").memory_bandwidth_bytes_per_s == 1.555e12
    assert gpu("mi300x").bf16_flops == 1.3074e15
    assert gpu("b200").bf16_flops == 2.25e15
    assert gpu("l40s").intra_node_bytes_per_s == 3.2e10  # PCIe Gen4 x16, 64 GB/s bidirectional


def test_v100_has_no_bf16_or_fp8():
    v100 = gpu("v100-32gb")
    assert v100.bf16_flops is None
    assert v100.fp8_flops is None
    assert v100.peak_flops("fp16") == 1.25e14
    with pytest.raises(
        InputError, match=r"v100-32gb has no bf16 tensor-core peak \(it has: fp16\)"
    ):
        v100.peak_flops("bf16")


def test_networks_in_si():
    catalog = load_catalog()
    expected_gbps = {
        "edr": 100,
        "hdr": 200,
        "ndr": 400,
        "xdr": 800,
        "roce-400": 400,
        "roce-200": 200,
        "ethernet-100": 100,
        "ethernet-25": 25,
    }
    for name, gbps in expected_gbps.items():
        assert catalog.networks[name].port_bytes_per_s == gbps * 1e9 / 8
        assert catalog.networks[name].latency_s > 0
    assert catalog.networks["hdr"].port_bytes_per_s == 2.5e10
    assert catalog.network("IB-NDR") is catalog.networks["ndr"]
    assert catalog.link_latency_s == {"nvlink": 3.4e-6, "xgmi": 3.4e-6, "pcie": 5.7e-6}


def test_catalog_yaml_names_a_source_for_every_figure():
    gdoc, ndoc = data_doc("gpus.yaml"), data_doc("networks.yaml")
    sections = [(gdoc.data["gpus"], GPU_FIGURE_KEYS), (ndoc.data["networks"], NETWORK_FIGURE_KEYS)]
    sections.append((ndoc.data["intra_node_links"], LINK_FIGURE_KEYS))
    for entries, keys in sections:
        for name, entry in entries.items():
            # a vendor's measured maximum GEMM rates, where it publishes them, are figures too
            given = (*keys, *(k for k in ("max_achievable_tflops",) if k in entry))
            for key in given:
                assert key in entry, f"{name}: figure {key} missing"
                assert entry["sources"].get(key, "").strip(), f"{name}: {key} has no source"
            assert set(entry["sources"]) <= set(given), name
            assert set(entry.get("unverified", [])) <= set(given), name


def test_catalog_loader_refuses_a_figure_without_source():
    doc = parse_document(
        textwrap.dedent(
            """
            display_name: X
            latency_us: 1.0
            sources: {}
            """
        ),
        "links.yaml",
    )
    entry = catalog_module.CatalogLink.model_validate(doc.data)
    with pytest.raises(InputError) as info:
        data_checks.check_sources(doc, (), entry, LINK_FIGURE_KEYS)
    assert str(info.value) == "links.yaml:4:1: sources: figure 'latency_us' names no source"


def test_amd_max_achievable_flops_are_the_vendor_table_over_the_dense_peaks():
    """AMD ROCm blog 'Measuring Max-Achievable FLOPs - Part 2', Table 1 (MI300X: FP16 654, BF16
    708, FP8 1273 TFLOP/s; MI325X: 794 / 843 / 1519) over the datasheet dense peaks (1,307.4
    16-bit, 2,614.9 FP8); NVIDIA publishes no such figure."""
    catalog = load_catalog()
    mi300x, mi325x = catalog.gpu("mi300x"), catalog.gpu("mi325x")
    assert mi300x.gemm_max_fraction("bf16") == pytest.approx(708 / 1307.4)
    assert mi300x.gemm_max_fraction("fp16") == pytest.approx(654 / 1307.4)
    assert mi300x.gemm_max_fraction("fp8") == pytest.approx(1273 / 2614.9)
    assert mi325x.gemm_max_fraction("bf16") == pytest.approx(843 / 1307.4)
    assert mi325x.gemm_max_fraction("fp8") == pytest.approx(1519 / 2614.9)
    for name in ("h100", "b200", "a100-80gb", "mi355x"):
        assert catalog.gpu(name).gemm_max_fraction("bf16") == 0.0, name
    # plan.json keeps its keys of before for a GPU without them, and carries them where given
    assert "bf16_max_fraction" not in catalog.gpu("h100").model_dump(mode="json")
    assert mi300x.model_dump(mode="json")["fp8_max_fraction"] == pytest.approx(1273 / 2614.9)


@pytest.mark.parametrize(
    ("figures", "message"),
    [
        ("{bf16: 1400}", "bf16 (1400) exceeds the dense bf16 peak (1307.4)"),
        ("{fp8: 900}", "fp8 (900) exceeds the dense fp8 peak (none)"),
    ],
)
def test_a_max_achievable_rate_above_the_peak_is_refused_with_its_place(figures, message):
    entry = data_doc("gpus.yaml").data["gpus"]["mi300x" if "bf16" in figures else "a100-80gb"]
    text = "\n".join(
        f"{key}: {figures if key == 'max_achievable_tflops' else json.dumps(value)}"
        for key, value in {**entry, "max_achievable_tflops": None}.items()
    )
    doc = parse_document(text, "gpus.yaml")
    with pytest.raises(InputError) as info:
        validate(catalog_module.CatalogGPU, doc.data, doc)
    line = text.splitlines().index(f"max_achievable_tflops: {figures}") + 1
    assert str(info.value) == f"gpus.yaml:{line}:1: max_achievable_tflops: {message}"


def test_every_number_of_the_catalog_has_a_physical_range_with_a_source():
    ranges = load_catalog().ranges
    assert set(ranges) == {
        *catalog_module.GPU_RANGED_KEYS,
        *catalog_module.NETWORK_RANGED_KEYS,
        *catalog_module.NODE_RANGED_KEYS,
    }
    assert ranges["memory_gib"] == catalog_module.Bounds(
        1, 4096, "parplan_gen/data/gpus.yaml ranges.memory_gib"
    )
    for filename in ("gpus.yaml", "networks.yaml"):
        for key, entry in data_doc(filename).data["ranges"].items():
            assert 0 < entry["min"] < entry["max"] and entry["source"].strip(), key


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "ranges:\n  latency_us: {min: 0.1, max: 10, source: x}\n",
            "n.yaml:1:1: ranges: ranges must give exactly gbps_per_port, gbps_per_gpu, "
            "latency_us (missing: gbps_per_gpu, gbps_per_port; unknown: -)",
        ),
        (
            "ranges:\n  gbps_per_port: {min: 1, max: 9, source: x}\n"
            "  gbps_per_gpu: {min: 1, max: 9, source: x}\n"
            "  latency_us: {min: 10, max: 1, source: x}\n",
            "n.yaml:4:3: ranges.latency_us: min(10) > max(1)",
        ),
    ],
)
def test_catalog_ranges_name_every_figure_once_low_to_high(text, message):
    doc = parse_document(text, "n.yaml")
    ranges = {k: data_checks.FigureRange.model_validate(v) for k, v in doc.data["ranges"].items()}
    with pytest.raises(InputError) as info:
        data_checks.read_ranges(doc, ranges, catalog_module.NETWORK_RANGED_KEYS)
    assert str(info.value) == message


# --- flag form -----------------------------------------------------------------------------


def test_flags_default_inter_node_is_the_reference_system():
    cluster = cluster_from_flags(16, "h100")
    assert cluster.name == "16xh100-sxm-80gb"
    assert (cluster.num_gpus, cluster.gpus_per_node, cluster.num_nodes) == (16, 8, 2)
    assert cluster.multi_node
    assert cluster.network == "ndr"
    assert cluster.inter_node_bytes_per_s == 5e10  # 8 NDR ports per 8 GPUs
    assert cluster.inter_node_latency_s == 1.4e-5
    assert cluster.intra_node_bytes_per_s == 4.5e11
    assert cluster.intra_node_latency_s == 3.4e-6
    assert cluster.nvswitch


def test_flags_reference_share_does_not_depend_on_gpus_per_node():
    # DGX-1: 4 EDR ports for 8 GPUs = 50 Gb/s per GPU, whatever --gpus-per-node says
    assert cluster_from_flags(8, "v100", gpus_per_node=4).inter_node_bytes_per_s == 6.25e9


def test_flags_inter_node_gbps_is_per_gpu():
    cluster = cluster_from_flags(32, "a100-40gb", inter_node_gbps=200)
    assert cluster.inter_node_bytes_per_s == 2.5e10
    assert cluster.network is None
    assert cluster.inter_node_latency_s == 1.4e-5  # the reference network's latency


def test_flags_partial_single_node():
    cluster = cluster_from_flags(4, "a100", gpus_per_node=8)
    assert (cluster.num_nodes, cluster.procs_per_node, cluster.multi_node) == (1, 4, False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (12, "h100"),
            "--gpus/--gpus-per-node: num_gpus(12) is not a multiple of gpus_per_node(8)",
        ),
        ((0, "h100"), "--gpus: expected a whole number from 1 to 1048576, got 0"),
        ((8, "h100", -8), "--gpus-per-node: expected a whole number from 1 to 1048576, got -8"),
        ((2**21, "h100"), "--gpus: expected a whole number from 1 to 1048576, got 2097152"),
        ((8, "h100", 8, float("nan")), "--inter-node-gbps: expected a number, got nan"),
        (
            (8, "h100", 8, 0),
            "--inter-node-gbps: 0 is outside the physical range 0.1 to 16000 "
            "(parplan_gen/data/networks.yaml ranges.gbps_per_gpu)",
        ),
        (
            (16, "h100", 8, 1e308),
            "--inter-node-gbps: 1e+308 is outside the physical range 0.1 to 16000 "
            "(parplan_gen/data/networks.yaml ranges.gbps_per_gpu)",
        ),
        (
            (16, "h100", 8, 1e-320),
            "--inter-node-gbps: 1e-320 is outside the physical range 0.1 to 16000 "
            "(parplan_gen/data/networks.yaml ranges.gbps_per_gpu)",
        ),
    ],
)
def test_flag_errors(args, message):
    with pytest.raises(UsageError) as info:
        cluster_from_flags(*args)
    assert str(info.value) == message


def test_flag_unknown_gpu_is_input_error():
    with pytest.raises(InputError, match="unknown GPU 'h1000'"):
        cluster_from_flags(8, "h1000")


# --- the Cluster value object --------------------------------------------------------------


def test_cluster_invariant_is_checked_when_built():
    base = cluster_from_flags(8, "h100").model_dump()
    with pytest.raises(
        ValidationError, match=r"num_gpus\(12\) is not a multiple of gpus_per_node\(8\)"
    ):
        Cluster.model_validate({**base, "num_gpus": 12})


def test_cluster_round_trips_through_plain_data():
    cluster = load_cluster(ROOT / "examples" / "cluster_h100_4nodes.yaml")
    assert Cluster.model_validate(cluster.model_dump()) == cluster


def test_cluster_is_frozen():
    cluster = cluster_from_flags(8, "h100")
    with pytest.raises(ValidationError):
        cluster.num_gpus = 16


# --- cluster files -------------------------------------------------------------------------


def test_example_cluster_file():
    setup = load_cluster_file(ROOT / "examples" / "cluster_h100_4nodes.yaml")
    cluster = setup.cluster
    assert cluster.name == "h100-4nodes"
    assert cluster.gpu == gpu("h100")
    assert (cluster.num_gpus, cluster.num_nodes) == (32, 4)
    assert cluster.network == "ndr"
    assert cluster.inter_node_bytes_per_s == 5e10
    # the nccl: section is the launch site's, not the hardware's
    assert setup.launch is not None and setup.launch.ib_hcas[:2] == ("mlx5_0", "mlx5_3")
    assert setup.launch.socket_ifname == "enp"
    assert setup.budget_inputs is None


def test_a_cluster_files_budget_figures_are_the_budget_inputs(tmp_path):
    text = "gpu: h100\nnodes: 1\ngpu_hour_price: 2.5\nstorage_gb_per_s: 50\n"
    setup = load_cluster_file(write(tmp_path, text))
    assert setup.budget_inputs == BudgetInputs(gpu_hour_price=2.5, storage_gb_per_s=50.0)
    assert setup.launch is None
    assert setup.cluster == load_cluster(write(tmp_path, "gpu: h100\nnodes: 1\n"))


def test_minimal_file_takes_defaults(tmp_path):
    cluster = load_cluster(write(tmp_path, "gpu: b200\nnum_gpus: 64\n", "my-b200s.yaml"))
    assert cluster.name == "my-b200s"
    assert (cluster.gpus_per_node, cluster.num_nodes, cluster.network) == (8, 8, "ndr")


def test_overrides_change_only_the_named_figures(tmp_path):
    path = write(
        tmp_path,
        """
        gpu: h100
        nodes: 2
        overrides:
          memory_gib: 96
          bf16_dense_tflops: 800
          fp8_dense_tflops: null
        """,
    )
    g = load_cluster(path).gpu
    assert g.memory_bytes == 96 * GIB
    assert g.bf16_flops == 8e14
    assert g.fp16_flops == 9.89e14  # not overridden
    assert g.fp8_flops is None
    assert g.name == "h100-sxm-80gb"


def test_inter_node_forms(tmp_path):
    by_network = "gpu: h100\nnodes: 2\ninter_node: {network: roce-400, nics_per_node: 4}\n"
    cluster = load_cluster(write(tmp_path, by_network))
    assert cluster.network == "roce-400"
    assert cluster.inter_node_bytes_per_s == 5e10 * 4 / 8
    default_nics = "gpu: h100\nnodes: 2\ninter_node: {network: XDR}\n"
    assert load_cluster(write(tmp_path, default_nics)).inter_node_bytes_per_s == 1e11
    by_gbps = "gpu: h100\nnodes: 2\ninter_node: {gbps_per_gpu: 100, latency_us: 20}\n"
    cluster = load_cluster(write(tmp_path, by_gbps))
    assert (cluster.network, cluster.inter_node_bytes_per_s) == (None, 1.25e10)
    assert cluster.inter_node_latency_s == 2e-5


def test_num_gpus_and_nodes_may_both_be_given_when_they_agree(tmp_path):
    cluster = load_cluster(write(tmp_path, "gpu: h100\nnum_gpus: 16\nnodes: 2\n"))
    assert cluster.num_nodes == 2


def test_json_cluster_file(tmp_path):
    path = write(tmp_path, '{"gpu": "mi300x", "num_gpus": 8}', "c.json")
    cluster = load_cluster(path)
    assert cluster.gpu.vendor == "amd" and not cluster.nvswitch
    assert cluster.intra_node_latency_s == 3.4e-6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "gpu: h100\nnum_gpus: 8\ngpus_per_nod: 8\n",
            "3:1: gpus_per_nod: unknown key 'gpus_per_nod'; did you mean 'gpus_per_node'? "
            "(allowed: name, gpu, overrides, num_gpus, nodes, gpus_per_node, nvlink_domain, inter_node, nccl, node_names, cpus_per_node, slurm, gpu_hour_price, mtbf_gpu_hours, storage_gb_per_s, host_memory_gb_per_node, measured)",
        ),
        ("num_gpus: 8\n", "1:1: gpu: missing required key 'gpu'"),
        ("gpu: h100\nnum_gpus: '8'\n", "2:1: num_gpus: Input should be a valid integer (got '8')"),
        ("gpu: h100\nnum_gpus: 8.0\n", "2:1: num_gpus: Input should be a valid integer (got 8.0)"),
        (
            "gpu: h100\nnum_gpus: true\n",
            "2:1: num_gpus: Input should be a valid integer (got True)",
        ),
        ("gpu: h100\nnum_gpus: 0\n", "2:1: num_gpus: Input should be greater than 0 (got 0)"),
        (
            "gpu: h100\nnodes: 2\ngpus_per_node: -8\n",
            "3:1: gpus_per_node: Input should be greater than 0 (got -8)",
        ),
        (
            "gpu: h100\nnodes: 2\ninter_node:\n  gbps_per_gpu: .nan\n",
            "4:3: inter_node.gbps_per_gpu: Input should be a finite number (got nan)",
        ),
        ("gpu: 100\nnum_gpus: 8\n", "1:1: gpu: Input should be a valid string (got 100)"),
        (
            "gpu: h10\nnum_gpus: 8\n",
            "1:1: gpu: unknown GPU 'h10'; did you mean 'h100'? (known: a100-40gb, ",
        ),
        (
            "gpu: h100\nnum_gpus: 12\n",
            "2:1: num_gpus: num_gpus(12) is not a multiple of gpus_per_node(8)",
        ),
        (
            "gpu: h100\nnum_gpus: 24\nnodes: 2\n",
            "2:1: num_gpus: num_gpus(24) != nodes(2) * gpus_per_node(8)",
        ),
        ("gpu: h100\n", "1:1: give num_gpus or nodes (nodes of gpus_per_node GPUs)"),
        (
            "gpu: h100\nnodes: 1\noverrides:\n  memroy_gib: 96\n",
            "4:3: overrides.memroy_gib: unknown key 'memroy_gib'; did you mean 'memory_gib'?",
        ),
        (
            "gpu: h100\nnodes: 1\noverrides:\n  memory_gib: 96GB\n",
            "4:3: overrides.memory_gib: Input should be a valid number (got '96GB')",
        ),
        (
            "gpu: h100\nnodes: 1\noverrides:\n  intra_node_link: nvswitch\n",
            "4:3: overrides.intra_node_link: Input should be 'nvlink', 'xgmi' or 'pcie' "
            "(got 'nvswitch')",
        ),
        (
            "gpu: h100\nnodes: 1\noverrides: [1]\n",
            "3:1: overrides: Input should be a valid dictionary",
        ),
        (
            "gpu: h100\nnodes: 1\ninter_node: {network: ndr, gbps_per_gpu: 400}\n",
            "3:1: inter_node: give either network (with nics_per_node) or gbps_per_gpu",
        ),
        (
            "gpu: h100\nnodes: 1\ninter_node: {}\n",
            "3:1: inter_node: give either network (with nics_per_node) or gbps_per_gpu",
        ),
        (
            "gpu: h100\nnodes: 1\ninter_node:\n  network: ndr2\n",
            "4:3: inter_node.network: unknown network 'ndr2'; did you mean 'ndr'?",
        ),
        (
            "gpu: h100\nnodes: 1\ninter_node:\n  gbps_per_gpu: 400\n  nics_per_node: 8\n",
            "5:3: inter_node.nics_per_node: nics_per_node goes with network, not with gbps_per_gpu",
        ),
        (
            "gpu: h100\nnodes: 1\ninter_node:\n  network: ndr\n  nics_per_node: 0\n",
            "5:3: inter_node.nics_per_node: Input should be greater than 0 (got 0)",
        ),
        (
            "gpu: h100\nnodes: 1\nnccl:\n  socket_ifname: eth 0\n",
            "4:3: nccl.socket_ifname: String should match pattern",
        ),
        (
            "gpu: h100\nnodes: 1\nnccl:\n  ib_hcas:\n    - mlx5_0\n    - mlx5 1\n",
            "6:7: nccl.ib_hcas[1]: String should match pattern",
        ),
        (
            "gpu: h100\nnodes: 1\nnccl:\n  ib_hcas: []\n",
            "4:3: nccl.ib_hcas: List should have at least 1 item after validation, not 0",
        ),
        (
            "gpu: h100\nnodes: 1\nnccl: {ib_hca: [mlx5_0]}\n",
            "3:8: nccl.ib_hca: unknown key 'ib_hca'; did you mean 'ib_hcas'?",
        ),
        ("- gpu: h100\n", "1:1: a cluster file is a mapping of keys (got list)"),
        ("# nothing\n", "1:1: a cluster file is a mapping of keys (got an empty file)"),
        (
            "gpu: h100\nnodes: 1\noverrides:\n  memory_gib: 1.0e-12\n",
            "4:3: overrides.memory_gib: 1e-12 is outside the physical range 1 to 4096 "
            "(parplan_gen/data/gpus.yaml ranges.memory_gib)",
        ),
        (
            "gpu: h100\nnodes: 1\noverrides:\n  memory_gib: 1.0e+300\n",
            "4:3: overrides.memory_gib: 1e+300 is outside the physical range 1 to 4096 "
            "(parplan_gen/data/gpus.yaml ranges.memory_gib)",
        ),
        (
            "gpu: h100\nnodes: 1\noverrides:\n  memory_gib: 80\n  bf16_dense_tflops: 1.0e+300\n",
            "5:3: overrides.bf16_dense_tflops: 1e+300 is outside the physical range 1 to 100000 "
            "(parplan_gen/data/gpus.yaml ranges.bf16_dense_tflops)",
        ),
        (
            "gpu: h100\nnodes: 2\ninter_node:\n  gbps_per_gpu: 1.0e-300\n",
            "4:3: inter_node.gbps_per_gpu: 1e-300 is outside the physical range 0.1 to 16000 "
            "(parplan_gen/data/networks.yaml ranges.gbps_per_gpu)",
        ),
        (
            "gpu: h100\nnodes: 2\ninter_node:\n  gbps_per_gpu: 100\n  latency_us: 1.0e-320\n",
            "5:3: inter_node.latency_us: 1e-320 is outside the physical range 0.1 to 100000 "
            "(parplan_gen/data/networks.yaml ranges.latency_us)",
        ),
        (
            "gpu: h100\nnodes: 2\ninter_node:\n  network: ndr\n  nics_per_node: 1000\n",
            "5:3: inter_node.nics_per_node: nics_per_node(1000) x 400 Gb/s / gpus_per_node(8): "
            "50000.0 is outside the physical range 0.1 to 16000 "
            "(parplan_gen/data/networks.yaml ranges.gbps_per_gpu)",
        ),
        (
            "gpu: h100\nnum_gpus: 8\ngpus_per_node: 100000000000000000000000000000\n",
            "3:1: gpus_per_node: Input should be less than or equal to 1048576 "
            "(got 100000000000000000000000000000)",
        ),
    ],
)
def test_cluster_file_errors_name_file_line_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_cluster(path)
    assert str(info.value).startswith(f"{path}:{message}")


def test_missing_cluster_file(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_cluster(tmp_path / "nope.yaml")


# --- docs ----------------------------------------------------------------------------------


def test_docs_cover_every_key_and_catalog_entry():
    docs = (ROOT / "docs" / "clusters.md").read_text(encoding="utf-8")
    keys = [*hardware.ClusterFile.model_fields, *hardware.InterNodeSpec.model_fields]
    keys += [*hardware.NcclSpec.model_fields, *catalog_module.GPUFigures.model_fields]
    keys += [*SlurmSpec.model_fields, *LaunchSettings.model_fields]
    for key in keys:
        assert f"`{key}`" in docs, key
    catalog = load_catalog()
    for name in [*catalog.gpus, *catalog.networks]:
        assert f"`{name}`" in docs, name
    flags = ("--cluster", "--gpus", "--gpu", "--gpus-per-node", "--inter-node-gbps")
    for flag in (*flags, "--slurm-account", "--slurm-partition", "--slurm-time"):
        assert f"`{flag}" in docs, flag
