"""One folder per backend (parplan_gen/backends/<name>/, docs/backends.md): its rules load with
the built-in ones in their order, its mapping section joins templates/mapping.yaml as one
mapping whose errors name the file they are in, a `--templates` folder overrides its templates
and sections by the names used before, its files are rendered without loading a rule set, and
its reader takes the rules of the check (`parplan_gen.check(from_...=)`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.inputs.errors import InputError
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.checks import RenderError
from parplan_gen.render.facts import facts
from parplan_gen.render.mapping import deepspeed_config, load_mapping
from parplan_gen.render.plan_files import render_plan
from parplan_gen.rules import ruleset
from parplan_gen.rules.ruleset import load_rules

from conftest import REPO, Run

BACKENDS_DIR = REPO / "parplan_gen" / "backends"
SHARED_MAPPING = REPO / "templates" / "mapping.yaml"
H100S = {"gpus": 8, "gpu": "h100"}
BACKENDS = ("accelerate", "deepspeed", "megatron", "torchtitan")  # with a mapping section


def where_from(file: str) -> str:
    """`megatron/constraints.yaml` of `.../backends/megatron/constraints.yaml`, `layout.yaml` of
    `.../rules/constraints/layout.yaml`."""
    path = Path(file)
    return f"{path.parent.name}/{path.name}" if path.parent.parent == BACKENDS_DIR else path.name


def test_the_constraints_keep_their_order_with_each_backends_own_in_its_folder() -> None:
    # A backend's rules load where rules/constraints/<name>.yaml sorts (inputs/resources.py):
    # Accelerate's and DeepSpeed's before the shared ones, Megatron-LM's layout rules after them
    # and before memory.fits, torchtitan's last. The first rule a candidate breaks counts its
    # rejection (a backend's own rules judge its plans only).
    files = [where_from(c.origin.where.file) for c in load_rules().constraints]
    assert list(dict.fromkeys(files)) == [
        "accelerate/constraints.yaml",
        "deepspeed/constraints.yaml",
        "graph.yaml",
        "layout.yaml",
        "megatron/constraints.yaml",
        "memory.yaml",
        "torchtitan/constraints.yaml",
    ]
    # every backend's own rule judges that backend's plans only, and no shared one is a backend's
    for constraint in load_rules().constraints:
        folder = where_from(constraint.origin.where.file).split("/")[0]
        expected = folder if folder in BACKENDS else None
        assert constraint.rule.backend == expected, constraint.rule.id


def test_rules_list_names_a_backends_rules_by_their_folder(cli: Callable[..., Run]) -> None:
    out = cli("rules", "list").out
    line = next(line for line in out.splitlines() if line.startswith("megatron.fsdp_no_pipeline"))
    assert "<built-in>/backends/megatron/constraints.yaml:" in line
    line = next(line for line in out.splitlines() if line.startswith("memory.fits"))
    assert "<built-in>/constraints/memory.yaml:" in line


# ---- the mapping: templates/mapping.yaml and each backend's section ---------------------------


def test_the_mapping_joins_each_backends_section() -> None:
    mapping = load_mapping(SHARED_MAPPING)
    assert list(mapping.data.megatron) == ["core_v0.16"]
    assert list(mapping.data.deepspeed) == ["0.19"]
    assert list(mapping.data.torchtitan) == ["0.3"]
    assert list(mapping.data.accelerate) == ["1.16"]
    assert mapping.doc_of(("megatron", "core_v0.16")).name.endswith(
        "backends/megatron/mapping.yaml"
    )
    assert mapping.doc_of(("nccl", "variables")).name == str(SHARED_MAPPING)


# The distribution pyproject.toml's `consumers` extra pins for each backend (the release CI runs
# its files against: tests/test_consumers*.py) and how the backend spells that release.
PINNED = {
    "megatron": ("megatron-core", "core_v{}"),
    "deepspeed": ("deepspeed", "{}"),
    "torchtitan": ("torchtitan", "{}"),
    "ddp": ("torch", "torch {}"),
    "accelerate": ("accelerate", "{}"),
}


def test_each_backend_follows_the_release_ci_pins() -> None:
    """A backend's one version label (Capabilities.version: what every plan on it names, its
    template folder and mapping section) is the major.minor of the release pyproject.toml pins
    for CI, e.g. deepspeed==0.19.8 -> `0.19`, megatron-core==0.16.1 -> `core_v0.16`."""
    import tomllib

    from parplan_gen.planning.backends import BACKENDS as CAPABILITIES

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    specs = project["project"]["optional-dependencies"]["consumers"]
    pins = {
        found.group(1): found.group(2)
        for spec in specs
        if (found := re.fullmatch(r"([A-Za-z0-9_.-]+)==(\d+\.\d+)(\.\d+)*", spec))
    }
    assert set(PINNED) == set(CAPABILITIES)
    mapping = load_mapping(SHARED_MAPPING)
    for name, (package, label) in PINNED.items():
        version = CAPABILITIES[name].version
        assert version == label.format(pins[package]), name
        if name in BACKENDS:  # its files: one mapping section and one template folder, this one
            assert list(getattr(mapping.data, name)) == [version], name
            folders = (BACKENDS_DIR / name / "templates").iterdir()
            assert [p.name for p in folders] == [version], name


def test_an_error_in_a_backends_own_section_names_its_file_and_line(tmp_path: Path) -> None:
    text = (BACKENDS_DIR / "deepspeed" / "mapping.yaml").read_text(encoding="utf-8")
    old = "{name: train_batch_size, key: plan.global_batch, hf_auto: true}"
    assert text.count(old) == 1
    line = text[: text.index(old)].count("\n") + 1
    own = tmp_path / "deepspeed" / "mapping.yaml"
    own.parent.mkdir()
    own.write_text(text.replace(old, old.replace("global_batch", "global_bach")), encoding="utf-8")
    mapping = load_mapping(SHARED_MAPPING, backends=[own])
    doc = parplan_gen.plan("llama-3-8b", H100S, global_batch=64, seq_len=2048).document
    with pytest.raises(
        RenderError, match=rf"deepspeed/mapping.yaml:{line}:\d+: .*plan.global_bach"
    ):
        deepspeed_config(mapping, "0.19", facts(doc, mapping.data), hf_trainer=False)


def test_a_backends_mapping_holds_its_own_section_only(tmp_path: Path) -> None:
    own = tmp_path / "deepspeed" / "mapping.yaml"
    own.parent.mkdir()
    own.write_text((BACKENDS_DIR / "megatron" / "mapping.yaml").read_text(), encoding="utf-8")
    with pytest.raises(RenderError, match=r"deepspeed/mapping.yaml:1:1: .*own section only"):
        load_mapping(SHARED_MAPPING, backends=[own])


@pytest.fixture(scope="module")
def doc_8b() -> PlanDocument:
    """A plan every backend runs (plain data parallelism): each writes its file."""
    pins = {"tp": 1, "pp": 1, "cp": 1, "zero_stage": 0, "distributed_optimizer": False}
    found = parplan_gen.plan("llama-3-8b", H100S, global_batch=64, seq_len=2048, pins=pins)
    assert {"ds_config.json", "megatron_args.sh", "torchtitan_run.sh"} <= set(
        render_plan(found.document)
    )
    return found.document


def user_folder(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_a_users_mapping_with_the_shared_sections_keeps_each_backends_own(tmp_path, doc_8b):
    folder = user_folder(tmp_path, {"mapping.yaml": SHARED_MAPPING.read_text(encoding="utf-8")})
    assert render_plan(doc_8b, templates_dir=folder) == render_plan(doc_8b)


def test_a_users_mapping_with_every_backends_section_renders_as_the_shipped_one(tmp_path, doc_8b):
    # the form of a mapping.yaml before the backends had folders: one file, every section
    own = [(BACKENDS_DIR / b / "mapping.yaml").read_text(encoding="utf-8") for b in BACKENDS]
    whole = "\n".join([SHARED_MAPPING.read_text(encoding="utf-8"), *own])
    folder = user_folder(tmp_path, {"mapping.yaml": whole})
    assert render_plan(doc_8b, templates_dir=folder) == render_plan(doc_8b)


def test_a_backend_section_of_a_users_mapping_replaces_that_backends(tmp_path, doc_8b):
    section = (BACKENDS_DIR / "megatron" / "mapping.yaml").read_text(encoding="utf-8")
    assert section.count("title: model") >= 1
    mapping = SHARED_MAPPING.read_text(encoding="utf-8") + section.replace(
        "title: model", "title: our model", 1
    )
    ours = render_plan(doc_8b, templates_dir=user_folder(tmp_path, {"mapping.yaml": mapping}))
    shipped = render_plan(doc_8b)
    assert (
        "our model" in ours["megatron_args.sh"] and "our model" not in shipped["megatron_args.sh"]
    )
    assert ours["ds_config.json"] == shipped["ds_config.json"]


def test_a_user_template_overrides_a_backends_by_its_name(tmp_path, doc_8b):
    shipped = render_plan(doc_8b)
    version = json.loads(shipped["plan.json"])["render"]["megatron_version"]
    folder = user_folder(tmp_path, {f"megatron/{version}/megatron_args.sh.j2": "# ours\n"})
    ours = render_plan(doc_8b, templates_dir=folder)
    assert ours["megatron_args.sh"] == "# ours\n"
    assert {k: v for k, v in ours.items() if k != "megatron_args.sh"} == {
        k: v for k, v in shipped.items() if k != "megatron_args.sh"
    }


def test_a_user_template_error_in_a_backends_template_names_its_line(tmp_path, doc_8b):
    version = render_plan(doc_8b)["plan.json"]
    version = json.loads(version)["render"]["megatron_version"]
    name = f"megatron/{version}/megatron_args.sh.j2"
    folder = user_folder(tmp_path, {name: "# fine\n# {{ megatron.no_such_key }}\n"})
    with pytest.raises(RenderError, match=rf"{name}:2: undefined value"):
        render_plan(doc_8b, templates_dir=folder)


@pytest.fixture(scope="module")
def doc_8b_fp8() -> PlanDocument:
    """An fp8 plan on torchtitan: its files start from the config function they write."""
    return parplan_gen.plan(
        "llama-3-8b", H100S, global_batch=64, seq_len=2048, backend="torchtitan", precision="fp8"
    ).document


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("def other():\n    pass\n",
         "rendered torchtitan_run.sh is invalid: --config llama3_8b_float8_rowwise is no function"
         " of parplan_torchtitan_config.py (it has other)"),
        ("def llama3_8b_float8_rowwise(:\n",
         "rendered parplan_torchtitan_config.py is invalid: line 1: Python syntax: invalid "
         "syntax"),
        ("x = {{ torchtitan.config_module.config ~ '()' | py_name }}\n",
         "'()' is not a Python name"),
    ],
)  # fmt: skip
def test_a_config_module_torchtitan_could_not_load_is_not_written(
    tmp_path: Path, doc_8b_fp8: PlanDocument, template: str, error: str
) -> None:
    assert "parplan_torchtitan_config.py" in render_plan(doc_8b_fp8)
    name = "torchtitan/0.3/parplan_torchtitan_config.py.j2"
    with pytest.raises(RenderError, match=re.escape(error)):
        render_plan(doc_8b_fp8, templates_dir=user_folder(tmp_path, {name: template}))


def test_a_bf16_plan_on_its_own_config_writes_no_config_module(doc_8b: PlanDocument) -> None:
    files = render_plan(doc_8b)
    assert "parplan_torchtitan_config.py" not in files
    assert "--module llama3\n    --config llama3_8b\n" in files["torchtitan_run.sh"]
    assert "PYTHONPATH" not in files["torchtitan_run.sh"]


# ---- no rule set loaded to render; the reader takes the check's --------------------------------


def test_torchtitan_files_render_without_loading_a_rule_set(monkeypatch) -> None:
    doc = parplan_gen.plan(
        "llama-3-8b", H100S, global_batch=64, seq_len=2048, backend="torchtitan"
    ).document

    def refused(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("rendering loaded the rules")

    monkeypatch.setattr(ruleset, "load_rules", refused)
    files = render_plan(doc)
    assert "--config llama3_8b" in files["torchtitan_run.sh"]


INTERLEAVED = (  # llama-3-8b: 32 layers + embedding + output = 34 weighted, 9 a stage: 4 stages
    "torchrun -m torchtitan.train --module llama3 --config llama3_8b "
    "--parallelism.data_parallel_shard_degree 4 --parallelism.pipeline_parallel_degree 2 "
    "--parallelism.pipeline_parallel_layers_per_stage 9 "
    "--parallelism.pipeline_parallel_schedule Interleaved1F1B "  # 2 stages a rank: looped
    "--parallelism.pipeline_parallel_microbatch_size 1 "
    "--training.local_batch_size 8 --training.global_batch_size 32 --training.seq_len 2048\n"
)


def test_the_torchtitan_reader_takes_the_checks_rules(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text(INTERLEAVED, encoding="utf-8")
    report = parplan_gen.check("llama-3-8b", H100S, from_torchtitan=script)
    assert (report.estimate.plan.pp, report.estimate.plan.vpp) == (2, 2)
    assert report.estimate.backend is not None and report.estimate.backend.name == "torchtitan"
    overlay = tmp_path / "rules"
    overlay.mkdir()  # 32 + 12 = 44 weighted layers, 9 a stage: 5 stages, which pp 2 does not divide
    (overlay / "weights.yaml").write_text('formulas:\n  tt_weighted_layers: "model.layers + 12"\n')
    with pytest.raises(InputError, match="5 pipeline stages do not divide by pp 2"):
        parplan_gen.check("llama-3-8b", H100S, from_torchtitan=script, rules=[overlay])


def test_check_from_a_file_in_the_api_is_the_commands(tmp_path: Path, cli) -> None:
    plan = parplan_gen.plan("llama-3-8b", H100S, global_batch=64, seq_len=2048, backend="megatron")
    plan.write(tmp_path / "plan")
    script = tmp_path / "plan" / "megatron_args.sh"
    report = parplan_gen.check("llama-3-8b", H100S, from_megatron=script)
    assert report.estimate.plan == plan.chosen.plan
    run = cli(
        "check", "llama-3-8b", "--gpus", 8, "--gpu", "h100", "--from-megatron", script, "--json"
    )
    assert json.loads(json.dumps(report.contract())) == run.json()
    # a field given changes what the file says, as a flag does
    changed = parplan_gen.check("llama-3-8b", H100S, {"mbs": 2}, from_megatron=script)
    assert changed.estimate.plan.mbs == 2


def test_check_needs_a_layout_or_a_file() -> None:
    with pytest.raises(InputError, match="give a layout, or a file"):
        parplan_gen.check("llama-3-8b", H100S)
