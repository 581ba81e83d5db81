"""Who runs the executor's event loop (`LoopDriver`): the thread that waits for an answer, the
loop's own thread when nobody has run it for a while, and that thread for good once a call
may block the loop; and a whole run of the `openai` agent whose calls the main thread runs."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, aid, latest_run, task
from pytest_agenteval.execution.concurrent import Ahead
from pytest_agenteval.execution.driving import IDLE, LoopDriver

LOOP_THREAD = "agenteval-event-loop"


@pytest.fixture
def driver() -> Iterator[LoopDriver]:
    made = LoopDriver()
    yield made
    made.close()


def _on_loop(driver: LoopDriver, steps: int, pause: float) -> tuple[Future[None], list[str]]:
    """A coroutine on the driver's loop that notes the thread of each of its `steps` and sets
    the returned future at its end."""
    done: Future[None] = Future()
    threads: list[str] = []

    async def steps_of() -> None:
        for _ in range(steps):
            await asyncio.sleep(pause)
            threads.append(threading.current_thread().name)
        done.set_result(None)

    driver.call_soon(lambda: asyncio.ensure_future(steps_of()))
    return done, threads


class _Baton:
    """The driver's baton, with `before` called when the main thread tries for it and
    `after` once it has it: a test's interleaving, made certain."""

    def __init__(
        self,
        driver: LoopDriver,
        before: Callable[[bool, float], None] = lambda *_: None,
        after: Callable[[bool, float], None] = lambda *_: None,
    ) -> None:
        self.baton, self.before, self.after = driver._baton, before, after

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        main = threading.current_thread() is threading.main_thread()
        if main:
            self.before(blocking, timeout)
        taken = self.baton.acquire(blocking, timeout)
        if main and taken:
            self.after(blocking, timeout)
        return taken

    def release(self) -> None:
        self.baton.release()

    def __enter__(self) -> bool:
        return self.baton.acquire()

    def __exit__(self, *_: object) -> None:
        self.baton.release()


def test_the_waiting_thread_runs_the_loop_until_its_answer_is_there(driver: LoopDriver) -> None:
    """A drive runs the loop in the calling thread until the future is done; the loop's own
    thread does not run it meanwhile."""
    done, threads = _on_loop(driver, steps=5, pause=0.002)
    assert driver.drive(done, 5)
    assert done.done()
    assert threads == [threading.current_thread().name] * 5


def test_the_loops_own_thread_runs_it_while_nobody_else_does(driver: LoopDriver) -> None:
    """Work handed to the loop moves on with nobody driving it (a slow grader on the main
    thread): after `IDLE` seconds the loop's own thread runs it."""
    done, threads = _on_loop(driver, steps=3, pause=0.01)
    done.result(timeout=5)  # nobody drives: only the loop's own thread can finish it
    assert threads == [LOOP_THREAD] * 3


def test_a_drive_takes_the_loop_back_from_its_own_thread(driver: LoopDriver) -> None:
    """A drive while the loop's own thread runs the loop stops that thread's run and goes on
    in the caller: the same coroutine moves on first there, then here."""
    done, threads = _on_loop(driver, steps=40, pause=0.005)
    time.sleep(IDLE * 5)  # the loop's own thread has taken over by now
    assert driver.drive(done, 5)
    assert done.done()
    assert threads[0] == LOOP_THREAD
    assert threads[-1] == threading.current_thread().name


def test_a_drive_ends_at_its_timeout_with_the_answer_pending(driver: LoopDriver) -> None:
    """A drive whose future is not done in time returns (the caller looks for a stop, then
    drives again)."""
    never: Future[None] = Future()
    t0 = time.monotonic()
    assert driver.drive(never, 0.05)
    assert not never.done()
    assert time.monotonic() - t0 < 2


def test_run_freely_gives_the_loop_to_its_own_thread_for_good(driver: LoopDriver) -> None:
    """After `run_freely` (a call that may block the loop) a drive returns False at once and
    the loop runs in its own thread only."""
    driver.run_freely()
    done, threads = _on_loop(driver, steps=5, pause=0.002)
    while not done.done():
        assert driver.drive(done, 0.05) is False
        time.sleep(0.002)
    assert threads == [LOOP_THREAD] * 5


def test_a_drive_gives_way_when_the_loop_is_set_free_meanwhile(driver: LoopDriver) -> None:
    """A pool thread's `run_freely` that lands between a drive's first look and its taking
    the loop (the loop's own thread runs it then): the drive returns False rather than wait
    for a loop that thread now keeps."""
    done, _ = _on_loop(driver, steps=50, pause=0.01)
    time.sleep(IDLE * 5)  # the loop's own thread runs it now

    def set_free(blocking: bool, timeout: float) -> None:
        if not blocking:  # the drive's first try
            threading.Thread(target=driver.run_freely).start()
            time.sleep(IDLE)

    driver._baton = _Baton(driver, before=set_free)  # type: ignore[assignment]
    t0 = time.monotonic()
    assert driver.drive(done, 5) is False
    assert time.monotonic() - t0 < 1
    done.result(timeout=5)  # the loop's own thread finishes it


def test_close_stops_the_loop_and_its_thread() -> None:
    """At session end the loop's thread ends and the loop is closed."""
    driver = LoopDriver()
    loop = driver.loop
    done, _ = _on_loop(driver, steps=1, pause=0)
    driver.drive(done, 5)
    driver.close()
    assert loop.is_closed()
    assert not any(t.name == LOOP_THREAD and t.is_alive() for t in threading.enumerate())


def test_a_late_use_after_close_gets_a_new_loop(driver: LoopDriver) -> None:
    """A call given up on that reaches the executor after the session's end (a pool thread)
    still gets a loop that runs it, not one whose thread has ended."""
    done, _ = _on_loop(driver, steps=1, pause=0)
    driver.drive(done, 5)
    driver.close()
    loop = driver.run_freely()
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "ran"), loop).result(2) == "ran"


def test_ctrl_c_just_after_a_drive_took_the_loop_lets_it_go(driver: LoopDriver) -> None:
    """A KeyboardInterrupt between the baton's acquire and the drive's run (a second Ctrl-C,
    the grace timer's signal) leaves the baton free: the loop's own thread runs the loop on,
    and the session's end does not wait for it."""
    interrupts = [KeyboardInterrupt()]

    def interrupt(blocking: bool, timeout: float) -> None:
        if timeout > 0 and interrupts:  # taken after waiting for the loop's own thread
            raise interrupts.pop()

    done, threads = _on_loop(driver, steps=10, pause=0.01)
    time.sleep(IDLE * 3)  # the loop's own thread runs it: the drive must wait for the baton
    driver._baton = _Baton(driver, after=interrupt)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        driver.drive(done, 5)
    done.result(timeout=2)
    assert threads[-1] == LOOP_THREAD
    t0 = time.monotonic()
    driver.close()
    assert time.monotonic() - t0 < 2


def test_sys_exit_in_an_agent_is_its_own_error(driver: LoopDriver) -> None:
    """An agent that calls `sys.exit()` ends its own call with that error, whichever thread
    runs the loop: the item waiting for another call gets its answer, the pool's place is
    given back, and the loop's own thread lives on."""
    ahead: Ahead[None, str] = Ahead(2, lambda: None, lambda: driver.loop, driver)

    async def answers() -> str:
        await asyncio.sleep(0.05)
        return "ok"

    async def exits() -> str:
        await asyncio.sleep(0.01)
        sys.exit("a library called sys.exit()")

    for i, (acall, blocks) in enumerate(
        [(answers, False), (exits, False), (exits, True), (answers, True)]
    ):
        ahead.schedule(aid("d", "t", i), lambda: "unused", None, acall=acall, blocks_loop=blocks)
    for i, expected in enumerate(["ok", SystemExit, SystemExit, "ok"]):
        early = ahead.take(aid("d", "t", i))
        assert early is not None
        early.wait()
        if expected is SystemExit:
            with pytest.raises(SystemExit):
                early.result()
        else:
            assert early.result() == expected
    assert ahead._active == 0
    ahead.close()


def test_ahead_runs_calls_that_cannot_block_the_loop_in_the_waiting_thread(
    driver: LoopDriver,
) -> None:
    """Coroutine calls that cannot block the loop are run by the item's wait (the main
    thread); one that may block it hands the loop to the loop's own thread for good."""
    ahead: Ahead[None, str] = Ahead(4, lambda: None, lambda: driver.loop, driver)

    async def where() -> str:
        await asyncio.sleep(0.01)
        return threading.current_thread().name

    for i in range(8):
        ahead.schedule(aid("d", "t", i), lambda: "unused", None, acall=where, blocks_loop=False)
    for i in range(8):
        early = ahead.take(aid("d", "t", i))
        assert early is not None
        early.wait()
        assert early.result() == threading.current_thread().name
    ahead.schedule(aid("d", "t", 8), lambda: "unused", None, acall=where)  # may block
    early = ahead.take(aid("d", "t", 8))
    assert early is not None
    early.wait()
    assert early.result() == LOOP_THREAD
    ahead.close()


def test_ctrl_c_inside_a_call_the_main_thread_runs_reaches_the_item(driver: LoopDriver) -> None:
    """A KeyboardInterrupt raised while the main thread runs a call (Ctrl-C's second press
    lands in the agent's code) stops the item, as it does when the loop has its own thread;
    it is not the attempt's error."""
    ahead: Ahead[None, str] = Ahead(2, lambda: None, lambda: driver.loop, driver)

    async def interrupted() -> str:
        await asyncio.sleep(0.01)
        raise KeyboardInterrupt

    ahead.schedule(aid("d", "t", 0), lambda: "unused", None, acall=interrupted, blocks_loop=False)
    early = ahead.take(aid("d", "t", 0))
    assert early is not None
    with pytest.raises(KeyboardInterrupt):
        early.wait()
    ahead.close()


SLOW_GRADER = """
import time


def slow(output):
    time.sleep(0.6)
    return output == "ok"
"""


def test_a_slow_grader_does_not_hold_up_the_calls_in_flight(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `openai` agent's calls run on the loop the main thread drives; while it grades
    slowly, the loop's own thread answers the calls in flight, so their recorded times are
    the server's, not the grader's."""
    chat_server.script.latency = 0.2
    agent = {"openai": {"model": "m", "base_url": chat_server.base_url}}
    root = dataset(
        {
            f"t{i}.yaml": {
                "input": "<<ok>>",
                "expected": "ok",
                "graders": [{"python": "slow:slow"}],
            }
            for i in range(6)
        },
        manifest={"agent": agent},
    )
    (root / "slow.py").write_text(SLOW_GRADER)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-concurrency", "6")
    result.assert_outcomes(passed=6)
    run = Path(pytester.path, ".pytest_cache/agenteval/runs", latest_run(pytester.path))
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    agent_times = sorted(record["timings"]["agent"] for record in records)
    assert agent_times[-1] < 0.5, agent_times  # 0.8 s or more had nobody run the loop


ONLY_AWAITS = """
import asyncio, pathlib, threading

LOG = pathlib.Path(__file__).with_name("threads.log")


async def run(task):
    with LOG.open("a") as log:
        log.write(threading.current_thread().name + "\\n")
    await asyncio.sleep(0.02)
    return "ok"


run.blocks_loop = False
"""


def test_an_agent_that_says_it_only_awaits_runs_on_the_main_thread(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A user's async agent marked `blocks_loop = False` has its calls run by the main
    thread under concurrency; unmarked, they run on the loop's own thread."""
    root = dataset({f"t{i}.yaml": task() for i in range(6)}, manifest={"agent": "threads:run"})
    (root / "threads.py").write_text(ONLY_AWAITS)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-concurrency", "3")
    result.assert_outcomes(passed=6)
    assert set((root / "threads.log").read_text().split()) == {"MainThread"}
    (root / "threads.log").unlink()
    (root / "threads.py").write_text(ONLY_AWAITS.replace("run.blocks_loop = False", ""))
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-concurrency", "3")
    result.assert_outcomes(passed=6)
    assert set((root / "threads.log").read_text().split()) == {LOOP_THREAD}
