"""`parplan check`: a pre-flight check of a layout a user already has, given as flags or read
from a DeepSpeed ds_config.json, Megatron-LM arguments, a torchtitan launch line or an
Accelerate config (the
`--from-*` readers, `layout_of_args`). A thin shell over `api.check`; exit 1 after the report
when the layout does not run as given."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.common import (
    LAYOUT_SIZES,
    TRAINED_MODEL_HELP,
    add_backend_option,
    add_cluster_options,
    add_layout_options,
    add_rules_option,
    cluster_from_args,
    print_json,
)
from parplan_gen.inputs.defaults import DS_SETTINGS

if TYPE_CHECKING:
    from parplan_gen.api import CheckReport
    from parplan_gen.cost.layout import Layout
    from parplan_gen.models.kind import TrainedModel
    from parplan_gen.rules.ruleset import RuleSet

CHECK_EXAMPLE = (
    "example:\n"
    "  parplan check llama-3-70b --gpus 64 --gpu h100 --tp 8 --pp 2 --mbs 1 --global-batch 256\n"
    "  parplan check llama-3-8b --gpus 8 --gpu h100 --from-deepspeed ds_config.json\n"
    "  parplan check llama-3-70b --gpus 64 --gpu h100 --from-megatron train_args.sh\n"
    "  parplan check --gpus 8 --gpu h100 --from-megatron train_llama3_8b_h100_fp8.sh\n"
    "  parplan check llama-3-8b --gpus 16 --gpu h100 --from-accelerate accelerate_config.yaml "
    "--mbs 2 --global-batch 64"
)


def add_check_command(sub: Any) -> None:
    """Register `check` on the CLI's subparsers."""
    check = sub.add_parser(
        "check",
        help="pre-flight check of a layout you already have",
        description="Check a layout against the constraint rules, predict its memory against "
        "the GPU's and its throughput, and show a better plan if the planner finds one. "
        "Exit code 0 only when the layout runs as given; 1 when it breaks an `invalid` rule "
        "or does not fit (the report is printed all the same, the reason goes to stderr).",
        epilog=CHECK_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "model",
        metavar="MODEL",
        nargs="?",
        help=f"{TRAINED_MODEL_HELP}; with --from-megatron it may be left out: the model the "
        "script trains",
    )
    add_cluster_options(check)
    layout = add_layout_options(
        check, title="layout (flags override --from-* files)", defaults=False
    )
    layout.add_argument("--from-deepspeed", metavar="FILE", help="read a DeepSpeed ds_config.json")
    layout.add_argument("--from-megatron", metavar="FILE", help="read Megatron-LM arguments")
    layout.add_argument(
        "--from-torchtitan", metavar="FILE", help="read torchtitan 0.3 --config and overrides"
    )
    layout.add_argument(
        "--from-accelerate",
        metavar="FILE",
        help="read an Accelerate 1.16 accelerate_config.yaml (FSDP2; the batch from --mbs and "
        "--global-batch)",
    )
    add_backend_option(check, search=False)
    check.add_argument(
        "--any-backend",
        action="store_true",
        help="offer a better plan on any backend (default: on the layout's backend only)",
    )
    add_rules_option(check)
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(handler=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    from parplan_gen.api import check
    from parplan_gen.api.checks import check_model
    from parplan_gen.cli.exits import PROG
    from parplan_gen.cli.textview import write_view
    from parplan_gen.inputs.errors import UsageError
    from parplan_gen.rules.ruleset import load_rules

    if args.model is None and not args.from_megatron:  # argparse's own error, MODEL optional
        raise UsageError(f"the following arguments are required: MODEL (see '{PROG} check --help')")
    rules = load_rules(args.rules)
    spec, cluster = check_model(args.model, args.from_megatron), cluster_from_args(args)
    layout = layout_of_args(args, spec, rules, cluster.num_gpus)
    read_from = next((name for name in READ_FROM if getattr(args, f"from_{name}")), None)
    report = check(
        spec,
        cluster,
        layout,
        rules=rules,
        flash_attention=not args.no_flash_attention,
        backend=args.backend or read_from,
        any_backend=args.any_backend,
    )
    if args.json:
        print_json(report.contract())
    else:
        read, head = "", ""
        if args.from_megatron:
            model_read = args.model is None
            head = model_line(args.from_megatron, spec) + "\n" if model_read else ""
            read = megatron_line(args.from_megatron, report, model_read=model_read) + "\n"
        if args.from_torchtitan:
            read += torchtitan_line(args.from_torchtitan) + "\n"
        if args.from_accelerate:
            read += accelerate_line(args.from_accelerate, cluster.num_gpus) + "\n"
        if args.from_deepspeed:
            read += deepspeed_line(args.from_deepspeed) + "\n"
        write_view(head + check_text(report) + read)
    problem = report.problem()
    if problem is not None:  # the report is on stdout; the reason is the one-line error (exit 1)
        from parplan_gen.inputs.errors import InputError

        raise InputError(problem)
    return 0


def check_text(report: CheckReport) -> str:
    """The human view of `parplan check`."""
    from parplan_gen.cli.estimate_view import (
        backend_text,
        estimate_text,
        layout_line,
        violation_lines,
    )

    lines = [estimate_text(report.model, report.cluster, report.estimate).rstrip("\n"), ""]
    lines += violation_lines(report.violations)
    better = report.better
    if better is None and not report.planner_found:
        lines.append("Better plan: none (no layout of this request fits and meets every rule)")
    elif better is None:
        lines.append("Better plan: none (the planner's best is not faster than this layout)")
    else:
        mine, theirs = report.estimate.time.step_s, better.time.step_s
        if report.violations:  # offered because this layout breaks a rule, not for speed
            label, gain = "Plan that meets every rule", ""
        else:
            label, gain = "Better plan", f", {mine / theirs:.2f}x faster"
        shown = layout_line(better, against=report.estimate)
        lines.append(f"{label}: {backend_text(better)}: {shown} ({theirs:.3f} s per step{gain})")
    return "\n".join(lines) + "\n"


def model_line(path: str, model: TrainedModel) -> str:
    """One line on the model read from a Megatron-LM script (check without MODEL): its shape as
    the script's arguments give it, and its parameters."""
    from parplan_gen.inputs.safe_text import printable
    from parplan_gen.models.any_model import transformer_of

    spec = transformer_of(model)
    if spec is None:  # a script states a transformer (backends/megatron/model_from_script.py)
        return f"model: read from {printable(path)}: {model.title}"
    shape = [
        f"{spec.num_layers} layers",
        f"hidden {spec.hidden_size}",
        f"{spec.num_attention_heads} heads ({spec.num_kv_heads} query groups, width "
        f"{spec.head_dim})",
        f"{spec.mlp_kind} FFN {spec.ffn_hidden_size}" if spec.ffn_hidden_size else "",
        f"{spec.num_experts} experts (top {spec.experts_per_token}, FFN "
        f"{spec.moe_ffn_hidden_size}, {spec.num_moe_layers} MoE layers)"
        if spec.is_moe
        else "",
        f"{spec.norm}",
        f"{spec.position_embedding} positions {spec.max_position_embeddings}",
        f"vocabulary {spec.vocab_size}" + (" tied" if spec.tied_embeddings else " untied"),
    ]
    described = ", ".join(part for part in shape if part)
    name = printable(spec.name)
    return f"model: read from {name}: {described} ({spec.total_params() / 1e9:.2f}B params)"


def megatron_line(path: str, report: CheckReport, *, model_read: bool = False) -> str:
    """One line on what a Megatron-LM script says beside its layout: the arguments ignored (by
    name), how many were read with no effect on the estimate (by group; with `model_read`, the
    model's arguments are counted as read into the model instead), and the FP8 recipe the
    script runs where the estimate prices another (docs/backends.md, "What check reads of a
    Megatron-LM script")."""
    from parplan_gen.backends.megatron.reader import MODEL_SHAPE, megatron_arguments
    from parplan_gen.cost.layout import fp8_recipe

    read = megatron_arguments(path)
    ignored = " ".join(read.ignored) or "none"
    no_effect = dict(read.no_effect)
    model = len(no_effect.pop(MODEL_SHAPE, ())) if model_read else 0
    line = (
        f"Megatron-LM arguments beside the layout: ignored {ignored}; "
        + (f"read into the model: {model}; " if model_read else "")
        + _no_effect(no_effect)
    )
    estimate = report.estimate
    if estimate.plan.precision == "fp8" and estimate.backend is not None:
        priced = fp8_recipe(report.cluster.gpu.architecture, estimate.backend.name)
        if priced != read.fp8_recipe:
            line += f"; FP8 recipe {read.fp8_recipe} in the script, priced as {priced}"
    return line


def accelerate_line(path: str, num_gpus: int) -> str:
    """One line on what an accelerate_config.yaml says beside its layout: the keys ignored (by
    name) and how many were read with no effect on the estimate (by group; docs/backends.md,
    "What check reads of an Accelerate config")."""
    from parplan_gen.backends.accelerate.reader import accelerate_reading
    from parplan_gen.render.template_env import Templates

    read = accelerate_reading(path, Templates.at(None).mapping(), num_gpus=num_gpus)
    return _beside("Accelerate keys", read.ignored, read.no_effect)


def deepspeed_line(path: str) -> str:
    """One line on what a ds_config.json says beside its layout: the keys ignored (by name) and
    how many were read with no effect on the estimate (by group; docs/backends.md, "What check
    reads of a ds_config.json")."""
    from parplan_gen.backends.deepspeed.reader import deepspeed_reading

    read = deepspeed_reading(path).beside
    return _beside("DeepSpeed keys", read.ignored, read.no_effect)


def torchtitan_line(path: str) -> str:
    """One line on what a torchtitan launch line says beside its layout: the flags ignored (by
    name) and how many were read with no effect on the estimate (by group; docs/backends.md,
    "What check reads of a torchtitan launch line")."""
    from parplan_gen.backends.torchtitan.reader import torchtitan_flags
    from parplan_gen.render.template_env import Templates

    read = torchtitan_flags(path, Templates.at(None).mapping())
    return _beside("torchtitan flags", read.ignored, read.no_effect)


def _beside(what: str, ignored: Sequence[str], no_effect: Mapping[str, Sequence[str]]) -> str:
    """`<what> beside the layout: ignored a b; read, no effect on the estimate: ...`."""
    names = " ".join(ignored) or "none"
    return f"{what} beside the layout: ignored {names}; {_no_effect(no_effect)}"


def _no_effect(groups: Mapping[str, Sequence[str]]) -> str:
    """`read, no effect on the estimate: 5 (logging 3, data 2)`: the names a reader read with no
    effect on the estimate, counted in all and by group."""
    counts = ", ".join(f"{what} {len(names)}" for what, names in groups.items())
    total = sum(len(names) for names in groups.values())
    return f"read, no effect on the estimate: {total}" + (f" ({counts})" if counts else "")


# ---- reading existing layouts ------------------------------------------------------------------

LAYOUT_FLAGS = (*(dest for dest, _, _ in LAYOUT_SIZES), "global_batch", "seq_len")
# The backends whose file `--from-NAME` reads, in the order the first given names the backend.
READ_FROM = ("deepspeed", "megatron", "torchtitan", "accelerate")


def layout_of_args(
    args: argparse.Namespace, spec: TrainedModel, rules: RuleSet, num_gpus: int
) -> Layout:
    """The layout on `num_gpus` GPUs (render/readers.py layout_read): the defaults, then the
    --from-* files (read under the check's `rules`), then the explicit flags (which must give
    what a file leaves to them); a usage error where none gives the global batch."""
    from parplan_gen.inputs.errors import UsageError
    from parplan_gen.render.readers import layout_read

    flags = {k: getattr(args, k) for k in LAYOUT_FLAGS if getattr(args, k) is not None}
    options = (
        "recompute",
        "precision",
        "sequence_parallel",
        "offload_layers",
        "cross_entropy_fusion",
        "loss_compiled",
        "fsdp_reshard",
        "overlap_grad_reduce",
        *DS_SETTINGS,
    )
    flags.update({k: getattr(args, k) for k in options if getattr(args, k) is not None})
    if args.zero is not None:
        flags.update(zero_stage=args.zero, distributed_optimizer=False)
    if args.distributed_optimizer:
        flags.update(distributed_optimizer=True, zero_stage=0)
    return layout_read(
        spec,
        num_gpus,
        flags,
        rules,
        deepspeed=args.from_deepspeed,
        megatron=args.from_megatron,
        torchtitan=args.from_torchtitan,
        accelerate=args.from_accelerate,
        no_batch=UsageError,
    )
