"""Hostile values on their way into the files a shell reads, and hostile template folders
(tests/hostile/shell*.yaml).

A value from an input file reaches nccl.env, megatron_args.sh and the launchers through one
quoting function for its place (parplan_gen.render.shell_quote): a comment, an argument, an nccl.env
assignment; names are reduced to a safe set. Every rendered plan is then run the way a user
runs it, in a bash with an empty environment whose PATH holds only fake `torchrun`, `srun`,
`scontrol` that log their arguments (and the real `bash`, `dirname`, `head` the scripts use):
any other command is logged too (bash's command_not_found_handle), and the test checks that
only the expected commands ran, with the expected arguments, that nothing printed INJECTED
and no MARKER file was made, and that sourcing nccl.env sets exactly its NAME=VALUE lines.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_render import rendered_cases

from parplan_gen.cli.main import main
from parplan_gen.cost.launch_site import LaunchSettings
from parplan_gen.planning import document as plan_document
from parplan_gen.planning.document import (
    PlanDocument,
    PlanDocumentError,
    load_plan_document,
)
from parplan_gen.render.checks import RenderError
from parplan_gen.render.mapping import COMMUNICATION
from parplan_gen.render.plan_files import render_plan
from parplan_gen.render.shell_quote import (
    argument,
    assignment,
    comment,
    python_literal,
    python_name,
)
from parplan_gen.rules.engine import Proposal

REPO = Path(__file__).resolve().parent.parent
HOSTILE = REPO / "tests" / "hostile"


def corpus(name: str) -> list[Any]:
    cases = YAML(typ="safe").load((HOSTILE / name).read_text(encoding="utf-8"))
    return [pytest.param(case, id=case["id"]) for case in cases]


VALUES = corpus("shell.yaml")
TEMPLATES = corpus("shell_templates.yaml")
COMMAND_LINES = corpus("shell_cli.yaml")
PLANS = {"transformer": "dense_multinode", "graph": "graph_channel_parallel"}
MARKER, INJECTED = "MARKER", "INJECTED"
BASH = shutil.which("bash")
REAL_TOOLS = ("bash", "dirname", "head")  # what the rendered scripts run besides the fakes
FAKES = {  # name -> what it does after logging its arguments
    "torchrun": "",
    "scontrol": "echo node-0",
    "srun": 'while [[ $1 == --* ]]; do shift; done\nexec "$@"',  # runs its command
}
LOGGED = "printf '%s\\0' {command} >> \"$LOG\"; printf '\\n' >> \"$LOG\""  # one record a line
UNEXPECTED = "UNEXPECTED:"  # logged before a command that is not found
NOT_FOUND = LOGGED.format(command='"' + UNEXPECTED + '$1" "${@:2}"')
TIMEOUT_S = 30  # a hang guard: each script starts a handful of processes in milliseconds
TRAINING = ("train.py", "--deepspeed", "ds_config.json")
MEGATRON_CHECKOUT = "megatron-lm"  # a stand-in Megatron-LM checkout (MEGATRON_LM_DIR)

needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")


# ---- the sandboxed bash ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with logging fakes and links to the few real tools the scripts use."""
    folder = tmp_path_factory.mktemp("bin")
    for name, then in FAKES.items():
        script = folder / name
        logged = LOGGED.format(command=f'"{name}" "$@"')
        script.write_text(f"#!{BASH}\n{logged}\n{then}\n", encoding="utf-8")
        script.chmod(0o755)
    for tool in REAL_TOOLS:
        real = shutil.which(tool)
        assert real is not None, f"{tool} is not installed"
        (folder / tool).symlink_to(real)
    return folder


def sandbox_env(fake_bin: Path, log: Path, run: Path) -> dict[str, str]:
    """Nothing but PATH (the fakes), the log, and what a user or SLURM would set."""
    return {
        "PATH": str(fake_bin),
        "HOME": str(run),
        "LOG": str(log),
        "MASTER_ADDR": "localhost",
        "SLURM_JOB_NODELIST": "node-[0-3]",
        "SLURM_JOB_ID": "7",
        "SLURM_SUBMIT_DIR": str(run),
        # megatron_args.sh needs a Megatron-LM checkout and data, or synthetic data asked for
        "MEGATRON_LM_DIR": str(run / MEGATRON_CHECKOUT),
        "MOCK_DATA": "1",
        # any command not found is logged instead
        "BASH_FUNC_command_not_found_handle%%": f"() {{ {NOT_FOUND}; return 127; }}",
    }


def run_bash(args: list[str], run: Path, fake_bin: Path) -> tuple[list[list[str]], str]:
    """Run bash with `args` in the rendered folder: (the commands it started, its output)."""
    log = run.parent / f"{run.name}.log"
    log.write_bytes(b"")
    done = subprocess.run(
        [BASH, *args],
        cwd=run,
        env=sandbox_env(fake_bin, log, run),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    records = log.read_text(encoding="utf-8").split("\0\n")[:-1]
    return [record.split("\0") for record in records], output


def write_files(files: dict[str, str], folder: Path) -> Path:
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
        if name.endswith((".sh", ".sbatch")):
            (folder / name).chmod(0o755)
    return folder


def sourced_variables(run: Path, fake_bin: Path) -> list[str]:
    """NAME=VALUE of each variable that sourcing nccl.env sets, as bash reads it."""
    script = (
        "set -a; source ./nccl.env; set +a; for name in $(compgen -e); do "
        'case $name in NCCL_*|CUDA_*) printf "%s=%s\\n" "$name" "${!name}";; esac; done'
    )
    _, output = run_bash(["-c", script], run, fake_bin)
    return sorted(output.splitlines())


def check_runs_safely(files: dict[str, str], run: Path, fake_bin: Path) -> list[str]:
    """Run every shell-read file as a user would; the megatron_args.sh torchrun's arguments."""
    write_files(files, run)
    (run / MEGATRON_CHECKOUT).mkdir()
    (run / MEGATRON_CHECKOUT / "pretrain_gpt.py").write_text("", encoding="utf-8")
    active = [line for line in files["nccl.env"].split("\n") if line and line[0] != "#"]
    assert sourced_variables(run, fake_bin) == sorted(active)
    transformer = "megatron_args.sh" in files
    extra = [] if transformer else list(TRAINING)
    launches = {
        "launch_torchrun.sh": (["launch_torchrun.sh", *TRAINING], ["torchrun"]),
        "launch_slurm.sbatch": (["launch_slurm.sbatch", *extra], ["scontrol", "srun", "torchrun"]),
    }
    if transformer:
        launches["megatron_args.sh"] = (["megatron_args.sh"], ["torchrun"])
    started = {}
    for name, (args, expected) in launches.items():
        commands, output = run_bash(args, run, fake_bin)
        assert [c[0] for c in commands] == expected, (name, commands)
        assert INJECTED not in output, (name, output)
        started[name] = commands[-1]
    assert started["launch_torchrun.sh"][-len(TRAINING) :] == list(TRAINING)
    assert not list(run.parent.rglob(MARKER))
    return started.get("megatron_args.sh", [])


# ---- building the hostile inputs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def plan_jsons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each scenario of test_render as a plan.json file."""
    folder = tmp_path_factory.mktemp("plans")
    for case, files in rendered_cases().items():
        (folder / f"{case}.json").write_text(files["plan.json"], encoding="utf-8")
    return {case: folder / f"{case}.json" for case in rendered_cases()}


@pytest.fixture(scope="module")
def plans(plan_jsons: dict[str, Path]) -> dict[str, PlanDocument]:
    """The plans read back from their files, once per module; "single" is single_node."""
    found = {kind: load_plan_document(plan_jsons[case]) for kind, case in PLANS.items()}
    return found | {"single": load_plan_document(plan_jsons["single_node"])}


def with_value(doc: PlanDocument, at: str, value: str) -> PlanDocument:
    """`doc` with `value` at `at` (see shell.yaml), set without validation."""
    if at == "model.name":
        return doc.model_copy(update={"model": doc.model.model_copy(update={"name": value})})
    if at == "cluster.name":
        return doc.model_copy(update={"cluster": doc.cluster.model_copy(update={"name": value})})
    if at == "cluster.gpu.display_name":
        gpu = doc.cluster.gpu.model_copy(update={"display_name": value})
        return doc.model_copy(update={"cluster": doc.cluster.model_copy(update={"gpu": gpu})})
    if at == "advice":
        return doc.model_copy(update={"advice": [*doc.advice, value]})
    if at.startswith("launch."):  # a launch setting: a node name, SLURM, a NIC (launch.<field>)
        assert doc.launch is not None, at
        return doc.model_copy(update={"launch": with_launch_value(doc.launch, at, value)})
    fields: dict[str, Any] = {"rule_id": "hostile.rule", "description": "hostile"}
    part, _, key = at.partition(".")
    assert part == "proposal", at
    settings = {"nccl_algo": "Tree"}
    if key in fields:
        fields[key] = value
    else:
        settings = {key: value}
    proposal = Proposal(
        group=COMMUNICATION,
        type="CommunicationOptimization",
        estimated_speedup=1.0,
        settings=settings,
        **fields,
    )
    return doc.model_copy(update={"proposals": [*doc.proposals, proposal]})


def with_launch_value(launch: LaunchSettings, at: str, value: Any) -> LaunchSettings:
    """`launch` with `value` at `at` (see shell.yaml), set without validation: a list field
    (ib_hcas, node_names) gets `value` as its first item, the rest kept."""
    *_, field = at.split(".")
    old = getattr(launch, field)
    new = (value, *old[1:]) if isinstance(old, tuple) else value
    return launch.model_copy(update={field: new})


def user_mapping(folder: Path, find: str, replace: str) -> Path:
    """A user's mapping.yaml: templates/mapping.yaml and, where `find` is in a backend's own
    section (parplan_gen/backends/<name>/mapping.yaml), that section after it, which then
    replaces the backend's; `find` made `replace`."""
    text = (REPO / "templates" / "mapping.yaml").read_text(encoding="utf-8")
    if find not in text:
        own = (REPO / "parplan_gen" / "backends").glob("*/mapping.yaml")
        text += next(t for t in (p.read_text(encoding="utf-8") for p in own) if find in t)
    assert text.count(find) == 1, find
    folder.mkdir()
    (folder / "mapping.yaml").write_text(text.replace(find, replace), encoding="utf-8")
    return folder


def in_a_row(words: list[str], run: list[str]) -> bool:
    return any(run[i : i + len(words)] == words for i in range(len(run)))


# ---- values: quoted for their place, or refused -------------------------------------------------


@needs_bash
@pytest.mark.parametrize("case", VALUES)
def test_a_hostile_value_is_quoted_for_its_place_or_refused(
    case, plans, fake_bin, tmp_path, monkeypatch
):
    # plan.json's refusal of names with control characters off: quoting alone keeps files safe
    monkeypatch.setattr(plan_document, "_unprintable_names", lambda data: iter(()))
    doc = plans[case.get("plan", "transformer")]
    templates = None
    if "mapping" in case:
        templates = user_mapping(tmp_path / "t", **case["mapping"])
    else:
        doc = with_value(doc, case["at"], case["value"])
    options = {"templates_dir": templates, "force_nccl_algo": case.get("force", False)}
    if "error" in case:
        with pytest.raises(RenderError) as refused:
            render_plan(doc, **options)
        error = case["error"].replace("{templates}", str(templates))
        assert str(refused.value) == error.replace("{builtin}", str(REPO / "templates"))
        return
    files = render_plan(doc, **options)
    for name, text in case["shown"].items():
        assert text in files[name], name
    megatron_run = check_runs_safely(files, tmp_path / "run", fake_bin)
    if "argument" in case:
        assert in_a_row(case["argument"], megatron_run), megatron_run


@pytest.mark.parametrize("case", [c for c in VALUES if "plan_json" in c.values[0]])
def test_plan_json_refuses_a_name_with_control_characters(case, plans, tmp_path, monkeypatch):
    data = json.loads(plans["transformer"].to_json())
    *parents, leaf = case["at"].split(".")
    target = data
    for part in parents:
        target = target[part]
    target[leaf] = case["value"]
    monkeypatch.chdir(tmp_path)
    Path("plan.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(PlanDocumentError) as refused:
        load_plan_document("plan.json")
    assert str(refused.value) == case["plan_json"]


# ---- template folders --------------------------------------------------------------------------


def write_template_folder(folder: Path, outside: Path, files: dict[str, Any]) -> None:
    for name, spec in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, str):
            path.write_text(spec, encoding="utf-8")
        elif "outside" in spec:
            target = outside / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(spec["outside"], encoding="utf-8")
            path.symlink_to(target)
        elif "outside_folder" in spec:
            (outside / name).mkdir(parents=True)
            for inner, text in spec["outside_folder"].items():
                (outside / name / inner).write_text(text, encoding="utf-8")
            path.symlink_to(outside / name, target_is_directory=True)
        else:
            path.symlink_to(folder / spec["link"])


@pytest.mark.parametrize("case", TEMPLATES)
def test_a_hostile_template_folder_is_refused_or_renders_plain_data(case, plans, tmp_path):
    folder, outside = tmp_path / "t", tmp_path / "outside"
    write_template_folder(folder, outside, case["files"])
    doc = plans["single"]
    if "error" in case:
        with pytest.raises(RenderError) as refused:
            render_plan(doc, templates_dir=folder)
        assert str(refused.value) == case["error"].replace("{templates}", str(folder))
        assert "SECRET" not in str(refused.value)
        return
    files = render_plan(doc, templates_dir=folder)
    for name, text in case["output"].items():
        assert files[name] == text


# ---- through the command line ------------------------------------------------------------------


def command_line(case: dict[str, Any], folder: Path) -> list[str]:
    """Write the case's input into `folder` (the working directory); its argv."""
    value, via = case["value"], case["via"]
    planning = ["--gpus", "8", "--gpu", "h100", "--global-batch", "64", "--out", "out"]
    if via == "graph":
        text = (REPO / "examples" / "cnn_block.yaml").read_text(encoding="utf-8")
        graph = text.replace("name: cnn-block", f"name: {json.dumps(value)}")
        (folder / "graph.yaml").write_text(graph, encoding="utf-8")
        return ["plan", "graph.yaml", *planning]
    if via == "hf":
        (folder / value).mkdir()
        shutil.copy(REPO / "examples" / "hf" / "gpt2.json", folder / value / "config.json")
        return ["plan", f"{value}/config.json", *planning, "--seq-len", "1024"]
    if via == "rules":
        (folder / "r").mkdir()
        rule = {
            "id": "hostile.ring",
            "group": COMMUNICATION,
            "type": "CommunicationOptimization",
            "when": "true",
            "speedup": 1.5,
            "settings": {"nccl_algo": value},
            "description": "hostile",
            "source": "tests/hostile/shell_cli.yaml",
        }
        (folder / "r" / "rules.yaml").write_text(json.dumps({"proposals": [rule]}), "utf-8")
        force = ["--force-nccl-algo"] if case.get("force") else []
        return ["plan", "llama-2-7b", *planning, "--rules", "r", *force]
    data = json.loads(rendered_cases()["single_node"]["plan.json"])
    *parents, leaf = case["at"]
    target = data
    for part in parents:
        target = target[part]
    target[leaf] = value
    (folder / "plan.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    return ["render", "plan.json", "--out", "out"]


@needs_bash
@pytest.mark.parametrize("case", COMMAND_LINES)
def test_a_hostile_value_from_the_command_line(case, fake_bin, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = command_line(case, tmp_path)
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    if "error" in case:
        assert (code, err) == (1, f"parplan: error: {case['error']}\n")
        assert not (tmp_path / "out").exists()
        assert not list(tmp_path.rglob(MARKER))
        return
    assert code == 0, err
    files = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "out").iterdir()}
    for name, text in case["shown"].items():
        assert text in files[name], name
    check_runs_safely(files, tmp_path / "run", fake_bin)


# ---- the quoting functions themselves ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, quotes ' \" and $(x) stay", "plain text, quotes ' \" and $(x) stay"),
        ("a\nb\rc\x0bd\x0ce\x1cf\x85g\u2028h\u2029i", "a\\x0ab\\x0dc\\x0bd\\x0ce\\x1cf\\x85g"
         "\\u2028h\\u2029i"),
        ("tab\there, ESC\x1b[2J, NUL\x00, bidi\u202e", "tab\\x09here, ESC\\x1b[2J, NUL\\x00, "
         "bidi\\u202e"),
        ("x" * 5000, "x" * 5000),  # a comment is never cut
    ],
)  # fmt: skip
def test_comment_escapes_every_line_break_and_control_character(text, shown):
    assert comment(text) == shown
    assert "\n" not in comment(text) and comment(text).isprintable()


@needs_bash
@pytest.mark.parametrize(
    "value",
    ["plain", "", "it's", "a b", "$(touch MARKER)", "`x`", "x;y|z&", "~/x", "*", "'\"\\", "a\nb"],
)
def test_argument_reads_back_as_exactly_the_value(value, tmp_path):
    script = f"printf '%s' {argument(value)}"
    done = subprocess.run(
        [BASH, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout == value
    assert not (tmp_path / MARKER).exists()


def test_assignment_takes_only_values_that_need_no_quoting():
    assert assignment("NCCL_IB_HCA", "=mlx5_0:1,mlx5_3") == "NCCL_IB_HCA==mlx5_0:1,mlx5_3"
    assert assignment("NCCL_ALGO", "allreduce:^ring") == "NCCL_ALGO=allreduce:^ring"
    for value in ("a b", "a;b", "a|b", "$x", "'a'", "a#b", "~/x", "a\rb", "a\nb", "*"):
        with pytest.raises(RenderError, match=r"cannot be written to nccl\.env"):
            assignment("NCCL_ALGO", value)
    with pytest.raises(RenderError, match="is not an environment variable name"):
        assignment("NCCL_ALGO; touch MARKER", "Ring")


@pytest.mark.parametrize(
    "value",
    ["8B", "", "it's", 'a"""b', "a\\nb\n", "\u2028", "x'); __import__('os').system('x')  #",
     0, -3, 2.5, True, None, ["lm_head", "a'b"], []],
)  # fmt: skip
def test_python_literal_reads_back_as_exactly_the_value(value):
    """What parplan_torchtitan_config.py holds of a value: Python reads it back as the value
    (ast.literal_eval runs nothing), whatever quotes, backslashes or line breaks it has."""
    written = python_literal(value)
    assert "\n" not in written and written.isprintable()
    assert ast.literal_eval(written) == value


def test_python_literal_and_name_refuse_what_they_cannot_write():
    for value in (float("nan"), float("inf"), {"a": 1}, b"x", object()):
        with pytest.raises(RenderError, match="has no Python literal"):
            python_literal(value)
    assert python_name("torchtitan.models.llama3") == "torchtitan.models.llama3"
    assert python_name("llama3_8b_float8_rowwise") == "llama3_8b_float8_rowwise"
    for name in ("llama3_8b()", "a b", "import", "x.class", "os; x", "", "8b", "\u0430b", "a."):
        with pytest.raises(RenderError, match="is not a Python name"):
            python_name(name)


def test_the_corpora_are_large_enough():
    ids = [p.values[0]["id"] for p in (*VALUES, *TEMPLATES, *COMMAND_LINES)]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
