"""The torchrun command lines that run the whole profile, collectives included, with one process
per GPU: on this machine's GPUs, and on several nodes (placeholders in <ANGLE_BRACKETS> for what
only the user knows). Printed when a profile runs alone on a machine of several GPUs: one
process measures no collective.
"""

from __future__ import annotations

import shlex

from parplan_gen.profile.options import ProfileOptions

MODULE = "parplan_gen.cli.main"  # torchrun -m runs it as `python -m` does
# torchrun's static rendezvous (its default): rank 0's node and a free port, the same on every
# node; each node's own rank, 0 on the node of <HOST>.
PLACEHOLDERS = ("--nnodes=<NODES>", "--node-rank=<NODE_RANK>", "--rdzv-endpoint=<HOST>:<PORT>")


def profile_arguments(options: ProfileOptions, out: str | None) -> list[str]:
    """The `parplan profile` arguments that repeat this run's options."""
    words = ["profile"]
    if options.device != "cuda":
        words += ["--device", options.device]
    if options.quick:
        words.append("--quick")
    if options.gpu is not None:
        words += ["--gpu", options.gpu]
    if options.budget_s is not None:
        words += ["--budget-s", f"{options.budget_s:g}"]
    if out is not None:
        words += ["--out", out]
    return words


def torchrun_commands(options: ProfileOptions, out: str | None, gpus: int) -> list[str]:
    """This machine's command (all its `gpus`), then the command of each of several nodes."""
    tail = ["-m", MODULE, *profile_arguments(options, out)]
    local = ["torchrun", "--standalone", f"--nproc-per-node={gpus}", *tail]
    nodes = ["torchrun", PLACEHOLDERS[0], f"--nproc-per-node={gpus}", *PLACEHOLDERS[1:], *tail]
    return [shlex.join(local), _join_placeholders(nodes)]


def _join_placeholders(words: list[str]) -> str:
    """Like shlex.join, with the placeholders left unquoted for the user to replace."""
    return " ".join(word if word in PLACEHOLDERS else shlex.quote(word) for word in words)
