"""plan.json: the chosen plan with everything needed to render it again.

`PlanDocument` holds the model, the cluster's hardware (`cluster`), its launch site (`launch`)
and budget inputs (`budget_inputs`), the chosen estimate and the runners-up, the rejection
counts, the planner's advice, the rules' proposals (with the settings they contribute), the
search it was made under and the render options. It holds no timestamps and no absolute
paths, so the same plan always serialises to the same bytes; `parplan render plan.json --out
DIR` re-renders it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_serializer,
    model_validator,
)

from parplan_gen.cost.budget_figures import BudgetInputs
from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.launch_site import LaunchSettings, with_slurm_flags
from parplan_gen.cost.layout import Layout
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.key_path import KeyPath, format_path
from parplan_gen.inputs.safe_text import NOT_PLAIN_NAME, is_plain, printable
from parplan_gen.inputs.source import load_mapping_document
from parplan_gen.inputs.validation import validate
from parplan_gen.models.any_model import AnyModelSpec, DocumentModel
from parplan_gen.models.kind import BackendName
from parplan_gen.planning.budget import Budget
from parplan_gen.planning.decisions import BackendDecisions, decide
from parplan_gen.planning.evaluate import backend_verdicts
from parplan_gen.planning.pins import Headroom, SearchLimits, SearchRecord, headroom_record
from parplan_gen.planning.search_choices import SearchChoices, choose
from parplan_gen.rules.engine import Proposal
from parplan_gen.rules.ruleset import RuleSet

FORMAT_VERSION: Literal[3] = 3
# left out of plan.json and `plan --json` when unset
OPTIONAL = {"launch", "budget_inputs", "best_on", "budget"}
JSON_INDENT = 2  # plan.json is meant to be read and diffed by people
# The names a terminal shows and the launch files carry (in comments, reduced to a safe set):
# none may hold a control, format or line-break character (safe_text.printable escapes them).
NAMES: tuple[KeyPath, ...] = (
    ("model", "name"),
    ("cluster", "name"),
    ("cluster", "gpu", "name"),
    ("cluster", "gpu", "display_name"),
)
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
# Budget figures given together (planning/budget.py sets all three with a price, none without):
# plan.md writes the cost with its price and source.
PRICED = ("gpu_hour_price", "price_source", "cost")


class PlanDocumentError(InputError):
    """A plan.json that cannot be read back (wrong version, unknown keys, bad values)."""


class RenderOptions(BaseModel):
    """Which template folders render the plan (None: the latest shipped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    megatron_version: str | None = Field(None, description="e.g. `core_v0.16`.")
    deepspeed_version: str | None = Field(None, description="e.g. `0.19`.")


class PlanDocument(BaseModel):
    """The content of plan.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[3] = Field(FORMAT_VERSION, description="Version of this layout.")
    model: DocumentModel = Field(
        description="The transformer's ModelSpec, or an op-graph model's GraphModelSpec "
        "(`kind: graph`)."
    )
    cluster: Cluster = Field(description="The hardware, as the cost model priced it.")
    launch: LaunchSettings | None = Field(
        None,
        description="The launch site the files are written for (node names, CPUs, SLURM, the "
        "NCCL NICs and RoCE settings). Absent when the cluster file and flags give none.",
    )
    budget_inputs: BudgetInputs | None = Field(
        None,
        description="The budget inputs the cluster file gave (price, MTBF, storage). Absent "
        "when it gives none.",
    )
    chosen: Estimate = Field(description="The chosen layout and its estimate.")
    candidates: list[Estimate] = Field(description="The top candidates, best first.")
    rejected: dict[str, StrictInt] = Field(
        description="Rejected candidates, counted by the rule that rejected them: `reason [rule "
        "id: field low..high]` (the rule's reason for the first candidate it rejected, and the "
        "range of each plan field it reads that took more than one value; "
        "planning/rejections.py) -> candidates. Most first as the search counted them (the "
        "order of the text view), sorted in plan.json and `plan --json`."
    )
    advice: list[str] = Field(description="The planner's advice, in its order.")
    warnings: list[str] = Field(
        default_factory=list,
        description="Sanity warnings on the chosen plan (planning.sanity: sequence beyond the "
        "trained context, FP8 without calibration runs, MFU above the best published run of its "
        "class); never errors. Absent when there is none.",
    )
    feasible: StrictBool = Field(
        description="Whether the chosen layout runs and fits. False: nothing of the request "
        "does; `chosen` is the closest candidate and `advice` says what change would fit."
    )
    proposals: list[Proposal] = Field(description="The rules' proposals, in rule order.")
    backends: dict[str, str | None] = Field(
        description="For each backend that trains the model: null when it runs the chosen "
        "layout exactly (its files are written), else why not (they are not), by the rules "
        "the plan was made with."
    )
    decisions: dict[BackendName, BackendDecisions] = Field(
        description="For each backend that runs the chosen layout: what the plan's rules (the "
        "built-in ones and any overlay) decided for its files, evaluated when the plan was made "
        "(planning/decisions.py). The renderer reads these, never the rules."
    )
    render: RenderOptions = Field(default_factory=RenderOptions)
    best_on: BackendName | None = Field(
        None,
        description="Set by `plan --all-backends`: the search was restricted to this backend, "
        "so this is its own best plan, not necessarily the overall best. Absent when unset.",
    )
    search: SearchRecord = Field(
        description="The pins, bounds, memory headroom and search options of the search."
    )
    budget: Budget | None = Field(
        None, description="With `plan --tokens`: the training budget. Absent otherwise."
    )

    @property
    def runners_up(self) -> list[Estimate]:
        """The candidates other than the chosen plan, best first."""
        return [e for e in self.candidates if e != self.chosen]

    def kept_free(self, estimate: Estimate) -> int:
        """What the plan of `estimate` keeps free beside its memory: the estimate's own figure,
        or in a plan.json written before estimates carried it, the search's headroom in bytes
        (those plans kept no share of the tensors)."""
        kept = estimate.memory.kept_free
        return self.search.headroom_bytes if kept is None else kept

    @field_serializer("rejected")
    def _by_reason(self, rejected: dict[str, int]) -> dict[str, int]:
        return dict(sorted(rejected.items()))

    @model_validator(mode="after")
    def _portable(self) -> PlanDocument:
        data = self.model_dump(mode="json")
        bad_name = next(_unprintable_names(data), None)
        if bad_name is not None:
            raise ValueError(f"{format_path(bad_name[0])}: {bad_name[1]}")
        for where, text in _strings(data):
            if _is_absolute(text):
                raise ValueError(f"{where}: absolute path {text!r} does not belong in plan.json")
        problem = None if self.launch is None else self.launch.names_problem(self.cluster.num_nodes)
        if problem:
            raise ValueError(f"launch.node_names: {problem}")
        world = self.cluster.num_gpus
        for name, estimate in (("chosen", self.chosen), *_numbered(self.candidates)):
            if estimate.plan.world_size != world:
                raise ValueError(
                    f"{name}: dp*tp*pp*cp = {estimate.plan.world_size} != cluster.num_gpus({world})"
                )
        return self

    @classmethod
    def from_parts(
        cls,
        *,
        model: AnyModelSpec,
        cluster: Cluster,
        launch: LaunchSettings | None = None,
        budget_inputs: BudgetInputs | None = None,
        chosen: Estimate,
        candidates: Iterable[Estimate] = (),
        rejected: Mapping[str, int] | None = None,
        advice: Iterable[str] = (),
        warnings: Iterable[str] = (),
        proposals: Iterable[Proposal] = (),
        megatron_version: str | None = None,
        deepspeed_version: str | None = None,
        search: SearchRecord | None = None,
        budget: Budget | None = None,
        feasible: bool = True,
        rules: RuleSet,
    ) -> PlanDocument:
        """Assemble a document from the planner's result and the engine's proposals. `rules`,
        the rules the plan was made with, judge which backends run the chosen layout and
        decide what their files say (`decisions`). `search` is the search the plan was made
        under; None: a request that gives no pins, bounds, headroom or search options, its
        record resolved here with `rules` (`default_search`).

        A model name that is a path (a config read by its absolute path) keeps only its last
        component, so that plan.json stays portable.
        """
        if _is_absolute(model.name):
            model = model.model_copy(update={"name": _last_component(model.name)})
        parts = {"model": model.model_dump(mode="json"), "cluster": cluster.model_dump(mode="json")}
        bad_name = next(_unprintable_names(parts), None)
        if bad_name is not None:
            raise PlanDocumentError(f"{format_path(bad_name[0])}: {bad_name[1]}")
        priced_on = chosen.backend.name if chosen.backend else None
        runs = backend_verdicts(model, cluster, chosen.plan, rules, priced_on)
        if search is None:
            search = default_search(rules, model, cluster, chosen.plan)
        return cls(
            model=model,
            cluster=cluster,
            launch=launch,
            budget_inputs=budget_inputs,
            chosen=chosen,
            candidates=list(candidates),
            rejected=dict(rejected or {}),
            advice=list(advice),
            warnings=list(warnings),
            feasible=feasible,
            proposals=list(proposals),
            backends=runs,
            decisions=decide(model, cluster, chosen.plan, rules, runs),
            render=RenderOptions(
                megatron_version=megatron_version, deepspeed_version=deepspeed_version
            ),
            search=search,
            budget=budget,
        )

    def with_render_options(
        self, *, megatron_version: str | None = None, deepspeed_version: str | None = None
    ) -> PlanDocument:
        """A copy whose render options are replaced where a value is given."""
        options = self.render.model_copy(
            update={
                k: v
                for k, v in (
                    ("megatron_version", megatron_version),
                    ("deepspeed_version", deepspeed_version),
                )
                if v is not None
            }
        )
        return self.model_copy(update={"render": options})

    def with_slurm(self, **given: str | int | None) -> PlanDocument:
        """A copy whose launch site's SLURM `account`, `partition`, `time` and `cpus_per_node`
        are replaced where given (`parplan render --slurm-*`); a UsageError names a bad one."""
        return self.model_copy(update={"launch": with_slurm_flags(self.launch, **given)})

    def contract(self) -> dict[str, Any]:
        """plan.json's content, which `plan --json` prints: the optional sections only when
        set, `feasible` (whether the chosen layout fits) and, when nothing does, the `advice`."""
        unset = {k for k in OPTIONAL if getattr(self, k) is None}
        unset |= set() if self.warnings else {"warnings"}  # absent when none: plan.json as before
        data = self.model_dump(mode="json", exclude=unset)
        bad = next(_non_finite(data), None)
        if bad is not None:
            raise PlanDocumentError(
                f"plan.json: {format_path(bad[0])} is {bad[1]}; a cost-model formula gave a "
                "value that is not a finite number (check the --rules that change the cost model)"
            )
        return data

    def to_json(self) -> str:
        """plan.json's text: the same document always gives the same bytes."""
        data = self.contract()
        return json.dumps(data, indent=JSON_INDENT, ensure_ascii=False, allow_nan=False) + "\n"


def load_plan_document(path: str | Path) -> PlanDocument:
    """Read plan.json; every mistake is a PlanDocumentError at `file:line:col`."""
    doc = load_mapping_document(path, "plan.json holds one JSON object", PlanDocumentError)
    version = doc.data.get("format_version")
    if version != FORMAT_VERSION:
        raise PlanDocumentError(
            f"format_version {version!r} is not supported (this parplan reads {FORMAT_VERSION})",
            doc.ref(("format_version",)),
        )
    bad = next(_non_finite(doc.data), None)
    if bad is not None:
        raise PlanDocumentError(f"{bad[1]} is not a finite number", doc.ref(bad[0]))
    bad_name = next(_unprintable_names(doc.data), None)
    if bad_name is not None:
        raise PlanDocumentError(bad_name[1], doc.ref(bad_name[0]))
    # strict: parplan writes plan.json, so `true` is no layer count and `1.5` or "8" no size, in
    # every model the document nests
    plan = validate(PlanDocument, doc.data, doc, error=PlanDocumentError, strict=True)
    if plan.budget is not None:
        given = [key for key in PRICED if getattr(plan.budget, key) is not None]
        if given and len(given) < len(PRICED):
            null = next(key for key in PRICED if key not in given)
            raise PlanDocumentError(
                f"is null, but budget.{given[0]} is given (valid: {', '.join(PRICED)} all "
                "given, or all null when no price was)",
                doc.ref(("budget", null)),
            )
    return plan


def default_search(
    rules: RuleSet, model: AnyModelSpec, cluster: Cluster, layout: Layout
) -> SearchRecord:
    """The search record of a request for `layout`'s batch, sequence and precision that gives
    no pins, bounds, headroom or search options: each its rule's default with `rules`."""
    record = headroom_record(Headroom(), SearchLimits(), cluster, rules, layout.precision)
    chosen = choose(
        SearchChoices(),
        rules,
        model,
        cluster,
        global_batch=layout.global_batch,
        seq_len=layout.seq_len,
        precision=layout.precision,
        memory_headroom=record.memory_headroom,
    )
    return record.with_options(chosen)


def _unprintable_names(data: Any) -> Iterator[tuple[KeyPath, str]]:
    """(path, problem) of each name in NAMES that holds a character safe_text.printable would
    escape (NUL, ESC, a line break, a bidi override...)."""
    for path in NAMES:
        value: Any = data
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and not is_plain(value):
            yield path, f"'{printable(value)}' {NOT_PLAIN_NAME}"


def _numbered(estimates: list[Estimate]) -> list[tuple[str, Estimate]]:
    return [(f"candidates[{i}]", e) for i, e in enumerate(estimates)]


def _non_finite(data: Any, path: KeyPath = ()) -> Iterator[tuple[KeyPath, float]]:
    """Every float in `data` that is NaN or infinite (JSON's 1e400 reads as inf), with its path."""
    if isinstance(data, float) and not math.isfinite(data):
        yield path, data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _non_finite(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _non_finite(value, (*path, index))


def _strings(data: Any, where: str = "") -> Iterable[tuple[str, str]]:
    """Every string value in `data` with its key path."""
    if isinstance(data, str):
        yield where, data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, f"{where}[{index}]")


def _is_absolute(text: str) -> bool:
    """A POSIX absolute path, a home-relative path or a Windows drive path."""
    return text.startswith(("/", "~/")) or bool(_WINDOWS_DRIVE.match(text))


def _last_component(text: str) -> str:
    path = PureWindowsPath(text) if _WINDOWS_DRIVE.match(text) else PurePosixPath(text)
    return path.name or "model"
