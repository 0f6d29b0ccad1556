"""Issue 31, class 4: inputs that once ended in a traceback, each a class refused in one line.

Through the real command line (`main`), every case ends with its exit code, nothing on stdout,
exactly one printable `parplan: error: FILE:LINE:COL: key.path: ...` line on stderr naming the
file and the field, and nothing written:

* numbers a file holds that no float can (an HF config's `1` and 400 zeros, or `1e400`, which
  JSON parses as inf; any field, nested too): models/hf_config.py over inputs/number_text.py;
* ONNX tensors of thousands of dimensions, or dimensions whose product no int64 holds (or a
  weight's negative one): models/onnx_attrs.py;
* a `--rules` overlay whose default memory headroom is negative or the whole GPU:
  planning/pins.py, at the overlay's line;
* a plan.json whose budget gives a cost without its price (or the reverse):
  planning/document.py;
* a template mapping whose chart sizes are beyond any canvas: render/mapping_schema.py;
* Ctrl-C anywhere, late ones included (printing, rendering, leaving the run): exit 130 and
  `parplan: error: interrupted` (cli/main.py).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.cli import entry
from parplan_gen.cli.main import main

from hostile_support import REPO, check_one_line, hang_guard, snapshot

PLAN = ["--gpus", "8", "--gpu", "h100", "--global-batch", "8"]
HUGE = "1" + "0" * 400  # a JSON integer no float holds (10^400)
TOO_LARGE = "10^400 is too large (a number is at most 1.8e+308)"
NOT_FINITE = "inf is not a finite number"


def position(text: str, needle: str) -> str:
    """`LINE:COL` of the first `needle` in `text` (1-based), as errors show it."""
    at = text.index(needle)
    line = text.count("\n", 0, at) + 1
    return f"{line}:{at - text.rfind(chr(10), 0, at)}"


def run(
    folder: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> tuple[int, str, str]:
    """`parplan ARGV` in `folder`; the folder must be as it was after."""
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    capsys.readouterr()
    with hang_guard():
        code = main(argv)
    out, err = capsys.readouterr()
    assert snapshot(folder) == before, "a refused run wrote something"
    return code, out, err


def refused(
    folder: Path, argv: list[str], stderr: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, out, err = run(folder, argv, monkeypatch, capsys)
    check_one_line({"exit": 1, "stderr": stderr}, code, out, err)


# ---- numbers no float holds, in an HF config.json -------------------------------------------


def hf_config(**raw: str) -> str:
    """examples/hf/llama-3-8b.json with each key of `raw` set to that JSON text, as written."""
    data = json.loads((REPO / "examples/hf/llama-3-8b.json").read_text(encoding="utf-8"))
    data |= {key: f"@{key}@" for key in raw}
    text = json.dumps(data, indent=2)
    for key, literal in raw.items():
        text = text.replace(f'"@{key}@"', literal)
    return text


HF_CASES = {
    "rope_theta_int_of_400_digits": ({"rope_theta": HUGE}, "rope_theta", TOO_LARGE),
    "rope_theta_1e400": ({"rope_theta": "1e400"}, "rope_theta", NOT_FINITE),
    "negative_rope_theta_1e400": ({"rope_theta": "-1e400"}, "rope_theta", "-" + NOT_FINITE),
    "norm_eps_1e400": ({"rms_norm_eps": "1e400"}, "rms_norm_eps", NOT_FINITE),
    "norm_eps_int_of_400_digits": ({"rms_norm_eps": HUGE}, "rms_norm_eps", TOO_LARGE),
    "dropout_1e400": ({"attention_dropout": "1e400"}, "attention_dropout", NOT_FINITE),
    "a_field_parplan_does_not_read": (
        {"initializer_range": "1e400"}, "initializer_range", NOT_FINITE,
    ),
    "rope_scaling_factor": (
        {"rope_scaling": '{"rope_type": "llama3", "factor": ' + HUGE + "}"},
        "rope_scaling.factor",
        TOO_LARGE,
    ),
    "a_list_item": ({"architectures": "[1e400]"}, "architectures[0]", NOT_FINITE),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HF_CASES), ids=list(HF_CASES))
def test_an_hf_number_no_float_holds_is_refused_at_its_key(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    raw, path, problem = HF_CASES[case]
    text = hf_config(**raw)
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    key = path.split(".")[0].split("[")[0]
    where = position(text, f'"{key}"')
    if "." in path:  # the nested key's own position
        where = position(text, f'"{path.split(".")[1]}"')
    elif "[" in path:
        where = position(text, raw[key][1:])
    stderr = f"config.json:{where}: {path}: {problem}"
    for command in (["plan", "config.json", *PLAN], ["estimate", "config.json", *PLAN]):
        refused(tmp_path, command, stderr, monkeypatch, capsys)


def test_an_hf_float_that_underflows_to_zero_is_refused_at_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    text = hf_config(rms_norm_eps="1e-400")
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    where = position(text, '"rms_norm_eps"')
    stderr = (
        f"config.json:{where}: rms_norm_eps: training setting norm_eps: Input should be "
        "greater than 0 (got 0.0)"
    )
    refused(tmp_path, ["plan", "config.json", *PLAN], stderr, monkeypatch, capsys)


# ---- ONNX shapes no int64 holds --------------------------------------------------------------


def onnx_model(path: Path, shape: list[int], weight: list[int] | None = None) -> None:
    """A Relu of input `x` of `shape` (with `weight`: a MatMul of x and an initializer `w` of
    that shape, holding no data), saved to `path` (skips the test without `onnx`)."""
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    inits = []
    if weight is None:
        nodes = [h.make_node("Relu", ["x"], ["y"], name="r")]
    else:
        nodes = [h.make_node("MatMul", ["x", "w"], ["y"], name="m")]
        w = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT)
        w.dims.extend(weight)
        inits.append(w)
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        inits,
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))


ELEMENTS = "elements (at most 2^63 - 1: ONNX sizes are int64)"
ONNX_CASES = {
    "rank_of_5000": ([2] * 5000, None, "tensor 'x' has 5,000 dimensions (at most 64)"),
    "rank_of_5000_ones": ([1] * 5000, None, "tensor 'x' has 5,000 dimensions (at most 64)"),
    "dims_whose_product_overflows": (
        [1, 2**62, 2**62], None, f"tensor 'x' has more than 10^37 {ELEMENTS}",
    ),
    "a_weight_of_2_62_cubed": (
        [1, 2**62], [2**62, 2**62, 2**62], f"tensor 'w' has more than 10^55 {ELEMENTS}",
    ),
    "a_weight_of_a_negative_dimension": (
        [1, 4], [4, -5], "tensor 'w' has a negative dimension (-5)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ONNX_CASES), ids=list(ONNX_CASES))
def test_an_onnx_shape_no_int64_holds_is_refused(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    shape, weight, problem = ONNX_CASES[case]
    onnx_model(tmp_path / "m.onnx", shape, weight)
    for command in (["analyze", "m.onnx"], ["plan", "m.onnx", *PLAN]):
        refused(tmp_path, command, f"m.onnx: {problem}", monkeypatch, capsys)


def test_an_onnx_shape_of_2_62_elements_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    onnx_model(tmp_path / "m.onnx", [1, 2**62])
    code, out, err = run(tmp_path, ["analyze", "m.onnx", "--json"], monkeypatch, capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["opportunities"]


# ---- a --rules overlay's default headroom ----------------------------------------------------

HEADROOM = "memory_headroom_share_default gives a memory headroom of"
VALID = "of the tensors (valid: from 0 to below 1)"
HEADROOM_CASES = {
    "negative_share": ("memory_headroom_share_default", "-0.5", f"{HEADROOM} -0.5 {VALID}"),
    "the_whole_tensors": ("memory_headroom_share_default", "1", f"{HEADROOM} 1 {VALID}"),
    "the_gpu_in_bytes": (  # a share, not bytes (the default before it was a share)
        "memory_headroom_share_default",
        "cluster.gpu_memory * 0.1",
        f"{HEADROOM} 8.58993e+09 {VALID}",
    ),
}


@pytest.mark.parametrize("case", list(HEADROOM_CASES), ids=list(HEADROOM_CASES))
def test_an_overlay_headroom_out_of_range_is_refused_at_its_line(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    name, formula, problem = HEADROOM_CASES[case]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "h.yaml").write_text(f'formulas:\n  {name}: "{formula}"\n', encoding="utf-8")
    stderr = f"r/h.yaml:2:3: formulas.{name}: {problem}"
    refused(tmp_path, ["plan", "llama-3-8b", *PLAN, "--rules", "r"], stderr, monkeypatch, capsys)


# ---- plan.json: a budget's price and cost ---------------------------------------------------


@pytest.fixture(scope="module")
def priced_plan() -> dict[str, Any]:
    """plan.json of `plan llama-3-8b ... --tokens 1T --gpu-hour-price 2.5`, parsed."""
    from parplan_gen.api import plan

    made = plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=8, tokens="1T",
                gpu_hour_price=2.5)  # fmt: skip
    data = json.loads(made.document.to_json())
    assert data["budget"]["gpu_hour_price"] == 2.5
    return data


PRICE_CASES = {
    "price_null": ({"gpu_hour_price": None}, "gpu_hour_price", "price_source"),
    "cost_null": ({"cost": None}, "cost", "gpu_hour_price"),
    "source_null": ({"price_source": None}, "price_source", "gpu_hour_price"),
    "only_a_cost": ({"gpu_hour_price": None, "price_source": None}, "gpu_hour_price", "cost"),
}


@pytest.mark.parametrize("case", list(PRICE_CASES), ids=list(PRICE_CASES))
def test_a_budget_price_without_its_cost_is_refused(
    case: str,
    priced_plan: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    changes, null, given = PRICE_CASES[case]
    data = json.loads(json.dumps(priced_plan))
    data["budget"] |= changes
    text = json.dumps(data, indent=2)
    (tmp_path / "plan.json").write_text(text, encoding="utf-8")
    where = position(text, f'"{null}": null')
    stderr = (
        f"plan.json:{where}: budget.{null}: is null, but "
        f"budget.{given} is given (valid: gpu_hour_price, price_source, cost all given, or all "
        "null when no price was)"
    )
    refused(tmp_path, ["render", "plan.json", "--out", "o"], stderr, monkeypatch, capsys)


def test_a_budget_without_a_price_still_renders(
    priced_plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    data = json.loads(json.dumps(priced_plan))
    data["budget"] |= dict.fromkeys(("gpu_hour_price", "price_source", "cost"))
    (tmp_path / "plan.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["render", "plan.json", "--out", "o"]) == 0
    assert "| cost |" not in (tmp_path / "o" / "plan.md").read_text(encoding="utf-8")


# ---- template mapping: chart sizes ---------------------------------------------------------


def mapping_with(key: str, value: str) -> tuple[str, str]:
    """templates/mapping.yaml with `report.chart.KEY` set to `value`, and that line's place."""
    text = (REPO / "templates" / "mapping.yaml").read_text(encoding="utf-8")
    chart = text.index("\n  chart:\n", text.index("\nreport:\n"))
    match = re.compile(rf"\n    {key}: [0-9]+").search(text, chart)
    assert match is not None
    text = text[: match.start()] + f"\n    {key}: {value}" + text[match.end() :]
    line = text.count("\n", 0, match.start() + 1) + 1
    return text, f"{line}:5"  # the key, after its indent of four spaces


TOO_LARGE = "10^400 is too large (a number is at most 1.8e+308)"  # number_text.number_problem
BEYOND_CANVAS = "Input should be less than or equal to 32767"
CHART_CASES = {
    "width_of_400_digits": ("width", HUGE, TOO_LARGE),
    "font_size_of_400_digits": ("font_size", HUGE, TOO_LARGE),
    "plot_height_of_a_billion": ("plot_height", "1000000000", f"{BEYOND_CANVAS} (got 1000000000)"),
    "width_of_33000": ("width", "33000", f"{BEYOND_CANVAS} (got 33000)"),
}


@pytest.mark.parametrize("case", list(CHART_CASES), ids=list(CHART_CASES))
def test_a_chart_size_beyond_any_canvas_is_refused(
    case: str,
    priced_plan: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    key, value, problem = CHART_CASES[case]
    text, where = mapping_with(key, value)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "mapping.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(priced_plan, indent=2), encoding="utf-8")
    stderr = f"t/mapping.yaml:{where}: report.chart.{key}: {problem}"
    for command in (
        ["render", "plan.json", "--out", "o", "--templates", "t"],
        ["plan", "llama-3-8b", *PLAN, "--out", "o", "--templates", "t"],
    ):
        refused(tmp_path, command, stderr, monkeypatch, capsys)


@pytest.mark.parametrize("value", [HUGE, "1e400", "-.inf"])
def test_a_mapping_constant_no_float_holds_is_refused_at_its_key(
    value: str,
    priced_plan: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    """A constant of templates/mapping.yaml goes into a backend's file: one no float holds is
    an error at the mapping's key, not a 400-digit clipping value or a file that fails to
    parse (before: the error named ds_config.json)."""
    text = (REPO / "templates" / "mapping.yaml").read_text(encoding="utf-8")
    old = "  train.gradient_clipping:\n    value: 1.0\n"
    assert old in text
    line = text.count("\n", 0, text.index(old)) + 2
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "mapping.yaml").write_text(
        text.replace(old, f"  train.gradient_clipping:\n    value: {value}\n"), encoding="utf-8"
    )
    (tmp_path / "plan.json").write_text(json.dumps(priced_plan, indent=2), encoding="utf-8")
    problem = (
        TOO_LARGE
        if value == HUGE
        else f"{float(value.replace('.inf', 'inf'))!r} is not a finite number"
    )
    stderr = f"t/mapping.yaml:{line}:5: defaults.train.gradient_clipping.value: {problem}"
    refused(
        tmp_path,
        ["render", "plan.json", "--out", "o", "--templates", "t"],
        stderr,
        monkeypatch,
        capsys,
    )


# ---- Ctrl-C ----------------------------------------------------------------------------------


def interrupt(*_args: object, **_kwargs: object) -> Any:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupted_on_leaving() -> Iterator[None]:
    yield
    raise KeyboardInterrupt


# Where Ctrl-C lands: (module, attribute) replaced by one that raises KeyboardInterrupt.
LATE_POINTS: dict[str, tuple[str, str, Callable[..., Any]]] = {
    "building_the_parser": ("parplan_gen.cli.main", "build_parser", interrupt),
    "the_text_view": ("parplan_gen.cli.plan", "plan_text", interrupt),
    "printing_the_text_view": ("parplan_gen.cli.textview", "printable_lines", interrupt),
    "printing_json": ("parplan_gen.cli.plan", "print_json", interrupt),
    "rendering_a_chart": ("parplan_gen.render.report", "memory_chart", interrupt),
    "leaving_the_run": ("parplan_gen.cli.main", "gc_paused", interrupted_on_leaving),
}
LATE_ARGV = {
    "printing_json": [*PLAN, "--json"],
    "rendering_a_chart": [*PLAN, "--out", "o"],
}


@pytest.mark.parametrize("point", list(LATE_POINTS), ids=list(LATE_POINTS))
def test_ctrl_c_anywhere_ends_in_one_line_and_130(
    point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    module, name, replacement = LATE_POINTS[point]
    monkeypatch.setattr(f"{module}.{name}", replacement)
    argv = ["plan", "llama-3-8b", *LATE_ARGV.get(point, PLAN)]
    code, out, err = run(tmp_path, argv, monkeypatch, capsys)
    if point == "leaving_the_run":  # the view was printed whole: only the exit is interrupted
        assert out.startswith("llama-3-8b")
        out = ""
    check_one_line({"exit": 130, "stderr": "interrupted"}, code, out, err)


def test_interrupted_is_the_shells_status_for_sigint() -> None:
    assert entry.INTERRUPTED == 130


class _InterruptedImport(importlib.abc.MetaPathFinder):
    """A finder that stops the import of the command line as Ctrl-C would."""

    def find_spec(self, name: str, *_args: Any) -> None:
        if name == "parplan_gen.cli.main":
            raise KeyboardInterrupt


def test_ctrl_c_while_the_command_line_is_imported_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The console script (pyproject.toml: cli/entry.py run) imports the command line itself:
    Ctrl-C during those imports is the same one line and 130."""
    monkeypatch.delitem(sys.modules, "parplan_gen.cli.main")
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport(), *sys.meta_path])
    assert entry.run() == 130
    assert capsys.readouterr() == ("", "parplan: error: interrupted\n")
