"""The leaderboard of a run with variants, for the terminal and summary.md: each variant's
pass@1 with its interval, pass@k, its change against the reference with the paired interval
and a significance mark, tokens and cost; then the tasks that flip, the tasks with their own
agent (not compared) and the variants left out; and the tags x variants table (each tag's
pass@1 with its interval per variant)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core.text import counted
from .summary import Metrics, Summary, TaskMove, TaskSummary, VariantComparison, VariantSummary

SHOWN = 5
"""Tasks named per list (flips, tasks with their own agent) unless verbose."""
MARK = "*"
SIGNIFICANCE = f"{MARK}: the change's 95 % interval (paired, over shared tasks) excludes 0"
"""What the mark says; the interval is a paired bootstrap over the tasks both variants hold,
the one `agenteval diff` gives."""


@dataclass(frozen=True)
class Standing:
    """One variant's row, as text."""

    variant: str
    agent: str
    pass_at_1: str
    interval: str
    pass_at_k: str
    change: str
    change_interval: str
    tokens: str
    cost: str
    cost_per_pass: str


def standings(summary: Summary) -> tuple[list[Standing], int | None]:
    """Each selected variant's row, the reference first, and the k of the pass@k column
    (the largest k above 1 some variant has; None when every task had one attempt)."""
    variants = summary.variants or {}
    compared = {c.variant: c for c in summary.comparison or []}
    ks = [
        int(k) for v in variants.values() for k, p in v.metrics.pass_at_k.items() if p is not None
    ]
    top = max(ks, default=1)
    top_k = top if top > 1 else None
    rows = [_standing(name, part, compared.get(name), top_k) for name, part in variants.items()]
    return rows, top_k


def _standing(
    name: str, part: VariantSummary, compared: VariantComparison | None, top: int | None
) -> Standing:
    m, tot = part.metrics, part.totals
    ci = m.pass_at_1_ci95
    tokens = None
    if tot.input_tokens is not None or tot.output_tokens is not None:
        tokens = (tot.input_tokens or 0) + (tot.output_tokens or 0)
    per_pass = (
        tot.cost / part.counts.passed if tot.cost is not None and part.counts.passed else None
    )
    return Standing(
        variant=name,
        agent=part.agent,
        pass_at_1=_num(m.pass_at_k.get("1")),
        interval=f"{_num(ci[0])}-{_num(ci[1])}" if ci else "n/a",
        pass_at_k=_num(m.pass_at_k.get(str(top))) if top else "",
        change=_change(compared),
        change_interval=_change_interval(compared),
        tokens="n/a" if tokens is None else str(tokens),
        cost=_num(tot.cost, 4),
        cost_per_pass=_num(per_pass, 4),
    )


def _change(compared: VariantComparison | None) -> str:
    if compared is None:
        return "reference"
    if compared.change is None:
        return "n/a"
    return f"{compared.change:+.3f}{' ' + MARK if compared.significant else ''}"


def _change_interval(compared: VariantComparison | None) -> str:
    if compared is None or compared.ci95 is None:
        return "" if compared is None else "n/a"
    low, high = compared.ci95
    return f"{low:+.3f} to {high:+.3f}"


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _header(summary: Summary, top: int | None) -> list[str]:
    vs = f"vs {summary.reference}"
    return [
        "variant",
        "agent",
        "pass@1",
        "95% CI",
        *([f"pass@{top}"] if top else []),
        vs,
        f"95% CI {vs}",
        "tokens",
        "cost",
        "cost/pass",
    ]


def _cells(row: Standing, top: int | None) -> list[str]:
    return [
        row.variant,
        row.agent,
        row.pass_at_1,
        row.interval,
        *([row.pass_at_k] if top else []),
        row.change,
        row.change_interval,
        row.tokens,
        row.cost,
        row.cost_per_pass,
    ]


def leaderboard_markdown(summary: Summary, quote: Callable[[str], str] = str) -> list[str]:
    """summary.md's leaderboard section (text made safe by `quote`); none without variants."""
    if summary.variants is None:
        return []
    rows, top = standings(summary)
    head = _header(summary, top)
    lines = [
        f"**Variants** (reference {quote(summary.reference or '')}; {SIGNIFICANCE})",
        "",
        "| " + " | ".join(map(quote, head)) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(map(quote, _cells(row, top))) + " |" for row in rows]
    notes = [*_flip_lines(summary, verbose=True), *_apart_lines(summary, verbose=True)]
    return [*lines, "", *(f"- {quote(line)}" for line in notes), *([""] if notes else [])]


def leaderboard_terminal(summary: Summary, verbose: bool) -> list[str]:
    """The terminal's leaderboard: an aligned table, then flips and what is left apart."""
    if summary.variants is None:
        return []
    rows, top = standings(summary)
    table = [_header(summary, top), *(_cells(row, top) for row in rows)]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(table[0]))]
    lines = [f"variants (reference {summary.reference}; {SIGNIFICANCE}):"]
    for cells in table:
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        )
    notes = [*_flip_lines(summary, verbose), *_apart_lines(summary, verbose)]
    return lines + [f"  {line}" for line in notes]


def _flip_lines(summary: Summary, verbose: bool) -> list[str]:
    """Per compared variant, the tasks it passes more and less often than the reference."""
    lines = []
    for entry in summary.comparison or []:
        for word, moves in (("better", entry.better), ("worse", entry.worse)):
            if moves:
                named = _named([_move(m) for m in moves], verbose)
                lines.append(f"{entry.variant} {word} than {entry.reference} on {named}")
    return lines


def _apart_lines(summary: Summary, verbose: bool) -> list[str]:
    """The variants whose attempts more than one agent made, the tasks with their own agent
    (not compared) and the variants not selected."""
    lines = mixed_lines(summary)
    own = [t for t in summary.tasks if t.variant is None]
    if own:
        named = _named([_task(t) for t in own], verbose)
        lines.append(f"tasks with their own agent (not compared): {named}")
    if summary.not_selected:
        lines.append(
            "not selected (their records are kept, out of these numbers): "
            + ", ".join(summary.not_selected)
        )
    return lines


def mixed_lines(summary: Summary) -> list[str]:
    """A line per variant whose attempts were made by more than one agent (a resume with
    `--agenteval-allow-drift`): each agent and how many attempts it made."""
    return [
        f"{name} is mixed: "
        + ", ".join(f"{agent} ({counted(n, 'attempt')})" for agent, n in part.agents.items())
        + " (resumed with --agenteval-allow-drift)"
        for name, part in (summary.variants or {}).items()
        if part.agents
    ]


def _named(names: list[str], verbose: bool) -> str:
    shown = names if verbose else names[:SHOWN]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", … {more} more (-v shows all)" if more else "")


def _move(move: TaskMove) -> str:
    return f"{move.task_id} ({move.base} → {move.new})"


def _task(task: TaskSummary) -> str:
    return f"{task.task_id} {task.c}/{task.n}"


# --- tags x variants ---------------------------------------------------------------------------

TAG_ROWS = 10
"""Tags the terminal's tags x variants table shows unless verbose."""
TAGS_TITLE = "pass@1 (95% CI) by tag and variant"


@dataclass(frozen=True)
class TagRow:
    """One tag across the selected variants: the tasks that have it (any variant's) and each
    variant's metrics over its tasks of that tag (None: the variant ran none of them)."""

    tag: str
    tasks: int
    cells: tuple[Metrics | None, ...]


def tag_rows(summary: Summary) -> list[TagRow]:
    """A row per tag of the variants' tasks, tags sorted, a cell per selected variant in the
    leaderboard's order; none without variants or tags."""
    variants = summary.variants or {}
    tags = sorted({tag for part in variants.values() for tag in part.tags})
    tasks: dict[str, set[tuple[str, str]]] = {tag: set() for tag in tags}
    for task in summary.tasks:
        if task.variant in variants:
            for tag in task.tags:
                tasks.get(tag, set()).add((task.dataset, task.task_id))
    return [
        TagRow(tag, len(tasks[tag]), tuple(part.tags.get(tag) for part in variants.values()))
        for tag in tags
    ]


def tag_cell(metrics: Metrics | None) -> str:
    """`0.375 (0.000-1.000)`; `1.000 (n/a)` below the tasks an interval needs; `-` where the
    variant ran no task of the tag."""
    if metrics is None:
        return "-"
    ci = metrics.pass_at_1_ci95
    interval = f"{_num(ci[0])}-{_num(ci[1])}" if ci else "n/a"
    return f"{_num(metrics.pass_at_k.get('1'))} ({interval})"


def tags_markdown(summary: Summary, quote: Callable[[str], str] = str) -> list[str]:
    """summary.md's tags x variants table; none without variants or tags."""
    rows = tag_rows(summary)
    if not rows:
        return []
    head = ["tag", "tasks", *(summary.variants or {})]
    lines = [
        f"**{TAGS_TITLE}**",
        "",
        "| " + " | ".join(map(quote, head)) + " |",
        "|" + "---|" * len(head),
    ]
    for row in rows:
        cells = [quote(row.tag), str(row.tasks), *map(tag_cell, row.cells)]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def tags_terminal(summary: Summary, verbose: bool) -> list[str]:
    """The terminal's tags x variants table, aligned, capped at TAG_ROWS unless verbose."""
    rows = tag_rows(summary)
    if not rows:
        return []
    shown = rows if verbose else rows[:TAG_ROWS]
    table = [["tag", "tasks", *(summary.variants or {})]]
    table += [[row.tag, str(row.tasks), *map(tag_cell, row.cells)] for row in shown]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(table[0]))]
    lines = [f"{TAGS_TITLE}:"]
    for cells in table:
        aligned = [
            c.rjust(w) if i == 1 else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        lines.append("  " + "  ".join(aligned).rstrip())
    if len(rows) > len(shown):
        lines.append(f"  … {len(rows) - len(shown)} more tags (-v shows all)")
    return lines
