"""The model's own training settings and the optimizer schedule as canonical facts (render/facts.py
calls `training_facts`): megatron.* spellings of the config's RoPE base and scaling, norm
epsilon, dropout, router and multi-token prediction (models/training_settings.py, read from the
config with parplan_gen/data/hf_training.yaml), and train.* for the schedule
(render/lr_schedule.py: GPT-3's Table 2.1 and Appendix B, or the model's own published schedule),
with the optimizer steps a DeepSpeed or torchtitan schedule spans (the plan's budget, else the
schedule's decay tokens over the plan's tokens per step). Megatron-LM's own rules, each from
megatron/training/arguments.py (core_r0.13.0 and core_v0.16.1):
- --rotary-base is an int;
- --use-rope-scaling is Llama 3.1's scaling, with low/high frequency factors 1 and 4 and an
  original context of 8192 fixed (core/models/common/embeddings/rotary_pos_embedding.py
  _apply_scaling), and factor 8: pretrain_gpt.py (gpt_builders.py in core_v0.16.1) passes
  GPTModel no --rope-scaling-factor, whose default is 8.0 (core/models/gpt/gpt_model.py). Only
  a config with those is spelled so; any other scaling is a note;
- an MLA model takes YaRN by default (MLATransformerConfig rope_type "yarn", with
  original_max_position_embeddings 4096, beta_fast 32 and beta_slow 1, which have no flag), but
  arguments.py's own defaults --rotary-scaling-factor 1.0 and --mscale-all-dim 1.0 replace the
  config class's factor: a YaRN config with those three is spelled --rotary-scaling-factor,
  --mscale and --mscale-all-dim, any other is a note;
- validate_args refuses multi-token prediction with context parallelism;
- TransformerConfig accepts --moe-router-enable-expert-bias only with the sigmoid score.

The router, by Megatron-Core 0.16.1's own code (megatron/core/transformer/moe/moe_utils.py
`topk_routing_with_score_function`, which router.py TopKRouter.routing calls): a softmax score
takes the top k of the logits and a softmax over those k (the weights sum to 1: the HF models'
norm_topk_prob), or with --moe-router-pre-softmax a softmax over all experts before the top k
(not renormalised: norm_topk_prob false); TransformerConfig.__post_init__ refuses the former at
k = 1 ("Please use --moe-router-pre-softmax when topk is 1"). A sigmoid score is renormalised
whenever k > 1, never at k = 1, whatever the flags. --moe-router-topk-scaling-factor multiplies
the weights after that. `group_limited_topk` ranks a group by the sum of its best
k / --moe-router-group-topk scores. What of the config's routing Megatron-Core cannot compute is
`megatron.router_unfaithful`, a note in the script's header.
"""

from __future__ import annotations

from typing import Any

from parplan_gen.cost.catalog import GIGA
from parplan_gen.cost.layout import Layout
from parplan_gen.models.any_model import transformer_of
from parplan_gen.models.kind import TrainedModel
from parplan_gen.render.lr_schedule import schedule, steps

LLAMA3_SCALING = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}  # _apply_scaling defaults
LLAMA3_ORIGINAL_CONTEXT = 8192  # _apply_scaling original_max_position_embeddings
LLAMA3_FACTOR = 8.0  # GPTModel's rope_scaling_factor default, the one pretrain_gpt.py leaves
# MLATransformerConfig's YaRN settings that no argument sets (core_r0.13.0 and core_v0.16.1)
MLA_YARN_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}

FACT_NAMES = (
    "megatron.rotary_base",
    "megatron.rotary_percent",
    "megatron.rope_scaling",
    "megatron.rope_scaling_factor",
    "megatron.rope_scaling_other",
    "megatron.yarn_factor",
    "megatron.yarn_mscale",
    "megatron.yarn_mscale_all_dim",
    "megatron.norm_epsilon",
    "megatron.attention_dropout",
    "megatron.hidden_dropout",
    "megatron.router_score",
    "megatron.expert_bias",
    "megatron.aux_loss_coeff",
    "megatron.aux_loss_unsaid",
    "megatron.load_balancing",
    "megatron.router_pre_softmax",
    "megatron.router_unfaithful",
    "megatron.topk_scale",
    "megatron.router_groups",
    "megatron.router_group_topk",
    "megatron.mtp_layers",
    "megatron.mtp_unpriced",
    "megatron.mtp_with_cp",
    "train.lr",
    "train.min_lr",
    "train.lr_warmup_fraction",
    "train.lr_decay_style",
    "train.weight_decay",
    "train.adam_beta1",
    "train.adam_beta2",
    "train.adam_eps",
    "train.lr_params_b",
    "train.peak_lr",
    "train.min_lr_fraction",
    "train.adam_betas",
    "train.total_steps",
    "train.warmup_steps",
    "train.steps_basis",
    "train.lr_gpt3",
    "train.lr_published",
)


ROUTER_FACTS = ("megatron.router_pre_softmax", "megatron.router_unfaithful")


def training_facts(
    model: TrainedModel, layout: Layout, budget_steps: int | None = None
) -> dict[str, Any]:
    """The keys of FACT_NAMES for a transformer (every one None for an op-graph model);
    `budget_steps`: the optimizer steps of the plan's budget (`plan --tokens`), if it has one."""
    spec = transformer_of(model)
    if spec is None:
        return dict.fromkeys(FACT_NAMES)
    return _model_settings(spec, layout) | _schedule(model, layout, budget_steps)


def _model_settings(model: Any, layout: Layout) -> dict[str, Any]:
    t, moe = model.training, model.is_moe
    scaling = t.rope_scaling
    llama3 = scaling is not None and scaling.kind == "llama3" and _megatron_llama3(scaling)
    yarn = scaling is not None and model.uses_mla and scaling.kind == "yarn" and _fixed(scaling)
    theta = t.rope_theta
    mtp = t.mtp_layers if t.mtp_layers and layout.cp == 1 else None
    return {
        "megatron.rotary_base": int(theta) if theta is not None else None,
        "megatron.rotary_percent": t.rope_fraction if t.rope_fraction not in (None, 1.0) else None,
        "megatron.rope_scaling": llama3,
        "megatron.rope_scaling_factor": scaling.factor if llama3 and scaling else None,
        "megatron.rope_scaling_other": None if scaling is None or llama3 or yarn else scaling.kind,
        "megatron.yarn_factor": scaling.factor if yarn and scaling else None,
        "megatron.yarn_mscale": scaling.mscale if yarn and scaling else None,
        "megatron.yarn_mscale_all_dim": scaling.mscale_all_dim if yarn and scaling else None,
        "megatron.norm_epsilon": t.norm_eps,
        "megatron.attention_dropout": t.attention_dropout,
        "megatron.hidden_dropout": t.hidden_dropout,
        "megatron.router_score": t.router_score if moe else None,
        "megatron.expert_bias": moe and t.expert_bias and t.router_score == "sigmoid",
        "megatron.aux_loss_coeff": t.aux_loss_coeff if moe else None,
        "megatron.aux_loss_unsaid": moe and t.aux_loss_coeff is None,
        "megatron.load_balancing": "seq_aux_loss" if moe and t.seq_aux else None,
        **(_router(model) if moe else dict.fromkeys(ROUTER_FACTS)),
        "megatron.topk_scale": t.topk_scale if moe else None,
        "megatron.router_groups": t.router_groups if moe and t.router_group_topk else None,
        "megatron.router_group_topk": t.router_group_topk if moe and t.router_groups else None,
        "megatron.mtp_layers": mtp,
        "megatron.mtp_unpriced": mtp is not None,
        "megatron.mtp_with_cp": bool(t.mtp_layers) and layout.cp > 1,
    }


def _router(model: Any) -> dict[str, Any]:
    """--moe-router-pre-softmax, and what of the config's routing Megatron-Core computes
    otherwise (None: nothing; the module's docstring gives Megatron-Core's rules)."""
    t, k = model.training, model.experts_per_token
    softmax, norm = t.router_score != "sigmoid", t.topk_norm
    differs: list[str] = []
    if softmax and norm and k == 1:  # TransformerConfig: pre-softmax at top-1
        differs.append(
            "the config weighs its one expert 1.0 (renormalised); Megatron-Core "
            "needs --moe-router-pre-softmax at top-1 and weighs it by its softmax"
        )
    if not softmax and norm is not None and norm != (k > 1):
        said = "renormalises" if norm else "does not renormalise"
        differs.append(
            f"the config {said} the top-{k} sigmoid weights; Megatron-Core "
            f"renormalises them {'only when k > 1' if norm else 'whenever k > 1'}"
        )
    groups, rank = t.router_group_topk, t.group_score_experts
    if t.router_groups and groups and rank and k // groups != rank:
        differs.append(
            f"the config ranks a group by its best {rank} expert score(s); "
            f"Megatron-Core by the sum of its best {k} // {groups} = {k // groups}"
        )
    return {
        "megatron.router_pre_softmax": softmax and (norm is False or k == 1),
        "megatron.router_unfaithful": "; ".join(differs) or None,
    }


def _megatron_llama3(scaling: Any) -> bool:
    fixed = all(getattr(scaling, k) in (None, v) for k, v in LLAMA3_SCALING.items())
    original = scaling.original_max_position_embeddings
    return fixed and original in (None, LLAMA3_ORIGINAL_CONTEXT) and scaling.factor == LLAMA3_FACTOR


def _fixed(scaling: Any) -> bool:
    """The YaRN settings Megatron-LM cannot set are MLATransformerConfig's (or not given)."""
    return all(getattr(scaling, k) in (None, v) for k, v in MLA_YARN_FIXED.items())


def _schedule(model: Any, layout: Layout, budget_steps: int | None) -> dict[str, Any]:
    params = model.active_params() if model.is_moe else model.total_params()
    s = schedule(params, model.name)
    total, warmup = steps(s, layout.global_batch * layout.seq_len, budget_steps)
    lr, min_lr = f"{s.lr:.2e}", f"{s.min_lr:.2e}"
    return {
        "train.lr": lr,
        "train.min_lr": min_lr,
        "train.lr_warmup_fraction": round(s.warmup_fraction, 6),
        "train.lr_decay_style": s.rule.decay_style,
        "train.weight_decay": s.weight_decay,
        "train.adam_beta1": s.rule.adam_beta1,
        "train.adam_beta2": s.rule.adam_beta2,
        "train.adam_eps": s.adam_eps,
        "train.lr_params_b": f"{params / GIGA:.2f}",
        # The same rates as numbers (ds_config.json, torchtitan), as Megatron-LM reads LR/MIN_LR.
        "train.peak_lr": float(lr),
        "train.min_lr_fraction": round(float(min_lr) / float(lr), 6),
        "train.adam_betas": [s.rule.adam_beta1, s.rule.adam_beta2],
        "train.total_steps": total,
        "train.warmup_steps": warmup,
        "train.steps_basis": "the budget's tokens"
        if budget_steps
        else f"the schedule's decay of {s.decay_tokens / GIGA:g}B tokens",
        "train.lr_gpt3": s.published is None,
        "train.lr_published": s.published,
    }
