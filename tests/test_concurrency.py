"""Attempts in flight (`--agenteval-concurrency`): same results as a serial run, real overlap,
timeouts, and xdist scheduling modes that never run an attempt twice nor lose one."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from helpers import DatasetMaker, aid, comparable, stored, summary_of, task

MIXED = {
    **{f"ok{i}.yaml": task(metadata={"answers": ["ok", "no", "ok"]}, tags=["a"]) for i in range(5)},
    "bad.yaml": task(metadata={"answers": ["no"]}, tags=["b"]),
    "boom.yaml": task(metadata={"raise": "x"}),
    "list.yaml": {"tasks": [{"id": f"l{i}", **task("ok")} for i in range(3)]},
}

# An agent that logs when each call starts and ends (wall clock, pid), sync and async flavours.
TIMED = """
import asyncio, json, os, pathlib, time

LOG = pathlib.Path(__file__).with_name("spans.log")


def _log(task, start):
    line = json.dumps([task.id, task.attempt, start, time.time(), os.getpid()])
    with LOG.open("a") as log:
        log.write(line + "\\n")


def run(task):
    start = time.time()
    time.sleep(task.metadata.get("sleep", 0.2))
    _log(task, start)
    return "ok"


async def run_async(task):
    start = time.time()
    await asyncio.sleep(task.metadata.get("sleep", 0.2))
    _log(task, start)
    return "ok"
"""


def spans(root: Path) -> list[tuple[str, int, float, float, int]]:
    """(task id, attempt, start, end, pid) of every finished agent call."""
    log = root / "spans.log"
    return (
        [tuple(json.loads(line)) for line in log.read_text().splitlines()] if log.exists() else []
    )


def most_overlapping(calls: list[Any]) -> int:
    """The largest number of calls running at one moment."""
    events = sorted([(c[2], 1) for c in calls] + [(c[3], -1) for c in calls])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def timed_dataset(dataset: DatasetMaker, n: int, agent: str = "timed:run", **meta: Any) -> Path:
    root = dataset(
        {f"t{i:02}.yaml": task(metadata=dict(meta), expected="ok") for i in range(n)},
        manifest={"agent": agent},
    )
    (root / "timed.py").write_text(TIMED)
    return root


@pytest.mark.parametrize(
    "extra",
    [pytest.param([], id="solo"), pytest.param(["-n", "2"], id="n2", marks=pytest.mark.slow)],
)
def test_summary_is_the_same_at_concurrency_1_and_16(
    pytester: pytest.Pytester, dataset: DatasetMaker, extra: list[str]
) -> None:
    """For a deterministic agent, summary.json at concurrency 16 equals the serial run's."""
    dataset(MIXED)
    pytester.runpytest("--agenteval", "ds", "--attempts", "3", "-p", "no:xdist")
    serial = comparable(summary_of(pytester))
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "3", "--agenteval-concurrency", "16", *extra
    )
    result.assert_outcomes(passed=19, failed=8, errors=3)
    assert comparable(summary_of(pytester)) == serial
    assert len(stored(pytester.path)) == 30


@pytest.mark.parametrize("agent", ["timed:run", "timed:run_async"])
def test_attempts_really_overlap(
    pytester: pytest.Pytester, dataset: DatasetMaker, agent: str
) -> None:
    """Sync and async agents have up to N calls in flight at once, never more."""
    root = timed_dataset(dataset, 12, agent)
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-concurrency", "4")
    result.assert_outcomes(passed=12)
    calls = spans(root)
    assert len(calls) == 12
    assert 2 <= most_overlapping(calls) <= 4


THREADS = """
import asyncio, pathlib, threading

LOG = pathlib.Path(__file__).with_name("threads.log")


async def run(task):
    pool = any(t.name.startswith("agenteval-attempt") for t in threading.enumerate())
    with LOG.open("a") as log:
        log.write(f"{threading.current_thread().name} {pool}\\n")
    await asyncio.sleep(0.05)
    return "ok"
"""


def test_async_agents_are_awaited_on_the_loop_with_no_thread_per_call(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under concurrency an async agent with nothing around its call (no workspace, limits
    or program graders) is awaited on the executor's event loop: no pool thread is made."""
    root = dataset({f"t{i}.yaml": task() for i in range(8)}, manifest={"agent": "threads:run"})
    (root / "threads.py").write_text(THREADS)
    # a process of its own: no pool thread of an earlier in-process session is there
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-concurrency", "4")
    result.assert_outcomes(passed=8)
    lines = (root / "threads.log").read_text().splitlines()
    assert lines == ["agenteval-event-loop False"] * 8


def test_manifest_default_sets_concurrency(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`defaults.concurrency` in the manifest applies when no option says otherwise."""
    root = timed_dataset(dataset, 6)
    manifest = json.loads((root / "agenteval.yaml").read_text())
    manifest["defaults"] = {"concurrency": 3}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=6)
    assert 2 <= most_overlapping(spans(root)) <= 3


def test_command_agents_run_as_concurrent_subprocesses(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Command agents are subprocesses running side by side."""
    root = timed_dataset(dataset, 8)
    (root / "cmd.py").write_text(
        "import sys, types, timed\n"
        "timed.run(types.SimpleNamespace(id=sys.argv[1], attempt=0, metadata={}))\n"
        "print('ok')\n"
    )
    manifest = json.loads((root / "agenteval.yaml").read_text())
    manifest["agent"] = {"command": ["{python}", "{dataset}/cmd.py", "{task_id}"]}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-concurrency", "8")
    result.assert_outcomes(passed=8)
    assert most_overlapping(spans(root)) >= 2


@pytest.mark.parametrize("kind", ["sync", "async", "command"])
def test_timeouts_under_concurrency(
    pytester: pytest.Pytester, dataset: DatasetMaker, kind: str
) -> None:
    """A call past its timeout errors its attempt alone; its neighbours still pass."""
    slow = {"sleep": 30} if kind == "sync" else {"async_sleep": 30}
    tasks: dict[str, Any] = {f"ok{i}.yaml": task("ok") for i in range(4)}
    tasks["slow.yaml"] = {**task("ok", metadata=slow), "timeout": 0.5}
    root = dataset(tasks)
    if kind == "async":
        manifest = json.loads((root / "agenteval.yaml").read_text())
        manifest["agent"] = "agent:run_async"
        (root / "agenteval.yaml").write_text(json.dumps(manifest))
    if kind == "command":
        (root / "cmd.py").write_text(
            "import sys, time\nif sys.argv[1] == 'slow':\n    time.sleep(30)\nprint('ok')\n"
        )
        manifest = json.loads((root / "agenteval.yaml").read_text())
        manifest["agent"] = {"command": [sys.executable, "{dataset}/cmd.py", "{task_id}"]}
        (root / "agenteval.yaml").write_text(json.dumps(manifest))
        for name in list(tasks):
            (root / name).write_text(json.dumps({**tasks[name], "expected": "ok"}))
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "4", timeout=60
    )
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*timed out after 0.5s*"])


@pytest.mark.parametrize(
    "dist",
    [
        "load",
        pytest.param("loadscope", marks=pytest.mark.slow),
        pytest.param("loadfile", marks=pytest.mark.slow),
    ],
)
def test_no_attempt_runs_twice_under_xdist(
    pytester: pytest.Pytester, dataset: DatasetMaker, dist: str
) -> None:
    """Under each safe --dist mode every attempt's agent runs exactly once and is recorded."""
    root = timed_dataset(dataset, 10, sleep=0.05)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "3", "-n", "2", "--dist", dist,
        "--agenteval-concurrency", "8",
    )  # fmt: skip
    result.assert_outcomes(passed=30)
    keys = [(c[0], c[1]) for c in spans(root)]
    assert sorted(keys) == sorted({(f"t{i:02}", a) for i in range(10) for a in range(3)})
    assert len(stored(pytester.path)) == 30


def test_worksteal_is_refused(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """--dist worksteal takes queued items away, so concurrency with it is a usage error."""
    dataset({"a.yaml": task("ok")})
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--dist", "worksteal", "--agenteval-concurrency", "4"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot be combined with --dist worksteal*"])


def test_session_fixture_agent_runs_ahead(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A session-scoped `agenteval_agent` fixture is resolved on the main thread and its calls
    overlap; the fixture is made once."""
    root = timed_dataset(dataset, 6)
    manifest = json.loads((root / "agenteval.yaml").read_text())
    del manifest["agent"]
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    pytester.makeconftest(
        """
        import pytest, sys
        sys.path.insert(0, "ds")

        @pytest.fixture(scope="session")
        def agenteval_agent():
            import timed
            with open("made.log", "a") as f:
                f.write("made\\n")
            return timed.run
        """
    )
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-concurrency", "6")
    result.assert_outcomes(passed=6)
    assert (pytester.path / "made.log").read_text() == "made\n"
    assert most_overlapping(spans(root)) >= 2


def _starts_apart(calls: list[tuple[str, int, float, float, int]]) -> float:
    starts = sorted(c[2] for c in calls)
    return min(b - a for a, b in pairwise(starts))


@pytest.mark.slow
def test_manifest_limits_hold_across_xdist_workers(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`limits` in the manifest hold for the whole run under -n 2 with attempts in flight:
    never more than max_in_flight calls overlap, starts at least min_interval apart."""
    root = timed_dataset(dataset, 16, sleep=0.15)
    manifest = json.loads((root / "agenteval.yaml").read_text())
    manifest["limits"] = {"max_in_flight": 2, "min_interval": 0.05}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "4"
    )
    result.assert_outcomes(passed=16)
    calls = spans(root)
    assert len({c[4] for c in calls}) == 2  # both workers ran attempts
    assert most_overlapping(calls) == 2
    assert _starts_apart(calls) >= 0.05 - 0.005  # the agent stamps its start a little later


@pytest.mark.slow
def test_task_agent_limits_and_command_line_twins(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A task's own `agent:` mapping carries limits for that agent; the command line's
    --agenteval-max-in-flight overrides them."""
    root = timed_dataset(dataset, 0)
    for i in range(8):
        spec = {
            **task(expected="ok"),
            "agent": {"callable": "timed:run", "limits": {"max_in_flight": 3}},
        }
        (root / f"t{i}.yaml").write_text(json.dumps(spec))
    pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "8"
    ).assert_outcomes(passed=8)
    assert most_overlapping(spans(root)) == 3
    (root / "spans.log").unlink()
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "8", "--agenteval-max-in-flight", "1",
        "--resume-suite", "--agenteval-rerun",
    )  # fmt: skip
    result.assert_outcomes(passed=8)
    assert most_overlapping(spans(root)) == 1


def test_limits_are_not_part_of_the_digests(tmp_path: Path) -> None:
    """Adding limits to a task's agent (or a plugin agent's mapping) leaves its digests alone,
    so a resume reuses what was recorded before."""
    from pytest_agenteval.sources.dataset import TaskDef, load_dataset, load_task_file

    (tmp_path / "agenteval.yaml").write_text("name: d\nagent: agent:run\n")
    digests = []
    for agent in (
        {"callable": "agent:run"},
        {"callable": "agent:run", "limits": {"max_in_flight": 2, "min_interval": 0.5}},
        {"llm": {"model": "m"}},
        {"llm": {"model": "m"}, "limits": {"max_in_flight": 2}},
    ):
        path = tmp_path / "t.yaml"
        path.write_text(json.dumps({"input": "x", "expected": "1", "agent": agent}))
        (loaded,) = load_task_file(path, load_dataset(tmp_path), lambda spec, task: None)
        assert isinstance(loaded, TaskDef), loaded
        digests.append((loaded.digest, loaded.run_digest))
    assert digests[0] == digests[1] and digests[2] == digests[3]


def test_collect_only_starts_no_attempt(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """--co (and --agenteval-plan) with concurrency schedules nothing: no agent call."""
    dataset({f"t{i}.yaml": task("ok") for i in range(5)})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-concurrency", "4", "--co")
    assert result.ret == 0
    assert dataset.calls() == []


@pytest.mark.slow
def test_exitfirst_loses_at_most_what_was_in_flight(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """-x with attempts in flight records only what was reported; calls started ahead are
    lost (at most twice the concurrency: in flight, and done awaiting their turn) and run
    again by the resume."""
    tasks: dict[str, Any] = {"a00.yaml": task("no", metadata={"sleep": 0.2})}
    tasks.update({f"t{i:02}.yaml": task("ok", metadata={"sleep": 0.2}) for i in range(20)})
    dataset(tasks)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "4", "-x"
    )
    result.assert_outcomes(failed=1)
    assert stored(pytester.path) == [("a00", 0, "fail")]
    assert 1 <= len(dataset.calls()) <= 1 + 2 * 4
    pytester.runpytest_subprocess("--agenteval", "ds", "--resume-suite").assert_outcomes(
        passed=20, failed=1
    )
    assert len(stored(pytester.path)) == 21


def test_ahead_keeps_a_bounded_window_in_item_order() -> None:
    """The pool never holds more than 2 x size answers not yet taken, hands calls over in
    schedule order (so the next item's call is never stuck behind later ones), and drops calls
    of items pytest passed over."""
    import threading
    import time

    from pytest_agenteval.execution.concurrent import Ahead

    ahead: Ahead[None, int] = Ahead(2, lambda: None)
    started: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> Callable[[], int]:
        def run() -> int:
            with lock:
                started.append(i)
            time.sleep(0.01)
            return i

        return run

    for i in range(40):
        ahead.schedule(aid("d", "t", i), call(i), None)
    time.sleep(0.2)
    assert len(started) <= 4  # the window: 2 x size handed over, none taken yet
    for i in (0, 1, 2, 7):  # 3 to 6 are passed over, as a skip mark would
        early = ahead.take(aid("d", "t", i))
        assert early is not None
        early.wait()
        assert early.result() == i
    for i in range(8, 40):
        early = ahead.take(aid("d", "t", i))
        assert early is not None
        early.wait()
    ahead.close()
    assert len(started) == len(set(started))  # no call twice
    assert {0, 1, 2, 7, *range(8, 40)} <= set(started)


def test_ahead_admits_calls_in_order_and_a_held_place_waits_its_turn(tmp_path: Path) -> None:
    """Calls that need a slot (real flock'd slot files, one of two held by another holder as
    another worker would) are admitted in schedule order only, a held place (an attempt made
    at its turn) among them; none later gets one first, and the poller admits the next as
    soon as a slot comes free, from this process or another."""
    import threading
    import time

    from pytest_agenteval.execution.concurrent import Ahead
    from pytest_agenteval.execution.limits import release_slot, try_slot

    other = try_slot(tmp_path, "s", 2)  # another process's sandbox
    admitted: list[int] = []
    slots: dict[int, int] = {}
    lock = threading.Lock()

    def admit(i: int) -> Callable[[], bool]:
        def take() -> bool:
            slot = try_slot(tmp_path, "s", 2)
            if slot is not None:
                with lock:
                    admitted.append(i)
                    slots[i] = slot
            return slot is not None

        return take

    ahead: Ahead[None, int] = Ahead(4, lambda: None)
    for i in range(6):
        if i == 2:
            ahead.hold(aid("d", "t", i), admit(i))
        else:
            ahead.schedule(aid("d", "t", i), lambda i=i: i, None, admit(i))  # type: ignore[misc]
    time.sleep(0.2)
    assert admitted == [0]  # one slot free: the first call only
    release_slot(other)
    for i in range(6):
        early = ahead.take(aid("d", "t", i))
        assert early is not None
        early.wait()
        assert (early.call is None) == (i == 2)
        if early.call is not None:
            assert early.result() == i
        release_slot(slots[i])  # its sandbox is removed at its item's end
    ahead.close()
    assert admitted == list(range(6))


def test_ahead_awaits_coroutine_calls_on_the_loop_within_the_same_bound() -> None:
    """Coroutine calls run on the event loop (no pool thread is made for them) and count
    against the same `size` as calls in pool threads: never more than `size` run at once,
    every answer reaches its item in order."""
    import asyncio
    import threading
    import time

    from pytest_agenteval.execution.concurrent import Ahead

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="agenteval-event-loop", daemon=True).start()
    ahead: Ahead[None, str] = Ahead(3, lambda: None, lambda: loop)
    lock = threading.Lock()
    running, most, where = [0], [0], set()

    def enter() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            where.add(threading.current_thread().name)

    def leave() -> None:
        with lock:
            running[0] -= 1

    def in_thread(i: int) -> str:
        enter()
        time.sleep(0.02)
        leave()
        return f"thread {i}"

    async def on_loop(i: int) -> str:
        enter()
        await asyncio.sleep(0.02)
        leave()
        return f"loop {i}"

    for i in range(24):
        coroutine = (lambda i=i: on_loop(i)) if i % 3 else None
        ahead.schedule(aid("d", "t", i), lambda i=i: in_thread(i), None, acall=coroutine)  # type: ignore[misc]
    for i in range(24):
        early = ahead.take(aid("d", "t", i))
        assert early is not None
        early.wait()
        assert early.result() == (f"loop {i}" if i % 3 else f"thread {i}")
    ahead.close()
    loop.call_soon_threadsafe(loop.stop)
    assert most[0] == 3  # the bound holds over both kinds, and is reached
    assert where <= {"agenteval-event-loop", *(f"agenteval-attempt-{n}" for n in range(3))}
    assert "agenteval-event-loop" in where


def test_an_agent_that_blocks_the_loop_is_given_up_on_past_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coroutine call the loop cannot finish (an agent blocking it) is given up on by its
    item `LOOP_GRACE` seconds past its timeout, as an AgentTimeout that says so."""
    import asyncio
    import threading
    import time

    from pytest_agenteval.core.errors import AgentTimeout
    from pytest_agenteval.execution import concurrent
    from pytest_agenteval.execution.concurrent import Ahead

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    ahead: Ahead[None, str] = Ahead(2, lambda: None, lambda: loop)

    async def blocks() -> str:
        time.sleep(3)  # the whole loop waits (the test does not: it gives up first)
        return "late"

    monkeypatch.setattr(concurrent, "LOOP_GRACE", 0.2)
    ahead.schedule(aid("d", "t", 0), lambda: "unused", None, acall=blocks, timeout=0.1)
    early = ahead.take(aid("d", "t", 0))
    assert early is not None
    early.wait()
    with pytest.raises(AgentTimeout, match="blocks the event loop"):
        early.result()
    ahead.close()
    loop.call_soon_threadsafe(loop.stop)


SPAWNING = """
import pathlib, subprocess, sys

HERE = pathlib.Path(__file__).parent


def run(task):
    seconds = task.metadata["child_sleep"]
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    (HERE / f"{task.id}.pid").write_text(str(child.pid))
    return "ok" if child.wait() == 0 else f"child ended with {child.returncode}"
"""


@pytest.mark.slow
def test_timed_out_sync_agent_loses_its_children_not_its_neighbours(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under concurrency a timed-out sync agent's child process is killed (the error says how
    many), while the child of an attempt running beside it lives on and its attempt passes."""
    import os

    root = dataset(
        {
            "stuck.yaml": {**task(metadata={"child_sleep": 60}), "timeout": 1},
            "fine.yaml": task(metadata={"child_sleep": 3}),
        },
        manifest={"agent": "spawning:run"},
    )
    (root / "spawning.py").write_text(SPAWNING)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "4", timeout=60
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*timed out after 1s (abandoned thread; 1 child process killed)*"])
    with pytest.raises(ProcessLookupError):
        os.kill(int((root / "stuck.pid").read_text()), 0)


def test_command_graders_run_side_by_side(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Under concurrency `command` graders run as concurrent subprocesses (their spans overlap)
    with the same verdicts as a serial run: exit 0 passes, another status fails."""
    root = dataset({})
    (root / "grader.py").write_text(
        "import json, os, sys, time\n"
        "start = time.time()\n"
        "time.sleep(0.3)\n"
        "with open(sys.argv[1], 'a') as log:\n"
        "    log.write(json.dumps(['g', 0, start, time.time(), os.getpid()]) + '\\n')\n"
        "sys.exit(0 if sys.stdin.read() == 'ok' else 1)\n"
    )
    graders = [{"command": ["{python}", str(root / "grader.py"), str(root / "spans.log")]}]
    for i, answer in enumerate(["ok"] * 6 + ["no"]):
        (root / f"t{i}.yaml").write_text(json.dumps({**task(answer), "graders": graders}))
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-concurrency", "8")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*grader.py*exited 1*"])
    calls = spans(root)
    assert len(calls) == 7
    assert most_overlapping(calls) >= 2
