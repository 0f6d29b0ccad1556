"""`parplan estimate`: memory, time and throughput of one layout, and every rule it breaks.

A thin shell over `api.estimate`. A layout that cannot exist (it breaks an `invalid` rule) is an
error without a report; one that breaks another rule (it does not fit, or an overlay's `reject`
rule refuses it) is reported, the rules it breaks listed (JSON: `violations`), and the run
ends as `parplan check`'s does for a layout that does not run as given: one error line, exit 1.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.common import (
    TRAINED_MODEL_HELP,
    add_backend_option,
    add_cluster_options,
    add_layout_options,
    add_rules_option,
    cluster_from_args,
    layout_from_args,
    print_json,
)

if TYPE_CHECKING:
    from parplan_gen.planning.evaluate import Evaluation

ESTIMATE_EXAMPLE = (
    "example:\n  parplan estimate llama-3-8b --gpus 8 --gpu h100 --tp 2 --pp 1 "
    "--mbs 2 --global-batch 512 --seq-len 8192 --distributed-optimizer"
)


def add_estimate_command(sub: Any) -> argparse.ArgumentParser:
    """Register `estimate` on the CLI's subparsers; returns its parser, for more options."""
    estimate = sub.add_parser(
        "estimate",
        help="memory, time and throughput of one parallel layout",
        description="Estimate memory per GPU, time per step and throughput of one layout, and "
        "list every constraint rule it breaks. Exit code 0 when it breaks none; 1 when it "
        "breaks one (the estimate is printed all the same, the reason goes to stderr; a "
        "layout that breaks an `invalid` rule cannot exist and is not estimated).",
        epilog=ESTIMATE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    estimate.add_argument("model", metavar="MODEL", help=TRAINED_MODEL_HELP)
    add_cluster_options(estimate)
    add_layout_options(estimate)
    add_backend_option(estimate, search=False)
    add_rules_option(estimate)
    estimate.add_argument("--json", action="store_true", help="print JSON (the plan contract)")
    estimate.add_argument(
        "--explain",
        metavar="NAME",
        help="print why NAME has its value instead of the estimate: a figure (time.step_s, "
        "memory.total) or a named formula (dp_comm_s), as the tree of the formulas it reads, "
        "each with its value, unit, source and file:line, down to the plan, model and cluster "
        "inputs (docs/rules.md)",
    )
    estimate.set_defaults(handler=_cmd_estimate)
    return estimate


def _cmd_estimate(args: argparse.Namespace) -> int:
    from parplan_gen.api import estimate, load_model
    from parplan_gen.cli.estimate_view import estimate_text
    from parplan_gen.cli.textview import write_view
    from parplan_gen.inputs.errors import InputError
    from parplan_gen.planning.sanity import sanity_warnings
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules(args.rules)
    spec, cluster = load_model(args.model), cluster_from_args(args)
    layout = layout_from_args(args, cluster.num_gpus, spec.sequence_length(args.seq_len))
    found = estimate(
        spec,
        cluster,
        layout,
        rules=rules,
        flash_attention=not args.no_flash_attention,
        backend=args.backend,
    )
    # A layout that cannot exist (an `invalid` constraint, e.g. heads not divisible by tp) is an
    # error; one that breaks another rule is still estimated, the rules it breaks listed.
    invalid = [v for v in found.violations if v.severity == "invalid"]
    if invalid:
        raise InputError("; ".join(v.describe() for v in invalid) + f" ({spec.name})")
    if args.explain is not None:
        from parplan_gen.planning.explain_estimate import explain_estimate

        tree = explain_estimate(
            spec,
            cluster,
            found.estimate,
            args.explain,
            rules,
            flash_attention=not args.no_flash_attention,
        )
        if args.json:
            print_json(tree.contract())
        else:
            write_view(tree.render())
    elif args.json:
        print_json(_contract(found, sanity_warnings(spec, cluster, found.estimate)))
    else:
        write_view(estimate_text(spec, cluster, found.estimate, found.violations))
    if found.violations:  # the report is on stdout; the reason is the one-line error (exit 1)
        raise InputError(broken(found))
    return 0


def _contract(found: Evaluation, warnings: list[str]) -> dict[str, Any]:
    """`estimate --json`: the estimate, then `violations` and `warnings` when there are any."""
    violations = [dataclasses.asdict(v) for v in found.violations]
    return (
        found.estimate.contract()
        | ({"violations": violations} if violations else {})
        | ({"warnings": warnings} if warnings else {})
    )


def broken(found: Evaluation) -> str:
    """Why a layout that breaks a rule other than an `invalid` one does not run as estimated,
    in one line: it does not fit (as `check` says it), else the first rule that refuses it."""
    problem = found.problem()
    if problem is not None:
        return problem
    first, more = found.violations[0], len(found.violations) - 1
    return f"the planner would not choose this layout: {first.describe()}" + (
        f" (and {more} more rule(s))" if more else ""
    )
