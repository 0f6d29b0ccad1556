"""Reading back what `parplan` wrote: ds_config.json and megatron_args.sh give the layout they
were rendered from, as far as each file says it (each backend's reader.py reads its mapping
section backwards). The plans are test_render's hand-built scenarios with their layouts varied,
and at the command line, the issue's scenarios through `plan --out` and `check --from-*`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_render import dense_multinode, graph_channel_parallel, moe, single_node

from parplan_gen.backends.deepspeed.reader import UNFILLED, deepspeed_values
from parplan_gen.backends.megatron.reader import megatron_values
from parplan_gen.cost.layout import Layout, build_layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.document import PlanDocument
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


def deepspeed_says(layout: Layout) -> dict[str, Any]:
    """What ds_config.json says of `layout`: the batch, AutoTP's size, the pipeline stages,
    ZeRO, 16-bit precision (FP8 runs inside bf16) and, for a pipeline, whether every layer is
    recomputed."""
    return {
        "global_batch": layout.global_batch,
        "mbs": layout.mbs,
        "grad_accum": layout.grad_accum,
        "zero_stage": layout.zero_stage,
        "precision": "fp16" if layout.precision == "fp16" else "bf16",
        **({"tp": layout.tp} if layout.tp > 1 else {}),
        **({"pp": layout.pp} if layout.pp > 1 else {}),
        **({"recompute": "full"} if layout.pp > 1 and layout.recompute == "full" else {}),
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
    assert build_layout(doc.cluster.num_gpus, **values) == doc.chosen.plan


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
    assert build_layout(doc.cluster.num_gpus, **values) == plan


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
    assert megatron_values(args, LAYERS) == expected


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
    assert megatron_values(args, layers) == expected


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
}
FILE_BACKEND = {"ds_config.json": "deepspeed", "megatron_args.sh": "megatron"} | {
    "torchtitan_run.sh": "torchtitan"
}


@pytest.mark.parametrize("case", sorted(PLANNED))  # the scenarios
def test_check_reads_back_every_file_plan_writes(
    case: str, cli: Callable[..., Run], planned: Callable[[str], Path]
) -> None:
    model, gpus, gpu, _, seq = PLANNED[case]
    cluster = ("--gpus", gpus, "--gpu", gpu)
    out = planned(case)  # `parplan plan ... --out`, once per session
    chosen = json.loads((out / "plan.json").read_text(encoding="utf-8"))["chosen"]
    written = [name for name in READERS if (out / name).is_file()]
    own = [file for file, backend in FILE_BACKEND.items() if backend == chosen["backend"]["name"]]
    assert own and set(own) <= set(written), "the chosen backend's file is always written"
    for name in written:
        # ds_config.json holds no sequence length, and no expert-parallel size: DeepSpeed-MoE
        # takes ep_size in the model code (plan.md says so); those come as flags.
        flags = () if name != "ds_config.json" else ("--seq-len", seq)
        if name == "ds_config.json" and chosen["plan"]["ep"] > 1:
            flags += ("--ep", chosen["plan"]["ep"])
        run = cli("check", model, *cluster, READERS[name], out / name, *flags, "--json")
        assert (run.code, run.err) == (0, ""), f"{name}: {run.err}"
        report = run.json()
        assert report["plan"] == chosen["plan"], name
        # each file is judged by its own backend: the chosen one's, or another that runs the
        # same layout (its file is written only then)
        assert report["backend"]["name"] == FILE_BACKEND[name], name
        assert report["runs_as_given"] and report["problem"] is None
