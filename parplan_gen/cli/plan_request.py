"""What `parplan plan` and `parplan compare` share: the model and its request's options
(`add_request_options`), and the keyword arguments of `api.plan` that `plan`'s flags give
(`plan_request`, also for `plan --all-backends`)."""

from __future__ import annotations

import argparse
from typing import Any

from parplan_gen.cli.common import (
    TRAINED_MODEL_HELP,
    add_backend_option,
    add_batch_options,
    add_cluster_options,
    add_rules_option,
    add_slurm_options,
    bounds_from_args,
    pins_from_args,
    search_from_args,
)
from parplan_gen.models.kind import ANY_BACKEND


def add_request_options(parser: argparse.ArgumentParser, *, slurm: bool = True) -> None:
    """MODEL, the cluster, the training options, --backend and --rules (`plan`, `compare`)."""
    parser.add_argument("model", metavar="MODEL", help=TRAINED_MODEL_HELP)
    add_cluster_options(parser)
    if slurm:
        add_slurm_options(parser)
    group = parser.add_argument_group("training")
    add_batch_options(group)
    add_backend_option(group, search=True)
    add_rules_option(parser)


def plan_request(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `api.plan` that `parplan plan`'s flags give."""
    return {
        "global_batch": args.global_batch,
        "seq_len": args.seq_len,
        "precision": args.precision,
        "objective": args.objective,
        "top": args.top,
        "flash_attention": not args.no_flash_attention,
        "backend": args.backend or ANY_BACKEND,
        "rules": args.rules,
        "pins": pins_from_args(args),
        "bounds": bounds_from_args(args),
        "headroom": args.headroom,
        "search": search_from_args(args),
        "tokens": args.tokens,
        "days": args.days,
        "gpu_hour_price": args.gpu_hour_price,
    }
