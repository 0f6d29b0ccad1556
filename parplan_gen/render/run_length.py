"""How long the rendered files train and when they save, as canonical facts (render/facts.py
calls `run_facts`): the budget's steps and checkpoint interval (`plan --tokens`, plan.json
`budget`) and the SLURM time limit's exit (plan.json `launch.slurm_time`).

- `budget.steps`: the budget's optimizer steps (Megatron-LM --train-iters, torchtitan
  --training.steps; the LR schedule already spans them: render/lr_schedule.py `steps`);
- `budget.checkpoint_interval_steps`: the budget's checkpoint interval (Young 1974, seconds) in
  steps of the plan's predicted step time, rounded down so that no interval is longer than the
  budget's, at least 1 (Megatron-LM --save-interval, torchtitan --checkpoint.interval);
- `launch.exit_duration_mins`: Megatron-LM's --exit-duration-in-mins (megatron/training/
  training.py checks it after every step, from the program's start, saves and exits): the SLURM
  time limit less what saving needs, the step that runs when it is checked and the checkpoint
  write that blocks training (the budget's, where the plan has one), rounded up to minutes, plus
  the mapping's reserve (templates/mapping.yaml `slurm.exit_reserve_minutes`, with its source).

`budget.none` is True for a plan without a budget. Every other fact is None where it does not
apply (no budget, no time limit): the mapping writes no
argument for it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from parplan_gen.cost.launch_site import SLURM_FLAGS, SLURM_TIME_PATTERN
from parplan_gen.inputs.safe_text import printable
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.checks import RenderError
from parplan_gen.render.mapping_schema import SlurmMapping
from parplan_gen.render.shell_quote import name_word

# Unit definitions (not figures).
SECONDS_PER_MINUTE = 60
MINUTES_PER_HOUR = 60
HOURS_PER_DAY = 24

FACT_NAMES = (
    "budget.none",
    "budget.steps",
    "budget.checkpoint_interval_steps",
    "launch.time_limited",
    "launch.exit_duration_mins",
)

# sbatch(1) --time: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
# "days-hours:minutes" and "days-hours:minutes:seconds" (cost/launch_site.py
# SLURM_TIME_PATTERN accepts exactly these).
_DAYS = re.compile(r"^([0-9]+)-([0-9]+)(?::([0-9]+))?(?::([0-9]+))?$")


def slurm_minutes(text: str) -> float:
    """sbatch --time `text` in minutes (sbatch(1): a value without days is minutes,
    minutes:seconds or hours:minutes:seconds; with days, days-hours[:minutes[:seconds]]); a
    RenderError for any other text (a plan.json edited by hand: LaunchSettings refuses it)."""
    name_word(text, "--time")  # the sbatch directive's own refusal, first
    if not re.fullmatch(SLURM_TIME_PATTERN, text):
        raise RenderError(f"--time '{printable(text)}': expected {SLURM_FLAGS['time'][1]}")
    days = _DAYS.fullmatch(text)
    if days:
        d, h, m, s = (int(g) if g else 0 for g in days.groups())
        return (d * HOURS_PER_DAY + h) * MINUTES_PER_HOUR + m + s / SECONDS_PER_MINUTE
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        return float(parts[0])
    if len(parts) == 2:
        return parts[0] + parts[1] / SECONDS_PER_MINUTE
    h, m, s = parts
    return h * MINUTES_PER_HOUR + m + s / SECONDS_PER_MINUTE


def run_facts(doc: PlanDocument, slurm: SlurmMapping) -> dict[str, Any]:
    """The keys of FACT_NAMES for `doc` (None where the plan has no budget / time limit)."""
    budget = doc.budget
    interval = max(1, math.floor(budget.checkpoint_interval_s / budget.step_s)) if budget else None
    time = doc.launch.slurm_time if doc.launch else None
    return {
        "budget.none": budget is None,
        "budget.steps": budget.steps if budget else None,
        "budget.checkpoint_interval_steps": interval,
        "launch.time_limited": time is not None,
        "launch.exit_duration_mins": None if time is None else exit_minutes(doc, time, slurm),
    }


def exit_minutes(doc: PlanDocument, time: str, slurm: SlurmMapping) -> int:
    """--exit-duration-in-mins for the SLURM time limit `time`; a RenderError when the limit
    leaves no whole minute to train."""
    budget = doc.budget
    blocking = 0.0
    if budget is not None:
        blocking = (
            budget.checkpoint_blocking_s
            if budget.checkpoint_blocking_s is not None
            else budget.checkpoint_write_s
        )
    save_s = doc.chosen.time.step_s + blocking
    reserve = slurm.exit_reserve_minutes.value + math.ceil(save_s / SECONDS_PER_MINUTE)
    minutes = math.floor(slurm_minutes(time)) - reserve
    if minutes < 1:
        raise RenderError(
            f"--slurm-time {time}: leaves no minute to train before the {reserve} minutes kept "
            f"to finish a step and save ({slurm.exit_reserve_minutes.value} reserved + one "
            f"{doc.chosen.time.step_s:.1f} s step + a {blocking:.0f} s checkpoint write); give "
            "a longer time limit"
        )
    return minutes
