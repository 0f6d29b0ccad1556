"""Command-line pieces shared by several subcommands: cluster, batch and layout options (each
flag defined once here), JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.arg_types import (
    cpu_count_type,
    element_count_type,
    gpu_hour_price_type,
    headroom_type,
    offload_layers,
    positive_float,
    positive_int,
    size_type,
    switch,
    token_count_type,
    zero_stage,
)
from parplan_gen.inputs.defaults import (
    BOUNDED_SIZES,
    DEFAULT_SEQ_LEN,
    DS_DEFAULTS,
    DS_SETTINGS,
    ZERO_STAGES,
)
from parplan_gen.inputs.errors import UsageError
from parplan_gen.models.kind import ANY_BACKEND, BACKEND_NAMES

if TYPE_CHECKING:
    from parplan_gen.cost.hardware import Cluster, ClusterSetup
    from parplan_gen.cost.layout import Layout

PRECISIONS = ("bf16", "fp16", "fp8")
RECOMPUTE = ("none", "selective", "full")
# Layout.cross_entropy_fusion's values (cost/layout.py CrossEntropyFusion; not imported here, so
# that the CLI starts without pydantic's models)
CROSS_ENTROPY_FUSIONS = ("off", "native", "te")
RESHARD_POLICIES = ("default", "never")  # Layout.fsdp_reshard's values (cost/layout.py FsdpReshard)
# The layout's sizes as flags (each a size of layout.SIZE_LIMITS): dest, help, default.
LAYOUT_SIZES: tuple[tuple[str, str, int | None], ...] = (
    ("tp", "tensor-parallel size (default 1)", 1),
    ("pp", "pipeline-parallel size (default 1)", 1),
    ("dp", "data-parallel size (default: GPUs / (tp*pp*cp))", None),
    ("cp", "context-parallel size (default 1)", 1),
    ("ep", "expert-parallel size (default 1)", 1),
    ("etp", "expert-tensor-parallel size, Megatron-LM only (default: tp)", None),
    ("vpp", "model chunks per pipeline rank, interleaved schedule when > 1 (default 1)", 1),
    ("mbs", "micro-batch size (default 1)", 1),
)


def print_json(payload: Any) -> None:
    """Print a JSON document for `--json` (indented: these outputs are small)."""
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def add_rules_option(parser: argparse.ArgumentParser) -> None:
    """--rules DIR (repeatable)."""
    parser.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="DIR",
        help="layer a directory of rule files over the built-in rules (repeatable; "
        "a later directory overrides by rule id)",
    )


TRAINED_MODEL_HELP = (
    "preset name (parplan models), Hugging Face config.json, graph file (.yaml/.json) or .onnx"
)


def add_micro_batch_option(parser: argparse.ArgumentParser) -> None:
    """--micro-batch N: the batch an ONNX model's dynamic batch dimension is bound to."""
    parser.add_argument(
        "--micro-batch",
        type=size_type("mbs"),
        default=1,
        metavar="N",
        help="bind an ONNX model's dynamic batch dimension to N samples, so that node FLOPs and "
        "sizes are those of one micro-batch (default 1; other models carry their own sizes)",
    )


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """--cluster FILE, or --gpus N --gpu NAME [--gpus-per-node G] [--nvlink-domain D]
    [--inter-node-gbps X]."""
    group = parser.add_argument_group("cluster (a file, or the flags)")
    group.add_argument("--cluster", metavar="FILE", help="cluster file (docs/clusters.md)")
    group.add_argument("--gpus", type=positive_int, metavar="N", help="number of GPUs")
    group.add_argument("--gpu", metavar="NAME", help="GPU name from the catalog, e.g. h100")
    group.add_argument(
        "--gpus-per-node",
        type=positive_int,
        default=None,
        metavar="G",
        help="GPUs per node, as the launcher counts them (default: the GPU's reference "
        "system, 8; GB200/GB300 compute trays: 4)",
    )
    group.add_argument(
        "--nvlink-domain",
        type=positive_int,
        default=None,
        metavar="D",
        help="GPUs on one NVLink fabric, a multiple of --gpus-per-node (default: the GPU's "
        "reference system, GB200/GB300 NVL72: 72; else one node)",
    )
    group.add_argument(
        "--inter-node-gbps",
        type=positive_float,
        default=None,
        metavar="X",
        help="network bandwidth per GPU, Gb/s one direction (default: the GPU's reference system)",
    )


SITE_FLAGS = ("account", "partition", "time", "cpus_per_node")  # ClusterSetup.with_slurm keywords


def add_slurm_options(parser: argparse.ArgumentParser) -> None:
    """--slurm-account A --slurm-partition P --slurm-time T --cpus-per-node C: written into
    launch_slurm.sbatch (they replace the cluster file's `slurm:` and `cpus_per_node` values;
    docs/clusters.md)."""
    group = parser.add_argument_group("SLURM (launch_slurm.sbatch; default: the cluster file's)")
    group.add_argument(
        "--cpus-per-node",
        type=cpu_count_type,
        metavar="C",
        help="CPUs SLURM counts on a node: sbatch --cpus-per-task is C x the share of the "
        "node's GPUs used (default: the cluster file's cpus_per_node, else the GPU's "
        "reference system, else 1 per GPU)",
    )
    group.add_argument("--slurm-account", metavar="A", help="sbatch --account")
    group.add_argument(
        "--slurm-partition", metavar="P", help="sbatch --partition (a comma-separated list)"
    )
    group.add_argument(
        "--slurm-time", metavar="T", help="sbatch --time, e.g. 48:00:00 or 2-00:00:00"
    )


def add_batch_options(
    group: argparse._ArgumentGroup, *, require_batch: bool = True, defaults: bool = True
) -> None:
    """--global-batch B [--seq-len S] [--precision P] [--no-flash-attention]: what a plan, an
    estimate and a check share. `defaults=False` leaves --precision None when not given (for
    `check`, whose --from-* files may set it)."""
    group.add_argument(
        "--global-batch",
        type=size_type("global_batch"),
        required=require_batch,
        default=None,
        metavar="B",
        help="sequences (samples) per optimizer step",
    )
    group.add_argument(
        "--seq-len",
        type=size_type("seq_len"),
        default=None,
        metavar="S",
        help=f"tokens per sequence (default {DEFAULT_SEQ_LEN}; graph models have none)",
    )
    _add_choice(group, "--precision", PRECISIONS, defaults=defaults)
    group.add_argument(
        "--no-flash-attention", action="store_true", help="attention scores are stored"
    )


def _add_choice(
    group: argparse._ArgumentGroup, flag: str, choices: tuple[str, ...], *, defaults: bool
) -> None:
    """A flag with `choices`, whose default is the first (None with `defaults=False`)."""
    default = choices[0] if defaults else None
    group.add_argument(flag, choices=choices, default=default, help=f"(default {choices[0]})")


def add_layout_options(
    parser: argparse.ArgumentParser,
    *,
    title: str = "layout",
    defaults: bool = True,
    batch: bool = True,
) -> argparse._ArgumentGroup:
    """--tp --pp [--dp --cp --ep --vpp] --mbs, the batch options and the memory options.

    `defaults=False` (`check`, and `plan`'s pins) makes every default None and --global-batch
    optional, so that a flag that was not given can be told apart and filled from a --from-*
    file (or searched); the defaults are then applied by the caller. `batch=False` leaves the
    batch options out (`plan` has its own). Returns the group, for more options."""
    group = parser.add_argument_group(title)

    def shown(what: str) -> str:  # plan's pins have no default: the field is searched
        return what if batch else what.split(" (default")[0] + " (default: searched)"

    for dest, what, default in LAYOUT_SIZES:
        group.add_argument(
            "--" + dest,
            type=size_type(dest),
            default=default if defaults else None,
            help=shown(what),
        )
    if batch:
        add_batch_options(group, require_batch=defaults, defaults=defaults)
    zero = group.add_mutually_exclusive_group()
    zero.add_argument(
        "--zero",
        type=zero_stage,
        choices=ZERO_STAGES,
        default=0 if defaults else None,
        help=shown("ZeRO stage (default 0)"),
    )
    zero.add_argument(
        "--distributed-optimizer",
        action="store_true",
        default=False if defaults else None,
        help="Megatron's distributed optimizer",
    )
    if batch:
        _add_choice(group, "--recompute", RECOMPUTE, defaults=defaults)
    else:
        group.add_argument("--recompute", choices=RECOMPUTE, help=shown("recomputation"))
    sequence = group.add_mutually_exclusive_group()  # both at once: a usage error
    sequence.add_argument(
        "--sequence-parallel",
        action="store_true",
        default=False if defaults else None,
        help="sequence parallelism on (tp > 1)",
    )
    sequence.add_argument(
        "--no-sequence-parallel",
        dest="sequence_parallel",
        action="store_false",
        help="sequence parallelism off",
    )
    group.add_argument(
        "--offload-layers",
        type=offload_layers,
        default=0 if defaults else None,
        metavar="N",
        help=shown(
            "layers whose activations are offloaded to host memory (Megatron-LM "
            "--cpu-offloading-num-layers; default 0)"
        ),
    )
    if batch:  # not a pin: every Megatron plan writes Transformer Engine's
        group.add_argument(
            "--cross-entropy-fusion",
            choices=CROSS_ENTROPY_FUSIONS,
            help="Megatron-LM's loss kernel: off (its own, Megatron-LM's default), native "
            "(--cross-entropy-loss-fusion) or te (with --cross-entropy-fusion-impl te); "
            "default: te on Megatron-LM, as plans write it",
        )
        group.add_argument(
            "--fsdp-reshard",
            choices=RESHARD_POLICIES,
            help="FSDP2's reshard policy (torchtitan, Accelerate; with --zero 3): default, the "
            "backend's own, or never (every block stays gathered from its forward to its "
            "backward, skipping the backward's all-gather); default: default",
        )
        group.add_argument(
            "--overlap-grad-reduce",
            type=switch,
            metavar="{on,off}",
            help="the data-parallel gradient reduction overlapped with the backward (Megatron-LM "
            "--overlap-grad-reduce, DeepSpeed overlap_comm): off reduces after the backward, on "
            "the backends with the switch (Megatron-LM's DDP and distributed optimizer, "
            "DeepSpeed ZeRO 1-3); default: on",
        )
        for field, ds_default in DS_DEFAULTS.items():  # Layout.ds_*, --ds-...
            what = field.removeprefix("ds_").replace("_", " ")
            written = f"{ds_default:.0e}".replace("e+0", "e")  # 5e7, as DeepSpeed's docs write it
            group.add_argument(
                "--" + field.replace("_", "-"),
                type=element_count_type,
                metavar="N",
                help=f"DeepSpeed ZeRO's {what}, elements (5e8 or 500000000; DeepSpeed only, "
                f"docs/backends.md); default: DeepSpeed's, {written}",
            )
        group.add_argument(
            "--loss-compiled",
            type=switch,
            metavar="{on,off}",
            help="torchtitan computes the loss with torch.compile (--compile.enable, loss in "
            "--compile.components): on or off; default: on on torchtitan, as plans write it",
        )
    return group


# Sizes `plan` bounds with --min-<size> / --max-<size>, in the order of the layout flags.
BOUNDED_FLAGS = tuple(dest for dest, _, _ in LAYOUT_SIZES if dest in BOUNDED_SIZES)


def add_bound_options(parser: argparse.ArgumentParser) -> None:
    """--min-<size> / --max-<size> for every bounded size (`plan`)."""
    group = parser.add_argument_group("bounds (inclusive; the rest of the space is searched)")
    for dest in BOUNDED_FLAGS:
        for side in ("min", "max"):
            group.add_argument(
                f"--{side}-{dest}",
                type=size_type(dest),
                default=None,
                metavar="N",
                help=f"{dest} {'>=' if side == 'min' else '<='} N",
            )


SEARCH_FLAGS = (  # `plan`'s search options: flag, choices, help
    ("--interleave", ("search", "off"), "search layouts with vpp > 1 or not (default: search)"),
    (
        "--sequence-parallel-with-tp",
        ("search", "on", "off"),
        "sequence parallelism on layouts with tp > 1: tried both ways, always on or off "
        "(default: on); --sequence-parallel / --no-sequence-parallel pin the layout field",
    ),
    (
        "--overlap-grad-reduce",
        ("on", "off"),
        "overlap the data-parallel gradient reduction with the backward in the files "
        "(Megatron-LM --overlap-grad-reduce, DeepSpeed overlap_comm; default: on; off searches "
        "only Megatron-LM's DDP and distributed optimizer and DeepSpeed ZeRO 1-3)",
    ),
    (
        "--grad-reduce-dtype",
        ("default", "bf16", "search"),
        "the type gradients are reduced in: each backend's own, bf16 (Megatron-LM "
        "--grad-reduce-in-bf16, DeepSpeed communication_data_type) where the backend can, or "
        "both (default: default)",
    ),
    (
        "--fp8-param-gather",
        ("off", "on", "search"),
        "FP8 parameters (Megatron-LM --fp8-param-gather; with --precision fp8 and the "
        "distributed optimizer): off, on, or both (default: off)",
    ),
    (
        "--precision-aware-optimizer",
        ("off", "on", "search"),
        "Adam's moments in bf16 (Megatron-LM --use-precision-aware-optimizer --exp-avg-dtype "
        "bf16 --exp-avg-sq-dtype bf16; with the distributed optimizer): off, on, or both "
        "(default: off)",
    ),
    (
        "--activation-offload",
        ("off", "search"),
        "offload some layers' activations to host memory (Megatron-LM "
        "--cpu-offloading-num-layers; pp 1, no recomputation): off, or try each whole 1/8 of the "
        "layers (rule search_activation_offload_parts; default: off); --offload-layers N pins "
        "the count",
    ),
    (
        "--fsdp-reshard",
        ("default", "never", "search"),
        "FSDP2's reshard policy on torchtitan's and Accelerate's FSDP2 layouts: the backend's "
        "own, never (every block stays gathered from its forward to its backward, skipping the "
        "backward's all-gathers), or both (default: search)",
    ),
)


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """`plan`'s search options, defaults from rules/search/defaults.yaml."""
    group = parser.add_argument_group("search options (defaults: rules/search/defaults.yaml)")
    for flag, choices, text in SEARCH_FLAGS:
        group.add_argument(flag, choices=choices, help=text)


def search_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The search options given (`plan(search=...)`), each read from its flag
    (`search_choices.FLAGS`)."""
    from parplan_gen.planning.search_choices import FLAGS

    given = {name: getattr(args, flag[2:].replace("-", "_")) for name, flag in FLAGS.items()}
    if given["overlap_grad_reduce"] is not None:
        given["overlap_grad_reduce"] = given["overlap_grad_reduce"] == "on"
    return {k: v for k, v in given.items() if v is not None}


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    """`plan`'s --headroom, --tokens, --days and --gpu-hour-price."""
    group = parser.add_argument_group("memory headroom and training budget")
    group.add_argument(
        "--headroom",
        type=headroom_type,
        metavar="GIB|PCT|default",
        help="memory kept free per GPU: GiB (4) or a share of the GPU's memory (10%%); default "
        "(also: 'default'): the rule memory_headroom_share_default (rules/constraints/"
        "headroom.yaml), a share of each layout's tensors; 0 keeps none",
    )
    group.add_argument(
        "--tokens",
        type=token_count_type,
        metavar="N",
        help="tokens to train (15T, 300B, 2e12): time to train, GPU-hours, interruptions, "
        "checkpoint interval and, with a price, cost (rules/budget/budget.yaml)",
    )
    group.add_argument(
        "--days",
        type=positive_float,
        metavar="D",
        help=(
            "with --tokens: plan on the whole nodes that train N tokens in D days: the "
            "cheapest count tried with a price, else the fewest"
        ),
    )
    group.add_argument(
        "--gpu-hour-price",
        type=gpu_hour_price_type,
        metavar="X",
        help="price of one GPU-hour (default: the cluster file's gpu_hour_price, else no cost)",
    )


def pins_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The layout flags given, as Layout fields (`--zero` -> zero_stage)."""
    pins = {dest: getattr(args, dest) for dest, _, _ in LAYOUT_SIZES}
    pins.update(zero_stage=args.zero, recompute=args.recompute)
    pins.update(sequence_parallel=args.sequence_parallel)
    pins.update(distributed_optimizer=args.distributed_optimizer)
    pins.update(offload_layers=args.offload_layers)
    return {k: v for k, v in pins.items() if v is not None}


def bounds_from_args(args: argparse.Namespace) -> dict[str, int]:
    """The --min-*/--max-* flags given."""
    names = (f"{side}_{dest}" for dest in BOUNDED_FLAGS for side in ("min", "max"))
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def layout_from_args(args: argparse.Namespace, world_size: int, seq_len: int) -> Layout:
    """The Layout the layout options (with their defaults) describe; LayoutError with the
    equation if impossible."""
    from parplan_gen.cost.layout import build_layout

    return build_layout(
        world_size,
        **{dest: getattr(args, dest) for dest, _, _ in LAYOUT_SIZES},
        global_batch=args.global_batch,
        seq_len=seq_len,
        zero_stage=args.zero,
        distributed_optimizer=args.distributed_optimizer,
        sequence_parallel=args.sequence_parallel,
        recompute=args.recompute,
        offload_layers=args.offload_layers,
        cross_entropy_fusion=args.cross_entropy_fusion,
        loss_compiled=args.loss_compiled,
        **({} if args.fsdp_reshard is None else {"fsdp_reshard": args.fsdp_reshard}),
        **(
            {}
            if args.overlap_grad_reduce is None
            else {"overlap_grad_reduce": args.overlap_grad_reduce}
        ),
        **{f: getattr(args, f) for f in DS_SETTINGS if getattr(args, f) is not None},
        precision=args.precision,
    )


def cluster_from_args(args: argparse.Namespace) -> Cluster:
    """The hardware the options describe; a usage error when they are incomplete or mixed."""
    return setup_from_args(args).cluster


def setup_from_args(args: argparse.Namespace) -> ClusterSetup:
    """The hardware, launch site (with the SLURM flags) and budget inputs the options describe;
    a usage error when they are incomplete or mixed."""
    from parplan_gen.cost.hardware import ClusterSetup, cluster_from_flags, load_cluster_file

    flags = [
        f
        for f in ("gpus", "gpu", "gpus_per_node", "nvlink_domain", "inter_node_gbps")
        if getattr(args, f) is not None
    ]
    slurm = site_from_args(args)
    if args.cluster:
        if flags:
            shown = ", ".join("--" + f.replace("_", "-") for f in flags)
            raise UsageError(f"--cluster cannot be combined with {shown}")
        return load_cluster_file(args.cluster).with_slurm(**slurm)
    if args.gpus is None or args.gpu is None:
        raise UsageError("give --cluster FILE, or both --gpus N and --gpu NAME")
    hardware = cluster_from_flags(
        args.gpus,
        args.gpu,
        gpus_per_node=args.gpus_per_node,
        inter_node_gbps=args.inter_node_gbps,
        nvlink_domain=args.nvlink_domain,
    )
    return ClusterSetup(cluster=hardware).with_slurm(**slurm)


def site_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The SLURM flags as `ClusterSetup.with_slurm` keywords (None where not given, or where the
    command has no such flag)."""
    return {k: getattr(args, k if k == "cpus_per_node" else f"slurm_{k}", None) for k in SITE_FLAGS}


BACKEND_CHOICES = (ANY_BACKEND, *BACKEND_NAMES)  # --backend: any, then each backend by name
BACKEND_LIST = ", ".join(BACKEND_NAMES)  # every help string names the backends from here


def add_backend_option(parser: argparse.ArgumentParser | Any, *, search: bool) -> None:
    """`--backend NAME`: with `search` (plan), repeatable, each restricting the search to what
    that backend runs (default any); else (estimate, check) the one backend whose rules judge
    the layout (default: the first that runs it)."""
    if search:
        parser.add_argument(
            "--backend",
            choices=BACKEND_CHOICES,
            action="append",
            metavar="NAME",
            help=f"search only what this backend runs: {BACKEND_LIST} (repeatable; "
            "default any: every backend that trains the model; docs/backends.md)",
        )
        return
    parser.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        metavar="NAME",
        help=f"the backend you run ({BACKEND_LIST}) whose rules judge the layout; "
        "default: the one a --from-* file is for, else the first that runs it",
    )
