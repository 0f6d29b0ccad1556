"""The cost model: memory, time and throughput of one layout, from the rules' formulas.

Python gathers the inputs (model.*, cluster.*, train.*, plan.* values) and names the outputs;
every figure is a formula of the `estimate:` sections under rules/cost/, with its source. Each
kind of model has its own cost model; the model gives its model.* values (`formula_values`: a
transformer's per-token FLOPs and activation bytes, whose methods cite Narayanan 2021 /
Korthikanti 2022; an op graph's per-sample sums over the nodes). `CostModel.figures` is the
fast path the planner calls for many layouts. Whether a layout fits is for the constraint rules
to say (`planning.evaluate`), not for this module.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from parplan_gen.cost.catalog import Precision
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.host_links import host_bytes_per_s
from parplan_gen.cost.layout import (
    SIXTEEN_BIT,
    Layout,
    cross_entropy_value,
    ds_settings,
    fp8_recipe,
    loss_compiled_value,
    plan_values,
)
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import FormulaError, RuleError
from parplan_gen.models.kind import BackendName, ModelKind, TrainedModel
from parplan_gen.rules.layers import figure_label
from parplan_gen.rules.request_names import MEMORY_HEADROOM, MEMORY_HEADROOM_SHARE
from parplan_gen.rules.ruleset import RuleSet

MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "other")
# Memory figures that are not the GPU's (not in the total; 0 where the rules give none): the
# pinned host memory offloaded activations take (rules/cost/memory.yaml offload_host_bytes).
HOST_PARTS = ("host_offload",)
TIME_PARTS = (
    "step_s",
    "compute_s",
    "tp_comm_s",
    "cp_comm_s",
    "pp_comm_s",
    "dp_comm_s",
    "ep_comm_s",
    "bn_comm_s",
    "overlap_cost_s",
    "offload_s",
    "bubble_s",
    "optimizer_s",
)
# The part of a communication figure that the step waits for (the rest hides under compute):
# optional figures, absent from a plan.json written before plans carried them.
EXPOSED_PARTS = {"tp_comm_s": "tp_exposed_s", "dp_comm_s": "dp_exposed_s"}
EXPOSED_NAMES = frozenset(EXPOSED_PARTS.values())
# Of compute_s, the time the GPU waits for the host's kernel launches (rules/cost/moe.yaml
# moe_host_exposed_s): an optional figure, absent from a plan.json written before plans carried it.
HOST_WAIT = "host_wait_s"
THROUGHPUT_PARTS = ("tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu")
# The model FLOPs with the causal half of the attention scores (rules/cost/throughput.yaml):
# optional figures, absent from a plan.json written before plans carried them.
CAUSAL_PARTS = ("model_tflops_causal_per_gpu", "mfu_causal")
REQUIRED = {"memory": MEMORY_PARTS, "time": TIME_PARTS, "throughput": THROUGHPUT_PARTS}
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class _Figures(BaseModel):
    """Figures of which those named in OPTIONAL may be unknown (None: a plan.json written before
    estimates carried them); an unknown one is left out (plan.json as older versions wrote it)."""

    model_config = _FROZEN
    OPTIONAL: ClassVar[Collection[str]] = ()

    @model_serializer(mode="wrap")
    def _without_unknown(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None or k not in self.OPTIONAL}


class MemoryBreakdown(_Figures):
    """Bytes per GPU on the most loaded GPU."""

    OPTIONAL = ("kept_free",)
    params: int
    grads: int
    optimizer: int
    activations: int
    other: int
    total: int
    capacity: int
    fits: bool  # the memory rules hold (planning.evaluate), not total <= capacity
    # Host memory per GPU, not in `total` (HOST_PARTS; absent in older plan.json).
    host_offload: int = 0
    # What the memory rule keeps free beside `total` for this layout (plan's headroom, the
    # rule memory_kept_free of rules/constraints/headroom.yaml; 0 for estimate and check; None:
    # a plan.json written before estimates carried it, whose headroom is search.headroom_bytes).
    kept_free: int | None = None

    @property
    def needed(self) -> int:
        """What the memory rule asks of the GPU: the total and what it keeps free."""
        return self.total + (self.kept_free or 0)

    def kept_free_text(self) -> str:
        """` and 7.9 GiB kept free` where the total fits the GPU and what the memory rule keeps
        free does not (then it is why the layout does not fit), else ""."""
        kept = self.kept_free or 0
        fits_alone = self.total <= self.capacity < self.needed
        return f" and {kept / GIB:.1f} GiB kept free" if fits_alone else ""

    def shortfall(self) -> str:
        """By how much the GPU's memory falls short, in words: `12.3 GiB over` (the total
        alone), `1.2 GiB over keeping 7.9 GiB free` (what the memory rule keeps free is why);
        "" where both fit (another memory rule breaks, or none)."""
        if self.total > self.capacity:
            return f"{(self.total - self.capacity) / GIB:.1f} GiB over"
        if self.needed > self.capacity:
            over, kept = self.needed - self.capacity, self.kept_free or 0
            return f"{over / GIB:.1f} GiB over keeping {kept / GIB:.1f} GiB free"
        return ""


@dataclass(frozen=True)
class MemoryHeadroom:
    """The memory a plan keeps free per GPU, as the memory rule reads it (train.* names):
    `bytes` whatever the layout (`plan --headroom 4` or `10%`) and a `share` of the layout's
    tensors (the default, rules/constraints/headroom.yaml)."""

    bytes: float = 0.0
    share: float = 0.0

    def env(self) -> dict[str, float]:
        """The train.* values the memory rule reads."""
        return {MEMORY_HEADROOM: self.bytes, MEMORY_HEADROOM_SHARE: self.share}


NO_HEADROOM = MemoryHeadroom()  # estimate and check: the whole GPU


class TimeBreakdown(_Figures):
    """Seconds per optimizer step; step_s is what the parts add up to once overlap is applied."""

    OPTIONAL = EXPOSED_NAMES | {HOST_WAIT}
    step_s: float
    compute_s: float
    tp_comm_s: float
    cp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    ep_comm_s: float
    bn_comm_s: float = 0.0  # SyncBatchNorm statistics (graph models); absent in older plan.json
    # What hidden communication costs the compute beside it (absent in older plan.json).
    overlap_cost_s: float = 0.0
    # The host-link copies of offloaded activations left exposed (absent in older plan.json).
    offload_s: float = 0.0
    bubble_s: float
    optimizer_s: float
    # What of tp_comm_s / dp_comm_s is exposed (not hidden behind compute); None: a plan.json
    # written before estimates carried it.
    tp_exposed_s: float | None = None
    dp_exposed_s: float | None = None
    # Of compute_s, the GPU's wait for the host's kernel launches (MoE layers); None: a
    # plan.json written before estimates carried it.
    host_wait_s: float | None = None

    @property
    def sync_batchnorm(self) -> bool:
        """Whether the plan synchronises BatchNorm statistics (PyTorch SyncBatchNorm), as the cost
        model states it: rules/cost/graph.yaml pays for the exchange (graph_bn_comm_s) exactly
        when its `sync_batchnorm` holds, so this figure, which plan.json keeps, carries the fact
        to the renderer under any rules overlay."""
        return self.bn_comm_s > 0


class Throughput(_Figures):
    """Rates over one step. The model FLOPs count the whole s x s attention-score matrix; the
    `*_causal*` figures count its causal half (rules/cost/throughput.yaml). None: a plan.json
    written before estimates carried them."""

    OPTIONAL = CAUSAL_PARTS
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    model_tflops_causal_per_gpu: float | None = None
    mfu_causal: float | None = None


class BackendRef(BaseModel):
    """The framework that runs a plan and the release its constraints and files follow."""

    model_config = _FROZEN
    name: BackendName
    version: str


class Estimate(BaseModel):
    """One layout's predicted memory, time and throughput, and the backend that runs it (None:
    a plan.json written before plans named their backend, or a layout estimated on its own)."""

    model_config = _FROZEN
    backend: BackendRef | None = None
    plan: Layout
    memory: MemoryBreakdown
    time: TimeBreakdown
    throughput: Throughput

    def contract(self) -> dict[str, Any]:
        """The DESIGN.md JSON shape: plan, memory, time, throughput."""
        return self.model_dump(mode="json")


# What the frameworks parplan renders for can do, as the rules name it: each backend overlaps
# TP traffic where the layout allows it (rules/cost/time.yaml tp_comm_overlapped), torchtitan
# 0.3's configs compute the loss in sequence chunks (rules/cost/memory.yaml logits_bytes), and
# its tensor-parallel sharding gathers 16-bit inputs whatever the linear layers quantize to
# (time.yaml tp_fp8_gathers), and interleaved schedules overlap the pipeline's transfers with
# compute (time.yaml pp_p2p_overlapped), and Megatron-LM pairs micro-batches to hide the expert
# all-to-alls (moe.yaml moe_a2a_overlapped), and torchtitan passes the key/value heads to
# attention unrepeated (context.yaml cp_kv_heads), and PyTorch's scaled_dot_product_attention
# runs cuDNN's attention on Hopper and Blackwell (context.yaml sdpa_attention_efficiency);
# calibration sets them for each source as its framework ran. The loss kernel is the layout's
# (cost/layout.py cross_entropy_value). torchtitan 0.3 wraps FSDP2 as its
# distributed/fsdp.py apply_fsdp_to_decoder does (memory.yaml fsdp2_root_params).
FRAMEWORK_FEATURES: dict[str, Any] = {
    "train.tp_comm_overlap": True,
    "train.chunked_loss": True,
    "train.tt_fsdp_units_03": True,
    "train.torchao_float8_tp": False,
    "train.kv_heads_repeated": False,
    "train.tt_fused_qkv": True,
    "train.sdpa_cudnn": True,
    "train.p2p_overlap": True,
    "train.zero3_overlap": True,
    "train.moe_a2a_overlap": True,
}


def cluster_env(cluster: Cluster, precision: Precision) -> dict[str, Any]:
    """cluster.* values of `cluster` (the peak at `precision`)."""
    return {
        "cluster.gpus": cluster.num_gpus,
        "cluster.devices": cluster.num_gpus,
        "cluster.gpus_per_node": cluster.procs_per_node,
        "cluster.nvlink_domain": cluster.nvlink_gpus,
        "cluster.nodes": cluster.num_nodes,
        "cluster.gpu_memory": cluster.gpu.memory_bytes,
        "cluster.peak_flops": cluster.gpu.peak_flops(precision),
        "cluster.peak_flops_16bit": cluster.gpu.peak_flops(SIXTEEN_BIT[precision]),
        "cluster.gemm_max_fraction": cluster.gpu.gemm_max_fraction(precision),
        "cluster.gemm_max_fraction_16bit": cluster.gpu.gemm_max_fraction(SIXTEEN_BIT[precision]),
        "cluster.hbm_bandwidth": cluster.gpu.memory_bandwidth_bytes_per_s,
        "cluster.intra_bandwidth": cluster.intra_node_bytes_per_s,
        "cluster.intra_latency": cluster.intra_node_latency_s,
        "cluster.inter_bandwidth": cluster.inter_node_bytes_per_s,
        "cluster.inter_latency": cluster.inter_node_latency_s,
        "cluster.host_bandwidth": host_bytes_per_s(cluster.gpu.name),
        "cluster.host_memory": cluster.host_memory_per_gpu,
        "cluster.nvswitch": cluster.nvswitch,
        "cluster.intra_node_link": cluster.gpu.intra_node_link,
        "cluster.architecture": cluster.gpu.architecture,
        **_measured_env(cluster, precision),
    }


# cluster.measured_* name -> the MeasuredFigures field it reads (cost/measured.py), `{p}`: the
# precision (the run's, or its 16-bit one).
MEASURED_NAMES = {
    "cluster.measured_gemm_fraction": "gemm_fraction_{p}",
    "cluster.measured_gemm_fraction_16bit": "gemm_fraction_{p16}",
    "cluster.measured_attention_max_fraction": "attention_max_fraction",
    "cluster.measured_attention_half_seq": "attention_half_seq",
    "cluster.measured_intra_bus_bandwidth": "intra_bus_bytes_per_s",
    "cluster.measured_inter_bus_bandwidth": "inter_bus_bytes_per_s",
    "cluster.measured_context_bytes": "context_bytes",
    "cluster.measured_host_launch_s": "host_launch_s",
}


def _measured_env(cluster: Cluster, precision: Precision) -> dict[str, float]:
    """The figures of the cluster's profile (`parplan profile`, cost/measured.py) under their
    cluster.* names; 0 for each the cluster was not profiled for."""
    figures = cluster.measured
    env = {}
    for name, field in MEASURED_NAMES.items():
        attribute = field.format(p=precision, p16=SIXTEEN_BIT[precision])
        value = None if figures is None else getattr(figures, attribute, None)
        env[name] = float(value or 0.0)
    return env


def figure_error(name: str, exc: FormulaError) -> FormulaError:
    """`exc` from the formula of figure `name` (`<section>_<key>`), named as the rule file names
    it (`estimate.memory.other`); not named twice when the error's place already names it."""
    figure = f"estimate.{name.replace('_', '.', 1)}"
    if exc.where is not None and exc.where.path == figure:
        return exc
    return FormulaError(f"{figure}: {exc.message}", exc.where)


class CostModel:
    """The `estimate:` formulas of a RuleSet for one kind of model, ready to evaluate for many
    layouts."""

    def __init__(
        self, rules: RuleSet, kind: ModelKind = "transformer", backend: str | None = None
    ) -> None:
        self.kind, self.backend = kind, backend
        self.formulas = {(e.section, e.key): e for e in rules.estimate if e.model_kind == kind}
        for section, keys in REQUIRED.items():
            for key in keys:
                if (section, key) not in self.formulas:
                    label = figure_label((kind, section, key))
                    raise RuleError(f"the rules define no formula for {label}")
        self._all = Figures(self, [f"{s}_{k}" for s, k in self.formulas], memory=True)

    def base_env(
        self,
        spec: TrainedModel,
        cluster: Cluster,
        *,
        global_batch: int,
        seq_len: int,
        precision: Precision = "bf16",
        flash_attention: bool = True,
        memory_headroom: MemoryHeadroom = NO_HEADROOM,
    ) -> dict[str, Any]:
        """model.*, cluster.* and train.* values: everything but the layout. `memory_headroom`:
        what a plan keeps free per GPU (`plan --headroom`; none for estimate and check)."""
        train = {
            "train.global_batch": global_batch,
            "train.seq_len": seq_len,
            "train.precision": precision,
            "train.flash_attention": flash_attention,
            "train.backend": self.backend or "",
            "train.fp8_recipe": fp8_recipe(cluster.gpu.architecture, self.backend),
            "train.cross_entropy_fusion": cross_entropy_value(None, self.backend),
            "train.loss_compiled": loss_compiled_value(None, self.backend),
            **ds_settings(None),
            **FRAMEWORK_FEATURES,
            **memory_headroom.env(),
        }
        return {**spec.formula_values(seq_len), **cluster_env(cluster, precision), **train}

    def figures(
        self, env: Mapping[str, Any], memo: dict[str, object] | None = None
    ) -> dict[str, float]:
        """Every figure as `<section>_<key>` (memory_total and memory_capacity included);
        `memo`: the named formulas' values for `env` (see `Figures.__call__`)."""
        return self._all(env, memo)

    def layout_env(
        self,
        spec: TrainedModel,
        cluster: Cluster,
        layout: Layout,
        *,
        flash_attention: bool = True,
        memory_headroom: MemoryHeadroom = NO_HEADROOM,
    ) -> dict[str, Any]:
        """Every name a cost or constraint formula may read for one layout."""
        env = self.base_env(
            spec,
            cluster,
            global_batch=layout.global_batch,
            seq_len=layout.seq_len,
            precision=layout.precision,
            flash_attention=flash_attention,
            memory_headroom=memory_headroom,
        )
        env.update(plan_values(layout))
        env["train.cross_entropy_fusion"] = cross_entropy_value(
            layout.cross_entropy_fusion, self.backend
        )
        env["train.loss_compiled"] = loss_compiled_value(layout.loss_compiled, self.backend)
        env.update(ds_settings(layout))
        return env


class Figures:
    """Some of a cost model's figures, in rule order: the planner's search needs few of them
    (the throughput ones repeat the step time). With `memory=True` every memory part is
    computed and memory_total (their sum) and memory_capacity (the GPU's) are added."""

    def __init__(self, cost: CostModel, needed: Iterable[str], *, memory: bool) -> None:
        want = set(needed) | ({f"memory_{p}" for p in MEMORY_PARTS} if memory else set())
        self._items = [
            (name, e.formula)
            for (section, key), e in cost.formulas.items()
            if (name := f"{section}_{key}") in want
        ]
        self._memory = memory

    def __call__(
        self, env: Mapping[str, Any], memo: dict[str, object] | None = None
    ) -> dict[str, float]:
        """The figures for `env`. `memo` holds the values of the named formulas computed for
        `env` so far (`Formula.evaluate`): one dict for every figure and rule of one layout, so
        that a named formula that many of them use (the step time) is computed once."""
        out: dict[str, float] = {}
        memo = {} if memo is None else memo
        for name, formula in self._items:
            try:
                value = formula.evaluate(env, memo)
            except FormulaError as exc:
                raise figure_error(name, exc) from None
            if not isinstance(value, int | float):  # never: a figure is compiled as a number
                raise TypeError(f"figure {name} gave {value!r}, not a number")
            out[name] = value
        if self._memory:
            out["memory_total"] = sum(out[f"memory_{p}"] for p in MEMORY_PARTS)
            out["memory_capacity"] = env["cluster.gpu_memory"]
        return out


def estimate_from_figures(
    layout: Layout,
    figures: Mapping[str, float],
    *,
    fits: bool,
    backend: BackendRef | None = None,
    kept_free: float = 0.0,
) -> Estimate:
    """Build the typed Estimate from a `figures` mapping; `fits` is the memory rules' verdict
    and `kept_free` what they keep free (`planning.evaluate`), which this module does not
    judge."""
    memory = {p: round(figures[f"memory_{p}"]) for p in MEMORY_PARTS}
    total = sum(memory.values())
    host = {p: round(figures.get(f"memory_{p}", 0)) for p in HOST_PARTS}
    capacity = int(figures["memory_capacity"])
    return Estimate(
        backend=backend,
        plan=layout,
        memory=MemoryBreakdown(
            **memory,
            total=total,
            capacity=capacity,
            fits=fits,
            **host,
            kept_free=round(kept_free),
        ),
        time=TimeBreakdown(
            **{p: float(figures[f"time_{p}"]) for p in TIME_PARTS},
            **{
                p: float(figures[f"time_{p}"])
                for p in (*EXPOSED_PARTS.values(), HOST_WAIT)
                if f"time_{p}" in figures
            },
        ),
        throughput=Throughput(
            **{
                p: float(figures[f"throughput_{p}"])
                for p in (*THROUGHPUT_PARTS, *CAUSAL_PARTS)
                if f"throughput_{p}" in figures
            }
        ),
    )
