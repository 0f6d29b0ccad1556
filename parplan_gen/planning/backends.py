"""The backends the planner searches, by name (docs/backends.md).

Each backend is a folder of `parplan_gen/backends/`; its `capabilities.py` declares a
`Capabilities`: which layout dimensions and which optimizer sharding the framework runs, and the
release its constraints follow. The constraints themselves are rules (the folder's
`constraints.yaml`, each `backend: <name>`, with the framework source that enforces it); its
files are its templates and mapping section, read back by its reader. A new backend is a new
folder there and a line here.
"""

from __future__ import annotations

from parplan_gen.backends.accelerate.capabilities import ACCELERATE
from parplan_gen.backends.capabilities import Capabilities
from parplan_gen.backends.ddp.capabilities import DDP
from parplan_gen.backends.deepspeed.capabilities import DEEPSPEED
from parplan_gen.backends.megatron.capabilities import MEGATRON
from parplan_gen.backends.torchtitan.capabilities import TORCHTITAN

BACKENDS: dict[str, Capabilities] = {
    b.name: b for b in (MEGATRON, DEEPSPEED, DDP, TORCHTITAN, ACCELERATE)
}

__all__ = ["BACKENDS", "Capabilities"]
