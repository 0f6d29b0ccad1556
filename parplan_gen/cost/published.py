"""The best published training runs (`parplan_gen/data/published_best.yaml`): the highest MFU
published per GPU generation, model-size class and precision, each naming its run and source,
the size classes, the margin a plan's predicted MFU may exceed them by (with its reason), and
the GPU generations and model families the FP8 calibration rows cover, the generations any
calibration run covers, and the cost model's cross-validated error. `load_published` reads
and checks the shipped file once per process; `load_published_text` checks any text (tests).
`planning.sanity` turns them into a plan's warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from parplan_gen.cost.catalog import GIGA, TERA, Architecture, load_catalog
from parplan_gen.cost.data_checks import RawData
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.source import Document, parse_document, read_package_data
from parplan_gen.inputs.validation import validate
from parplan_gen.models.presets import load_preset

DATA_FILE = "published_best.yaml"
PERCENT = 100.0
TRAINED_PRECISIONS = ("bf16", "fp8")
# The count of a run's `shape` (Narayanan et al. 2021, Appendix: forward 24Bsh^2 + 4Bs^2h per
# layer): 2 FLOPs per weight per token for the matmuls (one multiply-add), 4 per key per unit of
# attention width for QK^T and softmax(.)V; a causal mask keeps half the keys (Megatron-LM
# core_v0.12.0 num_floating_point_operations, Dao 2023 FlashAttention-2 Sec. 4.1).
MATMUL_FLOPS_PER_PARAM = 2
SCORE_FLOPS_PER_KEY_WIDTH = 4
CAUSAL_KEYS = 0.5


class Margin(RawData):
    points: NonNegativeFloat = Field(description="MFU points a plan may exceed the best by.")
    reason: str = Field(min_length=1)


class SizeClass(RawData):
    moe: bool = Field(description="The class holds mixture-of-experts models (any size).")
    below_params_b: PositiveFloat | None = Field(
        description="Upper bound of total parameters, billions (None: no bound)."
    )


class RunShape(RawData):
    params_b: PositiveFloat = Field(description="Parameters, billions, as the source counts them.")
    layers: PositiveInt
    attention_width: PositiveInt = Field(description="Attention heads x head size.")
    seq_len: PositiveInt


class BestRun(RawData):
    generation: Architecture
    size_class: str = Field(alias="class")
    precision: Literal["bf16", "fp8"]
    run: str = Field(min_length=1, description="The run's name in the calibration set.")
    attention: Literal["full", "causal", "tokens"] = Field(
        description=(
            "How the source counts the s x s scores: the whole matrix or its causal half; "
            "`tokens`: its FLOP count is its own, so its tokens/s and a preset model count."
        )
    )
    attention_source: str = Field(min_length=1)
    shape: RunShape | None = Field(None, description="The run's model (needed for `full`).")
    shape_source: str | None = Field(None, min_length=1)
    mfu_pct: PositiveFloat | None = Field(None, le=PERCENT, description="MFU as published.")
    tflops_per_gpu: PositiveInt | PositiveFloat | None = Field(
        None, description="Model TFLOP/s per GPU as published (MFU = it / the GPU's peak)."
    )
    gpu: str | None = Field(None, description="The catalog GPU of a `tflops_per_gpu` figure.")
    tokens_per_sec_per_gpu: PositiveFloat | None = Field(
        None, description="Tokens per second per GPU as published (`attention: tokens`)."
    )
    model: str | None = Field(
        None, description="The preset model the run trained (`attention: tokens`)."
    )
    seq_len: PositiveInt | None = Field(None, description="Its sequence (`attention: tokens`).")
    source: str = Field(min_length=1)


class FP8Calibrated(RawData):
    generations: dict[Architecture, str] = Field(description="Generation -> its FP8 sources.")
    families: dict[str, str] = Field(description="HF model_type -> its FP8 sources.")


class Calibrated(RawData):
    generations: dict[Architecture, str] = Field(description="Generation -> its fitting runs.")


class ModelError(RawData):
    mape_pct: PositiveFloat = Field(le=PERCENT, description="Cross-validated MAPE, percent.")
    source: str = Field(min_length=1)


class ContextParallel(RawData):
    min_tokens_per_rank: PositiveInt = Field(
        description="Tokens per rank (sequence / cp) below which a plan with context "
        "parallelism says what the best layout without it gives."
    )
    source: str = Field(min_length=1)


class _File(RawData):
    margin: Margin
    classes: dict[str, SizeClass]
    best: list[BestRun]
    fp8_calibrated: FP8Calibrated
    calibrated: Calibrated
    model_error: ModelError
    context_parallel: ContextParallel


@dataclass(frozen=True)
class Best:
    """One class's best published run: its MFU as a fraction (as published and brought to the
    causal count of the attention scores), its run and its source."""

    mfu: float
    causal_mfu: float
    attention: str  # "full" or "causal": the published figure's count
    run: str
    source: str


def class_of(classes: dict[str, SizeClass], params: float, moe: bool) -> str | None:
    """The first of `classes` that holds a model of `params` total parameters (`moe`: a mixture
    of experts), or None."""
    for name, cls in classes.items():
        bound = cls.below_params_b
        if cls.moe == moe and (bound is None or params < bound * GIGA):
            return name
    return None


def causal_fraction(dense: float, scores: float, causal_scores: float) -> float:
    """FLOPs with the causal half of the attention scores over FLOPs with the scores as counted
    (`dense`: the matmuls; all three per token, any common unit). MFU x this = the MFU counted on
    the work causal kernels do, comparable across sequence lengths and conventions."""
    return (dense + causal_scores) / (dense + scores)


def _causal_mfu(
    doc: Document, index: int, entry: BestRun, mfu: float, classes: dict[str, SizeClass]
) -> float:
    """The entry's MFU on the causal count: as published when its source counts causal scores,
    else converted with its `shape`."""
    where = doc.ref(("best", index))
    if entry.attention != "full" and entry.shape is not None:
        raise InputError("shape is only read for attention: full", where)
    if entry.attention == "tokens":
        return _tokens_mfu(doc, index, entry, classes)
    if entry.tokens_per_sec_per_gpu is not None or entry.model or entry.seq_len is not None:
        raise InputError(
            "tokens_per_sec_per_gpu, model and seq_len are read for attention: tokens", where
        )
    if entry.attention == "causal":
        return mfu
    shape = entry.shape
    if shape is None or entry.shape_source is None:
        raise InputError("attention: full needs the run's shape and shape_source", where)
    dense = MATMUL_FLOPS_PER_PARAM * shape.params_b * GIGA
    scores = SCORE_FLOPS_PER_KEY_WIDTH * shape.layers * shape.attention_width * shape.seq_len
    return mfu * causal_fraction(dense, scores, CAUSAL_KEYS * scores)


def _tokens_mfu(doc: Document, index: int, entry: BestRun, classes: dict[str, SizeClass]) -> float:
    """The MFU on the causal count of a run whose published TFLOP/s are its source's own count:
    its tokens per second x the preset model's training FLOPs per token with the causal half of
    the scores (the count `planning.sanity` gives a plan), over the same peak as `mfu`. The
    preset must be of the entry's class."""
    where = doc.ref(("best", index))
    if entry.tokens_per_sec_per_gpu is None or entry.model is None or entry.seq_len is None:
        raise InputError("attention: tokens needs tokens_per_sec_per_gpu, model and seq_len", where)
    if entry.tflops_per_gpu is None:
        raise InputError("attention: tokens needs the published tflops_per_gpu and gpu", where)
    try:
        spec = load_preset(entry.model)
    except InputError as exc:
        raise InputError(exc.message, doc.ref(("best", index, "model"))) from None
    found = class_of(classes, spec.total_params(), spec.is_moe)
    if found != entry.size_class:
        where = doc.ref(("best", index, "model"))
        raise InputError(f"{entry.model} is {found}, not {entry.size_class}", where)
    per_token = spec.flops_per_token(entry.seq_len, causal=True)
    mfu = entry.tokens_per_sec_per_gpu * per_token / _peak(doc, index, entry)
    if mfu > 1:
        raise InputError(f"{entry.tokens_per_sec_per_gpu} tokens/s is above the peak", where)
    return mfu


@dataclass(frozen=True)
class Published:
    """The loaded file."""

    margin: float  # MFU fraction a plan may exceed its class's best by
    margin_reason: str
    classes: dict[str, SizeClass]
    best: dict[tuple[str, str, str], Best]  # (generation, class, precision) -> best run
    fp8_generations: dict[Architecture, str]
    fp8_families: dict[str, str]
    calibrated_generations: dict[Architecture, str]  # generation -> the runs fitted on it
    model_error: float  # the cost model's cross-validated MAPE, a fraction
    model_error_source: str
    cp_min_tokens: int  # tokens per rank below which context parallelism is explained
    cp_source: str
    origin: str  # the data file, for the warnings' text

    def size_class(self, params: float, moe: bool) -> str:
        """The class of a model of `params` total parameters (`moe`: a mixture of experts)."""
        found = class_of(self.classes, params, moe)
        if found is not None:
            return found
        raise InputError(f"{self.origin}: no size class holds a {'MoE ' if moe else ''}model")

    def best_for(self, generation: str, params: float, moe: bool, precision: str) -> Best | None:
        """The best published run of the class (None: none is published)."""
        return self.best.get((generation, self.size_class(params, moe), precision))


def _mfu(doc: Document, index: int, entry: BestRun) -> float:
    """The entry's MFU as a fraction: as published, or its TFLOP/s over its GPU's peak."""
    where = doc.ref(("best", index))
    if (entry.mfu_pct is None) == (entry.tflops_per_gpu is None):
        raise InputError("give exactly one of mfu_pct or tflops_per_gpu", where)
    if entry.mfu_pct is not None:
        if entry.gpu is not None:
            raise InputError("gpu belongs with tflops_per_gpu, not mfu_pct", where)
        return entry.mfu_pct / PERCENT
    mfu = float(entry.tflops_per_gpu or 0) * TERA / _peak(doc, index, entry)
    if mfu > 1:
        raise InputError(f"{entry.tflops_per_gpu} TFLOP/s is above {entry.gpu}'s peak", where)
    return mfu


def _peak(doc: Document, index: int, entry: BestRun) -> float:
    """The dense peak (FLOP/s) at the entry's precision of the catalog GPU it ran on."""
    if entry.gpu is None:
        raise InputError("tflops_per_gpu needs the catalog gpu it ran on", doc.ref(("best", index)))
    where = doc.ref(("best", index, "gpu"))
    try:
        gpu = load_catalog().gpu(entry.gpu)
        peak = gpu.peak_flops(entry.precision)
    except InputError as exc:
        raise InputError(exc.message, where) from None
    if gpu.architecture != entry.generation:
        raise InputError(f"{gpu.name} is {gpu.architecture}, not {entry.generation}", where)
    return peak


def load_published_text(text: str, name: str) -> Published:
    """Check and load the text of a published-best file named `name` in errors."""
    return published_from(parse_document(text, name))


def published_from(doc: Document) -> Published:
    """Check and load a parsed published-best file."""
    data = validate(_File, doc.data, doc)
    best: dict[tuple[str, str, str], Best] = {}
    for index, entry in enumerate(data.best):
        if entry.size_class not in data.classes:
            known = ", ".join(data.classes)
            raise InputError(
                f"unknown class '{entry.size_class}' (classes: {known})",
                doc.ref(("best", index, "class")),
            )
        key = (entry.generation, entry.size_class, entry.precision)
        if key in best:
            raise InputError(f"a second best run for {'/'.join(key)}", doc.ref(("best", index)))
        mfu = _mfu(doc, index, entry)
        best[key] = Best(
            mfu=mfu,
            causal_mfu=_causal_mfu(doc, index, entry, mfu, data.classes),
            attention=entry.attention,
            run=entry.run,
            source=" ".join(entry.source.split()),
        )
    return Published(
        margin=data.margin.points / PERCENT,
        margin_reason=" ".join(data.margin.reason.split()),
        classes=dict(data.classes),
        best=best,
        fp8_generations=dict(data.fp8_calibrated.generations),
        fp8_families=dict(data.fp8_calibrated.families),
        calibrated_generations=dict(data.calibrated.generations),
        model_error=data.model_error.mape_pct / PERCENT,
        model_error_source=" ".join(data.model_error.source.split()),
        cp_min_tokens=data.context_parallel.min_tokens_per_rank,
        cp_source=" ".join(data.context_parallel.source.split()),
        origin=doc.name,
    )


@cache
def load_published() -> Published:
    """The shipped file, read and checked once per process."""
    return published_from(read_package_data(DATA_FILE))
