"""Reading back what `parplan` wrote: ds_config.json, megatron_args.sh, torchtitan_run.sh and
accelerate_config.yaml give the layout they were rendered from, as far as each file says it (each backend's reader.py reads its mapping
section backwards). The plans are test_render's hand-built scenarios with their layouts varied,
and at the command line, the issue's scenarios through `plan --out` and `check --from-*`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_render import dense_multinode, graph_channel_parallel, moe, single_node

import parplan_gen
from parplan_gen.backends.accelerate.reader import (
    AccelerateReading,
    accelerate_keys,
    accelerate_reading,
)
from parplan_gen.backends.deepspeed.reader import UNFILLED, deepspeed_values
from parplan_gen.backends.megatron.reader import megatron_values
from parplan_gen.cost.layout import (
    PLAN_CROSS_ENTROPY_FUSION,
    Layout,
    build_layout,
    plan_loss_compiled,
)
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.checks import RenderError, check_accelerate
from parplan_gen.render.mapping import MAPPING_FILE, load_mapping
from parplan_gen.render.mapping_inverse import megatron_flags
from parplan_gen.render.plan_files import render_plan
from parplan_gen.render.readers import layout_from_files

from conftest import PLANNED, REPO, Run, builtin_rules

LAYERS = 32  # llama-2-7b, llama-3-8b and mixtral-8x7b (the scenarios' presets) have 32 layers


def with_layout(doc: PlanDocument, **changes: Any) -> PlanDocument:
    """`doc` with its chosen layout rebuilt on the same GPUs with `changes`."""
    layout = doc.chosen.plan
    follows_tp = {"etp"} if layout.etp == layout.tp else set()  # etp defaults to tp
    fields = layout.model_dump(exclude={"dp", "grad_accum", *follows_tp}) | changes
    new = build_layout(doc.cluster.num_gpus, **fields)
    return PlanDocument.from_parts(  # made again: which backends run `new`, what their files say
        model=doc.model, cluster=doc.cluster, chosen=doc.chosen.model_copy(update={"plan": new}),
        candidates=doc.candidates, rejected=doc.rejected, proposals=doc.proposals,
        megatron_version=doc.render.megatron_version, deepspeed_version=doc.render.deepspeed_version,
        rules=builtin_rules(),
    )  # fmt: skip


PLANS = {
    "one_node_zero3_fp16_full": lambda: with_layout(single_node(), zero_stage=3),
    "one_node_zero0": lambda: with_layout(single_node(), zero_stage=0, recompute="none"),
    "one_node_zero1_tp2": lambda: with_layout(single_node(), zero_stage=1, tp=2),
    "one_node_zero2_bf16": lambda: with_layout(single_node(), zero_stage=2, precision="bf16"),
    "nodes_tp_pp_sp_selective": dense_multinode,
    "nodes_interleaved_even": lambda: with_layout(dense_multinode(), vpp=2, mbs=2),
    "nodes_pp4_interleaved": lambda: with_layout(dense_multinode(), pp=4, vpp=2),
    "nodes_pp_full_fp8": lambda: with_layout(
        dense_multinode(), recompute="full", precision="fp8", sequence_parallel=False
    ),
    "nodes_pp_zero1": lambda: with_layout(
        dense_multinode(), distributed_optimizer=False, zero_stage=1
    ),
    "moe_ep_cp_vpp": moe,
    "moe_pp_full": lambda: with_layout(moe(), recompute="full", vpp=1),
}


def rendered(doc: PlanDocument, folder: Path) -> dict[str, Path]:
    folder.mkdir()
    paths = {}
    for name, text in render_plan(doc).items():
        (folder / name).write_text(text, encoding="utf-8")
        paths[name] = folder / name
    return paths


def as_written(layout: Layout) -> Layout:
    """`layout` with the loss kernel its megatron_args.sh names: the plans' (Transformer
    Engine's) where the layout names none."""
    if layout.cross_entropy_fusion is not None:
        return layout
    return layout.model_copy(update={"cross_entropy_fusion": PLAN_CROSS_ENTROPY_FUSION})


def deepspeed_says(layout: Layout) -> dict[str, Any]:
    """What ds_config.json says of `layout`: the batch, AutoTP's size, the pipeline stages,
    ZeRO, 16-bit precision (FP8 runs inside bf16), for a pipeline whether every layer is
    recomputed, DeepSpeed's buffers (the reduce bucket with ZeRO, the prefetch bucket and
    the live-parameter limit with ZeRO-3) and, with ZeRO, whether the reduction overlaps."""
    zero3 = layout.zero_stage == 3
    return {
        "global_batch": layout.global_batch,
        "mbs": layout.mbs,
        "grad_accum": layout.grad_accum,
        "zero_stage": layout.zero_stage,
        "precision": "fp16" if layout.precision == "fp16" else "bf16",
        **({"tp": layout.tp} if layout.tp > 1 else {}),
        **({"pp": layout.pp} if layout.pp > 1 else {}),
        **({"recompute": "full"} if layout.pp > 1 and layout.recompute == "full" else {}),
        **({"ds_reduce_bucket_size": layout.ds_reduce_bucket_size} if layout.zero_stage else {}),
        **({"ds_prefetch_bucket_size": layout.ds_prefetch_bucket_size} if zero3 else {}),
        **({"ds_max_live_parameters": layout.ds_max_live_parameters} if zero3 else {}),
        **({"overlap_grad_reduce": layout.overlap_grad_reduce} if layout.zero_stage else {}),
    }


# Which backend's file each case gets: the one whose capabilities and rules run its layout
# (docs/backends.md). Megatron-LM: ZeRO 0, its distributed optimizer or, for these plans priced
# on Megatron-LM, Megatron-FSDP's ZeRO-2/3; DeepSpeed: no sequence parallelism, cp,
# interleaving or distributed optimizer, AutoTP only without a pipeline.
WRITTEN = {
    "one_node_zero3_fp16_full": {"megatron", "deepspeed"},
    "one_node_zero0": {"megatron", "deepspeed"},
    "one_node_zero1_tp2": {"deepspeed"},
    "one_node_zero2_bf16": {"megatron", "deepspeed"},
    "nodes_tp_pp_sp_selective": {"megatron"},
    "nodes_interleaved_even": {"megatron"},
    "nodes_pp4_interleaved": {"megatron"},
    "nodes_pp_full_fp8": {"megatron"},
    "nodes_pp_zero1": set(),  # ZeRO-1 with tp 2 x pp 2: AutoTP has no pipeline engine
    "moe_ep_cp_vpp": {"megatron"},
    "moe_pp_full": {"megatron"},
    "graph": {"deepspeed"},
}


@pytest.mark.parametrize("case", sorted(PLANS))
def test_megatron_args_read_back_give_the_layout(case: str, tmp_path: Path) -> None:
    doc = PLANS[case]()
    files = rendered(doc, tmp_path / "out")
    if "megatron" not in WRITTEN[case]:
        assert "megatron_args.sh" not in files
        return
    values = megatron_values(files["megatron_args.sh"], LAYERS)
    assert build_layout(doc.cluster.num_gpus, **values) == as_written(doc.chosen.plan)


@pytest.mark.parametrize("case", [*sorted(PLANS), "graph"])
def test_ds_config_read_back_gives_what_it_says_of_the_layout(case: str, tmp_path: Path) -> None:
    doc = graph_channel_parallel() if case == "graph" else PLANS[case]()
    files = rendered(doc, tmp_path / "out")
    if "deepspeed" not in WRITTEN[case]:
        assert "ds_config.json" not in files
        return
    assert deepspeed_values(files["ds_config.json"]) == deepspeed_says(doc.chosen.plan)


@pytest.mark.parametrize("case", ["one_node_zero0", "graph"])
def test_both_files_together_give_the_layout(case: str, tmp_path: Path) -> None:
    doc = graph_channel_parallel() if case == "graph" else PLANS[case]()
    files = rendered(doc, tmp_path / "out")
    values = layout_from_files(
        doc.model, deepspeed=files["ds_config.json"], megatron=files.get("megatron_args.sh")
    )
    assert values.pop("grad_accum") == doc.chosen.plan.grad_accum
    plan = doc.chosen.plan
    if case == "graph":  # ds_config.json alone: the rest comes from flags
        values |= {"seq_len": plan.seq_len, "recompute": plan.recompute}
        values["distributed_optimizer"] = False
    expected = plan if case == "graph" else as_written(plan)  # a graph model has no Megatron file
    assert build_layout(doc.cluster.num_gpus, **values) == expected


def test_megatron_arguments_of_an_op_graph_model_are_refused(tmp_path: Path) -> None:
    args = tmp_path / "args.sh"
    args.write_text("--tensor-model-parallel-size 2\n")
    with pytest.raises(InputError, match="resnet-50 is an op-graph model; Megatron-LM arguments"):
        layout_from_files(graph_channel_parallel().model, megatron=args)


def test_the_megatron_table_is_the_mapping_read_backwards() -> None:
    flags = megatron_flags(load_mapping(REPO / "templates" / MAPPING_FILE))
    fields = {flag: r.field for flag, r in flags.items() if r.field}
    assert fields == {
        "--tensor-model-parallel-size": "tp",
        "--pipeline-model-parallel-size": "pp",
        "--context-parallel-size": "cp",
        "--expert-model-parallel-size": "ep",
        "--expert-tensor-parallel-size": "etp",
        "--micro-batch-size": "mbs",
        "--global-batch-size": "global_batch",
        "--seq-length": "seq_len",
        "--num-virtual-stages-per-pipeline-rank": "vpp",
        "--virtual-pipeline-model-parallel-size": "vpp",  # its older name
        "--num-layers-per-virtual-pipeline-stage": "layers_per_virtual_stage",
        "--recompute-granularity": "recompute",
        "--cpu-offloading-num-layers": "offload_layers",
        # read into the ZeRO stage with --use-megatron-fsdp (readers._fsdp_sharding)
        "--data-parallel-sharding-strategy": "fsdp_strategy",
    }
    settings = {flag: (r.sets, r.values) for flag, r in flags.items() if r.sets}
    assert settings == {
        "--sequence-parallel": (("sequence_parallel", True), ()),
        "--use-distributed-optimizer": (("distributed_optimizer", True), ()),
        "--bf16": (("precision", "bf16"), ()),
        "--fp16": (("precision", "fp16"), ()),
        "--fp8-format": (("precision", "fp8"), ("hybrid", "e4m3")),
        "--recompute-activations": (("recompute", "selective"), ()),  # the older switch
        # not Layout fields: the layers the pipeline split counts besides the transformer's
        "--account-for-embedding-in-pipeline-split": (("account_embedding", True), ()),
        "--account-for-loss-in-pipeline-split": (("account_loss", True), ()),
        "--use-megatron-fsdp": (("megatron_fsdp", True), ()),  # core_v0.16.1's Megatron-FSDP
        "--overlap-grad-reduce": (("overlap_grad_reduce", True), ()),  # without it: off
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--bf16 --fp8-format e4m3", {"precision": "fp8"}),
        # --bf16 names the parameters' dtype, --fp8-format turns FP8 on over it (arguments.py)
        ("--fp8-format=hybrid --bf16", {"precision": "fp8"}),
        ("--recompute-activations --virtual-pipeline-model-parallel-size 4", {
            "recompute": "selective", "vpp": 4}),
        ("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2", {
            "pp": 4, "vpp": 4}),  # 32 layers / (4 stages x 2 layers)
        ("--decoder-first-pipeline-num-layers 9 --num-layers 32 --swiglu", {}),  # not a layout
    ],
)  # fmt: skip
def test_megatron_spellings(text: str, expected: dict[str, Any], tmp_path: Path) -> None:
    args = tmp_path / "args.sh"
    args.write_text(text + "\n")
    # none of these scripts says --overlap-grad-reduce: Megatron-LM reduces after the backward
    assert megatron_values(args, LAYERS) == {**expected, "overlap_grad_reduce": False}


@pytest.mark.parametrize(
    ("layers", "text", "expected"),
    [
        # Llama 3 405B: (126 + embedding + loss) / (16 stages x 1 layer) = 8 virtual stages
        (126, "--pipeline-model-parallel-size 16 --account-for-embedding-in-pipeline-split "
              "--account-for-loss-in-pipeline-split --num-layers-per-virtual-pipeline-stage 1",
         {"pp": 16, "vpp": 8}),
        # the loss alone: (127 + 1) / (16 x 2) = 4
        (127, "--pipeline-model-parallel-size 16 --account-for-loss-in-pipeline-split "
              "--num-layers-per-virtual-pipeline-stage 2", {"pp": 16, "vpp": 4}),
        # Qwen3-235B as Megatron-Bridge runs it on 256 H100s: ep 32 over tp 2 x dp 16, etp 1
        (94, "--tensor-model-parallel-size 2 --expert-model-parallel-size 32 "
             "--expert-tensor-parallel-size 1", {"tp": 2, "ep": 32, "etp": 1}),
    ],
)  # fmt: skip
def test_megatron_pipeline_accounting_and_expert_tp(
    layers: int, text: str, expected: dict[str, Any], tmp_path: Path
) -> None:
    args = tmp_path / "args.sh"
    args.write_text(text + "\n")
    assert megatron_values(args, layers) == {**expected, "overlap_grad_reduce": False}


def test_an_unknown_fp8_format_is_named(tmp_path: Path) -> None:
    args = tmp_path / "args.sh"
    args.write_text("--fp8-format e5m2\n")
    with pytest.raises(
        InputError, match=r"args.sh:1: --fp8-format: 'e5m2' is not one of \('hybrid', 'e4m3'\)"
    ):
        megatron_values(args, LAYERS)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ('{"bf16": {"enabled": "auto"}, "fp16": {"enabled": 1}}', {}),  # true only, not 1 or auto
        ('{"zero_optimization": 3, "pipeline": {"stages": 4, "activation_checkpoint_interval": true}}',
         {"pp": 4}),  # a section that is no object is not read; true is no interval
        ('{"pipeline": {"activation_checkpoint_interval": 1}}', {"recompute": "full"}),
    ],
)  # fmt: skip
def test_deepspeed_values_are_read_by_type(
    config: str, expected: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "ds.json"
    path.write_text(config)
    read = deepspeed_values(path)
    assert set(read.pop(UNFILLED)) == {"precision"}  # no 16-bit section enabled: given as a flag
    assert read == expected


def test_pipeline_stages_are_bounded_like_every_size(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"pipeline": {"stages": 0}}')
    with pytest.raises(
        InputError, match=r"pipeline.stages: expected a whole number from 1 to 1048576, got 0"
    ):
        deepspeed_values(path)


# ---- the command line: `plan --out` then `check --from-*` on what it wrote ----------------------

READERS = {
    "ds_config.json": "--from-deepspeed",
    "megatron_args.sh": "--from-megatron",
    "torchtitan_run.sh": "--from-torchtitan",
    "accelerate_config.yaml": "--from-accelerate",
}
FILE_BACKEND = {"ds_config.json": "deepspeed", "megatron_args.sh": "megatron"} | {
    "torchtitan_run.sh": "torchtitan",
    "accelerate_config.yaml": "accelerate",
}


def flags_for(name: str, plan: dict[str, Any]) -> tuple[object, ...]:
    """What a file leaves to the check's flags: ds_config.json holds no sequence length and no
    expert-parallel size (DeepSpeed-MoE takes ep_size in the model code: plan.md says so);
    accelerate_config.yaml holds no batch and no sequence (the training script's)."""
    if name == "ds_config.json":
        return ("--seq-len", plan["seq_len"]) + (("--ep", plan["ep"]) if plan["ep"] > 1 else ())
    if name == "accelerate_config.yaml":
        batch = ("--mbs", plan["mbs"], "--global-batch", plan["global_batch"])
        return (*batch, "--seq-len", plan["seq_len"])
    return ()


@pytest.mark.parametrize("case", sorted(PLANNED))  # the scenarios
def test_check_reads_back_every_file_plan_writes(
    case: str, cli: Callable[..., Run], planned: Callable[[str], Path]
) -> None:
    model, gpus, gpu, _, _ = PLANNED[case]
    cluster = ("--gpus", gpus, "--gpu", gpu)
    out = planned(case)  # `parplan plan ... --out`, once per session
    chosen = json.loads((out / "plan.json").read_text(encoding="utf-8"))["chosen"]
    written = [name for name in READERS if (out / name).is_file()]
    own = [file for file, backend in FILE_BACKEND.items() if backend == chosen["backend"]["name"]]
    assert own and set(own) <= set(written), "the chosen backend's file is always written"
    for name in written:
        flags = flags_for(name, chosen["plan"])
        run = cli("check", model, *cluster, READERS[name], out / name, *flags, "--json")
        assert (run.code, run.err) == (0, ""), f"{name}: {run.err}"
        report = run.json()
        # another backend's file computes its framework's own loss: no Megatron-LM loss kernel,
        # and compiled as that backend's plans compile it (torchtitan's: compiled; others: none)
        own_file = FILE_BACKEND[name] == chosen["backend"]["name"]
        mine = own_file or FILE_BACKEND[name] == "megatron"
        expected = chosen["plan"] if mine else {**chosen["plan"], "cross_entropy_fusion": None}
        if not own_file:
            expected = {**expected, "loss_compiled": plan_loss_compiled(FILE_BACKEND[name])}
        assert report["plan"] == expected, name
        # each file is judged by its own backend: the chosen one's, or another that runs the
        # same layout (its file is written only then)
        assert report["backend"]["name"] == FILE_BACKEND[name], name
        assert report["runs_as_given"] and report["problem"] is None


# Plans priced on Accelerate (its FSDP2 is priced apart: accelerate_config.yaml is written for
# its own plans only, none of PLANNED's): FSDP2 alone in fp16 with every layer recomputed, with
# tp, and with cp over a long sequence (model, GPUs, global batch, sequence, precision, pins).
ACCELERATE_PLANS = {
    "fsdp2_fp16_full": ("llama-3-8b", 16, 64, 4096, "fp16", {"recompute": "full"}),
    "tp8": ("llama-3-70b", 64, 256, 4096, "bf16", {"tp": 8}),
    "cp4": ("llama-3-8b", 16, 32, 32768, "bf16", {"cp": 4}),
}


@pytest.mark.parametrize("case", sorted(ACCELERATE_PLANS))
def test_check_reads_back_accelerate_config(
    case: str, cli: Callable[..., Run], tmp_path: Path
) -> None:
    model, gpus, batch, seq, precision, pins = ACCELERATE_PLANS[case]
    cluster = {"gpus": gpus, "gpu": "h100"}
    found = parplan_gen.plan(
        model, cluster, global_batch=batch, seq_len=seq, precision=precision,
        backend="accelerate", pins=pins,
    )  # fmt: skip
    found.write(tmp_path / "plan")
    chosen = json.loads((tmp_path / "plan" / "plan.json").read_text(encoding="utf-8"))["chosen"]
    assert chosen["backend"]["name"] == "accelerate"
    assert {k: chosen["plan"][k] for k in pins} == pins and chosen["plan"]["precision"] == precision
    path = tmp_path / "plan" / "accelerate_config.yaml"
    flags = flags_for(path.name, chosen["plan"])
    run = cli("check", model, "--gpus", gpus, "--gpu", "h100", "--from-accelerate", path, *flags,
              "--json")  # fmt: skip
    assert (run.code, run.err) == (0, ""), run.err
    report = run.json()
    assert report["plan"] == chosen["plan"] and report["backend"]["name"] == "accelerate"
    if case == "fsdp2_fp16_full":  # the text view names what the file says beside the layout
        text = cli("check", model, "--gpus", gpus, "--gpu", "h100", "--from-accelerate", path,
                   *flags)  # fmt: skip
        # keys.yaml: compute_environment, num_machines, machine_rank, rdzv_backend,
        # same_network, debug; fsdp_state_dict_type, fsdp_cpu_ram_efficient_loading,
        # fsdp_sync_module_states. Every other key written is the layout's or priced.
        assert text.out.splitlines()[-1] == (
            "Accelerate keys beside the layout: ignored none; read, no effect on the estimate: "
            "9 (launcher 6, checkpoints and loading 3)"
        )


ACCELERATE_BASE = """\
distributed_type: FSDP
mixed_precision: bf16
num_processes: 16
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
"""


def read_accelerate(tmp_path: Path, text: str, gpus: int = 16) -> AccelerateReading:
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(text, encoding="utf-8")
    return accelerate_reading(path, load_mapping(REPO / "templates" / MAPPING_FILE), num_gpus=gpus)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        # no parallelism config: FSDP2 over every process (fsdp2_prepare_model, mesh None)
        ("", {"dp": 16, "tp": 1, "cp": 1, "recompute": "none", "fsdp_reshard": "default"}),
        # a parallelism config: the launcher's defaults (1) for what it leaves out
        ("parallelism_config:\n  parallelism_config_tp_size: 2\n"
         "  parallelism_config_dp_shard_size: 8\n",
         {"dp": 8, "tp": 2, "cp": 1, "recompute": "none", "fsdp_reshard": "default"}),
        # a switch as Accelerate reads it (str_to_bool of the launcher's lower-cased text)
        ("  fsdp_activation_checkpointing: 'True'\n",
         {"dp": 16, "tp": 1, "cp": 1, "recompute": "full", "fsdp_reshard": "default"}),
        # FullyShardedDataParallelPlugin.reshard_after_forward false: every unit kept gathered
        ("  fsdp_reshard_after_forward: 'false'\n",
         {"dp": 16, "tp": 1, "cp": 1, "recompute": "none", "fsdp_reshard": "never"}),
    ],
)  # fmt: skip
def test_accelerate_config_layout(tmp_path: Path, extra: str, expected: dict[str, Any]) -> None:
    values = read_accelerate(tmp_path, ACCELERATE_BASE + extra).values
    assert set(values.pop(UNFILLED)) == {"mbs"}  # the batch is the training script's
    assert values == {
        "zero_stage": 3, "distributed_optimizer": False, "precision": "bf16", **expected
    }  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("fsdp_config:", "fsdp_version: 2\nfsdp_config:"),
         r":4:1: fsdp_version: no key of an Accelerate config"),
        (("fsdp_version: 2", "fsdp_version: 1"),
         r":5:3: fsdp_config.fsdp_version: 1 is not priced: FSDP1 .* \(parplan prices 2\)"),
        (("  fsdp_version: 2\n", ""),
         r":1:1: fsdp_config.fsdp_version left out: Accelerate's default 1 is not priced"),
        (("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP"),
         r"fsdp_auto_wrap_policy: 'SIZE_BASED_WRAP' is not priced: the cost model prices one"),
        (("num_processes: 16", "num_processes: 8"), r":3:1: num_processes: 8 processes: the check's cluster has 16 GPUs"),
        (("distributed_type: FSDP", "distributed_type: MULTI_GPU"),
         r"distributed_type: 'MULTI_GPU' is not priced: .*ddp backend"),
    ],
)  # fmt: skip
def test_accelerate_config_refusals(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        read_accelerate(tmp_path, ACCELERATE_BASE.replace(*change, 1))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("  parallelism_config_dp_replicate_size: 2\n  parallelism_config_dp_shard_size: 8\n",
         r"dp_replicate_size: 2 is not priced: HSDP"),
        ("  parallelism_config_cp_size: 2\n  parallelism_config_dp_shard_size: 8\n"
         "  parallelism_config_cp_comm_strategy: alltoall\n",
         r"cp_comm_strategy: 'alltoall' is not priced: .*all-gather rotation"),
        ("  parallelism_config_dp_shard_size: 4\n",
         r"the parallelism sizes make 4 processes, not num_processes 16"),
    ],
)  # fmt: skip
def test_accelerate_parallelism_refusals(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        read_accelerate(tmp_path, ACCELERATE_BASE + "parallelism_config:\n" + section)


def test_accelerate_keys_beside_the_layout_are_named_or_counted(tmp_path: Path) -> None:
    extra = "gpu_ids: all\nmain_process_port: 29500\ndynamo_config:\n  dynamo_backend: INDUCTOR\n"
    reading = read_accelerate(tmp_path, ACCELERATE_BASE + extra)
    # torch.compile (dynamo_config) changes the step time: named; the launcher's keys do not
    assert reading.ignored == ("dynamo_config",)
    assert reading.no_effect == {"launcher": ("gpu_ids", "main_process_port")}


def test_accelerate_fp32_is_left_to_the_precision_flag(tmp_path: Path) -> None:
    reading = read_accelerate(tmp_path, ACCELERATE_BASE.replace("bf16", "'no'"))
    why, where = reading.values[UNFILLED]["precision"]
    assert "mixed_precision no: Accelerate trains in fp32" in why and where.line == 2


def test_accelerate_priced_keys_are_what_accelerate_config_writes() -> None:
    """keys.yaml's priced values are the constants the mapping writes (where it writes them)."""
    mapping = load_mapping(REPO / "templates" / MAPPING_FILE)
    written = {
        entry.name: entry.value
        for section in mapping.data.accelerate.values()
        for entry in section.config
        if entry.value is not None
    }
    priced = {p.key: p.value for p in accelerate_keys().priced}
    assert {k: written[k] for k in priced if k in written} == {
        k: v for k, v in priced.items() if k in written
    }
    assert set(priced) - set(written) == {
        "parallelism_config.parallelism_config_sp_size",  # not written: Accelerate's 1
        "fsdp_config.fsdp_activation_checkpointing_offload",  # not written: Accelerate's false
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (ACCELERATE_BASE, None),  # no parallelism config: FSDP2 over the 16 processes
        (ACCELERATE_BASE.replace("num_processes: 16", "num_processes: 8"),
         r"num_processes 8 is not the parallelism sizes"),
        (ACCELERATE_BASE + "parallelism_config:\n  parallelism_config_dp_shard_size: 8\n"
         "  parallelism_config_tp_size: 2\n", r"data-parallel sizes .* do not make dp 16"),
        (ACCELERATE_BASE.replace("fsdp_version: 2", "fsdp_version: 1"), r"fsdp_version 2"),
    ],
)  # fmt: skip
def test_a_rendered_accelerate_config_is_checked_against_the_plan(
    text: str, message: str | None
) -> None:
    """render/checks.py check_accelerate: what render_plan demands of accelerate_config.yaml
    before it is written (the plan: dp 16 on 16 GPUs)."""
    if message is None:
        check_accelerate(text, 16, 16)
        return
    with pytest.raises(RenderError, match=message):
        check_accelerate(text, 16, 16)
