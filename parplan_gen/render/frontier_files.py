"""The files of `parplan frontier --out`: frontier.json (the contract), frontier.md (its table
and marks) and frontier.svg (render/frontier_chart.py), rendered from the shipped templates
(templates/report/frontier.*.j2) in the template sandbox; render/writer.py checks and writes
them as one change."""

from __future__ import annotations

from parplan_gen.inputs.safe_text import markdown
from parplan_gen.planning.frontier import (
    TABLE_HEADERS,
    TABLE_RIGHT,
    Frontier,
    front_line,
    mfu_line,
    pick_lines,
    table_rows,
    to_json,
)
from parplan_gen.render.frontier_chart import frontier_chart
from parplan_gen.render.template_env import Templates, environment

FRONTIER_JSON, FRONTIER_MD, FRONTIER_SVG = "frontier.json", "frontier.md", "frontier.svg"
TEMPLATES = {FRONTIER_MD: "report/frontier.md.j2", FRONTIER_SVG: "report/frontier.svg.j2"}


def frontier_files(frontier: Frontier) -> dict[str, str]:
    """Name -> text of the three files (not yet checked: the writer checks every file)."""
    templates = Templates.at()
    report = templates.mapping().data.report
    env = environment(templates)
    context = {"chart": frontier_chart(frontier, report), "md": _markdown(frontier)}
    files = {FRONTIER_JSON: to_json(frontier)}
    for name, template in TEMPLATES.items():
        files[name] = env.render_bounded(template, context, scale=len(frontier.points))
    return files


def _markdown(frontier: Frontier) -> dict[str, object]:
    """frontier.md's cells and lines, each escaped as Markdown."""
    return {
        "title": markdown(frontier.title),
        "tokens": f"{frontier.tokens:,.0f}",
        "global_batch": str(frontier.global_batch),
        "seq_len": str(frontier.seq_len),
        "front": markdown(front_line(frontier)),
        "headers": list(TABLE_HEADERS),
        "right": sorted(TABLE_RIGHT),
        "rows": [[markdown(cell) or "-" for cell in row] for row in table_rows(frontier)],
        "picks": [markdown(line) for line in pick_lines(frontier)],
        "mfu": markdown(mfu_line(frontier)),
        "what": "cost" if frontier.basis == "cost" else "GPU-hours",
        "format_version": str(frontier.format_version),
    }
