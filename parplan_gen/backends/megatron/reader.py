"""Reads a Megatron-LM argument list or launch script back (`parplan check --from-megatron
FILE`): the `megatron` section of mapping.yaml beside this file read backwards
(render/mapping_inverse.py), the same entries megatron_args.sh is written from. The script is
capped in size before it is read as bash reads it (the variables it sets expanded, nothing run),
in linear time (inputs/shell_script.py); every number is parsed strictly.

`megatron_arguments` says what of the script the layout does not take: the arguments that
change nothing the estimate prices (unpriced_arguments.yaml beside this file, and the model's
shape, which is MODEL's), the ones ignored, and the FP8 recipe the script runs.
`megatron_shape` refuses a script whose model shape (layers, hidden size, heads, FFN size,
query groups, experts) is not MODEL's: Megatron-LM builds the model the script states, so the
check would price another model than the one trained.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.backends.megatron.facts import FSDP_STRATEGIES
from parplan_gen.cost.layout import FUSED_CROSS_ENTROPY, SIZE_LIMITS
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import whole_number
from parplan_gen.inputs.shell_script import Seg, unexpanded_hint
from parplan_gen.inputs.validation import validated_file
from parplan_gen.models.transformer_shape import MAX_LAYERS
from parplan_gen.render.mapping import LoadedMapping
from parplan_gen.render.mapping_inverse import (
    ACCOUNTED_LAYERS,
    CHOICES,
    FSDP_STRATEGY,
    LAYERS_PER_VIRTUAL_STAGE,
    MEGATRON_FSDP,
    UNFILLED,
    MegatronFlag,
    argument_value,
    megatron_flags,
    read_choice,
    script_words,
)
from parplan_gen.render.template_env import Templates

if TYPE_CHECKING:
    from parplan_gen.models.kind import TrainedModel

# Switches the mapping writes from a fact the mapping's inverse does not read back
# (render/mapping_inverse.py FIELD_OF_FACT): the canonical key of their `when` -> the layout
# field and the value the switch gives it.
READ_SWITCHES: dict[str, tuple[str, Any]] = {
    "megatron.grad_reduce_in_bf16": ("grad_reduce_dtype", "bf16"),
    "plan.fp8_param_gather": ("fp8_param_gather", True),
    "plan.precision_aware_optimizer": ("precision_aware_optimizer", True),
}
# The optimizer's types (core_v0.16.1 arguments.py, "Args of precision-aware optimizer": each
# argument's choices, its default first). --main-grads-dtype bf16 keeps the gradients in bf16
# whatever the optimizer (validate_args, under --bf16: fp32 accumulation only "when
# args.main_grads_dtype == torch.float32"), as --grad-reduce-in-bf16 does; the others take
# effect with --use-precision-aware-optimizer, and a plan prices the types its files write
# (mapping.yaml beside this file, under plan.precision_aware_optimizer), the others at their
# defaults (Layout.precision_aware_optimizer).
OPTIMIZER_TYPES: dict[str, tuple[str, ...]] = {
    "--main-grads-dtype": ("fp32", "bf16"),
    "--main-params-dtype": ("fp32", "fp16"),
    "--exp-avg-dtype": ("fp32", "fp16", "bf16", "fp8"),
    "--exp-avg-sq-dtype": ("fp32", "fp16", "bf16", "fp8"),
}
PRECISION_AWARE = "plan.precision_aware_optimizer"  # the mapping's `when` of its arguments
# examples/multimodal/multimodal_args.py: required by Megatron-LM's multimodal trainer only
MULTIMODAL_FLAG = "--language-model-type"
PARAM_GATHER_FLAG = "--overlap-param-gather"  # the parameter all-gather's overlap
OVERLAP = "overlap_grad_reduce"  # the Layout field --overlap-grad-reduce sets (capabilities.py)
GRADS_TYPE = "--main-grads-dtype"
# The loss kernel (Layout.cross_entropy_fusion; core_v0.16.0 model_parallel_config.py): the switch,
# and the implementation it runs (choices native, te; default native). Without the switch
# Megatron-LM computes its own cross-entropy, whatever the implementation says
# (language_module.py compute_language_model_loss).
LOSS_FUSION_FLAG = "--cross-entropy-loss-fusion"
LOSS_IMPL_FLAG = "--cross-entropy-fusion-impl"
LOSS_IMPL_DEFAULT = "native"  # model_parallel_config.py cross_entropy_fusion_impl
FP8 = ("precision", "fp8")  # what --fp8-format sets, whatever 16-bit switch comes after it
# --fp8-recipe (arguments.py, core_r0.13 and core_v0.16.1: choices tensorwise, delayed, mxfp8,
# blockwise; default='delayed'): the recipe an FP8 script runs.
FP8_RECIPE_FLAG = "--fp8-recipe"
FP8_RECIPE_CHOICES = ("tensorwise", "delayed", "mxfp8", "blockwise")
MEGATRON_FP8_RECIPE = "delayed"
# The mapping's groups whose arguments spell the model's shape: MODEL's, not the script's.
MODEL_GROUPS = ("model shape", "mixture of experts")
MODEL_SHAPE = "model"  # the name of unpriced_arguments.yaml's group of the model's arguments
UNPRICED_FILE = Path(__file__).with_name("unpriced_arguments.yaml")
# The arguments of the mapping's MODEL_GROUPS that state the model's size, and the model value
# (TrainedModel.facts) each is written from (mapping.yaml beside this file; --ffn-hidden-size is
# the dense MLP's, megatron.ffn_hidden_size, written only where the model has one).
SHAPE_ARGUMENTS = {
    "--num-layers": "model.num_layers",
    "--hidden-size": "model.hidden_size",
    "--num-attention-heads": "model.num_attention_heads",
    "--ffn-hidden-size": "model.ffn_hidden_size",
    "--num-query-groups": "model.num_kv_heads",
    "--num-experts": "model.num_experts",
}
# --num-query-groups applies with --group-query-attention only (the mapping writes both
# `when: model.gqa`); --ffn-hidden-size is compared where the model has a dense MLP.
NEEDS_SWITCH = {"--num-query-groups": "--group-query-attention"}
DENSE_ONLY = ("--ffn-hidden-size",)


class UnpricedGroup(BaseModel):
    """One group of unpriced_arguments.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    what: str = Field(min_length=1)
    source: str = Field(min_length=1)
    args: tuple[str, ...] = Field(min_length=1)


class UnpricedArguments(BaseModel):
    """unpriced_arguments.yaml: the arguments that change nothing the estimate prices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: tuple[UnpricedGroup, ...] = Field(min_length=1)


@dataclass(frozen=True)
class ArgumentsRead:
    """What a Megatron-LM script says beside its layout: the arguments read that change nothing
    the estimate prices (the name of their group -> their names, in the script's order; the
    groups in unpriced_arguments.yaml's order), those ignored (the estimate
    assumes parplan's own defaults for them), and the FP8 recipe the script runs (its
    --fp8-recipe, else Megatron-LM's default)."""

    no_effect: Mapping[str, tuple[str, ...]]
    ignored: tuple[str, ...]
    fp8_recipe: str


def megatron_values(
    path: str | Path, num_layers: int, *, templates_dir: str | Path | None = None
) -> dict[str, Any]:
    """Layout fields set by a Megatron-LM argument list or launch script (other args ignored; a
    later argument overrides an earlier one, as Megatron-LM's argparse does)."""

    def where(line: int, flag: str = "") -> SourceRef:
        return SourceRef(str(path), line, path=flag)

    words = script_words(path)
    mapping = Templates.at(templates_dir).mapping()
    flags = _flags(mapping)
    _refuse_no_arguments(path, words, mapping, flags)
    _refuse_multimodal(path, words)
    # Without --overlap-grad-reduce Megatron-LM reduces the gradients after the backward
    # (Layout.overlap_grad_reduce; the switch sets it, _fsdp_sharding drops it for Megatron-FSDP)
    out: dict[str, Any] = {OVERLAP: False}
    # sizes whose value bash would compute ($((...)), an unset variable): the flags may give them
    unfilled: dict[str, tuple[str, SourceRef]] = {}
    fp8 = False
    for i, (word, line) in enumerate(words):
        flag = word.partition("=")[0]
        reading = flags.get(flag)
        if reading is None:
            continue
        fp8 = fp8 or reading.sets == FP8
        if reading.sets is not None and not reading.values:
            out.update([reading.sets])
            continue
        raw = argument_value(words, i)
        try:
            read = _megatron_value(flag, reading, raw, where(line), where(line, flag))
        except InputError as exc:
            if reading.field not in SIZE_LIMITS or not unexpanded_hint(raw):
                raise
            unfilled[reading.field] = (exc.message, exc.where or where(line))
            out.pop(reading.field, None)
            continue
        out.update(read)
        if reading.field is not None:  # a later value stands, as argparse takes it
            unfilled.pop(reading.field, None)
    if fp8:  # an FP8 run keeps --bf16 for the rest (arguments.py: --fp8-format with --bf16)
        out.update([FP8])
    _optimizer_types(words, out, path, _priced_optimizer_types(mapping))
    fusion = _cross_entropy_fusion(words, path)
    if fusion is not None:
        out["cross_entropy_fusion"] = fusion
    if out.get("tp", 1) == 1 and "tp" not in unfilled:  # Megatron-LM validate_args: "Disabling
        out.pop("sequence_parallel", None)  # sequence parallelism because tensor model
        # parallelism is disabled"
    _fsdp_sharding(out)
    _refuse_param_gather_alone(path, words, out)
    per_chunk = out.pop(LAYERS_PER_VIRTUAL_STAGE, None)
    counted = num_layers + sum(bool(out.pop(name, False)) for name in ACCOUNTED_LAYERS)
    if per_chunk is not None:
        if "pp" in unfilled:  # the virtual stages are the layers over pp's: a flag comes too late
            raise InputError(
                "--num-layers-per-virtual-pipeline-stage divides the layers by the pipeline "
                "size, which the script does not give as a number: write "
                "--pipeline-model-parallel-size as one",
                unfilled["pp"][1],
            )
        stages = out.get("pp", 1)
        if counted % (stages * per_chunk):
            raise InputError(
                f"--num-layers-per-virtual-pipeline-stage {per_chunk}: {counted} layers do not "
                f"divide by pp({stages}) x {per_chunk}",
                SourceRef(str(path)),
            )
        out["vpp"] = counted // (stages * per_chunk)
    return out | ({UNFILLED: unfilled} if unfilled else {})


def _refuse_no_arguments(
    path: str | Path, words: Sequence[Seg], mapping: LoadedMapping, read: Mapping[str, Any]
) -> None:
    """An InputError where no word of the script's commands is an argument the mapping writes
    (its layout's or its model's shape) or the reader takes (`read`, older spellings included):
    its Megatron-LM command is not among the commands read,
    as where the arguments reach it through a string that `bash -c`, `eval` or a heredoc runs,
    which are not expanded (inputs/shell_script.py). Pricing Megatron-LM's defaults for it would
    be a layout the script does not run."""
    written = set(read) | {
        arg.flag
        for version in mapping.data.megatron.values()
        for group in version.groups
        for arg in group.args
    }
    if not any(word.partition("=")[0] in written for word, _ in words):
        raise InputError(
            "no Megatron-LM argument is read from its commands (arguments that reach the "
            "command through a string run by bash -c or eval, or through a heredoc, are not "
            "expanded): give the argument list itself",
            SourceRef(str(path)),
        )


def _refuse_param_gather_alone(path: str | Path, words: Sequence[Seg], out: dict[str, Any]) -> None:
    """An InputError for --overlap-param-gather without --overlap-grad-reduce (outside
    Megatron-FSDP, which overlaps both whatever it is told): Megatron-LM refuses the pair
    (core_v0.16.1 arguments.py validate_args, 'Must use --overlap-param-gather with
    --overlap-grad-reduce'), so no run has it."""
    line = None if out.get(OVERLAP, True) else _flag_line(words, PARAM_GATHER_FLAG)
    if line is not None:
        raise InputError(
            "Megatron-LM refuses it without --overlap-grad-reduce (arguments.py "
            "validate_args: 'Must use --overlap-param-gather with --overlap-grad-reduce')",
            SourceRef(str(path), line, path=PARAM_GATHER_FLAG),
        )


def _refuse_multimodal(path: str | Path, words: Sequence[Seg]) -> None:
    """An InputError for a run of Megatron-LM's multimodal (LLaVA) trainer, which its required
    MULTIMODAL_FLAG names: the vision encoder, the towers it freezes (--freeze-LM, --freeze-ViT:
    no gradients or optimizer states, megatron/core/models/multimodal/llava_model.py) and its
    language model's sequence, --decoder-seq-length (--seq-length is the image tokens there,
    examples/multimodal/model.py), are not what a transformer plan prices."""
    line = _flag_line(words, MULTIMODAL_FLAG)
    if line is not None:
        raise InputError(
            "a run of Megatron-LM's multimodal trainer (examples/multimodal), whose vision "
            "encoder, frozen towers and --decoder-seq-length parplan does not price",
            SourceRef(str(path), line, path=MULTIMODAL_FLAG),
        )


def _flag_line(words: Sequence[Seg], flag: str) -> int | None:
    """The line of the script's first `flag` argument (`--flag` or `--flag=value`), or None."""
    return next((line for word, line in words if word.partition("=")[0] == flag), None)


def _megatron_value(
    flag: str, reading: MegatronFlag, raw: str, where: SourceRef, at_flag: SourceRef
) -> dict[str, Any]:
    """What one argument sets; `where` is its line, `at_flag` the line with the flag named."""
    if reading.sets is not None:  # an argument whose value names the setting (--fp8-format)
        read_choice(raw, reading.values, at_flag)
        return dict([reading.sets])
    field = reading.field
    if field is None:
        return {}
    if field in CHOICES:  # --recompute-granularity, --data-parallel-sharding-strategy
        return {field: read_choice(raw, CHOICES[field], at_flag)}
    if field not in SIZE_LIMITS and field != LAYERS_PER_VIRTUAL_STAGE:
        return {field: raw}
    try:  # layers per virtual stage: at most a model's layers
        return {field: whole_number(raw, SIZE_LIMITS.get(field, MAX_LAYERS))}
    except ValueError as exc:
        hint = unexpanded_hint(raw)
        if hint and field in SIZE_LIMITS:  # the check's flag of the field (cli/common.py)
            hint += f": give --{field.replace('_', '-')}"
        raise InputError(f"{flag}: {exc}{hint}", where) from None


def _cross_entropy_fusion(words: Sequence[Seg], path: str | Path) -> str | None:
    """The loss kernel the script names (LOSS_FUSION_FLAG, LOSS_IMPL_FLAG; the last
    implementation given, as argparse takes it): `off` with an implementation but no switch;
    None when it names neither (render/readers.py: Megatron-LM's own, `off`)."""
    fused, impl = False, None
    for i, (word, line) in enumerate(words):
        flag = word.partition("=")[0]
        if word == LOSS_FUSION_FLAG:
            fused = True
        elif flag == LOSS_IMPL_FLAG:
            where = SourceRef(str(path), line, path=flag)
            impl = read_choice(argument_value(words, i), FUSED_CROSS_ENTROPY, where)
    if fused:
        return impl or LOSS_IMPL_DEFAULT
    return None if impl is None else "off"


def _priced_optimizer_types(mapping: LoadedMapping) -> dict[str, str]:
    """The optimizer's types a plan with the precision-aware optimizer runs: those its files
    write (the mapping's arguments under PRECISION_AWARE), the others at Megatron-LM's default;
    not the gradients' (GRADS_TYPE: a layout field of its own)."""
    written = {
        arg.flag: str(arg.value)
        for version in mapping.data.megatron.values()
        for group in version.groups
        for arg in group.args
        if arg.when == PRECISION_AWARE and arg.flag in OPTIMIZER_TYPES and arg.value is not None
    }
    defaults = {f: choices[0] for f, choices in OPTIMIZER_TYPES.items() if f != GRADS_TYPE}
    return defaults | written


def _optimizer_types(
    words: Sequence[Seg], out: dict[str, Any], path: str | Path, priced: Mapping[str, str]
) -> None:
    """The layout fields the optimizer's types set (OPTIMIZER_TYPES; the last of each, as
    argparse takes it): bf16 gradients for --main-grads-dtype bf16, and with the
    precision-aware optimizer an InputError naming the argument where its types are not the
    ones a plan prices (`priced`)."""
    given: dict[str, tuple[str, SourceRef]] = {}
    for i, (word, line) in enumerate(words):
        flag = word.partition("=")[0]
        if flag in OPTIMIZER_TYPES:
            where = SourceRef(str(path), line, path=flag)
            value = read_choice(argument_value(words, i), OPTIMIZER_TYPES[flag], where)
            given[flag] = (value, where)
    if given.get(GRADS_TYPE, ("fp32",))[0] == "bf16":
        out["grad_reduce_dtype"] = "bf16"
    if not out.get("precision_aware_optimizer"):
        return
    for flag, wanted in priced.items():
        value, where = given.get(flag, (OPTIMIZER_TYPES[flag][0], SourceRef(str(path))))
        if value != wanted:
            spelled = " ".join(f"{f} {v}" for f, v in sorted(priced.items()))
            raise InputError(
                f"--use-precision-aware-optimizer with {flag} {value}: a plan prices bf16 "
                f"moments over fp32 main parameters only ({spelled})",
                where,
            )


def _fsdp_sharding(out: dict[str, Any]) -> None:
    """Megatron-FSDP's strategy as the sharding a plan names (facts.FSDP_STRATEGIES): ZeRO-2/3,
    and `optim` as the distributed optimizer, which shards the same. Without --use-megatron-fsdp
    Megatron-LM does not use the strategy (training.py get_model wraps in DDP)."""
    strategy = out.pop(FSDP_STRATEGY, "no_shard")  # one of CHOICES[FSDP_STRATEGY], as read
    if not out.pop(MEGATRON_FSDP, False):
        return
    stages = {"no_shard": 0, "optim": 1, **{v: k for k, v in FSDP_STRATEGIES.items()}}
    if stages[strategy] >= 2:
        out["zero_stage"] = stages[strategy]
        out.pop("distributed_optimizer", None)
        out.pop(OVERLAP, None)  # optim_grads(_params) overlap whatever the script says
    elif stages[strategy] == 1:
        out["distributed_optimizer"] = True


def _flags(mapping: LoadedMapping) -> dict[str, MegatronFlag]:
    """Every argument the reader takes: the mapping's inverse and READ_SWITCHES."""
    flags = megatron_flags(mapping)
    for version in mapping.data.megatron.values():
        for group in version.groups:
            for arg in group.args:
                sets = READ_SWITCHES.get(arg.when or "")
                if sets is not None and arg.key is None and arg.value is None:
                    flags.setdefault(arg.flag, MegatronFlag(sets=sets))
    return flags


@cache
def unpriced_arguments() -> UnpricedArguments:
    """unpriced_arguments.yaml beside this module, validated."""
    return validated_file(UNPRICED_FILE, UnpricedArguments)


def megatron_arguments(
    path: str | Path, *, templates_dir: str | Path | None = None
) -> ArgumentsRead:
    """What the script at `path` says beside its layout (`ArgumentsRead`): each `--name`
    argument of its commands, once, as the layout's (not listed), the model's shape (the
    mapping's MODEL_GROUPS), one of unpriced_arguments.yaml's groups, or ignored."""
    words = script_words(path)
    mapping = Templates.at(templates_dir).mapping()
    layout = set(_flags(mapping)) | {FP8_RECIPE_FLAG, LOSS_FUSION_FLAG, LOSS_IMPL_FLAG}
    layout |= set(OPTIMIZER_TYPES)
    group_of = {
        arg.flag: MODEL_SHAPE
        for version in mapping.data.megatron.values()
        for group in version.groups
        if group.title in MODEL_GROUPS
        for arg in group.args
    }
    for group in unpriced_arguments().groups:
        group_of.update(dict.fromkeys(group.args, group.name))
    no_effect: dict[str, list[str]] = {}
    ignored: list[str] = []
    recipe = MEGATRON_FP8_RECIPE
    seen: set[str] = set()
    for i, (word, line) in enumerate(words):
        flag = word.partition("=")[0]
        if flag == FP8_RECIPE_FLAG:
            where = SourceRef(str(path), line, path=flag)
            recipe = read_choice(argument_value(words, i), FP8_RECIPE_CHOICES, where)
        if len(flag) < 3 or not flag.startswith("--") or flag in seen or flag in layout:
            continue
        seen.add(flag)
        if flag in group_of:
            no_effect.setdefault(group_of[flag], []).append(flag)
        else:
            ignored.append(flag)
    order = [group.name for group in unpriced_arguments().groups]
    groups = {name: tuple(no_effect[name]) for name in order if name in no_effect}
    return ArgumentsRead(no_effect=groups, ignored=tuple(ignored), fp8_recipe=recipe)


def megatron_shape(path: str | Path, model: TrainedModel) -> None:
    """An InputError where the script at `path` states a model shape (SHAPE_ARGUMENTS, the last
    of each as argparse takes it; a value that is no whole number is not compared) that is not
    `model`'s, naming both and the line of the first that differs."""
    words = script_words(path)
    said = {word.partition("=")[0] for word, _ in words}
    stated: dict[str, tuple[int, int]] = {}  # flag -> (value, line)
    for i, (word, line) in enumerate(words):
        flag = word.partition("=")[0]
        if flag not in SHAPE_ARGUMENTS or NEEDS_SWITCH.get(flag, flag) not in said:
            continue
        try:
            stated[flag] = (whole_number(argument_value(words, i), sys.maxsize, minimum=0), line)
        except ValueError:
            stated.pop(flag, None)
    facts = model.facts()
    differs = [
        (flag, value, facts[SHAPE_ARGUMENTS[flag]] or 0, line)
        for flag, (value, line) in stated.items()
        if value != (facts[SHAPE_ARGUMENTS[flag]] or 0)
        and (flag not in DENSE_ONLY or facts[SHAPE_ARGUMENTS[flag]])
    ]
    if differs:
        theirs = ", ".join(f"{flag} {value}" for flag, value, _, _ in differs)
        mine = ", ".join(f"{flag} {value}" for flag, _, value, _ in differs)
        raise InputError(
            f"the script trains another model than {model.name}: {theirs} (MODEL {model.name}: "
            f"{mine}); give the script's model as MODEL",
            SourceRef(str(path), min(line for *_, line in differs)),
        )
