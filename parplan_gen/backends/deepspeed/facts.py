"""The deepspeed.* canonical facts of a plan (render/facts.py calls `deepspeed_facts`): how
DeepSpeed spells the layout in ds_config.json (mapping.yaml beside this file). The type
gradients are reduced in is what the plan's rules decided (plan.json's `decisions`).
"""

from __future__ import annotations

from typing import Any

from parplan_gen.cost.layout import Layout
from parplan_gen.inputs.defaults import ZERO_FULL
from parplan_gen.planning.decisions import BackendDecisions


def deepspeed_facts(layout: Layout, decided: BackendDecisions | None) -> dict[str, Any]:
    """deepspeed.* for `layout` (`decided`: what the plan's rules decided for DeepSpeed's files,
    None where it does not run the layout)."""
    # Written only for a layout DeepSpeed runs (plan_files.backend_runs): its ZeRO stage as is.
    stage = layout.zero_stage
    return {
        "deepspeed.zero_stage": stage,
        "deepspeed.zero": stage > 0,
        "deepspeed.zero_below_3": 0 < stage < ZERO_FULL,
        "deepspeed.zero_3": stage == ZERO_FULL,
        # the type the plan's rules reduce gradients in (grad_bytes, planning/decisions.py)
        "deepspeed.communication_data_type": decided.grad_reduce_dtype if decided else None,
        # PipelineModule activation_checkpoint_interval: 1 checkpoints every layer, 0 none.
        "deepspeed.pipeline_checkpoint_interval": int(layout.recompute == "full"),
        "deepspeed.fp8": layout.precision == "fp8",
    }
