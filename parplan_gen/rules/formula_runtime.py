"""What a compiled formula runs with: the bound on every number (MAX_MAGNITUDE), the guarded
operations (`**`, `round`, the type checks of `settings.*` values), the globals its code sees
(no builtins), and the `Formula` object, which evaluates it and turns a runtime failure into a
FormulaError naming the formula. The language itself is described in `formulas`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NoReturn

from parplan_gen.inputs.errors import FormulaError, SourceRef
from parplan_gen.rules import vocabulary

Kind = Literal["number", "bool", "str", "any"]  # "any": a settings.* value, checked at runtime
Expect = Literal["number", "bool", "str"]
Value = str | int | float | bool

# Every number a formula computes stays within ±MAX_MAGNITUDE: a float (max ~1.8e308) with room
# for the sums made of it (a formula's at most MAX_NODES terms, each a checked value or a named
# formula's value, which is checked too; the five memory parts),
# and an integer of at most 301 digits, which float() converts and str() prints (Python refuses
# str() beyond 4300 digits). Checked where a number can grow far beyond its operands (literals,
# `*`, `/`, `//`, `**`, exp()) and on the result; `+`/`-` at most double the larger operand.
MAX_MAGNITUDE = 1e300
_MAX_BITS = math.log2(MAX_MAGNITUDE) + 1  # `**` of integers above this is refused uncomputed
MAX_ROUND_DIGITS = 100  # round(5, -10**9) would build 10**(10**9)
KIND_TEXT = {
    "number": "a number",
    "bool": "a bool (true/false)",
    "str": "a string",
    "any": "any value",
}


class _RefusedError(Exception):
    """A runtime guard refused a value; `Formula.evaluate` names the formula and the place."""


def show_value(x: object) -> str:
    if isinstance(x, int) and x.bit_length() > 64:
        return f"<{x.bit_length()}-bit integer>"
    return repr(x)


def _out_of_range(value: object, what: str) -> NoReturn:
    """Raise: `what` (quoted text of the formula, or "the result") gave `value` beyond the
    limit. Called by the compiled code (see `bounded`) only when the value is out of range."""
    raise _RefusedError(
        f"{what} is out of range ({show_value(value)}; numbers are limited to ±{MAX_MAGNITUDE:g})"
    )


def _pow(base: float, exp: float) -> float:
    """`base ** exp` that refuses results out of range (integer ones before computing them)
    and never goes complex."""
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        if abs(base) > 1 and (exp > _MAX_BITS or math.log2(abs(base)) * exp > _MAX_BITS):
            raise _power_too_large(base, exp)
        value = base**exp
    else:
        value = math.pow(base, exp)
    if -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:
        return value
    raise _power_too_large(base, exp)


def _power_too_large(base: float, exp: float) -> _RefusedError:
    return _RefusedError(f"power too large: {show_value(base)} ** {show_value(exp)}")


def _round(x: float, *digits: int) -> float:
    if digits and isinstance(digits[0], int) and abs(digits[0]) > MAX_ROUND_DIGITS:
        raise _RefusedError(
            f"round() digits must be within ±{MAX_ROUND_DIGITS}, got {show_value(digits[0])}"
        )
    return round(x, *digits)


def _checker(kind: str, test: Callable[[object], bool]) -> Callable[[object, str], object]:
    def check(value: object, label: str) -> object:
        if test(value):
            return value
        raise _RefusedError(f"{label} is {value!r}, not {KIND_TEXT[kind]}")

    return check


_CHECKERS = {
    "number": _checker("number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    "bool": _checker("bool", lambda v: isinstance(v, bool)),
    "str": _checker("str", lambda v: isinstance(v, str)),
}
_IMPLS = {f.name: f.impl for f in vocabulary.FUNCTIONS} | {"round": _round}
GLOBALS: dict[str, object] = {"__builtins__": {}, "_pow": _pow, "_out_of_range": _out_of_range}
GLOBALS |= {f"_check_{k}": v for k, v in _CHECKERS.items()}
GLOBALS |= {f"_fn_{k}": v for k, v in _IMPLS.items()}
_RUNTIME_ERRORS = (ArithmeticError, ValueError, TypeError, KeyError, _RefusedError)


@dataclass(frozen=True, slots=True, eq=False)
class Formula:
    """A checked, immutable formula; `evaluate(env)` reads dotted names from `env` (the code is
    compiled at the first evaluation)."""

    source: str
    where: SourceRef
    names: frozenset[str]
    kind: Kind
    is_constant: bool  # reads no names: computed once, at load
    _fn: Callable[[Mapping[str, object], dict[str, object]], object] = field(repr=False)
    refers: tuple[str, ...] = ()  # the named formulas it uses directly, in order of first use

    def evaluate(self, env: Mapping[str, object], memo: dict[str, object] | None = None) -> object:
        """The formula's value for `env`; a runtime failure is a FormulaError at `where`.
        A number is within ±MAX_MAGNITUDE (so never inf or NaN, which JSON cannot hold).

        `memo` holds the values of the named formulas computed for `env` so far, by name: pass
        one dict to the formulas of one rule set evaluated on one `env` (one candidate layout),
        so that each named formula is computed once for all of them; a new one whenever a value
        of `env` changes. None: a memo of this evaluation alone."""
        try:
            return self._fn(env, {} if memo is None else memo)
        except _RUNTIME_ERRORS as exc:
            message = f"formula {shorten(self.source)!r} failed: {_reason(exc)}"
            raise FormulaError(message, self.where) from None


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        name = str(exc.args[0])
        if name.startswith("node.attr."):
            attr = name[len("node.attr.") :]
            return f"the node has no attribute {attr!r} (guard with node.has.{attr})"
        return f"{name!r} has no value here"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    return str(exc)


def shorten(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."
