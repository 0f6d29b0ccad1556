"""How a transformer's layers are placed on its pipeline stages: the one home of the split.

The constraint `pipeline.layers_split` (rules/constraints/layout.yaml) checks it through the
formula function `pipeline_split_ok`, and megatron_args.sh spells it
(--decoder-first/last-pipeline-num-layers, --account-for-embedding/loss-in-pipeline-split,
--num-layers-per-virtual-pipeline-stage), both by calling `pipeline_split`, so that a plan the
rules accept is the plan the files describe.

The first of these that works, in this order (Megatron-LM core_r0.13, unchanged in core 0.16):
1. An even split, when pp * vpp divides the layers.
2. Uneven first and last stages (--decoder-first/last-pipeline-num-layers; Llama 3 Sec. 3.3.2
   put 126 layers on 16 stages this way): every middle stage gets the rounded-up share, a
   multiple of vpp, and the first and last stages share what is left, each a positive multiple
   of vpp and no more than a middle stage, the first the larger half (the last also computes
   the logits and the loss). transformer_config.py __post_init__
   (num_layers_in_first/last_pipeline_stage: middle layers divisible by the middle stages,
   every stage by the virtual stages).
3. The embedding and the loss counted as one layer each of the split
   (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split): both,
   else the loss alone, else the embedding alone, when the layers plus those divide by pp * vpp.
   Every virtual stage then holds the same share, and the first (last) virtual stage builds one
   transformer layer less, possibly none: 126 layers + 2 on pp 16 x vpp 8 is one per virtual
   stage. transformer_config.py __post_init__ ((layers + accounted) divisible by pp, and its
   share per rank by vpp; refused together with uneven first/last stages) and
   transformer_block.py get_num_layers_to_build ("Not enough layers in the first virtual
   pipeline stage" only below zero).
"""

from __future__ import annotations

from typing import NamedTuple

# (embedding, loss) counted in the split, in the order tried (the loss, an output GEMM over the
# vocabulary and the softmax, outweighs the embedding lookup).
ACCOUNTING: tuple[tuple[bool, bool], ...] = ((True, True), (False, True), (True, False))


class PipelineSplit(NamedTuple):
    """Transformer layers on the (first, each middle, last) pipeline stage, and what the first
    and last stages count besides them."""

    first: int
    middle: int
    last: int
    embedding: bool = False  # the embedding counts as one layer of the split
    loss: bool = False  # the loss (LM head) counts as one layer of the split

    @property
    def uneven(self) -> bool:
        """First/last stages set apart (--decoder-first/last-pipeline-num-layers)."""
        accounted = self.embedding or self.loss
        return not accounted and not self.first == self.middle == self.last

    @property
    def share(self) -> int:
        """The layers of a middle stage, and so of every stage when the split is even or counts
        the embedding/loss: what --num-layers-per-virtual-pipeline-stage divides."""
        return self.middle


def pipeline_split(layers: int, pp: int, vpp: int = 1) -> PipelineSplit:
    """The split of `layers` over pp x vpp stages (module docstring); ValueError when none."""
    stages = pp * vpp
    if layers % stages == 0:
        return PipelineSplit(*(layers // pp,) * 3)
    uneven = _uneven(layers, pp, vpp)
    if uneven is not None:
        return uneven
    for embedding, loss in ACCOUNTING if pp > 1 else ():
        counted = layers + embedding + loss
        if counted % stages == 0:
            share = counted // pp
            return PipelineSplit(share - embedding, share, share - loss, embedding, loss)
    raise ValueError(f"{layers} layers do not split over pp({pp}) x vpp({vpp}) stages")


def _uneven(layers: int, pp: int, vpp: int) -> PipelineSplit | None:
    middle = vpp * -(-layers // (pp * vpp))
    edge = layers - middle * (pp - 2)
    last = vpp * (edge // (2 * vpp))
    first = edge - last
    if pp < 2 or last < vpp or first % vpp or first > middle:
        return None
    return PipelineSplit(first, middle, last)


def stage_layers(layers: int, pp: int, vpp: int = 1) -> tuple[int, int, int]:
    """Transformer layers on the (first, each middle, last) pipeline stage; ValueError when
    impossible."""
    split = pipeline_split(layers, pp, vpp)
    return split.first, split.middle, split.last


def pipeline_split_ok(layers: float, pp: float, vpp: float) -> bool:
    """Whether `layers` split over pp x vpp stages (`pipeline_split` finds a split): the formula
    function the rules call. Any argument that is not a whole number >= 1 gives False."""
    if not all(_whole(x) and x >= 1 for x in (layers, pp, vpp)):
        return False
    try:
        pipeline_split(int(layers), int(pp), int(vpp))
    except ValueError:
        return False
    return True


def _whole(x: float) -> bool:
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


# Its declaration as the formula function of rules/cost/pipeline.yaml (rules/vocabulary.py).
SIGNATURE = "pipeline_slowest_stage(layers, pp, vpp, rank_s, head_s, embedding_s, loss_s)"
DOC = "Slowest pipeline rank's time (models/pipeline_split.py slowest_stage)."


def slowest_stage(
    layers: float,
    pp: float,
    vpp: float,
    rank_s: float,
    head_s: float,
    embedding_s: float,
    loss_s: float,
) -> float:
    """Time of the slowest pipeline rank, the formula function `pipeline_slowest_stage` of
    rules/cost/pipeline.yaml. `rank_s` is the average rank's time, which carries 1/pp of the LM
    head's `head_s`; without it, it is layers / pp transformer layers. Each rank runs its layers
    of the split `pipeline_split` picks (layers / pp each where none exists, a plan the
    constraint refuses); the first adds `embedding_s`, the last `head_s + loss_s`."""
    pp = max(pp, 1)
    layer_s = (rank_s - head_s / pp) / (layers / pp)
    if pp == 1:
        return rank_s + embedding_s + loss_s
    shares: tuple[float, float, float]
    if pipeline_split_ok(layers, pp, vpp):
        shares = stage_layers(int(layers), int(pp), int(vpp))
    else:
        shares = (layers / pp,) * 3
    first, middle, last = shares
    stages = [first * layer_s + embedding_s, last * layer_s + head_s + loss_s]
    if pp > 2:
        stages.append(middle * layer_s)
    return max(stages)


# The formula function of rules/cost/memory.yaml (rules/vocabulary.py).
PEAK_SIGNATURE = "pipeline_peak_layers(layers, pp, vpp, micro_batches)"
PEAK_DOC = (
    "Transformer-layer forwards the most loaded rank of Megatron-LM's pipeline schedule holds "
    "at once (models/pipeline_split.py peak_layers)."
)


def peak_layers(layers: float, pp: float, vpp: float, micro_batches: float) -> float:
    """The transformer-layer forwards whose activations the most loaded pipeline rank holds at
    once under Megatron-LM's schedules (core_v0.16.0 pipeline_parallel/schedules.py
    get_pp_rank_microbatches): rank r runs its warm-up forwards and one more before its first
    backward, p - r - 1 + 1 micro-batches without interleaving, and 2 (p - r - 1) + (v - 1) p + 1
    model chunks with it, never more than the step has (m, or m v chunks). Each holds the
    rank's layers of the split `pipeline_split` picks (an interleaved chunk its average), so
    with an even split rank 0 holds Korthikanti et al. 2022's Eq. 5 (L, interleaved
    L (1 + (p - 1) / (p v))), and a rank after it may hold more when the first rank has fewer
    layers. A split that does not exist (a plan the constraint refuses) counts layers / pp each.
    With one stage: one micro-batch's layers."""
    stages, chunks = max(int(pp), 1), max(int(vpp), 1)
    held_micro = max(int(micro_batches), 1)
    if stages == 1:
        return float(layers)
    if pipeline_split_ok(layers, stages, chunks):
        first, middle, last = stage_layers(int(layers), stages, chunks)
    else:
        first = middle = last = layers / stages  # type: ignore[assignment]
    # in-flight falls with the rank and the middle ranks hold equal layers: ranks 0, 1, p - 1
    ranks = {0: first, 1: last if stages == 2 else middle, stages - 1: last}
    peak = 0.0
    for rank, held in ranks.items():
        if chunks > 1:
            in_flight = min(
                2 * (stages - rank - 1) + (chunks - 1) * stages + 1, held_micro * chunks
            )
            peak = max(peak, in_flight * held / chunks)
        else:
            peak = max(peak, float(min(stages - rank, held_micro) * held))
    return peak
