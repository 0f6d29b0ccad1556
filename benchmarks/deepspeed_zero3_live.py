"""Print how many parameters DeepSpeed ZeRO-3 holds gathered at once, measured, beside what
rules/cost/memory.yaml prices (zero3_live_params: the live-parameter limit plus the largest
tensor, at most every parameter).

Run: python benchmarks/deepspeed_zero3_live.py   (needs the `consumers` extra: deepspeed and
transformers; CPU, one rank over gloo, about 10 s a setting)

A Hugging Face Llama at 1/64 of Llama 3 8B's matrices (hidden 512, FFN 1792, vocabulary
16,032, 8 layers, untied) trains three steps under DeepSpeed's ZeRO-3 with the buffer sizes
scaled by the same 1/64 (the reuse distance, stage3_max_reuse_distance, at its default 1e9
too): DeepSpeed's defaults and DeepSpeed-Chat's 3e7. The count is the
parameter coordinator's own (partitioned_param_coordinator.py, its available-parameter count at
each all-gather), read through its name-mangled attribute: DeepSpeed 0.19.8, the pinned release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCALE = 64  # Llama 3 8B's matrices over the toy's
HIDDEN, FFN, VOCAB, LAYERS, HEADS, KV_HEADS = 512, 1792, 16032, 8, 8, 2
REUSE_DISTANCE = 1e9  # stage3_max_reuse_distance, DeepSpeed's default (DeepSpeed-Chat's too)
SETTINGS = {  # (stage3_max_live_parameters, stage3_prefetch_bucket_size) at Llama 3 8B's scale
    "DeepSpeed's defaults": (1e9, 5e7),
    "DeepSpeed-Chat": (3e7, 3e7),
}
RANK = r"""
import json, os, sys, torch
import deepspeed
from deepspeed.runtime.zero import partitioned_param_coordinator as ppc
from transformers import LlamaConfig, LlamaForCausalLM
live, prefetch, reuse, h, f, v, layers, heads, kv = (int(a) for a in sys.argv[1:10])
counted = []
coordinator = ppc.PartitionedParameterCoordinator
name = "_PartitionedParameterCoordinator__"
gather = getattr(coordinator, name + "all_gather_params_")
def counting(self, params, forward, quantize=False):
    out = gather(self, params, forward, quantize)
    counted.append(getattr(self, name + "n_available_params"))
    return out
setattr(coordinator, name + "all_gather_params_", counting)
deepspeed.init_distributed(dist_backend="gloo")
config = {
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
    "zero_allow_untested_optimizer": True, "optimizer": {"type": "SGD", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 3, "stage3_max_live_parameters": live,
                          "stage3_prefetch_bucket_size": prefetch,
                          "stage3_max_reuse_distance": reuse,
                          "stage3_param_persistence_threshold": 1000},
}
model_config = LlamaConfig(hidden_size=h, intermediate_size=f, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv, vocab_size=v,
                           tie_word_embeddings=False)
with deepspeed.zero.Init(config_dict_or_path=config):
    model = LlamaForCausalLM(model_config)
engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
tokens = torch.randint(0, v, (1, 64))
for _ in range(3):
    counted.clear()
    loss = engine(input_ids=tokens, labels=tokens).loss
    engine.backward(loss)
    engine.step()
total = sum(p.ds_numel for p in model.parameters())
print(json.dumps({"peak": max(counted), "total": total}))
"""


def measure(live: float, prefetch: float) -> dict[str, int]:
    """The coordinator's peak of gathered parameters, and all the toy's parameters."""
    scaled = [int(x) // SCALE for x in (live, prefetch, REUSE_DISTANCE)]
    args = [*scaled, HIDDEN, FFN, VOCAB, LAYERS, HEADS, KV_HEADS]
    env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517", "RANK": "0",
                        "WORLD_SIZE": "1", "LOCAL_RANK": "0"}  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-c", RANK, *map(str, args)],
        capture_output=True, text=True, env=env, timeout=600, check=True,
    )  # fmt: skip
    return json.loads(run.stdout.strip().splitlines()[-1])


def priced(live: float, total: int) -> int:
    """rules/cost/memory.yaml zero3_live_params on the toy (tp 1): min(every parameter, the
    limit + the largest tensor, h x max(ffn, h, vocabulary))."""
    return min(total, int(live) // SCALE + HIDDEN * max(FFN, HIDDEN, VOCAB))


def main() -> None:
    print(f"{'setting':<22} {'measured':>12} {'priced':>12} {'error':>8}")
    for label, (live, prefetch) in SETTINGS.items():
        found = measure(live, prefetch)
        model = priced(live, found["total"])
        error = (model - found["peak"]) / found["peak"]
        print(f"{label:<22} {found['peak']:>12,} {model:>12,} {error:>+8.1%}")


if __name__ == "__main__":
    main()
