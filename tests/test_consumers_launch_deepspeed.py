"""The rendered DeepSpeed files start a real DeepSpeed engine (issue 13, item 4, beyond
parsing): launch_torchrun.sh of a DeepSpeed ZeRO-3 plan runs torchrun with 2 CPU processes, and
a tiny training script hands the rendered ds_config.json to `deepspeed.initialize` unchanged,
on DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu), for two optimizer steps.

DeepSpeed's CPU accelerator talks oneCCL when `oneccl_bindings_for_pytorch` is installed and
falls back to gloo otherwise (accelerator/cpu_accelerator.py, CPU_Accelerator.__init__); the
script asks for gloo, so nothing beyond the `consumers` extra is needed, and it turns off the
shared-memory all-reduce op that DeepSpeed would otherwise compile (C++, about a minute) before
the first collective: nothing is compiled. The plan is made for 2
GPUs so that DeepSpeed's batch assertion (train_batch_size == micro batch x accumulation x
data-parallel ranks, deepspeed/runtime/config.py _batch_assertion) holds on the 2 processes
as rendered; MASTER_ADDR/MASTER_PORT point the rendezvous at this machine's loopback.

The job runs last in the torchrun launch it shares with the DDP and FSDP2 jobs
(tests/launch_support.py TORCHRUN: one start of torchrun for the three, whose launchers must
start torchrun alike): `deepspeed.init_distributed` finds the gloo process group that launch
initialized and builds its communication backend on it (deepspeed/comm/comm.py, "The user
initialized torch.dist themselves"), and the launch tears the group down after the last job.
"""

from __future__ import annotations

import pytest

import parplan_gen

from consumer_support import consumer
from launch_support import TORCHRUN, TorchrunJob

TRAIN = """\
import json, sys
import torch, torch.distributed as dist
import deepspeed
from deepspeed.accelerator import get_accelerator

# DeepSpeed's CPU accelerator would JIT-compile its shared-memory all-reduce op here (a C++
# extension: a minute of g++ on a cold cache, deepspeed/comm/torch.py build_shm_op); gloo carries
# these 2 ranks without it. DeepSpeed keeps the probed table in the module for such edits.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)  # ZeRO refuses SGD untold (zero_allow_untested_optimizer)
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=sys.argv[1])
dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float32
mbs = engine.train_micro_batch_size_per_gpu()
samples, micro = 0, 0
while engine.global_steps < 2:
    data = torch.Generator().manual_seed(10 * micro + engine.global_rank)
    x = torch.randn(mbs, 8, generator=data).to(dtype)
    loss = ((engine(x).float() - x.float().sum(1, keepdim=True)) ** 2).mean()
    engine.backward(loss)
    engine.step()
    samples, micro = samples + mbs, micro + 1
total = torch.tensor([float(samples)])
dist.all_reduce(total)
if engine.global_rank == 0:
    json.dump({"accelerator": get_accelerator().device_name(), "world": engine.world_size,
               "zero_stage": int(engine.zero_optimization_stage()),
               "steps": engine.global_steps, "micro_steps": micro, "samples": int(total.item()),
               "loss_finite": bool(torch.isfinite(loss))},
              open(sys.argv[2], "w"))
"""


def _plan(folder):
    plan = parplan_gen.plan(
        "llama-3-8b", {"gpus": 2, "gpu": "h100"}, global_batch=8, seq_len=1024,
        backend="deepspeed", pins={"dp": 2},
    )  # fmt: skip
    plan.write(folder)
    return plan


NEEDS = ("deepspeed", "torch.distributed.run")
TORCHRUN.register(TorchrunJob("deepspeed", _plan, TRAIN, NEEDS, env={"DS_ACCELERATOR": "cpu"}))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_rendered_ds_config_starts_the_deepspeed_engine_on_two_cpu_ranks(torchrun_jobs):
    consumer("deepspeed")
    consumer("torch.distributed.run")  # torchrun
    job = torchrun_jobs("deepspeed")
    chosen = job.plan.document.chosen
    layout = chosen.plan
    # A data-parallel plan on DeepSpeed: 8B parameters' model states (16 B each, ZeRO Sec. 3)
    # need sharding over the 2 ranks, so ZeRO-2 or 3; mbs x accumulation x 2 = 8.
    assert chosen.backend.name == "deepspeed"
    assert (layout.dp, layout.tp, layout.pp) == (2, 1, 1)
    assert layout.zero_stage in (2, 3)
    assert layout.mbs * layout.grad_accum * 2 == 8
    assert job.run.returncode == 0, job.run.stderr[-3000:]
    # 2 optimizer steps of grad_accum micro-batches on each rank; 2 steps x global batch 8
    assert job.result == {
        "accelerator": "cpu",
        "world": 2,
        "zero_stage": layout.zero_stage,
        "steps": 2,
        "micro_steps": 2 * layout.grad_accum,
        "samples": 16,
        "loss_finite": True,
    }
