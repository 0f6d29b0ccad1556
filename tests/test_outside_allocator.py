"""memory.yaml `other`: the GPU memory outside PyTorch's caching allocator (rules/cost/
outside_allocator.yaml), against the figures worked by hand from NCCL's code and PyTorch PR
#86509 in nccl_figures.py. NVLS counts one head per GPU of the communicator in a
Hopper-or-later NVSwitch node, when more than 2 (nvls.cc ncclNvlsInit), and only for groups that
run bulk collectives.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from formula_env import formula_env, formula_value
from measured_cluster import measured_cluster
from nccl_figures import (
    CONTEXT,
    MIB,
    NETWORK_BASE,
    NETWORK_RING,
    NODE_BASE,
    NODE_RING,
    NVLS_HEAD,
    PEER,
    POOL,
    RECV,
)

import parplan_gen
from parplan_gen.cost.measured import OutsideAllocator
from parplan_gen.profile.context_memory import outside_allocator
from parplan_gen.profile.runtime import Device

H100_8 = {"gpus": 8, "gpu": "h100"}


def _other(model: str, cluster: dict, backend: str, **layout: int) -> float:
    return formula_value("outside_allocator_bytes", formula_env(model, cluster, backend, **layout))


def test_a_receive_connection_is_five_granules() -> None:
    env = formula_env("llama-3-8b", H100_8, "megatron", dp=8)
    assert RECV == 10 * MIB
    assert formula_value("nccl_recv_connection_bytes", env) == RECV
    assert formula_value("nccl_net_send_connection_bytes", env) == 10 * MIB


def test_megatron_on_one_h100_node() -> None:
    """Megatron-LM with the distributed optimizer on one NVSwitch node: the world group and the
    optimizer's instance group, rings for one value (no NVLS), and its own data-parallel group,
    a ring with NVLS over 8 heads."""
    layout = {"dp": 8, "distributed_optimizer": True}
    expected = CONTEXT + 2 * NODE_RING + NODE_RING + 8 * NVLS_HEAD
    assert _other("llama-3-8b", H100_8, "megatron", **layout) == expected


def test_torchtitan_fsdp_over_every_gpu_is_the_world_group() -> None:
    """A one-dimensional device mesh over the world is the default group: one communicator,
    whose FSDP collectives run on NVLS."""
    other = _other("llama-3-8b", H100_8, "torchtitan", dp=8, zero_stage=3)
    assert other == CONTEXT + NODE_RING + 8 * NVLS_HEAD


def test_deepspeeds_data_parallel_group_is_a_clone_of_the_world() -> None:
    """deepspeed/utils/groups.py _clone_world_group: a second communicator; on Ampere no NVLS."""
    cluster = {"gpus": 8, "gpu": "a100-80gb"}
    assert _other("llama-3-8b", cluster, "deepspeed", dp=8) == CONTEXT + 2 * NODE_RING


def test_nvls_needs_more_than_two_gpus_of_the_group() -> None:
    two = _other("llama-3-8b", H100_8, "megatron", tp=2, dp=4)
    four = _other("llama-3-8b", H100_8, "megatron", tp=4, dp=2)
    # tp 2: no NVLS; dp 4 (ranks tp apart, 4 in the node): 4 heads. tp 4: 4 heads; dp 2: none.
    assert two == CONTEXT + NODE_RING + NODE_RING + NODE_RING + 4 * NVLS_HEAD
    assert four == CONTEXT + NODE_RING + NODE_RING + 4 * NVLS_HEAD + NODE_RING


def test_pipeline_neighbours_inside_a_node_and_across_nodes() -> None:
    """tp 4 x pp 2 in one node: the world, a 4-rank tensor-parallel ring with 4 NVLS heads, and
    the one pipeline neighbour over NVLink on 32 channels; pp 2 across two nodes (tp 8): a
    network communicator's channels and the network's shared pools instead."""
    inside = _other("llama-3-8b", H100_8, "megatron", tp=4, pp=2, dp=1)
    assert inside == CONTEXT + NODE_RING + (NODE_RING + 4 * NVLS_HEAD) + (NODE_BASE + PEER)
    two_nodes = {"gpus": 16, "gpu": "h100"}
    across = _other("llama-3-8b", two_nodes, "megatron", tp=8, pp=2, dp=1)
    tp8 = NODE_RING + 8 * NVLS_HEAD
    assert across == CONTEXT + NETWORK_RING + tp8 + (NETWORK_BASE + POOL)


def test_an_all_to_all_connects_every_peer() -> None:
    """ep 8 in one node: 7 peers on 32 channels of a 10 MiB and a 2 MiB connection, 2.63 GiB
    (2.82 GB): NVIDIA/nccl#1685 measured +3.28 GB on 8 x H100 after the first
    all_to_all_single. ep 16 over two nodes: every peer gets 2 channels (a remote rank's), the
    7 in the node over NVLink, the others through the pools."""
    env = formula_env("mixtral-8x7b", H100_8, "megatron", dp=8, ep=8)
    connections = formula_value("nccl_ep_bytes", env) - NODE_BASE
    assert connections == 7 * PEER
    assert connections / 1e9 == pytest.approx(2.818, abs=1e-3)
    assert connections < 3.28e9  # the measurement holds more than the connections priced
    spanning = formula_env("mixtral-8x7b", {"gpus": 16, "gpu": "h100"}, "megatron", dp=16, ep=16)
    assert (
        formula_value("nccl_ep_bytes", spanning) == NETWORK_BASE + 7 * 2 * (RECV + 2 * MIB) + POOL
    )


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


def test_a_device_that_cannot_say_its_free_memory_is_skipped_not_fatal() -> None:
    class _NoInfo(_FakeCuda):
        def mem_get_info(self, index: int) -> tuple[int, int]:
            raise RuntimeError("operation not supported")

    found = outside_allocator(Device(SimpleNamespace(cuda=_NoInfo()), "cuda", 0))
    assert found == (
        "the device's memory in use cannot be read (RuntimeError: operation not supported)"
    )


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
    return measured_cluster(8, f"  outside_allocator:\n    context_bytes: {context_bytes}\n")


def test_transformer_engines_userbuffers_hold_14_gathered_activations() -> None:
    """Megatron-LM's --tp-comm-overlap: initialize_ub (TE v2.9 pytorch/module/base.py) registers
    14 buffers of the gathered activation, [seq x mbs / cp, hidden], in bf16; under FP8 its 8
    all-gather buffers hold 1 byte a value. Llama 3 70B at 8,192 tokens, tp 8 with sequence
    parallelism: 28 x 8192 x 8192 B = 1.75 GiB, 20 x in FP8; none without the overlap."""
    cluster = {"gpus": 64, "gpu": "h100"}
    layout = {"tp": 8, "pp": 2, "dp": 4, "sequence_parallel": True}
    env = formula_env("llama-3-70b", cluster, "megatron", **layout)
    assert formula_value("te_userbuffer_bytes", env) == 28 * 8192 * 8192
    fp8 = formula_env("llama-3-70b", cluster, "megatron", precision="fp8", **layout)
    assert formula_value("te_userbuffer_bytes", fp8) == 20 * 8192 * 8192
    torchtitan = formula_env("llama-3-70b", cluster, "torchtitan", **layout)
    assert formula_value("te_userbuffer_bytes", torchtitan) == 0
    no_sp = formula_env("llama-3-70b", cluster, "megatron", tp=8, pp=2, dp=4)
    assert formula_value("te_userbuffer_bytes", no_sp) == 0
