"""The GPU memory outside PyTorch's allocator, worked by hand from NCCL's code (v2.23.4-1) and
PyTorch PR #86509, for the tests of rules/cost/outside_allocator.yaml (test_outside_allocator,
test_sharding, test_graph_cost).

  protocol buffers LL 8 x 512 x 8 x 16 = 524,288 B, LL128 120 x 640 x 8 x 8 = 4,915,200 B,
  SIMPLE 4 MiB (src/init.cc); cuMem rounds each allocation up to the 2 MiB granule
  (NVIDIA/nccl#1685's ALLOC log: 10,485,760 and 2,097,152 B), so a receive connection is
  ceil(9,633,792 / 2 MiB) = 5 granules = 10 MiB, an NVLink send connection one granule, a
  network send connection (LL128 + SIMPLE, 9,109,504 B) 10 MiB. A communicator inside a node
  opens 24 ring channels and pow2Up(24) = 32 p2p channels, 32 per NVLink peer; across nodes 16
  and 16, 2 per peer (paths.cc ncclTopoComputeP2pChannels). Each of its p2p channels takes 3
  granules at init: 192 MiB in a node, 96 MiB across. NVLS: 16 channels x 2 x (128 KiB x 8) =
  32 MiB per head. The CUDA context: 287,047,680 B in use in PyTorch PR #86509's test, less its
  tensor's 20 MiB allocator segment.
"""

from __future__ import annotations

import math

MIB = 2**20
CONTEXT = 287_047_680 - 20 * MIB  # 266,076,160 B
RECV = math.ceil((524_288 + 4_915_200 + 4 * MIB) / (2 * MIB)) * 2 * MIB  # 10 MiB
NODE_BASE = 32 * 3 * 2 * MIB  # a communicator's channels at init, in a node: 192 MiB
NETWORK_BASE = 16 * 3 * 2 * MIB  # across nodes: 96 MiB
NODE_RING = NODE_BASE + 24 * (RECV + 2 * MIB)  # 192 + 288 MiB
NETWORK_RING = NETWORK_BASE + 16 * (RECV + 10 * MIB)  # 96 + 320 MiB
NVLS_HEAD = 16 * 2 * 128 * 1024 * 8  # 32 MiB
PEER = 32 * (RECV + 2 * MIB)  # one NVLink peer on 32 p2p channels: 384 MiB
POOL = 2 * 16 * 16 * 128 * 1024  # the network's send/recv pools: 64 MiB
