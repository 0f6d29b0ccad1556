"""`check --from-*` on the files users run, read as their framework reads them: small copies of
upstream launch files in tests/data/upstream/ (README.md there names each file's upstream path
and commit). torchtitan: the config function's settings, then the overrides (-1 = the rest);
DeepSpeed: "auto" and fp32 left to the flags, ZeRO-Offload refused; Megatron-LM: a script of
another model refused, and without MODEL the model the script trains."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.api import load_model
from parplan_gen.backends.megatron.model_from_script import megatron_model
from parplan_gen.backends.megatron.reader import megatron_arguments
from parplan_gen.backends.torchtitan.configs import config_registry
from parplan_gen.backends.torchtitan.reader import torchtitan_values
from parplan_gen.inputs.errors import InputError
from parplan_gen.render.mapping import load_mapping

from conftest import REPO, Run

UPSTREAM = REPO / "tests" / "data" / "upstream"
MAPPING = REPO / "templates" / "mapping.yaml"
SLURM = UPSTREAM / "torchtitan_multinode_trainer_llama3_70b.slurm"
OVERRIDES = " --parallelism.tensor_parallel_degree 8 --parallelism.data_parallel_shard_degree 4"
Z3 = UPSTREAM / "deepspeedexamples_autotuning_ds_config_z3.json"
PIPELINE = UPSTREAM / "deepspeedexamples_pipeline_ds_config.json"
OFFLOAD = UPSTREAM / "deepspeed_chat_zero3_offload.json"
GPT3 = UPSTREAM / "megatron_train_gpt3_175b_distributed.sh"
LLAMA3 = UPSTREAM / "megatron_train_llama3_8b_h100_fp8.sh"
H100 = ("--gpu", "h100")
FP32 = (
    "no bf16 or fp16 section enabled: DeepSpeed trains in fp32, which parplan does not price "
    "(its precisions: bf16, fp16, fp8); give --precision to price another"
)

# llama3_70b (config_registry.py): local batch 8, seq 8192, tp 8, full AC; SP on by default;
# data_parallel_shard_degree 4 (or -1: 32 / 8) is FSDP over 4 ranks; global batch -1: 8 x 4.
LLAMA3_70B_ON_32 = {
    "dp": 4, "tp": 8, "pp": 1, "cp": 1, "mbs": 8, "global_batch": 32, "grad_accum": 1,
    "recompute": "full", "sequence_parallel": True, "zero_stage": 3, "seq_len": 8192,
    "precision": "bf16",
}  # fmt: skip


def _layout(report: dict[str, Any]) -> dict[str, Any]:
    return {k: report["plan"][k] for k in LLAMA3_70B_ON_32}


@pytest.mark.parametrize("overrides", [True, False])
def test_torchtitan_multinode_slurm_is_read_from_its_config(
    overrides: bool, cli: Callable[..., Run], tmp_path: Path
) -> None:
    script = SLURM
    if not overrides:  # CONFIG=llama3_70b alone: its tp 8, the rest (4) data-parallel
        script = tmp_path / "multinode_trainer.slurm"
        script.write_text(SLURM.read_text(encoding="utf-8").replace(OVERRIDES, ""))
    run = cli("check", "llama-3-70b", "--gpus", 32, *H100, "--from-torchtitan", script, "--json")
    assert (run.code, run.err) == (0, "")
    report = run.json()
    assert _layout(report) == LLAMA3_70B_ON_32
    assert report["backend"]["name"] == "torchtitan" and report["runs_as_given"]


def _line(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.sh"
    path.write_text("torchrun -m torchtitan.train --module llama3 " + text + "\n")
    return path


@pytest.mark.parametrize(
    ("gpus", "text", "expected"),
    [
        # llama3_8b: local batch 1, seq 8192, selective AC; FSDP over all 8 GPUs, batch 1 x 8
        (8, "--config llama3_8b", {"dp": 8, "tp": 1, "mbs": 1, "global_batch": 8,
         "recompute": "selective", "zero_stage": 3, "seq_len": 8192, "precision": "bf16",
         "sequence_parallel": False}),
        # llama3_405b: float8, local batch 2, tp 8, full AC; 64 / 8 = 8 data-parallel ranks
        (64, "--config llama3_405b", {"dp": 8, "tp": 8, "mbs": 2, "global_batch": 16,
         "recompute": "full", "precision": "fp8", "sequence_parallel": True}),
        # -1 written out is the default; overrides win over the config's settings
        (16, "--config llama3_70b --parallelism.data_parallel_shard_degree -1 "
             "--parallelism.no_enable_sequence_parallel --training.local_batch_size 2 "
             "--training.global_batch_size 64 --training.seq_len 4096 activation-checkpoint:none",
         {"dp": 2, "tp": 8, "mbs": 2, "global_batch": 64, "recompute": "none",
          "sequence_parallel": False, "seq_len": 4096}),
        # DDP: replicated over the rest, the shard degree given as 1
        (16, "--config llama3_8b --parallelism.data_parallel_replicate_degree 16 "
             "--parallelism.data_parallel_shard_degree 1", {"dp": 16, "zero_stage": 0}),
    ],
)  # fmt: skip
def test_torchtitan_config_settings_then_overrides(
    gpus: int, text: str, expected: dict[str, Any], tmp_path: Path
) -> None:
    read = torchtitan_values(_line(tmp_path, text), 80, load_mapping(MAPPING), num_gpus=gpus)
    assert {k: read[k] for k in expected} == expected


def test_the_rest_of_the_world_must_divide(tmp_path: Path) -> None:
    path = _line(tmp_path, "--config llama3_70b --parallelism.pipeline_parallel_degree 3")
    with pytest.raises(InputError) as caught:
        torchtitan_values(path, 80, load_mapping(MAPPING), num_gpus=32)
    assert str(caught.value) == (
        f"{path}: dp_replicate(1) * dp_shard(-1: 32 // 24 = 1) * cp(1) * tp(8) * pp(3) "
        "!= world size (32 GPUs)"
    )


def test_config_registry_covers_the_mapping_configs() -> None:
    """configs.yaml knows every config the renderer writes, and its float8 is the mapping's
    fp8 precision, its flavor the mapping's."""
    section = load_mapping(MAPPING).data.torchtitan["0.3"]
    registry = config_registry()
    assert set(section.configs) <= set(registry.configs)
    for name, config in section.configs.items():
        fp8 = registry.settings(name)["float8"]
        assert config.precision == ("fp8" if fp8 else "bf16"), name
        assert config.flavor == registry.configs[name].flavor, name
        # llama3_405b's Float8LinearConverter.Config gives no recipe_name: its default
        assert config.fp8_recipe == ("rowwise" if fp8 else None), name
    assert registry.settings("llama3_70b") == {
        "local_batch_size": 8, "global_batch_size": -1, "seq_len": 8192,
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": -1,
        "tensor_parallel_degree": 8, "enable_sequence_parallel": True,
        "pipeline_parallel_degree": 1, "pipeline_parallel_microbatch_size": 1,
        "context_parallel_degree": 1, "expert_parallel_degree": 1,
        "activation_checkpoint": "full", "compile": False, "compile_components": ("model", "loss"),
        "async_tp": False, "float8": False,
    }  # fmt: skip


# ---- DeepSpeed ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "flags", "error"),
    [
        (Z3, (), f"{Z3}:2:3: train_micro_batch_size_per_gpu: 'auto' is filled by the HF "
                 "Trainer: give --mbs"),
        (Z3, ("--mbs", 1, "--global-batch", 64), f"{Z3}:1:1: {FP32}"),
        (PIPELINE, (), f"{PIPELINE}:1:1: {FP32}"),
        (OFFLOAD, (), f"{OFFLOAD}:8:27: zero_optimization.offload_optimizer.device: "
                      "offload_optimizer to cpu is not priced by parplan"),
    ],
)  # fmt: skip
def test_deepspeed_files_refused_in_one_line(
    path: Path, flags: tuple[Any, ...], error: str, cli: Callable[..., Run]
) -> None:
    run = cli("check", "llama-3-8b", "--gpus", 8, *H100, "--from-deepspeed", path, *flags)
    assert (run.code, run.out, run.err) == (1, "", f"parplan: error: {error}\n")


@pytest.mark.parametrize(
    ("path", "flags", "expected", "code"),
    [
        (Z3, ("--mbs", 1, "--global-batch", 64, "--precision", "bf16"),
         {"mbs": 1, "global_batch": 64, "grad_accum": 8, "zero_stage": 3, "precision": "bf16"}, 0),
        # priced as asked; 8 sequences of 8192 tokens per GPU at ZeRO 0 do not fit (exit 1)
        (PIPELINE, ("--precision", "fp16"),
         {"mbs": 8, "global_batch": 256, "grad_accum": 4, "zero_stage": 0, "precision": "fp16"}, 1),
    ],
)  # fmt: skip
def test_deepspeed_flags_fill_what_the_file_leaves(
    path: Path,
    flags: tuple[Any, ...],
    expected: dict[str, Any],
    code: int,
    cli: Callable[..., Run],
) -> None:
    run = cli("check", "llama-3-8b", "--gpus", 8, *H100, "--from-deepspeed", path, *flags, "--json")
    assert run.code == code and "fp32" not in run.err and "auto" not in run.err
    assert {k: run.json()["plan"][k] for k in expected} == expected


def test_the_api_names_the_layout_field_an_auto_leaves() -> None:
    cluster = {"gpus": 8, "gpu": "h100"}
    with pytest.raises(InputError, match=r"'auto' is filled by the HF Trainer: give mbs$"):
        parplan_gen.check("llama-3-8b", cluster, {"global_batch": 64}, from_deepspeed=Z3)
    given = {"mbs": 2, "global_batch": 64, "precision": "bf16"}
    report = parplan_gen.check("llama-3-8b", cluster, given, from_deepspeed=Z3)
    assert (report.estimate.plan.mbs, report.estimate.plan.zero_stage) == (2, 3)


def test_deepspeed_chat_without_offload_is_bf16_by_its_older_section(tmp_path: Path) -> None:
    """get_train_ds_config(offload=False, dtype="bf16"): devices "none", the `bfloat16` key."""
    path = tmp_path / "ds.json"
    text = OFFLOAD.read_text(encoding="utf-8").replace('"cpu"', '"none"')
    path.write_text(text)
    report = parplan_gen.check("llama-3-8b", {"gpus": 8, "gpu": "h100"}, from_deepspeed=path)
    plan = report.estimate.plan
    assert (plan.precision, plan.zero_stage, plan.mbs, plan.global_batch) == ("bf16", 3, 4, 32)


# ---- Megatron-LM --------------------------------------------------------------------------------


def test_a_megatron_script_of_another_model_is_refused(cli: Callable[..., Run]) -> None:
    run = cli("check", "llama-3-8b", "--gpus", 8, *H100, "--from-megatron", GPT3)
    assert (run.code, run.out) == (1, "")
    assert run.err == (
        f"parplan: error: {GPT3}:8: the script trains another model than llama-3-8b: "
        "--num-layers 96, --hidden-size 12288, --num-attention-heads 96 (MODEL llama-3-8b: "
        "--num-layers 32, --hidden-size 4096, --num-attention-heads 32); give the script's "
        "model as MODEL\n"
    )


def test_a_megatron_script_of_its_own_model_is_read(cli: Callable[..., Run]) -> None:
    args = ("--gpus", 1024, "--gpu", "a100-80gb", "--from-megatron", GPT3, "--json")
    run = cli("check", "gpt3-175b", *args)
    assert run.err == ""
    plan = run.json()["plan"]
    assert {k: plan[k] for k in ("dp", "tp", "pp", "mbs", "global_batch", "precision")} == {
        "dp": 8, "tp": 8, "pp": 16, "mbs": 1, "global_batch": 1536, "precision": "fp16",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("--num-query-groups 4", None),  # without --group-query-attention Megatron ignores it
        ("--group-query-attention --num-query-groups 4",
         "--num-query-groups 4 (MODEL llama-3-8b: --num-query-groups 8)"),
        ("--num-experts 8 --num-layers $LAYERS", "--num-experts 8 (MODEL llama-3-8b: "
                                                 "--num-experts 0)"),
        ("--num-layers 32 --hidden-size=4096 --ffn-hidden-size 14336", None),
    ],
)  # fmt: skip
def test_megatron_shape_arguments(text: str, error: str | None, tmp_path: Path) -> None:
    path = tmp_path / "args.sh"
    path.write_text("--global-batch-size 64 " + text + "\n")
    cluster = {"gpus": 8, "gpu": "h100"}
    if error is None:
        parplan_gen.check("llama-3-8b", cluster, from_megatron=path)
        return
    with pytest.raises(InputError) as caught:
        parplan_gen.check("llama-3-8b", cluster, from_megatron=path)
    assert str(caught.value) == (
        f"{path}:1: the script trains another model than llama-3-8b: {error}; give the "
        "script's model as MODEL"
    )


def test_the_llama3_example_states_its_model(cli: Callable[..., Run]) -> None:
    """Without MODEL: Llama 3 8B as the script builds it. The script at core_v0.16.1 gives no
    --normalization, so Megatron-LM builds LayerNorm (TransformerConfig default): a shift
    beside each scale, 2 norms a layer and the final one, over Meta's count (the preset's)."""
    run = cli("check", "--gpus", 8, *H100, "--from-megatron", LLAMA3)
    assert (run.code, run.err) == (0, "")
    assert run.out.startswith(
        f"model: read from {LLAMA3.name}: 32 layers, hidden 4096, 32 heads (8 query groups, "
        "width 128), swiglu FFN 14336, layernorm, rope positions 8192, vocabulary 128256 untied "
        "(8.03B params)\n"
    )
    groups = megatron_arguments(LLAMA3).no_effect  # with MODEL, the model's are "no effect"
    others = sum(len(names) for group, names in groups.items() if group != "model")
    assert (
        f"read into the model: {len(groups['model'])}; read, no effect on the estimate: "
        f"{others} (optimizer " in run.out
    )
    cluster = {"gpus": 8, "gpu": "h100"}
    read = parplan_gen.check(None, cluster, from_megatron=LLAMA3)
    named = parplan_gen.check("llama-3-8b", cluster, from_megatron=LLAMA3)
    preset = load_model("llama-3-8b")
    assert read.model.total_params() - preset.total_params() == (2 * 32 + 1) * 4096
    assert (read.runs_as_given, read.problem(), read.violations) == (
        named.runs_as_given, named.problem(), named.violations,
    )  # fmt: skip
    assert read.estimate.plan == named.estimate.plan


def test_the_gpt3_example_needs_its_tokenizer_type(cli: Callable[..., Run], tmp_path: Path) -> None:
    """--vocab-file and --merge-file without --tokenizer-type: Megatron-LM core_v0.16.1 builds
    no tokenizer (build_tokenizer raises NotImplementedError), so no vocabulary is stated. With
    GPT2BPETokenizer (GPT-2's 50,257 tokens, padded to 128 x tp 8): GPT-3 175B as the preset
    has it (Narayanan et al. 2021's 174.6B, vocabulary 51,200)."""
    run = cli("check", "--gpus", 1024, "--gpu", "a100-80gb", "--from-megatron", GPT3)
    assert (run.code, run.out) == (1, "")
    assert run.err == (
        f"parplan: error: {GPT3}:33: the script gives no --tokenizer-type (Megatron-LM builds "
        "no tokenizer without one: tokenizer.py build_tokenizer) and no --vocab-size, so the "
        "model's vocabulary is unknown: add --tokenizer-type (GPT2BPETokenizer for GPT-2's "
        "gpt2-vocab.json and gpt2-merges.txt) or --vocab-size to the script, or give MODEL\n"
    )
    script = tmp_path / GPT3.name
    text = GPT3.read_text(encoding="utf-8")
    script.write_text(
        text.replace("--split 949,50,1", "--split 949,50,1 --tokenizer-type GPT2BPETokenizer")
    )
    model = megatron_model(script)
    preset = load_model("gpt3-175b")
    assert model.model_dump(exclude={"name", "model_type", "training"}) == preset.model_dump(
        exclude={"name", "model_type", "training"}
    )
    assert (model.vocab_size, round(model.total_params() / 1e9, 1)) == (51200, 174.6)


def test_check_without_a_model_or_a_megatron_script(cli: Callable[..., Run]) -> None:
    run = cli("check", "--gpus", 8, *H100, "--global-batch", 64)
    assert (run.code, run.out) == (2, "")
    assert run.err == (
        "parplan: error: the following arguments are required: MODEL (see 'parplan check --help')\n"
    )
    with pytest.raises(InputError) as caught:
        parplan_gen.check(None, {"gpus": 8, "gpu": "h100"}, {"global_batch": 64})
    assert str(caught.value) == (
        "give a model, or from_megatron: a Megatron-LM script, which states the model it trains"
    )


# ---- the config function a plan writes (parplan_torchtitan_config.py) ---------------------------

MODULE_HEAD = """from torchtitan.components.quantization import Float8LinearConverter, MXFP8LinearConverter
from torchtitan.models.llama3 import model_registry
from torchtitan.models.llama3.config_registry import llama3_8b, llama3_405b


"""


def _written(tmp_path: Path, function: str, body: str) -> Path:
    """A torchtitan line that starts from `function` of a config module beside it."""
    (tmp_path / "parplan_torchtitan_config.py").write_text(MODULE_HEAD + body, encoding="utf-8")
    path = tmp_path / "run.sh"
    path.write_text(
        "torchrun -m torchtitan.train --module parplan_torchtitan_config --config "
        f"{function} --parallelism.data_parallel_shard_degree 8\n"
    )
    return path


@pytest.mark.parametrize(
    ("function", "body", "precision"),
    [
        # Float8LinearConverter's other recipe (float8.py Literal): float8 linears all the same
        ("f", "def f():\n    c = llama3_8b()\n    c.model_spec = model_registry('8B', "
              "converters=[Float8LinearConverter.Config(recipe_name='rowwise_with_gw_hp')])\n"
              "    return c\n", "fp8"),
        ("f", "def f():\n    c = llama3_8b()\n    c.model_spec = model_registry('8B', "
              "converters=[MXFP8LinearConverter.Config(fqns=['layers'])])\n    return c\n",
         "fp8"),
        # llama3_405b rebuilt without converters: bf16; kept as it is: its float8
        ("f", "def f():\n    c = llama3_405b()\n    c.model_spec = model_registry('405B')\n"
              "    return c\n", "bf16"),
        ("g", "def g():\n    return llama3_405b()\n", "fp8"),
    ],
)  # fmt: skip
def test_a_written_config_function_is_read_from_its_file(
    tmp_path: Path, function: str, body: str, precision: str
) -> None:
    path = _written(tmp_path, function, body)
    read = torchtitan_values(path, 32, load_mapping(MAPPING), num_gpus=8)
    assert read["precision"] == precision


@pytest.mark.parametrize(
    ("function", "body", "error"),
    [
        ("f", "def f(:\n", "{module}:6: Python syntax: invalid syntax"),
        # Python's parser gives up on a file nested this deeply (MemoryError or RecursionError)
        ("f", "def f():\n    return llama3_8b(" + "-" * 100_000 + "1)\n",
         "{module}: not a Python file parplan reads: nested too deeply for Python's parser"),
        ("h", "def f():\n    return llama3_8b()\n",
         "{run}:1: --config: parplan_torchtitan_config.py defines no function h"),
        ("f", "def f():\n    return dict()\n",
         "{module}:6: f calls none of torchtitan's configs (llama3_8b, llama3_70b, llama3_405b)"),
        ("f", "def f():\n    c = llama3_8b()\n    c.model_spec = model_registry('70B')\n",
         "{module}:8: model_registry('70B'): llama3_8b builds the 8B model"),
        ("f", "def f():\n    c = llama3_8b()\n    c.model_spec = model_registry('8B', "
              "converters=[NVFP4LinearConverter.Config()])\n",
         "{module}:8: converter NVFP4LinearConverter.Config(): torchtitan 0.3's converters "
         "parplan prices are Float8LinearConverter.Config(...), MXFP8LinearConverter.Config(...)"),
        ("f", "def f():\n    c = llama3_8b()\n    c.model_spec = model_registry('8B', "
              "converters=[Float8LinearConverter.Config(recipe_name='tensorwise')])\n",
         "{module}:8: recipe_name: 'tensorwise' is not one of ('rowwise', 'rowwise_with_gw_hp')"),
    ],
)  # fmt: skip
def test_a_written_config_function_torchtitan_would_not_build_is_refused(
    tmp_path: Path, function: str, body: str, error: str
) -> None:
    path = _written(tmp_path, function, body)
    with pytest.raises(InputError) as caught:
        torchtitan_values(path, 32, load_mapping(MAPPING), num_gpus=8)
    module = tmp_path / "parplan_torchtitan_config.py"
    assert str(caught.value) == error.format(module=module, run=path)


def test_a_line_without_its_config_module_names_the_file(tmp_path: Path) -> None:
    path = _written(tmp_path, "f", "def f():\n    return llama3_8b()\n")
    (tmp_path / "parplan_torchtitan_config.py").unlink()
    with pytest.raises(InputError) as caught:
        torchtitan_values(path, 32, load_mapping(MAPPING), num_gpus=8)
    assert str(caught.value) == (
        f"{path}:1: --module: no {tmp_path / 'parplan_torchtitan_config.py'}: the config "
        "function this line starts from is written beside it"
    )
