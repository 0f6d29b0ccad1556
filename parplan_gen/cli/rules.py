"""`parplan rules check|list|explain|schema`: the rules, for people who never read our Python.

A thin shell: `add_rules_commands` registers the subcommands on the main parser, each handler
calls `rules_check`, `ruleset`, `rules_explain` or the schema models and prints. Imports are
lazy so that `parplan --help` stays fast. Errors are raised as typed errors; `cli.main` turns
them into messages and exit codes.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.common import (
    add_micro_batch_option,
    add_rules_option,
    positive_int,
    print_json,
)

if TYPE_CHECKING:
    from parplan_gen.rules.layers import RuleOrigin
    from parplan_gen.rules.ruleset import RuleSet

_RAW = argparse.RawDescriptionHelpFormatter
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def add_rules_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register `parplan rules ...` on the main parser's subcommands."""
    rules = subparsers.add_parser(
        "rules",
        help="check, list, explain and export rule files",
        description="Work with rule files: find every mistake, see which rules are in force "
        "and where they come from, see why a rule fired or not, export the JSON Schema.",
        epilog="examples:\n  parplan rules check my_rules\n  parplan rules list --rules my_rules"
        "\n  parplan rules explain examples/tiny_mlp.yaml --node fc1 --devices 8",
        formatter_class=_RAW,
    )
    rules.set_defaults(handler=lambda _args: _print_help(rules))
    sub = rules.add_subparsers(dest="rules_command", metavar="SUBCOMMAND", parser_class=type(rules))
    _add_check(sub)
    _add_list(sub)
    _add_explain(sub)
    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of rule files (for editors)",
        description="Print the JSON Schema of rule files. Save it and point your editor at it: "
        "a first line `# yaml-language-server: $schema=parplan-rules.schema.json` in a rule "
        "file gives completion and checks in editors that use the YAML language server.",
        epilog="example:\n  parplan rules schema > parplan-rules.schema.json",
        formatter_class=_RAW,
    )
    schema.set_defaults(handler=_cmd_schema)


def _add_check(sub: argparse._SubParsersAction[Any]) -> None:
    check = sub.add_parser(
        "check",
        help="report every problem of rule files as file:line:col: message",
        description="Check rule directories, layered over the built-in rules as --rules would "
        "layer them (without DIR: the built-in rules). Every problem is printed as "
        "`file:line:col: message`; named formulas no rule uses are warnings. Exit 1 when "
        "there is any error.",
        epilog="example:\n  parplan rules check my_rules",
        formatter_class=_RAW,
    )
    check.add_argument("dirs", nargs="*", metavar="DIR", help="rule directories, in layer order")
    check.set_defaults(handler=_cmd_check)


def _add_list(sub: argparse._SubParsersAction[Any]) -> None:
    listing = sub.add_parser(
        "list",
        help="the rules in force: id, kind, op/group, file:line, layer",
        description="List the rules in force (and the estimate figures), in evaluation order, "
        "with the file and layer each comes from; then what later layers overrode or disabled.",
        epilog="example:\n  parplan rules list --rules my_rules",
        formatter_class=_RAW,
    )
    add_rules_option(listing)
    listing.set_defaults(handler=_cmd_list)


def _add_explain(sub: argparse._SubParsersAction[Any]) -> None:
    explain = sub.add_parser(
        "explain",
        help="why each rule fired or not, with the values its formulas read",
        description="Run the rules on a model graph and show, per node, each opportunity rule "
        "tried, whether it fired, each formula's value and the names it read; a failed "
        "condition is split into its parts. With --devices, the same for every proposal rule.",
        epilog="example:\n  parplan rules explain examples/tiny_mlp.yaml --node fc1 --devices 8",
        formatter_class=_RAW,
    )
    explain.add_argument(
        "graph",
        metavar="MODEL",
        help="graph .yaml/.yml/.json, Hugging Face config.json, .onnx, or a preset name",
    )
    explain.add_argument("--node", metavar="ID", help="only this node (or graph-level id)")
    explain.add_argument(
        "--devices", type=positive_int, metavar="N", help="also explain the proposals for N devices"
    )
    add_micro_batch_option(explain)
    add_rules_option(explain)
    explain.set_defaults(handler=_cmd_explain)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _cmd_check(args: argparse.Namespace) -> int:
    from parplan_gen.cli.textview import write_view
    from parplan_gen.rules.check import check_rules

    report = check_rules(args.dirs)
    out = [problem.render() for problem in report.problems] + [report.summary()]
    write_view("\n".join(out) + "\n")
    return 1 if report.errors else 0


def _cmd_list(args: argparse.Namespace) -> int:
    from parplan_gen.cli.textview import table, write_view
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules(args.rules)
    write_view(table(["ID", "KIND", "OP/GROUP", "WHERE", "LAYER"], _rows(rules), set()))
    overridden = [o for o in rules.overrides if not o.disabled]
    disabled = [o for o in rules.overrides if o.disabled]
    for title, found, by in (
        ("Overridden by a later layer", overridden, "REPLACED BY"),
        ("Disabled by a later layer", disabled, "DISABLED BY"),
    ):
        if found:
            write_view(f"\n{title}:\n")
            rows = [[o.id, _origin(o.replaced), _origin(o.by)] for o in found]
            write_view(table(["ID", "DEFINED AT", by], rows, set()))
    return 0


def _rows(rules: RuleSet) -> list[list[str]]:
    from parplan_gen.rules.explain import display_where

    found = [
        (o.rule.id, "opportunity", o.rule.op or "(graph)", o.origin) for o in rules.opportunities
    ]
    found += [(p.rule.id, "proposal", p.rule.group, p.origin) for p in rules.proposals]
    found += [(c.rule.id, "constraint", "-", c.origin) for c in rules.constraints]
    found += [(e.label, "estimate", e.section, e.origin) for e in rules.estimate]
    return [[i, kind, group, display_where(o.where), o.layer] for i, kind, group, o in found]


def _origin(origin: RuleOrigin) -> str:
    from parplan_gen.rules.explain import display_where

    return f"{display_where(origin.where)} [{origin.layer}]"


def _cmd_explain(args: argparse.Namespace) -> int:
    from parplan_gen.cli.textview import write_view
    from parplan_gen.models.load import load_graph_for
    from parplan_gen.rules.explain import explain_rules
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules(args.rules)
    graph = load_graph_for(args.graph, batch_size=args.micro_batch)
    write_view(explain_rules(graph, rules, args.node, args.devices))
    return 0


def _cmd_schema(_args: argparse.Namespace) -> int:
    print_json(rule_file_schema())
    return 0


def rule_file_schema() -> dict[str, Any]:
    """The JSON Schema of a rule file, from the pydantic models of `rules_schema`."""
    from parplan_gen.rules.schema import RuleFile

    schema = RuleFile.model_json_schema()
    schema["title"] = "parplan rule file"
    return {"$schema": SCHEMA_DIALECT, **schema}
