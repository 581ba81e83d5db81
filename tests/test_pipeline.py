"""The attempt pipeline end to end: every way an attempt can end leaves the right record, and
the limits on agents and graders hold."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import pytest

from helpers import WORKERS, DatasetMaker, stored, summary_of, task

HOSTILE = """
import os, signal, subprocess, sys, time
from pathlib import Path


def exits(task):
    sys.exit(3)


def blocks_alarm(task):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(5)
    Path(__file__).with_name("late.done").write_text("the run waited for the agent")
    return "late"


def swallows_everything(task):
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
    Path(__file__).with_name("late.done").write_text("the run waited for the agent")
    return "late"


def spawns(task):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    Path(__file__).with_name("child.pid").write_text(str(child.pid))
    child.wait()
    return "late"


def answer(task):
    return task.metadata.get("answer", "ok")
"""


def hostile(
    dataset: DatasetMaker, tasks: Mapping[str, str | Mapping[str, Any]], **manifest: object
) -> None:
    root = dataset(tasks, manifest=manifest or None)
    (root / "hostile.py").write_text(HOSTILE)


def test_sys_exit_in_the_agent_is_an_error_record(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """An agent calling sys.exit errors its attempt (recorded), and the gate counts it."""
    hostile(dataset, {"bye.yaml": {**task(), "agent": "hostile:exits"}, "ok.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-min-pass-rate", "0.4")
    result.assert_outcomes(passed=1, errors=1)
    assert ("bye", 0, "error") in stored(pytester.path)
    summary = summary_of(pytester)
    assert summary["counts"] == {
        "pass": 1,
        "fail": 0,
        "error": 1,
        "over_budget": 0,
        "error_classes": {"agent_error": 1},
        "reused": 0,
        "regraded": 0,
        "run": 2,
        "load_error": 0,
    }
    assert summary["metrics"]["pass_at_k"]["1"] == 0.5
    assert result.ret == 1
    result.stdout.fnmatch_lines(["gate NOT met: 1 attempt(s) errored*"])


def test_an_incomplete_run_never_passes_the_gate(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A run stopped by -x is interrupted; the gate fails it whatever pass@1 says."""
    dataset({"a.yaml": task(metadata={"answers": ["no"]}), "b.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", "-x", "--agenteval-min-pass-rate", "0")
    assert result.ret != 0
    assert summary_of(pytester)["status"] == "interrupted"
    result.stdout.fnmatch_lines(["gate NOT met: the run is interrupted*"])


@pytest.mark.slow
def test_a_worker_crash_while_replaying_keeps_the_stored_record(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A worker that dies while an attempt only replays its stored verdict never overwrites it."""
    dataset({f"t{i}.yaml": task("ok") for i in range(4)})
    pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2").assert_outcomes(passed=4)
    pytester.makeconftest(
        """
        import os

        def pytest_runtest_setup(item):
            if item.name == "t2[attempt-0]" and os.environ.get("KILL_ON_REPLAY"):
                os._exit(9)
        """
    )
    os.environ["KILL_ON_REPLAY"] = "1"
    try:
        pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--resume-suite")
    finally:
        del os.environ["KILL_ON_REPLAY"]
    assert stored(pytester.path) == [(f"t{i}", 0, "pass") for i in range(4)]
    assert len(dataset.calls()) == 4


@pytest.mark.slow
def test_a_crashed_attempt_runs_again_on_resume_until_it_crashed_twice(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A crash is an interruption: resume runs it again; a second crash in a row sticks."""
    dataset({"dies.yaml": task(metadata={"exit": 3}), "ok.yaml": task("ok")})
    pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2").assert_outcomes(
        passed=1, errors=1
    )
    assert dataset.calls().count("dies 0") == 1
    plan = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-plan")
    plan.stdout.fnmatch_lines(["  to run (crashed): 1 task (1 attempt): ds/dies"])
    pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--resume-suite")
    assert dataset.calls().count("dies 0") == 2
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--resume-suite")
    result.assert_outcomes(passed=1, errors=1)
    assert dataset.calls().count("dies 0") == 2
    assert ("dies", 0, "error") in stored(pytester.path)


@pytest.mark.parametrize("workers", WORKERS)
def test_a_lone_surrogate_in_a_reason_is_stored_and_reported(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Text UTF-8 cannot hold (a grader's reason, an error) never loses the attempt."""
    root = dataset(
        {
            "odd.yaml": {**task("ok"), "graders": [{"python": {"function": "judge:odd"}}]},
            "boom.yaml": {**task("ok"), "agent": "judge:boom"},
            "ok.yaml": task("ok"),
        }
    )
    (root / "judge.py").write_text(
        "def odd(output):\n    return False, 'bad \\udcff reason'\n\n\n"
        "def boom(task):\n    raise RuntimeError('bad \\udcff byte')\n"
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds", *workers)
    result.assert_outcomes(passed=1, failed=1, errors=1)
    assert result.ret == 1
    assert len(stored(pytester.path)) == 3
    (odd,) = [t for t in summary_of(pytester)["tasks"] if t["task_id"] == "odd"]
    assert odd["attempts"][0]["reason"] == "judge:odd: bad \ufffd reason"
    again = pytester.runpytest_subprocess("--agenteval", "ds", "--resume-suite", *workers)
    again.assert_outcomes(passed=1, failed=1, errors=1)


def test_graders_that_run_away_are_stopped(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A catastrophic regex and a stuck python grader end at grader_timeout as errors that
    name the grader; the other tasks still run."""
    root = dataset(
        {
            "redos.yaml": {
                **task("a" * 41 + "!"),
                "graders": [{"regex": {"pattern": "^(a+)+$"}}],
            },
            "stuck.yaml": {**task("ok"), "graders": [{"python": {"function": "judge:stuck"}}]},
            "ok.yaml": task("ok"),
        },
        manifest={"defaults": {"grader_timeout": 0.5}},
    )
    (root / "judge.py").write_text(
        "import pathlib, time\n\ndef stuck(output):\n    time.sleep(120)\n"
        "    pathlib.Path(__file__).with_name('woke.log').write_text('woke')\n"
    )
    result = pytester.runpytest("--agenteval", "ds")
    assert not (root / "woke.log").exists()  # the run ended before the grader woke
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*grader 'regex' took longer than 0.5s (grader_timeout)*",
            "*grader 'python' took longer than 0.5s (grader_timeout)*",
        ]
    )


@pytest.mark.parametrize("agent", ["blocks_alarm", "swallows_everything", "spawns"])
def test_sync_agent_timeouts_hold(
    pytester: pytest.Pytester, dataset: DatasetMaker, agent: str
) -> None:
    """A sync agent that blocks SIGALRM, swallows every exception or waits on a child ends at
    its timeout; processes it started are killed."""
    hostile(dataset, {"slow.yaml": {**task("ok"), "timeout": 0.5}}, agent=f"hostile:{agent}")
    result = pytester.runpytest("--agenteval", "ds")
    assert not (pytester.path / "ds/late.done").exists(), "the run waited for the agent"
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*agent timed out after 0.5s (abandoned thread; *"])
    pid_file = pytester.path / "ds/child.pid"
    if agent == "spawns":
        result.stdout.fnmatch_lines(["*abandoned thread; 1 child process killed)*"])
        pid = int(pid_file.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


DYING = """
import ctypes, os, sys, time


def exits(task):
    os._exit(0)


def segfaults(task):
    ctypes.string_at(0)


def spins_in_c(task):
    import re
    re.search(r"^(a+)+$", "a" * 40 + "!")


def raises(task):
    raise ValueError("from the child")


def exits_from_its_thread(task):
    import threading

    threading.Thread(target=os._exit, args=(0,)).start()
    time.sleep(30)  # the thread ends the process first (a hang guard)


def forks_a_pool(task):
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(str, ("ok",))


def answers(task):
    return "ok"


async def exits_with_status(task):
    sys.exit(1)


async def answers_awaiting(task):
    return "ok"


async def exits_awaiting(task):
    import asyncio

    await asyncio.sleep(0.2)  # its item waits: the main thread runs the loop by now
    os._exit(0)


exits_awaiting.blocks_loop = False  # the main thread runs its loop under concurrency
"""


def test_isolated_attempts_that_die_are_errors_and_the_session_goes_on(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """With --agenteval-isolate, os._exit, a segfault and a hang in C code each error one
    attempt; the others still run and the session ends with its summary and exit 1."""
    root = dataset(
        {
            "exits.yaml": {**task("ok"), "agent": "dying:exits"},
            "segfaults.yaml": {**task("ok"), "agent": "dying:segfaults"},
            "spins.yaml": {**task("ok"), "agent": "dying:spins_in_c", "timeout": 1},
            "raises.yaml": {**task("ok"), "agent": "dying:raises"},
            "zz_ok.yaml": {**task("ok"), "agent": "dying:answers"},
        }
    )
    (root / "dying.py").write_text(DYING)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-isolate")
    result.assert_outcomes(passed=1, errors=4)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*exits [[]attempt 0[]] error: the attempt's process died without an answer: "
            "exited with status 0*",
            "*ValueError: from the child*",
            "*killed by signal 11 (SIGSEGV)*",
            "*agent timed out after 1s (its process and all it started were killed)*",
        ]
    )
    summary = summary_of(pytester)
    assert summary["status"] == "complete" and summary["counts"]["error"] == 4
    record = [r for r in stored(pytester.path) if r[0] == "raises"]
    assert record == [("raises", 0, "error")]


@pytest.mark.parametrize("concurrency", ["1", "3"])
def test_os_exit_in_an_in_process_agent_errors_its_attempt_and_never_passes(
    pytester: pytest.Pytester, dataset: DatasetMaker, concurrency: str
) -> None:
    """os._exit(0) by an in-process agent (alone, timed, or in flight beside others) is that
    attempt's error: the session goes on, writes its summary and exits 1, never 0; a forked
    pool's children still exit for real."""
    root = dataset(
        {
            "exits.yaml": {**task("ok"), "agent": "dying:exits"},
            "exits_timed.yaml": {**task("ok"), "agent": "dying:exits", "timeout": 5},
            "pool.yaml": {**task("ok"), "agent": "dying:forks_a_pool", "timeout": 20},
            "zz_ok.yaml": task("ok"),
        }
    )
    (root / "dying.py").write_text(DYING)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", concurrency
    )
    assert result.ret == 1
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        ["*AgentExited: the agent called os._exit(0) in the pytest process*"]
    )
    assert summary_of(pytester)["status"] == "complete"


@pytest.mark.parametrize("concurrency", ["1", "2"])
def test_sys_exit_in_an_async_agent_errors_its_attempt_and_the_loop_runs_on(
    pytester: pytest.Pytester, dataset: DatasetMaker, concurrency: str
) -> None:
    """`sys.exit()` in an async agent is its attempt's error, as in a sync one; the event
    loop's thread lives on, so the async attempts after it still run (it hung the session)."""
    root = dataset(
        {
            "exits.yaml": {**task("ok"), "agent": "dying:exits_with_status"},
            "zz_ok.yaml": {**task("ok"), "agent": "dying:answers_awaiting"},
        }
    )
    (root / "dying.py").write_text(DYING)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", concurrency, timeout=60
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*agent call: SystemExit: 1*"])


def test_os_exit_in_an_agent_on_a_loop_the_main_thread_runs_errors_its_attempt(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """An async agent that says it only awaits runs on the main thread under concurrency;
    its os._exit(0) is still its attempt's error (the mark is its call's, not the thread's)."""
    root = dataset(
        {
            "exits.yaml": {**task("ok"), "agent": "dying:exits_awaiting"},
            "zz_ok.yaml": task("ok"),
        }
    )
    (root / "dying.py").write_text(DYING)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-concurrency", "2")
    assert result.ret == 1
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*AgentExited: the agent called os._exit(0) in the pytest process*"]
    )
    assert summary_of(pytester)["status"] == "complete"


def test_os_exit_0_from_a_thread_of_the_agent_ends_the_session_as_a_failure(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """os._exit(0) where no agent call can take it as its error still ends the process, but
    with status 3 and a line saying why: an unfinished run never reads as success."""
    root = dataset({"exits.yaml": {**task("ok"), "agent": "dying:exits_from_its_thread"}})
    (root / "dying.py").write_text(DYING)
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    assert result.ret == 3
    result.stderr.fnmatch_lines(["agenteval: os._exit(0) was called in the pytest process*"])


@pytest.fixture
def no_call_running() -> None:
    """No agent call of an earlier test runs on in this process: an abandoned call (one past
    its timeout, its thread still sleeping) keeps `os._exit` guarded until it really ends,
    as it should, and these tests look at `os._exit` itself."""
    from pytest_agenteval.execution import exits

    end = time.monotonic() + 60
    while exits._state.running and time.monotonic() < end:
        time.sleep(0.05)
    assert not exits._state.running, "an agent call of an earlier test is still running"


@pytest.mark.usefixtures("no_call_running")
def test_os_exit_is_replaced_only_while_an_agent_call_runs() -> None:
    """A guarded process replaces `os._exit` from its first agent call's start to its last
    call's end (calls on two threads overlap), and never after the session."""
    import threading

    from pytest_agenteval.execution.exits import (
        AgentExited,
        guard_exits,
        in_agent_call,
        unguard_exits,
    )

    real = os._exit
    guard_exits(lambda line: None)
    try:
        assert os._exit is real
        assert in_agent_call(True) is False
        assert os._exit is not real
        with pytest.raises(AgentExited):
            os._exit(0)
        started, done = threading.Event(), threading.Event()

        def another_call() -> None:
            in_agent_call(True)
            started.set()
            done.wait(5)
            in_agent_call(False)

        thread = threading.Thread(target=another_call)
        thread.start()
        started.wait(5)
        in_agent_call(False)
        assert os._exit is not real  # the other thread's call still runs
        done.set()
        thread.join(5)
        assert os._exit is real
    finally:
        unguard_exits()
    in_agent_call(True)
    assert os._exit is real  # not guarded any more
    in_agent_call(False)


@pytest.mark.usefixtures("no_call_running")
def test_a_session_leaves_os_exit_alone_outside_agent_calls(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """pytest's and other plugins' code in the session sees the real `os._exit`; the agent's
    call sees the guard; after the session it is the real one."""
    root = dataset({"a.yaml": {**task(expected="guarded"), "agent": "sees:run"}})
    (root / "sees.py").write_text(
        "import os\n\n"
        "REAL = os._exit\n\n"
        "def run(task):\n"
        "    return 'real' if os._exit is REAL else 'guarded'\n"
    )
    pytester.makeconftest(
        "import os\n\n"
        "REAL = os._exit\n\n"
        "def pytest_runtest_teardown(item):\n"
        "    assert os._exit is REAL\n"
    )
    real = os._exit
    pytester.runpytest_inprocess("--agenteval", "ds").assert_outcomes(passed=1)
    assert os._exit is real


def test_a_solo_session_that_dies_names_the_attempt_it_was_running(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A solo run killed by its agent: `agenteval runs` and the next --resume-suite name the
    attempt whose agent was running, and the resume finishes the run (with
    --agenteval-isolate the deadly attempt is one error)."""
    dataset({"a_ok.yaml": task("ok"), "b_dies.yaml": task(metadata={"signal": 9})})
    died = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-run-id", "r1")
    assert died.ret != 0 and "agenteval" not in died.stdout.str().split("collected")[-1]
    listing = pytester.run(sys.executable, "-m", "pytest_agenteval.cli", "runs")
    listing.stdout.fnmatch_lines(["r1 * interrupted (died running b_dies [[]attempt 0[]] of ds)"])
    resumed = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--resume-suite", "--agenteval-isolate"
    )
    resumed.stdout.fnmatch_lines(
        ["agenteval: the last session of this run died while the agent ran b_dies [[]attempt 0[]]*"]
    )
    resumed.assert_outcomes(passed=1, errors=1)
    assert summary_of(pytester, "r1")["status"] == "complete"
    assert dataset.calls() == ["a_ok 0", "b_dies 0", "b_dies 0"]
