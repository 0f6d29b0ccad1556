"""Split a shell command line (a Megatron-LM launch script) into words, in linear time.

Quotes and backslashes are removed, `#` comments dropped, nothing is expanded. Matched piece by
piece, splitting is linear in the text (shlex.split is quadratic in a word's length), so that an
argument file of the largest size the readers accept is split fast whatever it holds.
"""

from __future__ import annotations

import re

_BLANK = " \t\r\n"  # what separates shell words (as shlex)
# Blanks and `#` comments between words; one piece of a word: plain characters, '...' (all
# literal), "..." (backslash escapes \" and \\ only, as shlex), or \x (the character x).
_GAP = re.compile(rf"(?:[{_BLANK}]+|#[^\n]*)*")
_PIECE = re.compile(rf"""[^{_BLANK}'"\\]+|'[^']*'|"[^"\\]*(?:\\.[^"\\]*)*"|\\.""", re.DOTALL)
_QUOTED_ESCAPE = re.compile(r'\\([\\"])')


def shell_words(text: str) -> list[tuple[str, int]]:
    """The words of a shell command line with their offsets in `text`: quotes and backslashes
    removed, `#` comments dropped, nothing expanded; ValueError(message, offset) for an
    unclosed quote or a trailing backslash."""
    words: list[tuple[str, int]] = []
    pos = _GAP.match(text).end()  # type: ignore[union-attr]
    while pos < len(text):
        start, pieces = pos, []
        while pos < len(text) and text[pos] not in _BLANK:
            piece = _PIECE.match(text, pos)
            if piece is None:
                what = "No escaped character" if text[pos] == "\\" else "No closing quotation"
                raise ValueError(what, pos)
            pieces.append(_unquote(piece.group()))
            pos = piece.end()
        words.append(("".join(pieces), start))
        pos = _GAP.match(text, pos).end()  # type: ignore[union-attr]
    return words


def _unquote(piece: str) -> str:
    if piece[0] == "'":
        return piece[1:-1]
    if piece[0] == '"':
        return _QUOTED_ESCAPE.sub(r"\1", piece[1:-1])
    return piece[1] if piece[0] == "\\" else piece
