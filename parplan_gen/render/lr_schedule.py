"""The optimizer schedule a rendered script starts from: a peak learning rate scaled to the model
by GPT-3's Table 2.1 and the rest of GPT-3's Appendix B (parplan_gen/data/lr_schedule.yaml,
where every figure names its source). `schedule(params)` answers for a model of `params`
parameters (per token, for an MoE model)."""

from __future__ import annotations

import math
from functools import cache
from importlib import resources
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parplan_gen.inputs.source import parse_document

DATA_FILE = "lr_schedule.yaml"


class ScheduleRule(BaseModel):
    """parplan_gen/data/lr_schedule.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    peak_lr_by_params: tuple[tuple[float, float], ...] = Field(min_length=2)
    min_lr_fraction: float = Field(gt=0, lt=1)
    decay_style: str
    warmup_tokens: float = Field(gt=0)
    decay_tokens: float = Field(gt=0)
    weight_decay: float = Field(ge=0, lt=1)
    adam_beta1: float = Field(gt=0, lt=1)
    adam_beta2: float = Field(gt=0, lt=1)
    adam_eps: float = Field(gt=0, lt=1)

    @model_validator(mode="after")
    def _ordered(self) -> ScheduleRule:
        sizes = [size for size, _ in self.peak_lr_by_params]
        if sizes != sorted(set(sizes)) or any(lr <= 0 for _, lr in self.peak_lr_by_params):
            raise ValueError("peak_lr_by_params: sizes must increase and rates be positive")
        if self.warmup_tokens >= self.decay_tokens:
            raise ValueError("warmup_tokens must be below decay_tokens")
        return self


class Schedule(BaseModel):
    """The schedule for one model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    params: int = Field(description="Parameters the peak LR was looked up for.")
    lr: float = Field(description="Peak learning rate.")
    min_lr: float = Field(description="Final learning rate.")
    warmup_fraction: float = Field(description="Warmup share of the decay (Megatron-LM).")
    rule: ScheduleRule


@cache
def schedule_rule() -> ScheduleRule:
    text = resources.files("parplan_gen").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    return ScheduleRule.model_validate(parse_document(text, f"parplan_gen/data/{DATA_FILE}").data)


def peak_lr(params: float, rule: ScheduleRule) -> float:
    """Table 2.1's rate for `params`: linear in log-log between rows, the end row outside."""
    table = rule.peak_lr_by_params
    if params <= table[0][0]:
        return table[0][1]
    for (n0, lr0), (n1, lr1) in pairwise(table):
        if params <= n1:
            t = math.log(params / n0) / math.log(n1 / n0)
            return math.exp(math.log(lr0) + t * math.log(lr1 / lr0))
    return table[-1][1]


def schedule(params: int) -> Schedule:
    """The schedule of a model with `params` parameters (per token for an MoE model)."""
    rule = schedule_rule()
    lr = peak_lr(params, rule)
    return Schedule(
        params=params,
        lr=lr,
        min_lr=lr * rule.min_lr_fraction,
        warmup_fraction=rule.warmup_tokens / rule.decay_tokens,
        rule=rule,
    )
