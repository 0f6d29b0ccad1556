"""One node of a model graph: its id, canonical op and attributes.

`Node` is what every graph holds, whoever builds it (the native file in `graph`, the ONNX
importer, the transformer expansion); `graph_dag` checks and indexes nodes, and `graph` makes
the `ModelGraph` of them.
"""

from __future__ import annotations

import sys
from typing import Annotated

from pydantic import ConfigDict, Field, FiniteFloat, field_validator
from pydantic.dataclasses import dataclass

from parplan_gen.inputs.safe_text import printable

ALIAS_PREFIX = "Compute::"  # the seed's spelling: "Compute::MatMul" is "MatMul"
MAX_ATTR_INT = int(sys.float_info.max)  # a larger int cannot be summed into the stats
AttrValue = Annotated[int, Field(ge=-MAX_ATTR_INT, le=MAX_ATTR_INT)] | FiniteFloat | str | bool


def canonical_op(op: str) -> str:
    """The canonical op name: `Compute::MatMul` -> `MatMul`; other names are unchanged."""
    return op.removeprefix(ALIAS_PREFIX)


@dataclass(frozen=True, slots=True, config=ConfigDict(extra="forbid"))
class Node:
    """One operation of the model graph (validated when made; a file's nodes by the file's own
    checks, see `graph._checked_node`). A slotted dataclass: a graph may hold millions, and a
    node takes ~250 bytes with its attributes (a BaseModel: ~670)."""

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
