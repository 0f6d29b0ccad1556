"""Plain torchrun DDP (torch.nn.parallel.DistributedDataParallel): every rank holds the whole
model and its optimizer states and all-reduces the gradients; data parallelism and nothing
more. Recomputation is the training script's own (torch.utils.checkpoint), so a DDP plan has
none: a plan that needs it is another backend's."""

from __future__ import annotations

from parplan_gen.backends.capabilities import Capabilities

DDP = Capabilities(
    name="ddp",
    title="PyTorch DDP",
    version="torch 2.13",
    optimizers=((0, False),),
    tensor=False,
    pipeline=False,
    interleave=False,
    context=False,
    experts=False,
    sequence_parallel=False,
    recompute=("none",),
)
