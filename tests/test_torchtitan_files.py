"""torchtitan_run.sh: the search picks torchtitan where it runs the best layout, its file is
written, read back (`check --from-torchtitan`) to the plan's layout, and its overrides are
accepted by torchtitan 0.3.0's own ConfigManager and ParallelDims.

The consumer (tests/consumer_torchtitan.py, shared with test_consumers.py) parses the arguments
with torchtitan's ConfigManager, as torchtitan.train does, and builds its ParallelDims. Where no
torchtitan config builds the model in the plan's precision (fp8 on llama3_8b / llama3_70b, bf16
or MXFP8 on llama3_405b), the job starts from the config function the plan writes
(parplan_torchtitan_config.py), which ConfigManager imports from the plan's folder: the model
it builds has the converter the plan is priced with."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import consumer_torchtitan
import pytest

import parplan_gen
from parplan_gen.api import load_model
from parplan_gen.backends.torchtitan.reader import torchtitan_values
from parplan_gen.cost.layout import plan_loss_compiled
from parplan_gen.inputs.errors import InputError
from parplan_gen.render.mapping import load_mapping

from consumer_support import mismatches

MAPPING = Path(parplan_gen.__file__).parent.parent / "templates" / "mapping.yaml"
CASES = [  # model, GPUs, global batch, seq len, GPU, precision
    ("llama-3-70b", 64, 512, 4096, "h100", "bf16"),
    ("llama-3-70b", 256, 1024, 8192, "h100", "bf16"),
    ("llama-3-8b", 8, 64, 8192, "h100", "bf16"),
    ("llama-3-405b", 1024, 512, 8192, "h100", "fp8"),  # its config's (Float8Linear, rowwise)
    # the plan's own config function: Float8 rowwise on llama3_8b / llama3_70b, MXFP8 on
    # Blackwell, and llama3_405b without its converter
    ("llama-3-8b", 8, 64, 8192, "h100", "fp8"),
    ("llama-3-70b", 64, 512, 4096, "h100", "fp8"),
    ("llama-3-8b", 8, 64, 8192, "b200", "fp8"),
    ("llama-3-405b", 1024, 512, 8192, "h100", "bf16"),
]
PARAMS = ("model", "gpus", "batch", "seq", "gpu", "precision")
LAYOUT = ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs", "global_batch", "seq_len", "recompute")
# CUDA compute capability of each GPU (NVIDIA's CUDA GPUs list): what torchtitan's float8 and
# MXFP8 converters check.
CAPABILITY = {"h100": (9, 0), "b200": (10, 0)}


Planned = Callable[..., tuple[Any, Path]]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Planned:
    """planned(model, gpus, batch, seq, gpu, precision) -> the plan on torchtitan and its
    written torchtitan_run.sh, planned once per module (both tests read each case)."""
    root = tmp_path_factory.mktemp("torchtitan")

    @functools.cache
    def plan(
        model: str, gpus: int, batch: int, seq: int, gpu: str, precision: str
    ) -> tuple[Any, Path]:
        found = parplan_gen.plan(
            model, {"gpus": gpus, "gpu": gpu}, global_batch=batch, seq_len=seq,
            backend="torchtitan", precision=precision,
        )  # fmt: skip
        folder = root / f"{model}-{gpus}-{batch}-{seq}-{gpu}-{precision}"
        found.write(folder)
        return found, folder / "torchtitan_run.sh"

    return plan


@pytest.mark.parametrize(PARAMS, CASES)
def test_torchtitan_run_reads_back_to_the_plan(
    planned: Planned, model: str, gpus: int, batch: int, seq: int, gpu: str, precision: str
) -> None:
    plan, script = planned(model, gpus, batch, seq, gpu, precision)
    layout = plan.chosen.plan
    layers = load_model(model).pipeline_layers
    read = torchtitan_values(script, layers, load_mapping(MAPPING), num_gpus=gpus)
    assert {k: read.get(k, getattr(layout, k)) for k in LAYOUT} == {
        k: getattr(layout, k) for k in LAYOUT
    }
    assert read.get("zero_stage", layout.zero_stage) == layout.zero_stage
    assert read["precision"] == layout.precision


def test_hsdp_is_refused_by_the_reader(tmp_path: Path) -> None:
    script = tmp_path / "hsdp.sh"
    script.write_text(
        "torchrun -m torchtitan.train --module llama3 --config llama3_8b "
        "--parallelism.data_parallel_replicate_degree 2 "
        "--parallelism.data_parallel_shard_degree 4\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match="HSDP"):
        torchtitan_values(script, 32, load_mapping(MAPPING), num_gpus=8)


@pytest.mark.parametrize(PARAMS, CASES)
def test_torchtitan_parses_the_overrides(
    planned: Planned, model: str, gpus: int, batch: int, seq: int, gpu: str, precision: str
) -> None:
    plan, script = planned(model, gpus, batch, seq, gpu, precision)
    layout = plan.chosen.plan.model_dump()
    reading = consumer_torchtitan.torchtitan_reading(script, gpus, CAPABILITY[gpu])
    read = consumer_torchtitan.layout_read(reading)
    assert mismatches(read, {**layout, "seq_len": seq}) == []
    # The model torchtitan builds: float8 linears where the plan is fp8, with the recipe of
    # torchtitan 0.3's Float8LinearConverter (recipe_name "rowwise", components/quantization/
    # float8.py; torchao's Float8LinearConfig.from_recipe_name) or MXFP8 on SM 10.0 (mx.py),
    # the LM head 16-bit as rules/cost/compute.yaml prices it, float8 all-gather where the
    # plan prices FP8 parameters (never on torchtitan), compiled as torchtitan's float8 configs.
    built = consumer_torchtitan.float8_read(reading)
    fp8 = precision == "fp8"
    converted = ("MXFP8Linear" if gpu == "b200" else "Float8Linear") if fp8 else None
    assert built["converted"] == converted
    assert built["recipe"] == ("rowwise" if converted == "Float8Linear" else None)
    assert built["fsdp_float8_all_gather"] is layout["fp8_param_gather"] is False
    assert built["lm_head_16bit"]
    assert built["compile"]  # the loss in every plan, the model too in fp8 and with async TP
    assert built["model_compiled"] or not fp8
    # the loss compiled as the plan says (Layout.loss_compiled: torchtitan's plans compile it,
    # rules/cost/memory.yaml tt_loss_compiled prices it); the layout read above compares it too
    assert built["loss_compiled"] is layout["loss_compiled"] is plan_loss_compiled("torchtitan")
    written = script.with_name("parplan_torchtitan_config.py").is_file()
    assert written is (reading.module == "parplan_torchtitan_config")
    # torchtitan's own config builds the model as priced: llama3_8b / llama3_70b in bf16,
    # llama3_405b with Float8 rowwise
    own = (model == "llama-3-405b") == fp8 and gpu != "b200"
    assert written is not own
