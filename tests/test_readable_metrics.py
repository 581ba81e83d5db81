"""Metrics people can read after uneven runs: tasks per k, a per-tag table, the interval named."""

from __future__ import annotations

import pytest

from helpers import DatasetMaker, summary_of, task

TAGGED = {
    "always.yaml": task(metadata={"answers": ["ok"]}, tags=["easy"]),
    "once.yaml": task(metadata={"answers": ["ok", "no", "no"]}, tags=["easy", "hard"]),
    "never.yaml": task(metadata={"answers": ["no"]}, tags=["hard"]),
}


def test_uneven_run_shows_tasks_behind_each_k(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A resume that gives one task a third attempt: k=3 rests on 1 task, and every report
    says so next to each k (summary.json, terminal, summary.md)."""
    dataset(TAGGED)
    pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--agenteval-run-id", "u")
    result = pytester.runpytest(
        "--agenteval",
        "ds",
        "--attempts",
        "3",
        "--agenteval-run-id",
        "u",
        "--resume-suite",
        "-k",
        "once",
    )
    summary = summary_of(pytester, "u")
    m = summary["metrics"]
    assert m["tasks_per_k"] == {"1": 3, "2": 3, "3": 1}
    assert m["pass_at_k"]["3"] == pytest.approx(1.0)  # only `once`, which passed one of three
    result.stdout.fnmatch_lines(
        [
            "pass@k @1 * @2 * @3 1.000  (over 3, 3, 1 tasks: those with >= k attempts)",
            "pass@1 *, 95% CI *-* by t over tasks* (standard error * across 3 tasks)",
        ]
    )
    markdown = (pytester.path / ".pytest_cache/agenteval/runs/u/summary.md").read_text()
    assert "| 3 | 1.000 | 0.000 | 1 |" in markdown
    assert "means over the tasks with at least k attempts (tasks per k: 1: 3, 2: 3, 3: 1)" in (
        markdown
    )


def test_even_run_and_tag_table(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """An even run says once how many tasks each k rests on; tags get a table with pass@1,
    its interval and pass@k in the terminal and in summary.md."""
    dataset(TAGGED)
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "3")
    result.stdout.fnmatch_lines(
        [
            "pass@k @1 0.444  @2 0.556  @3 0.667  (over 3 tasks each)",
            "by tag:",
            "  tag   tasks  pass@1  95% CI       pass@3",
            "  easy      2   0.667  n/a          1.000",
            "  hard      2   0.167  n/a          0.500",
        ]
    )
    markdown = summary_of(pytester)
    run_md = next((pytester.path / ".pytest_cache/agenteval/runs").glob("*/summary.md"))
    text = run_md.read_text()
    assert "| tag | tasks | pass@1 | 95% CI | pass@3 |" in text
    assert "| easy | 2 | 0.667 | n/a | 1.000 |" in text  # fewer than MIN_TASKS tasks
    assert markdown["tags"]["easy"]["n_tasks"] == 2


def test_tag_table_is_capped(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Many tags: the terminal shows ten rows and how many more; -v shows them all."""
    dataset({f"t{i}.yaml": task("ok", tags=[f"tag{i:02}"]) for i in range(12)})
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(["  tag09 * 1.000*", "  … 2 more tags (-v shows all)"])
    result = pytester.runpytest("--agenteval", "ds", "-v")
    result.stdout.fnmatch_lines(["  tag11 * 1.000*"])
    result.stdout.no_fnmatch_line("*more tags*")


def test_usage_in_markdown(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """summary.md shows the run's tokens and cost when the agent reports them."""
    root = dataset({"a.yaml": task(expected="x")}, manifest={"agent": "usage_agent:run"})
    (root / "usage_agent.py").write_text(
        "from pytest_agenteval import AgentResult, Usage\n"
        "def run(task):\n"
        "    return AgentResult(output='x', usage=Usage(input_tokens=10, output_tokens=5, "
        "cost=0.02))\n"
    )
    pytester.runpytest("--agenteval", "ds", "--agenteval-report", "rep")
    markdown = (pytester.path / "rep/summary.md").read_text()
    assert "- tokens 10 in / 5 out\n- cost 0.0200\n" in markdown
