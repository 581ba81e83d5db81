"""Two runs compared: which tasks regressed, improved, appeared or disappeared, and whether the
suite's pass@1 changed beyond chance.

Method: the unit is the task. For each task both runs hold, the difference of its pass rates
c/n (new minus base; pass@1 of a task is its pass rate). The change is the mean difference; its
95 % interval is a paired bootstrap over tasks: `resamples` draws of the shared tasks with
replacement (seeded, so the same runs always give the same interval), the 2.5th and 97.5th
percentiles of their mean differences. Attempts within a task are not treated as independent:
a task counts once however many attempts it had. Tasks present on one side only are listed,
never part of the change.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .metrics import INTERVAL_METHOD, mean_interval, rate_variance

if TYPE_CHECKING:  # the summary compares its variants with `compare`
    from .summary import Summary, TaskSummary

RESAMPLES = 10_000
SEED = 20_260_101
MAX_DRAWS = 5_000_000
"""Above this many draws (tasks times resamples), the normal approximation the bootstrap tends to
for so many tasks replaces it: a session end must not spend minutes resampling."""
METHOD_BOOTSTRAP = "paired bootstrap over tasks"
METHOD_NORMAL = INTERVAL_METHOD

TaskKey = tuple[str, str]


@dataclass(frozen=True)
class TaskRate:
    """One task's counts in one run: c of n attempts passed."""

    n: int
    c: int

    @property
    def rate(self) -> float:
        return self.c / self.n if self.n else 0.0

    @property
    def variance(self) -> float:
        """The sampling variance of `rate` from the task's attempts."""
        return rate_variance(self.n, self.c)


@dataclass(frozen=True)
class TaskChange:
    """A task whose pass rate differs between the runs."""

    key: TaskKey
    base: TaskRate
    new: TaskRate

    @property
    def delta(self) -> float:
        return self.new.rate - self.base.rate

    def move(self) -> dict[str, str]:
        """The task and its `c/n` on each side, as summary.json's task moves hold them."""
        base, new = self.base, self.new
        return {
            "dataset": self.key[0],
            "task_id": self.key[1],
            "base": f"{base.c}/{base.n}",
            "new": f"{new.c}/{new.n}",
        }


@dataclass(frozen=True)
class Change:
    """The suite's pass@1 change over the shared tasks, with its 95 % interval."""

    shared: int
    base: float | None
    new: float | None
    change: float | None
    interval: tuple[float, float] | None
    """None with fewer than two shared tasks: one task is no sample."""
    method: str

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.interval is not None and (self.interval[1] < 0 or self.interval[0] > 0)

    @property
    def fell_significantly(self) -> bool:
        """pass@1 fell, and the whole interval lies below zero."""
        return self.interval is not None and self.interval[1] < 0


@dataclass(frozen=True)
class Diff:
    """Everything `agenteval diff` and the regression gate report."""

    change: Change
    regressed: list[TaskChange] = field(default_factory=list)
    improved: list[TaskChange] = field(default_factory=list)
    appeared: list[TaskKey] = field(default_factory=list)
    disappeared: list[TaskKey] = field(default_factory=list)
    unchanged: int = 0


def task_rates(tasks: Iterable[TaskSummary]) -> dict[TaskKey, TaskRate]:
    """(dataset, task id) → counts, from summary.json's `tasks` entries."""
    return {(t.dataset, t.task_id): TaskRate(t.n, t.c) for t in tasks}


def variant_rates(tasks: Iterable[TaskSummary], variant: str) -> dict[TaskKey, TaskRate]:
    """(dataset, task id) → counts of one variant's tasks: one side of comparing variants
    (`compare(variant_rates(tasks, A), variant_rates(tasks, B))`); the tasks that name
    their own agent (no variant) are never part of it."""
    return task_rates(t for t in tasks if t.variant == variant)


def summary_variants(summary: Summary) -> list[str]:
    """The variants a summary holds: its `variants` (the reference first), else those its
    tasks name, in their order; empty for a run without variants."""
    if summary.variants:
        return list(summary.variants)
    return list(dict.fromkeys(t.variant for t in summary.tasks if t.variant is not None))


def compare(
    base: Mapping[TaskKey, TaskRate],
    new: Mapping[TaskKey, TaskRate],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Diff:
    """Compare two runs' tasks; the same inputs always give the same result."""
    shared = sorted(base.keys() & new.keys())
    changes = [TaskChange(key, base[key], new[key]) for key in shared]
    regressed = sorted((c for c in changes if c.delta < 0), key=lambda c: (c.delta, c.key))
    improved = sorted((c for c in changes if c.delta > 0), key=lambda c: (-c.delta, c.key))
    return Diff(
        change=suite_change(
            [base[k].rate for k in shared],
            [new[k].rate for k in shared],
            resamples,
            seed,
            [base[k].variance + new[k].variance for k in shared],
        ),
        regressed=regressed,
        improved=improved,
        appeared=sorted(new.keys() - base.keys()),
        disappeared=sorted(base.keys() - new.keys()),
        unchanged=len(changes) - len(regressed) - len(improved),
    )


def suite_change(
    base: Sequence[float],
    new: Sequence[float],
    resamples: int = RESAMPLES,
    seed: int = SEED,
    within: Sequence[float] | None = None,
) -> Change:
    """Mean paired difference of per-task rates and its 95 % interval; `within` is each
    difference's sampling variance from the tasks' attempts (used past the draw budget)."""
    n = len(base)
    if n == 0:
        return Change(0, None, None, None, None, METHOD_BOOTSTRAP)
    diffs = [b - a for a, b in zip(base, new, strict=True)]
    mean = sum(diffs) / n
    base_mean, new_mean = sum(base) / n, sum(new) / n
    if n < 2:
        return Change(n, base_mean, new_mean, mean, None, METHOD_BOOTSTRAP)
    if n * resamples > MAX_DRAWS:
        interval, method = normal_interval(diffs, within), METHOD_NORMAL
    else:
        interval, method = bootstrap_interval(diffs, resamples, seed), METHOD_BOOTSTRAP
    return Change(n, base_mean, new_mean, mean, interval, method)


def bootstrap_interval(diffs: Sequence[float], resamples: int, seed: int) -> tuple[float, float]:
    """Percentile interval (2.5 %, 97.5 %) of the mean of `diffs` resampled with replacement.

    Tasks with equal differences are interchangeable, and most tasks differ by 0, so an
    all-equal sample is answered without resampling."""
    if max(diffs) == min(diffs):
        return (diffs[0], diffs[0])
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    tail = max(0, math.ceil(0.025 * resamples) - 1)  # the same rank from each end: symmetric
    return (means[tail], means[-1 - tail])


def normal_interval(
    diffs: Sequence[float], within: Sequence[float] | None = None
) -> tuple[float, float]:
    """The interval every report gives pass@1 (`metrics.mean_interval`), of the differences:
    what the bootstrap approaches for many tasks, with the attempts' own variance."""
    found = mean_interval(diffs, within or [0.0] * len(diffs), bounds=(-1.0, 1.0))
    assert found is not None  # only used past the draw budget: many tasks
    return (found.low, found.high)


# --- text ------------------------------------------------------------------------------------


def change_line(change: Change) -> str:
    """The suite's change in one line, its interval named."""
    if change.change is None:
        return "pass@1 change: no task is in both runs"
    head = (
        f"pass@1 {change.base:.3f} → {change.new:.3f} over {change.shared} shared tasks: "
        f"change {change.change:+.3f}"
    )
    if change.interval is None:
        return head + " (one shared task: no interval)"
    low, high = change.interval
    verdict = "significant" if change.significant else "not significant"
    return f"{head}, 95 % interval {low:+.3f} to {high:+.3f} ({change.method}; {verdict})"


def diff_lines(diff: Diff, limit: int | None = None) -> list[str]:
    """The comparison as text: the change, then the tasks per kind (`limit` rows each)."""
    lines = [change_line(diff.change)]
    lines.append(
        f"{len(diff.regressed)} regressed, {len(diff.improved)} improved, "
        f"{diff.unchanged} unchanged, {len(diff.appeared)} only in new, "
        f"{len(diff.disappeared)} only in base"
    )
    for title, changes in (("regressed", diff.regressed), ("improved", diff.improved)):
        rows = [
            f"  {_name(c.key)}: {c.base.c}/{c.base.n} → {c.new.c}/{c.new.n} ({c.delta:+.2f})"
            for c in changes
        ]
        lines += _section(title, rows, limit)
    lines += _section("only in new (not compared)", [f"  {_name(k)}" for k in diff.appeared], limit)
    lines += _section(
        "only in base (not compared)", [f"  {_name(k)}" for k in diff.disappeared], limit
    )
    return lines


def _section(title: str, rows: list[str], limit: int | None) -> list[str]:
    if not rows:
        return []
    shown = rows if limit is None else rows[:limit]
    more = len(rows) - len(shown)
    return [f"{title}:", *shown, *([f"  … {more} more"] if more else [])]


def _name(key: TaskKey) -> str:
    return f"{key[0]}::{key[1]}"
