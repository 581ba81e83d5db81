"""The runs' comparison: per-task changes and the paired bootstrap of pass@1's change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_agenteval.reporting.diff import (
    METHOD_NORMAL,
    TaskRate,
    bootstrap_interval,
    compare,
    diff_lines,
    suite_change,
)

counts = st.integers(1, 5).flatmap(lambda n: st.builds(TaskRate, st.just(n), st.integers(0, n)))
runs = st.dictionaries(
    st.tuples(st.just("ds"), st.text("abc", min_size=1, max_size=3)), counts, max_size=12
)


def rates(*pairs: tuple[int, int]) -> dict[tuple[str, str], TaskRate]:
    return {("ds", f"t{i}"): TaskRate(n, c) for i, (n, c) in enumerate(pairs)}


@settings(max_examples=40, deadline=None)
@given(runs)
def test_identical_runs_change_nothing(run: dict[tuple[str, str], TaskRate]) -> None:
    """A run compared with itself: change 0, an interval holding 0, nothing listed."""
    diff = compare(run, run, resamples=200)
    assert not (diff.regressed or diff.improved or diff.appeared or diff.disappeared)
    if len(run) >= 2:
        assert diff.change.change == 0 and diff.change.interval == (0.0, 0.0)
        assert not diff.change.significant


@settings(max_examples=40, deadline=None)
@given(runs, runs)
def test_swapping_sides_negates(
    base: dict[tuple[str, str], TaskRate], new: dict[tuple[str, str], TaskRate]
) -> None:
    """diff(B, A) is diff(A, B) mirrored: change and interval negated, lists swapped."""
    forward, backward = compare(base, new, resamples=200), compare(new, base, resamples=200)
    assert forward.appeared == backward.disappeared and forward.disappeared == backward.appeared
    assert [c.key for c in forward.regressed] == [c.key for c in backward.improved]
    if forward.change.change is not None:
        assert backward.change.change == pytest.approx(-forward.change.change)
    if forward.change.interval is not None:
        assert backward.change.interval is not None
        low, high = forward.change.interval
        assert backward.change.interval == pytest.approx((-high, -low))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]), min_size=2, max_size=30))
def test_interval_brackets_the_mean(diffs: list[float]) -> None:
    """The bootstrap interval lies within the differences and holds their mean."""
    low, high = bootstrap_interval(diffs, 500, 1)
    mean = sum(diffs) / len(diffs)
    assert min(diffs) <= low <= mean + 1e-9 and mean - 1e-9 <= high <= max(diffs)


def test_same_inputs_same_interval() -> None:
    """The seed is fixed: a comparison is reproducible."""
    base, new = [1.0, 1.0, 0.0, 1.0, 0.5], [0.0, 1.0, 0.0, 0.5, 0.5]
    assert suite_change(base, new) == suite_change(base, new)


def test_clear_regression_is_significant() -> None:
    """Most tasks going from passing to failing is a fall whose interval lies below 0."""
    base = rates(*[(2, 2)] * 20)
    new = rates(*[(2, 0)] * 15, *[(2, 2)] * 5)
    diff = compare(base, new)
    assert diff.change.change == pytest.approx(-0.75)
    assert diff.change.fell_significantly and len(diff.regressed) == 15


def test_one_flipped_task_in_a_small_suite_is_noise() -> None:
    """One task of five failing once more is not significant: the interval reaches 0."""
    diff = compare(rates(*[(1, 1)] * 5), rates((1, 0), *[(1, 1)] * 4))
    assert diff.change.change == pytest.approx(-0.2)
    assert diff.change.interval is not None and diff.change.interval[1] >= 0
    assert not diff.change.fell_significantly


def test_one_shared_task_has_no_interval() -> None:
    """A single shared task is no sample: a change, but no interval and never significant."""
    change = compare(rates((1, 1)), rates((1, 0))).change
    assert change.change == -1.0 and change.interval is None and not change.significant


def test_many_tasks_use_the_normal_approximation() -> None:
    """Past the draw budget the interval comes from the normal approximation, and says so."""
    base = [1.0] * 1000
    new = [1.0] * 900 + [0.0] * 100
    change = suite_change(base, new)
    assert change.method == METHOD_NORMAL and change.fell_significantly


def test_missing_tasks_are_listed_not_compared() -> None:
    """Tasks on one side only appear in the lists and not in the change."""
    base = {("ds", t): TaskRate(1, 1) for t in ("a", "b", "gone")}
    new = {("ds", t): TaskRate(1, 1) for t in ("a", "b", "new")}
    diff = compare(base, new)
    assert diff.appeared == [("ds", "new")] and diff.disappeared == [("ds", "gone")]
    assert diff.change.shared == 2
    text = "\n".join(diff_lines(diff))
    assert "only in new (not compared):\n  ds::new" in text
    assert "only in base (not compared):\n  ds::gone" in text
