"""Calibrate the cost model against published large-model training runs.

Every entry of `published_runs.yaml` (default: ../shared/calibration/ next to the repository)
becomes a ModelSpec, a Cluster and a Layout, goes through `planning.evaluate`, and its
predicted TFLOP/s per GPU is compared with the published one: hardware FLOPs (recomputation
counted) where the source counts them, model FLOPs otherwise (the file's `conventions`).
Rows that cannot be evaluated are listed with the reason.

    python benchmarks/calibration.py [RUNS.yaml] [--rules DIR]   # table and MAPE
    python benchmarks/calibration.py --fit                        # fit rules/cost/efficiency.yaml

`--fit` searches the constants that datasheets cannot give (benchmarks/fit_parameters.yaml) by coordinate
descent on the MAPE of the evaluable rows and prints them; copy them into efficiency.yaml.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML

from parplan_gen.cost.catalog import load_catalog
from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.hardware import Cluster, cluster_from_flags
from parplan_gen.cost.layout import Layout, Recompute, build_layout
from parplan_gen.inputs.errors import ParplanError, SourceRef
from parplan_gen.inputs.resources import builtin_rules_dir
from parplan_gen.models.transformer import ModelSpec
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.ruleset import RuleSet, load_rules

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RUNS = REPO.parent / "shared" / "calibration" / "published_runs.yaml"

Metric = Literal["model", "hardware"]
TERA = 1e12
PERCENT = 100

# conventions.tflops_per_gpu of published_runs.yaml: "Narayanan 2021 Table 1/2, Megatron 2020,
# BLOOM and MT-NLG count the recompute pass (hardware FLOPs); NeMo, Megatron-Core 2024, Llama 3
# and Korthikanti model FLOPs do not". Keyed by the family prefix of an entry's name.
HARDWARE_FLOP_FAMILIES = frozenset({"narayanan2021", "megatron2020", "bloom", "mtnlg", "mt-nlg"})

# Catalog GPU by the words of `hardware.gpu` (first match wins); A100s are told apart by memory.
GPU_WORDS: tuple[tuple[str, str], ...] = (
    ("h200", "h200"),
    ("b200", "b200"),
    ("mi300x", "mi300x"),
    ("h100 pcie", "h100-pcie"),
    ("h100", "h100-sxm-80gb"),
    ("v100", "v100-32gb"),
    ("a100", "a100"),
)
A100_BY_MEMORY_GB = {40: "a100-40gb", 80: "a100-80gb"}
A100_MEMORY_UNSTATED = "a100-40gb"  # DGX A100 shipped 40 GB parts until the 80 GB launch (2020-11)

# "8x NVIDIA Mellanox 200 Gb/s HDR ..." (NICs x rate per node) or "1600 Gbps node-node".
NICS_PATTERN = re.compile(r"(\d+)\s*x\s*[^,;]*?(\d+(?:\.\d+)?)\s*Gb(?:/s|ps)", re.IGNORECASE)
NODE_RATE_PATTERN = re.compile(r"(\d+(?:\.\d+)?)\s*Gb(?:/s|ps)\s*node-node", re.IGNORECASE)

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

REQUIRED_MODEL_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "ffn_hidden_size",
    "vocab_size",
    "seq_length",
)
REQUIRED_RUN_FIELDS = ("total_gpus", "micro_batch_size", "global_batch_size")


class NotEvaluableError(Exception):
    """An entry lacks what the cost model needs; the message says what."""


@dataclass(frozen=True)
class Case:
    """One published run, ready for the cost model."""

    name: str
    spec: ModelSpec
    cluster: Cluster
    layout: Layout
    metric: Metric
    flash_attention: bool
    published_tflops: float
    basis: str  # where the published figure comes from
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skipped:
    """A run that cannot be evaluated, and why."""

    name: str
    reason: str


@dataclass
class Row:
    """One evaluated run."""

    case: Case
    predicted_tflops: float
    fits: bool

    @property
    def error_pct(self) -> float:
        return (self.predicted_tflops / self.case.published_tflops - 1) * PERCENT


@dataclass
class Report:
    """Evaluated rows and skipped runs."""

    rows: list[Row] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def mape(self) -> float:
        return sum(abs(r.error_pct) for r in self.rows) / max(1, len(self.rows))


# ---- reading an entry -------------------------------------------------------------------------


def _need(block: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    missing = [k for k in keys if block.get(k) is None]
    if missing:
        raise NotEvaluableError(f"{where} has no {', '.join(missing)}")


def _words(*texts: object) -> str:
    return " ".join(str(t) for t in texts if t).lower()


def _mlp_kind(text: str) -> str:
    if "swiglu" in text:
        return "swiglu"
    if "geglu" in text:
        return "geglu"
    if "squared relu" in text or "squared-relu" in text:
        return "squared_relu"
    return "gelu"


def _position_embedding(text: str) -> str:
    if "alibi" in text:
        return "alibi"
    if "rope" in text or "rotary" in text:
        return "rope"
    return "learned"  # GPT-2/3 and Megatron's GPT (Narayanan Eq. 2 counts (V + s) h)


def _moe_fields(moe: Mapping[str, Any] | None) -> dict[str, Any]:
    if not moe:
        return {}
    experts = moe.get("num_experts")
    top_k = moe.get("experts_per_token", moe.get("top_k", moe.get("moe_router_topk")))
    width = moe.get("moe_ffn_hidden_size", moe.get("expert_ffn_hidden_size"))
    if experts is None or top_k is None or width is None:
        raise NotEvaluableError("model.moe needs num_experts, top_k and moe_ffn_hidden_size")
    shared = moe.get("num_shared_experts") or 0
    fields: dict[str, Any] = {
        "num_experts": experts,
        "experts_per_token": top_k,
        "moe_ffn_hidden_size": width,
    }
    if shared:
        fields |= {"num_shared_experts": shared, "shared_expert_ffn_hidden_size": width}
    return fields


def spec_from_entry(entry: Mapping[str, Any]) -> ModelSpec:
    """A ModelSpec from an entry's `model` block (GPT-style fields; GQA, SwiGLU, MoE)."""
    model = entry["model"]
    _need(model, REQUIRED_MODEL_FIELDS, "model")
    text = _words(model.get("notes"), model.get("architecture"), model.get("name"))
    heads = model["num_attention_heads"]
    biases = "no bias" not in text
    return ModelSpec(
        name=model.get("name") or entry["name"],
        model_type="gpt",
        num_layers=model["num_layers"],
        hidden_size=model["hidden_size"],
        num_attention_heads=heads,
        num_kv_heads=model.get("num_query_groups") or heads,
        head_dim=model.get("kv_channels") or model["hidden_size"] // heads,
        ffn_hidden_size=model["ffn_hidden_size"],
        mlp_kind=_mlp_kind(text),  # type: ignore[arg-type]
        vocab_size=model["vocab_size"],
        tied_embeddings="untied" not in text,
        max_position_embeddings=model["seq_length"],
        position_embedding=_position_embedding(text),  # type: ignore[arg-type]
        norm="rmsnorm" if "rmsnorm" in text else "layernorm",
        qkv_bias=biases,
        out_proj_bias=biases,
        mlp_bias=biases,
        **_moe_fields(model.get("moe")),
    )


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
    found = NICS_PATTERN.search(text)
    if found and per_node:
        return int(found.group(1)) * float(found.group(2)) / per_node
    found = NODE_RATE_PATTERN.search(text)
    if found and per_node:
        return float(found.group(1)) / per_node
    return None


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
    return cluster, notes


def _recompute(text: str) -> Recompute:
    word = text.split()[0].lower() if text.strip() else "none"
    if word not in ("none", "selective", "full"):
        raise NotEvaluableError(f"activation_recompute {text!r} is not none/selective/full")
    return word  # type: ignore[return-value]


def layout_from_entry(entry: Mapping[str, Any]) -> Layout:
    """The Layout of an entry (ZeRO subsumes a `distributed_optimizer: true` flag)."""
    _need(entry, REQUIRED_RUN_FIELDS, "the run")
    par = entry["parallelism"]
    zero = entry.get("zero_stage") or 0
    precision = "fp16" if "fp16" in _words(entry.get("precision")) else "bf16"
    return build_layout(
        entry["total_gpus"],
        tp=par.get("tp") or 1,
        pp=par.get("pp") or 1,
        cp=par.get("cp") or 1,
        dp=par.get("dp"),
        ep=par.get("ep") or 1,
        vpp=par.get("virtual_pipeline_stages") or 1,
        mbs=entry["micro_batch_size"],
        global_batch=entry["global_batch_size"],
        seq_len=entry["model"]["seq_length"],
        zero_stage=zero,
        distributed_optimizer=bool(entry.get("distributed_optimizer")) and zero == 0,
        sequence_parallel=bool(par.get("sequence_parallel")),
        recompute=_recompute(str(entry.get("activation_recompute") or "none")),
        precision=precision,
    )


def published_figure(entry: Mapping[str, Any], spec: ModelSpec) -> tuple[float, Metric, str]:
    """(TFLOP/s per GPU, which FLOPs, where from) of an entry's `measured` block."""
    measured = entry["measured"]
    family = _family(entry)
    peak = entry["hardware"].get("peak_16bit_dense_tflops")
    if measured.get("tflops_per_gpu") is not None:
        metric: Metric = "hardware" if family in HARDWARE_FLOP_FAMILIES else "model"
        return float(measured["tflops_per_gpu"]), metric, "tflops_per_gpu"
    if measured.get("mfu_pct") is not None and peak:
        return measured["mfu_pct"] / PERCENT * peak, "model", f"mfu_pct x {peak}"
    if measured.get("hfu_pct") is not None and peak:
        return measured["hfu_pct"] / PERCENT * peak, "hardware", f"hfu_pct x {peak}"
    seq = entry["model"]["seq_length"]
    flops_per_token = spec.flops_per_token(seq)
    if measured.get("step_time_s"):
        tokens = entry["global_batch_size"] * seq
        tflops = flops_per_token * tokens / (entry["total_gpus"] * measured["step_time_s"]) / TERA
        return tflops, "model", "step_time_s, Eq. 7 FLOPs"
    if measured.get("tokens_per_sec_per_gpu"):
        tflops = measured["tokens_per_sec_per_gpu"] * flops_per_token / TERA
        return tflops, "model", "tokens/s x model FLOPs"
    raise NotEvaluableError("measured has no TFLOP/s, MFU, HFU, step time or tokens/s")


def _family(entry: Mapping[str, Any]) -> str:
    return str(entry["name"]).split("_", 1)[0].lower()


def flash_attention(entry: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """Whether the run used flash attention, and the assumption made when not stated."""
    text = _words(entry.get("notes"), entry["model"].get("notes"))
    if "flash attention" in text or "flash-attention" in text:
        return True, []
    family = _family(entry)
    if family in FLASH_ATTENTION_BY_FAMILY:
        return FLASH_ATTENTION_BY_FAMILY[family], []
    return True, ["flash attention assumed (not stated)"]


def case_from_entry(entry: Mapping[str, Any]) -> Case:
    """Everything the cost model needs for one entry (NotEvaluableError when it cannot)."""
    try:
        spec = spec_from_entry(entry)
        cluster, notes = cluster_from_entry(entry)
        layout = layout_from_entry(entry)
        value, metric, basis = published_figure(entry, spec)
        flash, flash_notes = flash_attention(entry)
    except ParplanError as exc:
        raise NotEvaluableError(exc.render()) from None
    except ValueError as exc:  # pydantic: a model block that is not a valid ModelSpec
        raise NotEvaluableError(str(exc).splitlines()[-1].strip()) from None
    notes += flash_notes
    return Case(entry["name"], spec, cluster, layout, metric, flash, value, basis, tuple(notes))


def load_cases(path: Path) -> tuple[list[Case], list[Skipped]]:
    """The evaluable runs of `path` and the others with their reasons, in file order."""
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for entry in data["configs"]:
        try:
            cases.append(case_from_entry(entry))
        except NotEvaluableError as exc:
            skipped.append(Skipped(entry["name"], str(exc)))
    return cases, skipped


# ---- evaluating ---------------------------------------------------------------------------------


def evaluate(model: Evaluator, cases: Sequence[Case]) -> list[Row]:
    """Predicted TFLOP/s per GPU of every case, in the metric its source uses."""
    rows = []
    for case in cases:
        result = model.evaluate(
            case.spec, case.cluster, case.layout, flash_attention=case.flash_attention
        ).estimate
        throughput = result.throughput
        predicted = (
            throughput.hardware_tflops_per_gpu
            if case.metric == "hardware"
            else throughput.model_tflops_per_gpu
        )
        rows.append(Row(case, predicted, result.memory.fits))
    return rows


BREAKDOWN_COLUMNS = (
    "step_s",
    "compute_s",
    "elementwise_s",  # a named formula of time.yaml, part of compute_s
    "tp_comm_s",
    "pp_comm_s",
    "dp_comm_s",
    "bubble_s",
    "optimizer_s",
)


def format_breakdown(rules: RuleSet, cases: Sequence[Case]) -> str:
    """Each run's predicted step time and its parts in seconds (dp_comm_s before overlap;
    compute_s includes elementwise_s, the memory-bound kernels)."""
    model = CostModel(rules)
    width = max([len(c.name) for c in cases] + [4])
    lines = [f"{'run':<{width}} " + " ".join(f"{c:>13}" for c in BREAKDOWN_COLUMNS)]
    for case in cases:
        layout = case.layout
        env = model.layout_env(
            case.spec, case.cluster, layout, flash_attention=case.flash_attention
        )
        figures = model.figures(env)
        values = [
            named_value(rules, c, env) if c == "elementwise_s" else figures[f"time_{c}"]
            for c in BREAKDOWN_COLUMNS
        ]
        lines.append(f"{case.name:<{width}} " + " ".join(f"{v:13.3f}" for v in values))
    return "\n".join(lines) + "\n"


def format_report(report: Report) -> str:
    """The per-row table, the MAPE and the skipped runs, as text."""
    name_width = max([len(r.case.name) for r in report.rows] + [4])
    head = (
        f"{'run':<{name_width}}  {'FLOPs':<8} {'predicted':>9} {'published':>9} {'error':>8}"
        "  published figure from"
    )
    lines = [head, "-" * len(head)]
    for row in report.rows:
        flag = "" if row.fits else " (does not fit)"
        lines.append(
            f"{row.case.name:<{name_width}}  {row.case.metric:<8} {row.predicted_tflops:9.1f} "
            f"{row.case.published_tflops:9.1f} {row.error_pct:+7.1f}%  {row.case.basis}{flag}"
        )
    lines.append("-" * len(head))
    lines.append(f"MAPE over {len(report.rows)} runs: {report.mape:.1f} %")
    if report.skipped:
        lines.append(f"\nnot evaluated ({len(report.skipped)}):")
        lines += [f"  {s.name}: {s.reason}" for s in report.skipped]
    notes = [(r.case.name, n) for r in report.rows for n in r.case.assumptions]
    if notes:
        lines.append("\nassumptions:")
        lines += [f"  {name}: {note}" for name, note in notes]
    return "\n".join(lines) + "\n"


# ---- fitting -----------------------------------------------------------------------------------

# The constants of rules/cost/ that no datasheet gives, with the range searched for each.
FIT_PARAMETERS_FILE = Path(__file__).resolve().parent / "fit_parameters.yaml"


def fit_parameters(path: Path = FIT_PARAMETERS_FILE) -> dict[str, tuple[float, float]]:
    """{formula name: (low, high)} of the constants `--fit` searches."""
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    return {name: (float(lo), float(hi)) for name, (lo, hi) in data["parameters"].items()}


FIT_PARAMETERS = fit_parameters()
FIT_STEPS = 13  # grid points per parameter and sweep
FIT_SWEEPS = 6  # sweeps, each on a grid narrowed around the last best value
FIT_NARROWING = 0.35  # fraction of the previous range kept around the best value


def load_rules_with(constants: Mapping[str, float], extra_rules: Sequence[str]) -> RuleSet:
    """rules/cost (and `extra_rules`) with `constants` overriding their named formulas."""
    with tempfile.TemporaryDirectory() as tmp:
        lines = ["formulas:"] + [f"  {k}: {v!r}" for k, v in constants.items()]
        (Path(tmp) / "fit.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return load_rules([builtin_rules_dir() / "cost", *extra_rules, tmp], builtin=False)


def _grid(lo: float, hi: float) -> list[float]:
    return [lo + (hi - lo) * i / (FIT_STEPS - 1) for i in range(FIT_STEPS)]


def fit(
    cases: Sequence[Case], start: Mapping[str, float], extra_rules: Sequence[str]
) -> tuple[dict[str, float], float]:
    """Coordinate descent on MAPE over FIT_PARAMETERS; returns (constants, MAPE)."""

    def mape(constants: Mapping[str, float]) -> float:
        model = Evaluator(load_rules_with(constants, extra_rules))
        return Report(evaluate(model, cases)).mape

    best = dict(start)
    best_mape = mape(best)
    ranges = dict(FIT_PARAMETERS)
    for _ in range(FIT_SWEEPS):
        for name, (lo, hi) in ranges.items():
            for value in _grid(lo, hi):
                trial = best | {name: round(value, 4)}
                score = mape(trial)
                if score < best_mape:
                    best, best_mape = trial, score
            half = (hi - lo) * FIT_NARROWING / 2
            bounds = FIT_PARAMETERS[name]
            ranges[name] = (max(bounds[0], best[name] - half), min(bounds[1], best[name] + half))
        print(f"  sweep: MAPE {best_mape:.2f} % at {best}", file=sys.stderr)
    return best, best_mape


def named_value(rules: RuleSet, formula: str, env: Mapping[str, Any]) -> float:
    """The value of `formula` (named formulas of `rules` allowed) in `env`."""
    where = SourceRef("benchmarks/calibration.py")
    return float(rules.library.compile(formula, where, "estimate", "number").evaluate(env))


def current_constants(rules: RuleSet) -> dict[str, float]:
    """The present values of FIT_PARAMETERS in `rules`."""
    return {name: named_value(rules, name, {}) for name in FIT_PARAMETERS}


# ---- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="?", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--rules", action="append", default=[], metavar="DIR")
    parser.add_argument("--fit", action="store_true", help="fit the efficiency constants")
    parser.add_argument("--breakdown", action="store_true", help="print each run's step time parts")
    args = parser.parse_args(argv)
    if not args.runs.is_file():
        out(f"no published runs at {args.runs} (give the path as an argument)")
        return 1
    cases, skipped = load_cases(args.runs)
    rules = load_rules([builtin_rules_dir() / "cost", *args.rules], builtin=False)
    if args.fit:
        constants, _ = fit(cases, current_constants(rules), args.rules)
        out("fitted constants (rules/cost/efficiency.yaml):")
        out("\n".join(f"  {k}: {v}" for k, v in constants.items()))
        rules = load_rules_with(constants, args.rules)
    out(format_report(Report(evaluate(Evaluator(rules), cases), skipped)))
    if args.breakdown:
        out(format_breakdown(rules, cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
