"""Parse a bash script into words and operators, one scan (inputs/shell_script.py expands them).

A word is a list of parts: literal text (quoted, or not) and expansions (`$NAME`, `${NAME}`,
`${NAME[@]}`, `${NAME:-word}` and its kin). `$(...)`, `$((...))`, backquotes and other `${...}`
forms are kept as written, never run. Errors are ValueError(message, offset in the text).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

MAX_NESTING = 16  # ${A:-${B:-...}} levels

_OPS = ";&|()\n"
_PLAIN = re.compile(r"[^ \t\r\n'\"\\$`;&|()]+")
_PLAIN_IN_BRACES = re.compile(r"[^'\"\\$`}]+")
_PLAIN_IN_QUOTES = re.compile(r'[^"\\$`]+')
_GAP = re.compile(r"(?:[ \t\r]+|\\\r?\n|#[^\n]*)*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]")
_BRACED = re.compile(r"(\[[@*]\])?(:?[-=+])?")
_PAREN_STEP = re.compile(r"[()'\"\\]")
_BRACE_STEP = re.compile(r"[{}'\"\\]")
_QUOTE_END = re.compile(r'"|\\.', re.DOTALL)


@dataclass(frozen=True)
class Lit:
    """Text as written (quotes and escapes removed)."""

    text: str
    line: int
    quoted: bool  # unquoted text inside ${NAME:-a b} is split like an expansion


@dataclass(frozen=True)
class Exp:
    """`$NAME`, `${NAME[@]}`, `${NAME:-word}`, ...: `word` is the word after the operator."""

    name: str
    index: str | None  # "@", "*" or None
    op: str | None  # ":-", "-", ":=", "=", ":+", "+"
    word: tuple[Lit | Exp, ...]
    quoted: bool
    line: int
    offset: int
    source: str  # as written: what stays when the variable is not set


@dataclass
class Word:
    """One shell word: its parts, its offsets in the text and the line it starts on."""

    parts: list[Lit | Exp]
    start: int
    end: int
    line: int


class Parser:
    """The words and operators of a text, in one scan."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_left(self.newlines, offset) + 1

    def tokens(self) -> list[Word | tuple[str, int]]:
        """Words, and operators as (character, offset)."""
        text = self.text
        out: list[Word | tuple[str, int]] = []
        parts: list[Lit | Exp]
        pos = _GAP.match(text).end()  # type: ignore[union-attr]
        while pos < len(text):
            if text[pos] in _OPS:
                out.append((text[pos], pos))
                pos += 1
            else:
                start, parts = pos, []
                pos = self._word(pos, parts)
                out.append(Word(parts, start, pos, self.line(start)))
            pos = _GAP.match(text, pos).end()  # type: ignore[union-attr]
        return out

    def _word(self, pos: int, parts: list[Lit | Exp], braces: int = 0) -> int:
        """Parse word parts from `pos` up to a blank or operator (inside `${...:-`, up to the
        closing brace); the offset where the word ends."""
        text, plain = self.text, _PLAIN_IN_BRACES if braces else _PLAIN
        while pos < len(text):
            c = text[pos]
            m = plain.match(text, pos)
            if m:
                parts.append(Lit(m.group(), self.line(pos), False))
                pos = m.end()
            elif c == "'":
                end = text.find("'", pos + 1)
                if end < 0:
                    raise ValueError("No closing quotation", pos)
                parts.append(Lit(text[pos + 1 : end], self.line(pos), True))
                pos = end + 1
            elif c == '"':
                pos = self._double_quoted(pos, parts, braces)
            elif c == "\\":
                pos = self._escape(pos, parts, quoted=False)
            elif c == "$":
                pos = self._dollar(pos, parts, False, braces)
            elif c == "`":
                pos = self._opaque(pos, self._backquote_end(pos), parts, False)
            else:  # a blank, an operator, or the closing brace
                return pos
        return pos

    def _double_quoted(self, start: int, parts: list[Lit | Exp], braces: int) -> int:
        text, pos = self.text, start + 1
        mark = len(parts)
        parts.append(Lit("", self.line(start), True))  # "" is a word, "${A[@]}" maybe none
        while pos < len(text):
            c = text[pos]
            m = _PLAIN_IN_QUOTES.match(text, pos)
            if m:
                parts.append(Lit(m.group(), self.line(pos), True))
                pos = m.end()
            elif c == '"':
                if any(isinstance(p, Exp) and p.index == "@" for p in parts[mark + 1 :]):
                    del parts[mark]
                return pos + 1
            elif c == "\\":
                if pos + 1 < len(text) and text[pos + 1] in '$`"\\\n':
                    pos = self._escape(pos, parts, quoted=True)
                else:
                    parts.append(Lit("\\", self.line(pos), True))
                    pos += 1
            elif c == "$":
                pos = self._dollar(pos, parts, True, braces)
            else:  # a backquote
                pos = self._opaque(pos, self._backquote_end(pos), parts, True)
        raise ValueError("No closing quotation", start)

    def _escape(self, pos: int, parts: list[Lit | Exp], quoted: bool) -> int:
        text = self.text
        if pos + 1 >= len(text):
            raise ValueError("No escaped character", pos)
        if text[pos + 1] == "\n":  # a line continuation inside a word
            return pos + 2
        parts.append(Lit(text[pos + 1], self.line(pos), quoted))
        return pos + 2

    def _dollar(self, pos: int, parts: list[Lit | Exp], quoted: bool, braces: int) -> int:
        text, nxt = self.text, self.text[pos + 1 : pos + 2]
        if nxt == "(":
            return self._opaque(pos, self._closing(pos + 1, "(", ")", _PAREN_STEP), parts, quoted)
        if nxt == "{":
            return self._braced(pos, parts, quoted, braces)
        m = _NAME.match(text, pos + 1)
        if m:
            parts.append(
                Exp(m.group(), None, None, (), quoted, self.line(pos), pos, "$" + m.group())
            )
            return m.end()
        if nxt in ("@", "*"):  # no positional parameters: nothing
            parts.append(Exp("@", "@", None, (), quoted, self.line(pos), pos, "$" + nxt))
            return pos + 2
        special = nxt in ("#", "?", "$", "!", "-")
        return self._opaque(pos, pos + 1 + special, parts, quoted)

    def _braced(self, pos: int, parts: list[Lit | Exp], quoted: bool, braces: int) -> int:
        text, line = self.text, self.line(pos)
        name = _NAME.match(text, pos + 2)
        shape = _BRACED.match(text, name.end()) if name else None
        if name is None or shape is None or shape.end() >= len(text):
            return self._opaque(pos, self._closing(pos + 1, "{", "}", _BRACE_STEP), parts, quoted)
        index, op = shape.group(1), shape.group(2)
        word: list[Lit | Exp] = []
        end = shape.end()
        if op is not None:
            if braces >= MAX_NESTING:
                raise ValueError(f"expansions nested more than {MAX_NESTING} deep", pos)
            end = self._word(end, word, braces + 1)
        if end >= len(text) or text[end] != "}":
            if op is None:  # another form (${#NAME}, ${NAME/a/b}, ...): as written
                end = self._closing(pos + 1, "{", "}", _BRACE_STEP)
                return self._opaque(pos, end, parts, quoted)
            raise ValueError("No closing brace", pos)
        if quoted:
            word = [p if isinstance(p, Exp) else Lit(p.text, p.line, True) for p in word]
        parts.append(
            Exp(
                name.group(),
                index and index[1],
                op,
                tuple(word),
                quoted,
                line,
                pos,
                text[pos : end + 1],
            )
        )
        return end + 1

    def _opaque(self, start: int, end: int, parts: list[Lit | Exp], quoted: bool) -> int:
        """text[start:end] kept as written (never split: it is no variable's value)."""
        parts.append(Lit(self.text[start:end], self.line(start), True))
        return end

    def _closing(self, pos: int, opening: str, closing: str, step: re.Pattern[str]) -> int:
        """The offset after the bracket that closes the one at `pos` (quotes skipped)."""
        text, depth, at = self.text, 0, pos
        while True:
            m = step.search(text, at)
            if m is None:
                raise ValueError(f"No closing {'parenthesis' if closing == ')' else 'brace'}", pos)
            c, at = m.group(), m.end()
            if c == opening:
                depth += 1
            elif c == closing:
                depth -= 1
                if depth == 0:
                    return at
            elif c == "\\":
                at += 1
            elif c == "'":
                at = text.find("'", at) + 1 or len(text)
            else:
                q = _QUOTE_END.search(text, at)
                while q is not None and q.group() != '"':
                    q = _QUOTE_END.search(text, q.end())
                at = len(text) if q is None else q.end()

    def _backquote_end(self, pos: int) -> int:
        end = self.text.find("`", pos + 1)
        if end < 0:
            raise ValueError("No closing backquote", pos)
        return end + 1
