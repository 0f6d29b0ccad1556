"""`parplan profile`: the CPU profile runs end to end (real GEMMs, attention, a copy and gloo
collectives between two local processes) and writes a cluster file whose `measured:` section
validates; every rate is its count over its time by the published conventions (2 m n k for a
GEMM; the FlashAttention benchmark's attention count; nccl-tests' bus-bandwidth factors); the
refusals are one line; the file's keys come in a fixed order."""

from __future__ import annotations

import contextlib
import copy
import io
import math
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.cli.main import main
from parplan_gen.cost.hardware import load_cluster
from parplan_gen.cost.measured import COLLECTIVES, Measured, validate_measured
from parplan_gen.inputs.errors import InputError, UsageError
from parplan_gen.inputs.source import load_document
from parplan_gen.profile.budget import Budget, Progress
from parplan_gen.profile.gpu_name import device_gpu
from parplan_gen.profile.launch import torchrun_commands
from parplan_gen.profile.options import ProfileOptions
from parplan_gen.profile.points import Point, Results, measure_points
from parplan_gen.profile.ranks import Launch, torchrun_launch
from parplan_gen.profile.sweeps import sweeps
from parplan_gen.profile.writer import cluster_yaml

from conftest import REPO

# nccl-tests doc/PERFORMANCE.md, "Summary" (send/recv: src/sendrecv.cu, factor 1): bus bandwidth
# over algorithm bandwidth for n ranks.
NCCL_TESTS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
# What the file writes its figures to (cost/measured.py SIGNIFICANT_DIGITS = 6): a rate computed
# from the time as written agrees to within a unit of the sixth digit.
REL = 1e-5


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `parplan profile --device cpu --quick --out FILE` run, shared by the tests."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    path = tmp_path_factory.mktemp("profile") / "cluster.yaml"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["profile", "--device", "cpu", "--quick", "--out", str(path)])
    assert (code, err.getvalue()) == (0, "")
    doc = load_document(path)
    return {
        "path": path,
        "out": out.getvalue(),
        "text": path.read_text(encoding="utf-8"),
        "doc": doc,
        "measured": validate_measured(doc.data["measured"], doc),
    }


def test_the_cpu_profile_writes_a_valid_measured_section(profiled: dict[str, Any]) -> None:
    measured: Measured = profiled["measured"]
    origin = measured.provenance
    assert (origin.device, origin.quick, origin.stopped_early) == ("cpu", True, False)
    assert origin.budget_s > 0 and origin.driver is None and origin.nccl is None
    assert measured.skipped == []  # torch's CPU build multiplies fp8 too: nothing skipped
    assert profiled["out"].startswith(f"wrote {profiled['path']}: ")
    assert "For testing only" in profiled["text"].splitlines()[0]
    host = socket.gethostname()
    assert len(host) < 4 or host not in profiled["text"]  # the file names no host


def test_gemm_rates_are_2mnk_over_the_time(profiled: dict[str, Any]) -> None:
    gemm = profiled["measured"].gemm
    assert gemm.bf16 and gemm.fp8
    for point in gemm.bf16 + gemm.fp8:
        assert point.flops == 2 * point.m * point.n * point.k
        assert point.tflops > 0
        assert math.isclose(point.tflops, point.flops / point.time_s / 1e12, rel_tol=REL)


def test_attention_flops_are_the_flashattention_benchmarks(profiled: dict[str, Any]) -> None:
    attention = profiled["measured"].attention
    assert {(p.causal, p.mode) for p in attention} == {
        (False, "fwd"), (False, "fwd_bwd"), (True, "fwd"), (True, "fwd_bwd"),
    }  # fmt: skip
    for p in attention:
        # benchmarks/benchmark_flash_attention.py: 4 b s^2 h d, // 2 causal; fwd_bwd 3.5x
        forward = 4 * p.batch * p.seq_len**2 * p.heads * p.head_dim // (2 if p.causal else 1)
        assert p.flops == forward * (3.5 if p.mode == "fwd_bwd" else 1)
        assert math.isclose(p.tflops, p.flops / p.time_s / 1e12, rel_tol=REL)


def test_the_copy_counts_a_read_and_a_write(profiled: dict[str, Any]) -> None:
    copy = profiled["measured"].memory_bandwidth
    size = sweeps().levels["cpu"].memory.copy_bytes
    assert copy.bytes == 2 * size
    assert math.isclose(copy.gb_per_s, copy.bytes / copy.time_s / 1e9, rel_tol=REL)


def test_collectives_ran_on_two_gloo_ranks_with_nccl_tests_bus_factors(
    profiled: dict[str, Any],
) -> None:
    collectives = profiled["measured"].collectives
    assert collectives.backend == "gloo"
    for op in COLLECTIVES:
        points = getattr(collectives, op)
        assert points, op
        assert {(p.ranks, p.span) for p in points} == {(2, "node")}
        assert min(p.bytes for p in points) == 1024 and max(p.bytes for p in points) <= 4 << 20
        for p in points:
            assert math.isclose(p.alg_gb_per_s, p.bytes / p.time_s / 1e9, rel_tol=REL)
            expected = p.alg_gb_per_s * NCCL_TESTS_FACTOR[op](2)
            assert math.isclose(p.bus_gb_per_s, expected, rel_tol=REL), op


def test_the_file_loads_as_a_cluster_file_with_its_measured_figures(
    profiled: dict[str, Any],
) -> None:
    cluster = load_cluster(profiled["path"])
    assert (cluster.gpu.name, cluster.num_gpus, cluster.gpus_per_node) == ("h100-sxm-80gb", 2, 2)
    measured = profiled["measured"]
    assert cluster.measured is not None
    best = max(p.tflops for p in measured.gemm.bf16) * 1e12
    assert cluster.measured.gemm_fraction_bf16 == pytest.approx(best / cluster.gpu.bf16_flops)
    assert cluster.measured.gpu_name == measured.provenance.gpu_name


def _with_gemm_rates_times(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """The file's data with every BF16 GEMM `factor` times as fast (its time over `factor`)."""
    points = [
        {**p, "time_s": p["time_s"] / factor, "tflops": p["tflops"] * factor}
        for p in data["measured"]["gemm"]["bf16"]
    ]
    gemm = {**data["measured"]["gemm"], "bf16": points}
    return {**data, "measured": {**data["measured"], "gemm": gemm}}


def test_twice_the_measured_gemm_rate_halves_the_linear_layers_time(
    profiled: dict[str, Any], tmp_path: Path
) -> None:
    import parplan_gen

    layout = {"dp": 2, "tp": 1, "global_batch": 8, "seq_len": 1024, "zero_stage": 3}
    times = []
    for factor in (1.0, 2.0):
        path = tmp_path / f"x{factor:g}.yaml"
        path.write_text(
            cluster_yaml(_with_gemm_rates_times(profiled["doc"].data, factor), []),
            encoding="utf-8",
        )
        tree = parplan_gen.explain(
            "llama-3-8b", path, layout, "linear_matmul_s", backend="deepspeed"
        )
        times.append(tree.value)
    assert times[1] == pytest.approx(times[0] / 2, rel=1e-9)


def test_a_profiled_estimate_says_where_its_figures_come_from(profiled: dict[str, Any]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(
            [
                "estimate",
                "llama-3-8b",
                "--cluster",
                str(profiled["path"]),
                "--global-batch",
                "8",
                "--seq-len",
                "1024",
                "--tp",
                "1",
                "--zero",
                "3",
                "--backend",
                "deepspeed",
            ]
        )
    provenance = profiled["measured"].provenance
    figures = load_cluster(profiled["path"]).measured
    assert figures is not None
    # The CPU profile's attention rates may not saturate between its two lengths (no curve).
    what = "GEMMs, SDPA attention and collectives" if figures.attention_max_fraction else None
    what = what or "GEMMs and collectives"
    assert (
        f"priced from measured curves ({what}): parplan profile of {provenance.gpu_name}"
        in out.getvalue()
    )


def _with_saturating_attention(data: dict[str, Any]) -> dict[str, Any]:
    """The file's data with its causal forward+backward attention points replaced by points at
    512-4096 tokens on 400 x L / (L + 500) TFLOP/s (the others kept)."""
    points = [
        p for p in data["measured"]["attention"] if not (p["causal"] and p["mode"] == "fwd_bwd")
    ]
    for seq_len in (512, 1024, 2048, 4096):
        flops = 3.5 * 0.5 * 4 * seq_len**2 * 16 * 128  # the FlashAttention benchmark's count
        tflops = 400 * seq_len / (seq_len + 500)
        time_s = flops / (tflops * 1e12)
        points.append({"seq_len": seq_len, "head_dim": 128, "heads": 16, "batch": 1,
                       "causal": True, "mode": "fwd_bwd", "flops": flops,
                       "time_s": float(f"{time_s:.6g}"),
                       "tflops": float(f"{flops / float(f'{time_s:.6g}') / 1e12:.6g}")})  # fmt: skip
    return {**data, "measured": {**data["measured"], "attention": points}}


def _with_attention_rates_times(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """The file's data with every attention point `factor` times as fast."""
    points = [
        {**p, "time_s": p["time_s"] / factor, "tflops": p["tflops"] * factor}
        for p in data["measured"]["attention"]
    ]
    return {**data, "measured": {**data["measured"], "attention": points}}


def test_a_profiled_cluster_prices_sdpa_attention_from_its_own_curve(
    profiled: dict[str, Any], tmp_path: Path
) -> None:
    import parplan_gen
    from parplan_gen.cost.measured import saturating_fit

    # Causal forward+backward SDPA points on FlashAttention-2's curve shape (the CPU profile's
    # own rates are too noisy to saturate reliably): the fit goes through them as
    # E x L / (L + L_half), over the cluster GPU's BF16 peak.
    data = _with_saturating_attention(profiled["doc"].data)
    base = tmp_path / "attention.yaml"
    base.write_text(cluster_yaml(data, []), encoding="utf-8")
    measured = validate_measured(data["measured"], load_document(base))
    points = [p for p in measured.attention if p.causal and p.mode == "fwd_bwd"]
    cluster = load_cluster(base)
    peak = cluster.gpu.peak_flops("bf16")
    fit = saturating_fit([(p.seq_len, p.tflops * 1e12 / peak) for p in points])
    assert fit is not None and cluster.measured is not None
    assert (cluster.measured.attention_max_fraction, cluster.measured.attention_half_seq) == fit
    layout = {"dp": 2, "tp": 1, "global_batch": 8, "seq_len": 1024, "zero_stage": 3}
    values = []
    for factor in (1.0, 2.0):
        path = tmp_path / f"a{factor:g}.yaml"
        path.write_text(
            cluster_yaml(_with_attention_rates_times(data, factor), []), encoding="utf-8"
        )
        tree = parplan_gen.explain(
            "llama-3-8b", path, layout, "attention_efficiency", backend="deepspeed"
        )
        values.append(tree.value)
    efficiency, half = fit
    assert values[0] == pytest.approx(efficiency * 1024 / (1024 + half), rel=1e-9)
    assert values[1] == pytest.approx(2 * values[0], rel=1e-9)  # twice the rate, twice E
    # Megatron runs Transformer Engine's attention, not SDPA: the profile does not price it.
    megatron = parplan_gen.explain(
        "llama-3-8b", base, layout | {"zero_stage": 0}, "attention_efficiency",
        backend="megatron",
    )  # fmt: skip
    assert megatron.value != pytest.approx(values[0])


@pytest.mark.parametrize(
    ("efficiency", "half"), [(0.34, 530.0), (0.6, 520.0), (0.25, 0.0), (0.9, 4096.0)]
)
def test_the_saturating_fit_recovers_its_curve(efficiency: float, half: float) -> None:
    from parplan_gen.cost.measured import saturating_fit

    lengths = [512, 1024, 2048, 4096, 8192, 16384]
    fit = saturating_fit([(n, efficiency * n / (n + half)) for n in lengths])
    assert fit == pytest.approx((efficiency, half), abs=1e-9)


def test_the_saturating_fit_needs_two_lengths_and_a_ceiling() -> None:
    from parplan_gen.cost.measured import saturating_fit

    assert saturating_fit([(1024, 0.3), (1024, 0.31)]) is None  # one length
    assert saturating_fit([(512, 0.1), (1024, 0.2), (2048, 0.4)]) is None  # no ceiling seen
    # a rate that falls with the length: no half-length, the mean rate
    assert saturating_fit([(512, 0.4), (1024, 0.3)]) == pytest.approx((0.35, 0.0))


def test_the_file_keeps_its_key_order(profiled: dict[str, Any]) -> None:
    data = profiled["doc"].data
    assert list(data) == ["gpu", "num_gpus", "gpus_per_node", "measured"]
    measured = data["measured"]
    assert list(measured) == [
        "provenance", "gemm", "attention", "memory_bandwidth", "collectives", "skipped",
    ]  # fmt: skip
    assert list(measured["provenance"]) == [
        "gpu_name", "driver", "cuda", "hip", "torch", "nccl", "date", "device", "quick",
        "budget_s", "stopped_early",
    ]  # fmt: skip
    assert list(measured["gemm"]["bf16"][0]) == ["m", "n", "k", "flops", "time_s", "tflops"]
    assert list(measured["collectives"]) == ["backend", *COLLECTIVES]
    # written again from what it reads, the file is the same text: nothing depends on order
    comments = [line[2:] for line in profiled["text"].splitlines() if line.startswith("# ")]
    lines = cluster_yaml(data, [" ".join(comments)]).splitlines()
    assert [x for x in lines if x[0] != "#"] == [
        x for x in profiled["text"].splitlines() if x[0] != "#"
    ]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda m: m["gemm"]["bf16"][0].update(tflops=1e6),
            "measured.gemm.bf16[0]: tflops (1e+06) is not its count over time_s",
        ),
        (
            lambda m: m["gemm"]["bf16"].append(dict(m["gemm"]["bf16"][0])),
            "measured.gemm: two gemm.bf16 points for (",
        ),
        (
            lambda m: m["provenance"].update(hostname="x"),
            "measured.provenance.hostname: unknown key 'hostname'",
        ),
        (
            lambda m: m["collectives"]["all_reduce"][0].update(ranks=1),
            "measured.collectives.all_reduce[0].ranks: Input should be greater than or equal to 2",
        ),
        (
            lambda m: m["attention"][0].update(mode="bwd"),
            "measured.attention[0].mode: Input should be 'fwd' or 'fwd_bwd' (got 'bwd')",
        ),
    ],
)
def test_a_section_that_does_not_add_up_is_refused_at_its_key(
    profiled: dict[str, Any], edit: Any, message: str
) -> None:
    measured = copy.deepcopy(profiled["doc"].data["measured"])
    edit(measured)
    with pytest.raises(InputError) as error:
        validate_measured(measured, profiled["doc"])
    assert message in str(error.value)


def test_no_gpu_is_refused_in_one_line(
    cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = cli("profile", "--out", tmp_path / "x.yaml")
    assert run.code == 1 and run.out == ""
    assert run.err.count("\n") == 1
    assert run.err.startswith("parplan: error: --device cuda: no usable CUDA GPU")
    assert "`--device cpu` runs a tiny CPU profile" in run.err
    assert "pip install -e '.[profile]'" in run.err
    assert not (tmp_path / "x.yaml").exists()
    import parplan_gen

    with pytest.raises(InputError, match=r"^device cuda: no usable CUDA GPU"):
        parplan_gen.measure()


def test_no_torch_is_refused_in_one_line(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    run = cli("profile", "--device", "cpu")
    assert run.code == 1 and run.out == "" and run.err.count("\n") == 1
    assert "torch, which is not installed: pip install -e '.[profile]' installs it" in run.err


def test_an_unknown_gpu_is_refused_before_anything_runs(cli: Any) -> None:
    run = cli("profile", "--device", "cpu", "--gpu", "h10")
    assert run.code == 1
    assert run.err.startswith("parplan: error: --gpu: unknown GPU 'h10'; did you mean 'h100'?")


def test_the_command_line_does_not_load_torch() -> None:
    code = "import sys, parplan_gen.cli.main; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert done.stdout == "False\n"


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),  # an H100 SXM5 board, as CUDA names it
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("Tesla V100-SXM2-32GB", "v100-32gb"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA A100 80GB PCIe", None),  # no catalog entry: --gpu is asked for
    ],
)
def test_a_device_name_maps_to_its_catalog_gpu(name: str, gpu: str | None) -> None:
    assert device_gpu(name) == gpu


def test_the_torchrun_commands_repeat_the_options() -> None:
    local, nodes = torchrun_commands(ProfileOptions(quick=True, gpu="h100"), "my cluster.yaml", 8)
    tail = "-m parplan_gen.cli.main profile --quick --gpu h100 --out 'my cluster.yaml'"
    assert local == f"torchrun --standalone --nproc-per-node=8 {tail}"
    assert nodes == (
        "torchrun --nnodes=<NODES> --nproc-per-node=8 --node-rank=<NODE_RANK> "
        f"--rdzv-endpoint=<HOST>:<PORT> {tail}"
    )


def test_torchruns_environment_gives_the_ranks_and_span() -> None:
    assert torchrun_launch({}) is None
    two_nodes = torchrun_launch(
        {"WORLD_SIZE": "16", "RANK": "9", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8"}
    )
    assert two_nodes == Launch(rank=9, world=16, local_rank=1, local_world=8)
    assert two_nodes.span == "cross-node"
    assert torchrun_launch({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "3"}).span == "node"
    with pytest.raises(UsageError, match="RANK=4, WORLD_SIZE=4"):
        torchrun_launch({"WORLD_SIZE": "4", "RANK": "4"})


def test_the_data_files_bus_factors_are_nccl_tests() -> None:
    factors = sweeps().bus_bandwidth.factors
    for op, formula in NCCL_TESTS_FACTOR.items():
        for ranks in (2, 3, 8, 64):
            assert math.isclose(factors[op].factor(ranks), formula(ranks)), (op, ranks)


class _Device:
    """A device whose points fail with a MemoryError, if any."""

    def point_failures(self) -> tuple[type[BaseException], ...]:
        return (MemoryError,)

    def free(self) -> None:
        pass


def test_a_spent_budget_stops_the_sweep_and_says_so() -> None:
    budget = Budget(1e-9, {"gemm": 0.25, "attention": 0.25, "memory": 0.25, "collectives": 0.25})
    ran = []
    points = [Point("gemm", "gemm.bf16", f"p{i}", lambda i=i: ran.append(i)) for i in range(3)]
    results = Results()
    measure_points(points, _Device(), budget, Progress(3, budget, shown=False), results)  # type: ignore[arg-type]
    assert ran == [] and budget.stopped_early
    assert [(s.sweep, s.reason) for s in results.skipped] == [
        ("gemm.bf16", "3 point(s) not measured: the budget of 1e-09 s ran out")
    ]


def test_a_point_that_fails_on_the_device_is_skipped_with_its_reason() -> None:
    budget = Budget(60, {"gemm": 1, "attention": 0, "memory": 0, "collectives": 0})

    def too_big() -> Any:
        raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    points = [Point("gemm", "gemm.fp8", "gemm fp8 m=16384", too_big)]
    results = Results()
    measure_points(points, _Device(), budget, Progress(1, budget, shown=False), results)  # type: ignore[arg-type]
    assert results.curves == {"gemm.fp8": []} and not budget.stopped_early
    assert [(s.sweep, s.reason) for s in results.skipped] == [
        (
            "gemm.fp8",
            "gemm fp8 m=16384: MemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        )
    ]


def test_the_progress_line_is_shown_on_a_terminal_only() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    budget = Budget(60, {"gemm": 1, "attention": 0, "memory": 0, "collectives": 0})
    shown, hidden = Terminal(), io.StringIO()
    for stream in (shown, hidden):
        progress = Progress(2, budget, stream=stream)
        progress.step("gemm bf16 m=128 n=4096 k=4096")
        progress.close()
    assert "profile: gemm bf16 m=128 n=4096 k=4096  [1/2]  " in shown.getvalue()
    assert hidden.getvalue() == ""


def test_a_profiled_cluster_prices_its_collectives_at_the_measured_bus_bandwidth(
    profiled: dict[str, Any],
) -> None:
    import parplan_gen

    # The CPU profile runs gloo collectives between two local processes: one node.
    measured: Measured = profiled["measured"]
    assert measured.collectives is not None
    ring = [
        p.bus_gb_per_s
        for name in ("all_reduce", "all_gather", "reduce_scatter")
        for p in getattr(measured.collectives, name)
    ]
    cluster = load_cluster(profiled["path"])
    assert cluster.measured is not None
    assert cluster.measured.intra_bus_bytes_per_s == pytest.approx(max(ring) * 1e9, rel=1e-12)
    assert cluster.measured.inter_bus_bytes_per_s is None  # no cross-node point
    layout = {"dp": 2, "tp": 1, "global_batch": 8, "seq_len": 1024}
    bus = parplan_gen.explain("llama-3-8b", profiled["path"], layout, "intra_bus_bandwidth")
    assert bus.value == pytest.approx(max(ring) * 1e9, rel=1e-12)
    # Unprofiled, the link is the datasheet's at link_efficiency (rules/cost/efficiency.yaml).
    catalog = {"gpus": cluster.num_gpus, "gpu": cluster.gpu.name}
    plain = parplan_gen.explain("llama-3-8b", catalog, layout, "intra_bus_bandwidth")
    link = parplan_gen.explain("llama-3-8b", catalog, layout, "link_efficiency").value
    assert plain.value == pytest.approx(cluster.intra_node_bytes_per_s * link, rel=1e-12)


def test_across_nodes_the_bus_bandwidth_is_shared_by_the_gpus_of_a_node() -> None:
    from parplan_gen.cost.measured import measured_figures

    def point(span: str, bus: float) -> dict[str, Any]:
        ranks, size = 16, 2**30
        alg = bus / (2 * (ranks - 1) / ranks)  # nccl-tests' all-reduce factor
        return {"bytes": size, "ranks": ranks, "span": span, "time_s": size / (alg * 1e9),
                "alg_gb_per_s": alg, "bus_gb_per_s": bus}  # fmt: skip

    provenance = {
        "gpu_name": "NVIDIA H100 80GB HBM3", "driver": None, "cuda": "12.4", "hip": None,
        "torch": "2.5", "nccl": "2.21", "date": "2026-12-05T00:00:00Z", "device": "cuda",
        "quick": True, "budget_s": 60, "stopped_early": False,
    }  # fmt: skip
    collectives = {
        "backend": "nccl",
        "all_reduce": [point("node", 360.0), point("cross-node", 320.0)],
    }
    measured = Measured.model_validate({"provenance": provenance, "collectives": collectives})
    figures = measured_figures(measured, lambda precision: 989e12, 8)
    assert figures.intra_bus_bytes_per_s == pytest.approx(360e9)
    assert figures.inter_bus_bytes_per_s == pytest.approx(320e9 / 8)  # 40 GB/s per GPU's NIC


def test_a_profiled_fp8_gemm_sets_the_fp8_speed_up(
    profiled: dict[str, Any], tmp_path: Path
) -> None:
    import parplan_gen

    # FP8 points three times as fast as the BF16 ones (the CPU profile has none of its own).
    data = copy.deepcopy(profiled["doc"].data)
    bf16 = data["measured"]["gemm"]["bf16"]
    data["measured"]["gemm"]["fp8"] = [
        {**p, "time_s": p["time_s"] / 3, "tflops": p["tflops"] * 3} for p in bf16
    ]
    path = tmp_path / "fp8.yaml"
    path.write_text(cluster_yaml(data, []), encoding="utf-8")
    cluster = load_cluster(path)
    assert cluster.measured is not None
    fp8, sixteen = cluster.measured.gemm_fraction_fp8, cluster.measured.gemm_fraction_bf16
    assert fp8 is not None and sixteen is not None
    assert fp8 / sixteen == pytest.approx(3 * cluster.gpu.bf16_flops / cluster.gpu.fp8_flops)
    layout = {"dp": 2, "global_batch": 8, "seq_len": 1024, "precision": "fp8"}

    def value(name: str) -> float:
        return parplan_gen.explain("llama-3-8b", path, layout, name).value

    # Against Transformer Engine's GEMM benchmark: FP8 0.684, BF16 0.718 of their peaks.
    reference = value("nvidia_benchmark_fp8_fraction") / value("nvidia_benchmark_bf16_fraction")
    assert reference == pytest.approx(0.684 / 0.718, rel=1e-3)
    assert value("measured_max_fp8_scale") == pytest.approx(fp8 / sixteen / reference, rel=1e-12)
