"""The argparse types of the flags (cli/common.py defines the flags): each turns the text of one
flag into a bounded, typed value with the same check as the file or API field it stands for, or
refuses it as a usage error (`parplan: error: argument --FLAG: ...`, exit 2). Numbers are ASCII
(inputs/number_text.py). Checks that need pydantic import it lazily: `parplan --help` does not.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from parplan_gen.inputs.defaults import ZERO_STAGES
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.number_text import (
    ascii_decimal,
    element_count,
    positive_decimal,
    token_count,
    whole_number,
)


def argument_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
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
        from parplan_gen.cost.layout import SIZE_LIMITS

        return whole_number(text, SIZE_LIMITS[field])

    return argument_type(parse, field)


def _elements(text: str) -> int:
    from parplan_gen.inputs.defaults import DS_MAX_ELEMENTS

    return element_count(text, DS_MAX_ELEMENTS)


element_count_type = argument_type(_elements, "elements")  # 5e8, 500000000


def _offload_layers(text: str) -> int:
    from parplan_gen.models.transformer_shape import MAX_LAYERS

    return whole_number(text, MAX_LAYERS, 0)


# The words an on/off setting takes (a flag's or a `compare --layout` word's).
SWITCHES = {"on": True, "true": True, "off": False, "false": False}


def _switch(text: str) -> bool:
    if text not in SWITCHES:
        raise ValueError(f"invalid choice: {text!r} (choose from {', '.join(SWITCHES)})")
    return SWITCHES[text]


switch = argument_type(_switch, "switch")
# Layers whose activations are offloaded (Layout.offload_layers): 0 to the most a model has.
offload_layers = argument_type(_offload_layers, "offload_layers")
# Counts of GPUs, devices or ranks, and of candidates shown: 1 to layout.MAX_GPUS.
positive_int = size_type("gpus")
zero_stage = argument_type(lambda text: whole_number(text, max(ZERO_STAGES), 0), "zero_stage")
# Finite quantities above 0; physical ranges are checked where the figure is used.
positive_float = argument_type(positive_decimal, "positive_float")
token_count_type = argument_type(token_count, "tokens")  # 15T, 300B, 2e12


def _cpu_count(text: str) -> int:
    from parplan_gen.cost.launch_site import SLURM_CPUS_MAX

    return whole_number(text, SLURM_CPUS_MAX)


cpu_count_type = argument_type(_cpu_count, "cpus_per_node")  # --cpus-per-node


def _headroom(text: str) -> str:
    """`--headroom` as given, once planning.pins.parse_headroom accepts it (the plan records
    it as asked)."""
    from parplan_gen.planning.pins import parse_headroom

    try:
        parse_headroom(text)
    except InputError as exc:
        raise ValueError(exc.message.removeprefix("headroom: ")) from None
    return text


headroom_type = argument_type(_headroom, "headroom")


def _gpu_hour_price(text: str) -> float:
    """An ASCII number within the range of the cluster file's `gpu_hour_price`."""
    from parplan_gen.cost.budget_figures import budget_figure_problem

    price = ascii_decimal(text)
    problem = budget_figure_problem("gpu_hour_price", price)
    if problem:
        raise ValueError(problem)
    return price


gpu_hour_price_type = argument_type(_gpu_hour_price, "gpu_hour_price")
