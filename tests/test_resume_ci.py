"""Money and verdicts in CI: a narrowed session never becomes the run --resume-suite continues,
and a task file that cannot be loaded is never lost from reports or the gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from junitparser import Error, xunit2

from helpers import WORKERS, DatasetMaker, run_layout, summary_of, task
from pytest_agenteval.cli import main

TASKS = {
    "one.yaml": task("ok", tags=["smoke"]),
    "two.yaml": task(metadata={"answers": ["ok", "no"]}),
    "sub/three.yaml": task("ok"),
}
FULL = ["--agenteval", "ds", "--attempts", "2"]


def run_json(root: Path, run_id: str) -> dict[str, Any]:
    return cast(
        dict[str, Any],
        json.loads((root / f".pytest_cache/agenteval/runs/{run_id}/run.json").read_text()),
    )


def run_ids(root: Path) -> set[str]:
    runs = root / ".pytest_cache/agenteval/runs"
    return {p.name for p in runs.iterdir()} if runs.is_dir() else set()


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_narrowed_sessions_never_take_the_full_runs_place(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """A full run, then `-m typo` and `-k one` sessions, then --resume-suite: the full run is
    continued and the agent is not called again."""
    dataset(TASKS)
    run_layout(pytester, *FULL, *workers).assert_outcomes(passed=5, failed=1)
    full = summary_of(pytester)["run_id"]
    calls = len(dataset.calls())
    typo = run_layout(pytester, *FULL, "-m", "typo", *workers)
    typo.stdout.fnmatch_lines(["agenteval: no attempt ran; run * was not kept"])
    run_layout(pytester, *FULL, "-k", "one", *workers).assert_outcomes(passed=2)
    assert len(run_ids(pytester.path)) == 2, "the -m typo session kept a run"
    result = run_layout(pytester, *FULL, "--resume-suite", *workers)
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines([f"agenteval: run {full} (resuming)*"])
    assert len(dataset.calls()) == calls + 2, "only the -k session called the agent"
    summary = summary_of(pytester)
    assert summary["run_id"] == full and summary["counts"]["reused"] == 6


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        ([*FULL, "-k", "one"], "-k 'one' (2 of 6 attempts)"),
        ([*FULL, "-m", "smoke"], "-m 'smoke' (2 of 6 attempts)"),
        ([*FULL, "--deselect", "ds/one.yaml::one[attempt-0]"], "--deselect ds/one.yaml::one"),
        ([*FULL, "--lf"], "--lf (1 of 6 attempts)"),
        (["--attempts", "2", "ds/sub"], "ds/sub (2 of 6 attempts)"),
        (["--attempts", "2", "--agenteval", "ds/sub/three.yaml"], "ds/sub/three.yaml (2 of 6"),
        (["--attempts", "2", "ds/two.yaml::two[attempt-1]"], "ds/two.yaml::two[attempt-1] (1 "),
    ],
    ids=["-k", "-m", "--deselect", "--lf", "folder", "task-file", "node-id"],
)
def test_every_narrowing_marks_the_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, args: list[str], hint: str
) -> None:
    """-k, -m, --deselect, --lf, a folder, a task file or a node id inside the dataset: the run
    is marked narrowed in run.json with what narrowed it, and is not the one resumed."""
    dataset(TASKS)
    pytester.runpytest(*FULL)
    full = summary_of(pytester)["run_id"]
    pytester.runpytest(*args)
    narrowed = summary_of(pytester)["run_id"]
    assert narrowed != full
    meta = run_json(pytester.path, narrowed)
    assert meta["narrowed"] is True and hint in meta["narrowed_by"]
    assert run_json(pytester.path, full)["narrowed"] is False
    calls = len(dataset.calls())
    result = pytester.runpytest(*FULL, "--resume-suite")
    result.stdout.fnmatch_lines([f"agenteval: run {full} (resuming)*"])
    assert len(dataset.calls()) == calls


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_k_inside_a_resume_runs_only_selected_missing_attempts(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """`--resume-suite -k one` continues the full run: only one's missing attempt runs, the
    summary covers the whole run, and the run stays whole (and unfinished) for the next resume."""
    dataset(TASKS)
    run_layout(pytester, *FULL, *workers)
    full = summary_of(pytester)["run_id"]
    calls = len(dataset.calls())
    more = ["--agenteval", "ds", "--attempts", "3", "--resume-suite"]
    result = run_layout(pytester, *more, "-k", "one", *workers)
    result.assert_outcomes(passed=3)
    assert dataset.calls()[calls:] == ["one 2"]
    summary = summary_of(pytester)
    assert summary["run_id"] == full and summary["n_attempts"] == 7
    assert summary["status"] == "interrupted", "two attempts of the run are still missing"
    assert run_json(pytester.path, full)["narrowed"] is False
    run_layout(pytester, *more, *workers).assert_outcomes(passed=8, failed=1)
    assert sorted(dataset.calls()[calls + 1 :]) == ["sub/three 2", "two 2"]
    assert summary_of(pytester)["status"] == "complete"


def test_explicit_run_id_starts_the_run_under_resume(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`--resume-suite --agenteval-run-id ID` starts run ID when it does not exist yet, so the
    same command line retries a CI job; the second time it continues the run."""
    dataset(TASKS)
    retry = [*FULL, "--resume-suite", "--agenteval-run-id", "ci-42"]
    first = pytester.runpytest(*retry)
    first.stdout.fnmatch_lines(["agenteval: run ci-42 (new: nothing to resume yet)*"])
    first.assert_outcomes(passed=5, failed=1)
    calls = len(dataset.calls())
    again = pytester.runpytest(*retry)
    again.stdout.fnmatch_lines(["agenteval: run ci-42 (resuming)*"])
    again.assert_outcomes(passed=5, failed=1)
    assert len(dataset.calls()) == calls == 6


def test_narrowed_runs_are_listed_and_resumed_only_by_id(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`agenteval runs` marks narrowed runs; --resume-suite without an id refuses a narrowed
    run, resuming it by id over the whole dataset makes it a whole run again."""
    dataset(TASKS)
    pytester.runpytest(*FULL, "-k", "one", "--agenteval-run-id", "part")
    result = pytester.runpytest(*FULL, "--resume-suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*no run of dataset ds in *a run of part of the dataset*by its id*"]
    )
    monkeypatch.chdir(pytester.path)
    assert main(["runs"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("part")]
    assert line.endswith("complete, narrowed by -k 'one' (2 of 6 attempts)")
    pytester.runpytest(*FULL, "--resume-suite", "--agenteval-run-id", "part").assert_outcomes(
        passed=5, failed=1
    )
    assert run_json(pytester.path, "part")["narrowed"] is False
    result = pytester.runpytest(*FULL, "--resume-suite")
    result.stdout.fnmatch_lines(["agenteval: run part (resuming)*"])
    assert len(dataset.calls()) == 6


BROKEN: dict[str, str | dict[str, Any]] = {
    "good.yaml": task("ok"),
    "typo.yaml": {**task("ok"), "graders": ["equal"]},
    "syntax.yaml": "input: [unclosed\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_broken_task_files_fail_ci(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Each task that cannot be loaded is an <error> testcase in the per-task junit.xml, counted
    once in summary.json, shown in summary.md and the terminal, and fails the gate even with
    --agenteval-allow-errors; a resume sees it again."""
    dataset(BROKEN)
    gate = ["--agenteval-min-pass-rate", "0.5", "--agenteval-allow-errors"]
    result = run_layout(pytester, "--agenteval", "ds", *gate, *workers)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "1 passed, 0 failed, 0 errors, 2 load errors; 1 run now",
            "2 tasks could not be loaded (not evaluated):",
            "  syntax: ds/syntax.yaml:*",
            "  typo: ds/typo.yaml:*: at graders[[]0[]]: unknown grader 'equal'",
            "gate NOT met: 2 task(s) could not be loaded; pass@1 1.000 alone would meet 0.5",
        ]
    )
    summary = summary_of(pytester)
    assert summary["counts"]["load_error"] == 2
    assert sorted(e["label"] for e in summary["load_errors"]) == ["syntax", "typo"]
    folder = pytester.path / ".pytest_cache/agenteval/runs" / summary["run_id"]
    markdown = (folder / "summary.md").read_text()
    assert "**2 tasks could not be loaded**" in markdown
    assert "- typo: ds/typo.yaml:" in markdown
    assert_junit_errors(folder / "junit.xml")
    allowed = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-allow-errors")
    assert allowed.ret == pytest.ExitCode.TESTS_FAILED
    resumed = run_layout(pytester, "--agenteval", "ds", "--resume-suite", *workers)
    resumed.stdout.fnmatch_lines(["2 tasks could not be loaded (not evaluated):"])
    assert summary_of(pytester)["counts"]["load_error"] == 2


def test_heading_names_the_load_errors(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A run whose every attempt ended but some task files did not load is not headed
    `(complete)`: the heading says how many tasks were not loaded and where they are listed."""
    dataset(BROKEN)
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(
        [
            "run * (complete except 2 tasks that could not be loaded, listed below) · dataset *",
            "2 tasks could not be loaded (not evaluated):",
        ]
    )
    result.stdout.no_fnmatch_line("run * (complete) *")


def assert_junit_errors(path: Path) -> None:
    (suite,) = list(xunit2.JUnitXml.fromfile(str(path)))
    assert (suite.tests, suite.errors, suite.failures) == (3, 2, 0)
    cases = {case.name: case for case in suite}
    assert not cases["good"].result
    (error,) = cases["typo"].result
    assert isinstance(error, Error) and cases["typo"].classname == "ds"
    assert error.message.startswith("ds/typo.yaml:") and "unknown grader 'equal'" in error.message
    assert "Hint: did you mean 'equals'?" in (error.text or "")


def test_rerendered_report_keeps_load_errors(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agenteval report RUN` renders the load errors the run's last session saw."""
    dataset(BROKEN)
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "r1")
    monkeypatch.chdir(pytester.path)
    assert main(["report", "r1", "--out", "again"]) == 0
    assert_junit_errors(pytester.path / "again/junit.xml")


def test_latest_run_skips_narrowed_and_empty_runs(tmp_path: Path) -> None:
    """A run narrowed to part of the dataset, or one with nothing planned (a session killed
    before collection ended), is never the latest run; a whole run is."""
    from pytest_agenteval.store.runs import Store

    store = Store(tmp_path)
    datasets = [{"name": "ds", "version": "1"}]
    store.create_run("whole", datasets, {})
    store.set_planned("whole", 6)
    store.create_run("part", datasets, {})
    store.set_planned("part", 2, "-k 'one' (2 of 6 attempts)")
    store.create_run("empty", datasets, {})
    assert store.latest_run(datasets) == "whole"
    assert store.run("part").narrowed_by == "-k 'one' (2 of 6 attempts)"  # type: ignore[union-attr]
    store.set_planned("part", 6)
    assert store.latest_run(datasets) == "part"
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_a_task_with_a_bad_grader_is_not_part_of_the_whole_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """A task whose grader cannot be built is never counted among the attempts a run must
    cover, also when -k leaves its error item out: a complete run stays complete. (The xdist
    controller builds no grader unless the session left out a task whose spec is valid.)"""
    dataset({**TASKS, "typo.yaml": {**task("ok"), "graders": ["equal"]}})
    full_run = run_layout(pytester, *FULL, *workers)
    full_run.assert_outcomes(passed=5, failed=1, errors=1)
    full = summary_of(pytester)["run_id"]
    assert run_json(pytester.path, full)["narrowed_by"] is None
    narrowed = run_layout(pytester, *FULL, *workers, "-k", "one")
    narrowed.assert_outcomes(passed=2)
    assert run_json(pytester.path, summary_of(pytester)["run_id"])["narrowed_by"].endswith(
        "(2 of 6 attempts)"
    )
    resumed = run_layout(pytester, *FULL, *workers, "--resume-suite", "-k", "one")
    resumed.assert_outcomes(passed=2)
    assert summary_of(pytester, full)["status"] == "complete"


def test_a_session_whose_collection_failed_keeps_no_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under --agenteval-strict a bad task file stops the session before any attempt: no run
    is left behind to be resumed or listed."""
    dataset({**TASKS, "typo.yaml": {**task("ok"), "graders": ["equal"]}})
    result = pytester.runpytest_subprocess(*FULL, "--agenteval-strict")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["agenteval: no attempt ran; run * was not kept"])
    assert run_ids(pytester.path) == set()
