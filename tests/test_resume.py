"""Durable records and --resume-suite: nothing finished is redone, nothing committed is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any, cast

import pytest

from helpers import (
    DatasetMaker,
    comparable,
    default_sigint,
    latest_record,
    latest_run,
    stored,
    summary_of,
    task,
)

SLOW = {
    f"t{i:02}.yaml": task(metadata={"answers": ["ok", "no"] if i % 3 else ["ok"], "sleep": 0.15})
    for i in range(10)
}


def start(pytester: pytest.Pytester, *args: str) -> subprocess.Popen[bytes]:
    """Start pytest in its own process group, as a user's terminal would."""
    proc: subprocess.Popen[bytes] = pytester.popen(
        [sys.executable, "-m", "pytest", "--agenteval", "ds", "--attempts", "2", *args],
        # None (inherit the terminal's stdin) is valid for Popen; pytest's annotation omits it.
        stdin=None,  # type: ignore[arg-type]
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    return proc


def wait_for_records(pytester: pytest.Pytester, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(stored(pytester.path)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} records after {timeout}s")


def reference_summary(pytester: pytest.Pytester, *args: str) -> dict[str, Any]:
    """The summary of an uninterrupted run of the same dataset, stored nowhere."""
    pytester.runpytest_subprocess(
        "--agenteval",
        "ds",
        "--attempts",
        "2",
        "-p",
        "no:cacheprovider",
        "--agenteval-report",
        "ref",
        *args,
    )
    return cast(dict[str, Any], json.loads((pytester.path / "ref/summary.json").read_text()))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "workers"),
    [("kill", []), ("kill", ["-n", "2"]), ("sigint", []), ("sigint", ["-n", "2"])],
)
def test_interrupted_run_resumes_without_redoing_work(
    pytester: pytest.Pytester, dataset: DatasetMaker, how: str, workers: list[str]
) -> None:
    """kill -9 or Ctrl-C mid-run, then --resume-suite: every attempt recorded exactly once,
    committed attempts are not run again, and the summary equals an uninterrupted run's."""
    dataset(SLOW)
    proc = start(pytester, *workers)
    wait_for_records(pytester, 6)
    if how == "kill":
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    else:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == pytest.ExitCode.INTERRUPTED
        assert summary_of(pytester)["status"] == "interrupted"
    committed = {(t, a) for t, a, _ in stored(pytester.path)}
    assert 6 <= len(committed) < 20
    calls_before = len(dataset.calls())
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "2", "--resume-suite", *workers
    )
    result.stdout.fnmatch_lines(["*agenteval: run * (resuming)*"])
    rerun = [tuple(c.split()) for c in dataset.calls()[calls_before:]]
    assert not {(t, int(a)) for t, a in rerun} & committed, "a committed attempt ran again"
    assert Counter(rerun).most_common(1)[0][1] == 1
    final = stored(pytester.path)
    assert len(final) == 20 and len({(t, a) for t, a, _ in final}) == 20
    summary = summary_of(pytester)
    assert summary["status"] == "complete"
    assert summary["counts"]["reused"] == len(committed) and summary["counts"]["run"] == 20 - len(
        committed
    )
    assert comparable(summary) == comparable(reference_summary(pytester, *workers))


def test_full_replay_runs_nothing_and_replays_verdicts(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A resume where everything is finished: no agent call, same outcomes, reused=true in JUnit."""
    dataset(
        {
            "a.yaml": task(metadata={"answers": ["ok", "no"]}),
            "e.yaml": task(metadata={"raise": "x"}),
        }
    )
    first = pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    first.assert_outcomes(passed=1, failed=1, errors=2)
    calls = len(dataset.calls())
    again = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "2", "--resume-suite", "--junitxml=out.xml"
    )
    again.assert_outcomes(passed=1, failed=1, errors=2)
    assert len(dataset.calls()) == calls
    again.stdout.fnmatch_lines(
        [
            "a [[]attempt 1[]] failed (replayed from the stored record): "
            "equals: expected 'ok', got 'no'",
            "  [[]FAIL[]] equals: expected 'ok', got 'no'",
        ]
    )
    again.stdout.fnmatch_lines(
        [
            "*e [[]attempt 0[]] errored (replayed from the stored record): RuntimeError: x",
            "error: Traceback*",
            "*RuntimeError: x",
        ]
    )
    assert again.stdout.str().count('<property name="reused" value="true"') == 0
    assert (pytester.path / "out.xml").read_text().count('name="reused" value="true"') == 4
    assert summary_of(pytester)["counts"]["reused"] == 4


def test_resume_never_starts_an_unneeded_agent(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """When everything is reused, neither the session fixture nor a command agent starts."""
    dataset({"a.yaml": task(expected="hi"), "b.yaml": task(expected="hi")})
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="session")
        def agenteval_agent():
            print("AGENT-STARTED")
            return lambda task: "hi"
        """
    )
    assert "AGENT-STARTED" in pytester.runpytest("--agenteval", "ds", "-s").stdout.str()
    result = pytester.runpytest("--agenteval", "ds", "-s", "--resume-suite")
    result.assert_outcomes(passed=2)
    assert "AGENT-STARTED" not in result.stdout.str()


def test_grader_change_regrades_without_calling_the_agent(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    dataset({"a.yaml": task("the answer is ok", expected="ok")})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(failed=1)
    calls = len(dataset.calls())
    dataset({"a.yaml": {**task("the answer is ok", expected="ok"), "graders": ["contains"]}})
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    result.assert_outcomes(passed=1)
    assert len(dataset.calls()) == calls
    summary = summary_of(pytester)
    assert summary["counts"]["regraded"] == 1 and summary["counts"]["pass"] == 1


def test_task_change_runs_again_and_keeps_history(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds")
    dataset({"a.yaml": {**task("ok"), "input": "a new question"}})
    pytester.runpytest("--agenteval", "ds", "--resume-suite").assert_outcomes(passed=1)
    assert len(dataset.calls()) == 2
    assert summary_of(pytester)["counts"]["run"] == 1
    record = latest_record(pytester.path, "a", 0)
    assert len(record["previous"]) == 1


def test_top_up_attempts(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Raising --attempts on resume runs only the missing indices."""
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    pytester.runpytest("--agenteval", "ds", "--attempts", "4", "--resume-suite").assert_outcomes(
        passed=4
    )
    assert dataset.calls() == ["a 0", "a 1", "a 2", "a 3"]
    assert summary_of(pytester)["metrics"]["pass_at_k"].keys() == {"1", "2", "3", "4"}


def test_errors_are_kept_unless_rerun_errors(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    root = dataset({"a.yaml": task(metadata={"raise": "flaky"})}, manifest={"agent": "flaky:run"})
    (root / "flaky.py").write_text(
        "import pathlib\n"
        "def run(task):\n"
        "    marker = pathlib.Path(__file__).with_name('fixed')\n"
        "    if not marker.exists():\n"
        "        raise RuntimeError('flaky')\n"
        "    return 'ok'\n"
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(errors=1)
    (root / "fixed").touch()
    pytester.runpytest("--agenteval", "ds", "--resume-suite").assert_outcomes(errors=1)
    pytester.runpytest("--agenteval", "ds", "--resume-suite", "--rerun-errors").assert_outcomes(
        passed=1
    )
    assert summary_of(pytester)["counts"]["error"] == 0


def test_rerun_replaces_selected_attempts_with_history(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """--agenteval-rerun -k re-executes the selected attempts; the old record becomes history."""
    dataset({"alpha.yaml": task("ok"), "beta.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    result = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "2", "--agenteval-rerun", "-k", "alpha and attempt-1"
    )
    result.assert_outcomes(passed=1)
    assert dataset.calls()[-1] == "alpha 1"
    assert [p["attempt"] for p in latest_record(pytester.path, "alpha", 1)["previous"]] == [1]
    summary = summary_of(pytester)
    assert summary["n_attempts"] == 4 and summary["counts"]["run"] == 1


def test_corrupt_record_is_reported_and_rerun(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A garbled index line (a torn write after a power loss) is reported; the attempt is
    re-indexed from its intact record, and reruns when its record is torn too."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds")
    (index,) = (pytester.path / ".pytest_cache/agenteval/runs").glob("*/index.jsonl")
    lines = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(lines[0] + lines[1][:40])
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["agenteval: store damage: *index.jsonl:2: not valid JSON*; re-indexed from its intact*"]
    )
    assert dataset.calls() == ["a 0", "b 0"]
    assert len(index.read_bytes().splitlines()) == 3, "the torn line was ended, not extended"
    records = index.with_name("records.jsonl")
    index.write_bytes(lines[0] + lines[1][:40])
    records.write_bytes(records.read_bytes()[: json.loads(lines[1])["record"][0] + 40])
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["agenteval: store damage: *index.jsonl:2: not valid JSON*; that attempt runs again"]
    )
    assert dataset.calls() == ["a 0", "b 0", "b 0"]
    assert len(stored(pytester.path)) == 2


def test_unreadable_older_run_is_skipped_with_a_message(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A damaged run that is not the latest is skipped and named, also under -q."""
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "broken")
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "good")
    (pytester.path / ".pytest_cache/agenteval/runs/broken/run.json").write_text("{trunc")
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite", "-q")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["store damage: *broken: run.json is unreadable*agenteval repair broken*; run skipped"]
    )
    assert len(dataset.calls()) == 2


def test_agent_drift_is_refused(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds")
    pytester.makepyfile(other="def run(task):\n    return 'ok'\n")
    result = pytester.runpytest(
        "--agenteval", "ds", "--resume-suite", "--agenteval-agent", "other:run"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*was made with a different agent*",
            "  override: stored None, now 'callable:other:run'",
            "*--agenteval-allow-drift*",
        ]
    )
    result = pytester.runpytest(
        "--agenteval", "ds", "--resume-suite", "--agenteval-agent-version", "2"
    )
    result.stderr.fnmatch_lines(["  version: stored None, now '2'"])
    pytester.runpytest(
        "--agenteval",
        "ds",
        "--resume-suite",
        "--agenteval-agent",
        "other:run",
        "--agenteval-allow-drift",
    ).assert_outcomes(passed=1)


def test_nothing_to_resume(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    dataset({"a.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--resume-suite: no run of dataset ds in *; nothing was started*"]
    )
    assert dataset.calls() == []
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*--resume-suite needs the pytest cache*-p no:cacheprovider*"])


def test_named_runs(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """--agenteval-run-id names a run; resuming it by id works even when newer runs exist."""
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "nightly-1").stdout.fnmatch_lines(
        ["agenteval: run nightly-1 (new)*"]
    )
    pytester.runpytest("--agenteval", "ds")
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "nightly-1")
    result.stderr.fnmatch_lines(
        ["*run 'nightly-1' exists already; add --resume-suite to continue it*"]
    )
    result = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "2", "--agenteval-run-id", "nightly-1", "--resume-suite"
    )
    result.assert_outcomes(passed=2)
    assert summary_of(pytester)["run_id"] == "nightly-1"
    assert len(dataset.calls()) == 3


def test_plan_is_printed_and_nothing_starts(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    dataset({"a.yaml": task("ok"), "b.yaml": {**task("ok"), "graders": ["contains"]}})
    for flags in (["--resume-suite", "--co"], ["--agenteval-plan"]):
        result = pytester.runpytest("--agenteval", "ds", "--attempts", "3", *flags)
        result.stdout.fnmatch_lines(
            [
                "*agenteval plan*",
                "run *: 2 reused, 2 to regrade, 2 to run (nothing was started)",
                "  to regrade (graders changed): 1 task (2 attempts): ds/b",
                "  to run (no record yet): 2 tasks (2 attempts): ds/a, ds/b",
            ]
        )
    assert len(dataset.calls()) == 4


def test_plan_names_what_changed_and_prints_no_tree(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`--agenteval-plan` prints the plan alone (the collected tree only with -v) and counts
    the tasks per changed part (input, expected, metadata, graders, ...), naming the first
    few of each (-v: all); a task with two changed parts counts under both."""
    tasks = {f"t{i}.yaml": task("ok") for i in range(8)}
    dataset(tasks)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=8)
    changed = dict(tasks)
    changed["t0.yaml"] = {**task("ok"), "input": "another question"}
    changed["t1.yaml"] = {**task("ok"), "expected": "OK", "tags": ["new"]}
    changed["t2.yaml"] = {**task("ok", metadata={"seed": 1}), "graders": ["contains"]}
    for i in range(3, 8):
        changed[f"t{i}.yaml"] = {**task("ok"), "description": "now described"}
    dataset(changed)
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-plan")
    assert result.ret == 0
    lines = result.stdout.str().splitlines()
    plan = lines[lines.index(next(x for x in lines if "agenteval plan" in x)) + 1 :]
    assert plan[:6] == [
        "run " + latest_run(pytester.path) + ": 0 reused, 6 to regrade, 2 to run "
        "(nothing was started)",
        "  to regrade (description changed): 5 tasks (5 attempts): ds/t3, ds/t4, ds/t5, "
        "ds/t6, ds/t7",
        "  to regrade (expected changed): 1 task (1 attempt): ds/t1",
        "  to regrade (tags changed): 1 task (1 attempt): ds/t1",
        "  to run (graders changed): 1 task (1 attempt): ds/t2",
        "  to run (input changed): 1 task (1 attempt): ds/t0",
    ]
    assert "  to run (metadata changed): 1 task (1 attempt): ds/t2" in plan
    assert not any("AttemptItem" in line or "TaskFile" in line for line in lines)
    verbose = pytester.runpytest("--agenteval", "ds", "--agenteval-plan", "-v").stdout.str()
    assert "<AttemptItem t0[attempt-0]>" in verbose and "ds/t7" in verbose
    many = {f"t{i}.yaml": {**task("ok"), "timeout": 9} for i in range(9)}
    dataset(many)
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-plan")
    result.stdout.fnmatch_lines(
        [
            "  to regrade (timeout changed): 8 tasks (8 attempts): ds/t0, ds/t1, ds/t2, ds/t3, "
            "ds/t4, … 3 more (-v shows all)",
            "  to run (no record yet): 1 task (1 attempt): ds/t8",
        ]
    )
    assert len(dataset.calls()) == 8


@pytest.mark.slow
def test_cache_clear_keeps_runs(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """--cache-clear clears pytest's own cache, never stored runs (also under -n 2)."""
    dataset({f"t{i}.yaml": task("ok") for i in range(6)})
    pytester.runpytest_subprocess("--agenteval", "ds", "--cache-clear", "-n", "2").assert_outcomes(
        passed=6
    )
    assert len(stored(pytester.path)) == 6
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--cache-clear", "--resume-suite", "-n", "2"
    )
    result.assert_outcomes(passed=6)
    assert len(dataset.calls()) == 6


def test_a_usage_error_leaves_the_resumed_run_as_it_was(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A resume that ends in a usage error before any attempt (here a path that does not
    exist: `--resume-suite RUNID` read as one) records no session and rewrites no report: the
    run's status, sessions and summary stay as the last real session left them."""
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    (run,) = (pytester.path / ".pytest_cache/agenteval/runs").iterdir()
    before = {name: (run / name).read_bytes() for name in ("summary.json", "junit.xml")}
    sessions = json.loads((run / "run.json").read_text())["sessions"]
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite", run.name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    meta = json.loads((run / "run.json").read_text())
    assert (meta["status"], meta["sessions"]) == ("complete", sessions)
    assert {name: (run / name).read_bytes() for name in before} == before
