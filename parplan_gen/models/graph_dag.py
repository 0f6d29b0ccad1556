"""The checks and indexes of a graph's structure: one pass over its ids and edges.

Owns what `graph.build_graph` needs beyond the nodes themselves: duplicate ids, dangling edges,
self-loops, duplicate edges and cycles are `GraphError`s that name the ids and, when a document
is known, point at the offending key; positions, degrees and longest-path levels come from one
topological pass (O(V+E)); `GraphStats` holds the whole-graph facts that rules read.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from pydantic import BaseModel, Field

from parplan_gen.inputs.errors import GraphError, SourceRef, shown_value
from parplan_gen.inputs.key_path import KeyPath, format_path
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import Document
from parplan_gen.models.graph_node import Node


class GraphStats(BaseModel, frozen=True):
    """Whole-graph facts that rules read as `graph.*`."""

    node_count: int
    edge_count: int
    depth: int = Field(description="Nodes on the longest path (the critical path); 0 if empty.")
    op_counts: dict[str, int] = Field(description="Canonical op -> count, in first-seen order.")
    attr_sums: dict[str, float] = Field(description="Numeric attribute -> sum over all nodes.")


@dataclass(frozen=True, slots=True)
class GraphLayout:
    """Positions, degrees and levels of a checked graph, indexed by file order."""

    index: dict[str, int]
    in_degree: list[int]
    out_degree: list[int]
    levels: list[int]


class Locator:
    """Turns node/edge positions into SourceRefs when the graph came from a native document."""

    def __init__(self, doc: Document | None) -> None:
        data = doc.data if doc is not None else None
        native = isinstance(data, dict) and isinstance(data.get("nodes"), list)
        self.doc = doc if native else None
        self.name = doc.name if doc is not None else None

    def ref(self, path: KeyPath) -> SourceRef | None:
        """Where `path` is: in the document, else the file alone, else nowhere."""
        if self.doc is not None:
            return self.doc.ref(path)
        return SourceRef(self.name) if self.name is not None else None

    def line(self, path: KeyPath) -> str:
        """`FILE:LINE` of `path`, or the key path itself when there is no document."""
        ref = self.doc.ref(path) if self.doc is not None else None
        if ref is None or ref.line is None:
            return format_path(path)
        return f"{ref.file}:{ref.line}"

    def edge_end(self, index: int, end: int) -> KeyPath:
        """Key path of one end (0 = from, 1 = to) of edge `index`."""
        raw = self.doc.data.get("edges") if self.doc is not None else None
        if isinstance(raw, list) and index < len(raw) and isinstance(raw[index], dict):
            return ("edges", index, ("from", "to")[end])
        return ("edges", index, end)


def check_and_index(
    nodes: tuple[Node, ...], edges: tuple[tuple[str, str], ...], where: Locator
) -> tuple[GraphLayout, GraphStats]:
    """The layout and statistics of a graph; the first structural fault is a GraphError."""
    index = {node.id: i for i, node in enumerate(nodes)}
    if len(index) != len(nodes):
        raise _duplicate_node_error(nodes, where)
    succ, in_degree = _adjacency(edges, index, where)
    levels = _levels(succ, in_degree)
    if levels is None:
        raise _cycle_error(edges, index, where)
    layout = GraphLayout(index, in_degree, [len(s) for s in succ], levels)
    return layout, _stats(nodes, len(edges), levels, where)


def _edge_name(a: str, b: str) -> str:
    return f"edge [{printable(a)}, {printable(b)}]"


def _duplicate_node_error(nodes: tuple[Node, ...], where: Locator) -> GraphError:
    first: dict[str, int] = {}
    for i, node in enumerate(nodes):
        j = first.setdefault(node.id, i)
        if j != i:
            at = where.line(("nodes", j, "id"))
            message = f"duplicate node id {shown_value(node.id)} (first defined at {at})"
            return GraphError(message, where.ref(("nodes", i, "id")))
    raise AssertionError("no duplicate node id found")  # unreachable: the caller saw one


def _adjacency(
    edges: tuple[tuple[str, str], ...], index: dict[str, int], where: Locator
) -> tuple[list[list[int]], list[int]]:
    """Successor lists and in-degrees by node position; the first bad edge is an error."""
    succ: list[list[int]] = [[] for _ in index]
    in_degree = [0] * len(index)
    get = index.get
    for a, b in edges:
        u, v = get(a), get(b)
        if u is None or v is None or u == v:
            raise _edge_error(edges, index, where)
        succ[u].append(v)
        in_degree[v] += 1
    if len(set(edges)) != len(edges):
        raise _edge_error(edges, index, where)
    return succ, in_degree


def _edge_error(
    edges: tuple[tuple[str, str], ...], index: dict[str, int], where: Locator
) -> GraphError:
    """The first bad edge in file order: an unknown end, a self-loop or a repeat."""
    first: dict[tuple[str, str], int] = {}
    for j, (a, b) in enumerate(edges):
        for end, node_id in enumerate((a, b)):
            if node_id not in index:
                message = f"{_edge_name(a, b)}: unknown node {shown_value(node_id)}"
                return GraphError(message, where.ref(where.edge_end(j, end)))
        if a == b:
            message = f"{_edge_name(a, b)}: self-loop on node {shown_value(a)}"
            return GraphError(message, where.ref(("edges", j)))
        k = first.setdefault((a, b), j)
        if k != j:
            message = f"duplicate {_edge_name(a, b)} (first at {where.line(('edges', k))})"
            return GraphError(message, where.ref(("edges", j)))
    raise AssertionError("no bad edge found")  # unreachable: the caller saw one


def _levels(succ: list[list[int]], in_degree: list[int]) -> list[int] | None:
    """Longest-path levels in one topological pass (Kahn); None when there is a cycle."""
    remaining = list(in_degree)
    level = [1] * len(succ)
    ready = [i for i, d in enumerate(remaining) if d == 0]
    done = 0
    while ready:
        u = ready.pop()
        done += 1
        nxt = level[u] + 1
        for v in succ[u]:
            if level[v] < nxt:
                level[v] = nxt
            remaining[v] -= 1
            if remaining[v] == 0:
                ready.append(v)
    return level if done == len(succ) else None


def _cycle_error(
    edges: tuple[tuple[str, str], ...], index: dict[str, int], where: Locator
) -> GraphError:
    """Name one cycle, starting at its node listed first, pointing at its closing edge."""
    import networkx as nx  # only when there is a cycle to show

    g = nx.DiGraph(edges)
    cycle = [u for u, _ in nx.find_cycle(g)]
    start = min(range(len(cycle)), key=lambda k: index[cycle[k]])
    cycle = cycle[start:] + cycle[:start]
    closing = edges.index((cycle[-1], cycle[0]))
    text = " -> ".join([*cycle, cycle[0]])
    return GraphError(f"cycle: {printable(text)}", where.ref(("edges", closing)))


def _stats(
    nodes: tuple[Node, ...], edge_count: int, levels: list[int], where: Locator
) -> GraphStats:
    numbers: defaultdict[str, list[int | float]] = defaultdict(list)
    for node in nodes:
        for key, value in node.attrs.items():
            if type(value) is float or type(value) is int:  # bools are not numbers
                numbers[key].append(value)
    return GraphStats(
        node_count=len(nodes),
        edge_count=edge_count,
        depth=max(levels, default=0),
        op_counts=Counter(node.op for node in nodes),  # a Counter keeps first-seen order
        attr_sums={key: _sum(key, values, where) for key, values in numbers.items()},
    )


def _sum(key: str, values: list[int | float], where: Locator) -> float:
    """Exactly rounded, so the sum does not depend on node order."""
    try:
        return math.fsum(values)
    except OverflowError:
        message = f"attribute {shown_value(key)}: the sum over all nodes overflows a float"
        raise GraphError(message, where.ref(("nodes",))) from None
