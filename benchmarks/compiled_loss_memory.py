"""What torchtitan's cross-entropy keeps for its backward, eager and under torch.compile: the
measurement behind rules/cost/memory.yaml `tt_loss_bytes_per_vocab`.

torchtitan's loss is `cross_entropy(pred.flatten(0, 1).float(), labels)` on 16-bit logits
(components/loss.py); since bbb1b616e (2025-04-02) it is compiled where the model is
(`training.compile`; 0.3: CompileConfig.components ["model", "loss"]). This script runs both
on the CPU and reports, per token and vocabulary entry:

* the bytes the forward saves for the backward (torch.autograd.graph.saved_tensors_hooks; a
  tensor saved twice is counted once, by its storage);
* the [tokens, vocab] buffers the compiled backward allocates (inductor's generated code,
  torch._inductor.utils.run_and_get_code): what it writes beside what was saved.

The partition (what AOTAutograd's min-cut partitioner saves) is decided before code
generation, so it is the GPU's too; the backward's buffers are inductor's fused kernel's. It
prints figures, asserts nothing: `python benchmarks/compiled_loss_memory.py` (torch needed,
about 30 s on 2 cores for the compile).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

TOKENS, VOCAB = 64, 1000  # small: what is saved scales with tokens x vocab


def _loss(pred, labels):  # type: ignore[no-untyped-def]
    """torchtitan's loss (components/loss.py cross_entropy_loss): fp32 cross-entropy of the
    16-bit logits."""
    from torch.nn import functional

    return functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def saved_bytes(fn: Callable[..., Any]) -> tuple[int, list[str], list[str]]:
    """Bytes `fn` saves for its backward on [1, TOKENS, VOCAB] bf16 logits, by storage, a
    description of each saved tensor, and the code inductor generated (none when eager)."""
    import torch
    from torch._inductor.utils import run_and_get_code

    seen: dict[int, int] = {}
    kinds: list[str] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        size = t.untyped_storage().nbytes()
        seen[t.untyped_storage().data_ptr()] = size
        kinds.append(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}")
        return t

    pred = torch.randn(1, TOKENS, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (1, TOKENS))

    def step() -> None:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = fn(pred, labels)
        loss.backward()

    _, code = run_and_get_code(step)
    return sum(seen.values()), kinds, code


def backward_buffers(code: list[str]) -> list[str]:
    """The [TOKENS, VOCAB] buffers the backward (the last generated module) allocates."""
    if not code:
        return []
    allocations = re.findall(r"empty_strided_\w+\(\(([^)]*)\), \([^)]*\), torch\.(\w+)\)", code[-1])
    wanted = {f"{TOKENS}, {VOCAB}", f"1, {TOKENS}, {VOCAB}"}
    return [f"({shape}) {dtype}" for shape, dtype in allocations if shape in wanted]


def main() -> None:
    import torch

    entries = TOKENS * VOCAB
    eager, eager_kinds, _ = saved_bytes(_loss)
    print(f"torch {torch.__version__}, {TOKENS} tokens x {VOCAB} vocabulary entries")
    print(f"eager:    saves {eager / entries:.3f} B an entry: {', '.join(eager_kinds)}")

    compiled, compiled_kinds, code = saved_bytes(torch.compile(_loss))
    print(f"compiled: saves {compiled / entries:.3f} B an entry: {', '.join(compiled_kinds)}")
    print(f"compiled backward's [tokens, vocab] buffers: {backward_buffers(code)}")


if __name__ == "__main__":
    main()
