"""The attention sweep: torch.nn.functional.scaled_dot_product_attention (torch picks its
kernel: FlashAttention on a GPU that runs it) in BF16 on (batch, heads, seq_len, head_dim), by
sequence length, causal and not, forward and forward+backward. A point holds `tokens` tokens
(batch = tokens / seq_len, at least 1), as the FlashAttention benchmark does.

FLOPs, the FlashAttention benchmark's count (profile_sweeps.yaml `conventions`): forward
4 x batch x seq_len^2 x heads x head_dim, halved when causal; forward+backward 3.5 times that
(the backward 2.5 times the forward)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parplan_gen.cost.catalog import TERA
from parplan_gen.cost.measured import AttentionMode, AttentionPoint, rate, significant
from parplan_gen.profile.points import Point
from parplan_gen.profile.runtime import Device
from parplan_gen.profile.sweeps import Conventions, Level, SweepFile
from parplan_gen.profile.timing import median_time_s

SWEEP = "attention"
MODES: tuple[AttentionMode, ...] = ("fwd", "fwd_bwd")


def attention_flops(
    conventions: Conventions,
    batch: int,
    seq_len: int,
    heads: int,
    head_dim: int,
    causal: bool,
    mode: AttentionMode,
) -> float:
    """The FLOPs of one attention call by the FlashAttention benchmark's count."""
    forward = conventions.attention_flops_per_score * batch * seq_len**2 * heads * head_dim
    if causal:
        forward *= conventions.attention_causal_fraction
    return forward * conventions.attention_mode_factor[mode]


def attention_points(device: Device, level: Level, data: SweepFile) -> list[Point]:
    sweep = level.attention
    return [
        Point(
            SWEEP,
            SWEEP,
            f"attention s={seq_len} {'causal' if causal else 'full'} {mode}",
            _measure(device, level, data, seq_len, causal, mode),
        )
        for seq_len in sweep.seq_len.values()
        for causal in (False, True)
        for mode in MODES
    ]


def _call(
    device: Device, dtype: Any, shape: tuple[int, int, int, int], causal: bool, backward: bool
) -> Callable[[], Any]:
    torch, where = device.torch, device.handle()
    attend = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (
        torch.randn(*shape, device=where, dtype=dtype, requires_grad=backward) for _ in range(3)
    )
    if not backward:

        def forward() -> Any:
            with torch.no_grad():
                return attend(q, k, v, is_causal=causal)

        return forward
    grad = torch.randn(*shape, device=where, dtype=dtype)

    def forward_backward() -> Any:
        # autograd.grad returns the gradients without adding them into .grad
        return torch.autograd.grad(attend(q, k, v, is_causal=causal), (q, k, v), grad)

    return forward_backward


def _measure(
    device: Device, level: Level, data: SweepFile, seq_len: int, causal: bool, mode: AttentionMode
) -> Callable[[], AttentionPoint]:
    def measure() -> AttentionPoint:
        sweep = level.attention
        batch = max(1, sweep.tokens // seq_len)
        shape = (batch, sweep.heads, seq_len, sweep.head_dim)
        dtype = device.dtype(data.dtypes.bf16)
        call = _call(device, dtype, shape, causal, mode == "fwd_bwd")
        time_s = significant(median_time_s(device, call, level.timing))
        flops = attention_flops(
            data.conventions, batch, seq_len, sweep.heads, sweep.head_dim, causal, mode
        )
        return AttentionPoint(
            seq_len=seq_len,
            head_dim=sweep.head_dim,
            heads=sweep.heads,
            batch=batch,
            causal=causal,
            mode=mode,
            flops=flops,
            time_s=time_s,
            tflops=rate(flops, time_s, TERA),
        )

    return measure
