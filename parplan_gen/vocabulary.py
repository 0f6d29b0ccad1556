"""The one declaration of what a formula may read and call.

The formula compiler, `docs/rules.md` (checked by a test) and `parplan rules` all read this
module. A name is either fixed (`graph.depth`) or a family with a free last segment
(`graph.op_count.<Op>`). Each name belongs to a namespace (its first segment); each place a
formula can appear (a *context*) allows some namespaces.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

ValueKind = Literal["number", "bool", "str"]


@dataclass(frozen=True)
class Name:
    """A name a formula may read."""

    name: str  # dotted; a family ends with ".<...>", e.g. "graph.op_count.<Op>"
    kind: ValueKind
    unit: str
    doc: str

    @property
    def namespace(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def family_prefix(self) -> str | None:
        """For a family (`graph.op_count.<Op>`), the prefix before the free segment."""
        head, _, last = self.name.rpartition(".")
        return head + "." if last.startswith("<") else None


@dataclass(frozen=True)
class Function:
    """A function a formula may call."""

    name: str
    signature: str
    min_args: int
    max_args: int | None  # None: any number
    returns: ValueKind
    doc: str
    impl: Callable[..., object]


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(x, hi))


NAMES: tuple[Name, ...] = (
    Name("graph.node_count", "number", "nodes", "Number of nodes in the model graph."),
    Name("graph.edge_count", "number", "edges", "Number of edges in the model graph."),
    Name(
        "graph.depth",
        "number",
        "nodes",
        "Nodes on the longest path (the critical path); 0 for an empty graph.",
    ),
    Name(
        "graph.op_count.<Op>",
        "number",
        "nodes",
        "Number of nodes whose op is <Op> (canonical name, e.g. `graph.op_count.MatMul`); 0 when none.",
    ),
    Name(
        "graph.sum.<attr>",
        "number",
        "unit of the attribute",
        "Sum of the numeric node attribute <attr> over all nodes (e.g. `graph.sum.params`); 0 when no node has it.",
    ),
    Name(
        "node.index", "number", "position", "0-based position of the node in the file's node list."
    ),
    Name("node.in_degree", "number", "edges", "Number of edges into the node."),
    Name("node.out_degree", "number", "edges", "Number of edges out of the node."),
    Name(
        "node.level",
        "number",
        "nodes",
        "Nodes on the longest path from a source up to and including this node (1 for a source).",
    ),
    Name(
        "node.attr.<attr>",
        "number",
        "unit of the attribute",
        "The node's numeric attribute <attr> (e.g. `node.attr.flops`); an error when the node lacks it, so guard with `node.has.<attr>`.",
    ),
    Name("node.has.<attr>", "bool", "-", "True when the node has a numeric attribute <attr>."),
    Name(
        "cluster.devices",
        "number",
        "devices",
        "Device count given to `parplan propose --devices N`.",
    ),
    Name("speedup", "number", "x", "In a proposal description: the proposal's evaluated speedup."),
    Name(
        "settings.<key>",
        "number",
        "as the setting",
        "In a proposal description: the evaluated setting <key> (numbers, booleans or text).",
    ),
)

CONSTANTS: dict[str, bool] = {"true": True, "false": False}

FUNCTIONS: tuple[Function, ...] = (
    Function("min", "min(a, b, ...)", 1, None, "number", "Smallest argument.", min),
    Function("max", "max(a, b, ...)", 1, None, "number", "Largest argument.", max),
    Function(
        "clamp",
        "clamp(x, lo, hi)",
        3,
        3,
        "number",
        "`x` limited to [lo, hi]: max(lo, min(x, hi)).",
        _clamp,
    ),
    Function("ceil", "ceil(x)", 1, 1, "number", "Smallest integer >= x.", math.ceil),
    Function("floor", "floor(x)", 1, 1, "number", "Largest integer <= x.", math.floor),
    Function(
        "round",
        "round(x[, digits])",
        1,
        2,
        "number",
        "x rounded half-to-even to `digits` decimals (default 0).",
        round,
    ),
    Function("abs", "abs(x)", 1, 1, "number", "Absolute value.", abs),
    Function("sqrt", "sqrt(x)", 1, 1, "number", "Square root (x >= 0).", math.sqrt),
    Function("log", "log(x)", 1, 1, "number", "Natural logarithm (x > 0).", math.log),
    Function("log2", "log2(x)", 1, 1, "number", "Base-2 logarithm (x > 0).", math.log2),
    Function("log10", "log10(x)", 1, 1, "number", "Base-10 logarithm (x > 0).", math.log10),
    Function("exp", "exp(x)", 1, 1, "number", "e to the power x.", math.exp),
)

# Which namespaces a formula may read, by the place it appears in a rule file.
CONTEXTS: dict[str, frozenset[str]] = {
    "node": frozenset({"graph", "node"}),  # node-level opportunity rules
    "graph": frozenset({"graph"}),  # graph-level opportunity rules
    "proposal": frozenset({"graph", "cluster"}),  # proposal rules
    "proposal_description": frozenset({"graph", "cluster", "speedup", "settings"}),
}

FUNCTION_BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}


def lookup(name: str) -> Name | None:
    """The declaration that covers the dotted `name`, or None."""
    for entry in NAMES:
        prefix = entry.family_prefix
        if prefix is None:
            if entry.name == name:
                return entry
        elif name.startswith(prefix) and len(name) > len(prefix) and "." not in name[len(prefix) :]:
            return entry
    return None


def all_spellings() -> list[str]:
    """Every fixed name, family prefix, constant and function, for "did you mean" hints."""
    out = [e.name if e.family_prefix is None else e.family_prefix for e in NAMES]
    return out + list(CONSTANTS) + [f.name for f in FUNCTIONS]
