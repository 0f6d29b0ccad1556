"""Files that refuse to fail silently (issue 29, item 3) and the budget's run length in every
backend's files (issue 29, item 2, the files' part).

The rendered scripts run under bash with a stand-in `torchrun` on PATH that records its
working folder and arguments, so what is checked is what the script would launch. Expected
values are worked from the inputs:
- the budget's files: steps and checkpoint interval read from plan.json's `budget` (the
  document the files are rendered from): interval steps = floor(checkpoint_interval_s /
  step_s), at least 1;
- the SLURM exit: --exit-duration-in-mins = the limit's minutes - 10 (templates/mapping.yaml
  slurm.exit_reserve_minutes) - ceil((step_s + checkpoint blocking s) / 60);
- an Ethernet cluster (networks.yaml ethernet-100, kind ethernet) over 2 nodes: NCCL_NET=Socket
  and the interface the launch site names; a RoCE one has no NCCL_NET.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.render.checks import RenderError
from parplan_gen.render.plan_files import render_plan
from parplan_gen.render.run_length import slurm_minutes

from consumer_support import consumer

HAS_BASH = shutil.which("bash") is not None
needs_bash = pytest.mark.skipif(not HAS_BASH, reason="bash is not installed")
TOKENS = 2e12  # plan --tokens: 2T tokens of llama-3-8b
FAKE_TORCHRUN = """#!/usr/bin/env bash
pwd > "$RECORD"
printf '%s\\n' "$@" >> "$RECORD"
"""
# The stand-in for a torchtitan plan with its own config function: the PYTHONPATH torchrun's
# workers inherit, then the folder and arguments.
FAKE_TORCHRUN_PYTHONPATH = """#!/usr/bin/env bash
printf '%s\\n' "${PYTHONPATH-}" > "$RECORD"
pwd >> "$RECORD"
printf '%s\\n' "$@" >> "$RECORD"
"""


def planned(tmp_path: Path, cluster: dict | str, **kwargs: object) -> tuple[Path, dict]:
    """The folder `Plan.write` fills for llama-3-8b on `cluster`, and its plan.json."""
    result = parplan_gen.plan("llama-3-8b", cluster, global_batch=512, seq_len=8192, **kwargs)
    folder = tmp_path / "plan"
    result.write(folder)
    return folder, json.loads((folder / "plan.json").read_text(encoding="utf-8"))


def run(
    script: Path, tmp_path: Path, fake_torchrun: str = FAKE_TORCHRUN, **env: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`bash script` with a stand-in torchrun; what it was started with (its folder first)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "torchrun"
    fake.write_text(fake_torchrun, encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "torchrun.txt"
    record.unlink(missing_ok=True)
    unset = ("DATA_PATH", "MOCK_DATA", "CKPT_DIR", "MEGATRON_LM_DIR", "TORCHTITAN_DIR")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    base |= {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECORD": str(record)}
    base |= {"MASTER_ADDR": "127.0.0.1"}
    done = subprocess.run(
        ["bash", str(script)], env=base | env, capture_output=True, text=True, timeout=30
    )
    return done, record.read_text(encoding="utf-8").splitlines() if record.exists() else []


def checkout(tmp_path: Path, entry: str) -> Path:
    """A stand-in framework checkout holding `entry`."""
    root = tmp_path / "checkout"
    (root / entry).parent.mkdir(parents=True, exist_ok=True)
    (root / entry).write_text("", encoding="utf-8")
    return root


def value_after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


# ---- megatron_args.sh: data, framework folder -------------------------------------------------


@pytest.fixture(scope="module")
def eight_gpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    # a Megatron-LM plan (Megatron-FSDP at ZeRO-3), whose layout torchtitan runs too: both
    # files written (unpinned, its ZeRO-2 layout is 1 % faster and torchtitan has no ZeRO-2)
    cluster = {"gpus": 8, "gpu": "h100"}
    pins = {"zero_stage": 3}
    return planned(tmp_path_factory.mktemp("eight"), cluster, backend="megatron", pins=pins)


@needs_bash
def test_megatron_without_data_path_stops_with_one_line(eight_gpus, tmp_path):
    folder, _ = eight_gpus
    megatron = checkout(tmp_path, "pretrain_gpt.py")
    done, launched = run(folder / "megatron_args.sh", tmp_path, MEGATRON_LM_DIR=str(megatron))
    assert done.returncode == 2 and not launched
    assert done.stderr == (
        "megatron_args.sh: DATA_PATH is not set: set it to the dataset prefix(es), or "
        "MOCK_DATA=1 for a smoke run on synthetic data\n"
    )


@needs_bash
def test_megatron_with_mock_data_asked_for_runs_on_synthetic_batches(eight_gpus, tmp_path):
    folder, _ = eight_gpus
    megatron = checkout(tmp_path, "pretrain_gpt.py")
    done, launched = run(
        folder / "megatron_args.sh", tmp_path, MEGATRON_LM_DIR=str(megatron), MOCK_DATA="1"
    )
    assert done.returncode == 0, done.stderr
    assert f"{megatron}/pretrain_gpt.py" in launched
    assert {"--mock-data", "--log-throughput"} <= set(launched)
    assert value_after(launched, "--tokenizer-type") == "NullTokenizer"
    assert value_after(launched, "--train-iters") == "100"  # no budget: a smoke run
    assert "--save" not in launched
    assert "CKPT_DIR is not set: this run saves no checkpoint" in done.stderr
    assert "--exit-duration-in-mins" not in launched  # no SLURM time limit given


@needs_bash
@pytest.mark.parametrize("given", [None, "", "elsewhere"])
def test_megatron_needs_a_megatron_checkout(eight_gpus, tmp_path, given):
    folder, _ = eight_gpus
    env = {"MOCK_DATA": "1"}
    if given is not None:
        env["MEGATRON_LM_DIR"] = str(tmp_path) if given == "elsewhere" else given
    done, launched = run(folder / "megatron_args.sh", tmp_path, **env)
    assert done.returncode != 0 and not launched
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    if given == "elsewhere":  # a folder without pretrain_gpt.py
        assert re.fullmatch(
            re.escape(f"megatron_args.sh: MEGATRON_LM_DIR={tmp_path} holds no pretrain_gpt.py: ")
            + r"set it to a Megatron-LM checkout \(core_v0\.16\)",
            lines[0],
        )
    else:  # unset or empty: never the plan folder
        assert lines[0].endswith(
            "MEGATRON_LM_DIR: set MEGATRON_LM_DIR to the Megatron-LM checkout holding "
            "pretrain_gpt.py"
        )


# ---- torchtitan_run.sh: framework folder --------------------------------------------------------


@needs_bash
def test_torchtitan_needs_its_checkout_and_starts_there(eight_gpus, tmp_path):
    folder, _ = eight_gpus
    script = folder / "torchtitan_run.sh"
    done, launched = run(script, tmp_path)
    assert done.returncode != 0 and not launched
    assert done.stderr.strip().endswith(
        "TORCHTITAN_DIR: set TORCHTITAN_DIR to the torchtitan checkout holding torchtitan/train.py"
    )
    done, launched = run(script, tmp_path, TORCHTITAN_DIR=str(tmp_path))
    assert done.returncode == 2 and not launched
    assert done.stderr == (
        f"torchtitan_run.sh: TORCHTITAN_DIR={tmp_path} holds no torchtitan/train.py: set it to "
        "a torchtitan checkout (0.3)\n"
    )
    titan = checkout(tmp_path, "torchtitan/train.py")
    done, launched = run(script, tmp_path, TORCHTITAN_DIR=str(titan))
    assert done.returncode == 0, done.stderr
    assert launched[0] == str(titan)  # torchrun starts in the checkout, where its assets are
    assert value_after(launched, "-m") == "torchtitan.train"


# ---- accelerate_launch.sh: the user's training script ------------------------------------------


@needs_bash
def test_accelerate_launch_needs_the_training_script(tmp_path):
    folder, _ = planned(tmp_path, {"gpus": 8, "gpu": "h100"}, backend="accelerate")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "accelerate"  # records what `accelerate launch` is started with
    fake.write_text(FAKE_TORCHRUN, encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "accelerate.txt"
    unset = ("TRAIN_SCRIPT", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECORD": str(record)}
    script = [str(folder / "accelerate_launch.sh"), "--epochs", "1"]
    done = subprocess.run(["bash", *script], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and not record.exists()
    assert done.stderr == (
        "accelerate_launch.sh: TRAIN_SCRIPT is not set: set it to your training script (a "
        "transformers model trained through accelerator.prepare)\n"
    )
    env["TRAIN_SCRIPT"] = "train.py"
    done = subprocess.run(["bash", *script], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    # one node: machine 0, the rendezvous on this host and the mapping's default port
    assert record.read_text(encoding="utf-8").splitlines()[1:] == [
        "launch", "--config_file", str(folder / "accelerate_config.yaml"), "--machine_rank", "0",
        "--main_process_ip", "localhost", "--main_process_port", "29500", "train.py", "--epochs",
        "1",
    ]  # fmt: skip


@needs_bash
def test_torchtitan_imports_the_plans_config_function_from_its_folder(tmp_path):
    """An fp8 plan of llama-3-8b starts from the config function it writes (torchtitan 0.3's
    llama3_8b has no float8 converter): torchrun's workers get the plan's folder first on
    PYTHONPATH, where config/manager.py imports --module by its name; without the file, or in a
    folder PYTHONPATH cannot name, the script stops with one line."""
    plan = parplan_gen.plan(
        "llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=8192,
        backend="torchtitan", precision="fp8",
    )  # fmt: skip
    folder = tmp_path / "plan"
    plan.write(folder)
    script, titan = folder / "torchtitan_run.sh", checkout(tmp_path, "torchtitan/train.py")
    done, launched = run(
        script, tmp_path, FAKE_TORCHRUN_PYTHONPATH, TORCHTITAN_DIR=str(titan), PYTHONPATH="/mine"
    )
    assert done.returncode == 0, done.stderr
    assert launched[0] == f"{folder}:/mine" and launched[1] == str(titan)
    module = value_after(launched, "--module")
    assert (folder / f"{module}.py").is_file()
    assert value_after(launched, "--config") == "llama3_8b_float8_rowwise"
    (folder / f"{module}.py").unlink()
    done, launched = run(script, tmp_path, TORCHTITAN_DIR=str(titan))
    assert done.returncode == 2 and not launched
    assert done.stderr == (
        f"torchtitan_run.sh: {folder} holds no parplan_torchtitan_config.py, written with this "
        "script: render the plan again\n"
    )
    colon = tmp_path / "a:b"
    plan.write(colon)
    done, launched = run(colon / "torchtitan_run.sh", tmp_path, TORCHTITAN_DIR=str(titan))
    assert done.returncode == 2 and not launched
    assert "has a ':' in its path, which PYTHONPATH cannot hold" in done.stderr


# ---- the budget's run length in every backend's files ------------------------------------------


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    cluster = {"gpus": 8, "gpu": "h100"}  # Megatron-LM's ZeRO-3 plan; torchtitan runs it too
    folder = tmp_path_factory.mktemp("budget")
    pins = {"zero_stage": 3}
    return planned(folder, cluster, tokens=TOKENS, backend="megatron", pins=pins)


def budget_figures(doc: dict) -> tuple[int, int]:
    budget = doc["budget"]
    return budget["steps"], max(1, math.floor(budget["checkpoint_interval_s"] / budget["step_s"]))


def test_budget_figures_are_the_documents(budgeted):
    _, doc = budgeted
    steps, interval = budget_figures(doc)
    # 2e12 tokens / (512 x 8192 tokens per step), rounded up
    assert steps == math.ceil(TOKENS / (512 * 8192)) == 476838
    assert 1 <= interval < steps


@needs_bash
def test_megatron_trains_the_budgets_steps_and_saves_at_its_interval(budgeted, tmp_path):
    folder, doc = budgeted
    steps, interval = budget_figures(doc)
    megatron = checkout(tmp_path, "pretrain_gpt.py")
    ckpt = tmp_path / "ckpt"
    done, launched = run(
        folder / "megatron_args.sh",
        tmp_path,
        MEGATRON_LM_DIR=str(megatron),
        MOCK_DATA="1",
        CKPT_DIR=str(ckpt),
    )
    assert done.returncode == 0, done.stderr
    assert value_after(launched, "--train-iters") == str(steps)
    assert value_after(launched, "--save-interval") == str(interval)
    assert value_after(launched, "--save") == str(ckpt)
    # Megatron-LM decays over --train-iters: the warmup share is the schedule's
    assert "--lr-decay-iters" not in launched


def test_torchtitan_trains_the_budgets_steps_and_checkpoints_at_its_interval(budgeted):
    consumer("torchtitan")
    import consumer_torchtitan

    folder, doc = budgeted
    steps, interval = budget_figures(doc)
    reading = consumer_torchtitan.torchtitan_reading(folder / "torchtitan_run.sh", 8)
    parsed = reading.parsed
    assert parsed.training.steps == steps == parsed.lr_scheduler.total_steps
    assert (parsed.checkpoint.enable, parsed.checkpoint.interval) == (True, interval)


def test_deepspeed_schedule_and_launch_note_carry_the_budget(budgeted):
    folder, doc = budgeted
    steps, interval = budget_figures(doc)
    config = json.loads((folder / "ds_config.json").read_text(encoding="utf-8"))
    assert config["scheduler"]["params"]["total_num_steps"] == steps
    launcher = (folder / "launch_torchrun.sh").read_text(encoding="utf-8")
    assert f"train {steps} optimizer steps" in launcher
    assert f"every\n#     {interval} steps" in launcher or f"every {interval} steps" in launcher


def test_without_a_budget_torchtitan_keeps_its_configs_steps(eight_gpus):
    folder, _ = eight_gpus
    script = (folder / "torchtitan_run.sh").read_text(encoding="utf-8")
    overrides = script.split("TORCHTITAN_ARGS=(", 1)[1].split(")", 1)[0]
    assert "--training.steps" not in overrides and "--checkpoint." not in overrides
    assert "--training.steps stays the config's" in script


# ---- throughput logs -----------------------------------------------------------------------------


def test_deepspeed_logs_throughput(eight_gpus):
    deepspeed = consumer("deepspeed.runtime.config")
    folder, _ = eight_gpus
    import consumer_deepspeed

    config = consumer_deepspeed.deepspeed_config(folder / "ds_config.json", 8)
    assert isinstance(config, deepspeed.DeepSpeedConfig)
    assert config.steps_per_print == 10
    assert config.timers_config.enabled  # ThroughputTimer logs at that boundary


# ---- SLURM: time limit, CPUs -------------------------------------------------------------------


def exit_minutes_worked(doc: dict, limit_minutes: int) -> int:
    step = doc["chosen"]["time"]["step_s"]
    budget = doc.get("budget")
    blocking = 0.0
    if budget:
        blocking = budget["checkpoint_blocking_s"] or budget["checkpoint_write_s"]
    return limit_minutes - 10 - math.ceil((step + blocking) / 60)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("90:30", 90.5), ("4:00:00", 240), ("2-00:00:00", 2880), ("1-2", 1560),
     ("1-02:30", 1590)],
)  # fmt: skip
def test_slurm_time_formats_in_minutes(text, minutes):
    assert slurm_minutes(text) == minutes


def test_a_time_limit_makes_megatron_save_and_exit_before_it(tmp_path):
    launch = {"slurm_time": "4:00:00"}
    folder, doc = planned(tmp_path, {"gpus": 16, "gpu": "h100"}, tokens=TOKENS, launch=launch)
    sbatch = (folder / "launch_slurm.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --time=4:00:00\n" in sbatch
    script = (folder / "megatron_args.sh").read_text(encoding="utf-8")
    expected = exit_minutes_worked(doc, 240)
    assert 200 < expected < 230
    assert f"\n    --exit-duration-in-mins {expected}\n    --exit-signal-handler\n" in script


def test_a_time_limit_too_short_to_save_is_refused():
    result = parplan_gen.plan(
        "llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512, seq_len=8192,
        launch={"slurm_time": "10"},
    )  # fmt: skip
    with pytest.raises(RenderError, match=r"^--slurm-time 10: leaves no minute to train before"):
        render_plan(result.document)


def test_no_cpu_count_is_asked_for_unless_the_site_gives_one(eight_gpus):
    folder, _ = eight_gpus
    sbatch = (folder / "launch_slurm.sbatch").read_text(encoding="utf-8")
    commands = [line for line in sbatch.splitlines() if not line.startswith("# ")]
    assert not [line for line in commands if "--cpus-per-task" in line]
    assert "# no --cpus-per-task: the cluster file gives no cpus_per_node" in sbatch
    assert "srun --kill-on-bad-exit=1 bash" in sbatch


# ---- nccl.env of an Ethernet cluster -----------------------------------------------------------


def cluster_file(tmp_path: Path, network: str, nodes: int = 2) -> Path:
    path = tmp_path / f"{network}-{nodes}.yaml"
    path.write_text(
        f"gpu: h100\ngpus_per_node: 8\nnodes: {nodes}\ninter_node:\n  network: {network}\n"
        "  nics_per_node: 8\nnccl:\n  socket_ifname: ens5\n",
        encoding="utf-8",
    )
    return path


def nccl_lines(text: str) -> list[str]:
    return [
        line for line in text.splitlines() if line and not line.startswith("# ") and "=" in line
    ]


def test_an_ethernet_clusters_nccl_env_names_the_socket_transport(tmp_path):
    folder, doc = planned(tmp_path, str(cluster_file(tmp_path, "ethernet-100")))
    assert doc["cluster"]["network"] == "ethernet-100"
    env = (folder / "nccl.env").read_text(encoding="utf-8")
    assert {"NCCL_NET=Socket", "NCCL_SOCKET_IFNAME=ens5"} <= set(nccl_lines(env))
    assert "\n# NCCL_SOCKET_NTHREADS=4\n" in env  # env.rst's figure for 100G, to enable
    assert "NCCL_IB_HCA=" not in env.replace("# NCCL_IB_HCA=", "")


@needs_bash
def test_the_socket_settings_source_as_written(tmp_path):
    folder, _ = planned(tmp_path, str(cluster_file(tmp_path, "ethernet-100")))
    done = subprocess.run(
        ["bash", "-c", f'set -a; source "{folder}/nccl.env"; echo "$NCCL_NET:$NCCL_SOCKET_IFNAME"'],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert done.stdout == "Socket:ens5\n"


def test_a_roce_clusters_nccl_env_does_not_force_sockets(tmp_path):
    folder, _ = planned(tmp_path, str(cluster_file(tmp_path, "roce-400")))
    env = (folder / "nccl.env").read_text(encoding="utf-8")
    assert "NCCL_NET" not in env and "NCCL_SOCKET_NTHREADS" not in env
    assert "NCCL_SOCKET_IFNAME=ens5" in nccl_lines(env)


def test_a_single_node_plan_sets_no_socket_transport(tmp_path):
    folder, _ = planned(tmp_path, str(cluster_file(tmp_path, "ethernet-100", nodes=1)))
    env = (folder / "nccl.env").read_text(encoding="utf-8")
    assert "NCCL_NET" not in env and "NCCL_SOCKET_NTHREADS" not in env
