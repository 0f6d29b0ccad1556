"""Read one published run of the calibration files into what the cost model needs (a `Case`).

A field a row leaves null is filled from the file's `description` (ffn = 4h, NeMo GPT-3's
51,200 vocabulary, torchtitan's 8,192 tokens), from its model's architecture or from its
source's framework (benchmarks/calibration_rows.yaml, each with its source), and the
assumption is kept beside the row (`Case.assumptions`). A row whose `measured` block has no
figure is a layout reference: evaluated for `fits` only. A row the cost model cannot express
raises NotEvaluableError with the exact reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML

from parplan_gen.cost.catalog import load_catalog
from parplan_gen.cost.hardware import Cluster, cluster_from_flags
from parplan_gen.cost.layout import Layout, Recompute
from parplan_gen.models.kind import BackendName
from parplan_gen.models.transformer import ModelSpec

Metric = Literal["model", "hardware"]
TERA = 1e12
PERCENT = 100
GIB = 1 << 30
ROWS_FILE = Path(__file__).resolve().parent / "calibration_rows.yaml"

# conventions.tflops_per_gpu of both files: "Narayanan 2021 Table 1/2, Megatron 2020, BLOOM and
# MT-NLG count the recompute pass (hardware FLOPs); NeMo, Megatron-Core 2024, Llama 3 and
# Korthikanti model FLOPs do not". Keyed by the family prefix of an entry's name.
HARDWARE_FLOP_FAMILIES = frozenset({"narayanan2021", "megatron2020", "bloom", "mtnlg", "mt-nlg"})

# Catalog GPU by the words of `hardware.gpu` (first match wins); A100s are told apart by memory.
GPU_WORDS: tuple[tuple[str, str], ...] = (
    ("h200", "h200"),
    ("gb200", "gb200"),  # before "b200", which its name contains
    ("gb300", "gb300"),
    ("b300", "b300"),
    ("b200", "b200"),
    ("mi300x", "mi300x"),
    ("96gb hbm2e", "h100-sxm-96gb-500w"),  # torchtitan's Grand Teton H100s (500 W power limit)
    ("h100 pcie", "h100-pcie"),
    ("h100", "h100-sxm-80gb"),
    ("v100", "v100-32gb"),
    ("a100", "a100"),
)
A100_BY_MEMORY_GB = {40: "a100-40gb", 80: "a100-80gb"}
A100_MEMORY_UNSTATED = "a100-40gb"  # DGX A100 shipped 40 GB parts until the 80 GB launch (2020-11)

# "8x NVIDIA Mellanox 200 Gb/s HDR ..." / "8x400 Gbit/s per node" (NICs x rate per node),
# "1600 Gbps node-node" (per node) or "400 Gb/s per GPU".
_RATE = r"(\d+(?:\.\d+)?)\s*Gb(?:it)?(?:/s|ps)"
NICS_PATTERN = re.compile(r"(\d+)\s*x\s*[^,;]*?" + _RATE, re.IGNORECASE)
NODE_RATE_PATTERN = re.compile(_RATE + r"\s*node-node", re.IGNORECASE)
GPU_RATE_PATTERN = re.compile(_RATE + r"\s*per GPU", re.IGNORECASE)
TB_PER_S_PATTERN = re.compile(r"(\d+(?:\.\d+)?)\s*TB/s", re.IGNORECASE)

# Whether a family's runs kept the attention scores in HBM (no flash attention), by source:
# FlashAttention (Dao et al., arXiv:2205.14135) appeared in May 2022, after Megatron 2020 and
# Narayanan 2021; Korthikanti 2022 Sec. 4.1 stores the 5as^2b score bytes it then recomputes;
# llm-foundry's benchmarking README: "our models use Flash Attention". An entry whose text says
# "flash attention" uses it; an unknown family is assumed to (every current stack does).
FLASH_ATTENTION_BY_FAMILY = {
    "megatron2020": False,
    "narayanan2021": False,
    "korthikanti2022": False,
    "mpt": True,
}

REQUIRED_MODEL_FIELDS = ("num_layers", "hidden_size", "num_attention_heads")
RECOMPUTE_WORDS: tuple[Recompute, ...] = ("none", "selective", "full")


class NotEvaluableError(Exception):
    """An entry lacks what the cost model needs; the message says what."""


class RowsFileError(Exception):
    """calibration_rows.yaml says something of a row that the row contradicts: the file is
    wrong, so the run stops (never a row quietly left out)."""


@dataclass(frozen=True)
class Case:
    """One published run, ready for the cost model. `published_tflops` None: a layout
    reference (the `measured` block has no figure), evaluated for `fits` only."""

    name: str
    spec: ModelSpec
    cluster: Cluster
    layout: Layout
    metric: Metric
    flash_attention: bool
    published_tflops: float | None
    basis: str  # where the published figure comes from
    assumptions: tuple[str, ...] = ()
    backend: BackendName | None = None
    source: str = ""  # the publication (calibration_rows.yaml), the unit left out by LOSO
    families: tuple[str, ...] = ()
    published_memory_gib: float | None = None
    memory_reserved_peak: bool = False  # the published memory is the allocator's reserved peak
    # The train.* values the source's framework ran, where a plan's may differ (`ran_values`)
    ran: Mapping[str, object] = dataclass_field(default_factory=dict)
    validation: bool = False  # a validation row (its source says so): never fitted on

    @property
    def measured(self) -> bool:
        """The run published a throughput figure (it ran)."""
        return self.published_tflops is not None

    def with_facts(self, env: dict[str, Any]) -> dict[str, Any]:
        """`env` (the cost model's names for this case) with what the source says it ran where
        the planner's default would differ (`ran`)."""
        env.update(self.ran)
        return env


@dataclass(frozen=True)
class Skipped:
    """A run that cannot be evaluated, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class RowFacts:
    """What calibration_rows.yaml says of one row."""

    source: str  # the publication
    backend: BackendName | None  # None: no parplan backend ran it (backend-neutral terms)
    families: tuple[str, ...]
    micro_batch: str | None  # rule for a missing micro_batch_size
    micro_batch_reason: str
    backend_reason: str
    memory_figure: str = "allocated"  # `reserved_peak`: the caching allocator's reserved peak
    distributed_optimizer_reason: str = ""  # why a row that does not say uses it
    fp8_recipe: str | None = None  # the FP8 recipe the source's FP8 runs used
    fp8_recipe_reason: str = ""
    tp_comm_overlap: bool = True  # False: the source's framework ran TP traffic unoverlapped
    tp_comm_overlap_reason: str = ""
    # False: the source's Megatron-LM ran its interleaved schedule's transfers unoverlapped
    p2p_overlap: bool = True
    p2p_overlap_reason: str = ""
    # False: the source's recipe left Megatron's EP all-to-all overlap off
    moe_a2a_overlap: bool = True
    moe_a2a_overlap_reason: str = ""
    # False: the source's DeepSpeed fetched ZeRO-3 parameters blocking (its first ZeRO-3)
    zero3_overlap: bool = True
    zero3_overlap_reason: str = ""
    # False: the source's framework reduced the gradients after the backward (Megatron-LM's
    # local DDP before --overlap-grad-reduce; Layout.overlap_grad_reduce)
    overlap_grad_reduce: bool = True
    overlap_grad_reduce_reason: str = ""
    # torchtitan's ChunkedLossWrapper (components/loss.py, since 786e26f8e, 2026-04-27), which
    # every plan's torchtitan 0.3 runs: no published run used it (calibration_rows.yaml
    # `chunked_loss`, default false)
    chunked_loss: bool = False
    # torchtitan compiled its loss with the model (components/loss.py build_cross_entropy_loss,
    # bbb1b616e of 2025-04-02 and later, with training.compile), and why (calibration_rows.yaml
    # `loss_compiled`, default false: the earlier runs' torchtitan left it eager)
    loss_compiled: bool = False
    loss_compiled_reason: str = ""
    # the loss kernel the source's Megatron-LM ran (Layout.cross_entropy_fusion), and why
    # (calibration_rows.yaml `cross_entropy_fusion`; default `off`, Megatron-LM's own)
    cross_entropy_fusion: str = "off"
    cross_entropy_fusion_reason: str = ""
    # the type the source's runs reduced gradients in (Layout.grad_reduce_dtype; "default": the
    # backend's own), and why (calibration_rows.yaml `grad_reduce_dtype`)
    grad_reduce_dtype: str = "default"
    grad_reduce_dtype_reason: str = ""
    # why the source's TFLOP/s is not on the model FLOPs' count, or "" when it is; the row
    # is then compared on its tokens per second (x model FLOPs) where it gives them
    tflops_count_reason: str = ""
    # why the source's pipelined rows ran Megatron's interleaved schedule though they do not give
    # its size, or "": a missing virtual_pipeline_stages is then the least interleaving the
    # layers per stage allow (their smallest divisor above 1)
    interleaved_reason: str = ""
    validation: bool = False  # the source's rows are validation rows, never fitted on
    # the micro-batch a row ran where its printed MBS, GA and GBS contradict each other
    # (calibration_rows.yaml `rows: NAME: micro_batch_size` with `micro_batch_reason`), or None
    micro_batch_ran: int | None = None
    micro_batch_ran_reason: str = ""
    # what outside the table contradicts a row whose printed figures agree with each other
    # (`micro_batch_contradicted_by`: the preset its container ran), or "": only then may
    # micro_batch_ran replace a consistent printed MBS
    micro_batch_contradicted_by: str = ""


def ran_values(facts: RowFacts, fp8_recipe: str | None) -> dict[str, object]:
    """The train.* values a row's framework ran, from what calibration_rows.yaml says of its
    source (`facts`) and the FP8 recipe it ran (None: not FP8, the plan's own): the names a
    plan takes from cost/estimate.py FRAMEWORK_FEATURES, as that framework had them."""
    values: dict[str, object] = {
        "train.tp_comm_overlap": facts.tp_comm_overlap,
        "train.p2p_overlap": facts.p2p_overlap,
        "train.moe_a2a_overlap": facts.moe_a2a_overlap,
        "train.zero3_overlap": facts.zero3_overlap,
        "train.chunked_loss": facts.chunked_loss,
        "train.loss_compiled": facts.loss_compiled,
        # every torchtitan source predates 0.3: its Float8 linears took torchao's float8 TP
        # styles (rules/cost/time.yaml tp_fp8_gathers), and its Llama repeated the KV heads
        # before SDPA (repeat_kv: 9dec370's torchtitan/models/llama/model.py, v0.2.1's
        # models/llama3/model/model.py; until ff0829c10 of 2026-01-27, "GQA without kv
        # repeats"; rules/cost/context.yaml cp_kv_heads)
        "train.torchao_float8_tp": True,
        # ... and wrapped FSDP2 as 9dec370 / e7c0cae's parallelize_llama.py apply_fsdp did: the
        # root module (embedding, final norm, output) kept gathered, the last block too
        "train.tt_fsdp_units_03": False,
        "train.kv_heads_repeated": facts.backend == "torchtitan",
        # ... and projected Q, K and V with three matmuls: the fused projection came with
        # ad7a86533 (2026-04-16), after every torchtitan source (rules/cost/compute.yaml
        # tt_sac_recomputed_linear_share)
        "train.tt_fused_qkv": False,
        # every source predates torch's preference for cuDNN's attention in SDPA on Hopper and
        # Blackwell (sdp_utils.cpp check_prefer_cudnn_attention, cuDNN > 9.15, 2026): their
        # SDPA ran FlashAttention-2 (rules/cost/context.yaml sdpa_attention_efficiency)
        "train.sdpa_cudnn": False,
    }
    if fp8_recipe is not None:
        values["train.fp8_recipe"] = fp8_recipe
    return values


@cache
def row_table(path: Path = ROWS_FILE) -> dict[str, Any]:
    """calibration_rows.yaml, parsed once."""
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def row_facts(name: str) -> RowFacts:
    """The source, backend and families of row `name` (NotEvaluableError when neither it nor
    a prefix of its name is listed)."""
    table = row_table()
    row = table["rows"].get(name)
    if row is None:
        prefixes = [p for p in table["prefixes"] if name.startswith(p)]
        if not prefixes:
            raise NotEvaluableError(f"{name} is not in {ROWS_FILE.name}: give its source")
        row = {"source": table["prefixes"][max(prefixes, key=len)], "families": []}
    _check_row_keys(name, row)
    key = row["source"]
    source = table["sources"][key]
    return RowFacts(
        source=source.get("publication", key),
        backend=source.get("backend"),
        families=tuple(row["families"]),
        micro_batch=source.get("micro_batch_when_missing"),
        micro_batch_reason=str(source.get("micro_batch_reason", "")).strip(),
        backend_reason=str(source.get("backend_reason", "")).strip(),
        memory_figure=str(source.get("memory_figure", "allocated")),
        distributed_optimizer_reason=str(source.get("distributed_optimizer_reason", "")).strip(),
        fp8_recipe=source.get("fp8_recipe"),
        fp8_recipe_reason=str(source.get("fp8_recipe_reason", "")).strip(),
        tp_comm_overlap=bool(source.get("tp_comm_overlap", True)),
        tp_comm_overlap_reason=str(source.get("tp_comm_overlap_reason", "")).strip(),
        p2p_overlap=bool(source.get("p2p_overlap", True)),
        p2p_overlap_reason=str(source.get("p2p_overlap_reason", "")).strip(),
        # a row may say otherwise than its source (a preset that set it)
        moe_a2a_overlap=bool(row.get("moe_a2a_overlap", source.get("moe_a2a_overlap", True))),
        moe_a2a_overlap_reason=" ".join(
            str(row.get("moe_a2a_overlap_reason", source.get("moe_a2a_overlap_reason", ""))).split()
        ),
        zero3_overlap=bool(source.get("zero3_overlap", True)),
        zero3_overlap_reason=" ".join(str(source.get("zero3_overlap_reason", "")).split()),
        overlap_grad_reduce=bool(source.get("overlap_grad_reduce", True)),
        overlap_grad_reduce_reason=" ".join(
            str(source.get("overlap_grad_reduce_reason", "")).split()
        ),
        chunked_loss=bool(source.get("chunked_loss", False)),
        loss_compiled=bool(source.get("loss_compiled", False)),
        loss_compiled_reason=" ".join(str(source.get("loss_compiled_reason", "")).split()),
        cross_entropy_fusion=str(source.get("cross_entropy_fusion", "off")),
        cross_entropy_fusion_reason=" ".join(
            str(source.get("cross_entropy_fusion_reason", "")).split()
        ),
        grad_reduce_dtype=str(source.get("grad_reduce_dtype", "default")),
        grad_reduce_dtype_reason=" ".join(str(source.get("grad_reduce_dtype_reason", "")).split()),
        tflops_count_reason=str(source.get("tflops_count_reason", "")).strip(),
        interleaved_reason=str(source.get("interleaved_reason", "")).strip(),
        validation=bool(source.get("validation", False)),
        micro_batch_ran=_micro_batch_ran(name, row),
        micro_batch_ran_reason=" ".join(str(row.get("micro_batch_reason", "")).split()),
        micro_batch_contradicted_by=" ".join(
            str(row.get("micro_batch_contradicted_by", "")).split()
        ),
    )


# What a `rows:` entry of calibration_rows.yaml may say; a misspelt key would otherwise be
# dropped and the row read as if the file were silent.
ROW_KEYS = frozenset(
    {"source", "families", "why_missing", "micro_batch_size", "micro_batch_reason"}
    | {"micro_batch_contradicted_by"}
    | {"moe_a2a_overlap", "moe_a2a_overlap_reason"}
)


def _check_row_keys(name: str, row: Mapping[str, Any]) -> None:
    unknown = sorted(set(row) - ROW_KEYS)
    if unknown:
        raise RowsFileError(
            f"{ROWS_FILE.name} rows: {name}: unknown key(s) {', '.join(unknown)} "
            f"(a row may give {', '.join(sorted(ROW_KEYS))})"
        )
    if ("micro_batch_size" in row) != ("micro_batch_reason" in row):
        raise RowsFileError(
            f"{ROWS_FILE.name} rows: {name}: micro_batch_size and micro_batch_reason go together"
        )
    if "micro_batch_contradicted_by" in row and "micro_batch_size" not in row:
        raise RowsFileError(
            f"{ROWS_FILE.name} rows: {name}: micro_batch_contradicted_by needs the "
            "micro_batch_size it contradicts the table with"
        )


def _micro_batch_ran(name: str, row: Mapping[str, Any]) -> int | None:
    """A row's `micro_batch_size`: a whole number of sequences, at least 1 (bool is not one)."""
    value = row.get("micro_batch_size")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RowsFileError(
            f"{ROWS_FILE.name} rows: {name}: micro_batch_size {value!r} is not a whole number >= 1"
        )
    return value


# ---- the model --------------------------------------------------------------------------------


def _need(block: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    missing = [k for k in keys if block.get(k) is None]
    if missing:
        raise NotEvaluableError(f"{where} has no {', '.join(missing)}")


def _words(*texts: object) -> str:
    return " ".join(str(t) for t in texts if t).lower()


def _mlp_kind(text: str) -> str | None:
    if "swiglu" in text:
        return "swiglu"
    if "geglu" in text:
        return "geglu"
    if "squared relu" in text or "squared-relu" in text:
        return "squared_relu"
    return None


def _position_embedding(text: str) -> str | None:
    if "alibi" in text:
        return "alibi"
    if "rope" in text or "rotary" in text:
        return "rope"
    return None


def architecture(model_name: str) -> dict[str, Any] | None:
    """The architecture facts of calibration_rows.yaml whose words are in `model_name`."""
    name = model_name.lower()
    for arch in row_table()["architectures"]:
        if any(word in name for word in arch["words"]):
            return arch
    return None


def _default(field: str, text: str) -> tuple[Any, str] | None:
    for rule in row_table()["defaults"].get(field, []):
        if any(word in text for word in rule["words"]):
            return rule["value"], f"{field} {rule['value']} ({rule['source']})"
    return None


def _filled_model(entry: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """The `model` block with the nulls the file's description and sources fill."""
    model = dict(entry["model"])
    _need(model, REQUIRED_MODEL_FIELDS, "model")
    defaults = row_table()["defaults"]
    if model.get("ffn_hidden_size") is None:
        model["ffn_hidden_size"] = defaults["ffn_hidden_size_per_hidden"] * model["hidden_size"]
        notes.append(
            f"ffn_hidden_size {model['ffn_hidden_size']} = 4h ({defaults['ffn_hidden_size_source']})"
        )
    for field, text in (
        ("vocab_size", _words(model.get("name"))),
        ("seq_length", _words(entry["name"])),
    ):
        if model.get(field) is None and (found := _default(field, text)):
            model[field], note = found
            notes.append(note)
    try:
        _need(model, ("vocab_size", "seq_length"), "model")
    except NotEvaluableError as exc:
        why = row_table()["rows"].get(entry["name"], {}).get("why_missing")
        raise NotEvaluableError(f"{exc}: {why}" if why else str(exc)) from None
    return model


def _moe_fields(moe: Mapping[str, Any] | None, ffn: int, notes: list[str]) -> dict[str, Any]:
    if not moe:
        return {}
    experts = moe.get("num_experts")
    top_k = moe.get("experts_per_token", moe.get("top_k", moe.get("moe_router_topk")))
    width = moe.get("moe_ffn_hidden_size", moe.get("expert_ffn_hidden_size"))
    if experts is None or top_k is None:
        raise NotEvaluableError("model.moe needs num_experts and top_k")
    if width is None:
        width = ffn
        notes.append(
            f"moe_ffn_hidden_size = ffn_hidden_size {ffn} ({row_table()['moe_width_default_source']})"
        )
    shared = moe.get("num_shared_experts") or 0
    fields: dict[str, Any] = {
        "num_experts": experts,
        "experts_per_token": top_k,
        "moe_ffn_hidden_size": width,
    }
    if shared:
        fields |= {"num_shared_experts": shared, "shared_expert_ffn_hidden_size": width}
    return fields


def spec_and_notes(entry: Mapping[str, Any]) -> tuple[ModelSpec, list[str]]:
    """A ModelSpec from an entry's `model` block (GPT-style fields; GQA, gated MLPs, MoE), and
    the assumptions made for its null fields."""
    notes: list[str] = []
    model = _filled_model(entry, notes)
    text = _words(model.get("notes"), model.get("architecture"), model.get("name"))
    arch = architecture(_words(model.get("name"), entry["name"])) or {}
    if arch:
        notes.append(f"architecture from the model's name: {arch['source']}")
    heads = model["num_attention_heads"]
    biases = arch.get("biases", "no bias" not in text)
    tied = arch.get("tied", "untied" not in text)
    spec = ModelSpec(
        name=model.get("name") or entry["name"],
        model_type="gpt",
        num_layers=model["num_layers"],
        hidden_size=model["hidden_size"],
        num_attention_heads=heads,
        num_kv_heads=model.get("num_query_groups") or heads,
        head_dim=model.get("kv_channels")
        or arch.get("kv_channels")
        or model["hidden_size"] // heads,
        ffn_hidden_size=model["ffn_hidden_size"],
        mlp_kind=_mlp_kind(text) or arch.get("mlp", "gelu"),
        vocab_size=model["vocab_size"],
        tied_embeddings=tied,
        max_position_embeddings=model["seq_length"],
        # learned: GPT-2/3 and Megatron's GPT (Narayanan Eq. 2 counts (V + s) h)
        position_embedding=_position_embedding(text) or arch.get("position", "learned"),
        norm="rmsnorm" if "rmsnorm" in text else arch.get("norm", "layernorm"),
        qkv_bias=biases,
        out_proj_bias=biases,
        mlp_bias=biases,
        qk_norm=arch.get("qk_norm", False),
        attention_sinks=arch.get("attention_sinks", False),
        router_bias=arch.get("router_bias", False),
        **_window_fields(arch, model["num_layers"]),
        **_moe_fields(model.get("moe"), model["ffn_hidden_size"], notes),
    )
    return spec, notes


def _window_fields(arch: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """Sliding-window attention as Megatron-Core places it: layer n (1-indexed) is windowed
    where n % window_attn_skip_freq != 0 (transformer/utils.py is_layer_window_attention)."""
    window = arch.get("sliding_window")
    if window is None:
        return {}
    skip = arch.get("window_attn_skip_freq")
    if skip is not None and (not isinstance(skip, int) or skip < 1):
        raise NotEvaluableError(f"window_attn_skip_freq {skip!r} is not a positive integer")
    mask = tuple(skip is None or n % skip != 0 for n in range(1, layers + 1))
    return {"sliding_window": window, "sliding_window_layers": mask}


def spec_from_entry(entry: Mapping[str, Any]) -> ModelSpec:
    """A ModelSpec from an entry's `model` block."""
    return spec_and_notes(entry)[0]


# ---- the cluster ------------------------------------------------------------------------------


def _catalog_gpu(hardware: Mapping[str, Any]) -> tuple[str, list[str]]:
    text = _words(hardware.get("gpu"))
    name = next((catalog for word, catalog in GPU_WORDS if word in text), None)
    if name is None:
        raise NotEvaluableError(f"GPU {hardware.get('gpu')!r} is not in the catalog")
    if name != "a100":
        return name, []
    memory = hardware.get("gpu_memory_gb")
    if memory is None:
        found = re.search(r"(\d+)\s*gb", text)
        memory = int(found.group(1)) if found else None
    if memory is None:
        return A100_MEMORY_UNSTATED, ["A100 memory not stated (only `fits` depends on it)"]
    if int(memory) not in A100_BY_MEMORY_GB:
        raise NotEvaluableError(f"no A100 with {memory} GB in the catalog")
    return A100_BY_MEMORY_GB[int(memory)], []


def inter_node_gbps(hardware: Mapping[str, Any]) -> float | None:
    """Gb/s per GPU (one direction) from the described NICs, or None when not described."""
    text = str(hardware.get("inter_node") or "")
    per_node = hardware.get("gpus_per_node")
    if found := GPU_RATE_PATTERN.search(text):
        return float(found.group(1))
    found = NICS_PATTERN.search(text)
    if found and per_node:
        return int(found.group(1)) * float(found.group(2)) / per_node
    found = NODE_RATE_PATTERN.search(text)
    if found and per_node:
        return float(found.group(1)) / per_node
    return None


def _stated_memory(cluster: Cluster, hardware: Mapping[str, Any], notes: list[str]) -> Cluster:
    """`cluster` with the GPU memory (and HBM bandwidth) the row states where the catalog part
    differs (torchtitan's H100 96GB HBM2e at 2.4 TB/s)."""
    gpu = cluster.gpu
    stated = hardware.get("gpu_memory_gb")
    update: dict[str, Any] = {}
    if stated is not None and round(stated * GIB) != gpu.memory_bytes:
        update["memory_bytes"] = round(stated * GIB)
        found = TB_PER_S_PATTERN.search(str(hardware.get("gpu") or ""))
        if found:
            update["memory_bandwidth_bytes_per_s"] = float(found.group(1)) * TERA
        stated_bw = f", {found.group(1)} TB/s" if found else ""
        notes.append(
            f"GPU: catalog {gpu.name} figures with the row's {stated} GB{stated_bw} "
            "(no such part in the catalog)"
        )
    return (
        cluster if not update else cluster.model_copy(update={"gpu": gpu.model_copy(update=update)})
    )


def cluster_from_entry(entry: Mapping[str, Any]) -> tuple[Cluster, list[str]]:
    """The Cluster of an entry's `hardware` block, and the assumptions made."""
    hardware = entry["hardware"]
    name, notes = _catalog_gpu(hardware)
    per_node = hardware.get("gpus_per_node")
    gbps = inter_node_gbps(hardware)
    if gbps is None:
        notes.append("inter-node network not described: the GPU's reference system")
    cluster = cluster_from_flags(
        entry["total_gpus"],
        name,
        gpus_per_node=per_node or load_catalog().gpu(name).reference_node.gpus_per_node,
        inter_node_gbps=gbps,
        name=entry["name"],
    )
    return _stated_memory(cluster, hardware, notes), notes
