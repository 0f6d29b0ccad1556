"""Typed errors: each says who must act. Only the CLI turns them into messages and exit codes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceRef:
    """Where something came from: a file, an optional 1-based line/column and a key path."""

    file: str
    line: int | None = None
    column: int | None = None
    path: str = ""

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
