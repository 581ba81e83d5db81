"""The plan printout (`--agenteval-plan`): what a resume would reuse, regrade and run, and why,
as a count of tasks per cause with a few task ids each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.text import counted
from ..store.plan import Decision

SHOWN = 5
"""Task ids named per cause unless verbose."""
WHY = {
    "": "no record yet",
    "crashed": "crashed",
    "build failed": "sandbox build failed",
    "errored": "errored, --rerun-errors",
    "rerun": "--agenteval-rerun",
}
"""How each reason a stored attempt runs again (and an attempt without a record) reads."""
UNKNOWN = "task changed; its record, of an older version, does not say which part"

Task = tuple[str, str]
"""(dataset, task id)."""


@dataclass(frozen=True)
class Planned:
    """One planned attempt: its decision and, for a task found changed, the parts that changed
    (None: its stored record does not say)."""

    dataset: str
    task_id: str
    variant: str | None
    decision: Decision
    changed: tuple[str, ...] | None = None


def plan_lines(run_id: str, planned: Sequence[Planned], verbose: bool = False) -> list[str]:
    """Totals, then a line per action and cause: how many tasks (and attempts), and the
    first task ids (`-v`: all). A task whose parts changed counts under each part."""
    totals = {"reuse": 0, "regrade": 0, "run": 0}
    causes: dict[tuple[str, str], dict[Task, set[str | None]]] = {}
    attempts: dict[tuple[str, str], int] = {}
    variants: dict[Task, set[str | None]] = {}
    for entry in planned:
        action, task, variant = entry.decision.action, (entry.dataset, entry.task_id), entry.variant
        totals[action] += 1
        variants.setdefault(task, set()).add(variant)
        if action == "reuse":
            continue
        for cause in _causes(entry):
            causes.setdefault((action, cause), {}).setdefault(task, set()).add(variant)
            attempts[(action, cause)] = attempts.get((action, cause), 0) + 1
    lines = [
        f"run {run_id}: {totals['reuse']} reused, {totals['regrade']} to regrade, "
        f"{totals['run']} to run (nothing was started)"
    ]
    for group, tasks in sorted(causes.items(), key=_order):
        names = [_name(task, chosen, variants[task]) for task, chosen in tasks.items()]
        shown = names if verbose else names[:SHOWN]
        more = len(names) - len(shown)
        lines.append(
            f"  to {group[0]} ({group[1]}): {counted(len(tasks), 'task')} "
            f"({counted(attempts[group], 'attempt')}): {', '.join(shown)}"
            + (f", … {more} more (-v shows all)" if more else "")
        )
    return lines


def _causes(entry: Planned) -> list[str]:
    """Why the attempt is regraded or run: each changed part, or the decision's reason."""
    why = entry.decision.why
    if entry.decision.action == "regrade" or why == "changed":
        return [f"{part} changed" for part in entry.changed or ()] or [UNKNOWN]
    return [WHY.get(why, why)]


def _order(item: tuple[tuple[str, str], object]) -> tuple[bool, bool, str]:
    """Regrades first, then runs; changed parts (by name) before the other reasons."""
    (action, cause), _ = item
    return (action != "regrade", not cause.endswith(" changed"), cause)


def _name(task: Task, chosen: set[str | None], every: set[str | None]) -> str:
    """`ds/task`, with the variants in brackets when not all of its variants are concerned."""
    label = f"{task[0]}/{task[1]}"
    if chosen == every:
        return label
    return f"{label} [{', '.join(sorted(v for v in chosen if v is not None))}]"
