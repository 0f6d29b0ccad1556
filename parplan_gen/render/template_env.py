"""The template folders and the Jinja environment that renders them.

`Templates` is the shipped `templates/` folder (the launchers', nccl.env's and the report's
templates, and mapping.yaml) and each backend's `templates/` folder, which holds the templates
named `<backend>/<version>/...` (parplan_gen/backends/<backend>/templates/<version>/...), with
an optional user folder (`--templates`) that overrides any template, and mapping.yaml, by
that relative name (render/mapping.py says how a user's mapping.yaml combines with the
backends' sections); `environment` is a fresh bounded sandbox over them (render/sandbox.py), and
`render_template` renders one file with every template failure turned into a RenderError at
`name.j2:LINE`.
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

from parplan_gen.inputs.resources import backend_dirs, shipped_dir
from parplan_gen.render.checks import RenderError
from parplan_gen.render.mapping import MAPPING_FILE, LoadedMapping, load_mapping
from parplan_gen.render.sandbox import (
    REFUSED,
    BoundedEnvironment,
    OutsideFolderError,
    TemplateBudgetError,
    TemplateRoot,
)
from parplan_gen.render.shell_quote import argument, python_literal, python_name
from parplan_gen.render.template_check import TemplateRefused

JSON_INDENT = 2
TEMPLATES = "templates"  # the shipped folder's name, and each backend's folder of them


@dataclass(frozen=True)
class Templates:
    """The built-in template folders and an optional user folder that overrides them by name."""

    builtin: Path  # the shipped templates/ folder
    user: Path | None = None
    backends: tuple[TemplateRoot, ...] = ()  # each backend's templates, named <backend>/...

    @classmethod
    def at(cls, user: str | Path | None = None) -> Templates:
        if user is not None and not Path(user).is_dir():
            raise RenderError(f"--templates: {user} is not a folder")
        backends = tuple(
            TemplateRoot(d / TEMPLATES, d.name) for d in backend_dirs() if (d / TEMPLATES).is_dir()
        )
        return cls(shipped_dir(TEMPLATES), None if user is None else Path(user), backends)

    @property
    def roots(self) -> list[TemplateRoot]:
        """Where a template is looked for, first match first: the user's folder, the shipped
        one, each backend's."""
        user = [] if self.user is None else [TemplateRoot(self.user)]
        return [*user, TemplateRoot(self.builtin), *self.backends]

    def find(self, relative: str | Path) -> Path:
        """The first root's `relative` file; RenderError if none has it, or if it is a link
        to a file outside its folder."""
        for root in self.roots:
            try:
                path = root.find(relative)
            except OutsideFolderError as exc:
                raise RenderError(f"{REFUSED}: {exc}") from None
            if path is not None:
                return path
        folders = ", ".join(str(r.folder) for r in self.roots if r.relative(relative) is not None)
        raise RenderError(f"no template {relative} in {folders}")

    def mapping(self) -> LoadedMapping:
        """The mapping these templates render with: the first folder's mapping.yaml, and each
        backend's own section where that file holds none (render/mapping.py)."""
        return load_mapping(self.find(MAPPING_FILE))

    def versions(self, backend: str) -> list[str]:
        """The version folders of `backend`'s templates, in any root."""
        folders = [f for r in self.roots if (f := r.folder_of(backend)) is not None]
        names = {p.name for f in folders if f.is_dir() for p in f.iterdir() if p.is_dir()}
        return sorted(names, key=_version_key)


def _version_key(name: str) -> tuple[tuple[int, ...], str]:
    return tuple(int(n) for n in re.findall(r"[0-9]+", name)), name


def environment(templates: Templates) -> BoundedEnvironment:
    """A fresh sandbox over `templates` (its budgets are per render; the compiled templates
    are kept across renders by render/sandbox.py)."""
    env = BoundedEnvironment(
        templates.roots,
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(enabled_extensions=("svg.j2",), default=False),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["json"] = lambda value: json.dumps(value, indent=JSON_INDENT, ensure_ascii=False)
    env.filters["sh"] = argument
    env.filters["py"] = python_literal
    env.filters["py_name"] = python_name
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
        where = _template_line(exc.__traceback__, name, env)
        raise RenderError(f"{where}: {REFUSED}: {exc}") from None
    except TemplateBudgetError as exc:
        where = _template_line(exc.__traceback__, name, env)
        raise RenderError(f"{where}: stopped by the template sandbox: {exc}") from None
    except RecursionError:
        raise RenderError(
            f"{name}: includes nested too deeply (does one include itself?)"
        ) from None
    except jinja2.UndefinedError as exc:
        where = _template_line(exc.__traceback__, name, env)
        raise RenderError(f"{where}: undefined value: {exc.message}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
        where = _template_line(exc.__traceback__, name, env)
        raise RenderError(f"{where}: {type(exc).__name__}: {exc}") from None


def _template_line(tb: TracebackType | None, name: str, env: BoundedEnvironment) -> str:
    """`name:LINE` of the innermost traceback frame inside the template file `name` is read
    from (a backend's is not named as it is stored: megatron/core_v0.16/x.j2 is
    backends/megatron/templates/core_v0.16/x.j2)."""
    file, line = env.template_file(name), None
    while tb is not None:
        found = tb.tb_frame.f_code.co_filename
        if found == file or found.endswith(name):
            line = tb.tb_lineno
        tb = tb.tb_next
    return name if line is None else f"{name}:{line}"
