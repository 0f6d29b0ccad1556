"""Values written into the files a shell reads: nccl.env, megatron_args.sh and the launchers.

bash ends a line only at `\\n` and a comment only at the end of its line; it splits a command
into words at blanks and `;|&<>()`, and expands `$`, backquotes and quotes. A value taken from
an input file (a model name, a rule's text, a mapping entry) can hold any of these, so each
value reaches a shell-read file through the one function for the place it stands in:

- `comment(text)`: free text in a `#` comment; every character that is not plain printable
  text (line breaks included) is written as a visible escape, so nothing ends the comment;
- `argument(value)`: one word of a command, quoted so bash reads back exactly `value`;
- `assignment(name, value)`: a `NAME=VALUE` line of nccl.env, which `docker run --env-file`
  reads too (taking the value literally, so it cannot be quoted): a value with a character
  outside render_checks.ENV_VALUE_SET is refused.
- `directive(option, value)`: a `#SBATCH --OPTION=VALUE` line of launch_slurm.sbatch, and
  `name_word(value)` a host name of the hostfile or a comment: sbatch splits a directive at
  blanks and does not read shell quotes back as bash does, and DeepSpeed reads a hostfile line
  by blanks too, so a value must be one plain word (one that `argument` leaves unquoted, not
  starting with `-`): any other is refused.

Names shown in comments are reduced further, to `safe_text.safe_name`'s character set (render.py).

The one Python file a plan may write (torchtitan's config function, parplan_torchtitan_config.py)
takes a value through `python_literal` (a literal that Python reads back as the value) or
`python_name` (a module or function name, refused unless it is one), and free text through
`comment` in a `#` comment: Python ends a comment only at the end of its line.
"""

from __future__ import annotations

import keyword
import math
import shlex

from parplan_gen.inputs.safe_text import printable
from parplan_gen.render.checks import ENV_NAME, ENV_VALUE, ENV_VALUE_SET, RenderError


def comment(text: str) -> str:
    """`text` with every control, format or line-break character written as an escape
    (`\\x0a`, `\\u2028`): nothing in it can end a comment line, whole, however long."""
    text = str(text)
    return text if text.isprintable() else printable(text, limit=len(text))


def argument(value: object) -> str:
    """`value` as one shell word: unchanged when that is safe, else single-quoted."""
    return shlex.quote(str(value))


def assignment(name: str, value: object) -> str:
    """`NAME=VALUE` for nccl.env; RenderError when the value cannot be written there."""
    text = str(value)
    if not ENV_NAME.fullmatch(name):
        raise RenderError(f"{printable(name)!r} is not an environment variable name")
    if not ENV_VALUE.fullmatch(text):
        raise RenderError(
            f"{name}={printable(text)}: characters outside [{ENV_VALUE_SET}] "
            "cannot be written to nccl.env (bash sources it; docker --env-file reads values "
            "as written, so nothing can be quoted)"
        )
    return f"{name}={text}"


def name_word(value: object, what: str) -> str:
    """`value` when it is one plain word (`argument` leaves it as is, no leading `-`), else a
    RenderError naming `what`: for host names and sbatch directive values."""
    text = str(value)
    if not text or text.startswith("-") or argument(text) != text:
        raise RenderError(
            f"{what} '{printable(text)}' is not one plain word (letters, digits, and "
            "_ . , : = + @ / % -, not first -): sbatch and the hostfile cannot quote it"
        )
    return text


def directive(option: str, value: object) -> str:
    """`#SBATCH --OPTION=VALUE` for launch_slurm.sbatch; RenderError for a value that is not
    one plain word (`name_word`)."""
    return f"#SBATCH --{option}={name_word(value, f'--{option}')}"


def python_literal(value: object) -> str:
    """`value` (text, a whole or finite number, a truth value, None, or a list of them) as a
    Python literal that reads back as exactly `value` (`repr`, which escapes every quote,
    backslash and unprintable character); RenderError for anything else."""
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(python_literal(item) for item in value) + "]"
    raise RenderError(f"{printable(repr(value))} has no Python literal parplan writes")


def python_name(value: object) -> str:
    """`value` when it is a Python name, or a dotted module path of them, that is no keyword
    (what a Python file imports or calls), else a RenderError."""
    text = str(value)
    parts = text.split(".")
    if not all(
        part.isidentifier() and part.isascii() and not keyword.iskeyword(part) for part in parts
    ):
        raise RenderError(f"'{printable(text)}' is not a Python name (letters, digits and _)")
    return text
