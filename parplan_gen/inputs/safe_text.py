"""User-supplied text made safe to show: on a terminal, in an error line, in a comment.

A model name, a file name or a value from an input file may hold control characters (ESC
sequences that repaint a terminal, NUL, carriage returns and the other line breaks that some
readers honour and others do not) and may be megabytes long. Everything that shows such text
to a person goes through `printable`, which escapes what is not plain printable text and
bounds the length; `safe_name` reduces a name to a character set that is inert in any file
format we write (shell comments included). One escaping per place text is shown: a terminal
view is written through `printable_lines`, each of its fields `printable`; Markdown (plan.md,
DIR/README.md) takes input text through `markdown`, which also escapes HTML, links, images,
code spans and table pipes.
"""

from __future__ import annotations

import re
import unicodedata

# An error line or a table cell shows at most this many characters of one user value: enough
# for any real model name, path or key, short enough to keep a one-line error one line.
MAX_SHOWN_CHARS = 200
# Unicode general categories that are not plain visible text: controls (Cc: NUL, ESC, CR, ...),
# format characters (Cf: bidi overrides, zero-width joiners), surrogates, private use,
# unassigned, and the line/paragraph separators U+2028/U+2029 (Zl, Zp) that some line readers
# split on.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _is_plain_ascii(text: str) -> bool:
    """ASCII with no control character: of ASCII, exactly the controls (Cc) are unprintable."""
    return text.isascii() and text.isprintable()


def printable(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` with every non-printable character written as an escape (`\\x1b`, `\\u2028`) and
    cut to `limit` characters (saying how many were left out)."""
    text = str(text)
    cut = text[:limit]
    if _is_plain_ascii(cut):  # the common case, without a look-up per character
        shown = cut
    else:
        shown = "".join(
            _escape(c) if unicodedata.category(c) in _UNSAFE_CATEGORIES else c for c in cut
        )
    if len(text) > limit:
        shown += f"... ({len(text) - limit} more characters)"
    return shown


def safe_name(text: str, fallback: str = "model", limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` reduced to `[A-Za-z0-9._+-]` (runs of anything else become one `-`), at most
    `limit` characters; `fallback` when nothing is left."""
    reduced = _NAME_UNSAFE.sub("-", str(text)[: limit * 4]).strip("-")[:limit]
    return reduced or fallback


def is_plain(text: str) -> bool:
    """True when `text` holds nothing that `printable` would escape."""
    text = str(text)
    return _is_plain_ascii(text) or all(
        unicodedata.category(c) not in _UNSAFE_CATEGORIES for c in text
    )


NOT_PLAIN_NAME = (
    "holds a control, format or line-break character; a name is shown in terminals and "
    "written into launch files, so it must be plain text"
)


def name_from_path(component: str) -> str:
    """A model name taken from a file or folder name: escaped where it is not plain text (a
    path component is at most a few hundred characters, so it is kept whole)."""
    return printable(component, limit=len(component))


# Markdown (plan.md, DIR/README.md): what CommonMark and GitHub's tables give a meaning to in
# running text, each escaped so that it shows as typed and means nothing. A backtick opens a
# code span, `|` ends a table cell, and `\` would cancel the escape written before any of these.
_MARKDOWN_ESCAPES = str.maketrans({"\\": "\\\\", "`": "\\`", "|": "\\|"})
# The rest mean something only in some places, and only there are they escaped (so that a rule
# reason such as "cp (2) > 1" or a source such as "[H100-DS] PCIe Gen5" stays as written):
# `<` before a letter, `/`, `!` or `?` opens raw HTML (`<script>`, `<img>`, `<!--`) or an
# autolink; `&` before `name;` or `#123;` is an entity; `](`, `][` and `]:` make a link, a
# reference link or a link definition, `![` an image (fetched when the page is shown), and a `]`
# that ends the text could make one with what follows it.
_MARKDOWN_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;)|\](?=[(\[:]|$)|(?<=!)\[")
_MARKDOWN_SHOWN = {"<": "&lt;", "&": "&amp;", "]": "\\]", "[": "\\["}
# The characters of a view that a terminal shows as written: printable ASCII and the line feed
# that ends each line; anything else sends the view through `printable`, line by line.
_TERMINAL_UNSAFE = re.compile(r"[^\n\x20-\x7e]")


def markdown(text: str) -> str:
    """`text` as inert Markdown on one line: runs of white space (line breaks included) become
    one space; raw HTML, entities, links, images, code spans, table pipes and backslashes are
    escaped so that they show as typed; control and format characters are shown as escapes
    (`printable`, uncut). The one escaping of input text for plan.md and README.md."""
    escaped = " ".join(str(text).split()).translate(_MARKDOWN_ESCAPES)
    escaped = _MARKDOWN_MARKUP.sub(lambda m: _MARKDOWN_SHOWN[m.group()], escaped)
    return printable(escaped, limit=len(escaped))


def printable_lines(text: str) -> str:
    """A text view for the terminal with every line `printable` (uncut): line feeds are kept,
    every other control, format or line-break character (ESC, CR, U+2028) is shown as an escape,
    so nothing in the view can move the cursor, repaint or hide a line."""
    if _TERMINAL_UNSAFE.search(text) is None:  # nearly always: plain ASCII lines
        return text
    return "\n".join(printable(line, limit=len(line)) for line in text.split("\n"))
