"""`agenteval status` and `agenteval runs` say what is true of a run: damaged, stale, or a
session that is only starting; a run killed before planning can be resumed."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import DatasetMaker, latest_run, run_ids, stored, task
from pytest_agenteval.store.files import locked

GATED = """
import pathlib, time

GO = pathlib.Path(__file__).with_name("go")


def run(task):
    for _ in range(1200):  # a hang guard
        if GO.exists():
            return "ok"
        time.sleep(0.05)
    return "never let through"
"""


def cli(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", *args],
        cwd=pytester.path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def run_dir(pytester: pytest.Pytester, run_id: str) -> Path:
    return pytester.path / ".pytest_cache/agenteval/runs" / run_id


def test_status_of_a_progress_json_without_a_field_says_so(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A progress.json without `status` is named with what is wrong, beside what the run holds,
    not a traceback."""
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    path = run_dir(pytester, latest_run(pytester.path)) / "progress.json"
    data = json.loads(path.read_text())
    del data["status"]
    path.write_text(json.dumps(data))
    shown = cli(pytester, "status")
    assert shown.returncode == 1
    assert "progress.json: field 'status' is missing" in shown.stderr
    assert "the run holds 1 of 1 planned attempts (complete)" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_status_after_kill_9_counts_from_the_index(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """After the session is killed (kill -9), status counts what the run's index holds, not
    what its progress.json last said (written at most once a second: here before the first
    attempt was committed, with calls in flight that died with the session), and says so."""
    dataset(
        {
            "a.yaml": task("ok"),
            "b.yaml": task("no"),
            "c.yaml": task(metadata={"signal": 9}),
            "d.yaml": task("ok"),
        }
    )
    assert pytester.runpytest_subprocess("--agenteval", "ds", "-p", "no:randomly").ret != 0
    path = run_dir(pytester, latest_run(pytester.path)) / "progress.json"
    lagging = {**json.loads(path.read_text()), "status": "running", "done": 0, "pass": 0}
    path.write_text(json.dumps({**lagging, "in_flight": 8}))
    shown = cli(pytester, "status")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].endswith(": interrupted · 2/4 done"), lines
    assert lines[1] == "1 passed, 1 failed, 0 errors"
    assert "in flight" not in shown.stdout
    assert lines[-1].startswith("counted from the run's index: the session that wrote")
    assert lines[-1].endswith("is gone, and its last word was 0/4 done")


def test_runs_lists_the_others_when_one_index_is_unreadable(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`agenteval runs` lists every readable run and names the one whose index it cannot read."""
    dataset({"a.yaml": task("ok")})
    for name in ("good", "bad"):
        pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", name)
    index = run_dir(pytester, "bad") / "index.jsonl"
    index.unlink()
    index.mkdir()  # read as a file, it fails even for root
    shown = cli(pytester, "runs")
    assert shown.returncode == 0
    assert "good " in shown.stdout and "bad " not in shown.stdout
    assert "runs/bad/index.jsonl: cannot read" in shown.stderr and "run skipped" in shown.stderr


@pytest.mark.slow
def test_a_run_killed_before_planning_is_resumed_from_the_start(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session killed while collecting leaves a run `agenteval runs` says died before
    planning; --resume-suite continues that run and runs all of it."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    pytester.makeconftest(
        """
        import os, signal

        def pytest_collection(session):
            if os.environ.get("DIE_COLLECTING"):
                os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    monkeypatch.setenv("DIE_COLLECTING", "1")
    assert pytester.runpytest_subprocess("--agenteval", "ds").ret != 0
    monkeypatch.delenv("DIE_COLLECTING")
    (killed,) = run_ids(pytester.path)
    listing = cli(pytester, "runs").stdout
    assert "0/0       interrupted (died before planning; --resume-suite starts it over)" in listing
    resumed = pytester.runpytest_subprocess("--agenteval", "ds", "--resume-suite")
    resumed.assert_outcomes(passed=2)
    resumed.stdout.fnmatch_lines([f"agenteval: run {killed} (resuming: its last session ended*"])
    assert run_ids(pytester.path) == [killed]
    assert stored(pytester.path) == [("a", 0, "pass"), ("b", 0, "pass")]


@pytest.mark.slow
def test_status_watch_follows_the_session_that_resumes_the_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`status --watch` started as a resume begins does not stop at the last session's final
    state: it says a session is starting and follows it to its end."""
    root = dataset({"a.yaml": task("ok")})
    pytester.runpytest_subprocess("--agenteval", "ds").assert_outcomes(passed=1)
    run_id = latest_run(pytester.path)
    (root / "gated.py").write_text(GATED)
    (root / "b.yaml").write_text(json.dumps({**task(), "agent": "gated:run"}))
    pytester.makeconftest(  # the resume waits before collecting: it has planned nothing yet
        """
        import sys
        sys.path.insert(0, "ds")
        import gated

        def pytest_collection(session):
            gated.run(None)
        """
    )
    command = [sys.executable, "-m", "pytest", "--agenteval", "ds", "--resume-suite"]
    session = subprocess.Popen(command, cwd=pytester.path, stdout=subprocess.PIPE)
    try:
        for _ in range(1200):  # until the resume holds the run (a hang guard)
            if locked(run_dir(pytester, run_id)):
                break
            time.sleep(0.05)
        watch = subprocess.Popen(
            [sys.executable, "-m", "pytest_agenteval.cli", "status", "--watch"],
            cwd=pytester.path, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert watch.stdout is not None
        first = watch.stdout.readline()
        (root / "go").touch()
        rest, _ = watch.communicate(timeout=60)
    finally:
        (root / "go").touch()
        session.communicate(timeout=60)
    assert watch.returncode == 0
    assert "session is starting" in first or ": running · " in first, first
    assert f"run {run_id}: complete · 2/2 done" in rest


def test_status_names_in_flight_and_waiting_with_the_same_numbers(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A live run with attempts waiting (for their limits or turn) says `N in flight, M waiting`
    in its header and above the list of running attempts: never two numbers that differ."""
    dataset({"a.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    path = run_dir(pytester, latest_run(pytester.path)) / "progress.json"
    data = json.loads(path.read_text())
    now = time.time()
    running = [
        {"dataset": "ds", "task": f"t{i}", "variant": None, "attempt": 0, "turn": 0,
         "phase": "waiting" if i >= 15 else "agent", "since": now}
        for i in range(48)
    ]  # fmt: skip
    session = {**data["session"], "pid": os.getpid()}  # this process: a live session
    path.write_text(
        json.dumps({**data, "session": session, "status": "running", "in_flight": 17,
                    "running": running, "updated_at": now})
    )  # fmt: skip
    with open(path.with_name("lock"), "a") as held:  # the run's lock, as its session holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        shown = cli(pytester, "status")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert ", 15 in flight, 33 waiting · " in lines[0], lines
    assert "running (15 in flight, 33 waiting):" in lines
    assert "17 in flight" not in shown.stdout and "running (48)" not in shown.stdout
