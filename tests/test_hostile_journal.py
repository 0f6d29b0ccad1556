"""The output folder's journal is trusted only as far as it proves itself (issue 31, class 1).

tests/hostile/writer.yaml holds journals planted by someone else (the probe's, and one in the
current format with a forged HMAC): they are discarded and nothing they name is renamed or
removed. Here a real run is killed with kill -9 while renaming, and then its folder is changed
before the next run: only the killed run's own staged files are renamed, only over the files it
saw, and a file changed since, by anyone, is left as it is.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from test_writer import (  # noqa: F401  (fast_writer is a fixture)
    FORK,
    PLANS,
    _patched,
    _place,
    at_call,
    fast_writer,
    holds_plan,
    is_writers,
    texts,
)

from parplan_gen.render import journal as render_journal
from parplan_gen.render.checks import RenderError
from parplan_gen.render.journal import JOURNAL_NAME, staged_target
from parplan_gen.render.writer import WriteWarning, write_rendered

pytestmark = pytest.mark.usefixtures("fast_writer")
DISCARDED = "discarded a journal that this user's parplan did not write"


def _killed(out: Path, case: str, renamed: int, retire: tuple[str, ...] = ()) -> None:
    """In a child: write plan `case` into `out` with --force, killed (kill -9) after `renamed`
    of its renames."""
    with _patched(Path, "replace", at_call(renamed + 1, os.kill, os.getpid(), signal.SIGKILL)):
        write_rendered(out, texts(case), force=True, retire=retire)


def killed_write(out: Path, case: str, renamed: int, retire: tuple[str, ...] = ()) -> list[str]:
    """Run `_killed` in a child; the targets of the files it left staged."""
    child = FORK.Process(target=_killed, args=(out, case, renamed, retire))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    assert (out / JOURNAL_NAME).is_file()
    return sorted(t for p in out.iterdir() if (t := staged_target(p.name)))


def test_a_target_edited_after_the_kill_is_left_as_the_user_made_it(tmp_path):
    out = tmp_path / "out"
    _place(out, PLANS["dense_multinode"])
    pending = killed_write(out, "moe", renamed=3)
    edited = pending[0]
    (out / edited).write_bytes(b"my own edit\n")
    with (
        pytest.warns(WriteWarning, match=rf"left {edited} as they are \(changed since\)"),
        pytest.raises(RenderError, match=rf"will not overwrite {edited} \(content differs\)"),
    ):
        write_rendered(out, texts("moe"))
    assert (out / edited).read_bytes() == b"my own edit\n"
    others = set(PLANS["moe"]) - {edited}
    assert all((out / n).read_bytes() == PLANS["moe"][n] for n in others)


def test_a_staged_file_swapped_after_the_kill_is_never_renamed(tmp_path):
    out = tmp_path / "out"
    _place(out, PLANS["dense_multinode"])
    pending = killed_write(out, "moe", renamed=0)
    swapped = next(p for p in out.iterdir() if staged_target(p.name) == pending[0])
    planted = b"x" * len(swapped.read_bytes())  # same size, other bytes
    swapped.write_bytes(planted)
    with pytest.warns(WriteWarning) as told:
        write_rendered(out, texts("moe"), force=True)
    assert any("staged file(s) renamed" in str(w.message) for w in told)
    assert holds_plan(out) == "moe"  # the rest completed, the swapped one written afresh
    assert all(planted != (out / n).read_bytes() for n in PLANS["moe"])


def test_a_removal_is_not_replayed_on_a_file_edited_since(tmp_path):
    out = tmp_path / "out"
    _place(out, PLANS["moe"])
    killed_write(out, "graph_channel_parallel", renamed=0, retire=("megatron_args.sh",))
    (out / "megatron_args.sh").write_text("# my own edit\n", encoding="utf-8")
    with (
        pytest.warns(WriteWarning, match=r"left megatron_args\.sh as they are"),
        pytest.raises(RenderError, match=r"will not remove megatron_args\.sh"),
    ):
        write_rendered(out, texts("graph_channel_parallel"), retire=("megatron_args.sh",))
    assert (out / "megatron_args.sh").read_text(encoding="utf-8") == "# my own edit\n"


def test_a_journal_copied_into_another_folder_is_discarded(tmp_path):
    killed = tmp_path / "killed"
    _place(killed, PLANS["dense_multinode"])
    killed_write(killed, "moe", renamed=2)
    copy = tmp_path / "copy"
    shutil.copytree(killed, copy)
    before = {p.name: p.read_bytes() for p in copy.iterdir() if not is_writers(p.name)}
    with (
        pytest.warns(WriteWarning, match=DISCARDED),
        pytest.raises(RenderError, match="will not overwrite"),
    ):
        write_rendered(copy, texts("moe"))
    after = {p.name: p.read_bytes() for p in copy.iterdir()}
    assert after == before  # the mix as it was, and nothing of the writer's own


@pytest.mark.parametrize("damage", ["removed", "readable by others", "replaced"])
def test_without_this_users_key_nothing_is_replayed(damage, tmp_path):
    """A key that is gone, not private, or another key: the journal cannot prove itself."""
    out = tmp_path / "out"
    _place(out, PLANS["dense_multinode"])
    killed_write(out, "moe", renamed=4)
    key = render_journal.key_path()
    assert key is not None and key.is_file()
    original = key.read_bytes()
    try:
        if damage == "removed":
            key.unlink()
        elif damage == "readable by others":
            key.chmod(0o644)
        else:
            key.write_bytes(os.urandom(render_journal.KEY_BYTES))
        mixed = {p.name: p.read_bytes() for p in out.iterdir() if p.name in PLANS["moe"]}
        with (
            pytest.warns(WriteWarning, match=DISCARDED),
            pytest.raises(RenderError, match="will not overwrite"),
        ):
            write_rendered(out, texts("moe"))
        assert {n: (out / n).read_bytes() for n in mixed} == mixed
    finally:
        key.unlink(missing_ok=True)
        key.write_bytes(original)
        key.chmod(render_journal.KEY_FILE_MODE)


def test_the_key_is_private_and_outside_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    key = render_journal.journal_key(create=True)
    path = render_journal.key_path()
    assert key is not None and len(key) == render_journal.KEY_BYTES
    assert path == tmp_path / "state" / "parplan" / "journal.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert render_journal.journal_key(create=True) == key  # made once


def test_with_no_key_to_be_had_a_write_still_succeeds(tmp_path, monkeypatch):
    """A home that cannot hold the key: the write itself is unaffected; its journal is unsigned,
    so a run killed while renaming would be cleaned up, not completed."""
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the state folder would be\n", encoding="utf-8")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    assert render_journal.journal_key(create=True) is None
    out = tmp_path / "out"
    write_rendered(out, texts("moe"))
    assert holds_plan(out) == "moe"
