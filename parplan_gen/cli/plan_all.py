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

from parplan_gen.cli.common import cluster_from_args, print_json
from parplan_gen.inputs.defaults import GIB

if TYPE_CHECKING:
    from parplan_gen.api import Plan

README = "README.md"  # DIR/README.md: the summary of the text view, written with the folders


def cmd_plan_all(args: argparse.Namespace) -> int:
    """`parplan plan --all-backends`: search each backend alone, show (and write) each best."""
    from parplan_gen.api import plan_all_backends
    from parplan_gen.cli.plan import plan_request

    found = plan_all_backends(args.model, cluster_from_args(args), **plan_request(args))
    plans = {name: p for name, p in found.items() if not isinstance(p, str)}
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
    ranked = sorted(
        order, key=lambda n: (candidate_rank(plans[n].chosen, plans[n].objective, True), order.index(n))
    )  # fmt: skip
    return ranked[0] if ranked else None


def contract(found: dict[str, Plan | str], best: str | None) -> dict[str, Any]:
    """`plan --all-backends --json`: `{"backends": {name: <the plan contract>}, "best": name,
    "runs_nothing": {name: why}}`, backends in the model's order."""
    return {
        "backends": {n: p.document.contract() for n, p in found.items() if not isinstance(p, str)},
        "best": best,
        "runs_nothing": {n: p for n, p in found.items() if isinstance(p, str)},
    }


def summary_text(found: dict[str, Plan | str], best: str | None, out: str | None) -> str:
    """The text view: one row per backend's own best plan, the overall best, and why a backend
    runs nothing. It is also DIR/README.md, so the model's title, the folders and the reasons
    (a rule's reason, a model's name) pass `safe_text.markdown`: no raw HTML, link, image or
    control character reaches the README or the terminal."""
    from parplan_gen.cli.estimate_view import layout_line
    from parplan_gen.cli.textview import table
    from parplan_gen.inputs.safe_text import markdown

    rows = []
    for name, p in found.items():
        if isinstance(p, str):
            continue
        c = p.chosen
        rows.append([
            name, f"{c.time.step_s:.3f}", f"{c.throughput.mfu:.1%}", f"{c.memory.total / GIB:.1f}",
            layout_line(c), markdown(f"{Path(out) / name}/") if out else "-",
        ])  # fmt: skip
    first = next(iter(found.values()))
    title = "" if isinstance(first, str) else f"{markdown(first.document.model.title)}: "
    lines = [f"{title}each backend's own best plan (the search restricted to it)", ""]
    if rows:
        heads = ["backend", "step s", "MFU", "GiB/GPU", "layout", "files"]
        lines += [table(heads, rows, right={1, 2, 3}).rstrip("\n"), "", f"Overall best: {best}"]
    else:
        lines.append("No backend runs a plan of this request.")
    lines += [
        f"{n}: runs nothing: {markdown(why)}" for n, why in found.items() if isinstance(why, str)
    ]
    return "\n".join(lines) + "\n"


def _write(plans: dict[str, Plan], summary: str, args: argparse.Namespace) -> None:
    """Every backend's files under DIR/<backend>/ and DIR/README.md, rendered first and written
    as one change: a refusal (a different file without --force) writes nothing at all. Files a
    plan of any backend (or a single plan) left there that this run has not are removed with
    the rest, and, like a different file, only with --force."""
    from parplan_gen.cli.render import render_options, write_files
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
