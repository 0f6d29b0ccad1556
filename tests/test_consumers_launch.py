"""The rendered launcher starts a real job (issue 13, item 4, beyond parsing): launch_torchrun.sh
of a data-parallel plan runs torchrun with 2 CPU processes over gloo, and a tiny DDP training
script takes its micro-batch, gradient accumulation and clipping from the rendered
ds_config.json for two optimizer steps.

NPROC_PER_NODE and NNODES, which the launcher documents as overridable, make it 2 ranks on one
node here (the plan's 8 GPUs are not present); MASTER_ADDR/MASTER_PORT point the rendezvous at
this machine's loopback. The job runs in the torchrun launch it shares with the FSDP2 and
DeepSpeed jobs (tests/launch_support.py TORCHRUN: one start of torchrun for the three, whose
launchers must start torchrun alike), on the process group that launch initializes.
"""

from __future__ import annotations

import json

import pytest

import parplan_gen

from consumer_support import consumer
from launch_support import TORCHRUN, TorchrunJob

TRAIN = """\
import contextlib, json, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

rank, world = dist.get_rank(), dist.get_world_size()
config = json.load(open(sys.argv[1]))
mbs, accum = config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
samples = torch.zeros(1)
for step in range(2):
    for micro in range(accum):
        data = torch.Generator().manual_seed(10_000 * step + 10 * micro + rank)
        x = torch.randn(mbs, 8, generator=data)
        sync = contextlib.nullcontext() if micro == accum - 1 else model.no_sync()
        with sync:
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean() / accum
            loss.backward()
        samples += mbs
    torch.nn.utils.clip_grad_norm_(model.parameters(), config["gradient_clipping"])
    optimizer.step()
    optimizer.zero_grad()
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
replicas = [torch.zeros_like(weights) for _ in range(world)]
dist.all_gather(replicas, weights)
dist.all_reduce(samples)
if rank == 0:
    json.dump({"world": world, "samples": int(samples.item()),
               "replicas_equal": all(torch.equal(r, weights) for r in replicas)},
              open(sys.argv[2], "w"))
"""


def _plan(folder):
    plan = parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512)
    plan.write(folder)
    return plan


TORCHRUN.register(TorchrunJob("ddp", _plan, TRAIN, needs=("torch.distributed.run",)))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_rendered_torchrun_launcher_trains_two_cpu_ranks_over_gloo(torchrun_jobs):
    consumer("torch.distributed.run")  # torchrun
    job = torchrun_jobs("ddp")
    chosen = job.plan.document.chosen.plan
    assert (chosen.dp, chosen.tp, chosen.pp) == (8, 1, 1)  # a plan plain DDP runs
    assert job.run.returncode == 0, job.run.stderr[-3000:]
    ds = json.loads((job.folder / "ds_config.json").read_text(encoding="utf-8"))
    mbs, accum = ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]
    assert (mbs, accum) == (chosen.mbs, chosen.grad_accum)
    # 2 steps x 2 ranks x mbs x grad_accum samples, and DDP kept the replicas equal
    assert job.result == {
        "world": 2,
        "samples": 2 * 2 * mbs * accum,
        "replicas_equal": True,
    }
