"""A written plan's plan.json with some of its chosen layout's fields changed, rendered again:
how the tests reach a layout the search does not choose (the files are the renderer's, the
plan's own figures are left as they were)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def rendered_with(plan_dir: Path, out: Path, cli: Any, **changes: object) -> Path:
    """`plan_dir`'s plan.json with `changes` to `chosen.plan`, rendered into `out`."""
    doc = json.loads((plan_dir / "plan.json").read_text(encoding="utf-8"))
    doc["chosen"]["plan"] |= changes
    edited = out.with_name(out.name + ".json")
    edited.write_text(json.dumps(doc), encoding="utf-8")
    run = cli("render", edited, "--out", out)
    assert run.code == 0, run.err
    return out
