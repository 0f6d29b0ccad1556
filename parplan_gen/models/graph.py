"""The model graph: nodes with canonical ops and attributes, edges, and exact statistics.

Owns the immutable `ModelGraph` and the native graph file (YAML or JSON): every check on a node
(`graph_node.Node`) and an edge of a file, with errors at its file:line. `build_graph` is the one
way to make a graph, whoever reads it (importers call it too); the checks on its structure
(duplicates, dangling edges, cycles) and its levels and sums are in `graph_dag`. The networkx
view is built only when someone asks for it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import networkx as nx

from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import GraphError, did_you_mean, shown_value
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.safe_text import NOT_PLAIN_NAME, is_plain, name_from_path, printable
from parplan_gen.inputs.source import Document, gc_paused, is_finite_number, load_document
from parplan_gen.models.graph_dag import GraphLayout, GraphStats, Locator, check_and_index
from parplan_gen.models.graph_node import MAX_ATTR_INT, Node, canonical_op

# A native graph or model file: 16 MiB holds ~200,000 nodes with their sizes (~80 bytes each
# as JSON), which load in ~2 s and ~300 MB. Loading is linear, ~6 us and ~850 bytes a node
# (2 million bare nodes, 63 MB: ~11 s, 1.7 GB): raise the limit for such graphs.
MAX_GRAPH_BYTES = 16 * MIB
TOP_LEVEL_KEYS = ("name", "nodes", "edges")


# Nodes of a file are checked a chunk at a time: a node's structure first, then the attribute
# values of the whole chunk (as the Node model would check them), so that the fields of one
# chunk only are alive at a time, and an error is the first in the chunk in that order.
_CHUNK = 4096
_NEW_NODE = object.__new__
_SET_ID, _SET_OP, _SET_ATTRS = (Node.__dict__[key].__set__ for key in ("id", "op", "attrs"))


def _checked_node(node_id: str, op: str, attrs: dict[str, Any]) -> Node:
    """A Node of fields already checked as the model checks them (`op` canonical and interned),
    made without validating them again (~6x faster: 0.03 s for 100,000 nodes, not 0.18 s)."""
    node = _NEW_NODE(Node)
    _SET_ID(node, node_id)
    _SET_OP(node, op)
    _SET_ATTRS(node, attrs)
    return node


class ModelGraph:
    """An immutable, validated DAG of nodes in file order. Build it with `build_graph`."""

    __slots__ = ("_digraph", "_layout", "edges", "name", "nodes", "stats")

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]
    stats: GraphStats
    _layout: GraphLayout
    _digraph: nx.DiGraph | None  # built on first use

    def __init__(
        self,
        name: str,
        nodes: tuple[Node, ...],
        edges: tuple[tuple[str, str], ...],
        layout: GraphLayout,
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

        digraph = self._digraph
        if digraph is None:
            digraph = nx.DiGraph(name=self.name)
            digraph.add_nodes_from((n.id, {"node": n}) for n in self.nodes)
            digraph.add_edges_from(self.edges)
            nx.freeze(digraph)  # freezes it in place
            object.__setattr__(self, "_digraph", digraph)
        return digraph


def build_graph(
    name: str,
    nodes: Sequence[Node],
    edges: Sequence[tuple[str, str]],
    *,
    doc: Document | None = None,
) -> ModelGraph:
    """Check and index a graph; errors point into `doc` when given (node i at `nodes[i]`)."""
    node_tuple, edge_tuple = tuple(nodes), tuple(edges)
    layout, stats = check_and_index(node_tuple, edge_tuple, Locator(doc))
    return ModelGraph(name, node_tuple, edge_tuple, layout, stats)


# --- the native file -------------------------------------------------------------------------


def load_graph(path: str | Path) -> ModelGraph:
    """Read a native graph file (`.json`, or YAML otherwise)."""
    with gc_paused():
        return graph_from_document(load_document(path, max_bytes=MAX_GRAPH_BYTES))


def graph_from_document(doc: Document) -> ModelGraph:
    """Build the graph a parsed native graph document describes."""
    name, nodes, edges = graph_parts(doc)
    return build_graph(name, nodes, edges, doc=doc)


def graph_parts(doc: Document) -> tuple[str, list[Node], list[tuple[str, str]]]:
    """The name, checked nodes and edge ends of a native graph document: what `build_graph`
    takes. Every edge is checked before the nodes, as they are listed."""
    name, raw_nodes, raw_edges = _top_level(doc)
    edges = _edges(doc, raw_edges)
    return name, _nodes(doc, raw_nodes), edges


def _nodes(doc: Document, raw_nodes: list[Any]) -> list[Node]:
    """The Nodes of the raw node mappings, checked a chunk at a time (see `_CHUNK`)."""
    nodes: list[Node] = []
    for start in range(0, len(raw_nodes), _CHUNK):
        chunk = raw_nodes[start : start + _CHUNK]
        fields = [_node_fields(doc, start + k, raw) for k, raw in enumerate(chunk)]
        values = chain.from_iterable(attrs.values() for _, _, attrs in fields)
        if not all(map(_is_attr_value, values)):  # find the first, precisely
            for k, raw in enumerate(chunk):
                _checked_node_fields(doc, start + k, raw)
        nodes += [_checked_node(*node) for node in fields]
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


def _node_fields(doc: Document, i: int, raw: Any) -> tuple[str, str, dict[str, Any]]:
    """Check one node mapping but for its attribute values; return its id, canonical op
    (interned: a graph has few ops, one string each) and attributes."""
    if type(raw) is dict:  # fast path for the common, valid node
        node_id, op = raw.get("id"), raw.get("op")
        node_id = str(node_id) if type(node_id) is int else node_id
        if type(node_id) is str and node_id and type(op) is str and canonical_op(op):
            attrs = dict(raw)
            del attrs["id"], attrs["op"]
            return node_id, sys.intern(canonical_op(op)), attrs
    fields = _checked_node_fields(doc, i, raw)
    return fields["id"], sys.intern(canonical_op(fields["op"])), fields["attrs"]


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
        return abs(value) <= MAX_ATTR_INT
    return kind is float and is_finite_number(value)


def _edges(doc: Document, raw_edges: list[Any]) -> list[tuple[str, str]]:
    """The two ids of every edge, in file order."""
    edges: list[tuple[str, str]] = []
    for j, raw in enumerate(raw_edges):
        if type(raw) is list and len(raw) == 2:  # fast path for the common, valid edge
            a, b = raw
            if type(a) is str and type(b) is str and a and b:
                edges.append((a, b))
                continue
        edges.append(_edge(doc, j, raw))
    return edges


def _edge(doc: Document, j: int, raw: Any) -> tuple[str, str]:
    """Check one edge, `[from, to]` or `{from: a, to: b}`; return its two ids."""
    keys: tuple[str | int, str | int]
    if isinstance(raw, list) and len(raw) == 2:
        keys = (0, 1)
    elif isinstance(raw, dict) and sorted(raw) == ["from", "to"]:
        keys = ("from", "to")
    else:
        shape = "a 2-item list [from, to] or a mapping {from: ..., to: ...}"
        raise GraphError(f"an edge must be {shape}, got {_describe(raw)}", doc.ref(("edges", j)))
    ends: list[str] = []
    for key in keys:
        node_id = _as_id(raw[key])
        if node_id is None:
            got = _describe(raw[key])
            message = f"an edge end must be a node id (a non-empty string or an integer), got {got}"
            raise GraphError(message, doc.ref(("edges", j, key)))
        ends.append(node_id)
    return ends[0], ends[1]


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
    if isinstance(value, int) and abs(value) > MAX_ATTR_INT:
        return f"an integer of {len(str(abs(value)))} digits, too large for a float"
    if isinstance(value, str):
        return "an empty string" if not value else f"a string ({shown_value(value)})"
    return f"a number ({value!r})"
