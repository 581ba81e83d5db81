"""pass@k and pass^k estimators and their aggregation over tasks, tags and attempts.

Definitions (per task with n recorded attempts of which c passed; an errored attempt counts as
not passed):

- pass@k = 1 - C(n-c, k) / C(n, k): the chance that at least one of k attempts drawn without
  replacement passes (the unbiased estimator of Chen et al. 2021).
- pass^k = C(c, k) / C(n, k): the chance that all k drawn attempts pass.
- Both are undefined (None) for k > n.

Suite and tag values are means over the tasks for which the value is defined. A task of a run
with variants is a (dataset, task, variant): two variants of one task are two tasks here, never
pooled into one.

pass@1's 95 % interval (`mean_interval`, after Miller 2024, "Adding Error Bars to Evals"): the
tasks are a sample of possible tasks and the attempts a sample of each task's answers, so the
variance of a task's pass rate c/n is the spread between tasks plus the sampling variance
within the task, p(1-p)/(n-1) estimated from its attempts. The standard error of the mean over
T tasks takes the larger of the observed spread of the task means and the mean within-task
variance (a two-level estimate whose between-task part is truncated at zero), at least the
variance tasks all at the overall rate would have (`pass_rate_interval`), and the interval is
mean ± t(0.975, T-1) standard errors: never zero-width while attempts disagree, wide for few
tasks, and none at all below MIN_TASKS tasks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Protocol, TypeVar

Number = TypeVar("Number", int, float)
MIN_TASKS = 3
"""Fewer tasks than this give no interval ("n/a"): two tasks say nothing of the spread."""
INTERVAL_METHOD = "t over tasks, with each task's attempt variance"
"""How the interval is made, for the reports' labels."""


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
    @property
    def variant(self) -> str | None: ...


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
    variant: str | None = None


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
    variant: str | None = None
    """The variant that ran the task; None without variants (and for a task with its own agent)."""

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
    """Group attempt rows by (dataset, task, variant) and estimate each task's pass@k and pass^k,
    in (dataset, task) order, a task without variant before its variants.

    The estimates depend only on n and c, so tasks that share both share the (read-only) dicts.
    """
    grouped: dict[tuple[str, str, str | None], list[Attempt]] = {}
    for row in rows:
        grouped.setdefault((row.dataset, row.task_id, row.variant), []).append(row)
    estimates: dict[tuple[int, int], tuple[dict[int, float | None], dict[int, float | None]]] = {}
    result = []
    for (dataset, task_id, variant), attempts in sorted(grouped.items(), key=_task_order):
        n = len(attempts)
        c = sum(1 for a in attempts if a.status == "pass")
        errors = sum(1 for a in attempts if a.status == "error")
        if (n, c) not in estimates:
            task_ks = ks or range(1, n + 1)
            estimates[n, c] = (
                {k: pass_at_k(n, c, k) for k in task_ks},
                {k: pass_power_k(n, c, k) for k in task_ks},
            )
        at_k, power_k = estimates[n, c]
        tags = attempts[-1].tags
        result.append(TaskMetrics(dataset, task_id, tags, n, c, errors, at_k, power_k, variant))
    return result


def _task_order(item: tuple[tuple[str, str, str | None], object]) -> tuple[str, str, bool, str]:
    """(dataset, task, variant) sortable: None (no variant) cannot be compared with a name."""
    dataset, task_id, variant = item[0]
    return (dataset, task_id, variant is not None, variant or "")


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
    interval = pass_rate_interval([(t.n, t.c) for t in tasks if t.n])
    if interval is not None:
        group.pass_at_1_stderr = interval.stderr
        group.pass_at_1_ci95 = (interval.low, interval.high)
    return group


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean over tasks with its standard error and 95 % interval."""

    mean: float
    stderr: float
    low: float
    high: float


def pass_rate_interval(counts: Sequence[tuple[int, int]]) -> Interval | None:
    """pass@1 of tasks with (n, c) each and its 95 % interval (`mean_interval`). As a task's
    rate varies at least as much as if every task had the overall rate p, p(1-p)/n per task
    is a floor, with p smoothed as Agresti and Coull do ((C+2)/(N+4)) so that a run where
    every attempt passed is not certain either."""
    if not counts:
        return None
    attempts, passed = sum(n for n, _ in counts), sum(c for _, c in counts)
    smoothed = (passed + 2) / (attempts + 4)
    floor = smoothed * (1 - smoothed) * len(counts) / attempts
    within = [rate_variance(n, c) for n, c in counts]
    return mean_interval([c / n for n, c in counts], within, floor=floor)


def rate_variance(n: int, c: int) -> float:
    """The sampling variance of a task's pass rate c/n from its own attempts: p(1-p)/(n-1),
    unbiased; 0 for one attempt, which cannot show it."""
    if n < 2:
        return 0.0
    p = c / n
    return p * (1.0 - p) / (n - 1)


def mean_interval(
    means: Sequence[float],
    within: Sequence[float],
    bounds: tuple[float, float] = (0.0, 1.0),
    floor: float = 0.0,
) -> Interval | None:
    """The mean of per-task values with its 95 % interval, or None below MIN_TASKS tasks.

    `within[i]` is the sampling variance of `means[i]` from the task's own attempts
    (`rate_variance`). The variance of one task's value is estimated as the larger of the
    observed spread and the mean within-task variance, so equal task means whose attempts
    disagree still give a width; the quantile is Student's t with T-1 degrees of freedom.
    `floor` is a least variance of one task's value. The interval is clipped to `bounds`, the
    values' range."""
    n = len(means)
    if n < MIN_TASKS:
        return None
    mean = sum(means) / n
    spread = sum((x - mean) ** 2 for x in means) / (n - 1)
    stderr = math.sqrt(max(spread, sum(within) / n, floor) / n)
    half = t_quantile(0.975, n - 1) * stderr
    return Interval(mean, stderr, max(bounds[0], mean - half), min(bounds[1], mean + half))


@lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for 0.5 < p < 1: exact (the t distribution's closed-form CDF for
    whole degrees of freedom, inverted by bisection) up to 300 degrees of freedom, a
    Cornish-Fisher expansion around the normal quantile above (error below 1e-6 there)."""
    if not (0.5 < p < 1.0 and df >= 1):
        raise ValueError(f"need 0.5 < p < 1 and df >= 1, got p={p} df={df}")
    if df > 300:
        return _cornish_fisher(NormalDist().inv_cdf(p), df)
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        low, high = (mid, high) if _t_cdf(mid, df) < p else (low, mid)
        if high - low < 1e-12:
            break
    return (low + high) / 2.0


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0 and whole df (Abramowitz & Stegun 26.7.3 and 26.7.4)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for j in range(1, (df - 1) // 2):
            term *= cos2 * (2 * j) / (2 * j + 1)
            total += term
        inside = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    else:  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= cos2 * (2 * j - 1) / (2 * j)
            total += term
        inside = math.sin(theta) * total
    return 0.5 + inside / 2.0


def _cornish_fisher(z: float, df: int) -> float:
    """The t quantile from the normal one (Abramowitz & Stegun 26.7.5), for many df."""
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


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
