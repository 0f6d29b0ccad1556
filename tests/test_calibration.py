"""benchmarks/calibration*.py reads every kind of row of the two calibration files. The entries
below are copied from ../shared/calibration/published_runs_modern.yaml; the whole files are
read from their copies in tests/data/calibration/ (CI has no ../shared). The expected values
are read off their text, never off the cost model's figures (other terms of the model
change)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ruamel.yaml import YAML

from conftest import FIT_RUNS, VENDORED_RUNS, load_benchmark, run_entries

GIB = 1 << 30

H100 = {
    "gpu": "NVIDIA H100 SXM 80GB (DGX H100)",
    "gpu_memory_gb": 80,
    "gpus_per_node": 8,
    "inter_node": "not stated on the page",
    "peak_16bit_dense_tflops": 989,
}
TITAN_H100 = {
    "gpu": "NVIDIA H100 96GB HBM2e (2.4 TB/s), 500 W power limit",
    "gpu_memory_gb": 96,
    "gpus_per_node": 8,
    "inter_node": "RDMA backend network, 400 Gb/s per GPU",
}
LLAMA3_8B = {
    "name": "Llama 3.1 8B",
    "num_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_query_groups": 8,
    "ffn_hidden_size": 14336,
    "vocab_size": 128256,
    "seq_length": None,
}


def _entry(**fields: Any) -> dict[str, Any]:
    return {"parallelism": {}, **fields}


FP8_MOE = _entry(
    name="nemo2511_h100_qwen3_30b_a3b_16gpus",
    model={
        "name": "Qwen3-30B-A3B",
        "num_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_query_groups": 4,
        "ffn_hidden_size": 6144,
        "vocab_size": 151936,
        "seq_length": 4096,
        "moe": {"num_experts": 128, "top_k": 8, "moe_ffn_hidden_size": 768},
    },
    hardware=H100,
    total_gpus=16,
    parallelism={"tp": 1, "pp": 2, "dp": 8, "cp": 1, "ep": 8, "virtual_pipeline_stages": 24},
    data_parallel_sharding="DDP (FSDP=0)",
    micro_batch_size=2,
    global_batch_size=512,
    precision="FP8-CS",
    measured={"tflops_per_gpu": 121, "tokens_per_sec_per_gpu": 5275, "grad_accum_printed": 32},
)
TITAN_FLOAT8 = _entry(
    name="torchtitan_h100_t1_8b_fsdp_compile_float8",
    model=LLAMA3_8B,
    hardware=TITAN_H100,
    total_gpus=8,
    parallelism={"tp": 1, "pp": 1, "dp": 8},
    zero_stage=3,
    distributed_optimizer=True,
    micro_batch_size=2,
    batch_size_per_dp_rank=2,
    global_batch_size=16,
    activation_recompute="selective activation checkpointing",
    precision="Float8 linears (torchao) + BF16",
    measured={"tokens_per_sec_per_gpu": 8532, "memory_gib_per_gpu": 76.8},
)
TITAN_405B = _entry(
    name="torchtitan_h100_t5_405b_fsdp8_tp8_pp8_1f1b",
    model={
        "name": "Llama 3.1 405B",
        "num_layers": 126,
        "hidden_size": 16384,
        "num_attention_heads": 128,
        "num_query_groups": 8,
        "ffn_hidden_size": 53248,
        "vocab_size": 128256,
        "seq_length": None,
    },
    hardware=TITAN_H100,
    total_gpus=512,
    parallelism={"tp": 8, "pp": 8, "dp": 8, "sequence_parallel": None},
    zero_stage=3,
    micro_batch_size=None,
    batch_size_per_dp_rank=32,
    global_batch_size=256,
    activation_recompute="full activation checkpointing",
    precision="Float8 + BF16, torch.compile, AsyncTP",
    measured={"tokens_per_sec_per_gpu": 100, "memory_gib_per_gpu": 82.5},
)
MIXTRAL_REFERENCE = _entry(
    name="mcore_v08_reference_mapping_mixtral_8x7b_64gpus",
    model={
        "name": "Mixtral 8x7B",
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_query_groups": 8,
        "ffn_hidden_size": 14336,
        "vocab_size": 32000,
        "seq_length": 4096,
        "moe": {"num_experts": 8, "top_k": 2},
    },
    hardware={
        "gpu": "NVIDIA H100 80GB HBM3",
        "gpu_memory_gb": 80,
        "gpus_per_node": 8,
        "inter_node": "InfiniBand 8x400 Gbit/s per node",
    },
    total_gpus=64,
    parallelism={"tp": 1, "pp": 4, "dp": 16, "cp": 1, "ep": 8, "virtual_pipeline_stages": 8},
    micro_batch_size=1,
    global_batch_size=256,
    precision="BF16",
    measured={"tflops_per_gpu": None, "tokens_per_sec_per_gpu": None},
)
WEAK_SCALING = _entry(
    name="megatron_core_h100_weak_scaling_70B",
    model={
        "name": "GPT 70B",
        "num_layers": 84,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "ffn_hidden_size": None,
        "vocab_size": 131072,
        "seq_length": 4096,
    },
    hardware={
        "gpu": "NVIDIA H100 (README links nvidia.com/h100; SXM/memory not stated)",
        "gpus_per_node": 8,
        "peak_16bit_dense_tflops": 989,
    },
    total_gpus=768,
    parallelism={"tp": 8, "pp": 2, "dp": 48, "sequence_parallel": True},
    distributed_optimizer=True,
    micro_batch_size=None,
    global_batch_size=384,
    precision="not stated (MFU computed against 989 TFLOP/s, the H100 SXM dense BF16 peak)",
    measured={"tflops_per_gpu": 419.7, "mfu_pct": 42},
)
ZERO3 = _entry(
    name="narayanan2021_table2_zero3_gpt_175B_384gpus",
    model={
        "name": "GPT 175B (GPT-3 architecture)",
        "num_layers": 96,
        "hidden_size": 12288,
        "num_attention_heads": 96,
        "ffn_hidden_size": 49152,
        "vocab_size": 51200,
        "seq_length": 2048,
    },
    hardware={
        "gpu": "NVIDIA A100-SXM 80GB",
        "gpu_memory_gb": 80,
        "gpus_per_node": 8,
        "inter_node": "8x NVIDIA Mellanox 200 Gb/s HDR InfiniBand HCAs per node",
    },
    total_gpus=384,
    parallelism={"tp": 1, "pp": 1, "dp": 384},
    zero_stage=3,
    distributed_optimizer=True,
    micro_batch_size=4,
    global_batch_size=1536,
    activation_recompute="not stated for Table 2 (TFLOP/s computed with Eq. 3, which assumes "
    "full recomputation)",
    precision="mixed precision (16-bit) per Sec. 5",
    measured={"tflops_per_gpu": 144},
)
NEMO_GPT3 = _entry(
    name="nemo2407_h100_fp8_gpt3-175b_128gpus",
    model={
        "name": "GPT3-175B (NeMo GPTConfig175B)",
        "num_layers": 96,
        "hidden_size": 12288,
        "num_attention_heads": 96,
        "ffn_hidden_size": 49152,
        "vocab_size": None,
        "seq_length": 2048,
    },
    hardware=H100,
    total_gpus=128,
    parallelism={
        "tp": 4,
        "pp": 8,
        "dp": 4,
        "virtual_pipeline_stages": 6,
        "sequence_parallel": None,
    },
    micro_batch_size=1,
    global_batch_size=256,
    precision="FP8 (Transformer Engine)",
    measured={"tflops_per_gpu": 771},
)


@pytest.fixture(scope="module")
def calibration() -> ModuleType:
    return load_benchmark("calibration")


def test_fp8_moe_row(calibration: ModuleType) -> None:
    case = calibration.case_from_entry(FP8_MOE)
    assert case.layout.precision == "fp8"  # "FP8-CS"
    assert (case.spec.num_experts, case.spec.experts_per_token) == (128, 8)
    assert case.spec.moe_ffn_hidden_size == 768
    assert (case.layout.ep, case.layout.pp, case.layout.vpp, case.layout.dp) == (8, 2, 24, 8)
    # The table's MBS 2 x GA 32 x dp 8 agree with its GBS 512, but its container's preset ran
    # MBS 1 (calibration_rows.yaml micro_batch_contradicted_by), and the row says so.
    assert (case.layout.mbs, case.layout.global_batch) == (1, 512)
    assert any(
        "micro_batch_size 1 (GA 64), not the printed 2: MBS 2 x GA 32 x dp 8 = GBS 512, but "
        "the container's preset runs MBS 1" in n
        for n in case.assumptions
    )
    assert case.spec.mlp_kind == "swiglu"  # Qwen3's gated SiLU, from the model's name
    # Qwen3MoEModelProvider (Megatron-Bridge v0.2.0): 128-wide heads on the 2048-wide model
    assert case.spec.head_dim == 128 and case.spec.qk_norm
    # Compared on its 5275 tokens/s, not the table's 121 TFLOP/s (Megatron-Bridge's own count):
    # Eq. 7's count worked by hand, 6 x the matmul parameters a token meets (per layer q and o
    # 2048 x 4096, k and v 2048 x 512, the router 2048 x 128, 8 experts of 3 x 2048 x 768; the
    # 2048 x 151936 LM head) + 12 L s (a d) for the scores.
    per_layer = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2048 * 128 + 8 * 3 * 2048 * 768
    flops_per_token = 6 * (48 * per_layer + 2048 * 151936) + 12 * 48 * 4096 * (32 * 128)
    assert case.published_tflops == pytest.approx(5275 * flops_per_token / 1e12)  # 147.2
    assert case.metric == "model" and case.basis.startswith("tokens/s")
    assert case.backend == "megatron" and case.source == "nemo2511"
    assert set(case.families) == {"H100 FP8", "MoE"}


GPT_OSS_H100 = _entry(
    name="nemo2511_h100_gpt_oss_120b_64gpus",
    model={
        "name": "GPT-OSS 120B",
        "num_layers": 36,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_query_groups": 8,
        "ffn_hidden_size": 2880,
        "vocab_size": 201088,
        "seq_length": 4096,
        "moe": {"num_experts": 128, "top_k": 4, "moe_ffn_hidden_size": 2880},
    },
    hardware=H100,
    total_gpus=64,
    parallelism={"tp": 1, "pp": 4, "dp": 16, "cp": 1, "ep": 8},
    data_parallel_sharding="DDP (FSDP=0)",
    micro_batch_size=4,
    global_batch_size=512,
    precision="BF16",
    measured={"tokens_per_sec_per_gpu": 5630, "tflops_per_gpu": 153, "grad_accum_printed": 2},
)


def test_gpt_oss_row_reads_megatron_bridge_architecture(calibration: ModuleType) -> None:
    spec = calibration.case_from_entry(GPT_OSS_H100).spec
    # GPTOSSProvider: kv_channels 64 (64 x 64 = 4096 query width on a 2880-wide model), a
    # 128-token window on layers 1, 3, 5, ... (layer_number % window_attn_skip_freq 2 != 0)
    assert spec.head_dim == 64 and spec.sliding_window == 128
    assert spec.window_layer_mask == tuple(i % 2 == 0 for i in range(36))
    assert spec.attention_sinks and spec.router_bias


def test_a_row_whose_batch_figures_contradict_each_other_runs_its_recipes_micro_batch(
    calibration: ModuleType,
) -> None:
    """Megatron-Bridge 25.11's H100 gpt-oss row prints MBS 4 and GA 2 (its B200 row's figures):
    4 x 2 x dp 16 = 128 sequences, not its GBS 512. calibration_rows.yaml names the MBS its
    recipe ran (v0.2.0 GPT_OSS_120B_H100_BF16_BASE_CONFIG: 1), so 512 / 16 = 32 micro-batches."""
    case = calibration.case_from_entry(GPT_OSS_H100)
    assert (case.layout.mbs, case.layout.dp, case.layout.pp) == (1, 16, 4)
    assert case.layout.global_batch == 512
    assert any("micro_batch_size 1 (GA 32), not the printed 4" in n for n in case.assumptions)


def _measured(**fields: Any) -> dict[str, Any]:
    return GPT_OSS_H100["measured"] | fields


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        # figures that agree keep them: naming another MBS for them is an error of the file
        (
            GPT_OSS_H100 | {"measured": _measured(grad_accum_printed=8)},
            r"figures agree \(MBS 4 x GA 8 x dp 16 = GBS 512\); remove it",
        ),
        # no printed GA (or MBS): nothing shows a contradiction
        (
            GPT_OSS_H100 | {"measured": _measured(grad_accum_printed=None)},
            "prints no measured.grad_accum_printed",
        ),
        (GPT_OSS_H100 | {"micro_batch_size": None}, "prints no micro_batch_size"),
        # 1 x dp 16 does not divide a GBS of 520
        (GPT_OSS_H100 | {"global_batch_size": 520}, "1 x dp 16 = 16 does not divide GBS 520"),
    ],
)
def test_a_micro_batch_the_row_does_not_contradict_stops_the_run(
    calibration: ModuleType, entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(calibration.RowsFileError, match=message):
        calibration.case_from_entry(entry)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"micro_batch_size": 2.5, "micro_batch_reason": "r"}, "2.5 is not a whole number >= 1"),
        ({"micro_batch_size": "one", "micro_batch_reason": "r"}, "'one' is not a whole number"),
        ({"micro_batch_size": 0, "micro_batch_reason": "r"}, "0 is not a whole number >= 1"),
        ({"micro_batch_size": 1}, "micro_batch_size and micro_batch_reason go together"),
        ({"micro_batch_sizes": 1}, r"unknown key\(s\) micro_batch_sizes"),
        (
            {"micro_batch_contradicted_by": "the preset"},
            "micro_batch_contradicted_by needs the micro_batch_size",
        ),
    ],
)
def test_a_malformed_rows_entry_stops_the_run_instead_of_skipping_the_row(
    calibration: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    row: dict[str, Any],
    message: str,
) -> None:
    table = calibration.row_table()
    entry = {"source": "nemo2511", "families": ["MoE"]} | row
    monkeypatch.setitem(table["rows"], GPT_OSS_H100["name"], entry)
    with pytest.raises(calibration.RowsFileError, match=message):
        calibration.case_from_entry(GPT_OSS_H100)
    # The command line says so and exits 2: no traceback, no table.
    runs = tmp_path / "runs.yaml"
    with runs.open("w", encoding="utf-8") as f:
        YAML(typ="safe").dump({"configs": [GPT_OSS_H100]}, f)
    said: list[str] = []
    assert calibration.main([str(runs)], out=said.append) == 2
    assert len(said) == 1 and said[0].startswith("error: calibration_rows.yaml rows: nemo2511")


def test_torchtitan_float8_row_with_peak_memory(calibration: ModuleType) -> None:
    case = calibration.case_from_entry(TITAN_FLOAT8)
    assert case.layout.precision == "fp8"  # "Float8 linears (torchao)"
    assert case.layout.seq_len == 8192  # the description's torchtitan default
    assert case.layout.recompute == "selective" and case.layout.zero_stage == 3
    assert case.published_memory_gib == 76.8
    assert case.backend == "torchtitan"
    assert case.cluster.gpu.memory_bytes == 96 * GIB  # the row's 96 GB part
    assert case.cluster.gpu.memory_bandwidth_bytes_per_s == 2.4e12
    assert case.cluster.inter_node_bytes_per_s == pytest.approx(400e9 / 8, rel=0.2)
    # 8532 tokens/s x model FLOPs per token of an 8,192-token sequence
    flops = case.spec.flops_per_token(8192)
    assert case.published_tflops == pytest.approx(8532 * flops / 1e12)
    assert any("seq_length 8192" in note for note in case.assumptions)


def test_torchtitan_sources_ran_repeated_kv_heads_and_megatron_sources_did_not(
    calibration: ModuleType,
) -> None:
    """Every torchtitan source predates ff0829c10 (2026-01-27, 'GQA without kv repeats'): its
    Llama repeated the KV heads before SDPA. Transformer Engine takes grouped heads as they are
    (Qwen3-30B-A3B on Megatron: 32 query heads, 4 KV heads)."""
    model = calibration.CostModel(calibration.builtin_cost_rules(), backend="torchtitan")
    for entry, repeated in ((TITAN_FLOAT8, True), (FP8_MOE, False)):
        case = calibration.case_from_entry(entry)
        env = model.layout_env(case.spec, case.cluster, case.layout)
        assert env["train.kv_heads_repeated"] is False  # a plan's
        assert case.with_facts(env)["train.kv_heads_repeated"] is repeated


def test_torchtitan_pipeline_micro_batch_is_local_batch_over_pp(calibration: ModuleType) -> None:
    case = calibration.case_from_entry(TITAN_405B)
    # local batch 32 split into pp = 8 micro-batches (torchtitan 9dec370 default)
    assert (case.layout.mbs, case.layout.grad_accum) == (4, 8)
    assert case.layout.sequence_parallel  # torchtitan's apply_tp: SequenceParallel norms
    assert case.layout.recompute == "full"


def test_a_reserved_peak_is_set_against_the_tensors_plus_the_planners_headroom(
    calibration: ModuleType,
) -> None:
    from parplan_gen.cost.estimate import MemoryBreakdown

    memory = MemoryBreakdown(
        params=GIB, grads=2 * GIB, optimizer=3 * GIB, activations=4 * GIB, other=5 * GIB,
        total=15 * GIB, capacity=96 * GIB, fits=True,
    )  # fmt: skip
    titan = calibration.case_from_entry(TITAN_FLOAT8)
    assert titan.memory_reserved_peak  # torchtitan logs reserved_bytes.all.peak
    # `other` (CUDA context, NCCL buffers: outside the allocator) out, the planner's default
    # headroom in: GMLake's 9.2 GB of 80 as a share of the 10 GiB of tensors.
    expected = 10 * GIB * (1 + 9.2 / 80)
    assert calibration.compared_memory(memory, titan) == pytest.approx(expected, rel=1e-9)
    nemo = calibration.case_from_entry(NEMO_GPT3)
    assert not nemo.memory_reserved_peak
    assert calibration.compared_memory(memory, nemo) == 15 * GIB


def test_megatron_fp8_example_uses_its_scripts_distributed_optimizer(
    calibration: ModuleType,
) -> None:
    entry = _entry(
        name="megatron_examples_llama_fp8_llama3_8b_8gpus",
        model={**LLAMA3_8B, "seq_length": 8192},
        hardware=H100,
        total_gpus=8,
        parallelism={"tp": 1, "pp": 1, "dp": 4, "cp": 2},
        zero_stage=None,
        distributed_optimizer=None,
        micro_batch_size=1,
        global_batch_size=128,
        precision="FP8 (hybrid format)",
        measured={"tflops_per_gpu": 800},
    )
    case = calibration.case_from_entry(entry)
    # examples/llama/train_llama3_8b_h100_fp8.sh DDP_ARGS: --use-distributed-optimizer
    assert case.layout.distributed_optimizer and case.layout.zero_stage == 0
    assert any("--use-distributed-optimizer" in note for note in case.assumptions)


KORTHIKANTI_175B = _entry(
    name="korthikanti2022_175B_sp_selective",
    model=ZERO3["model"],  # the same GPT-3 175B on the same Selene A100 nodes
    hardware=ZERO3["hardware"],
    total_gpus=64,
    parallelism={
        "tp": 8, "pp": 8, "dp": 1, "cp": 1, "ep": 1,
        "virtual_pipeline_stages": 3, "sequence_parallel": True,
    },
    zero_stage=0,
    distributed_optimizer=False,
    micro_batch_size=1,
    global_batch_size=64,
    activation_recompute="selective (attention core) + sequence parallelism",
    precision="mixed precision (16-bit) per Sec. 6",
    measured={"mfu_pct": 51.4, "step_time_s": 13.75},
)  # fmt: skip


def test_a_source_without_tp_overlap_is_priced_with_the_traffic_exposed(
    calibration: ModuleType,
) -> None:
    """Korthikanti 2022's Megatron-LM (2e90a342f5, 2022-05-19) had no --tp-comm-overlap: its
    sequence-parallel rows run the TP collectives between the GEMMs."""
    case = calibration.case_from_entry(KORTHIKANTI_175B)
    assert case.layout.sequence_parallel and case.layout.tp == 8
    assert case.ran["train.tp_comm_overlap"] is False
    assert any("2e90a342f5" in note for note in case.assumptions)
    model = calibration.CostModel(calibration.builtin_cost_rules(), backend=case.backend)
    env = model.layout_env(case.spec, case.cluster, case.layout, flash_attention=False)
    assert env["train.tp_comm_overlap"] is True  # what a plan of this layout would get
    figures = model.figures(case.with_facts(env))
    assert figures["time_tp_exposed_s"] == figures["time_tp_comm_s"] > 0
    # A source whose framework had the overlap keeps the default.
    assert calibration.case_from_entry(FP8_MOE).ran["train.tp_comm_overlap"] is True


def test_layout_reference_row(calibration: ModuleType) -> None:
    case = calibration.case_from_entry(MIXTRAL_REFERENCE)
    assert not case.measured and case.published_tflops is None
    assert case.spec.moe_ffn_hidden_size == 14336  # Megatron-Core default: ffn_hidden_size
    # "InfiniBand 8x400 Gbit/s per node" on 8 GPUs: 400 Gb/s per GPU
    assert calibration.inter_node_gbps(MIXTRAL_REFERENCE["hardware"]) == 400
    rows = calibration.evaluate(calibration.builtin_cost_rules(), [case])
    text = calibration.format_report(calibration.Report(rows))
    assert "MAPE over 0 runs" in text
    assert "mcore_v08_reference_mapping_mixtral_8x7b_64gpus (megatron): " in text


def test_assumption_defaults(calibration: ModuleType) -> None:
    weak = calibration.case_from_entry(WEAK_SCALING)
    assert weak.spec.ffn_hidden_size == 4 * 8192  # ffn = 4h unless given
    assert (weak.layout.mbs, weak.layout.grad_accum) == (1, 8)  # 384 / 48 ranks
    assert weak.layout.precision == "bf16"
    assert weak.layout.distributed_optimizer
    zero3 = calibration.case_from_entry(ZERO3)
    assert zero3.layout.recompute == "full"  # Eq. 3 counts full recomputation
    assert zero3.backend == "deepspeed" and zero3.metric == "hardware"
    assert zero3.source == "narayanan2021"  # the same publication as the PTD-P rows
    gpt3 = calibration.case_from_entry(NEMO_GPT3)
    assert gpt3.spec.vocab_size == 51200  # NeMo's padded GPT-3 vocabulary
    assert gpt3.layout.sequence_parallel and gpt3.layout.vpp == 6
    for case in (weak, zero3, gpt3):
        assert case.assumptions, case.name


def test_every_row_of_both_files_has_a_source_and_a_family(calibration: ModuleType) -> None:
    table = calibration.row_table()
    names = [e["name"] for e in run_entries(*FIT_RUNS)]
    assert len(names) == len(set(names)) == 75
    validation = {e["name"] for e in _validation_rows(load_benchmark("calibration_validate"))}
    assert set(names) | validation == set(table["rows"]) and not validation & set(names)
    families = set(calibration.FAMILIES)
    for name in names:
        facts = calibration.row_facts(name)
        assert facts.families and set(facts.families) <= families, name
        assert facts.backend in ("megatron", "deepspeed", "torchtitan", None), name
        assert facts.backend is not None or facts.backend_reason, name  # None says why


def test_every_row_is_read_or_skipped_with_its_reason(calibration: ModuleType) -> None:
    cases, skipped = calibration.load_cases(*FIT_RUNS)
    assert len(cases) + len(skipped) == 75
    assert [s.name for s in skipped] == ["nemo2407_h100_fp8_nemotron-8b_64gpus"]
    assert "leaves the vocabulary to the tokenizer" in skipped[0].reason


def test_leave_one_source_out_never_fits_on_the_rows_it_predicts() -> None:
    fit_module = load_benchmark("calibration_fit")

    class Fake:
        def __init__(self, source: str, measured: bool = True) -> None:
            self.source, self.measured = source, measured

    cases = [Fake("a"), Fake("b"), Fake("a"), Fake("c", measured=False), Fake("c")]
    seen: list[list[int]] = []

    def fit_on(training: Any) -> dict[str, float]:
        seen.append(list(training))
        return {"k": float(len(training))}

    folds = fit_module.leave_one_source_out(cases, fit_on)
    assert [f.source for f in folds] == ["a", "b", "c"]
    assert [f.held_out for f in folds] == [(0, 2), (1,), (4,)]
    assert seen == [[1, 4], [0, 2, 4], [0, 1, 2]]  # row 3 has no figure: never fitted
    for fold, training in zip(folds, seen, strict=True):
        assert not set(fold.held_out) & set(training)


def test_the_fast_fit_predicts_what_the_evaluator_does(calibration: ModuleType) -> None:
    cases, _ = calibration.load_cases(*VENDORED_RUNS)
    rules = calibration.builtin_cost_rules()
    fast = load_benchmark("calibration_fit").FastThroughput(rules, cases)
    constants = calibration.current_constants(rules)
    slow = calibration.evaluate(rules, cases)
    assert fast.predict(constants) == pytest.approx([r.predicted_tflops for r in slow])
    changed = constants | {"link_efficiency": 0.5}
    slow = calibration.evaluate(calibration.load_rules_with(changed, []), cases)
    assert fast.predict(changed) == pytest.approx([r.predicted_tflops for r in slow])


# ---- validation rows (benchmarks/data/validation_runs.yaml): kept apart, never fitted --------


@pytest.fixture(scope="module")
def validation() -> ModuleType:
    return load_benchmark("calibration_validate")


def _validation_rows(validation: ModuleType) -> list[dict[str, Any]]:
    return run_entries(validation.VALIDATION_RUNS)


def test_validation_rows_are_read_and_listed(
    calibration: ModuleType, validation: ModuleType
) -> None:
    assert validation.is_validation_file(validation.VALIDATION_RUNS)
    cases, skipped = calibration.load_cases(validation.VALIDATION_RUNS)
    assert not skipped and len(cases) == 52
    table = calibration.row_table()
    for case in cases:
        source = table["rows"][case.name]["source"]
        assert table["sources"][source]["validation"] and case.validation
        assert case.families and case.measured and case.basis.startswith("tokens/s")


def test_validation_rows_are_not_calibration_rows(validation: ModuleType) -> None:
    def run(e: dict[str, Any]) -> tuple[object, ...]:
        batch = (e["total_gpus"], e["global_batch_size"])
        fp8 = "fp8" in str(e.get("precision")).lower()  # 'FP8', 'FP8-CS' and 'FP8-MX' alike
        measured = e["measured"]  # the same layout at the same throughput is the same run
        figure = measured.get("tokens_per_sec_per_gpu") or measured.get("tflops_per_gpu")
        return (e["model"]["name"], e["hardware"]["gpu"], *batch, fp8, figure)

    fitted = {run(e) for e in run_entries(*FIT_RUNS)}
    for row in _validation_rows(validation):
        assert run(row) not in fitted, row["name"]
    assert not any(validation.is_validation_file(f) for f in FIT_RUNS)


def test_fitting_refuses_validation_rows(
    calibration: ModuleType, validation: ModuleType, tmp_path: Path
) -> None:
    said: list[str] = []
    for flag in ("--fit", "--cross-validate"):
        assert calibration.main([str(validation.VALIDATION_RUNS), flag], out=said.append) == 2
    # A validation row copied into a file without `purpose: validation` is refused by its source.
    row = _validation_rows(validation)[0]
    copied = tmp_path / "runs.yaml"
    YAML(typ="safe").dump({"configs": [row]}, copied)
    assert calibration.main([str(copied), "--fit"], out=said.append) == 2
    assert all("never fitted on" in line for line in said) and row["name"] in said[-1]


def test_validation_rows_read_their_system_and_recipe(
    calibration: ModuleType, validation: ModuleType
) -> None:
    rows = {r["name"]: r for r in _validation_rows(validation)}
    gb200 = calibration.case_from_entry(rows["mbridge2511_gb200_llama3_70b_64gpus_fp8cs"])
    # GB200 NVL72: 4 GPUs a tray, one NVLink domain of 72 (catalog reference node); not B200
    assert gb200.cluster.gpu.name == "gb200" and gb200.cluster.nvlink_domain == 72
    assert gb200.layout.zero_stage == 3  # FSDP=64: Megatron-FSDP
    mx = calibration.case_from_entry(rows["mbridge2511_b200_qwen3_30b_a3b_8gpus_fp8mx"])
    assert mx.cluster.gpu.name == "b200" and mx.ran["train.fp8_recipe"] == "mxfp8"  # 'FP8-MX'
    cs = calibration.case_from_entry(rows["mbridge2511_h100_llama3_70b_64gpus_fp8cs"])
    assert cs.ran["train.fp8_recipe"] == "tensorwise"  # 'FP8-CS'
    # Qwen3-235B on H100: tp 2 with expert tp 1 (the recipe's), else ep 32 x etp 2 > 32 ranks
    qwen = calibration.case_from_entry(rows["mbridge2511_h100_qwen3_235b_a22b_256gpus_fp8cs"])
    assert (qwen.layout.tp, qwen.layout.etp, qwen.layout.ep, qwen.layout.dp) == (2, 1, 32, 16)
    # torchtitan's 2025 AsyncTP table: the 'Vanilla TP' column runs its TP traffic between the
    # matmuls, the 'Async TP' column overlapped; local batch 16 x FSDP 32 on the 70B
    vanilla, overlapped = (
        calibration.case_from_entry(rows[f"torchtitan_at25_70b_fsdp32_tp8_float8_{mode}"])
        for mode in ("vanilla_tp", "async_tp")
    )
    assert vanilla.ran["train.tp_comm_overlap"] is False
    assert overlapped.ran["train.tp_comm_overlap"] is True
    assert (vanilla.layout.tp, vanilla.layout.dp, vanilla.layout.mbs) == (8, 32, 16)
    assert vanilla.layout.global_batch == 512 and vanilla.ran["train.fp8_recipe"] == "tensorwise"
    assert vanilla.source == overlapped.source == "torchtitan_asynctp2025"


def test_megatron_core_pipelined_rows_run_interleaved(calibration: ModuleType) -> None:
    """The README overlaps pipeline communication, which Megatron-LM at f2e5db402c runs only
    with the interleaved schedule: a pp > 1 row gets the least interleaving its layers per
    stage allow (462B: 112 layers / pp 16 = 7 a stage, prime, so 7 chunks; 177B: 96 / 6 = 16,
    so 2); pp 1 rows are not pipelined."""
    row = _entry(
        name="megatron_core_h100_weak_scaling_462B",
        model={
            "name": "GPT 462B",
            "num_layers": 112,
            "hidden_size": 18432,
            "num_attention_heads": 144,
            "vocab_size": 131072,
            "seq_length": 4096,
        },
        hardware={"gpu": "NVIDIA H100", "gpus_per_node": 8},
        total_gpus=6144,
        parallelism={"tp": 8, "pp": 16, "dp": 48, "sequence_parallel": True},
        distributed_optimizer=True,
        global_batch_size=3072,
        measured={"tflops_per_gpu": 459.9},
    )
    case = calibration.case_from_entry(row)
    assert (case.layout.pp, case.layout.vpp, case.layout.mbs) == (16, 7, 1)
    assert any("interleaved schedule" in note for note in case.assumptions)
    row["model"] |= {"num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96}
    row["parallelism"] |= {"pp": 6, "dp": 48}
    row["total_gpus"] = 2304
    assert calibration.case_from_entry(row).layout.vpp == 2
    row["parallelism"] |= {"pp": 1, "dp": 48, "tp": 1}
    row["total_gpus"] = 48
    assert calibration.case_from_entry(row).layout.vpp == 1
    # One layer a stage cannot be interleaved: the row is not evaluable, with the reason.
    row["parallelism"] |= {"pp": 96, "dp": 1}
    row["total_gpus"] = 96
    with pytest.raises(calibration.NotEvaluableError, match="cannot run the interleaved"):
        calibration.case_from_entry(row)


def test_validate_prints_each_family(calibration: ModuleType) -> None:
    said: list[str] = []
    assert calibration.main(["--validate"], out=said.append) == 0
    table = said[-1].splitlines()
    assert table[0].split() == ["family", "runs", "error", "memory", "fit"]
    rows = {line[:24].strip(): line[24:].split() for line in table[2:]}
    assert rows["all"][0] == "52" and rows["MoE"][0] == "16" and rows["GB300 NVL72"][0] == "6"
    assert rows["MI300X"][0] == "2"  # torchao's runs on 8 MI300X
    # runs, mean |error| and its %, memory error (and %, or "-"), fit
    assert rows["FSDP2"][0] == "25" and rows["FSDP2"][4] == "%"  # torchtitan's peak memory
    assert rows["MoE"][3] == "-"  # no Megatron-Bridge row publishes memory


def test_per_layer_spreads_each_step_over_layers_and_micro_batches(
    calibration: ModuleType,
) -> None:
    cases, _ = calibration.load_cases(calibration.VALIDATION_RUNS)
    case = next(c for c in cases if c.name == "mbridge2602_h100_qwen3_30b_a3b_16gpus_fp8")
    rules = calibration.builtin_cost_rules()
    [row] = calibration.evaluate(rules, [case])
    line = calibration.format_per_layer(rules, [row]).splitlines()[1].split()
    # The table's figures: 1024 sequences of 4096 tokens a step at 5,113 tokens/s on each of 16
    # GPUs; pp 2 of 48 layers, and mbs 1 over dp 8 makes 128 micro-batches a step.
    slices = 48 / 2 * 128
    published_ms = 1024 * 4096 / (5113 * 16) / slices * 1000
    priced_ms = calibration.step_s(rules, case) / slices * 1000
    assert line[1:4] == ["24.00", "128", "4096"]
    assert float(line[5]) == pytest.approx(published_ms, abs=0.01)
    assert float(line[4]) == pytest.approx(priced_ms, abs=0.01)
    assert float(line[6]) == pytest.approx(published_ms - priced_ms, abs=0.02)
