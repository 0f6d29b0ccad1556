"""memory.yaml `other`: the GPU memory outside PyTorch's caching allocator (rules/cost/
outside_allocator.yaml), worked by hand from NCCL's code (v2.23.4-1) and its issues:

  protocol buffers LL 8 x 512 x 8 x 16 = 524,288 B, LL128 120 x 640 x 8 x 8 = 4,915,200 B,
  SIMPLE 4 MiB (src/init.cc); cuMem rounds each allocation up to the 2 MiB granule
  (NVIDIA/nccl#1685's ALLOC log: 10,485,760 and 2,097,152 B), so a receive connection is
  ceil(9,633,792 / 2 MiB) = 5 granules = 10 MiB, an NVLink send connection one granule, a
  network send connection (LL128 + SIMPLE, 9,109,504 B) 10 MiB; every communicator initialises
  its 32 p2p channels with 3 one-granule allocations each: 192 MiB; NVLS: 16 channels x 2 x
  (128 KiB x 8) = 32 MiB per head, one head per GPU of the communicator in an NVSwitch node of
  Hopper or later. The CUDA context: 287,047,680 B (PyTorch PR #86509).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from formula_env import formula_env, formula_value

import parplan_gen
from parplan_gen.cost.measured import OutsideAllocator
from parplan_gen.profile.context_memory import outside_allocator
from parplan_gen.profile.runtime import Device

MIB = 2**20
CONTEXT = 287_047_680
BASE = 32 * 3 * 2 * MIB  # a communicator's channels at init: 192 MiB
RECV = math.ceil((524_288 + 4_915_200 + 4 * MIB) / (2 * MIB)) * 2 * MIB
NODE_RING = 24 * (RECV + 2 * MIB)  # 24 ring channels in a node: 288 MiB
NETWORK_RING = 16 * (RECV + 10 * MIB)  # 16 across nodes: 320 MiB
NVLS_HEAD = 16 * 2 * 128 * 1024 * 8  # 32 MiB
PEER = 32 * (RECV + 2 * MIB)  # one NVLink peer on 32 p2p channels: 384 MiB
H100_8 = {"gpus": 8, "gpu": "h100"}


def _other(model: str, cluster: dict, backend: str, **layout: int) -> float:
    return formula_value("outside_allocator_bytes", formula_env(model, cluster, backend, **layout))


def test_a_receive_connection_is_five_granules() -> None:
    env = formula_env("llama-3-8b", H100_8, "megatron", dp=8)
    assert RECV == 10 * MIB
    assert formula_value("nccl_recv_connection_bytes", env) == RECV
    assert formula_value("nccl_net_send_connection_bytes", env) == 10 * MIB


def test_megatron_on_one_h100_node_has_the_world_and_its_data_parallel_group() -> None:
    """Megatron-LM's parallel_state makes its own data-parallel group beside the default one:
    two communicators of 8 ranks in one NVSwitch node, each ring plus NVLS over 8 heads."""
    one = BASE + NODE_RING + 8 * NVLS_HEAD  # 736 MiB
    assert _other("llama-3-8b", H100_8, "megatron", dp=8) == CONTEXT + 2 * one


def test_torchtitan_fsdp_over_every_gpu_is_the_world_group() -> None:
    """A one-dimensional device mesh over the world is the default group: one communicator."""
    one = BASE + NODE_RING + 8 * NVLS_HEAD
    assert _other("llama-3-8b", H100_8, "torchtitan", dp=8, zero_stage=3) == CONTEXT + one


def test_ampere_has_no_nvls() -> None:
    cluster = {"gpus": 8, "gpu": "a100-80gb"}
    assert _other("llama-3-8b", cluster, "deepspeed", dp=8) == CONTEXT + BASE + NODE_RING


def test_pipeline_neighbours_inside_a_node_and_across_nodes() -> None:
    """tp 4 x pp 2 in one node: the world, a 4-rank tensor-parallel ring with 4 NVLS heads, and
    the one pipeline neighbour over NVLink; pp 2 across two nodes (tp 8): the network's shared
    pool of 2 directions x 32 channels x 16 steps x 128 KiB instead."""
    world = BASE + NODE_RING + 8 * NVLS_HEAD
    tp4 = BASE + NODE_RING + 4 * NVLS_HEAD
    inside = _other("llama-3-8b", H100_8, "megatron", tp=4, pp=2, dp=1)
    assert inside == CONTEXT + world + tp4 + BASE + PEER
    two_nodes = {"gpus": 16, "gpu": "h100"}
    across = _other("llama-3-8b", two_nodes, "megatron", tp=8, pp=2, dp=1)
    world16 = BASE + NETWORK_RING + 8 * NVLS_HEAD
    tp8 = BASE + NODE_RING + 8 * NVLS_HEAD
    assert across == CONTEXT + world16 + tp8 + BASE + 2 * 32 * 16 * 128 * 1024


def test_an_all_to_all_connects_every_peer() -> None:
    """ep 8 in one node: 7 peers on 32 channels of a 10 MiB and a 2 MiB connection, 2.63 GiB
    (2.82 GB); NVIDIA/nccl#1685 measured +3.28 GB on 8 x H100 after the first
    all_to_all_single: the connections priced, 0.46 GB of it not."""
    env = formula_env("mixtral-8x7b", H100_8, "megatron", dp=8, ep=8)
    connections = formula_value("nccl_ep_bytes", env) - BASE
    assert connections == 7 * PEER
    assert connections / 1e9 == pytest.approx(2.818, abs=1e-3)  # under the 3.28 GB measured


def test_other_no_longer_grows_with_the_weights() -> None:
    """The old reserve kept 5 % of the weights and activations: 70B's `other` was 3.5 GiB more
    than 8B's at the same layout. Memory outside the allocator depends on the groups only."""
    small = _other("llama-3-8b", {"gpus": 64, "gpu": "h100"}, "megatron", tp=8, dp=8)
    large = _other("llama-3-70b", {"gpus": 64, "gpu": "h100"}, "megatron", tp=8, dp=8)
    assert small == large


class _FakeCuda:
    """torch.cuda as the context measurement reads it: 80 GiB, 70 GiB free, 9 GiB reserved."""

    def __init__(self) -> None:
        self.synchronized = 0

    def mem_get_info(self, index: int) -> tuple[int, int]:
        return 70 * 2**30, 80 * 2**30

    def memory_reserved(self, index: int) -> int:
        return 9 * 2**30

    def synchronize(self, index: int) -> None:
        self.synchronized += 1


def test_the_profile_reads_the_context_as_use_less_the_allocators_reserve() -> None:
    cuda = _FakeCuda()
    device = Device(SimpleNamespace(cuda=cuda), "cuda", 0)
    assert outside_allocator(device) == OutsideAllocator(context_bytes=2**30)
    assert cuda.synchronized == 1
    cpu = Device(SimpleNamespace(cuda=cuda), "cpu", 0)
    assert outside_allocator(cpu) is None


def test_a_measured_context_replaces_the_default(tmp_path) -> None:
    """A cluster file's `measured.outside_allocator.context_bytes` is the context `other`
    counts: 1 GiB more measured is 1 GiB more `other`."""
    layout = {"dp": 8, "global_batch": 64, "seq_len": 8192}
    others = []
    for gib in (1, 2):
        path = tmp_path / f"c{gib}.yaml"
        path.write_text(_cluster_file(gib * 2**30), encoding="utf-8")
        found = parplan_gen.estimate("llama-3-8b", path, layout, backend="megatron")
        others.append(found.estimate.memory.other)
    catalog = parplan_gen.estimate("llama-3-8b", H100_8, layout, backend="megatron")
    assert others[0] == catalog.estimate.memory.other - CONTEXT + 2**30
    assert others[1] - others[0] == 2**30


def _cluster_file(context_bytes: int) -> str:
    return f"""\
gpu: h100
num_gpus: 8
gpus_per_node: 8
measured:
  provenance:
    gpu_name: NVIDIA H100 80GB HBM3
    driver: null
    cuda: "12.8"
    hip: null
    torch: 2.13.0
    nccl: 2.27.3
    date: "2026-12-07T22:00:00Z"
    device: cuda
    quick: true
    budget_s: 60
    stopped_early: false
  outside_allocator:
    context_bytes: {context_bytes}
"""
