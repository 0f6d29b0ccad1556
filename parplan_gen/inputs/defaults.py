"""Constants shared across modules: units, and the defaults the CLI and the API agree on.

Importing it costs nothing, so the command line can use it while `--help` stays fast.
"""

from __future__ import annotations

MIB = 1024 * 1024  # bytes in a MiB (the unit of the input size caps)
GIB = 1024**3  # bytes in a GiB (GPU memory is sold in binary units: "80 GB" is 80 GiB)
DEFAULT_SEQ_LEN = 2048  # tokens per sequence when none is given (DESIGN.md plan contract)
ZERO_STAGES = (0, 1, 2, 3)  # DeepSpeed ZeRO stages (deepspeed/runtime/zero/config.py)
# The stage that shards parameters too, with gradients and optimizer states (ZeRO-3; FSDP's
# full sharding, FSDP2's fully_shard)
ZERO_FULL = ZERO_STAGES[-1]
# DeepSpeed ZeRO's buffers (Layout.ds_*, each a train.* name of the cost rules), in elements, as
# DeepSpeed defaults them (deepspeed 0.19.8 runtime/zero/config.py DeepSpeedZeroConfig:
# stage3_prefetch_bucket_size pp_int(5e7), stage3_max_live_parameters pp_int(1e9),
# reduce_bucket_size pp_int(5e8)): the Layout's defaults, which a ds_config.json that says
# otherwise replaces.
DS_DEFAULTS = {
    "ds_prefetch_bucket_size": 50_000_000,
    "ds_max_live_parameters": 1_000_000_000,
    "ds_reduce_bucket_size": 500_000_000,
}
DS_SETTINGS = tuple(DS_DEFAULTS)
# The most elements one of them may say: more than any model's parameters (10^15).
DS_MAX_ELEMENTS = 10**15
# Layout sizes a request may bound (`min_<size>`, `max_<size>`; `--min-<size>`), in the Layout's
# order (etp follows tp unless pinned, so it is not bounded).
BOUNDED_SIZES = ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs")
