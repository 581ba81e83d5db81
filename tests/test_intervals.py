"""pass@1's 95 % interval: one estimator (tasks as a sample, each task's attempts as a sample),
checked against a simulation and shown alike by every report."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET

import pytest

from helpers import DatasetMaker, summary_of
from pytest_agenteval.reporting.diff import normal_interval
from pytest_agenteval.reporting.metrics import (
    MIN_TASKS,
    mean_interval,
    pass_rate_interval,
    t_quantile,
)


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 4, 2.776),
        (0.975, 9, 2.262),
        (0.975, 19, 2.093),
        (0.975, 99, 1.984),
        (0.975, 1000, 1.962),
        (0.995, 10, 3.169),
        (0.95, 7, 1.895),
    ],
)
def test_t_quantile_matches_the_table(p: float, df: int, table: float) -> None:
    """Student's t quantiles agree with the printed table to its three decimals."""
    assert t_quantile(p, df) == pytest.approx(table, abs=6e-4)


def _coverage(tasks: int, attempts: int, runs: int, rng: random.Random) -> tuple[float, int]:
    """How often the interval holds the true mean rate, and how many intervals had no width,
    over `runs` simulated suites: task rates drawn from Beta(2, 2) (mean 0.5), Bernoulli
    attempts."""
    hits = flat = 0
    for _ in range(runs):
        rates = [rng.betavariate(2, 2) for _ in range(tasks)]
        counts = [(attempts, sum(rng.random() < p for _ in range(attempts))) for p in rates]
        interval = pass_rate_interval(counts)
        assert interval is not None
        hits += interval.low <= 0.5 <= interval.high
        flat += interval.low == interval.high
    return hits / runs, flat


@pytest.mark.parametrize("tasks", [5, 20, 100])
@pytest.mark.parametrize("attempts", [1, 3])
def test_interval_covers_the_true_rate_about_95_percent(tasks: int, attempts: int) -> None:
    """Simulated suites with known task rates: the 95 % interval holds the true mean in at
    least 92 % of them (pass/fail outcomes are too coarse for exactly 95 %; 1,000 suites give
    a standard error of 0.7 points), not far above 95 % once there are 20 tasks, and never
    has zero width."""
    coverage, flat = _coverage(tasks, attempts, 1000, random.Random(tasks * 10 + attempts))
    assert flat == 0
    assert coverage >= 0.92
    if tasks >= 20:
        assert coverage <= 0.985


def test_equal_task_rates_with_disagreeing_attempts_keep_a_width() -> None:
    """Three tasks at 2/3 each (the example suite's `reasoning`) get an interval of real
    width, an extreme suite (every attempt passed) is not certain either, and fewer than
    MIN_TASKS tasks get none."""
    interval = pass_rate_interval([(3, 2)] * 3)
    assert interval is not None and interval.high - interval.low > 0.3
    perfect = pass_rate_interval([(3, 3)] * 20)
    assert perfect is not None and perfect.low < 1.0 == perfect.high
    assert pass_rate_interval([(3, 2)] * (MIN_TASKS - 1)) is None


def test_diff_normal_branch_is_the_same_estimator() -> None:
    """`agenteval diff` past its draw budget uses `mean_interval` on the paired differences,
    with both runs' attempt variance: equal differences whose attempts disagree keep a width."""
    diffs, within = [0.0] * 600, [0.1] * 600
    interval = mean_interval(diffs, within, bounds=(-1.0, 1.0))
    assert interval is not None
    assert normal_interval(diffs, within) == (interval.low, interval.high)
    assert interval.low < 0 < interval.high


def test_every_report_shows_the_same_interval(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Three tasks that each pass 2 of 3 attempts: summary.json, the terminal, summary.md,
    the suite's JUnit properties and the HTML report give the interval `pass_rate_interval`
    computes, and it is not zero-width."""
    answers = {"answers": ["ok", "ok", "no"]}
    dataset({f"t{i}.yaml": {"input": "q", "expected": "ok", "metadata": answers} for i in range(3)})
    result = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "3", "--agenteval-html", "r.html", "--junitxml=x.xml"
    )
    result.assert_outcomes(passed=6, failed=3)
    expected = pass_rate_interval([(3, 2)] * 3)
    assert expected is not None and expected.low < expected.high
    summary = summary_of(pytester)
    assert summary["metrics"]["pass_at_1_ci95"] == pytest.approx([expected.low, expected.high])
    shown = f"{expected.low:.3f}-{expected.high:.3f}"
    result.stdout.fnmatch_lines([f"pass@1 0.667, 95% CI {shown} by t over tasks*"])
    run = pytester.path / ".pytest_cache/agenteval/runs" / summary["run_id"]
    assert f"95% CI {shown}" in (run / "summary.md").read_text()
    assert f"95% CI {shown}" in (pytester.path / "r.html").read_text()
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    low, high = json.loads(props["pass_at_1_ci95"] or "null")
    assert (low, high) == pytest.approx((expected.low, expected.high), abs=1e-3)
