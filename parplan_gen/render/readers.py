"""Readers of layouts that users already have: a DeepSpeed ds_config.json and a Megatron-LM
argument list or launch script (`parplan check --from-deepspeed/--from-megatron`, and the API).

Every number is parsed strictly (ASCII digits, bounded by the size limits of `layout`); an
argument script is split into shell words linearly and capped in size before it is read.
"""

from __future__ import annotations

import re
from typing import Any

from parplan_gen.cost.layout import SIZE_LIMITS, size_problem
from parplan_gen.inputs.errors import InputError, SourceRef, shown_value
from parplan_gen.inputs.number_text import ZERO_STAGES, whole_number
from parplan_gen.inputs.source import load_document, read_text
from parplan_gen.models.transformer import MAX_LAYERS

# Megatron-LM argument -> layout field (value arguments) and switches -> (field, value).
MEGATRON_VALUES = {
    "--tensor-model-parallel-size": "tp",
    "--pipeline-model-parallel-size": "pp",
    "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep",
    "--micro-batch-size": "mbs",
    "--global-batch-size": "global_batch",
    "--seq-length": "seq_len",
    "--num-virtual-stages-per-pipeline-rank": "vpp",
    "--virtual-pipeline-model-parallel-size": "vpp",
    "--num-layers-per-virtual-pipeline-stage": "layers_per_virtual_stage",
    "--recompute-granularity": "recompute",
    "--fp8-format": "precision",
}
MEGATRON_SWITCHES = {
    "--sequence-parallel": ("sequence_parallel", True),
    "--use-distributed-optimizer": ("distributed_optimizer", True),
    "--recompute-activations": ("recompute", "selective"),
    "--bf16": ("precision", "bf16"),
    "--fp16": ("precision", "fp16"),
}


def deepspeed_values(path: str) -> dict[str, Any]:
    """Batch, ZeRO stage and precision of a DeepSpeed ds_config.json."""

    doc = load_document(path)
    if not isinstance(doc.data, dict):
        got = "an empty file" if doc.data is None else type(doc.data).__name__
        raise InputError(f"a DeepSpeed config is a JSON object (got {got})", doc.ref())
    data = doc.data
    out: dict[str, Any] = {}
    for key, field in (
        ("train_batch_size", "global_batch"),
        ("train_micro_batch_size_per_gpu", "mbs"),
        ("gradient_accumulation_steps", "grad_accum"),
    ):
        if key in data:
            out[field] = _size(doc, (key,), field, data[key])
    zero = data.get("zero_optimization", {})
    if isinstance(zero, dict) and "stage" in zero:
        stage = zero["stage"]
        if type(stage) is not int or stage not in ZERO_STAGES:  # not True, not 3.0
            where = doc.ref(("zero_optimization", "stage"))
            raise InputError(f"expected a ZeRO stage 0 to 3, got {shown_value(stage)}", where)
        out["zero_stage"] = stage
    for precision in ("bf16", "fp16"):
        section = data.get(precision)
        if isinstance(section, dict) and section.get("enabled") is True:
            out["precision"] = precision
    return out


def _size(doc: Any, path: tuple[str, ...], field: str, value: Any) -> int:

    problem = size_problem(field, value)
    if problem:
        hint = " (the HF Trainer fills 'auto'; give the value as a flag)" if value == "auto" else ""
        raise InputError(problem + hint, doc.ref(path))
    return value


# A Megatron-LM argument file larger than this is refused before it is split: Megatron-LM's
# example launch scripts are a few KB (examples/gpt3/train_gpt3_175b_distributed.sh), and
# splitting takes up to ~1 s per MiB in the worst case (one word per two characters).
MAX_ARGUMENT_SCRIPT_BYTES = 256 * 1024
_BLANK = " \t\r\n"  # what separates shell words (as shlex)
# Blanks and `#` comments between words; one piece of a word: plain characters, '...' (all
# literal), "..." (backslash escapes \" and \\ only, as shlex), or \x (the character x). Matched
# piece by piece, splitting is linear in the text (shlex.split is quadratic in a word's length).
_GAP = re.compile(rf"(?:[{_BLANK}]+|#[^\n]*)*")
_PIECE = re.compile(rf"""[^{_BLANK}'"\\]+|'[^']*'|"[^"\\]*(?:\\.[^"\\]*)*"|\\.""", re.DOTALL)
_QUOTED_ESCAPE = re.compile(r'\\([\\"])')


def shell_words(text: str) -> list[tuple[str, int]]:
    """The words of a shell command line with their offsets in `text`: quotes and backslashes
    removed, `#` comments dropped, nothing expanded; ValueError for an unclosed quote."""
    words: list[tuple[str, int]] = []
    pos = _GAP.match(text).end()  # type: ignore[union-attr]
    while pos < len(text):
        start, pieces = pos, []
        while pos < len(text) and text[pos] not in _BLANK:
            piece = _PIECE.match(text, pos)
            if piece is None:
                what = "No escaped character" if text[pos] == "\\" else "No closing quotation"
                raise ValueError(what, pos)
            pieces.append(_unquote(piece.group()))
            pos = piece.end()
        words.append(("".join(pieces), start))
        pos = _GAP.match(text, pos).end()  # type: ignore[union-attr]
    return words


def _unquote(piece: str) -> str:
    if piece[0] == "'":
        return piece[1:-1]
    if piece[0] == '"':
        return _QUOTED_ESCAPE.sub(r"\1", piece[1:-1])
    return piece[1] if piece[0] == "\\" else piece


def megatron_values(path: str, num_layers: int) -> dict[str, Any]:
    """Layout fields set by a Megatron-LM argument list or launch script (other args ignored)."""

    # A line continuation becomes a blank, keeping offsets and line numbers.
    text = read_text(path, max_bytes=MAX_ARGUMENT_SCRIPT_BYTES).replace("\\\n", " \n")

    def where(offset: int) -> SourceRef:
        return SourceRef(path, text.count("\n", 0, offset) + 1)

    try:
        words = shell_words(text)
    except ValueError as exc:
        message, offset = exc.args
        raise InputError(
            f"cannot split into shell words: {message} (is a quote unbalanced?)", where(offset)
        ) from None
    out: dict[str, Any] = {}
    for i, (word, offset) in enumerate(words):
        flag, eq, inline = word.partition("=")
        if flag in MEGATRON_SWITCHES:
            key, value = MEGATRON_SWITCHES[flag]
            out[key] = value
        elif flag in MEGATRON_VALUES:
            raw = inline if eq else (words[i + 1][0] if i + 1 < len(words) else "")
            out[MEGATRON_VALUES[flag]] = _megatron_value(flag, raw, where(offset))
    if out.get("precision") in ("e4m3", "hybrid"):
        out["precision"] = "fp8"
    per_chunk = out.pop("layers_per_virtual_stage", None)
    if per_chunk is not None:
        stages = out.get("pp", 1)
        if num_layers % (stages * per_chunk):
            raise InputError(
                f"--num-layers-per-virtual-pipeline-stage {per_chunk}: {num_layers} layers do not "
                f"divide by pp({stages}) x {per_chunk}",
                SourceRef(path),
            )
        out["vpp"] = num_layers // (stages * per_chunk)
    return out


def _megatron_value(flag: str, raw: str, where: Any) -> Any:

    if flag in ("--recompute-granularity", "--fp8-format"):
        return raw
    field = MEGATRON_VALUES[flag]
    try:  # layers per virtual stage: at most a model's layers
        return whole_number(raw, SIZE_LIMITS.get(field, MAX_LAYERS))
    except ValueError as exc:
        hint = " (shell variables are not expanded)" if "$" in raw else ""
        raise InputError(f"{flag}: {exc}{hint}", where) from None
