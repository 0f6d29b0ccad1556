"""`parplan compare`: the chosen plan, the runner-up and your layouts side by side, and why.

A thin shell over `api.compare` (render/compare.py builds the rows and the sentences,
render/compare_terse.py the terse lines). By default the view fits a 100-column terminal: the
layouts named by letters, the terms that are not zero for every layout, and the terms that
decide each gap with their drivers; `--verbose` sets the whole labels, every row and every
sentence.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.arg_types import SWITCHES, element_count_type
from parplan_gen.cli.common import (
    CROSS_ENTROPY_FUSIONS,
    LAYOUT_SIZES,
    PRECISIONS,
    RECOMPUTE,
    RESHARD_POLICIES,
    cluster_from_args,
    offload_layers,
    print_json,
    size_type,
    zero_stage,
)
from parplan_gen.cli.plan_request import add_request_options
from parplan_gen.inputs.defaults import DS_SETTINGS
from parplan_gen.inputs.safe_text import printable
from parplan_gen.models.kind import ANY_BACKEND, BACKEND_NAMES

if TYPE_CHECKING:
    from parplan_gen.render.compare import Comparison

WIDTH = 100  # the terse view's lines, at most (a wider terminal shows --verbose whole)
DRIVER = re.compile(r"(?<=[;,] )[^,;]* vs [^,;]*")  # a driver of a terse line: `tp 1 vs 2`
NBSP = "\u00a0"  # holds a driver's words together while the line is wrapped
COMPARE_EXAMPLE = (
    "example:\n"
    "  parplan compare llama-3-70b --gpus 64 --gpu h100 --global-batch 512 --seq-len 4096\n"
    "  parplan compare llama-3-70b --gpus 64 --gpu h100 --global-batch 512 "
    '--layout "tp=4 pp=4 mbs=1 recompute=selective"'
)
# --layout keys whose value is a number: key -> Layout field, the flag's argparse type
LAYOUT_NUMBERS: dict[str, tuple[str, Callable[[str], int]]] = {
    "zero": ("zero_stage", zero_stage),
    "offload": ("offload_layers", offload_layers),
    **{field: (field, element_count_type) for field in DS_SETTINGS},
}
# --layout keys: the layout sizes, the numbers above, then these (key -> Layout field, words)
LAYOUT_WORDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "recompute": ("recompute", RECOMPUTE),
    "precision": ("precision", PRECISIONS),
    "sp": ("sequence_parallel", tuple(SWITCHES)),
    "distributed_optimizer": ("distributed_optimizer", tuple(SWITCHES)),
    "backend": ("backend", BACKEND_NAMES),
    "cross_entropy": ("cross_entropy_fusion", CROSS_ENTROPY_FUSIONS),
    "loss_compiled": ("loss_compiled", tuple(SWITCHES)),
    "fsdp_reshard": ("fsdp_reshard", RESHARD_POLICIES),
    "overlap_grad_reduce": ("overlap_grad_reduce", tuple(SWITCHES)),
}


def add_compare_command(sub: Any) -> None:
    """Register `compare` on the CLI's subparsers."""
    parser = sub.add_parser(
        "compare",
        help="the chosen plan, the runner-up and your layouts side by side, and why",
        description="Plan as `parplan plan` does, then set the chosen layout, the runner-up "
        "and every --layout side by side, term by term (memory parts against the GPU's, "
        "each time part, communication hidden by overlap, step, MFU), and say for each "
        "layout which terms decide its gap to the chosen one and the layout fields that make "
        "them differ (templates/report/compare.yaml `material`). --verbose: every term, with "
        "one sentence per term that differs.",
        epilog=COMPARE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_request_options(parser, slurm=False)
    parser.add_argument(
        "--layout",
        type=layout_text,
        action="append",
        default=[],
        metavar='"tp=8 pp=2 ..."',
        help="a layout of yours to compare (repeatable): key=value words, the keys "
        f"{', '.join(d for d, _, _ in LAYOUT_SIZES)}, {', '.join([*LAYOUT_NUMBERS, *LAYOUT_WORDS])}; "
        "dp defaults "
        "to what the others leave, the batch to --global-batch / --seq-len",
    )
    parser.add_argument(
        "--no-runner-up", action="store_true", help="leave the planner's runner-up out"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="the whole view: layouts by their labels, every term, one sentence per term "
        "that differs",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_cmd_compare)


def layout_text(text: str) -> dict[str, Any]:
    """`tp=8 pp=2 recompute=selective sp=on` -> Layout fields (argparse type)."""
    sizes = {d for d, _, _ in LAYOUT_SIZES}
    fields: dict[str, Any] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep or not value:
            raise argparse.ArgumentTypeError(f"{word!r}: expected key=value, e.g. tp=8")
        if key in sizes:
            fields[key] = size_type(key)(value)
        elif key in LAYOUT_NUMBERS:
            name, parse = LAYOUT_NUMBERS[key]
            fields[name] = _number(key, parse, value)
        elif key in LAYOUT_WORDS:
            name, allowed = LAYOUT_WORDS[key]
            if value not in allowed:
                raise argparse.ArgumentTypeError(
                    f"{key}={value}: expected one of {', '.join(allowed)}"
                )
            fields[name] = SWITCHES[value] if allowed == tuple(SWITCHES) else value
        else:
            known = ", ".join([*(d for d, _, _ in LAYOUT_SIZES), *LAYOUT_NUMBERS, *LAYOUT_WORDS])
            raise argparse.ArgumentTypeError(f"{key!r}: unknown layout key (known: {known})")
    if not fields:
        raise argparse.ArgumentTypeError("empty layout: give key=value words, e.g. tp=8 pp=2")
    return fields


def _number(key: str, parse: Callable[[str], int], value: str) -> int:
    """`key=<value>` through its flag's parser, the error prefixed with the word."""
    try:
        return parse(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{key}={value}: {exc}") from None


def _cmd_compare(args: argparse.Namespace) -> int:
    from parplan_gen.api import compare
    from parplan_gen.cli.textview import write_view

    found = compare(
        args.model,
        cluster_from_args(args),
        global_batch=args.global_batch,
        seq_len=args.seq_len,
        layouts=args.layout,
        runner_up=not args.no_runner_up,
        precision=args.precision,
        flash_attention=not args.no_flash_attention,
        backend=args.backend or ANY_BACKEND,
        rules=args.rules,
    )
    if args.json:
        print_json(found.contract())
    else:
        write_view(compare_text(found, verbose=args.verbose))
    return 0


def compare_text(found: Comparison, verbose: bool = False) -> str:
    """The terse view (`terse_text`), or with `verbose` the whole table (a row per term, a
    column per layout) and the sentences."""
    if not verbose:
        return terse_text(found)
    from parplan_gen.cli.textview import table

    headers = ["term", *(f"{c.label} ({c.role})" for c in found.columns)]
    rows = [[r.label, *r.shown] for r in found.rows]
    lines = [table(headers, rows, right=set(range(1, len(headers)))).rstrip("\n")]
    for column in found.columns:
        if column.problem:  # may quote a rule's reason: one line, escaped
            lines.append(f"{column.label}: {printable(column.problem, len(column.problem))}")
    first = found.columns[0].label
    for other, sentences in found.sentences:
        lines += ["", f"Why {first} over {other}:"]
        lines += [f"  - {printable(s, len(s))}" for s in sentences] or [
            "  - the same figures in every term"
        ]
    return "\n".join(lines) + "\n"


def terse_text(found: Comparison) -> str:
    """A line per layout (its letter, label, role and why it cannot run as given), the rows a
    view shows with the letters as headers, then for each layout after the first its step line
    and the lines of the terms that decide the gap; every line at most WIDTH columns."""
    from parplan_gen.cli.textview import table
    from parplan_gen.render.compare import compare_file

    lines: list[str] = []
    for c in found.columns:
        lines += _wrapped(f"{c.key}  {c.label} ({c.role})", "   ")
        if c.problem:  # may quote a rule's reason: escaped
            lines += _wrapped(f"   cannot run as given: {c.problem}", "     ")
    headers = ["term", *(c.key for c in found.columns)]
    rows = [[r.label, *r.shown] for r in found.shown_rows()]
    lines += ["", table(headers, rows, right=set(range(1, len(headers)))).rstrip("\n")]
    if found.terse:
        lines += ["", f"Why {found.columns[0].key}:"]
    for said in found.terse:
        lines += _wrapped(f"  {said.step}", "      ")
        for line in said.lines:
            lines += _wrapped(f"    - {line}", "      ")
    spec = compare_file()
    count = found.convention
    says = spec.terse["mfu"].format(says=count.says) + " " if count.says else ""
    lines += ["", *_wrapped(says + spec.terse["verbose"], "  ")]
    return "\n".join(lines) + "\n"


def _wrapped(text: str, indent: str) -> list[str]:
    """`text` escaped (`printable`) and broken into lines of at most WIDTH columns, the lines
    after the first indented by `indent`; a driver (`tp 1 vs 2`, after `; ` or `, `) is kept on
    one line where it fits."""
    kept = DRIVER.sub(lambda m: m.group(0).replace(" ", NBSP), printable(text, len(text)))
    lines = textwrap.wrap(
        kept, WIDTH, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False
    )
    return [line.replace(NBSP, " ") for line in lines]
