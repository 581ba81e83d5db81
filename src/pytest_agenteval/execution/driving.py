"""Who runs the executor's event loop: the main thread while it can, else the loop's own thread.

Two threads that both run Python hand the GIL to each other at every system call either of
them makes, and pytest's output capture alone makes about twenty an item: with 64 model calls
in flight, the hand-overs were a tenth of the process's CPU. So while every call on the loop
only awaits (its agent says `blocks_loop = False`: the built-in `openai` agent), the main
thread runs the loop itself, a pass at each item's turn and for as long as the item waits for
its answer, and the loop's own thread waits. That thread runs the loop whenever the main
thread has not run it for `IDLE` seconds (a slow grader, the session's end), and for good once
anything that may block the loop uses it (`run_freely`): a call the main thread runs cannot be
given up on at its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

IDLE = 0.02
"""Seconds the main thread may leave the loop alone before the loop's own thread runs it."""
PASS_GAP = 0.003
"""Seconds between two passes while the main thread finds its answers there already: what
came meanwhile is handled together (a pass at every item cost a seventh of the process's CPU
with 64 calls in flight). A call's recorded time grows by a few of these at most; with the
loop on a thread of its own it grew more, by the waits for the GIL (up to 5 ms each)."""


class LoopDriver:
    """An event loop (made on first use) and the one thread at a time that runs it."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._make_lock = threading.Lock()
        self._baton = threading.RLock()
        """Held by whichever thread runs the loop (an RLock: a thread can tell, by releasing,
        whether it holds it; Ctrl-C may land just after it was taken)."""
        self._wanted = False
        """Another thread waits for the baton: the loop's own thread hands it over."""
        self._nudge = threading.Event()
        """Wakes the loop's own thread before its idle wait is over."""
        self._free = False
        """The loop's own thread runs it for good (`run_freely`)."""
        self._last_pass = 0.0
        """When a `drive` last ended (monotonic)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started on first use (its thread ready to run it)."""
        with self._make_lock:  # pool threads may ask for it at once
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._last_pass = time.monotonic()  # the main thread is about to run it
                self._thread = threading.Thread(
                    target=self._run, args=(self._loop,), name="agenteval-event-loop", daemon=True
                )
                self._thread.start()
            return self._loop

    def run_freely(self) -> asyncio.AbstractEventLoop:
        """The loop, run by its own thread from now on (for calls that may block it, and for
        whoever hands it work from another thread and waits)."""
        loop = self.loop
        if not self._free:
            self._free = True
            self._nudge.set()
            loop.call_soon_threadsafe(loop.stop)  # ends a `drive` in progress
        return loop

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """Have the loop call `callback(*args)`, from any thread; when no thread runs the
        loop now, without waking it (a system call the main thread spares at every item)."""
        loop = self.loop
        try:
            if self._baton.acquire(blocking=False):
                loop.call_soon(callback, *args)
            else:
                loop.call_soon_threadsafe(callback, *args)
        finally:
            self._let_go()

    def drive(self, future: Future[Any], timeout: float) -> bool:
        """Run the loop in this thread until `future` is done or `timeout` seconds passed;
        when it is done already, one pass (what arrived since the last moves on) unless the
        last was less than `PASS_GAP` ago. False, at once, when the loop's own thread runs it
        for good (wait for `future`)."""
        if self._free:
            return False
        if future.done() and time.monotonic() - self._last_pass < PASS_GAP:
            return True
        loop = self.loop
        try:
            if not self._take():
                return False
            self._last_pass = math.inf  # running it now
            if self._free:
                return False
            if future.done():
                loop.call_soon(loop.stop)
                loop.run_forever()
                return True
            ended = _Ended(loop)
            timer = loop.call_later(timeout, ended)
            future.add_done_callback(ended)
            while not (ended.done or self._free):
                loop.run_forever()  # a stop meant for the loop's own thread ends a run early
            timer.cancel()
            return True
        finally:
            self._last_pass = time.monotonic()
            self._let_go()

    def _take(self) -> bool:
        """Get the baton: the loop's own thread, should it run the loop, stops and gives it.
        False when that thread is told meanwhile to run the loop for good."""
        if self._baton.acquire(blocking=False):
            return True
        loop = self._loop
        assert loop is not None
        self._wanted = True
        try:
            while not self._free:
                self._last_pass = time.monotonic()  # the loop's thread waits, not spins
                loop.call_soon_threadsafe(loop.stop)
                if self._baton.acquire(timeout=IDLE):
                    return True
            return False
        finally:
            self._wanted = False

    def _let_go(self) -> None:
        """Release the baton if this thread holds it."""
        with contextlib.suppress(RuntimeError):  # not held
            self._baton.release()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop's own thread: run the loop while no other thread has for `IDLE` seconds,
        or for good once told to, until it is closed."""
        while self._loop is loop:
            if not self._free:
                idle = self._last_pass + IDLE - time.monotonic()
                if idle > 0:
                    self._nudge.wait(min(idle, IDLE))
                    self._nudge.clear()
                    continue
            with self._baton:
                if self._loop is not loop or (not self._free and (self._wanted or self._recent())):
                    continue
                # An agent's task that raises SystemExit ends the run, not the thread: the
                # task keeps it for whoever awaits it, told as the loop runs on.
                with contextlib.suppress(SystemExit, KeyboardInterrupt):
                    loop.run_forever()

    def _recent(self) -> bool:
        return time.monotonic() - self._last_pass < IDLE

    def close(self) -> None:
        """Stop the loop (at session end), letting async generators finish; a loop an agent
        blocks is left to its daemon thread, which ends with the process. A late use (a call
        given up on, still in a pool thread) makes a new loop."""
        loop = self._loop
        if loop is None:
            return
        self.run_freely()
        closing = asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop)
        with contextlib.suppress(TimeoutError, RuntimeError):
            closing.result(5)
        with self._make_lock:
            self._loop, self._free, thread = None, False, self._thread
        loop.call_soon_threadsafe(loop.stop)
        assert thread is not None
        thread.join(5)
        if not thread.is_alive():
            loop.close()


class _Ended:
    """Stops the loop the first time it is called: the awaited future is done, or the time
    is up (whichever comes first; the other call is then a no-op)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.done = False

    def __call__(self, *_: object) -> None:
        if not self.done:
            self.done = True
            if running_loop() is self.loop:
                self.loop.stop()
            else:  # the future was set by another thread
                self.loop.call_soon_threadsafe(self.loop.stop)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
