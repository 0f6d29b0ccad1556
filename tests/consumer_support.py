"""What the consumer tests share: importing the real upstream packages (the `consumers` extra),
reading plan.json, and comparing what a consumer understood with the plan's layout.

Without the extra these tests skip, so that a developer without it can run the suite; CI sets
PARPLAN_REQUIRE_CONSUMERS=1 (.ci/run), which turns that skip into a failure.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REQUIRE_ENV = "PARPLAN_REQUIRE_CONSUMERS"


def consumer(module: str) -> ModuleType:
    """Import one of the real upstream packages: skip the test without it, or fail when
    PARPLAN_REQUIRE_CONSUMERS=1 says it must be there."""
    with warnings.catch_warnings():  # Megatron-Core warns that Apex/Transformer Engine are absent
        warnings.simplefilter("ignore")
        if os.environ.get(REQUIRE_ENV) == "1":
            return importlib.import_module(module)
        return pytest.importorskip(module, reason=f"{module}: pip install -e '.[consumers]'")


def plan_of(folder: Path) -> tuple[dict[str, Any], int]:
    """The chosen layout of the plan.json in `folder`, and its cluster's GPU count."""
    doc = json.loads((folder / "plan.json").read_text(encoding="utf-8"))
    return doc["chosen"]["plan"], doc["cluster"]["num_gpus"]


def model_of(folder: Path) -> dict[str, Any]:
    """The model section of the plan.json in `folder`."""
    return json.loads((folder / "plan.json").read_text(encoding="utf-8"))["model"]


def mismatches(understood: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """`field: file says X, plan says Y` for every field the consumer understood otherwise."""
    return [
        f"{field}: the consumer reads {value!r}, plan.json says {plan[field]!r}"
        for field, value in understood.items()
        if value != plan[field]
    ]


def sharding(plan: dict[str, Any]) -> str:
    """How the plan shards training state over the data-parallel ranks, in ZeRO's terms:
    Megatron-LM's distributed optimizer shards the optimizer states, as ZeRO-1 does."""
    stage = plan["zero_stage"]
    if stage == 0 and plan["distributed_optimizer"]:
        stage = 1
    return f"zero-{stage}"
