"""Typed errors: each says who must act. Only the CLI turns them into messages and exit codes."""

from __future__ import annotations

from collections.abc import Callable


class SourceRef:
    """Where something came from: a file, an optional 1-based line/column and a key path.

    A reference made by `SourceRef.lazy` finds its line and column only when they are first
    read: loading rules makes a reference for every field, and most are never shown.
    """

    __slots__ = ("_column", "_line", "_resolve", "file", "path")

    def __init__(
        self, file: str, line: int | None = None, column: int | None = None, path: str = ""
    ) -> None:
        self.file = file
        self.path = path
        self._line = line
        self._column = column
        self._resolve: Callable[[], tuple[int | None, int | None]] | None = None

    @classmethod
    def lazy(
        cls, file: str, path: str, resolve: Callable[[], tuple[int | None, int | None]]
    ) -> SourceRef:
        """A reference whose (line, column) `resolve()` gives, called once when first needed."""
        ref = cls(file, path=path)
        ref._resolve = resolve
        return ref

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
        where = self.file
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
        """One line: `file:line:col: [key.path: ]message` when the place is known."""
        if self.where is None:
            return self.message
        prefix = str(self.where)
        if self.where.path:
            return f"{prefix}: {self.where.path}: {self.message}"
        return f"{prefix}: {self.message}"


class InputError(ParplanError):
    """A file or value the user gave is wrong; the user must fix the input (exit 1)."""


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
