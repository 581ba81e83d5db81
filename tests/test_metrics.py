"""pass@k / pass^k estimators against an independent brute-force formulation."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_agenteval.reporting.metrics import (
    AttemptRow,
    group_metrics,
    pass_at_k,
    pass_power_k,
    percentile,
    tag_metrics,
    task_metrics,
    totals,
)


def brute_force(n: int, c: int, k: int) -> tuple[Fraction, Fraction]:
    """Enumerate every k-subset of n attempts (c passing): P(any passes), P(all pass)."""
    attempts = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    any_pass = sum(any(attempts[i] for i in s) for s in subsets)
    all_pass = sum(all(attempts[i] for i in s) for s in subsets)
    return Fraction(any_pass, len(subsets)), Fraction(all_pass, len(subsets))


@given(
    st.integers(1, 10).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_estimators_equal_enumeration_of_k_subsets(nck: tuple[int, int, int]) -> None:
    """Both estimators equal the exact probabilities over all k-subsets for small n."""
    n, c, k = nck
    at_k, power_k = brute_force(n, c, k)
    assert pass_at_k(n, c, k) == pytest.approx(float(at_k), abs=1e-12)
    assert pass_power_k(n, c, k) == pytest.approx(float(power_k), abs=1e-12)


@given(
    st.integers(1, 5000).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_estimators_match_binomial_form_for_large_n(nck: tuple[int, int, int]) -> None:
    """The product form equals 1 - C(n-c,k)/C(n,k) and C(c,k)/C(n,k), computed exactly."""
    n, c, k = nck
    total = math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(1 - Fraction(math.comb(n - c, k), total), abs=1e-9)
    assert pass_power_k(n, c, k) == pytest.approx(Fraction(math.comb(c, k), total), abs=1e-9)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_identities(nc: tuple[int, int]) -> None:
    """pass@1 = pass^1 = c/n; pass@k grows and pass^k shrinks with k; bounds hold."""
    n, c = nc
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    assert pass_power_k(n, c, 1) == pytest.approx(c / n)
    ats = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    powers = [pass_power_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in ats + powers)  # type: ignore[operator]
    assert ats == sorted(ats)  # type: ignore[type-var]
    assert powers == sorted(powers, reverse=True)  # type: ignore[type-var]


def test_k_above_n_is_undefined() -> None:
    """For k > n there is no estimate: None, never a made-up number."""
    assert pass_at_k(3, 1, 4) is None
    assert pass_power_k(3, 3, 4) is None


def test_invalid_counts_are_rejected() -> None:
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(2, 3, 1)


def rows(task: str, statuses: str, tags: tuple[str, ...] = ()) -> list[AttemptRow]:
    code = {"p": "pass", "f": "fail", "e": "error"}
    return [AttemptRow("ds", task, i, code[s], tags=tags) for i, s in enumerate(statuses)]


def test_suite_means_and_errors_count_as_not_passed() -> None:
    """Suite values are means over tasks; errors are not passes; k > n tasks do not contribute."""
    tasks = task_metrics(rows("a", "ppf", ("x",)) + rows("b", "fe", ("x", "y")) + rows("c", "p"))
    by_id = {t.task_id: t for t in tasks}
    assert (by_id["b"].n, by_id["b"].c, by_id["b"].errors) == (2, 0, 1)
    suite = group_metrics(tasks, [1, 2, 3])
    assert suite.pass_at_k[1] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert suite.tasks_per_k == {1: 3, 2: 2, 3: 1}
    assert suite.pass_at_k[3] == pytest.approx(1.0)
    assert suite.pass_power_k[2] == pytest.approx((1 / 3 + 0) / 2)
    firsts = [2 / 3, 0.0, 1.0]
    mean = sum(firsts) / 3
    stderr = math.sqrt(sum((x - mean) ** 2 for x in firsts) / 2 / 3)
    assert suite.pass_at_1_stderr == pytest.approx(stderr)
    tags = tag_metrics(tasks, [1])
    assert tags["x"].n_tasks == 2 and tags["y"].pass_at_k[1] == 0.0


def test_totals_and_percentiles() -> None:
    """Counts by status, mean score with errors as 0, summed usage, nearest-rank percentiles."""
    data = [
        AttemptRow("d", "t", 0, "pass", 1.0, 1.0, 10, 5, 0.5),
        AttemptRow("d", "t", 1, "fail", 0.5, 2.0, None, 7, None),
        AttemptRow("d", "t", 2, "error", 1.0, 3.0),
    ]
    tot = totals(data)
    assert tot.counts == {"pass": 1, "fail": 1, "error": 1, "over_budget": 0}
    assert tot.mean_score == pytest.approx(0.5)
    assert (tot.input_tokens, tot.output_tokens, tot.cost) == (10, 12, 0.5)
    assert (tot.duration_p50, tot.duration_p95) == (2.0, 3.0)
    assert percentile([], 50) is None
