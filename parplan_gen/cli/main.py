"""The `parplan` command: a thin shell over the library.

`main(argv) -> int` parses arguments, calls the library, prints, and is the one place where
typed errors become messages and exit codes (0 ok, 1 bad input, 2 bad usage).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from parplan_gen import __version__
from parplan_gen.api.wording import flag_wording
from parplan_gen.cli.check import add_check_command
from parplan_gen.cli.common import (
    add_micro_batch_option,
    add_rules_option,
    positive_int,
)
from parplan_gen.cli.compare import add_compare_command
from parplan_gen.cli.estimate import add_estimate_command
from parplan_gen.cli.exits import PROG, interrupted
from parplan_gen.cli.frontier import add_frontier_command
from parplan_gen.cli.models import add_models_command
from parplan_gen.cli.out_options import add_render_commands
from parplan_gen.cli.plan import add_plan_command
from parplan_gen.cli.profile import add_profile_command
from parplan_gen.cli.rules import add_rules_commands
from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import ParplanError, UsageError
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.inputs.reading import INPUT_LIMIT_ENV, input_limit
from parplan_gen.inputs.source import gc_paused

MODEL_HELP = "graph .yaml/.yml/.json, Hugging Face config.json, .onnx, or a preset name"
# The largest --max-input-mib: 64 GiB, more memory than parplan could load such a file into on
# a workstation; the bound only keeps the number sane.
MAX_INPUT_MIB = 1 << 16


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors that go through UsageError (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (subcommands register themselves here)."""
    parser = _Parser(
        prog=PROG,
        description="Turn a model and a GPU cluster into a distributed-training plan.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  parplan analyze examples/transformer_block.yaml",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument(
        "--max-input-mib",
        type=_input_mib,
        metavar="N",
        help="read input files of up to N MiB, whatever their kind (default: each kind of "
        f"input has its cap, which the error refusing a file names); or set {INPUT_LIMIT_ENV}",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    analyze = sub.add_parser(
        "analyze",
        help="parallelization opportunities per node of a model graph",
        description="List the best parallelization opportunity of each node (and of the whole "
        "graph), ordered by estimated speedup.",
        epilog="example:\n  parplan analyze examples/cnn_block.yaml --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    analyze.add_argument("graph", metavar="GRAPH", help=MODEL_HELP)
    add_micro_batch_option(analyze)
    add_rules_option(analyze)
    analyze.add_argument("--json", action="store_true", help="print JSON (the seed contract)")
    analyze.set_defaults(handler=_cmd_analyze)

    propose = sub.add_parser(
        "propose",
        help="parallelization proposals for a model graph on N devices",
        description="Propose data, pipeline, tensor and communication strategies, each with "
        "the concrete settings it contributes.",
        epilog="example:\n  parplan propose examples/transformer_block.yaml --devices 8",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    propose.add_argument("graph", metavar="GRAPH", help=MODEL_HELP)
    propose.add_argument(
        "--devices", type=positive_int, required=True, metavar="N", help="number of devices"
    )
    add_micro_batch_option(propose)
    add_rules_option(propose)
    propose.add_argument("--json", action="store_true", help="print JSON (the seed contract)")
    propose.set_defaults(handler=_cmd_propose)

    add_rules_commands(sub)
    add_models_command(sub)
    add_estimate_command(sub)
    add_plan_command(sub)
    add_frontier_command(sub)
    add_check_command(sub)
    add_compare_command(sub)
    add_render_commands(sub)
    add_profile_command(sub)
    return parser


def _input_mib(text: str) -> int:
    """The argparse type of --max-input-mib."""
    try:
        return whole_number(text, MAX_INPUT_MIB)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _max_input_bytes(args: argparse.Namespace) -> int | None:
    """--max-input-mib, else PARPLAN_MAX_INPUT_MIB (when set and not empty), in bytes."""
    mib = args.max_input_mib
    text = os.environ.get(INPUT_LIMIT_ENV, "")
    if mib is None and text:
        try:
            mib = whole_number(text, MAX_INPUT_MIB)
        except ValueError as exc:
            raise UsageError(f"{INPUT_LIMIT_ENV}: {exc}") from None
    return None if mib is None else mib * MIB


def _print_json_list(key: str, lines: list[str]) -> None:
    """`{"key": [...]}` from items already encoded, one per line: readable, and fast for
    100,000 items (Python's C encoder only runs without an indent)."""
    body = "\n  " + ",\n  ".join(lines) + "\n" if lines else ""
    sys.stdout.write(f'{{"{key}": [{body}]}}\n')


def _opportunity_lines(found: list[Any]) -> list[str]:
    """Each opportunity as one JSON object; the part after node_id is shared by all the nodes
    with the same outcome, so it is encoded once."""
    tails: dict[tuple[Any, ...], str] = {}
    lines = []
    for o in found:
        key = (o.type, o.estimated_speedup, o.resource_requirements)
        tail = tails.get(key)
        if tail is None:
            item = o.as_dict()
            del item["node_id"]
            tail = tails[key] = json.dumps(item, ensure_ascii=False)[1:]
        lines.append(f'{{"node_id": {json.dumps(o.node_id, ensure_ascii=False)}, {tail}')
    return lines


def _cmd_analyze(args: argparse.Namespace) -> int:
    from parplan_gen.cli.textview import opportunities_table, write_view
    from parplan_gen.models.load import load_graph_for
    from parplan_gen.rules.engine import analyze
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules(args.rules)
    graph = load_graph_for(args.graph, batch_size=args.micro_batch)
    found = analyze(graph, rules)
    if args.json:
        _print_json_list("opportunities", _opportunity_lines(found))
    else:
        write_view(opportunities_table(graph, found))
    return 0


def _cmd_propose(args: argparse.Namespace) -> int:
    from parplan_gen.cli.textview import proposals_table, write_view
    from parplan_gen.models.load import load_graph_for
    from parplan_gen.rules.engine import propose
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules(args.rules)
    graph = load_graph_for(args.graph, batch_size=args.micro_batch)
    made = propose(graph, rules, args.devices)
    if args.json:
        _print_json_list(
            "proposals",
            [
                json.dumps(p.model_dump(exclude={"rule_id", "group"}), ensure_ascii=False)
                for p in made
            ],
        )
    else:
        write_view(proposals_table(graph, args.devices, made))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    # A run is short and allocates many small objects (graph nodes, formula trees): the cyclic
    # garbage collector would only rescan them. Its state is restored for in-process callers.
    try:
        with gc_paused():
            return _run(argv)
    except KeyboardInterrupt:  # Ctrl-C after _run's own handler: while leaving gc_paused
        return interrupted()


def _run(argv: Sequence[str] | None) -> int:
    try:
        parser = build_parser()  # Ctrl-C may come here too
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return 2
        with input_limit(_max_input_bytes(args)), flag_wording():  # errors name the flags
            return handler(args)
    except ParplanError as exc:
        sys.stderr.write(f"{PROG}: error: {exc.render()}\n")
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # anywhere in a command: reading, planning, writing, printing
        return interrupted()


if __name__ == "__main__":
    sys.exit(main())
