"""Layouts side by side, term by term, and one sentence per term that differs.

`compare_estimates` sets two or more estimates in columns (the first is the one explained: the
chosen plan), each memory part, time part, the communication hidden by overlap, the step and MFU
in rows, and says for every term where the first and another column differ why, from the
figures: the sentence templates and each term's drivers (the layout fields its formulas read)
are in templates/report/compare.yaml. `parplan compare`, `parplan_gen.compare` and plan.md's
"Why this plan" (the chosen plan against the runner-up) all read this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.published import load_published
from parplan_gen.inputs.defaults import GIB, MIB
from parplan_gen.inputs.safe_text import markdown
from parplan_gen.inputs.source import load_document
from parplan_gen.inputs.validation import validate
from parplan_gen.planning.backend_planner import parallel_dims
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluation
from parplan_gen.render.checks import RenderError
from parplan_gen.render.labels import MS_PER_S, gib, layout_labels, seconds
from parplan_gen.render.template_env import Templates

COMPARE_FILE = "report/compare.yaml"
STEP_TERMS = ("overlap_s", "step_s")  # time rows every kind of model has
_STRICT = ConfigDict(extra="forbid", frozen=True)


class Term(BaseModel):
    model_config = _STRICT
    term: str
    label: str
    group: Literal["memory", "time", "throughput"]
    what: str
    better: Literal["low", "high"]
    drivers: list[str]


class CompareFile(BaseModel):
    """templates/report/compare.yaml."""

    model_config = _STRICT
    terms: list[Term]
    sentences: dict[str, str]
    fields: dict[str, str]


@lru_cache(maxsize=1)
def compare_file() -> CompareFile:
    """The built-in templates/report/compare.yaml, validated (read once)."""
    doc = load_document(Templates.at().find(COMPARE_FILE))
    return validate(CompareFile, doc.data, doc, error=RenderError)


@dataclass(frozen=True)
class Column:
    """One layout compared: its label (the layout itself), its estimate, what it is (`chosen`,
    `runner-up`, `yours`) and why the planner would not run it (None: it runs as given)."""

    label: str
    role: str
    estimate: Estimate
    problem: str | None = None


@dataclass(frozen=True)
class Row:
    """One term: its value in each column (bytes, seconds or a fraction) and as shown."""

    term: str
    label: str
    group: str
    values: tuple[float, ...]
    shown: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """Columns, rows, and for each column after the first the sentences that explain it."""

    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    sentences: tuple[tuple[str, tuple[str, ...]], ...]  # (other column's label, sentences)

    def contract(self) -> dict[str, Any]:
        """JSON: the columns (label, role, problem, estimate), the rows and the sentences."""
        return {
            "columns": [
                {
                    "label": c.label,
                    "role": c.role,
                    "problem": c.problem,
                    "estimate": c.estimate.contract(),
                }
                for c in self.columns
            ],
            "rows": [
                {"term": r.term, "group": r.group, "values": list(r.values), "shown": list(r.shown)}
                for r in self.rows
            ],
            "why": [{"against": label, "sentences": list(s)} for label, s in self.sentences],
        }


def _shown(term: str, group: str, value: float) -> str:
    """Memory in GiB, time in s or ms (the step to the millisecond), fractions in %."""
    if group == "memory":
        return gib(value) if abs(value) >= GIB / 10 or value == 0 else f"{value / MIB:,.0f} MiB"
    if term == "step_s":  # to a thousandth, so that close steps still differ
        return f"{value:,.3f} s" if abs(value) >= 1 else f"{value * MS_PER_S:,.2f} ms"
    return seconds(value) if group == "time" else f"{value:.1%}"


def _value(e: Estimate, term: str, time_parts: Sequence[str]) -> float:
    """The term's figure in `e`; `overlap_s`: what the time parts add up to beyond the overlapped
    step (none when the step is the longer: nothing was hidden)."""
    if term == "overlap_s":
        parts = e.time.model_dump()
        return max(0.0, sum(parts[k] for k in time_parts) - e.time.step_s)
    for part in (e.memory, e.time, e.throughput):
        if term in type(part).model_fields:
            return float(getattr(part, term))
    raise RenderError(f"{COMPARE_FILE}: unknown term {term!r}")


def compare_estimates(
    cluster: Cluster,
    columns: Sequence[tuple[str, Estimate, str | None]],
    time_parts: Sequence[str],
    dims: Sequence[str],
) -> Comparison:
    """Compare (role, estimate, problem) columns; the first is the one explained. The time rows
    are the model kind's `time_parts`, the communication they hide and the step; the columns'
    labels name the kind's layout dimensions `dims` only."""
    if len(columns) < 2:
        raise RenderError("compare: give at least two layouts")
    spec = compare_file()
    labels = layout_labels([e for _, e, _ in columns], dims)
    cols = tuple(
        Column(label, role, e, problem)
        for label, (role, e, problem) in zip(labels, columns, strict=True)
    )
    rows = []
    terms = [t for t in spec.terms if t.group != "time" or t.term in (*time_parts, *STEP_TERMS)]
    for t in terms:
        values = tuple(_value(c.estimate, t.term, time_parts) for c in cols)
        rows.append(
            Row(
                t.term,
                t.label,
                t.group,
                values,
                tuple(_shown(t.term, t.group, v) for v in values),
            )
        )
    why = tuple(
        (other.label, _sentences(spec, terms, cluster, cols[0], other, index, rows))
        for index, other in enumerate(cols[1:], 1)
    )
    return Comparison(cols, tuple(rows), why)


def _sentences(
    spec: CompareFile,
    terms: Sequence[Term],
    cluster: Cluster,
    a: Column,
    b: Column,
    index: int,
    rows: Sequence[Row],
) -> tuple[str, ...]:
    out = []
    said = spec.sentences
    a_faster = a.estimate.time.step_s < b.estimate.time.step_s
    for t, row in zip(terms, rows, strict=True):
        va, vb = row.values[0], row.values[index]
        kind = t.term.removesuffix("_s") if t.term in ("step_s", "mfu", "overlap_s") else t.group
        if row.shown[0] == row.shown[index]:
            if kind != "step":
                continue  # the same figure as shown: nothing to explain
            side = "same"
        else:
            side = "low" if va < vb else "high"
        fields = {
            "a": a.label, "b": b.label, "what": t.what,
            "a_value": row.shown[0], "b_value": row.shown[index],
            "delta": _shown("", t.group, abs(va - vb)),
            "saving": f"{(vb - va) / vb:.2%}" if vb else "-",
            "because": _because(spec, cluster, t.drivers, a, b),
            "still_fits": said["still_fits"].format(capacity=gib(a.estimate.memory.capacity))
            if a.estimate.memory.fits else "",
            "win_back": said["win_back"] if a_faster else "",
            "b_problem": said["b_problem"].format(b=b.label, problem=b.problem) if b.problem else "",
        }  # fmt: skip
        out.append(said[f"{kind}_{side}"].format_map(fields))
    return tuple(out)


def _because(spec: CompareFile, cluster: Cluster, drivers: list[str], a: Column, b: Column) -> str:
    pa, pb = (
        {**c.estimate.plan.model_dump(), "backend": c.estimate.backend and c.estimate.backend.name}
        for c in (a, b)
    )
    # etp follows tp unless set apart: named only when one of the two sets it apart
    own_etp = pa["etp"] != pa["tp"] or pb["etp"] != pb["tp"]
    differ = [k for k in drivers if pa[k] != pb[k] and (k != "etp" or own_etp)]
    if not differ:
        return ""
    return spec.sentences["because"].format_map(
        {
            "a_drivers": _drivers(spec, cluster, differ, pa, pb),
            "b_drivers": _drivers(spec, cluster, differ, pb, pa),
        }
    )


def _drivers(
    spec: CompareFile,
    cluster: Cluster,
    names: list[str],
    plan: dict[str, Any],
    other: dict[str, Any],
) -> str:
    def word(value: Any) -> str:
        return ("on" if value else "off") if isinstance(value, bool) else str(value)

    def link(tp: int) -> str:
        # rules/cost/time.yaml tp_inside_nvlink: cluster.nvlink_domain is the job's GPUs on one
        # NVLink domain (cost/estimate.py cluster_env: Cluster.nvlink_gpus)
        return "NVLink" if cluster.nvlink_gpus % tp == 0 else "network"

    here = link(plan["tp"])
    where = spec.sentences["link"].format(link=here) if here != link(other["tp"]) else ""
    return ", ".join(spec.fields[k].format(value=word(plan[k]), link=where) for k in names)


def fit_problem(e: Estimate) -> str | None:
    """By how much a candidate of the planner does not fit (None: it fits); the planner keeps
    such candidates only when nothing fits."""
    return Evaluation(e, ()).problem()


def runner_up(doc: PlanDocument) -> Estimate | None:
    """The best candidate other than the chosen plan (None: only the chosen was estimated)."""
    return next(iter(doc.runners_up), None)


def why_context(doc: PlanDocument) -> dict[str, Any] | None:
    """plan.md's "Why this plan": the chosen plan against the runner-up, as Markdown-ready
    strings (the table's header and rows, the sentences, each `safe_text.markdown`: a problem
    a sentence names may quote a rule's reason); None without a runner-up."""
    other = runner_up(doc)
    if other is None:
        return None
    columns = [
        ("chosen", doc.chosen, fit_problem(doc.chosen)),
        ("runner-up", other, fit_problem(other)),
    ]
    found = compare_estimates(doc.cluster, columns, doc.model.time_parts, doc.model.layout_dims)
    chosen, second = found.columns
    return {
        "chosen": markdown(chosen.label),
        "runner_up": markdown(second.label),
        "rows": [[markdown(text) for text in (r.label, *r.shown)] for r in found.rows],
        "sentences": [markdown(s) for s in found.sentences[0][1]],
        "tie": [markdown(s) for s in tie_sentences(doc)],
    }


def tied(doc: PlanDocument, error: float) -> list[Estimate]:
    """The chosen plan and the candidates whose step is within `error` (a fraction) of its
    step: as far as the cost model can tell, as fast."""
    limit = doc.chosen.time.step_s * (1 + error)
    return [doc.chosen, *(e for e in doc.runners_up if e.time.step_s <= limit)]


def tie_sentences(doc: PlanDocument) -> list[str]:
    """When the top candidates' steps are within the cost model's cross-validated error
    (parplan_gen/data/published_best.yaml `model_error`): that they are tied, and which of
    them has the fewest parallel dimensions (planning/backend_planner.parallel_dims), the one
    to prefer; the chosen plan stays the planner's. Empty when the runner-up is outside it."""
    data = load_published()
    found = tied(doc, data.model_error)
    if len(found) < 2:
        return []
    said = compare_file().sentences
    labels = layout_labels(found, doc.model.layout_dims)
    slowest = max(e.time.step_s for e in found)
    fields = {
        "count": len(found),
        "a_value": _shown("step_s", "time", doc.chosen.time.step_s),
        "spread": f"{slowest / doc.chosen.time.step_s - 1:.2%}",
        "error": f"{data.model_error:.1%}",
        "source": data.model_error_source,
    }
    out = [said["tie"].format_map(fields)]
    simplest = min(range(len(found)), key=lambda i: len(parallel_dims(found[i].plan)))
    dims = ", ".join(parallel_dims(found[simplest].plan)) or "none"
    if len(parallel_dims(found[simplest].plan)) == len(parallel_dims(doc.chosen.plan)):
        out.append(said["tie_chosen_simplest"].format(dims=dims))
    else:
        out.append(said["tie_simplest"].format(simplest=labels[simplest], dims=dims))
    return out
