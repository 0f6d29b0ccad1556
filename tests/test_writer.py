"""The writer against hostile output folders, racing runs and interrupts (issue 16, classes 8-10).

tests/hostile/writer.yaml lists what `--out` may name and what may already be in it (huge
sparse files, FIFOs, links to endless devices, another plan's files, what a killed run left),
each run through `parplan render`. The tests below race two writers into one folder, and stop a
write at every step: by an exception, by a real SIGINT or SIGTERM, and by a real kill -9.
Afterwards a folder holds exactly one plan's files (the old or the new one, never a mix, and
nothing of the writer's own) or is marked by a journal that the next run completes.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import multiprocessing
import os
import signal
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_hostile import MAX_GROWTH, run
from test_render import rendered_cases

from parplan_gen.inputs.errors import UsageError
from parplan_gen.render import folder_lock
from parplan_gen.render import plan_files as render
from parplan_gen.render import writer as render_writer
from parplan_gen.render.checks import RenderError
from parplan_gen.render.writer import (
    JOURNAL_NAME,
    LOCK_NAME,
    STAGED_INFIX,
    WriteWarning,
    write_rendered,
)

from conftest import REPO

CASES: list[dict[str, Any]] = YAML(typ="safe").load(
    (REPO / "tests" / "hostile" / "writer.yaml").read_text(encoding="utf-8")
)
PLANS = {
    case: {name: text.encode("utf-8") for name, text in sorted(files.items())}
    for case, files in rendered_cases().items()
}  # the hand-built scenarios of test_render, rendered once per session
RENDERED_NAMES = sorted({name for files in PLANS.values() for name in files})
SHOWN_BYTES = 1024 * 1024  # a snapshot records the bytes of files up to this size, else the size
RACE_TRIALS = 10  # races per test: the unfixed writer lost one in four (issue 16)
FORK = multiprocessing.get_context("fork")


# ---- building and looking at folders ---------------------------------------------------------


def texts(case: str) -> dict[str, str]:
    """A golden plan's files as render_plan returns them (in its order)."""
    order = [*(name for name, _ in render.OUTPUTS), render.PLAN_JSON]
    files = PLANS[case]
    return {name: files[name].decode("utf-8") for name in order if name in files}


def build(root: Path, before: dict[str, Any]) -> None:
    """Make each path of a case's `before` (see the head of writer.yaml)."""
    for name, spec in before.items():
        path = root / name
        if path.is_file() or path.is_symlink():  # a plan's file that the case replaces
            path.unlink()
        if isinstance(spec, str):
            path.write_text(spec, encoding="utf-8")
        elif "plan" in spec:
            _place(path, PLANS[spec["plan"]])
        elif "interrupted" in spec:
            interrupted(path, spec["interrupted"])
        elif "sparse" in spec or "zeros_like" in spec:
            with path.open("wb") as handle:
                handle.truncate(spec.get("sparse") or len(PLANS["single_node"][spec["zeros_like"]]))
        elif "fifo" in spec:
            os.mkfifo(path)
        elif "folder" in spec:
            path.mkdir()
        else:
            path.symlink_to(spec["symlink"])


def _place(folder: Path, files: dict[str, bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, blob in files.items():
        (folder / name).write_bytes(blob)


def interrupted(folder: Path, spec: dict[str, Any]) -> None:
    """`folder` as a run writing plan `spec["to"]` over plan `spec["from"]` leaves it when it is
    killed (kill -9) after `spec["renamed"]` of its renames."""
    _place(folder, PLANS[spec["from"]])
    killed = FORK.Process(
        target=_killed_write, args=(folder, spec["to"], "rename", spec["renamed"] + 1)
    )
    killed.start()
    killed.join()
    assert killed.exitcode == -signal.SIGKILL


def _killed_write(out: Path, case: str, step: str, k: int) -> None:
    """In a child: write plan `case` into `out`, and kill -9 itself at the k-th call of `step`."""
    owner, name = STEPS[step]
    with _patched(owner, name, at_call(k, os.kill, os.getpid(), signal.SIGKILL)):
        write_rendered(out, texts(case), force=True)


STEPS = {  # a step of a write: the function it calls (once for each file, or more)
    "create a staged file": (tempfile, "mkstemp"),
    "sync": (os, "fsync"),
    "rename": (Path, "replace"),
}


def at_call(k: int, action: Callable[..., Any], *args: Any) -> Callable[[int], None]:
    """What to do before the n-th call: `action(*args)` when n is `k`."""

    def before(n: int) -> None:
        if n == k:
            action(*args)

    return before


@contextlib.contextmanager
def _patched(owner: Any, name: str, before: Callable[[int], None]) -> Iterator[None]:
    """`owner.name` calling `before(n)` first on its n-th call."""
    original, calls = getattr(owner, name), itertools.count(1)

    def patched(*args: Any, **kwargs: Any) -> Any:
        before(next(calls))
        return original(*args, **kwargs)

    setattr(owner, name, patched)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _raise(exc_type: type[BaseException]) -> None:
    raise exc_type


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under `root` (links not followed): its kind and its bytes (or its size)."""
    found: dict[str, tuple[Any, ...]] = {}
    for folder, subfolders, names in os.walk(root):
        for name in (*subfolders, *names):
            path = Path(folder, name)
            info = path.lstat()
            if path.is_symlink():
                found[str(path.relative_to(root))] = ("link", os.readlink(path))
            elif path.is_file():
                small = info.st_size <= SHOWN_BYTES
                found[str(path.relative_to(root))] = (
                    "file",
                    path.read_bytes() if small else info.st_size,
                )
            else:
                found[str(path.relative_to(root))] = ("other", path.is_dir())
    return found


def is_writers(name: str) -> bool:
    """The lock, the journal or a staged file."""
    return name in (LOCK_NAME, JOURNAL_NAME) or (STAGED_INFIX in name and name.endswith(".tmp"))


def holds_plan(folder: Path) -> str | None:
    """The plan whose files `folder` holds exactly (no other rendered name, none of the writer's
    own); None for a mix, a partial plan or debris."""
    present = {n for n in RENDERED_NAMES if (folder / n).is_file() or (folder / n).is_symlink()}
    if any(is_writers(p.name) for p in folder.iterdir()):
        return None
    for case, files in PLANS.items():
        if present == set(files) and all(
            not (folder / n).is_symlink() and (folder / n).read_bytes() == b
            for n, b in files.items()
        ):
            return case
    return None


def _outside(found: dict[str, tuple[Any, ...]], folder: str) -> dict[str, tuple[Any, ...]]:
    """A snapshot without the rendered and the writer's names in `folder` (and under them)."""
    mine = [f"{folder}/{n}" for n in RENDERED_NAMES]
    return {
        path: what
        for path, what in found.items()
        if not any(path == m or path.startswith(f"{m}/") for m in mine)
        and not (str(Path(path).parent) == folder and is_writers(Path(path).name))
    }


# ---- the corpus ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plan_jsons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each scenario's plan.json as a file that `parplan render` reads."""
    folder = tmp_path_factory.mktemp("plans")
    for case, files in PLANS.items():
        (folder / case).mkdir()
        (folder / case / "plan.json").write_bytes(files["plan.json"])
    return {case: folder / case / "plan.json" for case in PLANS}


@pytest.fixture
def golden_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendering a scenario's plan.json gives its files, which pass the parse-back checks
    (test_render checks both): here they are returned as they are and not checked again, so that
    a case costs the write and not the render."""
    case_of = {files["plan.json"].decode("utf-8"): case for case, files in PLANS.items()}
    monkeypatch.setattr(render, "render_plan", lambda doc, **_: texts(case_of[doc.to_json()]))
    monkeypatch.setattr(render_writer, "check_files", lambda *_args, **_kwargs: None)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_output_folder(case, tmp_path, monkeypatch, capsys, golden_render, plan_jsons):
    monkeypatch.chdir(tmp_path)
    build(tmp_path, case["before"])
    before = snapshot(tmp_path)
    out = case.get("out", "out")
    plan_json = plan_jsons[case.get("render", "single_node")]
    argv = ["render", str(plan_json), "--out", out, *["--force"] * case.get("force", False)]
    code, stdout, stderr, growth = run(argv, capsys)  # under the hang guard
    assert (code, stderr.splitlines()) == (case["exit"], [f"parplan: {e}" for e in case["stderr"]])
    assert growth < MAX_GROWTH, f"peak memory grew by {growth / 2**20:.0f} MiB"
    if case["after"] == "unchanged":
        assert snapshot(tmp_path) == before
        assert stdout == ""
        return
    folder = case["after"].get("in", out)
    assert holds_plan(tmp_path / folder) == case["after"]["plan"]
    assert _outside(snapshot(tmp_path), folder) == _outside(before, folder)  # the rest is kept


# ---- the API: names, status -------------------------------------------------------------------


@pytest.fixture
def fast_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The golden files are valid (test_render checks them): skip the parse-back checks, and
    skip syncing to disk, which only costs time here."""
    monkeypatch.setattr(render_writer, "check_files", lambda *_args, **_kwargs: None)
    monkeypatch.setattr(os, "fsync", lambda _fd: None)


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("", "the output folder name is empty (for the current folder, give '.')"),
        ("a\0b", "output folder a\\x00b: a name cannot hold a NUL character"),
    ],
)
def test_a_name_that_is_no_folder_is_a_usage_error(out, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as info:
        write_rendered(out, texts("single_node"))
    assert info.value.message == message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("out", "shown"),
    [
        ("a" * 300, "a" * 200 + "... (100 more characters)"),  # over NAME_MAX (255 on Linux)
        ("a/" * 3000, "a/" * 100 + "... (5799 more characters)"),  # PATH_MAX; no final /
        ("ok/" + "b" * 300 + "/c", "ok/" + "b" * 197 + "... (105 more characters)"),
    ],
)
def test_an_over_long_out_is_one_error_line_and_makes_no_folder(
    out, shown, tmp_path, monkeypatch, capsys, plan_jsons
):
    """The system refuses the name (ENAMETOOLONG) before any folder is made: one error line,
    the name cut, exit 1 (issue 31: it was a traceback)."""
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr, _ = run(["render", str(plan_jsons["single_node"]), "--out", out], capsys)
    assert (code, stdout) == (1, "")
    assert stderr == f"parplan: error: cannot write into {shown}: File name too long\n"
    assert list(tmp_path.iterdir()) == []


def test_the_status_names_written_unchanged_and_removed_files(tmp_path, fast_writer):
    out = tmp_path / "out"
    _place(out, PLANS["single_node"])
    graph = texts("graph_channel_parallel")
    status = write_rendered(out, graph, force=True, retire=RENDERED_NAMES)
    unchanged = {n for n in graph if PLANS["single_node"][n] == PLANS["graph_channel_parallel"][n]}
    assert status == {
        **{n: "unchanged" if n in unchanged else "written" for n in graph},
        "megatron_args.sh": "removed",
    }
    assert holds_plan(out) == "graph_channel_parallel"


def test_a_held_lock_makes_the_next_run_wait_then_give_up(tmp_path, fast_writer, monkeypatch):
    out = tmp_path / "out"
    _place(out, PLANS["dense_multinode"])
    monkeypatch.setattr(folder_lock, "LOCK_WAIT_S", 0.05)
    with (out / LOCK_NAME).open("w") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(RenderError) as info:
            write_rendered(out, texts("moe"), force=True)
    assert info.value.message == (
        f"{out} is being written by another parplan run (still after 0.05 s); "
        "try again when it has finished"
    )
    (out / LOCK_NAME).unlink()
    assert holds_plan(out) == "dense_multinode"


# ---- races -----------------------------------------------------------------------------------


def _race_one(out: Path, case: str, force: bool, start: Any, results: Any) -> None:
    start.wait()
    try:
        write_rendered(out, texts(case), force=force, retire=RENDERED_NAMES)
        results.put((case, "ok"))
    except RenderError as exc:
        results.put((case, exc.message))


def race(out: Path, cases: tuple[str, str], *, force: bool) -> dict[str, str]:
    """Two processes write `cases` into `out` at the same moment; case -> "ok" or the error."""
    start, results = FORK.Barrier(2), FORK.Queue()
    runs = [FORK.Process(target=_race_one, args=(out, c, force, start, results)) for c in cases]
    for process in runs:
        process.start()
    for process in runs:
        process.join()
    assert [p.exitcode for p in runs] == [0, 0]
    return dict(results.get() for _ in runs)


def test_two_runs_into_one_folder_take_turns_and_the_loser_is_refused(tmp_path, fast_writer):
    for trial in range(RACE_TRIALS):
        out = tmp_path / f"out{trial}"
        outcome = race(out, ("single_node", "dense_multinode"), force=False)
        winners = [case for case, result in outcome.items() if result == "ok"]
        assert len(winners) == 1, outcome
        (loser,) = set(outcome) - set(winners)
        assert outcome[loser].startswith(f"{out}: will not overwrite "), outcome
        assert holds_plan(out) == winners[0]


def test_two_forced_runs_into_one_folder_leave_one_whole_plan(tmp_path, fast_writer):
    for trial in range(RACE_TRIALS):
        out = tmp_path / f"out{trial}"
        _place(out, PLANS["moe"])
        cases = ("single_node", "graph_channel_parallel")  # the second has no megatron_args.sh
        assert race(out, cases, force=True) == dict.fromkeys(cases, "ok")
        assert holds_plan(out) in cases


# ---- interrupts --------------------------------------------------------------------------------


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("step", STEPS)
def test_an_interrupt_at_any_call_leaves_one_plan_and_no_debris(
    step, interrupt, tmp_path, fast_writer
):
    """An exception at the k-th call of a step, for every k: the old plan stays whole (stopped
    while staging) or the new one is completed (stopped while renaming), then it propagates."""
    for k in itertools.count(1):
        out = tmp_path / f"out{k}"
        _place(out, PLANS["dense_multinode"])
        try:
            with _patched(*STEPS[step], at_call(k, _raise, interrupt)):
                write_rendered(out, texts("moe"), force=True)
        except interrupt:
            left = holds_plan(out)
            assert (left == "moe") if step == "rename" else (left in ("dense_multinode", "moe"))
            continue
        assert holds_plan(out) == "moe"
        break
    assert k > len(PLANS["moe"])  # a call for each file at least, and each was interrupted


def _signals_as_at_a_terminal(ignored: int | None = None) -> None:
    """The signal state `parplan` typed at a terminal starts with, whatever the test runner's:
    SIGINT raising KeyboardInterrupt, SIGTERM and SIGHUP with their default action, none of them
    blocked; `ignored` set to SIG_IGN. A forked child inherits the runner's state, and a runner
    started in the background by a script ignores SIGINT (POSIX XCU 2.11: an asynchronous list
    without job control inherits SIGINT and SIGQUIT ignored), one under nohup SIGHUP; the writer
    rightly leaves an ignored signal ignored, so the real-signal tests set the state they test."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, folder_lock.HELD_DURING_RENAMES)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in folder_lock.TERMINATING:
        signal.signal(signum, signal.SIG_DFL)
    if ignored is not None:
        signal.signal(ignored, signal.SIG_IGN)


def _signalled_write(out: Path, signum: int, step: str, ignored: int | None = None) -> None:
    """In a child, with the signals as at a terminal (`ignored` ignored): write moe over
    dense_multinode, sending `signum` to itself at the 3rd call of `step`; exits 130 on
    KeyboardInterrupt (SystemExit gives its own code)."""
    _signals_as_at_a_terminal(ignored)
    with _patched(*STEPS[step], at_call(3, os.kill, os.getpid(), signum)):
        try:
            write_rendered(out, texts("moe"), force=True)
        except KeyboardInterrupt:
            os._exit(130)
    os._exit(0)


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
@pytest.mark.parametrize(
    ("step", "plan"), [("create a staged file", "dense_multinode"), ("rename", "moe")]
)
def test_a_real_signal_while_staging_cleans_up_and_while_renaming_waits(
    signum, code, step, plan, tmp_path, fast_writer
):
    out = tmp_path / "out"
    _place(out, PLANS["dense_multinode"])
    child = FORK.Process(target=_signalled_write, args=(out, signum, step))
    child.start()
    child.join()
    assert child.exitcode == code
    assert holds_plan(out) == plan


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("step", ["create a staged file", "rename"])
def test_a_signal_the_run_was_started_ignoring_does_not_stop_the_write(
    signum, step, tmp_path, fast_writer
):
    """`parplan ... &` in a script ignores SIGINT, `nohup parplan` SIGHUP: the write goes on."""
    out = tmp_path / "out"
    _place(out, PLANS["dense_multinode"])
    child = FORK.Process(target=_signalled_write, args=(out, signum, step, signum))
    child.start()
    child.join()
    assert child.exitcode == 0
    assert holds_plan(out) == "moe"


@pytest.mark.parametrize(
    ("step", "k", "left", "warning"),
    [
        ("create a staged file", 4, "dense_multinode", r"removed 3 staged file\(s\)"),
        ("rename", 1, "moe", r"completed an interrupted write \(9 staged file\(s\) renamed"),
        ("rename", 7, "moe", r"completed an interrupted write \(3 staged file\(s\) renamed"),
    ],
)
def test_after_kill_9_the_next_run_repairs_the_folder_and_says_so(
    step, k, left, warning, tmp_path, fast_writer
):
    out = tmp_path / "out"
    _place(out, PLANS["dense_multinode"])
    child = FORK.Process(target=_killed_write, args=(out, "moe", step, k))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    assert holds_plan(out) is None  # debris or a mix, not a plan that looks complete
    assert (out / JOURNAL_NAME).exists() == (step == "rename")
    with pytest.warns(WriteWarning, match=warning):
        status = write_rendered(out, texts(left))
    assert set(status.values()) == {"unchanged"}
    assert holds_plan(out) == left


def test_the_cli_tells_of_a_repair(tmp_path, capsys, monkeypatch, golden_render, plan_jsons):
    monkeypatch.chdir(tmp_path)
    interrupted(tmp_path / "out", {"from": "dense_multinode", "to": "moe", "renamed": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the CLI prints the warning: none escapes
        code, stdout, stderr, _ = run(["render", str(plan_jsons["moe"]), "--out", "out"], capsys)
    assert (code, stderr) == (
        0,
        "parplan: warning: out: completed an interrupted write (7 staged file(s) renamed into "
        "place, 0 removed)\n",
    )
    assert sorted(stdout.splitlines()) == [f"unchanged  out/{n}" for n in sorted(PLANS["moe"])]
