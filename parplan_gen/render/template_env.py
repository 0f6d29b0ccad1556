"""The template folders and the Jinja environment that renders them.

`Templates` is the shipped `templates/` folder with an optional user folder (`--templates`) that
overrides any template, and mapping.yaml, by relative name; `environment` is a fresh bounded
sandbox over them (render/sandbox.py), and `render_template` renders one file with every
template failure turned into a RenderError at `name.j2:LINE`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2
from jinja2.sandbox import SecurityError

from parplan_gen.inputs.resources import shipped_dir
from parplan_gen.render.checks import RenderError
from parplan_gen.render.sandbox import (
    REFUSED,
    BoundedEnvironment,
    OutsideFolderError,
    TemplateBudgetError,
    file_inside,
)
from parplan_gen.render.shell_quote import argument
from parplan_gen.render.template_check import TemplateRefused

JSON_INDENT = 2


@dataclass(frozen=True)
class Templates:
    """The built-in template folder and an optional user folder that overrides it by name."""

    builtin: Path
    user: Path | None = None

    @classmethod
    def at(cls, user: str | Path | None = None) -> Templates:
        if user is not None and not Path(user).is_dir():
            raise RenderError(f"--templates: {user} is not a folder")
        return cls(shipped_dir("templates"), None if user is None else Path(user))

    @property
    def folders(self) -> list[Path]:
        return [p for p in (self.user, self.builtin) if p is not None]

    def find(self, relative: str | Path) -> Path:
        """The first folder's `relative` file; RenderError if none has it, or if it is a link
        to a file outside its folder."""
        for folder in self.folders:
            try:
                path = file_inside(folder, relative)
            except OutsideFolderError as exc:
                raise RenderError(f"{REFUSED}: {exc}") from None
            if path is not None:
                return path
        raise RenderError(f"no template {relative} in {', '.join(map(str, self.folders))}")

    def versions(self, backend: str) -> list[str]:
        names = {
            p.name
            for f in self.folders
            if (f / backend).is_dir()
            for p in (f / backend).iterdir()
            if p.is_dir()
        }
        return sorted(names, key=_version_key)


def _version_key(name: str) -> tuple[tuple[int, ...], str]:
    return tuple(int(n) for n in re.findall(r"[0-9]+", name)), name


def environment(templates: Templates) -> BoundedEnvironment:
    """A fresh sandbox over `templates` (its budgets are per render; the compiled templates
    are kept across renders by render/sandbox.py)."""
    env = BoundedEnvironment(
        templates.folders,
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(enabled_extensions=("svg.j2",), default=False),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["json"] = lambda value: json.dumps(value, indent=JSON_INDENT, ensure_ascii=False)
    env.filters["sh"] = argument
    return env


def render_template(env: BoundedEnvironment, name: str, context: dict[str, Any]) -> str:
    """One template, with every template failure turned into a positioned RenderError."""
    try:
        return env.render_bounded(name, context, scale=context["launch"]["nnodes"])
    except jinja2.TemplateNotFound as exc:
        raise RenderError(f"no template {exc.name}") from None
    except TemplateRefused as exc:
        raise RenderError(f"{exc.name}:{exc.lineno}: {REFUSED}: {exc.message}") from None
    except jinja2.TemplateSyntaxError as exc:
        where = f"{exc.filename or name}:{exc.lineno}"
        raise RenderError(f"{where}: template syntax: {exc.message}") from None
    except SecurityError as exc:
        where = _template_line(exc.__traceback__, name)
        raise RenderError(f"{where}: {REFUSED}: {exc}") from None
    except TemplateBudgetError as exc:
        where = _template_line(exc.__traceback__, name)
        raise RenderError(f"{where}: stopped by the template sandbox: {exc}") from None
    except RecursionError:
        raise RenderError(
            f"{name}: includes nested too deeply (does one include itself?)"
        ) from None
    except jinja2.UndefinedError as exc:
        where = _template_line(exc.__traceback__, name)
        raise RenderError(f"{where}: undefined value: {exc.message}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
        where = _template_line(exc.__traceback__, name)
        raise RenderError(f"{where}: {type(exc).__name__}: {exc}") from None


def _template_line(tb: TracebackType | None, name: str) -> str:
    """`name:LINE` of the innermost traceback frame inside a template file."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(name):
            line = tb.tb_lineno
        tb = tb.tb_next
    return name if line is None else f"{name}:{line}"
