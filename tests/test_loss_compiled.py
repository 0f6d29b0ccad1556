"""torchtitan's compiled loss (Layout.loss_compiled): every torchtitan plan writes
`--compile.enable` with `loss` in `--compile.components`; `check --from-torchtitan` reads what a
line runs (its config's compile, a written config function's `config.compile.enable`, the line's
switches and components) and prices the loss as it runs.

The figures, from the kernels (rules/cost/memory.yaml, its sources), not from the cost model:
  kept per token and vocabulary entry by torchtitan 0.3's chunked loss at tp 1: eager, the fp32
    log-softmax and the nll backward's buffers (aten nll_loss_backward, _log_softmax_backward_data:
    12) plus the chunk's 16-bit logits (2); compiled, the 16-bit logits and one 16-bit gradient
    buffer (inductor's fused kernel, benchmarks/compiled_loss_memory.py: 4);
  the chunk is 1/8 of a micro-batch's tokens (components/loss.py ChunkedLossWrapper num_chunks 8).
Llama 3 8B: vocabulary 128,256; at seq 8192, mbs 1 a chunk has 1,024 tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import parplan_gen
from parplan_gen.backends.torchtitan.configs import config_registry
from parplan_gen.backends.torchtitan.reader import torchtitan_values
from parplan_gen.inputs.errors import InputError
from parplan_gen.render.mapping import load_mapping

from conftest import REPO, Run
from consumer_support import consumer

MAPPING = REPO / "templates" / "mapping.yaml"
H100_8 = {"gpus": 8, "gpu": "h100"}
VOCAB, CHUNK_TOKENS = 128_256, 8_192 // 8
EAGER_BYTES, COMPILED_BYTES = 12 + 2, 4  # per token and vocabulary entry, at tp 1
LAYOUT = {"mbs": 1, "global_batch": 64, "seq_len": 8_192, "zero_stage": 3}
LAUNCH = "torchrun -m torchtitan.train --module llama3 --config {config} {flags}\n"


def _line(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.sh"
    path.write_text(text, encoding="utf-8")
    return path


def _read(path: Path) -> dict[str, Any]:
    return torchtitan_values(path, 32, load_mapping(MAPPING), num_gpus=8)


# ---- what the reader takes from a line ------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "flags", "compiled"),
    [
        ("llama3_8b", "", False),  # CompileConfig.enable defaults to False
        ("llama3_8b", "--compile.enable", True),  # components default ["model", "loss"]
        ("llama3_8b", "--compile.enable --compile.components model", False),
        ("llama3_8b", "--compile.enable --compile.components=loss", True),
        ("llama3_8b", "--compile.enable --compile.components model,loss", True),
        ("llama3_8b", "--compile.enable --compile.no-enable", False),  # the last one wins
        ("llama3_405b", "", True),  # config_registry.py llama3_405b: CompileConfig(enable=True)
        ("llama3_405b", "--compile.no_enable --compile.no_enable_async_tensor_parallel", False),
    ],
)  # fmt: skip
def test_the_reader_takes_the_compile_a_line_runs(
    tmp_path: Path, config: str, flags: str, compiled: bool
) -> None:
    path = _line(tmp_path, LAUNCH.format(config=config, flags=flags))
    assert _read(path)["loss_compiled"] is compiled


def test_the_compile_defaults_are_torchtitans() -> None:
    default = consumer("torchtitan.config.configs").CompileConfig()
    registry = config_registry()
    assert registry.default("compile") is default.enable
    assert list(registry.default("compile_components")) == default.components


def _written(tmp_path: Path, body: str, flags: str = "") -> Path:
    (tmp_path / "parplan_torchtitan_config.py").write_text(
        "from torchtitan.models.llama3.config_registry import llama3_8b\n\n\n" + body,
        encoding="utf-8",
    )
    line = "torchrun -m torchtitan.train --module parplan_torchtitan_config --config f {flags}\n"
    return _line(tmp_path, line.format(flags=flags))


COMPILES = "def f():\n    c = llama3_8b()\n    c.compile.enable = True\n    return c\n"


def test_a_written_functions_compile_is_read_and_the_line_wins(tmp_path: Path) -> None:
    assert _read(_written(tmp_path, COMPILES))["loss_compiled"] is True
    assert _read(_written(tmp_path, COMPILES, "--compile.no-enable"))["loss_compiled"] is False
    components = COMPILES.replace(
        "    return c", "    c.compile.components = ['model']\n    return c"
    )
    assert _read(_written(tmp_path, components))["loss_compiled"] is False


def test_a_compile_the_reader_cannot_see_is_an_error_naming_the_line(tmp_path: Path) -> None:
    body = "def f():\n    c = llama3_8b()\n    c.compile.enable = FLAG\n    return c\n"
    with pytest.raises(InputError) as caught:
        _read(_written(tmp_path, body))
    where = tmp_path / "parplan_torchtitan_config.py"
    assert str(caught.value) == f"{where}:6: compile.enable: FLAG: not True or False"


# ---- what it costs, and what the files say --------------------------------------------------


def _activations(**layout: Any) -> int:
    found = parplan_gen.estimate("llama-3-8b", H100_8, {**LAYOUT, **layout}, backend="torchtitan")
    return found.estimate.memory.activations


def test_an_eager_loss_keeps_ten_more_bytes_an_entry_of_one_chunk() -> None:
    for precision in ("bf16", "fp8"):
        compiled = _activations(precision=precision)
        assert compiled == _activations(precision=precision, loss_compiled=True)
        eager = _activations(precision=precision, loss_compiled=False)
        assert eager - compiled == (EAGER_BYTES - COMPILED_BYTES) * CHUNK_TOKENS * VOCAB


def test_another_backend_refuses_a_compiled_loss() -> None:
    found = parplan_gen.estimate(
        "llama-3-8b", H100_8, {**LAYOUT, "loss_compiled": True}, backend="megatron"
    )
    assert [v.reason for v in found.violations if v.rule_id == "backend.capabilities"] == [
        "Megatron-LM does not compile the loss (loss_compiled)"
    ]


@pytest.fixture(scope="module")
def fp8_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fp8") / "plan"
    parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=8_192, backend="torchtitan",
        precision="fp8", pins={"tp": 1},
    ).write(out)  # fmt: skip
    return out


def test_an_fp8_plan_compiles_the_model_and_the_loss(fp8_plan: Path) -> None:
    script = (fp8_plan / "torchtitan_run.sh").read_text(encoding="utf-8")
    assert "    --compile.enable\n    --compile.components model,loss\n" in script
    assert _read(fp8_plan / "torchtitan_run.sh")["loss_compiled"] is True


def test_check_prices_an_fp8_line_without_compile_eager(
    fp8_plan: Path, tmp_path: Path, cli: Callable[..., Run]
) -> None:
    """The plan's own line, its compile switched off after the written function turned it on:
    the loss runs eager, and check prices it so (it used to price it compiled)."""
    for name in ("torchtitan_run.sh", "parplan_torchtitan_config.py"):
        (tmp_path / name).write_bytes((fp8_plan / name).read_bytes())
    script = tmp_path / "torchtitan_run.sh"
    text = script.read_text(encoding="utf-8")
    off = "    --compile.no-enable\n"
    script.write_text(
        text.replace("    --compile.enable\n    --compile.components model,loss\n", off),
        encoding="utf-8",
    )
    cluster = ("--gpus", 8, "--gpu", "h100")
    as_planned = cli("check", "llama-3-8b", *cluster, "--from-torchtitan",
                     fp8_plan / "torchtitan_run.sh", "--json").json()  # fmt: skip
    eager = cli("check", "llama-3-8b", *cluster, "--from-torchtitan", script, "--json").json()
    assert (as_planned["plan"]["loss_compiled"], eager["plan"]["loss_compiled"]) == (True, False)
    assert as_planned["plan"]["precision"] == eager["plan"]["precision"] == "fp8"
    mbs = eager["plan"]["mbs"]
    more = eager["memory"]["activations"] - as_planned["memory"]["activations"]
    assert more == (EAGER_BYTES - COMPILED_BYTES) * mbs * CHUNK_TOKENS * VOCAB
    text_view = cli("check", "llama-3-8b", *cluster, "--from-torchtitan", script).out
    assert " loss_compiled=off, global batch " in text_view


def test_compare_takes_the_loss_compile_as_a_layout_word(cli: Callable[..., Run]) -> None:
    run = cli("compare", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--global-batch", 64,
              "--seq-len", 8_192, "--backend", "torchtitan", "--no-runner-up",
              "--layout", "dp=8 zero=3 mbs=1 loss_compiled=off backend=torchtitan",
              "--json")  # fmt: skip
    assert run.code == 0, run.err
    chosen, yours = run.json()["columns"]
    assert chosen["estimate"]["plan"]["loss_compiled"] is True
    assert yours["estimate"]["backend"]["name"] == "torchtitan"
    assert yours["estimate"]["plan"]["loss_compiled"] is False


# ---- what torchtitan refuses is refused -----------------------------------------------------


@pytest.mark.parametrize(
    ("config", "flags", "message"),
    [
        ("llama3_8b", "--compile.enable=False",
         "--compile.enable is a switch: it takes no value (--compile.enable=False)"),
        ("llama3_8b", "--compile.no-enable True",
         "--compile.no_enable is a switch: it takes no value (--compile.no-enable True)"),
        ("llama3_8b", "--compile.enable --compile.components model loss",
         "--compile.components model loss: torchtitan reads the parts as one comma-separated "
         "word (model,loss)"),
        ("llama3_8b", "--compile.enable --compile.components",
         "--compile.components needs a value: the parts, comma-separated (model,loss)"),
        # llama3_405b turns async TP on: CompileConfig.__post_init__ refuses it without the model
        ("llama3_405b", "--compile.no-enable",
         "Async TP requires 'model' in --compile.components and --compile.enable "
         "(CompileConfig.__post_init__)"),
        ("llama3_405b", "--compile.components loss",
         "Async TP requires 'model' in --compile.components and --compile.enable "
         "(CompileConfig.__post_init__)"),
    ],
)  # fmt: skip
def test_what_torchtitan_refuses_is_refused_naming_the_flag(
    tmp_path: Path, config: str, flags: str, message: str
) -> None:
    path = _line(tmp_path, LAUNCH.format(config=config, flags=flags))
    with pytest.raises(InputError) as caught:
        _read(path)
    assert str(caught.value).split(": ", 2)[2] == message
    assert str(caught.value).startswith(f"{path}:1: --compile.")


@pytest.mark.parametrize(
    ("body", "compiled"),
    [
        # a CompileConfig of its own: what it leaves out is CompileConfig's default
        ("    c.compile = CompileConfig(enable=True, components=['loss'])\n", True),
        ("    c.compile = CompileConfig(enable=True, components=['model'])\n", False),
        ("    c.compile = CompileConfig(components=['loss'])\n", False),
        ("    c.compile.components = ('model', 'loss')\n    c.compile.enable = True\n", True),
    ],
)  # fmt: skip
def test_a_written_function_may_set_its_own_compile_config(
    tmp_path: Path, body: str, compiled: bool
) -> None:
    function = f"def f():\n    c = llama3_8b()\n{body}    return c\n"
    assert _read(_written(tmp_path, function))["loss_compiled"] is compiled


@pytest.mark.parametrize(
    "body",
    [
        "    c.compile.enable = True\n    c.compile.components.remove('loss')\n",
        "    d = llama3_8b()\n    d.compile.enable = True\n",  # not the config it returns
        "    if False:\n        c.compile.enable = True\n",  # not at its top level
        "    c.compile.components += ['loss']\n",
    ],
)
def test_a_compile_change_parplan_cannot_follow_is_an_error(tmp_path: Path, body: str) -> None:
    function = f"def f():\n    c = llama3_8b()\n{body}    return c\n"
    with pytest.raises(InputError) as caught:
        _read(_written(tmp_path, function))
    assert (
        "parplan reads compile settings assigned at the function's top level to the config "
        "it returns, as `c.compile.enable = True` or `c.compile = CompileConfig(...)`"
        in str(caught.value)
    )


# ---- a plan.json that says otherwise is written as it says -----------------------------------


def test_a_layout_that_leaves_the_loss_eager_writes_no_compile(
    tmp_path: Path, cli: Callable[..., Run]
) -> None:
    """A BF16 tp 1 plan compiles the loss alone (the model stays eager); its plan.json with
    loss_compiled false renders a line that compiles nothing, and check reads it so."""
    out = tmp_path / "plan"
    parplan_gen.plan(
        "llama-3-8b", H100_8, global_batch=64, seq_len=8_192, backend="torchtitan",
        pins={"tp": 1},
    ).write(out)  # fmt: skip
    script = (out / "torchtitan_run.sh").read_text(encoding="utf-8")
    assert "    --compile.enable\n    --compile.components loss\n" in script
    doc = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    doc["chosen"]["plan"]["loss_compiled"] = False
    edited = tmp_path / "eager.json"
    edited.write_text(json.dumps(doc), encoding="utf-8")
    run = cli("render", edited, "--out", tmp_path / "eager")
    assert run.code == 0, run.err
    eager = tmp_path / "eager" / "torchtitan_run.sh"
    assert "--compile" not in eager.read_text(encoding="utf-8")
    assert _read(eager)["loss_compiled"] is False
