"""The writer's recovery journal, owned and authenticated by the run that wrote it.

A journal lists what one run staged in an output folder and what it may rename or remove, so
that the next run into the folder can complete a change that kill -9 or a power cut stopped.
Anyone who can write into the folder can also leave a file named like a journal there, so a
journal is trusted only as far as it proves itself:

- it carries an HMAC-SHA256 under a key only this user can read (`key_path`: created once,
  mode 0600, in the user's state folder, outside every output folder), so a planted journal
  fails verification and is discarded unread;
- it names the folder it belongs to (device and inode), and every staged file in it carries the
  run's random token in its name and is listed with its size and SHA-256, so a staged file
  swapped in afterwards is not renamed;
- for every file it replaces or removes it records the file as the run saw it (inode, size,
  modification time): a file changed since, by the user or anyone else, is left as it is.

Only regular files named as this module names them (`staged_prefix`) are ever renamed into place,
and only files recorded in a verified journal, unchanged since, are ever removed or replaced.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

JOURNAL_NAME = ".parplan.journal"  # exists only while (or when a killed run was) renaming
JOURNAL_FORMAT = 2  # format 1 (no key, no token) is never replayed: it cannot be verified
STAGED_INFIX = ".parplan-"  # staged files are named `.NAME.parplan-TOKEN-XXXX.tmp`
TOKEN_HEX = 16  # hex digits of a run's token: 64 random bits, never guessed by a planted file
_STAGED = re.compile(
    rf"\.(?P<target>.+)\.parplan-(?P<token>[0-9a-f]{{{TOKEN_HEX}}})-[a-z0-9_]+\.tmp"
)  # mkstemp's random part is [a-z0-9_]
# What any run of the writer, this version or an earlier one (`.NAME.parplan-XXXX.tmp`, no
# token), may have staged: removed when no verified journal lists it, never renamed.
_DEBRIS = re.compile(r"\.(?P<target>.+)\.parplan-[a-z0-9_-]+\.tmp")
# A journal names about ten staged files (forty for `plan --all-backends`) of some two hundred
# characters each with its hashes: a larger file is not a journal this writer wrote.
MAX_JOURNAL_BYTES = 64 * 1024
KEY_BYTES = 32  # HMAC-SHA256's block-size-independent recommended key length (RFC 2104, sec. 3)
KEY_FILE_MODE = 0o600
KEY_FOLDER_MODE = 0o700
# A folder part of a rendered name: `plan --all-backends` writes DIR/<backend>/<file>.
MAX_NAME_PARTS = 2


@dataclass(frozen=True)
class Seen:
    """A file as a run saw it when it compared: enough to tell that it changed since."""

    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> Seen | None:
        """What is at `path` now (not following a final symbolic link); None when absent."""
        try:
            info = path.lstat()
        except FileNotFoundError:
            return None
        return cls(info.st_ino, info.st_size, info.st_mtime_ns)

    def as_list(self) -> list[int]:
        return [self.inode, self.size, self.mtime_ns]


@dataclass(frozen=True)
class Staged:
    """A file staged under a temporary name, to be renamed over `target`."""

    name: str  # relative to the folder: `.NAME.parplan-TOKEN-XXXX.tmp` or `SUB/.NAME...`
    sha256: str
    size: int
    before: Seen | None  # the target as the run saw it; None where there was none

    @property
    def target(self) -> str:
        return staged_target(self.name)


@dataclass(frozen=True)
class Removal:
    """A file an earlier plan left that this one removes."""

    name: str
    before: Seen


@dataclass
class Journal:
    """What one run stages and removes in one folder."""

    token: str = field(default_factory=lambda: secrets.token_hex(TOKEN_HEX // 2))
    staged: list[Staged] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)


# ---- names -------------------------------------------------------------------------------------


def plain_part(name: object) -> bool:
    """A name for a file or folder in the folder: not empty, not hidden, no separator, no NUL."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not name.startswith(".")
        and "/" not in name
        and "\0" not in name
    )


def plain_name(name: object) -> bool:
    """A rendered name: a plain file name, or one plain folder and a plain file name in it."""
    if not isinstance(name, str) or "\\" in name:
        return False
    parts = name.split("/")
    return 0 < len(parts) <= MAX_NAME_PARTS and all(map(plain_part, parts))


def staged_prefix(target: str, token: str) -> str:
    """What `tempfile.mkstemp` puts before its random part for `target`'s staged file."""
    return f".{PurePosixPath(target).name}{STAGED_INFIX}{token}-"


def staged_target(name: object) -> str:
    """The file a staged name is renamed to; "" for a name that the writer does not stage."""
    if not isinstance(name, str):
        return ""
    path = PurePosixPath(name)
    found = _STAGED.fullmatch(path.name)
    if not found:
        return ""
    target = str(path.with_name(found["target"]))
    return target if plain_name(target) else ""


def staged_token(name: str) -> str:
    found = _STAGED.fullmatch(PurePosixPath(name).name)
    return found["token"] if found else ""


def is_staged(name: str) -> bool:
    """Whether a file name (no folder part) has the form of a staged file of any run."""
    return _DEBRIS.fullmatch(name) is not None


# ---- the key -----------------------------------------------------------------------------------


def key_path() -> Path | None:
    """Where this user's journal key lives: $XDG_STATE_HOME/parplan/journal.key (default
    ~/.local/state, the XDG Base Directory Specification's state folder); None without a home."""
    base = Path(os.environ.get("XDG_STATE_HOME", ""))
    if not base.is_absolute():  # the spec: a relative value is invalid and is ignored
        try:
            base = Path.home() / ".local" / "state"
        except (RuntimeError, KeyError):  # no HOME and no password entry
            return None
    return base / "parplan" / "journal.key"


def journal_key(*, create: bool) -> bytes | None:
    """This user's key, made on first use when `create`; None where it cannot be had (no home,
    a read-only home, or a key file that is not this user's private regular file)."""
    path = key_path()
    if path is None:
        return None
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:
        path.parent.mkdir(mode=KEY_FOLDER_MODE, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(path, flags, KEY_FILE_MODE)
    except FileExistsError:  # another run made it first
        return journal_key(create=False)
    except OSError:
        return None
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(KEY_BYTES))
        handle.flush()
        os.fsync(handle.fileno())
    return journal_key(create=False)


def _read_key(path: Path) -> bytes | None:
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as handle:
        info = os.fstat(handle.fileno())
        private = stat.S_ISREG(info.st_mode) and not info.st_mode & 0o077
        if not private or info.st_uid != os.geteuid() or info.st_size != KEY_BYTES:
            return None
        key = handle.read(KEY_BYTES + 1)
    return key if len(key) == KEY_BYTES else None


# ---- writing and reading -----------------------------------------------------------------------


def folder_id(out: Path) -> list[int]:
    info = out.stat()
    return [info.st_dev, info.st_ino]


def journal_bytes(journal: Journal, out: Path, key: bytes | None) -> bytes:
    """The journal as written: its body and the body's HMAC under `key` (null without a key:
    such a journal is never replayed)."""
    body = {
        "format": JOURNAL_FORMAT,
        "folder": folder_id(out),
        "token": journal.token,
        "rename": [
            [s.name, s.sha256, s.size, s.before.as_list() if s.before else None]
            for s in journal.staged
        ],
        "remove": [[r.name, r.before.as_list()] for r in journal.removals],
    }
    mac = _mac(key, body) if key is not None else None
    return json.dumps({"body": body, "mac": mac}).encode("utf-8")


def _mac(key: bytes, body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


def read_journal(raw: bytes, out: Path, key: bytes | None) -> Journal | None:
    """The journal `raw` holds if it is this user's, of this folder, and well formed; else None
    (nothing in it is to be trusted)."""
    try:
        if len(raw) > MAX_JOURNAL_BYTES:
            return None
        doc = json.loads(raw)
        body, mac = doc["body"], doc["mac"]
        if key is None or not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(key, body)):
            return None
        if body["format"] != JOURNAL_FORMAT or body["folder"] != folder_id(out):
            return None
        journal = Journal(token=body["token"])
        journal.staged = [
            Staged(name, digest, size, Seen(*before) if before is not None else None)
            for name, digest, size, before in body["rename"]
        ]
        journal.removals = [Removal(name, Seen(*before)) for name, before in body["remove"]]
    except (ValueError, TypeError, KeyError, OSError):
        return None
    own = all(s.target and staged_token(s.name) == journal.token for s in journal.staged) and all(
        plain_name(r.name) for r in journal.removals
    )
    return journal if own else None


def holds(path: Path, size: int, sha256: str) -> bool:
    """Whether `path` is a regular file (not a link) of `size` bytes with that SHA-256."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            return False
        return hashlib.sha256(handle.read(size + 1)).hexdigest() == sha256


def digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()
