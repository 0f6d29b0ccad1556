"""Output safety through `parplan plan --out` and `parplan render`: atomic writes, no partial
folder on failure, no silent overwrite, byte-identical output, no timestamps or absolute paths.

The plan is made once per module (`parplan plan --out`); the tests that write again re-render
its plan.json (`parplan render`, the same writer, without planning again).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from parplan_gen.cli.main import main

REPO = Path(__file__).resolve().parent.parent
PLAN = ("plan", "llama-2-7b", "--gpus", "16", "--gpu", "h100", "--global-batch", "64",
        "--backend", "deepspeed")  # fmt: skip
# A DeepSpeed plan: its ds_config.json and launchers, no megatron_args.sh.
FILES = {
    "ds_config.json",
    "nccl.env",
    "launch_torchrun.sh",
    "launch_slurm.sbatch",
    "hostfile",
    "plan_memory.svg",
    "plan_time.svg",
    "plan.md",
    "plan.json",
}
TIMESTAMP = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b[0-2]\d:[0-5]\d:[0-5]\d\b")
EPOCH_SECONDS = re.compile(r"\b1[6-9]\d{8}\b")  # 2020-2033 in Unix seconds
DAY_S = 86400


def epoch_stamps(text: str) -> list[int]:
    """Ten-digit numbers within a day of now: Unix timestamps of this run (a figure such as a
    byte count may have ten digits too; it is not a timestamp unless it is now)."""
    now = time.time()
    return [int(n) for n in EPOCH_SECONDS.findall(text) if abs(int(n) - now) < DAY_S]


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder written by `parplan plan --out`, once per module; never changed."""
    out = tmp_path_factory.mktemp("first") / "run"
    assert main([*PLAN, "--out", str(out)]) == 0
    return out


@pytest.fixture
def planned(first_run: Path, tmp_path: Path) -> Path:
    """A copy of `first_run` (modes and times kept) that a test may change."""
    return Path(shutil.copytree(first_run, tmp_path / "run"))


@pytest.fixture
def render(first_run: Path) -> tuple[str, ...]:
    """`parplan render` of the module's plan.json, less `--out DIR`."""
    return ("render", str(first_run / "plan.json"))


def test_plan_out_writes_every_file_with_its_mode(planned: Path) -> None:
    assert set(os.listdir(planned)) == FILES
    for name in FILES:
        mode = (planned / name).stat().st_mode & 0o777
        assert mode == (0o755 if name.endswith((".sh", ".sbatch")) else 0o644), name


def test_each_file_is_written_to_a_temporary_file_then_renamed_in_its_folder(
    render: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    renames: list[tuple[Path, Path]] = []
    original = Path.replace

    def recording_replace(self: Path, target: Path) -> Path:
        renames.append((Path(self), Path(target)))
        return original(self, target)

    monkeypatch.setattr(Path, "replace", recording_replace)
    code, _, err = cli(capsys, *render, "--out", tmp_path / "run")
    assert code == 0, err
    assert {target.name for _, target in renames} == FILES
    for temporary, target in renames:
        assert temporary.parent == target.parent == tmp_path / "run"
        assert temporary.name.startswith(f".{target.name}.") and temporary.suffix == ".tmp"
    assert set(os.listdir(tmp_path / "run")) == FILES  # no temporary file left


def test_every_file_is_staged_before_any_is_renamed(
    render: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All temporary files exist before the first rename: a full disk changes nothing."""
    seen: list[set[str]] = []
    original = Path.replace

    def spying_replace(self: Path, target: Path) -> Path:
        seen.append({p.name for p in Path(target).parent.iterdir()})
        return original(self, target)

    monkeypatch.setattr(Path, "replace", spying_replace)
    code, _, err = cli(capsys, *render, "--out", tmp_path / "run")
    assert code == 0, err
    staged = {name for name in seen[0] if name.endswith(".tmp")}
    assert len(staged) == len(FILES)
    assert not {name for name in seen[0] if not name.startswith(".")}  # none in place yet


@pytest.mark.parametrize("fail_at", [1, 5, 10])
def test_a_write_failure_leaves_no_folder_and_no_temporary_file(
    fail_at: int,
    render: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    original = os.fsync

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == fail_at:
            raise OSError(28, "No space left on device")
        original(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    out = tmp_path / "deep" / "er" / "run"
    code, out_text, err = cli(capsys, *render, "--out", out)
    assert (code, out_text) == (1, "")
    assert err == f"parplan: error: cannot write into {out}: No space left on device\n"
    assert list(tmp_path.iterdir()) == []  # not even the parent folders made on the way


def test_a_write_failure_in_an_existing_folder_changes_nothing(
    planned: Path,
    render: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = contents(planned)
    calls = []
    original = os.fsync

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        original(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    code, _, err = cli(capsys, *render, "--hf-trainer", "--out", planned, "--force")
    assert code == 1 and err.endswith(": No space left on device\n")
    assert contents(planned) == before


def test_a_failed_render_leaves_no_folder(render, tmp_path: Path, capsys) -> None:
    templates = tmp_path / "t" / "nccl"
    templates.mkdir(parents=True)
    (templates / "nccl.env.j2").write_text("{{ nccl.no_such_key }}\n", encoding="utf-8")
    code, _, err = cli(capsys, *render, "--out", tmp_path / "run", "--templates", tmp_path / "t")
    assert code == 1
    assert err == (
        "parplan: error: nccl/nccl.env.j2:1: undefined value: "
        "'dict object' has no attribute 'no_such_key'\n"
    )
    assert not (tmp_path / "run").exists()


def test_a_non_finite_cost_formula_writes_nothing(tmp_path: Path, capsys) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "cost.yaml").write_text(
        'estimate:\n  time:\n    compute_s: "1e308 * 10"\n', encoding="utf-8"
    )
    code, out, err = cli(capsys, *PLAN, "--rules", tmp_path / "r", "--out", tmp_path / "run")
    assert (code, out, err.count("\n")) == (1, "", 1)
    assert not (tmp_path / "run").exists()


def test_a_different_existing_file_is_kept_unless_forced(planned: Path, render, capsys) -> None:
    before = contents(planned)
    other = (*render, "--hf-trainer")  # ds_config.json and plan.md differ
    code, out, err = cli(capsys, *other, "--out", planned)
    assert (code, out) == (1, "")
    assert err.startswith(f"parplan: error: {planned}: will not overwrite ds_config.json, ")
    assert err.endswith(" (content differs); pass --force to replace them\n")
    assert contents(planned) == before

    code, _, err = cli(capsys, *other, "--out", planned, "--force")
    assert code == 0, err
    assert json.loads((planned / "ds_config.json").read_text())["train_batch_size"] == "auto"


def test_a_hand_edited_file_is_kept(planned: Path, render, capsys) -> None:
    (planned / "nccl.env").write_text("NCCL_DEBUG=INFO  # mine\n", encoding="utf-8")
    code, _, err = cli(capsys, *render, "--out", planned)
    assert code == 1
    assert err == (
        f"parplan: error: {planned}: will not overwrite nccl.env (content differs); "
        "pass --force to replace them\n"
    )
    assert (planned / "nccl.env").read_text() == "NCCL_DEBUG=INFO  # mine\n"


def test_rerunning_the_same_plan_rewrites_nothing(planned: Path, render, capsys) -> None:
    stamps = {p.name: p.stat().st_mtime_ns for p in planned.iterdir()}
    inodes = {p.name: p.stat().st_ino for p in planned.iterdir()}
    code, out, err = cli(capsys, *render, "--out", planned)
    assert (code, err) == (0, "")
    assert sorted(out.splitlines()) == sorted(f"unchanged  {planned / n}" for n in FILES)
    assert {p.name: p.stat().st_mtime_ns for p in planned.iterdir()} == stamps
    assert {p.name: p.stat().st_ino for p in planned.iterdir()} == inodes


def test_force_replaces_a_symlink_and_never_writes_through_it(planned, render, tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n", encoding="utf-8")
    (planned / "hostfile").unlink()
    (planned / "hostfile").symlink_to(outside)
    code, _, err = cli(capsys, *render, "--out", planned)
    assert code == 1 and "will not overwrite hostfile" in err
    code, _, err = cli(capsys, *render, "--out", planned, "--force")
    assert code == 0, err
    assert outside.read_text() == "precious\n"
    assert not (planned / "hostfile").is_symlink()


def test_identical_input_gives_identical_bytes(first_run: Path, render, tmp_path, capsys) -> None:
    again = tmp_path / "again"
    code, _, err = cli(capsys, *PLAN, "--out", again)
    assert code == 0, err
    assert contents(again) == contents(first_run)

    rendered = tmp_path / "rendered"
    code, _, err = cli(capsys, *render, "--out", rendered)
    assert code == 0, err
    assert contents(rendered) == contents(first_run)


def test_outputs_hold_no_timestamp_and_no_absolute_path(tmp_path: Path, capsys) -> None:
    """Model and cluster given as absolute paths, written to an absolute folder."""
    model = tmp_path / "models" / "my-llama" / "config.json"
    model.parent.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "hf" / "llama-3-8b.json", model)
    cluster = tmp_path / "clusters" / "four-nodes.yaml"
    cluster.parent.mkdir()
    shutil.copy(REPO / "examples" / "cluster_h100_4nodes.yaml", cluster)
    out = tmp_path / "run"
    code, _, err = cli(
        capsys, "plan", model, "--cluster", cluster, "--global-batch", "256", "--out", out
    )
    assert code == 0, err
    for name, data in contents(out).items():
        text = data.decode("utf-8")
        for path in (str(tmp_path), str(REPO), str(Path.home()), "/tmp/"):
            assert path not in text, f"{name} holds {path}"
        assert not TIMESTAMP.search(text), f"{name}: {TIMESTAMP.search(text)}"
        assert not epoch_stamps(text), f"{name}: {epoch_stamps(text)}"


def test_a_tiny_gpu_does_not_blow_up_the_text_report(tmp_path: Path, capsys) -> None:
    """Memory bars are cut at a fixed width: 1 MiB of GPU memory once printed 244 MB (the
    smallest GPU a cluster file may describe now has 1 GiB, gpus.yaml ranges.memory_gib)."""
    cluster = tmp_path / "tiny.yaml"
    cluster.write_text("gpu: h100\nnum_gpus: 1\noverrides:\n  memory_gib: 1\n")
    code, out, err = cli(capsys, "plan", "llama-3-405b", "--cluster", cluster, "--global-batch", 8)
    assert code == 3, err  # nothing fits: the view, then one error line
    assert "NOTHING FITS" in out and len(out) < 20_000
    assert max(len(line) for line in out.splitlines()) < 200
