"""Readable text views of analysis results (the non-JSON output of the CLI).

Names and texts from input files (a graph's name, node ids, rule ids and descriptions) pass
through safe_text.printable: an ESC or NUL in them reaches the terminal as a visible escape.
Every view of the CLI is written by `write_view`, which shows whatever control character a
view still holds (a rule's reason in `plan`, `check` or `compare`) as an escape as well.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.safe_text import MAX_SHOWN_CHARS, printable, printable_lines

if TYPE_CHECKING:  # annotations only: the CLI's start loads no graph model or rule engine
    from parplan_gen.models.graph import ModelGraph
    from parplan_gen.rules.engine import Opportunity, Proposal


def write_view(text: str) -> None:
    """Print a text view (lines ending in a line feed) with nothing a terminal would act on:
    every control, format or line-break character but the line feeds is shown as an escape."""
    sys.stdout.write(printable_lines(text))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: set[int]) -> str:
    """A plain aligned table; columns in `right` are right-aligned, cells shown printable."""
    shown = [printable(h) for h in headers]
    columns = [_printable_column(column) for column in zip(*rows, strict=True)] or [
        [] for _ in shown
    ]
    widths = [
        max(len(h), *map(len, column)) if rows else len(h)
        for h, column in zip(shown, columns, strict=True)
    ]
    form = "  ".join(f"{{:{'>' if i in right else '<'}{w}}}" for i, w in enumerate(widths))
    out = [form.format(*shown).rstrip(), form.format(*("-" * w for w in widths)).rstrip()]
    out += [form.format(*cells).rstrip() for cells in zip(*columns, strict=True)]
    return "\n".join(out) + "\n"


def _printable_column(cells: Sequence[object]) -> list[str]:
    """The cells of one column as `printable` shows them, checked as one string when they are
    short, plain ASCII (nearly always), else one by one."""
    texts = list(map(str, cells))
    joined = "".join(texts)
    if joined.isascii() and joined.isprintable() and max(map(len, texts)) <= MAX_SHOWN_CHARS:
        return texts
    return list(map(printable, texts))


def _graph_line(graph: ModelGraph) -> str:
    s = graph.stats
    return f"{printable(graph.name)}: {s.node_count} nodes, {s.edge_count} edges, depth {s.depth}"


def opportunities_table(graph: ModelGraph, found: Sequence[Opportunity]) -> str:
    """Opportunities, best first, one row each."""
    head = f"Parallelization opportunities for {_graph_line(graph)}\n\n"
    if not found:
        return head + "No opportunities: no rule matched this graph.\n"
    # Most opportunities share all but the node: their cells are formatted once. The key holds
    # the floats' exact spelling, as 0.0 and -0.0 are equal but print differently.
    tails: dict[tuple[object, ...], list[str]] = {}
    rows = []
    for o in found:
        needs = o.resource_requirements
        overhead = needs.communication_overhead
        key = (o.type, o.rule_id, o.estimated_speedup.hex(), needs, overhead.hex())
        tail = tails.get(key)
        if tail is None:
            tail = tails[key] = _opportunity_cells(o)
        rows.append([o.node_id, *tail])
    headers = ["node", "type", "speedup", "min devices", "memory/device", "comm overhead", "rule"]
    return head + table(headers, rows, right={2, 3, 4, 5})


def _opportunity_cells(o: Opportunity) -> list[str]:
    """The cells of an opportunity's row after its node id."""
    needs = o.resource_requirements
    return [
        o.type,
        f"{o.estimated_speedup:.2f}x",
        str(needs.min_devices),
        f"{needs.memory_per_device / MIB:,.0f} MiB",
        f"{needs.communication_overhead:.2f}",
        o.rule_id,
    ]


def proposals_table(graph: ModelGraph, devices: int, made: Sequence[Proposal]) -> str:
    """Proposals in rule order, with their settings."""
    head = f"Proposals for {_graph_line(graph)} on {devices} devices\n\n"
    if not made:
        return head + "No proposals: no rule's condition held for this graph and device count.\n"
    lines = []
    for i, p in enumerate(made, 1):
        settings = ", ".join(f"{k}={_show(v)}" for k, v in p.settings.items()) or "-"
        line = f"[{p.type}] {p.estimated_speedup:.2f}x  {p.description}"
        lines.append(f"{i:>2}. {printable(line, limit=len(line))}")
        lines.append(f"    settings: {printable(settings)}   (rule {printable(p.rule_id)})")
    return head + "\n".join(lines) + "\n"


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
