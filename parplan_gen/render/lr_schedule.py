"""The optimizer schedule a rendered script starts from: a peak learning rate scaled to the model
by GPT-3's Table 2.1 and the rest of GPT-3's Appendix B, or the model's own published schedule
where its paper gives one (parplan_gen/data/lr_schedule.yaml, where every figure names its
source). `schedule(params, name)` answers for a model of `params` parameters (per token, for an
MoE model) named `name` in the catalog; `steps(s, tokens_per_step, budget_steps)` gives the
optimizer steps a DeepSpeed or torchtitan schedule spans."""

from __future__ import annotations

import math
from functools import cache
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parplan_gen.inputs.source import read_package_data
from parplan_gen.inputs.validation import validate

DATA_FILE = "lr_schedule.yaml"


class Published(BaseModel):
    """One model's published schedule (lr_schedule.yaml `published`): what it gives replaces
    the rule's figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    lr: float = Field(gt=0, lt=1)
    min_lr: float | None = Field(None, gt=0, lt=1)
    warmup_of_decay: tuple[float, float] | None = None
    decay_tokens: float | None = Field(None, gt=0)
    adam_eps: float | None = Field(None, gt=0, lt=1)
    weight_decay: float | None = Field(None, ge=0, lt=1)

    @model_validator(mode="after")
    def _consistent(self) -> Published:
        if self.min_lr is not None and self.min_lr >= self.lr:
            raise ValueError("min_lr must be below lr")
        if self.warmup_of_decay is not None:
            warmup, decay = self.warmup_of_decay
            if not 0 < warmup < decay:
                raise ValueError("warmup_of_decay: 0 < warmup < decay")
        return self


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
    published: dict[str, Published] = Field(default_factory=dict)

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
    decay_tokens: float = Field(description="Tokens the decay spans when no budget says.")
    adam_eps: float = Field(description="Adam epsilon.")
    weight_decay: float = Field(description="Decoupled weight decay.")
    published: str | None = Field(description="The published schedule's source (None: GPT-3).")
    rule: ScheduleRule

    @property
    def min_lr_fraction(self) -> float:
        """The final rate as a share of the peak (DeepSpeed cos_min_ratio, torchtitan
        min_lr_factor)."""
        return self.min_lr / self.lr


@cache
def schedule_rule() -> ScheduleRule:
    doc = read_package_data(DATA_FILE)
    return validate(ScheduleRule, doc.data, doc)


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


def schedule(params: int, name: str = "") -> Schedule:
    """The schedule of the model `name` with `params` parameters (per token for an MoE model):
    its published one where lr_schedule.yaml has it, each figure it lacks from GPT-3's rule."""
    rule = schedule_rule()
    own = rule.published.get(name)
    lr = own.lr if own else peak_lr(params, rule)
    warmup = own.warmup_of_decay if own and own.warmup_of_decay else None
    return Schedule(
        params=params,
        lr=lr,
        min_lr=own.min_lr if own and own.min_lr else lr * rule.min_lr_fraction,
        warmup_fraction=warmup[0] / warmup[1] if warmup else rule.warmup_tokens / rule.decay_tokens,
        decay_tokens=own.decay_tokens if own and own.decay_tokens else rule.decay_tokens,
        adam_eps=own.adam_eps if own and own.adam_eps else rule.adam_eps,
        weight_decay=own.weight_decay
        if own and own.weight_decay is not None
        else rule.weight_decay,
        published=own.source if own else None,
        rule=rule,
    )


def steps(s: Schedule, tokens_per_step: int, budget_steps: int | None) -> tuple[int, int]:
    """(total, warmup) optimizer steps: the budget's steps when the plan has one, else the
    schedule's decay tokens / tokens per step (rounded up); the warmup is its share of them
    (at least 1, the schedulers' first step)."""
    total = budget_steps if budget_steps else math.ceil(s.decay_tokens / tokens_per_step)
    return total, max(1, round(s.warmup_fraction * total))
