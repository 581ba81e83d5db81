"""Attempts in flight: agent calls started ahead of their item's turn (`--agenteval-concurrency`).

pytest runs one item at a time, in order, on the main thread. `Ahead` starts the agent calls
of the attempts this process will run next in a bounded thread pool (first in, first started),
up to `size` at once; the item's `setup()` then waits for its own call and grades the answer on
the main thread, where a grader's deadline can interrupt even a backtracking regular expression.
So reports, records and summaries are those of a serial run.

Each pool thread goes through the executor, so every agent kind keeps its timeout rules: an
async agent runs on the executor's one event loop (its pool thread waits for it), a sync callable
runs in the pool thread (in a thread of its own when timed), a command is a subprocess whose
process group is killed at its deadline. A timed-out sync callable's thread is abandoned and
the processes that thread started are killed; unlike a serial run, processes started by other
threads the agent made are not known (they cannot be told from the neighbours').

A stop (cancel, spend cap, deadline, Ctrl-C) is checked where a call would start; calls that
never started report why, and their items are skipped, not recorded. `cancel` gives up on the
calls in flight too (Ctrl-C's grace is over): their items are skipped the same way.

A call may need something before it starts that other processes also want (a sandbox slot
under `--agenteval-max-sandboxes`): its `admit` takes it without waiting, and calls are admitted
in schedule order, none before an earlier one has what it needs. So a later attempt never holds
a slot its process's current item waits for: a process that waits holds no slot of a later
item, and no two processes (xdist workers) can wait on each other. An attempt made at its
item's turn that needs one (a regrade, an agent that could not be had ahead) holds its place
in that order with a call of None. While a call waits to be admitted, a poller thread asks
again as soon as this process gives back a slot, and every `ADMIT_POLL` seconds for what
another process gave back (or a stop).

A call that is a coroutine (`acall`: an async agent with nothing to wait for around it) runs
on the executor's event loop instead of a pool thread: no thread hops between the loop and the
item, none waits for it. When its agent cannot block the loop, the item's wait runs the loop
itself (`LoopDriver`: one thread runs Python, not two taking the GIL from each other). Both
kinds count against the same `size` calls running at once.

The pool's threads are daemon threads, so an abandoned call never keeps the process alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, InvalidStateError
from typing import Generic, TypeVar

from ..core.errors import AgentTimeout
from ..core.identity import AttemptId
from .driving import LoopDriver, running_loop
from .executor import LOOP_GRACE
from .limits import freed, wait_freed

Stopped = Callable[[], str | None]
"""Why no new attempt may start (a stop's reason), or None."""


class NotStarted(Exception):
    """The attempt's agent call never started because the run is stopping."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


C = TypeVar("C")
"""What the caller keeps with a call (the attempt's context)."""
R = TypeVar("R")
"""What a call returns (the agent's answer)."""
CANCEL_POLL = 0.1
"""Seconds between two looks for a cancel while an item waits for its call."""
ADMIT_POLL = 0.1
"""Seconds between two tries to admit the first call waiting for what it needs, unless this
process gives back a slot first (then it is tried at once)."""
Admit = Callable[[], bool]
"""Take what a call needs before it starts (a sandbox slot) without waiting; False: not now."""


class Started(Generic[C, R]):
    """An agent call scheduled ahead: when it started, and its answer (or error) once it ends."""

    def __init__(
        self,
        call: Callable[[], R] | None,
        context: C | None,
        owner: Ahead[C, R],
        admit: Admit | None = None,
        acall: Callable[[], Awaitable[R]] | None = None,
        timeout: float | None = None,
        driven: bool = False,
    ) -> None:
        self.call = call
        """None: a place held in the admission order for an attempt made at its turn."""
        self.acall = acall
        """The call as a coroutine, run on the event loop instead of `call` in a thread."""
        self.timeout = timeout
        """The call's own deadline: a coroutine call still not done `LOOP_GRACE` seconds past
        it, counted from its hand-over, blocks the loop, and its item gives up on it."""
        self.driven = driven
        """A coroutine call that cannot block the loop: its item's wait runs the loop."""
        self.handed_at = 0.0
        self.admit = admit
        self.owner = owner
        self.context = context
        """What the caller keeps with the call (the attempt's context)."""
        self.started = time.time()
        self.t0 = time.perf_counter()
        self.ended = self.t0
        self.future: Future[tuple[R | None, BaseException | None]] | None = None
        """Set once the call is handed to the pool."""
        self.handed = threading.Event()
        """Set with `future`."""
        self.running = False
        self.dropped = False
        """Its item will never take it (pytest passed over it): never hand it to the pool."""
        self.taken = False
        """Its item took it (and waits for it)."""

    def wait(self) -> None:
        """Wait for the call to end (a held place: to be admitted); raises NotStarted when
        it never began or was given up on (`Ahead.cancel`)."""
        while (future := self.future) is None:  # taken before it was admitted
            if self.owner.cancelled is not None:
                raise self.owner.cancelled
            self.handed.wait(CANCEL_POLL)
        driver = self.owner.driver if self.driven else None
        if driver is not None and future.done():
            driver.drive(future, 0)  # one pass: the other calls in flight move on too
        while not future.done():
            if driver is None or not driver.drive(future, CANCEL_POLL):
                with contextlib.suppress(TimeoutError):
                    future.result(CANCEL_POLL)
            cancelled = self.owner.cancelled
            if cancelled is not None and not future.done():
                raise cancelled
            if self.acall is not None and self.timeout is not None:
                self._blocking(future, self.timeout)
        _, error = future.result()
        if isinstance(error, NotStarted):
            raise error
        cancelled = self.owner.cancelled
        if cancelled is not None and self.ended >= self.owner.cancelled_at:
            raise cancelled  # it ended only because it was given up on (its children killed)
        # The wait for the item's turn is not the attempt's: its duration stays the agent's
        # time plus the grading.
        self.t0 += time.perf_counter() - self.ended

    def _blocking(
        self, future: Future[tuple[R | None, BaseException | None]], timeout: float
    ) -> None:
        """Give up on a coroutine call the loop has not finished `LOOP_GRACE` seconds past
        its deadline: an agent blocks the loop (its own deadline cannot fire)."""
        if time.perf_counter() - self.handed_at < timeout + LOOP_GRACE:
            return
        blocked = AgentTimeout(
            f"agent timed out after {timeout:g}s; it blocks the event loop, so later "
            "async attempts of this process may time out too"
        )
        with contextlib.suppress(InvalidStateError):  # it ended just now
            future.set_result((None, blocked))

    def result(self) -> R:
        """The call's answer (after `wait`); its exception is raised with the agent's own
        traceback."""
        assert self.future is not None
        value, error = self.future.result()
        if error is not None:
            raise error
        assert value is not None
        return value


class Ahead(Generic[C, R]):
    """A bounded pool that starts agent calls in the order they are scheduled.

    At most `size` calls run at once, and at most `2 * size` are handed to the pool and not
    yet taken by their item: answers never pile up far ahead of pytest (a slow grader, a stop,
    `-x`), so what a stop can waste is bounded. Calls are handed over in schedule order, which
    is the order pytest runs the items, so the next item's call is always among them.
    """

    def __init__(
        self,
        size: int,
        stopped: Stopped,
        loop: Callable[[], asyncio.AbstractEventLoop] | None = None,
        driver: LoopDriver | None = None,
    ) -> None:
        self.size = size
        self.stopped = stopped
        self.loop = loop
        """The event loop coroutine calls run on (None: every call runs in a pool thread)."""
        self.driver = driver
        """Who runs that loop, when the main thread may (None: its own thread always)."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Coroutine calls running on the loop (the loop keeps only weak references)."""
        self._queue: queue.SimpleQueue[Started[C, R] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.cancelled: NotStarted | None = None
        self.cancelled_at = float("inf")
        """Set by `cancel`: calls still in flight are given up on with this reason."""
        self._lock = threading.Lock()
        self._calls: OrderedDict[AttemptId, Started[C, R]] = OrderedDict()
        """Scheduled and not taken, in schedule order."""
        self._waiting: deque[Started[C, R]] = deque()
        """Scheduled and not handed to the pool yet."""
        self._handed = 0
        """Handed to the pool and not taken."""
        self._active = 0
        """Handed to the pool and not ended: at most `size`."""
        self._blocked = threading.Condition(self._lock)
        """Notified when the first waiting call could not be admitted (the poller's cue)."""
        self._poller: threading.Thread | None = None

    @property
    def running(self) -> int:
        """Calls in flight now, about (for progress.json; the pool threads take no lock)."""
        with self._lock:
            return sum(1 for started in self._calls.values() if started.running)

    @property
    def queued(self) -> int:
        """Calls scheduled and not taken yet."""
        return len(self._calls)

    def schedule(
        self,
        key: AttemptId,
        call: Callable[[], R],
        context: C,
        admit: Admit | None = None,
        acall: Callable[[], Awaitable[R]] | None = None,
        timeout: float | None = None,
        blocks_loop: bool = True,
    ) -> None:
        """Start `call` (or await `acall` on the loop, given up on when it blocks the loop past
        its `timeout`) once the pool has room and `admit` (in schedule order) took what the
        call needs, unless the run is stopping by then. An `acall` that cannot block the
        loop (not `blocks_loop`) lets the main thread run the loop while it waits."""
        acall = acall if self.loop else None
        driven = acall is not None and self.driver is not None and not blocks_loop
        if acall is not None and self.driver is not None and blocks_loop:
            self.driver.run_freely()  # before the call can reach the loop
        self._add(key, Started(call, context, self, admit, acall, timeout, driven))

    def hold(self, key: AttemptId, admit: Admit) -> None:
        """Hold the place of an attempt made at its turn in the order calls are admitted in:
        it is admitted in that order (its item's `wait` returns then), never run."""
        self._add(key, Started(None, None, self, admit))

    def _add(self, key: AttemptId, started: Started[C, R]) -> None:
        with self._lock:
            self._calls[key] = started
            self._waiting.append(started)
            ready = self._ready()
        self._submit(ready)

    def _ready(self) -> list[Started[C, R]]:
        """The waiting calls the look-ahead window has room for, admitted in order (lock
        held); the first that cannot be admitted stops the rest and wakes the poller."""
        ready = []
        while self._waiting:
            started = self._waiting[0]
            if started.future is not None or started.dropped:
                self._waiting.popleft()
                continue
            taken = started.taken  # its item waits for it: past the window
            if not taken and self._handed >= 2 * self.size:
                break
            if self._active >= self.size and started.call is not None:
                break  # `size` calls run: the next starts when one ends
            if started.admit is not None and not self._admit(started):
                self._wake_poller()
                break
            self._waiting.popleft()
            started.future = Future()  # set by the pool thread (or the loop) that runs it
            started.handed_at = time.perf_counter()
            started.handed.set()
            if started.call is None:
                started.future.set_result((None, None))  # a place held: admitted, not run
                continue
            self._handed += 0 if taken else 1
            self._active += 1
            ready.append(started)
        return ready

    def _admit(self, started: Started[C, R]) -> bool:
        """Whether the call may start: admitted, or the run is stopping (it will not run)."""
        assert started.admit is not None
        if started.admit():
            started.admit = None
            return True
        return self._closed or self.stopped() is not None

    def _wake_poller(self) -> None:
        """Have the poller try the first waiting call again soon (lock held)."""
        if self._poller is None:
            self._poller = threading.Thread(target=self._poll, name="agenteval-admit", daemon=True)
            self._poller.start()
        self._blocked.notify()

    def _poll(self) -> None:
        """The poller: while a call waits to be admitted, try again when this process gave
        back a slot, else every ADMIT_POLL."""
        while not self._closed:
            mark = freed()  # before the look: a slot given back after it wakes the wait
            with self._lock:
                ready = self._ready()
                if not ready and not self._admission_waits():
                    if not self._closed:  # `close` notifies under the lock
                        self._blocked.wait()
                    continue
            self._submit(ready)
            wait_freed(mark, ADMIT_POLL)

    def _admission_waits(self) -> bool:
        """Whether the first waiting call waits to be admitted (lock held)."""
        return bool(self._waiting) and self._waiting[0].admit is not None

    def _submit(self, ready: list[Started[C, R]]) -> None:
        """Hand the calls over: coroutines to the event loop (all in one wake-up), the others
        to the pool threads."""
        coroutines = [started for started in ready if started.acall is not None]
        if coroutines:
            assert self.loop is not None
            loop = self.loop()
            if running_loop() is loop:
                self._spawn(coroutines)
            elif self.driver is not None:
                self.driver.call_soon(self._spawn, coroutines)
            else:
                loop.call_soon_threadsafe(self._spawn, coroutines)
        for started in ready:  # the first a taken call: in the queue before the others
            if started.acall is not None:
                continue
            self._queue.put(started)
            if len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"agenteval-attempt-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _spawn(self, coroutines: list[Started[C, R]]) -> None:
        """On the loop: start each coroutine call as a task."""
        for started in coroutines:
            task = asyncio.ensure_future(self._astart(started))
            self._tasks.add(task)
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        """A coroutine call's task ended; what it raised (Ctrl-C's KeyboardInterrupt, which
        its item raised already) is taken, so asyncio does not log it again."""
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()

    def _work(self) -> None:
        """A pool thread: run handed-over calls, in order, until `close`."""
        while (started := self._queue.get()) is not None:
            assert started.future is not None
            started.future.set_result(self._start(started))
            self._ended()

    def _start(self, started: Started[C, R]) -> tuple[R | None, BaseException | None]:
        assert started.call is not None  # a held place is never handed to the pool
        reason = self._not_now()
        if reason is not None:
            return None, NotStarted(reason)
        started.started, started.t0 = time.time(), time.perf_counter()
        started.running = True
        try:
            return started.call(), None
        except BaseException as exc:  # raised again on the main thread, at the item's turn
            return None, exc
        finally:
            started.ended = time.perf_counter()
            started.running = False

    async def _astart(self, started: Started[C, R]) -> None:
        """`_start` of a coroutine call, on the loop."""
        assert started.acall is not None and started.future is not None
        answer: tuple[R | None, BaseException | None]
        interrupted: KeyboardInterrupt | None = None
        reason = self._not_now()
        if reason is not None:
            answer = None, NotStarted(reason)
        else:
            started.started, started.t0 = time.time(), time.perf_counter()
            started.running = True
            try:
                answer = await started.acall(), None
            except BaseException as exc:  # CancelledError too: the loop is going away
                answer = None, exc
                if isinstance(exc, KeyboardInterrupt) and _on_main_thread():
                    interrupted = exc  # Ctrl-C, wherever the main thread ran the loop
            started.ended = time.perf_counter()
            started.running = False
        with contextlib.suppress(InvalidStateError):  # its item gave up on a blocked loop
            started.future.set_result(answer)
        self._ended()
        if interrupted is not None:
            raise interrupted  # out of the loop's run: the waiting item stops the session

    def _not_now(self) -> str | None:
        """Why a call handed over must not start after all (the session ended, a stop)."""
        return "the session ended" if self._closed else self.stopped()

    def _ended(self) -> None:
        """A handed-over call ended: the next waiting ones may start."""
        with self._lock:
            self._active -= 1
            ready = self._ready()
        self._submit(ready)

    def take(self, key: AttemptId) -> Started[C, R] | None:
        """The call scheduled for `key` (each attempt is taken once), or None. Calls scheduled
        before it that were not taken belong to items pytest passed over: they are dropped.
        A call not handed over yet (pytest passed over many items, or it waits to be
        admitted) is handed over as soon as it is admitted, past the window."""
        with self._lock:
            found = self._calls.get(key)
            if found is None:
                return None
            while True:
                passed, started = self._calls.popitem(last=False)
                if started.future is not None:
                    self._handed -= 0 if started.call is None else 1
                elif passed != key:
                    started.dropped = True
                if passed == key:
                    break
            found.taken = True
            ready = self._ready()
        self._submit(ready)
        return found

    def scheduled(self, key: AttemptId) -> bool:
        with self._lock:
            return key in self._calls

    def cancel(self, reason: str) -> None:
        """Give up on the calls in flight: their items are skipped with `reason` (their
        threads run on, abandoned; the caller kills the processes they started)."""
        self.cancelled_at = time.perf_counter()
        self.cancelled = NotStarted(reason)

    def close(self) -> None:
        """Drop calls that have not started; calls in flight run on, abandoned."""
        self._closed = True
        with self._lock:
            self._calls.clear()
            self._waiting.clear()
            self._blocked.notify()
        for _ in self._threads:
            self._queue.put(None)


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
