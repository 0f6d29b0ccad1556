"""Typed errors: each says who must act. Only the CLI turns them into messages and exit codes."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable

from parplan_gen.inputs.safe_text import printable

# An error is one line of bounded length, whatever the input held: the file name and key path
# are shown up to SHOWN_PLACE_CHARS (Linux paths reach 4,096 bytes; real ones stay far below),
# the message up to SHOWN_MESSAGE_CHARS (room for any message about one input; a planner refusal
# that lists hundreds of rejection reasons is cut, saying how much was left out).
SHOWN_PLACE_CHARS = 1000
SHOWN_MESSAGE_CHARS = 2000
# A word longer than this is no misspelling of a name we know (those are under 40 characters),
# and difflib's time grows with its length (2.7 s for 10 MB): no suggestion is looked for.
MAX_HINT_CHARS = 100
# A number with more digits than this is shown by its power of ten, never converted to text in
# full (Python refuses to convert an int of more than 4,300 digits).
SHOWN_DIGITS = 24


def shown_value(value: object) -> str:
    """A value from an input file or argument, for a message: a number as written (a huge one
    by its magnitude), text quoted, escaped and cut, a list or mapping by its type."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = abs(value)
        if size < 10**SHOWN_DIGITS:
            return str(value)
        power = int(math.log10(size))
        power -= 10**power > size  # the float log rounds 10^k - 1 up to k
        sign, bound = ("-", "less than -") if value < 0 else ("", "more than ")
        return f"{sign}10^{power}" if size == 10**power else f"{bound}10^{power}"
    if isinstance(value, str | float | bool) or value is None:
        return printable(repr(value))
    return f"a {type(value).__name__}"


def did_you_mean(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str:
    """`; did you mean 'name'?` with the closest of `choices`, or "" when none is close."""
    if len(word) > MAX_HINT_CHARS:
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return f"; did you mean '{close[0]}'?" if close else ""


class SourceRef:
    """Where something came from: a file, an optional 1-based line/column and a key path.

    A reference made by `SourceRef.lazy` finds its line and column only when they are first
    read: loading rules makes a reference for every field, and most are never shown.
    """

    __slots__ = ("_column", "_line", "_resolve", "document", "file", "path")

    def __init__(
        self, file: str, line: int | None = None, column: int | None = None, path: str = ""
    ) -> None:
        self.file = file
        self.path = path
        self._line = line
        self._column = column
        self._resolve: Callable[[], tuple[int | None, int | None]] | None = None
        # The parsed file a lazy reference points into (an `inputs.source.Document`), or None.
        self.document: object | None = None

    @classmethod
    def lazy(
        cls,
        file: str,
        path: str,
        resolve: Callable[[], tuple[int | None, int | None]],
        document: object | None = None,
    ) -> SourceRef:
        """A reference whose (line, column) `resolve()` gives, called once when first needed;
        `document` is the parse it points into."""
        ref = cls(file, path=path)
        ref._resolve = resolve
        ref.document = document
        return ref

    def same_place(self, other: SourceRef) -> bool:
        """Whether both point at one place, without finding a lazy reference's line: the same
        file and key path in the same parse (a file read again may have changed), or, for
        references with their positions given, equal ones."""
        if (self.file, self.path) != (other.file, other.path):
            return False
        if self.document is not None or other.document is not None:
            return self.document is other.document
        return self == other

    def _position(self) -> None:
        if self._resolve is not None:
            self._line, self._column = self._resolve()
            self._resolve = None

    @property
    def line(self) -> int | None:
        self._position()
        return self._line

    @property
    def column(self) -> int | None:
        self._position()
        return self._column

    def _key(self) -> tuple[str, int | None, int | None, str]:
        return (self.file, self.line, self.column, self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SourceRef) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"SourceRef(file={self.file!r}, line={self.line!r}, column={self.column!r}, "
            f"path={self.path!r})"
        )

    def __str__(self) -> str:
        return self.shown(len(self.file))

    def shown(self, limit: int) -> str:
        """`file:line:col` with the file name escaped and cut to `limit` characters."""
        where = printable(self.file, limit)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where


class ParplanError(Exception):
    """Base of every error the library raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, where: SourceRef | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(self.render())

    def render(self) -> str:
        """One bounded line: `file:line:col: [key.path: ]message` when the place is known, every
        part that may hold user text escaped and cut (`safe_text.printable`)."""
        message = printable(self.message, SHOWN_MESSAGE_CHARS)
        where = self.where
        if where is None:
            return message
        prefix = where.shown(SHOWN_PLACE_CHARS)
        if where.path:
            return f"{prefix}: {printable(where.path, SHOWN_PLACE_CHARS)}: {message}"
        return f"{prefix}: {message}"


class InputError(ParplanError):
    """A file or value the user gave is wrong; the user must fix the input (exit 1)."""


class NothingFitsError(ParplanError):
    """No layout of the request runs and fits (exit 3): the inputs are valid, the plan is the
    closest candidate and the advice, printed before this one line; nothing is written."""

    exit_code = 3


class SourceError(InputError):
    """A file cannot be read or parsed (missing, not UTF-8, malformed YAML/JSON, forbidden tag)."""


class GraphError(InputError):
    """A model graph is inconsistent (cycle, dangling edge, duplicate id, bad op)."""


class RuleError(InputError):
    """A rule file breaks the rule schema or references something undefined."""


class FormulaError(RuleError):
    """A formula is not allowed (unknown name, forbidden syntax) or fails when evaluated."""


class UsageError(ParplanError):
    """The command line itself is wrong (exit 2)."""

    exit_code = 2
