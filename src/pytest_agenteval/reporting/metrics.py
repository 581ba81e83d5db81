"""pass@k and pass^k estimators and their aggregation over tasks, tags and attempts.

Definitions (per task with n recorded attempts of which c passed; an errored attempt counts as
not passed):

- pass@k = 1 - C(n-c, k) / C(n, k): the chance that at least one of k attempts drawn without
  replacement passes (the unbiased estimator of Chen et al. 2021).
- pass^k = C(c, k) / C(n, k): the chance that all k drawn attempts pass.
- Both are undefined (None) for k > n.

Suite and tag values are means over the tasks for which the value is defined.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

Number = TypeVar("Number", int, float)


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k in product form: exact for large n, no big binomials."""
    _check(n, c, k)
    if k > n:
        return None
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_power_k(n: int, c: int, k: int) -> float | None:
    """pass^k = C(c, k) / C(n, k), the chance that k attempts drawn all pass."""
    _check(n, c, k)
    if k > n:
        return None
    prod = 1.0
    for i in range(k):
        prod *= (c - i) / (n - i)
        if prod == 0.0:
            break
    return prod


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and k >= 1):
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")


class Attempt(Protocol):
    """What metrics read of one attempt record (the store's IndexRow has it all)."""

    @property
    def dataset(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def score(self) -> float | None: ...
    @property
    def duration(self) -> float: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def cost(self) -> float | None: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def phase(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One attempt as plain values (an Attempt)."""

    dataset: str
    task_id: str
    attempt: int
    status: str
    score: float | None = None
    duration: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    tags: tuple[str, ...] = ()
    phase: str | None = None


@dataclass
class TaskMetrics:
    """Per-task counts and estimates."""

    dataset: str
    task_id: str
    tags: tuple[str, ...]
    n: int
    c: int
    errors: int
    pass_at_k: dict[int, float | None]
    pass_power_k: dict[int, float | None]

    @property
    def pass_rate(self) -> float:
        return self.c / self.n if self.n else 0.0


@dataclass
class GroupMetrics:
    """Means over a group of tasks (the suite, or one tag)."""

    n_tasks: int
    pass_at_k: dict[int, float | None]
    pass_power_k: dict[int, float | None]
    tasks_per_k: dict[int, int]
    """How many tasks contributed to each k (those with at least k attempts)."""
    pass_at_1_stderr: float | None = None
    pass_at_1_ci95: tuple[float, float] | None = None


@dataclass
class Totals:
    """Attempt-level totals: counts, score, usage, timing."""

    counts: dict[str, int] = field(default_factory=dict)
    mean_score: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    duration_p50: float | None = None
    duration_p95: float | None = None


def task_metrics(rows: Iterable[Attempt], ks: Sequence[int] | None = None) -> list[TaskMetrics]:
    """Group attempt rows by (dataset, task) and estimate each task's pass@k and pass^k.

    The estimates depend only on n and c, so tasks that share both share the (read-only) dicts.
    """
    grouped: dict[tuple[str, str], list[Attempt]] = {}
    for row in rows:
        grouped.setdefault((row.dataset, row.task_id), []).append(row)
    estimates: dict[tuple[int, int], tuple[dict[int, float | None], dict[int, float | None]]] = {}
    result = []
    for (dataset, task_id), attempts in sorted(grouped.items()):
        n = len(attempts)
        c = sum(1 for a in attempts if a.status == "pass")
        errors = sum(1 for a in attempts if a.status == "error")
        if (n, c) not in estimates:
            task_ks = ks or range(1, n + 1)
            estimates[n, c] = (
                {k: pass_at_k(n, c, k) for k in task_ks},
                {k: pass_power_k(n, c, k) for k in task_ks},
            )
        result.append(
            TaskMetrics(dataset, task_id, attempts[-1].tags, n, c, errors, *estimates[n, c])
        )
    return result


def default_ks(tasks: Sequence[TaskMetrics]) -> list[int]:
    """Every k from 1 to the largest number of attempts of any task."""
    return list(range(1, max((t.n for t in tasks), default=0) + 1))


def group_metrics(tasks: Sequence[TaskMetrics], ks: Sequence[int]) -> GroupMetrics:
    """Suite (or tag) means over the tasks where each k is defined, plus pass@1's stderr."""
    at_k, power_k, per_k = {}, {}, {}
    for k in ks:
        values = [t.pass_at_k.get(k) for t in tasks]
        defined = [v for v in values if v is not None]
        powers = [v for v in (t.pass_power_k.get(k) for t in tasks) if v is not None]
        at_k[k] = _mean(defined)
        power_k[k] = _mean(powers)
        per_k[k] = len(defined)
    group = GroupMetrics(len(tasks), at_k, power_k, per_k)
    firsts = [v for v in (t.pass_at_k.get(1) for t in tasks) if v is not None]
    if len(firsts) >= 2:
        mean = sum(firsts) / len(firsts)
        var = sum((x - mean) ** 2 for x in firsts) / (len(firsts) - 1)
        group.pass_at_1_stderr = math.sqrt(var / len(firsts))
        half = 1.96 * group.pass_at_1_stderr
        group.pass_at_1_ci95 = (max(0.0, mean - half), min(1.0, mean + half))
    return group


def tag_metrics(tasks: Sequence[TaskMetrics], ks: Sequence[int]) -> dict[str, GroupMetrics]:
    """group_metrics for every tag, tags sorted."""
    by_tag: dict[str, list[TaskMetrics]] = {}
    for task in tasks:
        for tag in task.tags:
            by_tag.setdefault(tag, []).append(task)
    return {tag: group_metrics(members, ks) for tag, members in sorted(by_tag.items())}


def totals(rows: Sequence[Attempt]) -> Totals:
    """Counts by status, mean score (errors score 0), summed usage, duration percentiles.
    `over_budget` counts apart the errors whose usage went over their task's budget."""
    counts = {"pass": 0, "fail": 0, "error": 0, "over_budget": 0}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
        if row.phase == "budget":
            counts["over_budget"] += 1
    scores = [0.0 if r.status == "error" else (r.score or 0.0) for r in rows]
    durations = sorted(r.duration for r in rows)
    return Totals(
        counts=counts,
        mean_score=_mean(scores),
        input_tokens=_sum(r.input_tokens for r in rows),
        output_tokens=_sum(r.output_tokens for r in rows),
        cost=_sum(r.cost for r in rows),
        duration_p50=percentile(durations, 50),
        duration_p95=percentile(durations, 95),
    )


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _sum(values: Iterable[Number | None]) -> Number | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
