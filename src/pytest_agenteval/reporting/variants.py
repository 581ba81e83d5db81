"""A run with `variants:`: which stored attempts its summary holds, and each variant against
the reference variant, paired over the tasks both hold.

The comparison is `agenteval diff`'s (`diff.compare`: the same paired bootstrap over tasks, the
same seed), so comparing two variants of one run here and with `agenteval diff` gives the same
change and interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..store.index import IndexRow
from ..store.runs import RunInfo
from .diff import Diff, TaskKey, TaskRate, compare
from .metrics import TaskMetrics


class _HasVariant(Protocol):
    @property
    def variant(self) -> str | None: ...


Of = TypeVar("Of", bound=_HasVariant)


@dataclass(frozen=True)
class Selection:
    """The variants a summary holds and the attempts it is made of."""

    variants: list[str]
    """The selected variants, the reference first, then the others in the run's order."""
    reference: str
    rows: list[IndexRow]
    """The selected variants' attempts and those of tasks with their own agent (no variant)."""
    not_selected: list[str]
    """Variants with stored attempts that the run did not select (sorted)."""


def select_variants(run: RunInfo, rows: Sequence[IndexRow]) -> Selection | None:
    """The selection of a run with variants (run.json's `variants`, else every variant its
    attempts name); None for a run without variants."""
    found = {row.variant for row in rows if row.variant is not None}
    names = list(run.variants) if run.variants is not None else sorted(found)
    if not names:
        return None
    reference = run.reference if run.reference in names else names[0]
    chosen = set(names)
    kept = [row for row in rows if row.variant is None or row.variant in chosen]
    return Selection(
        variants=[reference, *(name for name in names if name != reference)],
        reference=reference,
        rows=kept if len(kept) < len(rows) else list(rows),
        not_selected=sorted(found - chosen),
    )


def by_variant(items: Iterable[Of]) -> dict[str | None, list[Of]]:
    """Rows or tasks by the variant they belong to, in one pass."""
    found: dict[str | None, list[Of]] = {}
    for item in items:
        found.setdefault(item.variant, []).append(item)
    return found


def rates(tasks: Sequence[TaskMetrics]) -> dict[TaskKey, TaskRate]:
    """(dataset, task id) → counts, as `diff.task_rates` reads them from summary.json."""
    return {(task.dataset, task.task_id): TaskRate(task.n, task.c) for task in tasks}


@dataclass(frozen=True)
class Side:
    """One variant in a comparison: its tasks, and its attempts, passes and cost."""

    name: str
    tasks: Sequence[TaskMetrics]
    attempts: int
    passed: int
    cost: float | None
    """Agents and judges (`totals.cost`); None when no attempt had a cost."""

    @property
    def costs(self) -> tuple[float | None, float | None]:
        """(cost per attempt, cost per passed attempt); None without costs."""
        if self.cost is None or not self.attempts:
            return None, None
        return self.cost / self.attempts, (self.cost / self.passed if self.passed else None)


def comparison(variant: Side, reference: Side) -> dict[str, Any]:
    """`variant` against `reference` (summary.json's `comparison` entry): pass@1's change over
    the tasks both hold with its paired-bootstrap interval, the tasks that flip, and costs."""
    diff: Diff = compare(rates(reference.tasks), rates(variant.tasks))
    change = diff.change
    own, theirs = variant.costs, reference.costs
    return {
        "variant": variant.name,
        "reference": reference.name,
        "shared_tasks": change.shared,
        "change": change.change,
        "ci95": list(change.interval) if change.interval else None,
        "method": change.method,
        "significant": change.significant,
        "better": [c.move() for c in diff.improved],  # base: the reference's c/n
        "worse": [c.move() for c in diff.regressed],
        "cost_per_attempt": own[0],
        "cost_per_pass": own[1],
        "reference_cost_per_attempt": theirs[0],
        "reference_cost_per_pass": theirs[1],
    }
