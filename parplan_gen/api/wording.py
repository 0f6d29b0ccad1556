"""Errors in the words of the caller: the Python API's parameters (`global_batch`, the `tp` of
`pins`) or the command line's flags (`--global-batch`, `--tp`).

The layers below name a value by the flag that gives it (`--tp 16: dp x tp x pp x cp = 8 GPUs,
16 does not divide 8`). A public function of the API runs under `parameter_wording`: an error
that leaves it names the parameter instead (`tp 16: ...`), as does an error it returns in a
result (`reword`). `cli.main` runs every command under `flag_wording()`, which keeps the flags.
Only the flags of the API's parameters are reworded: a Megatron-LM argument quoted from a
script (`--num-layers-per-virtual-pipeline-stage`) stays as written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

from parplan_gen.inputs.errors import ParplanError, SourceRef

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E", bound=ParplanError)

_FLAGS: ContextVar[bool] = ContextVar("parplan_flag_wording", default=False)
# The parameters of the functions `parameter_wording` wraps, gathered as they are defined.
_PARAMETERS: set[str] = set()
# Flags whose parameter is not their name with dashes (`pins.flag` makes the others).
ALIASES = {"--out": "out_dir"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w-])")


@contextlib.contextmanager
def flag_wording() -> Iterator[None]:
    """Errors raised within keep the flags' wording (the command line's)."""
    token = _FLAGS.set(True)
    try:
        yield
    finally:
        _FLAGS.reset(token)


def parameter_wording(function: Callable[P, R]) -> Callable[P, R]:
    """`function`, whose errors name its parameters (and the keys of the dicts they take)
    rather than the flags, unless called under `flag_wording()`."""
    signature = inspect.signature(function)
    _PARAMETERS.update(
        name
        for name, p in signature.parameters.items()
        if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    )

    @functools.wraps(function)
    def worded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except ParplanError as exc:
            reword(exc)
            raise

    return worded


def reword(error: E) -> E:
    """`error`, its message and place naming parameters rather than flags (unchanged under
    `flag_wording()`)."""
    if _FLAGS.get():
        return error
    names = _flag_names()
    error.message = FLAG.sub(lambda m: names.get(m.group(), m.group()), error.message)
    where = error.where
    if where is not None and where.file in names:
        error.where = SourceRef(names[where.file], where.line, where.column, where.path)
    error.args = (error.render(),)
    return error


def _flag_names() -> dict[str, str]:
    """Flag -> the parameter (or dict key) it stands for: the wrapped functions' parameters,
    the keys of `pins`, `bounds`, `search`, a cluster dict, a layout dict and `Plan.write`'s
    options. Built when an error is reworded, which is rare: nothing is imported before."""
    from parplan_gen.cost.layout import Layout
    from parplan_gen.planning.loading import CLUSTER_KEYS
    from parplan_gen.planning.pins import Bounds, Pins, flag
    from parplan_gen.planning.search_choices import FLAGS
    from parplan_gen.render.render_options import RenderOptions

    keys = {*_PARAMETERS, *Pins.model_fields, *Bounds.model_fields, *CLUSTER_KEYS}
    keys |= {*Layout.model_fields, *(f.name for f in dataclasses.fields(RenderOptions))}
    names = {flag(key): key for key in sorted(keys)}
    names.update({option: key for key, option in FLAGS.items()})
    return names | ALIASES
