"""The model graph: nodes with canonical ops and attributes, edges, and exact statistics.

Owns the native graph file (YAML or JSON) and every check on a graph, whoever built it
(importers call `build_graph` too): duplicate ids, dangling edges, self-loops, duplicate edges
and cycles are `GraphError`s that name the ids and, when a document is known, point at the
offending key. Depth and levels come from one topological pass (O(V+E)); the networkx view is
built only when someone asks for it.
"""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic.dataclasses import dataclass

if TYPE_CHECKING:
    import networkx as nx

from parplan_gen.inputs.errors import GraphError, SourceRef, did_you_mean, shown_value
from parplan_gen.inputs.safe_text import NOT_PLAIN_NAME, is_plain, name_from_path, printable
from parplan_gen.inputs.source import (
    MIB,
    Document,
    KeyPath,
    format_path,
    gc_paused,
    is_finite_number,
    load_document,
)

# A native graph or model file: 16 MiB holds ~200,000 nodes with their sizes (~80 bytes each
# as JSON), which load in ~2 s and ~300 MB. Loading is linear, ~6 us and ~850 bytes a node
# (2 million bare nodes, 63 MB: ~11 s, 1.7 GB): raise the limit for such graphs.
MAX_GRAPH_BYTES = 16 * MIB
ALIAS_PREFIX = "Compute::"  # the seed's spelling: "Compute::MatMul" is "MatMul"
TOP_LEVEL_KEYS = ("name", "nodes", "edges")
_INT_MAX = int(sys.float_info.max)  # a larger int cannot be summed into the stats
AttrValue = Annotated[int, Field(ge=-_INT_MAX, le=_INT_MAX)] | FiniteFloat | str | bool


def canonical_op(op: str) -> str:
    """The canonical op name: `Compute::MatMul` -> `MatMul`; other names are unchanged."""
    return op.removeprefix(ALIAS_PREFIX)


@dataclass(frozen=True, slots=True, config=ConfigDict(extra="forbid"))
class Node:
    """One operation of the model graph (validated when made). A slotted dataclass: a graph
    may hold millions, and a node takes ~250 bytes with its attributes (a BaseModel: ~670)."""

    id: str = Field(min_length=1, description="Unique node id.")
    op: str = Field(description="Canonical op type; `Compute::X` is stored as `X`.")
    attrs: dict[str, AttrValue] = Field(
        default_factory=dict, description="Every other field of the node: numbers, strings, bools."
    )

    @field_validator("op")
    @classmethod
    def _canonical(cls, op: str) -> str:
        canonical = canonical_op(op)
        if not canonical:
            raise ValueError(f"op {printable(repr(op))} names no op")
        return sys.intern(canonical)  # a graph has few ops: one string each, not one a node


_NODE_LIST = TypeAdapter(list[Node])
# Nodes validated per call: pydantic's cost per call is spread over many nodes, and the field
# mappings of one chunk only are alive at a time (for all 2 million nodes at once: ~700 MB).
_CHUNK = 4096


class GraphStats(BaseModel, frozen=True):
    """Whole-graph facts that rules read as `graph.*`."""

    node_count: int
    edge_count: int
    depth: int = Field(description="Nodes on the longest path (the critical path); 0 if empty.")
    op_counts: dict[str, int] = Field(description="Canonical op -> count, in first-seen order.")
    attr_sums: dict[str, float] = Field(description="Numeric attribute -> sum over all nodes.")


class ModelGraph:
    """An immutable, validated DAG of nodes in file order. Build it with `build_graph`."""

    __slots__ = ("_digraph", "_layout", "edges", "name", "nodes", "stats")

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]
    stats: GraphStats

    def __init__(
        self,
        name: str,
        nodes: tuple[Node, ...],
        edges: tuple[tuple[str, str], ...],
        layout: _Layout,
        stats: GraphStats,
    ) -> None:
        """Internal: `build_graph` checks and indexes the graph first."""
        fields = {"name": name, "nodes": nodes, "edges": edges, "stats": stats}
        for key, value in {**fields, "_layout": layout, "_digraph": None}.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"ModelGraph is immutable (cannot set {key!r})")

    def __repr__(self) -> str:
        s = self.stats
        return f"ModelGraph({self.name!r}, nodes={s.node_count}, edges={s.edge_count})"

    def _position(self, node_id: str) -> int:
        try:
            return self._layout.index[node_id]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no node {node_id!r}") from None

    def node(self, node_id: str) -> Node:
        """The node with id `node_id` (KeyError if there is none)."""
        return self.nodes[self._position(node_id)]

    def in_degree(self, node_id: str) -> int:
        """Number of edges into `node_id`."""
        return self._layout.in_degree[self._position(node_id)]

    def out_degree(self, node_id: str) -> int:
        """Number of edges out of `node_id`."""
        return self._layout.out_degree[self._position(node_id)]

    def level(self, node_id: str) -> int:
        """Nodes on the longest path from any source up to and including `node_id` (source: 1)."""
        return self._layout.levels[self._position(node_id)]

    @property
    def digraph(self) -> nx.DiGraph:
        """A frozen networkx view (node attribute `node` holds the Node), built on first use."""
        import networkx as nx  # imported on use: it costs ~0.1 s, which `parplan` rarely needs

        if self._digraph is None:
            g = nx.DiGraph(name=self.name)
            g.add_nodes_from((n.id, {"node": n}) for n in self.nodes)
            g.add_edges_from(self.edges)
            object.__setattr__(self, "_digraph", nx.freeze(g))
        return self._digraph


class _Layout(NamedTuple):
    """Positions, degrees and levels of a checked graph, indexed by file order."""

    index: dict[str, int]
    in_degree: list[int]
    out_degree: list[int]
    levels: list[int]


class _Locator:
    """Turns node/edge positions into SourceRefs when the graph came from a native document."""

    def __init__(self, doc: Document | None) -> None:
        data = doc.data if doc is not None else None
        native = isinstance(data, dict) and isinstance(data.get("nodes"), list)
        self.doc = doc if native else None
        self.name = doc.name if doc is not None else None

    def ref(self, path: KeyPath) -> SourceRef | None:
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


def build_graph(
    name: str,
    nodes: Sequence[Node],
    edges: Sequence[tuple[str, str]],
    *,
    doc: Document | None = None,
) -> ModelGraph:
    """Check and index a graph; errors point into `doc` when given (node i at `nodes[i]`)."""
    nodes = tuple(nodes)
    edges = tuple(map(tuple, edges))  # type: ignore[arg-type]
    where = _Locator(doc)
    index = {node.id: i for i, node in enumerate(nodes)}
    if len(index) != len(nodes):
        raise _duplicate_node_error(nodes, where)
    succ, in_degree = _adjacency(edges, index, where)
    levels = _levels(succ, in_degree)
    if levels is None:
        raise _cycle_error(edges, index, where)
    layout = _Layout(index, in_degree, [len(s) for s in succ], levels)
    return ModelGraph(name, nodes, edges, layout, _stats(nodes, len(edges), levels, where))


def _edge_name(a: str, b: str) -> str:
    return f"edge [{printable(a)}, {printable(b)}]"


def _duplicate_node_error(nodes: tuple[Node, ...], where: _Locator) -> GraphError:
    first: dict[str, int] = {}
    for i, node in enumerate(nodes):
        j = first.setdefault(node.id, i)
        if j != i:
            at = where.line(("nodes", j, "id"))
            message = f"duplicate node id {shown_value(node.id)} (first defined at {at})"
            return GraphError(message, where.ref(("nodes", i, "id")))
    raise AssertionError("no duplicate node id found")  # unreachable: the caller saw one


def _adjacency(
    edges: tuple[tuple[str, str], ...], index: dict[str, int], where: _Locator
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
    edges: tuple[tuple[str, str], ...], index: dict[str, int], where: _Locator
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
    edges: tuple[tuple[str, str], ...], index: dict[str, int], where: _Locator
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
    nodes: tuple[Node, ...], edge_count: int, levels: list[int], where: _Locator
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


def _sum(key: str, values: list[int | float], where: _Locator) -> float:
    """Exactly rounded, so the sum does not depend on node order."""
    try:
        return math.fsum(values)
    except OverflowError:
        message = f"attribute {shown_value(key)}: the sum over all nodes overflows a float"
        raise GraphError(message, where.ref(("nodes",))) from None


# --- the native file -------------------------------------------------------------------------


def load_graph(path: str | Path) -> ModelGraph:
    """Read a native graph file (`.json`, or YAML otherwise)."""
    with gc_paused():
        return graph_from_document(load_document(path, max_bytes=MAX_GRAPH_BYTES))


def graph_from_document(doc: Document) -> ModelGraph:
    """Build the graph a parsed native graph document describes."""
    name, raw_nodes, raw_edges = _top_level(doc)
    edges = [_edge(doc, j, raw) for j, raw in enumerate(raw_edges)]
    return build_graph(name, _nodes(doc, raw_nodes), edges, doc=doc)


def _nodes(doc: Document, raw_nodes: list[Any]) -> list[Node]:
    """The Nodes of the raw node mappings, validated a chunk at a time."""
    nodes: list[Node] = []
    for start in range(0, len(raw_nodes), _CHUNK):
        chunk = raw_nodes[start : start + _CHUNK]
        fields = [_node_fields(doc, start + k, raw) for k, raw in enumerate(chunk)]
        try:
            nodes += _NODE_LIST.validate_python(fields)
        except ValidationError:  # an attribute value; find the first, precisely
            for k, raw in enumerate(chunk):
                _checked_node_fields(doc, start + k, raw)
            raise
    return nodes


def _top_level(doc: Document) -> tuple[str, list[Any], list[Any]]:
    """The graph's name (default: the file's stem), raw nodes and raw edges."""
    data = doc.data
    if not isinstance(data, dict):
        message = "a graph file must be a mapping with `nodes` (and optional `edges`, `name`)"
        raise GraphError(f"{message}, got {_describe(data)}", doc.ref())
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            hint = did_you_mean(key, TOP_LEVEL_KEYS)
            message = f"unknown key {shown_value(key)}{hint} (allowed: {', '.join(TOP_LEVEL_KEYS)})"
            raise GraphError(message, doc.ref((key,)))
    if "nodes" not in data:
        raise GraphError("missing `nodes` (a list of {id, op, ...})", doc.ref())
    name = data.get("name", name_from_path(Path(doc.name).stem))
    if not isinstance(name, str) or not name:
        message = f"`name` must be a non-empty string, got {_describe(name)}"
        raise GraphError(message, doc.ref(("name",)))
    if not is_plain(name):
        raise GraphError(f"'{printable(name)}' {NOT_PLAIN_NAME}", doc.ref(("name",)))
    for key in ("nodes", "edges"):
        if not isinstance(data.get(key, []), list):
            message = f"`{key}` must be a list, got {_describe(data[key])}"
            raise GraphError(message, doc.ref((key,)))
    return name, data["nodes"], data.get("edges", [])


def _node_fields(doc: Document, i: int, raw: Any) -> dict[str, Any]:
    """Check one node mapping; return the fields of its Node."""
    if type(raw) is dict:  # fast path: attribute values are left to Node's own validation
        node_id, op = raw.get("id"), raw.get("op")
        node_id = str(node_id) if type(node_id) is int else node_id
        if type(node_id) is str and node_id and type(op) is str and canonical_op(op):
            attrs = dict(raw)
            del attrs["id"], attrs["op"]
            return {"id": node_id, "op": op, "attrs": attrs}
    return _checked_node_fields(doc, i, raw)


def _checked_node_fields(doc: Document, i: int, raw: Any) -> dict[str, Any]:
    """The slow path of `_node_fields`: every check, with a precise error."""
    path: KeyPath = ("nodes", i)
    if not isinstance(raw, dict):
        message = f"a node must be a mapping with `id` and `op`, got {_describe(raw)}"
        raise GraphError(message, doc.ref(path))
    if "id" not in raw:
        raise GraphError("node has no `id`", doc.ref(path))
    node_id = _as_id(raw["id"])
    if node_id is None:
        message = f"node `id` must be a non-empty string or an integer, got {_describe(raw['id'])}"
        raise GraphError(message, doc.ref((*path, "id")))
    if "op" not in raw:
        raise GraphError(f"node {shown_value(node_id)} has no `op`", doc.ref(path))
    op = raw["op"]
    if not isinstance(op, str) or not canonical_op(op):
        got = (
            f"{shown_value(op)}, which names no op" if isinstance(op, str) and op else _describe(op)
        )
        message = f"node {shown_value(node_id)}: `op` must be a non-empty string, got {got}"
        raise GraphError(message, doc.ref((*path, "op")))
    attrs = {k: v for k, v in raw.items() if k not in ("id", "op")}
    for key, value in attrs.items():
        if not _is_attr_value(value):
            message = (
                f"node {shown_value(node_id)}: attribute {shown_value(key)} must be a finite "
                f"number, a string or a boolean, got {_describe(value)}"
            )
            raise GraphError(message, doc.ref((*path, key)))
    return {"id": node_id, "op": op, "attrs": attrs}


def _is_attr_value(value: Any) -> bool:
    kind = type(value)
    if kind is str or kind is bool:
        return True
    if kind is int:
        return abs(value) <= _INT_MAX
    return kind is float and is_finite_number(value)


def _edge(doc: Document, j: int, raw: Any) -> tuple[str, str]:
    """Check one edge, `[from, to]` or `{from: a, to: b}`; return its two ids."""
    if type(raw) is list and len(raw) == 2:  # fast path for the common, valid edge
        a, b = raw
        a = str(a) if type(a) is int else a
        b = str(b) if type(b) is int else b
        if type(a) is str and type(b) is str and a and b:
            return a, b
    keys: tuple[str | int, str | int]
    if isinstance(raw, list) and len(raw) == 2:
        keys = (0, 1)
    elif isinstance(raw, dict) and sorted(raw) == ["from", "to"]:
        keys = ("from", "to")
    else:
        shape = "a 2-item list [from, to] or a mapping {from: ..., to: ...}"
        raise GraphError(f"an edge must be {shape}, got {_describe(raw)}", doc.ref(("edges", j)))
    ends = [_as_id(raw[key]) for key in keys]
    for key, node_id in zip(keys, ends, strict=True):
        if node_id is None:
            got = _describe(raw[key])
            message = f"an edge end must be a node id (a non-empty string or an integer), got {got}"
            raise GraphError(message, doc.ref(("edges", j, key)))
    return ends[0], ends[1]  # type: ignore[return-value]


def _as_id(value: Any) -> str | None:
    """A node id: a non-empty string, or an integer turned into its string; else None."""
    if type(value) is str:
        return value or None
    if type(value) is int:
        return str(value)
    return None


def _describe(value: Any) -> str:
    """A short description of a wrong value for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return f"a mapping (keys: {', '.join(value)})" if value else "an empty mapping"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, int) and abs(value) > _INT_MAX:
        return f"an integer of {len(str(abs(value)))} digits, too large for a float"
    if isinstance(value, str):
        return "an empty string" if not value else f"a string ({shown_value(value)})"
    return f"a number ({value!r})"
