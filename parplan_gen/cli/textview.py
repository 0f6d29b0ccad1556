"""Readable text views of analysis results (the non-JSON output of the CLI).

Names and texts from input files (a graph's name, node ids, rule ids and descriptions) pass
through safe_text.printable: an ESC or NUL in them reaches the terminal as a visible escape.
"""

from __future__ import annotations

from collections.abc import Sequence

from parplan_gen.inputs.safe_text import printable
from parplan_gen.models.graph import ModelGraph
from parplan_gen.rules.engine import Opportunity, Proposal

_BYTES_PER_MIB = 1024 * 1024


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """A plain aligned table; columns in `right` are right-aligned, cells shown printable."""
    headers = [printable(h) for h in headers]
    rows = [[printable(c) for c in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out) + "\n"


def _graph_line(graph: ModelGraph) -> str:
    s = graph.stats
    return f"{printable(graph.name)}: {s.node_count} nodes, {s.edge_count} edges, depth {s.depth}"


def opportunities_table(graph: ModelGraph, found: Sequence[Opportunity]) -> str:
    """Opportunities, best first, one row each."""
    head = f"Parallelization opportunities for {_graph_line(graph)}\n\n"
    if not found:
        return head + "No opportunities: no rule matched this graph.\n"
    rows = [
        [
            o.node_id,
            o.type,
            f"{o.estimated_speedup:.2f}x",
            str(o.resource_requirements.min_devices),
            f"{o.resource_requirements.memory_per_device / _BYTES_PER_MIB:,.0f} MiB",
            f"{o.resource_requirements.communication_overhead:.2f}",
            o.rule_id,
        ]
        for o in found
    ]
    headers = ["node", "type", "speedup", "min devices", "memory/device", "comm overhead", "rule"]
    return head + table(headers, rows, right={2, 3, 4, 5})


def proposals_table(graph: ModelGraph, devices: int, made: Sequence[Proposal]) -> str:
    """Proposals in rule order, with their settings."""
    head = f"Proposals for {_graph_line(graph)} on {devices} devices\n\n"
    if not made:
        return head + "No proposals: no rule's condition held for this graph and device count.\n"
    lines = []
    for i, p in enumerate(made, 1):
        settings = ", ".join(f"{k}={_show(v)}" for k, v in p.settings.items()) or "-"
        head = f"[{p.type}] {p.estimated_speedup:.2f}x  {p.description}"
        lines.append(f"{i:>2}. {printable(head, limit=len(head))}")
        lines.append(f"    settings: {printable(settings)}   (rule {printable(p.rule_id)})")
    return head + "\n".join(lines) + "\n"


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
