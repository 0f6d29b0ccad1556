"""`parplan plan --all-backends`: each backend's own best plan, side by side.

Each backend of the request is searched alone (`api.plan_all_backends`); with `--out DIR` its
plan is written into `DIR/<backend>/` (plan.md and plan.json say it is that backend's own best,
not necessarily the overall best) and DIR/README.md says which is overall best. A backend that
runs nothing gets no folder; the views say why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.common import print_json, setup_from_args
from parplan_gen.cli.plan_request import plan_request
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import ParplanError

if TYPE_CHECKING:
    from parplan_gen.api import BackendOutcome, Plan

README = "README.md"  # DIR/README.md: the summary of the text view, written with the folders


def cmd_plan_all(args: argparse.Namespace) -> int:
    """`parplan plan --all-backends`: search each backend alone, show (and write) each best."""
    from parplan_gen.api import plan_all_backends

    found = plan_all_backends(args.model, setup_from_args(args), **plan_request(args))
    plans = _plans(found)
    best = overall_best(plans)
    summary = summary_text(found, best, args.out)
    if args.out:
        _write(plans, summary, args)
    if args.json:
        print_json(contract(found, best))
    else:
        sys.stdout.write(summary)
    return 0


def overall_best(plans: dict[str, Plan]) -> str | None:
    """The backend whose own best plan ranks first, as the unrestricted search ranks them (the
    objective, then the other figure, fewer dimensions, then the model's backend order)."""
    from parplan_gen.planning.planner import candidate_rank

    order = list(plans)

    def rank(name: str) -> tuple[tuple[float, ...], int]:
        return candidate_rank(plans[name].chosen, plans[name].objective, True), order.index(name)

    return min(order, key=rank, default=None)


def contract(found: dict[str, BackendOutcome], best: str | None) -> dict[str, Any]:
    """`plan --all-backends --json`: `{"backends": {name: <the plan, as plan.json holds it>},
    "best": name, "runs_nothing": {name: why}}`, backends in the model's order."""
    return {
        "backends": {n: p.document.contract() for n, p in _plans(found).items()},
        "best": best,
        "runs_nothing": {n: why.message for n, why in _failures(found).items()},
    }


def _plans(found: dict[str, BackendOutcome]) -> dict[str, Plan]:
    return {name: p for name, p in found.items() if not isinstance(p, ParplanError)}


def _failures(found: dict[str, BackendOutcome]) -> dict[str, ParplanError]:
    return {name: p for name, p in found.items() if isinstance(p, ParplanError)}


def summary_text(found: dict[str, BackendOutcome], best: str | None, out: str | None) -> str:
    """The text view: one row per backend's own best plan, the overall best, and why a backend
    runs nothing. It is also DIR/README.md, so the model's title, the folders and the reasons
    (a rule's reason, a model's name) pass `safe_text.markdown`: no raw HTML, link, image or
    control character reaches the README or the terminal."""
    from parplan_gen.cli.estimate_view import layout_line
    from parplan_gen.cli.textview import table
    from parplan_gen.cost.mfu_convention import convention_of
    from parplan_gen.inputs.safe_text import markdown

    plans = _plans(found)
    # one count for the column, so that the rows compare: the overall best's, else the first's
    counted = plans.get(best or "") or next(iter(plans.values()), None)
    count = convention_of(counted.chosen) if counted is not None else None
    rows = [
        [
            name,
            f"{p.chosen.time.step_s:.3f}",
            f"{count.mfu(p.chosen.throughput):.1%}" if count else "-",
            f"{p.chosen.memory.total / GIB:.1f}",
            layout_line(p.chosen),
            markdown(f"{Path(out) / name}/") if out else "-",
        ]
        for name, p in plans.items()
    ]
    first = next(iter(found.values()))
    title = "" if isinstance(first, ParplanError) else f"{markdown(first.document.model.title)}: "
    lines = [f"{title}each backend's own best plan (the search restricted to it)", ""]
    if rows:
        heads = [
            "backend",
            "step s",
            count.header if count else "MFU",
            "GiB/GPU",
            "layout",
            "files",
        ]
        lines += [table(heads, rows, right={1, 2, 3}).rstrip("\n"), "", f"Overall best: {best}"]
    else:
        lines.append("No backend runs a plan of this request.")
    lines += [f"{n}: runs nothing: {markdown(why.message)}" for n, why in _failures(found).items()]
    return "\n".join(lines) + "\n"


def _write(plans: dict[str, Plan], summary: str, args: argparse.Namespace) -> None:
    """Every backend's files under DIR/<backend>/ and DIR/README.md, rendered first and written
    as one change: a refusal (a different file without --force) writes nothing at all. Files a
    plan of any backend (or a single plan) left there that this run has not are removed with
    the rest, and, like a different file, only with --force."""
    from parplan_gen.cli.write_files import render_options, write_files
    from parplan_gen.inputs.errors import InputError
    from parplan_gen.planning.backends import BACKENDS
    from parplan_gen.render.plan_files import output_names
    from parplan_gen.render.render_options import render_files

    if not plans:
        raise InputError(
            f"--out {args.out}: no backend runs a plan of this request; no files written "
            "(run without --out to see why)"
        )
    options = render_options(args)
    files = {
        f"{name}/{file}": text
        for name, p in plans.items()
        for file, text in render_files(p.document, options).items()
    }
    files[README] = summary
    known = [*output_names(), *(f"{b}/{n}" for b in BACKENDS for n in output_names())]
    write_files(args.out, files, [n for n in known if n not in files], args, stream=sys.stderr)
