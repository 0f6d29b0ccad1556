"""Command-line pieces shared by several subcommands: cluster and layout options."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parplan_gen.inputs.errors import UsageError
from parplan_gen.inputs.number_text import ZERO_STAGES, positive_decimal, whole_number

if TYPE_CHECKING:
    from parplan_gen.cost.hardware import Cluster


def _argument_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse type from a parser that raises ValueError with its reason."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def size_type(field: str) -> Callable[[str], int]:
    """The argparse type of a size: a whole number from 1 to `layout.SIZE_LIMITS[field]`."""

    def parse(text: str) -> int:
        from parplan_gen.cost.layout import (
            SIZE_LIMITS,  # here: `parplan --help` imports no pydantic
        )

        return whole_number(text, SIZE_LIMITS[field])

    return _argument_type(parse, field)


# Counts of GPUs, devices or ranks, and of candidates shown: 1 to layout.MAX_GPUS.
positive_int = size_type("gpus")
zero_stage = _argument_type(lambda text: whole_number(text, max(ZERO_STAGES), 0), "zero_stage")


# Finite quantities above 0; physical ranges are checked where the figure is used.
positive_float = _argument_type(positive_decimal, "positive_float")


def print_json(payload: Any) -> None:
    """Print a JSON document for `--json` (indented: these outputs are small)."""
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def add_rules_option(parser: argparse.ArgumentParser) -> None:
    """--rules DIR (repeatable)."""
    parser.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="DIR",
        help="layer a directory of rule files over the built-in rules (repeatable; "
        "a later directory overrides by rule id)",
    )


TRAINED_MODEL_HELP = (
    "preset name (parplan models), Hugging Face config.json, graph file (.yaml/.json) or .onnx"
)


def add_micro_batch_option(parser: argparse.ArgumentParser) -> None:
    """--micro-batch N: the batch an ONNX model's dynamic batch dimension is bound to."""
    parser.add_argument(
        "--micro-batch",
        type=size_type("mbs"),
        default=1,
        metavar="N",
        help="bind an ONNX model's dynamic batch dimension to N samples, so that node FLOPs and "
        "sizes are those of one micro-batch (default 1; other models carry their own sizes)",
    )


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """--cluster FILE, or --gpus N --gpu NAME [--gpus-per-node G] [--inter-node-gbps X]."""
    group = parser.add_argument_group("cluster (a file, or the flags)")
    group.add_argument("--cluster", metavar="FILE", help="cluster file (docs/clusters.md)")
    group.add_argument("--gpus", type=positive_int, metavar="N", help="number of GPUs")
    group.add_argument("--gpu", metavar="NAME", help="GPU name from the catalog, e.g. h100")
    group.add_argument(
        "--gpus-per-node",
        type=positive_int,
        default=None,
        metavar="G",
        help="GPUs per node (default 8)",
    )
    group.add_argument(
        "--inter-node-gbps",
        type=positive_float,
        default=None,
        metavar="X",
        help="network bandwidth per GPU, Gb/s one direction (default: the GPU's reference system)",
    )


def cluster_from_args(args: argparse.Namespace) -> Cluster:
    """The Cluster the options describe; a usage error when they are incomplete or mixed."""
    from parplan_gen.cost.hardware import DEFAULT_GPUS_PER_NODE, cluster_from_flags, load_cluster

    flags = [
        f
        for f in ("gpus", "gpu", "gpus_per_node", "inter_node_gbps")
        if getattr(args, f) is not None
    ]
    if args.cluster:
        if flags:
            shown = ", ".join("--" + f.replace("_", "-") for f in flags)
            raise UsageError(f"--cluster cannot be combined with {shown}")
        return load_cluster(args.cluster)
    if args.gpus is None or args.gpu is None:
        raise UsageError("give --cluster FILE, or both --gpus N and --gpu NAME")
    return cluster_from_flags(
        args.gpus,
        args.gpu,
        gpus_per_node=args.gpus_per_node or DEFAULT_GPUS_PER_NODE,
        inter_node_gbps=args.inter_node_gbps,
    )
