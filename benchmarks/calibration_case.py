"""One published run -> a `Case`: its layout (on the backend that ran it), its published
figure, and every assumption made (calibration_read.py reads the model and the cluster)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calibration_read import (
    FLASH_ATTENTION_BY_FAMILY,
    GIB,
    HARDWARE_FLOP_FAMILIES,
    PERCENT,
    RECOMPUTE_WORDS,
    ROWS_FILE,
    TERA,
    Case,
    Metric,
    NotEvaluableError,
    RowFacts,
    RowsFileError,
    Skipped,
    _need,
    _words,
    cluster_from_entry,
    ran_values,
    row_facts,
    spec_and_notes,
)
from ruamel.yaml import YAML

from parplan_gen.cost.layout import Layout, Recompute, build_layout
from parplan_gen.inputs.errors import ParplanError
from parplan_gen.models.transformer import ModelSpec

# Backends that run Megatron-style sequence parallelism with tp (torchtitan's apply_tp shards
# the norms with SequenceParallel, torchtitan/models/llama3/parallelize.py).
SEQUENCE_PARALLEL_BACKENDS = frozenset({"megatron", "torchtitan"})


def _recompute(value: object, notes: list[str]) -> Recompute:
    text = str(value or "").strip().lower()
    if not text:
        notes.append("activation_recompute not stated: none assumed")
        return "none"
    word = text.split()[0]
    if word in RECOMPUTE_WORDS:
        return word  # type: ignore[return-value]
    # "not stated for Table 2 (TFLOP/s computed with Eq. 3, which assumes full recomputation)"
    found = [w for w in RECOMPUTE_WORDS if w in text]
    if text.startswith("not stated") and len(found) == 1:
        notes.append(f"activation_recompute {found[0]} assumed from the row's text: {value!r}")
        return found[0]
    raise NotEvaluableError(f"activation_recompute {value!r} is not none/selective/full")


def _precision(entry: Mapping[str, Any], notes: list[str]) -> str:
    text = _words(entry.get("precision"))
    if "fp8" in text or "float8" in text:
        return "fp8"
    if "fp16" in text:
        return "fp16"
    if "bf16" not in text and "16-bit" not in text:  # fp16 and bf16 share the dense peak
        notes.append(f"precision {entry.get('precision')!r}: bf16 assumed")
    return "bf16"


# Where the published figure of a row whose source's TFLOP/s are another count comes from.
OTHER_COUNT_BASIS = "tokens/s x model FLOPs (its TFLOP/s: another count)"


# A precision's first word -> the FP8 recipe it names (Megatron-Bridge's performance tables:
# current scaling, delayed scaling, MXFP8 block scaling; --fp8-recipe's values).
FP8_RECIPE_WORDS = {
    "fp8-cs": "tensorwise",
    "fp8-ds": "delayed",
    "fp8-mx": "mxfp8",
    "mxfp8": "mxfp8",
}


def _fp8_recipe(entry: Mapping[str, Any], facts: RowFacts) -> tuple[str | None, str]:
    """The FP8 recipe of a row: the one its precision's first word names (Megatron-Bridge's
    tables print FP8-CS, FP8-DS, FP8-MX; MXFP8), else its source's."""
    first = _words(entry.get("precision")).split(" ", 1)[0]
    if first in FP8_RECIPE_WORDS:
        recipe = FP8_RECIPE_WORDS[first]
        return recipe, f"the row says {entry.get('precision')!r} (Megatron --fp8-recipe {recipe})"
    return facts.fp8_recipe, facts.fp8_recipe_reason


def _micro_batch(
    entry: Mapping[str, Any], facts: RowFacts, dp: int, pp: int, notes: list[str]
) -> int:
    mbs = entry.get("micro_batch_size")
    if facts.micro_batch_ran is not None:
        return _contradicted_micro_batch(entry, facts.micro_batch_ran, facts, dp, notes)
    if mbs is not None:
        return int(mbs)
    per_rank = entry.get("batch_size_per_dp_rank") or entry["global_batch_size"] // dp
    rule = facts.micro_batch
    if rule == "one":
        mbs = 1
    elif rule == "per_rank":
        mbs = per_rank
    elif rule == "per_rank_over_pp" and per_rank % pp == 0:
        mbs = per_rank // pp
    else:
        raise NotEvaluableError("the run has no micro_batch_size")
    notes.append(f"micro_batch_size {mbs}: {facts.micro_batch_reason}")
    return mbs


def _contradicted_micro_batch(
    entry: Mapping[str, Any], ran: int, facts: RowFacts, dp: int, notes: list[str]
) -> int:
    """`ran`, the micro-batch calibration_rows.yaml says a row ran (a whole number >= 1,
    calibration_read.row_facts), accepted only where something contradicts the printed one and
    it divides GBS / dp: the row's own figures (printed MBS x printed GA x dp is not its GBS),
    or, where they agree, the preset the row's container ran (`micro_batch_contradicted_by`,
    named in the row's assumptions). A consistent figure nothing contradicts is never
    replaced."""
    printed, gbs = entry.get("micro_batch_size"), entry["global_batch_size"]
    accum = (entry.get("measured") or {}).get("grad_accum_printed")
    where = f"{ROWS_FILE.name} rows: {entry['name']}: micro_batch_size {ran}"
    if printed is None or accum is None:
        raise RowsFileError(
            f"{where} replaces a printed figure, but the row prints no "
            + ("micro_batch_size" if printed is None else "measured.grad_accum_printed")
            + " to show a contradiction; remove it"
        )
    agree = printed * accum * dp == gbs
    if agree and not facts.micro_batch_contradicted_by:
        raise RowsFileError(
            f"{where} replaces a row whose figures agree (MBS {printed} x GA {accum} x dp "
            f"{dp} = GBS {gbs}); remove it"
        )
    if gbs % (ran * dp):
        raise RowsFileError(f"{where}: {ran} x dp {dp} = {ran * dp} does not divide GBS {gbs}")
    why = (
        f"MBS {printed} x GA {accum} x dp {dp} = GBS {gbs}, but {facts.micro_batch_contradicted_by}"
        if agree
        else f"MBS {printed} x GA {accum} x dp {dp} = {printed * accum * dp}, not GBS {gbs}"
    )
    notes.append(
        f"micro_batch_size {ran} (GA {gbs // (ran * dp)}), not the printed {printed}: {why}; "
        f"{facts.micro_batch_ran_reason}"
    )
    return ran


def _virtual_stages(entry: Mapping[str, Any], facts: RowFacts, pp: int, notes: list[str]) -> int:
    """The virtual pipeline stages of an entry: as given; else, where its source ran the
    interleaved schedule (`interleaved_reason`), the smallest divisor above 1 of its layers
    per stage (Megatron's interleaving splits a stage's layers evenly into its chunks)."""
    given = entry["parallelism"].get("virtual_pipeline_stages")
    if given is not None or pp == 1 or not facts.interleaved_reason:
        return int(given or 1)
    layers = entry["model"]["num_layers"]
    per_stage = layers // pp
    if layers % pp or per_stage < 2:
        raise NotEvaluableError(
            f"{layers} layers on pp {pp} cannot run the interleaved schedule its source ran"
        )
    vpp = next(v for v in range(2, per_stage + 1) if per_stage % v == 0)
    notes.append(f"virtual pipeline stages {vpp}: {facts.interleaved_reason}")
    return vpp


def _sharding(entry: Mapping[str, Any], facts: RowFacts, notes: list[str]) -> tuple[int, bool]:
    """(ZeRO stage, Megatron distributed optimizer) of an entry."""
    zero = entry.get("zero_stage") or 0
    sharding = _words(entry.get("data_parallel_sharding"))
    if not zero and "megatron-fsdp" in sharding:
        notes.append(
            "Megatron-FSDP read as ZeRO-3 (--data-parallel-sharding-strategy optim_grads_params)"
        )
        return 3, False
    flag = entry.get("distributed_optimizer")
    if flag is None and not zero and _family_of(entry).startswith("nemo"):
        notes.append("distributed optimizer assumed (NeMo's GPT recipes use it; not stated)")
        flag = True
    if flag is None and not zero and facts.distributed_optimizer_reason:
        notes.append(facts.distributed_optimizer_reason)
        flag = True
    return zero, bool(flag) and zero == 0


def _family_of(entry: Mapping[str, Any]) -> str:
    return str(entry["name"]).split("_", 1)[0].lower()


def layout_and_notes(
    entry: Mapping[str, Any], facts: RowFacts, seq_len: int
) -> tuple[Layout, list[str]]:
    """The Layout of an entry on `facts.backend`, and the assumptions made."""
    _need(entry, ("total_gpus", "global_batch_size"), "the run")
    notes: list[str] = []
    par = entry["parallelism"]
    tp, pp = par.get("tp") or 1, par.get("pp") or 1
    dp = par.get("dp") or entry["total_gpus"] // (tp * pp * (par.get("cp") or 1))
    zero, distributed_optimizer = _sharding(entry, facts, notes)
    sequence_parallel = par.get("sequence_parallel")
    if sequence_parallel is None and tp > 1 and facts.backend in SEQUENCE_PARALLEL_BACKENDS:
        notes.append(f"sequence parallelism assumed with tp {tp} (not stated)")
        sequence_parallel = True
    # expert tensor parallelism: Megatron's default is tp (TransformerConfig
    # expert_tensor_parallel_size); a row that states another gives `etp` and `etp_reason`
    expert_tp = {"etp": par["etp"]} if par.get("etp") else {}
    if expert_tp:
        notes.append(f"expert tensor parallelism {par['etp']}: {par.get('etp_reason', 'stated')}")
    layout = build_layout(
        entry["total_gpus"],
        **expert_tp,
        tp=tp,
        pp=pp,
        cp=par.get("cp") or 1,
        dp=par.get("dp"),
        ep=par.get("ep") or 1,
        vpp=_virtual_stages(entry, facts, pp, notes),
        mbs=_micro_batch(entry, facts, dp, pp, notes),
        global_batch=entry["global_batch_size"],
        seq_len=seq_len,
        zero_stage=zero,
        distributed_optimizer=distributed_optimizer,
        sequence_parallel=bool(sequence_parallel),
        recompute=_recompute(entry.get("activation_recompute"), notes),
        offload_layers=_offload_layers(entry, notes),
        grad_reduce_dtype=_grad_reduce_dtype(facts, notes),
        overlap_grad_reduce=_overlap_grad_reduce(facts, notes),
        cross_entropy_fusion=_cross_entropy_fusion(facts, notes),
        precision=_precision(entry, notes),
    )
    return layout, notes


def _cross_entropy_fusion(facts: RowFacts, notes: list[str]) -> str | None:
    """The loss kernel the source's Megatron-LM ran (its `cross_entropy_fusion`; Megatron-LM's
    own unless it says), None on other backends (their framework's own loss)."""
    if facts.backend != "megatron":
        return None
    if facts.cross_entropy_fusion != "off":
        notes.append(
            f"cross-entropy fusion {facts.cross_entropy_fusion}: {facts.cross_entropy_fusion_reason}"
        )
    return facts.cross_entropy_fusion


def _overlap_grad_reduce(facts: RowFacts, notes: list[str]) -> bool:
    """Whether the source's runs overlapped the gradient reduction with the backward (its
    `overlap_grad_reduce`)."""
    if not facts.overlap_grad_reduce:
        notes.append(facts.overlap_grad_reduce_reason)
    return facts.overlap_grad_reduce


def _grad_reduce_dtype(facts: RowFacts, notes: list[str]) -> str:
    """The type the source's runs reduced their gradients in (its `grad_reduce_dtype`)."""
    if facts.grad_reduce_dtype != "default":
        notes.append(
            f"gradients reduced in {facts.grad_reduce_dtype}: {facts.grad_reduce_dtype_reason}"
        )
    return facts.grad_reduce_dtype


def _offload_layers(entry: Mapping[str, Any], notes: list[str]) -> int:
    """The layers whose activations the run offloads to the host (`activation_offload_layers`,
    with the `activation_offload_reason` that says where the count comes from); 0 unstated."""
    layers = entry.get("activation_offload_layers") or 0
    if layers:
        notes.append(
            f"{layers} layers' activations offloaded: {entry['activation_offload_reason']}"
        )
    return int(layers)


def layout_from_entry(entry: Mapping[str, Any]) -> Layout:
    """The Layout of an entry."""
    spec, _ = spec_and_notes(entry)
    return layout_and_notes(entry, row_facts(entry["name"]), spec.max_position_embeddings)[0]


def published_figure(
    entry: Mapping[str, Any], spec: ModelSpec, seq: int, other_count: bool = False
) -> tuple[float | None, Metric, str]:
    """(TFLOP/s per GPU, which FLOPs, where from) of an entry's `measured` block; None: the
    block has no figure (a layout reference). `other_count`: the source's TFLOP/s are a count
    of its own (calibration_rows.yaml `tflops_count_reason`): its tokens per second are then
    the figure, on the model FLOPs' count, and a row without them is not evaluable."""
    measured = entry.get("measured") or {}
    family = _family_of(entry)
    peak = entry["hardware"].get("peak_16bit_dense_tflops")
    flops_per_token = spec.flops_per_token(seq)
    if other_count and measured.get("tflops_per_gpu") is not None:
        if not measured.get("tokens_per_sec_per_gpu"):
            raise NotEvaluableError(
                "its TFLOP/s are its source's own count and it gives no tokens/s"
            )
        tflops = measured["tokens_per_sec_per_gpu"] * flops_per_token / TERA
        return tflops, "model", OTHER_COUNT_BASIS
    if measured.get("tflops_per_gpu") is not None:
        metric: Metric = "hardware" if family in HARDWARE_FLOP_FAMILIES else "model"
        return float(measured["tflops_per_gpu"]), metric, "tflops_per_gpu"
    if measured.get("mfu_pct") is not None and peak:
        return measured["mfu_pct"] / PERCENT * peak, "model", f"mfu_pct x {peak}"
    if measured.get("hfu_pct") is not None and peak:
        return measured["hfu_pct"] / PERCENT * peak, "hardware", f"hfu_pct x {peak}"
    if measured.get("step_time_s"):
        tokens = entry["global_batch_size"] * seq
        tflops = flops_per_token * tokens / (entry["total_gpus"] * measured["step_time_s"]) / TERA
        return tflops, "model", "step_time_s, Eq. 7 FLOPs"
    if measured.get("tokens_per_sec_per_gpu"):
        tflops = measured["tokens_per_sec_per_gpu"] * flops_per_token / TERA
        return tflops, "model", "tokens/s x model FLOPs"
    return None, "model", "layout reference (no published figure): fits only"


def flash_attention(entry: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """Whether the run used flash attention, and the assumption made when not stated."""
    text = _words(entry.get("notes"), entry["model"].get("notes"))
    if "flash attention" in text or "flash-attention" in text:
        return True, []
    family = _family_of(entry)
    if family in FLASH_ATTENTION_BY_FAMILY:
        return FLASH_ATTENTION_BY_FAMILY[family], []
    return True, ["flash attention assumed (not stated)"]


def case_from_entry(entry: Mapping[str, Any]) -> Case:
    """Everything the cost model needs for one entry (NotEvaluableError when it cannot)."""
    facts = row_facts(entry["name"])
    try:
        spec, notes = spec_and_notes(entry)
        cluster, cluster_notes = cluster_from_entry(entry)
        seq = spec.max_position_embeddings
        layout, layout_notes = layout_and_notes(entry, facts, seq)
        value, metric, basis = published_figure(entry, spec, seq, bool(facts.tflops_count_reason))
        flash, flash_notes = flash_attention(entry)
    except ParplanError as exc:
        raise NotEvaluableError(exc.render()) from None
    except ValueError as exc:  # pydantic: a model block that is not a valid ModelSpec
        raise NotEvaluableError(str(exc).splitlines()[-1].strip()) from None
    if basis == OTHER_COUNT_BASIS:
        notes.append(facts.tflops_count_reason)
    if facts.backend_reason:
        notes.append(f"backend {facts.backend}: {facts.backend_reason}")
    recipe, why = _fp8_recipe(entry, facts) if layout.precision == "fp8" else (None, "")
    if recipe is not None:
        notes.append(f"fp8 recipe {recipe}: {why}")
    overlap_off = not facts.tp_comm_overlap and layout.tp > 1 and layout.sequence_parallel
    if overlap_off:
        notes.append(facts.tp_comm_overlap_reason)
    if not facts.p2p_overlap and layout.vpp > 1:
        notes.append(facts.p2p_overlap_reason)
    if not facts.moe_a2a_overlap and layout.ep > 1:
        notes.append(facts.moe_a2a_overlap_reason)
    if not facts.zero3_overlap and layout.zero_stage == 3:
        notes.append(facts.zero3_overlap_reason)
    if facts.loss_compiled:
        notes.append(f"loss compiled: {facts.loss_compiled_reason}")
    memory = (entry.get("measured") or {}).get("memory_gib_per_gpu")
    return Case(
        entry["name"],
        spec,
        cluster,
        layout,
        metric,
        flash,
        value,
        basis,
        tuple(notes + cluster_notes + layout_notes + flash_notes),
        backend=facts.backend,
        source=facts.source,
        families=facts.families,
        published_memory_gib=None if memory is None else float(memory),
        memory_reserved_peak=facts.memory_figure == "reserved_peak",
        ran=ran_values(facts, recipe),
        validation=facts.validation,
    )


def load_entries(path: Path) -> list[dict[str, Any]]:
    """The `configs` of a calibration file."""
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))["configs"]


def load_cases(*paths: Path) -> tuple[list[Case], list[Skipped]]:
    """The evaluable runs of `paths` and the others with their reasons, in file order."""
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for path in paths:
        for entry in load_entries(path):
            try:
                cases.append(case_from_entry(entry))
            except NotEvaluableError as exc:
                skipped.append(Skipped(entry["name"], str(exc)))
    return cases, skipped


__all__ = ["GIB", "Case", "Skipped", "case_from_entry", "load_cases", "published_figure"]
