"""Layouts side by side, term by term, and one sentence per term that differs.

`compare_estimates` sets two or more estimates in columns (the first is the one explained: the
chosen plan), each memory part, time part, the communication hidden by overlap, the step and MFU
(both counts of the model FLOPs) in rows, and says for every term where the first and another
column differ why, from the figures: the sentence templates and each term's drivers (the layout
fields its formulas read) are in templates/report/compare.yaml. It also keeps, for the terse
view, the lines of `render/compare_terse.py` (the terms that decide each gap, with their
drivers). `parplan compare`, `parplan_gen.compare` and plan.md's "Why this plan" (the chosen
plan against the runner-up) all read this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.mfu_convention import MfuConvention, convention_of
from parplan_gen.cost.published import load_published
from parplan_gen.inputs.safe_text import markdown
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluation
from parplan_gen.planning.search_result import parallel_dims
from parplan_gen.render.checks import RenderError
from parplan_gen.render.compare_terms import (
    COMPARE_FILE,
    KEYS,
    MFU_ROWS,
    STEP_TERMS,
    Column,
    CompareFile,
    Row,
    Term,
    Terse,
    compare_file,
    differing,
    plan_fields,
    saving,
    shown,
    tp_link,
    word,
)
from parplan_gen.render.compare_terse import terse_lines
from parplan_gen.render.labels import gib, layout_labels

__all__ = ["Column", "Comparison", "Row", "compare_estimates", "compare_file", "why_context"]


@dataclass(frozen=True)
class Comparison:
    """Columns, rows, and for each column after the first the sentences that explain it (and
    their terse form); `convention` is the count of the model FLOPs whose MFU row the views
    show: the first column's backend's (cost/mfu_convention.py)."""

    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    sentences: tuple[tuple[str, tuple[str, ...]], ...]  # (other column's label, sentences)
    convention: MfuConvention
    terse: tuple[Terse, ...] = ()  # one per column after the first

    def shown_rows(self) -> tuple[Row, ...]:
        """The rows a view shows: not zero in every column, and the MFU of `convention` only,
        named by it (`MFU (causal)`; `MFU` where the counts agree)."""
        other_mfu = {t for k, t in MFU_ROWS.items() if k != self.convention.attention}
        return tuple(
            replace(r, label=self.convention.header) if r.term in MFU_ROWS.values() else r
            for r in self.rows
            if r.term not in other_mfu and any(v != 0 for v in r.values)
        )

    def contract(self) -> dict[str, Any]:
        """JSON: the columns (label, role, problem, estimate, letter, the count of their MFU),
        the rows, the sentences and their terse lines."""
        return {
            "columns": [
                {
                    "label": c.label,
                    "role": c.role,
                    "problem": c.problem,
                    "estimate": c.estimate.contract(),
                    "key": c.key,
                    "mfu_convention": convention_of(c.estimate).attention,
                }
                for c in self.columns
            ],
            "rows": [
                {"term": r.term, "group": r.group, "values": list(r.values), "shown": list(r.shown)}
                for r in self.rows
            ],
            "why": [
                {
                    "against": label,
                    "sentences": list(s),
                    "material": list(t.terms),
                    "lines": [t.step, *t.lines],
                }
                for (label, s), t in zip(self.sentences, self.terse, strict=True)
            ],
            "mfu_convention": self.convention.attention,
        }


def _value(e: Estimate, term: str, time_parts: Sequence[str]) -> float:
    """The term's figure in `e`; `overlap_s`: what the time parts add up to beyond the overlapped
    step (none when the step is the longer: nothing was hidden); `mfu_causal` of an estimate
    without it (an older plan.json): its one MFU."""
    if term == "overlap_s":
        parts = e.time.model_dump()
        return max(0.0, sum(parts[k] for k in time_parts) - e.time.step_s)
    if term == "mfu_causal" and e.throughput.mfu_causal is None:
        return e.throughput.mfu
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
        Column(label, role, e, problem, _key(index))
        for index, (label, (role, e, problem)) in enumerate(zip(labels, columns, strict=True))
    )
    convention = convention_of(cols[0].estimate)
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
                tuple(shown(t.term, t.group, v) for v in values),
            )
        )
    said = [(t, r) for t, r in zip(terms, rows, strict=True) if _said(t.term, convention)]
    why = tuple(
        (other.label, _sentences(spec, said, cluster, cols[0], other, index))
        for index, other in enumerate(cols[1:], 1)
    )
    terse = tuple(
        terse_lines(spec, cluster, cols[0], other, index, said)
        for index, other in enumerate(cols[1:], 1)
    )
    return Comparison(cols, tuple(rows), why, convention, terse)


def _key(index: int) -> str:
    """`A`, `B`, ... `Z`, then `A2`, `B2`, ...: a column's letter in the terse view."""
    letter, lap = KEYS[index % len(KEYS)], index // len(KEYS)
    return letter + (str(lap + 1) if lap else "")


def _said(term: str, convention: MfuConvention) -> bool:
    """Whether a row is explained: every row but the MFU of the other count."""
    return term not in MFU_ROWS.values() or term == MFU_ROWS[convention.attention]


def _sentences(
    spec: CompareFile,
    terms: Sequence[tuple[Term, Row]],
    cluster: Cluster,
    a: Column,
    b: Column,
    index: int,
) -> tuple[str, ...]:
    out = []
    said = spec.sentences
    a_faster = a.estimate.time.step_s < b.estimate.time.step_s
    for t, row in terms:
        va, vb = row.values[0], row.values[index]
        kind = _kind(t)
        if row.shown[0] == row.shown[index]:
            if kind != "step":
                continue  # the same figure as shown: nothing to explain
            side = "same"
        else:
            side = "low" if va < vb else "high"
        fields = {
            "a": a.label, "b": b.label, "what": t.what,
            "a_value": row.shown[0], "b_value": row.shown[index],
            "delta": shown("", t.group, abs(va - vb)),
            "saving": saving(va, vb),
            "because": _because(spec, cluster, t.drivers, a, b),
            "still_fits": said["still_fits"].format(capacity=gib(a.estimate.memory.capacity))
            if a.estimate.memory.fits else "",
            "win_back": said["win_back"] if a_faster else "",
            "b_problem": said["b_problem"].format(b=b.label, problem=b.problem) if b.problem else "",
        }  # fmt: skip
        out.append(said[f"{kind}_{side}"].format_map(fields))
    return tuple(out)


def _kind(t: Term) -> str:
    """The sentence family of a term: `step`, `mfu`, `overlap`, else its group."""
    if t.term in ("step_s", "overlap_s", *MFU_ROWS.values()):
        return "mfu" if t.term in MFU_ROWS.values() else t.term.removesuffix("_s")
    return t.group


def _because(spec: CompareFile, cluster: Cluster, drivers: list[str], a: Column, b: Column) -> str:
    pa, pb = plan_fields(a), plan_fields(b)
    differ = differing(drivers, pa, pb)
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
    here = tp_link(cluster, plan["tp"])
    same = here == tp_link(cluster, other["tp"])
    where = "" if same else spec.sentences["link"].format(link=here)
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
    strings (the table's header and the rows a view shows, `Comparison.shown_rows`, the
    sentences, each `safe_text.markdown`: a problem a sentence names may quote a rule's reason);
    None without a runner-up."""
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
        "rows": [[markdown(text) for text in (r.label, *r.shown)] for r in found.shown_rows()],
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
    them has the fewest parallel dimensions (planning/search_result.parallel_dims), the one
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
        "a_value": shown("step_s", "time", doc.chosen.time.step_s),
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
