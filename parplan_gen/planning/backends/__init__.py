"""Backends: the frameworks that run a plan, one module each (docs/backends.md).

A backend module declares a `Capabilities`: which layout dimensions and which optimizer
sharding the framework runs, and the release its constraints follow. The constraints
themselves are rules (`rules/constraints/<name>.yaml`, each `backend: <name>`, with the
framework source that enforces it); its files are its templates (`templates/<name>/`) and its
reader is `render/readers.py`. A new backend is a new module here, a YAML file and templates.
"""

from __future__ import annotations

from parplan_gen.planning.backends.capabilities import Capabilities
from parplan_gen.planning.backends.ddp import DDP
from parplan_gen.planning.backends.deepspeed import DEEPSPEED
from parplan_gen.planning.backends.megatron import MEGATRON
from parplan_gen.planning.backends.torchtitan import TORCHTITAN

BACKENDS: dict[str, Capabilities] = {b.name: b for b in (MEGATRON, DEEPSPEED, DDP, TORCHTITAN)}

__all__ = ["BACKENDS", "Capabilities"]
