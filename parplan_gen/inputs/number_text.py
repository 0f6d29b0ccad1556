"""Numbers written as text, on a command line or in an argument file: ASCII digits only, and
bounded by their length before they are converted (a 5,000-digit string is refused, not parsed).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from typing import Any

from parplan_gen.inputs.errors import SHOWN_DIGITS, shown_value

# Numbers on a command line or in an argument file are ASCII: int() and float() also take
# '١٢', '1_000', '+8' and ' 8 ', spellings no launcher writes ('²' even passes str.isdigit()).
_WHOLE = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|-?inf|nan")


def whole_number(text: str, maximum: int, minimum: int = 1) -> int:
    """`text` as a whole number from `minimum` to `maximum` in ASCII digits, or a ValueError
    saying why. A number longer than `maximum` is refused by its length, never converted."""
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"expected a whole number (digits 0-9), got {shown_value(text)}")
    digits = text.lstrip("-").lstrip("0") or "0"
    if len(digits) <= len(str(maximum)) and minimum <= int(text) <= maximum:
        return int(text)
    sign = "negative " if text.startswith("-") else ""
    got = text if len(text) <= SHOWN_DIGITS else f"a {sign}number of {len(digits)} digits"
    raise ValueError(f"expected a whole number from {minimum} to {maximum}, got {got}")


def element_count(text: str, maximum: int) -> int:
    """`text` as a whole count from 1 to `maximum`, in digits or with an exponent (`5e8`, as
    DeepSpeed's configs write bucket sizes), or a ValueError saying why."""
    if _WHOLE.fullmatch(text):
        return whole_number(text, maximum)
    if not _DECIMAL.fullmatch(text):
        raise ValueError(
            f"expected a whole number such as 500000000 or 5e8, got {shown_value(text)}"
        )
    value = float(text)
    if not (1 <= value <= maximum and value.is_integer()):
        raise ValueError(
            f"expected a whole number from 1 to {maximum:.0e}, got {shown_value(text)}"
        )
    return int(value)


def ascii_decimal(text: str) -> float:
    """`text` as a number in ASCII (exponent allowed; `inf` and `nan` are returned as such, for
    the caller's range to refuse with its own words), or a ValueError."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"expected a number (digits 0-9), got {shown_value(text)}")
    return float(text)


def positive_decimal(text: str) -> float:
    """`text` as a finite number above 0 in ASCII (exponent allowed), or a ValueError."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"expected a number (digits 0-9), got {shown_value(text)}")
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(f"must be a finite number above 0, got {text}")
    return value


# Scale suffixes of a count of tokens: thousand, million, billion (B or G), trillion.
_SCALES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_COUNT = re.compile(  # re.ASCII: `\s` is ' ' or a tab, not U+2003 or U+3000
    r"((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([KMBGT]?)", re.ASCII
)


def token_count(text: object) -> float:
    """A count of tokens: a number (`2e12`, `15000000000000`) or one with a scale suffix
    (`15T`, `300B`, `1.5M`; B and G are 1e9), above 0 and finite; a ValueError otherwise."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _COUNT.fullmatch(str(text).strip().upper())
        if match is None:
            raise ValueError(
                f"expected a count of tokens such as 15T, 300B or 2e12, got {shown_value(text)}"
            )
        value = float(match.group(1)) * _SCALES.get(match.group(2), 1.0)
    if not 0 < value < 1e300:
        raise ValueError(f"expected a count of tokens above 0, got {shown_value(text)}")
    return value


# The largest finite float (IEEE 754 binary64, `sys.float_info.max`, about 1.8e308): a number
# read from a file beyond it cannot be computed with (float() of such an int overflows).
FLOAT_MAX = sys.float_info.max


def number_problem(value: object) -> str | None:
    """Why `value`, a number parsed from a file, cannot be computed with: a float that is not
    finite (JSON's `1e400` parses as inf) or an integer beyond FLOAT_MAX (JSON's `1` and 400
    zeros parses as an int); None for any other value, numbers or not."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > FLOAT_MAX:
        return f"{shown_value(value)} is too large (a number is at most {FLOAT_MAX:.1e})"
    return None


def unusable_numbers(data: Any) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(key path, problem) of each number in parsed `data` (dicts, lists, scalars) that
    `number_problem` refuses, in document order. Walked with a stack, not recursion: a parsed
    document may be nested as deep as its parser allowed."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((((*path, k), v) for k, v in reversed(value.items())))
        elif isinstance(value, list):
            stack.extend((((*path, i), v) for i, v in reversed(list(enumerate(value)))))
        else:
            problem = number_problem(value)
            if problem is not None:
                yield path, problem
