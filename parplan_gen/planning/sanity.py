"""Sanity warnings on a plan or an estimate: visible lines, never errors.

Five checks, each against data with its sources (`cost.published`, the shipped
`parplan_gen/data/published_best.yaml`):
  - the sequence length is beyond the model's trained context (its `max_position_embeddings`);
  - a transformer on a GPU generation that no calibration run of the cost model ran on;
  - FP8 on a GPU generation or a model family that no published FP8 run covers;
  - the predicted MFU is above the best published run of the plan's class (GPU generation,
    model-size class, precision) by more than the file's margin, both counted on the causal
    half of the attention scores (the file's header says why);
  - context parallelism at fewer tokens per rank than the file's `context_parallel` bound: what
    the best layout without it gives (a plan's search found it), or that none fits.
plan.json keeps them (`PlanDocument.warnings`); the text views of plan, estimate and check and
plan.md show them.
"""

from __future__ import annotations

from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.published import Published, causal_fraction, load_published
from parplan_gen.models.any_model import transformer_of
from parplan_gen.models.kind import TrainedModel
from parplan_gen.models.transformer_flops import TRAIN_FLOPS_PER_FORWARD

CONTEXT_FIELD = "max_position_embeddings"


def context_warning(model: TrainedModel, seq_len: int) -> str | None:
    """(a) The sequence is longer than the model was trained on (transformers only)."""
    facts = model.facts()
    trained = facts.get(f"model.{CONTEXT_FIELD}")
    if facts.get("model.kind") != "transformer" or trained is None or seq_len <= trained:
        return None
    return (
        f"sequence length {seq_len} is beyond {model.name}'s trained context of {trained} tokens "
        f"({CONTEXT_FIELD} in its config; n_positions for GPT-2/GPT-J configs, seq_length for "
        "BLOOM): quality past it is untested unless the context is extended (e.g. RoPE scaling)"
    )


def generation_warning(model: TrainedModel, cluster: Cluster, data: Published) -> str | None:
    """(b) A transformer on a GPU generation that none of the cost model's fitting runs ran on
    (the file's `calibrated`); an op-graph model's calibration is its own (docs/benchmarks.md)."""
    generation = cluster.gpu.architecture
    if transformer_of(model) is None or generation in data.calibrated_generations:
        return None
    covered = ", ".join(sorted(data.calibrated_generations))
    return (
        f"{cluster.gpu.name} ({generation}): no calibration run of the cost model ran on a "
        f"{generation} GPU (fitted on: {covered}; {data.origin} calibrated), so its figures come "
        "from the datasheet and constants fitted on other GPUs, with no measured error; "
        "`parplan profile` measures this GPU"
    )


def fp8_warnings(
    model: TrainedModel, cluster: Cluster, precision: str, data: Published
) -> list[str]:
    """(c) FP8 on a GPU generation or a model family without published FP8 runs."""
    if precision != "fp8":
        return []
    out = []
    generation = cluster.gpu.architecture
    if generation not in data.fp8_generations:
        covered = ", ".join(sorted(data.fp8_generations))
        out.append(
            f"FP8 on {generation} GPUs: no published FP8 run calibrates the cost model there "
            f"(FP8 runs on: {covered}; {data.origin} fp8_calibrated); its FP8 figures are "
            "extrapolated"
        )
    facts = model.facts()
    family = facts.get("model.model_type")
    if facts.get("model.kind") == "transformer" and family not in data.fp8_families:
        covered = ", ".join(sorted(data.fp8_families))
        out.append(
            f"FP8 for model family {family}: no published FP8 run of the family calibrates the "
            f"cost model (FP8 runs of: {covered}; {data.origin} fp8_calibrated)"
        )
    return out


def plan_causal_mfu(model: TrainedModel, estimate: Estimate) -> float:
    """The estimate's MFU on the causal count of the attention scores (the count the sanity
    check compares, `cost.published.causal_fraction`): the plan's MFU counts the whole matrix
    (rules/cost/throughput.yaml `mfu`, model.flops_per_token). Worked from the model's values,
    it equals the rules' own `mfu_causal` figure (tests/test_mfu_convention.py), which an
    estimate of an older plan.json does not carry."""
    values = model.formula_values(estimate.plan.seq_len)
    scores = float(values["model.attention_flops_per_token"])
    causal = float(values["model.causal_attention_flops_per_token"])
    dense = float(values["model.flops_per_token"]) / TRAIN_FLOPS_PER_FORWARD - scores
    return estimate.throughput.mfu * causal_fraction(dense, scores, causal)


def mfu_warning(
    model: TrainedModel, cluster: Cluster, estimate: Estimate, data: Published
) -> str | None:
    """(d) The predicted MFU, on the causal count, is above the best published run of its class
    on the same count plus the margin (transformers only: the published runs are language-model
    runs)."""
    if transformer_of(model) is None:
        return None
    layout = estimate.plan
    params = float(model.formula_values(layout.seq_len)["model.params"])
    generation = cluster.gpu.architecture
    best = data.best_for(generation, params, model.is_moe, layout.precision)
    if best is None:
        return None
    causal = plan_causal_mfu(model, estimate)
    if causal <= best.causal_mfu + data.margin:
        return None
    size = data.size_class(params, model.is_moe)
    published = f"{best.mfu:.1%} as published" + (
        ", causal"
        if best.attention == "causal"
        else f", {best.causal_mfu:.1%} causal"
        + (" from its tokens/s" if best.attention == "tokens" else "")
    )
    return (
        f"predicted MFU {estimate.throughput.mfu:.1%} ({causal:.1%} counting the causal half of "
        f"the attention scores) is above the best published {generation} {size} "
        f"{layout.precision.upper()} run ({published}; {best.run}: {best.source}) by more than "
        f"{data.margin * 100:g} points: the prediction is likely optimistic"
    )


def short_context_warning(
    estimate: Estimate, data: Published, searched: bool, without_cp: Estimate | None
) -> str | None:
    """(e) Context parallelism below the file's tokens per rank: where a search that allowed
    cp 1 chose the plan (`searched`), what the best layout without it gives (`without_cp`;
    None: none fits)."""
    layout = estimate.plan
    tokens = layout.seq_len // layout.cp
    if layout.cp == 1 or tokens >= data.cp_min_tokens:
        return None
    said = (
        f"context parallelism (cp {layout.cp}) at {tokens:,} tokens per rank, below the "
        f"{data.cp_min_tokens:,}-token sequences it is meant for ({data.cp_source}): "
    )
    if not searched:
        return said + (
            "a search that allows cp 1 (`parplan plan` without a cp pin) compares it with the "
            "best layout without it"
        )
    if without_cp is None:
        return said + "no layout without it fits in memory"
    step, other, best = estimate.time.step_s, without_cp.time.step_s, without_cp.plan
    needs = "" if best.recompute == "none" else f", with {best.recompute} recomputation"
    sizes = f"dp {best.dp} tp {best.tp} pp {best.pp}"
    return said + (
        f"the best layout without it ({sizes}) takes {other:.3g} s per step{needs} "
        f"({other / step - 1:+.0%} against {step:.3g} s), so the planner keeps it"
    )


def sanity_warnings(
    model: TrainedModel,
    cluster: Cluster,
    estimate: Estimate,
    *,
    searched: bool = False,
    without_cp: Estimate | None = None,
) -> list[str]:
    """Every sanity warning on `estimate` of `model` on `cluster`, in the order above;
    `searched`: the chosen layout of a plan whose search allowed cp 1, `without_cp` that
    search's best layout with cp 1."""
    data = load_published()
    layout = estimate.plan
    found = [context_warning(model, layout.seq_len), generation_warning(model, cluster, data)]
    found += fp8_warnings(model, cluster, layout.precision, data)
    found.append(mfu_warning(model, cluster, estimate, data))
    found.append(short_context_warning(estimate, data, searched, without_cp))
    return [w for w in found if w is not None]
