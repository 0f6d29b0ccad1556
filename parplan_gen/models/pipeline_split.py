"""How a transformer's layers are placed on its pipeline stages: the one home of the split.

The constraint `pipeline.layers_split` (rules/constraints/megatron.yaml) checks it through the
formula function `pipeline_split_ok`, and megatron_args.sh spells it
(--decoder-first/last-pipeline-num-layers, --num-layers-per-virtual-pipeline-stage), both by
calling `stage_layers`, so that a plan the rules accept is the plan the files describe.

An even split when pp * vpp divides the layers. Otherwise (Megatron-LM's uneven stages; Llama 3
Sec. 3.3.2 put 126 layers on 16 stages this way) every middle stage gets the rounded-up share, a
multiple of vpp, and the first and last stages share what is left, each a positive multiple of
vpp and no more than a middle stage, the first the larger half (the last also computes the
logits and the loss). Megatron-LM transformer_config.py __post_init__
(num_layers_in_first/last_pipeline_stage: middle layers divisible by the middle stages, every
stage by the virtual stages).
"""

from __future__ import annotations


def stage_layers(layers: int, pp: int, vpp: int = 1) -> tuple[int, int, int]:
    """Layers on the (first, each middle, last) pipeline stage; ValueError when impossible."""
    if layers % (pp * vpp) == 0:
        return (layers // pp,) * 3  # type: ignore[return-value]
    middle = vpp * -(-layers // (pp * vpp))
    edge = layers - middle * (pp - 2)
    last = vpp * (edge // (2 * vpp))
    first = edge - last
    if pp < 2 or last < vpp or first % vpp or first > middle:
        raise ValueError(f"{layers} layers do not split over pp({pp}) x vpp({vpp}) stages")
    return first, middle, last


def pipeline_split_ok(layers: float, pp: float, vpp: float) -> bool:
    """Whether `layers` split over pp x vpp stages (`stage_layers` finds a split): the formula
    function the rules call. Any argument that is not a whole number >= 1 gives False."""
    if not all(_whole(x) and x >= 1 for x in (layers, pp, vpp)):
        return False
    try:
        stage_layers(int(layers), int(pp), int(vpp))
    except ValueError:
        return False
    return True


def _whole(x: float) -> bool:
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())
