"""The HTML report's parts for a run with variants: the leaderboard and the tags x variants
table (rendered here) and the tasks-by-variants matrix (its rows travel as JSON; the page's
script draws and filters them).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from html import escape
from typing import Any

from .leaderboard import TAGS_TITLE, mixed_lines, tag_rows
from .reports import fmt
from .summary import Metrics, Summary, TaskSummary, VariantComparison, VariantSummary

LEADERBOARD_COLUMNS = (
    ("variant", ""),
    ("agent", ""),
    ("pass@1 (95% CI)", "num"),
    ("pass@{k}", "num"),
    ("change vs {reference} (95% interval)", "num"),
    ("tokens in / out", "num"),
    ("cost (US$)", "num"),
    ("cost per pass (US$)", "num"),
)


def leaderboard(summary: Summary, k: int) -> str:
    """One row per selected variant, the reference first: pass@1 with its interval, pass@k,
    the change against the reference with its interval and whether it is significant (said
    in words and an arrow, not by color alone), tokens, cost and cost per passed attempt."""
    variants = summary.variants or {}
    reference = summary.reference or next(iter(variants), "")
    against = {c.variant: c for c in summary.comparison or []}
    heads = "".join(
        f'<th class="{cls}">{escape(label.format(k=k, reference=reference))}</th>'
        for label, cls in LEADERBOARD_COLUMNS
        if k > 1 or label != "pass@{k}"  # a one-attempt run: pass@1 is shown once
    )
    rows = "\n".join(
        _row(name, v, k, name == reference, against.get(name)) for name, v in variants.items()
    )
    left_out = summary.not_selected or []
    note = "".join(f'<p class="mixed">{escape(line)}</p>' for line in mixed_lines(summary))
    note += (
        f'<p class="muted" id="not-selected">not selected (records kept, left out of every '
        f"number): {escape(', '.join(left_out))}</p>"
        if left_out
        else ""
    )
    return f"""<section id="variants">
<h2>Variants ({len(variants)})</h2>
<table id="leaderboard"><thead><tr>{heads}</tr></thead>
<tbody>
{rows}
</tbody></table>
{note}
</section>"""


def _row(
    name: str, v: VariantSummary, k: int, is_reference: bool, against: VariantComparison | None
) -> str:
    m, tot = v.metrics, v.totals
    tokens = f"{_int(tot.input_tokens)} / {_int(tot.output_tokens)}"
    cells = [
        f"<td><strong>{escape(name)}</strong></td>",
        _agent_cell(v),
        f'<td class="num">{_with_interval(m.pass_at_k.get("1"), m.pass_at_1_ci95)}</td>',
        *([f'<td class="num">{fmt(m.pass_at_k.get(str(k)))}</td>'] if k > 1 else []),
        f'<td class="num change">{_change(is_reference, against)}</td>',
        f'<td class="num">{tokens}</td>',
        f'<td class="num">{fmt(tot.cost, 4)}</td>',
        f'<td class="num">{fmt(_per_pass(v), 4)}</td>',
    ]
    return f'<tr data-variant="{escape(name)}">{"".join(cells)}</tr>'


def tag_table(summary: Summary) -> str:
    """Each tag's pass@1 with its 95% interval per variant, a row per tag (sorted) and a
    column per selected variant; nothing when no variant's task has a tag."""
    rows = tag_rows(summary)
    if not rows:
        return ""
    names = list(summary.variants or {})
    heads = "".join(f'<th class="num">{escape(name)}</th>' for name in names)
    body = "\n".join(
        f'<tr data-tag="{escape(row.tag)}"><td>{escape(row.tag)}</td>'
        f'<td class="num">{row.tasks}</td>'
        + "".join(
            f'<td class="num" data-variant="{escape(name)}">{_tag_cell(cell)}</td>'
            for name, cell in zip(names, row.cells, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return f"""<section id="tags-section">
<h2>{escape(TAGS_TITLE)}</h2>
<p class="muted">each variant's pass@1 over its tasks of the tag; the interval needs 3 tasks</p>
<table id="tag-matrix"><thead><tr><th>tag</th><th class="num">tasks</th>{heads}</tr></thead>
<tbody>
{body}
</tbody></table>
</section>"""


def _tag_cell(metrics: Metrics | None) -> str:
    """pass@1 and its interval (`n/a` below 3 tasks); a dash where the variant ran no task of
    the tag."""
    if metrics is None:
        return '<span class="muted" title="no task of this tag">&ndash;</span>'
    value, interval = metrics.pass_at_k.get("1"), metrics.pass_at_1_ci95
    if interval:
        return _with_interval(value, interval)
    return f'{fmt(value)} <span class="muted">n/a</span>'


def _agent_cell(v: VariantSummary) -> str:
    """The variant's agent; a mix of agents is marked, each named on hover."""
    if not v.agents:
        return f'<td class="muted">{escape(v.agent)}</td>'
    made = ", ".join(f"{agent}: {n}" for agent, n in v.agents.items())
    return f'<td class="mixed" title="{escape(made)}">{escape(v.agent)}</td>'


def _with_interval(value: float | None, interval: Sequence[float] | None) -> str:
    if value is None or not interval:
        return fmt(value)
    return f'{fmt(value)} <span class="muted">{fmt(interval[0])}&ndash;{fmt(interval[1])}</span>'


def _change(is_reference: bool, against: VariantComparison | None) -> str:
    """`+0.167 (-0.10 to +0.40) ▲ significant`; the reference says so."""
    if is_reference:
        return '<span class="muted">reference</span>'
    if against is None or against.change is None:
        return "n/a"
    text = f"{against.change:+.3f}"
    if not against.ci95:
        shared = against.shared_tasks
        return f'{text} <span class="muted">(no interval: {shared} shared task)</span>'
    low, high = against.ci95
    title = f"{against.method} over {against.shared_tasks} shared tasks"
    interval = f'<span class="muted" title="{escape(title)}">({low:+.3f} to {high:+.3f})</span>'
    if not against.significant:
        return f'{text} {interval} <span class="sig-none">not significant</span>'
    arrow, kind = ("▲", "sig-better") if against.change > 0 else ("▼", "sig-worse")
    return f'{text} {interval} <span class="{kind}">{arrow} significant</span>'


def _per_pass(v: VariantSummary) -> float | None:
    """Everything the variant cost per passed attempt."""
    cost, passed = v.totals.cost, v.counts.passed
    return cost / passed if cost is not None and passed else None


def _int(value: int | float | None) -> str:
    return "n/a" if value is None else f"{int(value):,}"


# --- the matrix --------------------------------------------------------------------------------


def matrix_rows(tasks: Sequence[TaskSummary], variants: Sequence[str]) -> list[dict[str, Any]]:
    """One row per task any variant ran: `[c, n]` per variant (None where it has no attempt)
    and `d`, whether the variants' pass rates differ. Tasks that name their own agent (no
    variant) are not compared and stay out."""
    column = {name: i for i, name in enumerate(variants)}
    cells: dict[tuple[str, str], list[list[int] | None]] = {}
    for task in tasks:
        if task.variant in column:
            row = cells.setdefault((task.dataset, task.task_id), [None] * len(variants))
            row[column[task.variant]] = [task.c, task.n]
    return [
        {"id": task_id, "ds": dataset, "cells": row, "d": _disagree(row)}
        for (dataset, task_id), row in cells.items()
    ]


def _disagree(row: Sequence[list[int] | None]) -> bool:
    """Whether the variants that ran the task passed it at different rates."""
    return len({Fraction(c, n) for c, n in filter(None, row) if n}) > 1


def matrix_shell(variants: Sequence[str]) -> str:
    """The matrix's frame and its filter; the script fills it from the embedded data."""
    heads = "".join(f'<th class="num">{escape(name)}</th>' for name in variants)
    return f"""<section id="matrix-section">
<h2>Tasks &times; variants</h2>
<p class="muted">passed / attempts of each task by each variant; a cell opens those attempts</p>
<div class="filters">
<label><input id="filter-disagree" type="checkbox"> only tasks where variants disagree</label>
<span id="matrix-count" class="muted"></span>
</div>
<table id="matrix"><thead><tr><th>task</th>{heads}</tr></thead><tbody></tbody></table>
<p><button id="matrix-more" type="button" hidden>show more</button></p>
</section>"""
