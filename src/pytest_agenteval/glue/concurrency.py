"""pytest glue for attempts in flight (`--agenteval-concurrency N`).

Ahead of their items' turn, the agent calls of the attempts this process will run are scheduled
on the attempt runner's pool (`execution/concurrent.py`), up to N at once; each item's `setup()`
then takes its own call's answer. pytest still runs one item at a time, in order, so reports,
JUnit and the recorder are those of a serial run.

Which attempts a process knows it will run:
- alone: every collected item, scheduled a few windows ahead of the item running;
- an xdist worker: the items already sent to it (`load`, `loadscope`, `loadfile`), looked at
  before each item. Those are never taken back, so no attempt runs twice. `worksteal` takes
  queued items away from a worker, so starting them early could run them twice: refused.

Ctrl-C is handled by each process that runs attempts, and by the xdist controller
(`GentleInterrupt`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from functools import partial
from typing import Any

import pytest

from ..execution.concurrent import Ahead
from ..sources.dataset import Dataset
from ..store.stops import CTRL_C, Stops
from .internals import uncaptured, worker_queue
from .items import AttemptItem
from .runtime import Runtime
from .settings import Settings

UNSAFE_DIST = ("worksteal", "each")
INTERRUPT_GRACE = 30.0
"""Seconds attempts in flight get to finish after the first Ctrl-C (default)."""
LOOKAHEAD = 3
"""Alone, calls scheduled and not yet taken, in multiples of the concurrency (more than the
pool's window of 2 x concurrency, so the pool never waits for the main thread to schedule)."""
CONTROLLER_MARGIN = 15.0
"""Seconds past the grace the xdist controller waits for workers before it stops at once."""


def concurrency_of(runtime: Runtime) -> int:
    """`--agenteval-concurrency`, else ini, else the largest manifest default, else 1."""
    return declared_concurrency(runtime.settings, runtime.datasets)


def declared_concurrency(settings: Settings, datasets: list[Dataset]) -> int:
    """`--agenteval-concurrency`, else ini, else the largest manifest default, else 1."""
    if settings.concurrency:
        return settings.concurrency
    declared = [d.manifest.defaults.concurrency or 1 for d in datasets]
    return max(declared, default=1)


def check_combination(config: pytest.Config, size: int, isolate: bool) -> None:
    """Refuse combinations that could run an attempt twice or fork from busy threads."""
    dist = getattr(config.option, "dist", "no")
    if size > 1 and dist in UNSAFE_DIST:
        raise pytest.UsageError(
            f"--agenteval-concurrency {size} cannot be combined with --dist {dist}: it hands "
            "queued items to other workers, so an attempt started early could run twice. "
            "Use --dist load (the default), loadscope or loadfile"
        )
    if size > 1 and isolate:
        raise pytest.UsageError(
            f"--agenteval-concurrency {size} cannot be combined with --agenteval-isolate "
            "(a child forked while other attempts run in threads may deadlock); use -n N "
            "for isolated attempts side by side"
        )


class AheadHooks:
    """Schedules the attempts of this process ahead of their turn."""

    def __init__(self, runtime: Runtime, ahead: Ahead[Any, Any]) -> None:
        self.runtime = runtime
        self.ahead = ahead
        size = ahead.size
        self.queue: Callable[[], list[int]] | None = None
        """On an xdist worker: the indices of the items sent to it after the one running."""
        self.seen: set[AttemptItem] = set()
        self.deferred: deque[AttemptItem] = deque()
        self.upcoming: Iterator[pytest.Item] | None = None
        """Alone: the items not scheduled yet, in order."""
        self.lookahead = LOOKAHEAD * size

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        config = session.config
        self.queue = worker_queue(config)
        stopped_early = session.testsfailed and not config.option.continue_on_collection_errors
        try:
            # Ctrl-C's handler first: a press just after the first calls start is gentle too
            with self._gentle_interrupt(config, worker=self.queue is not None):
                if self.queue is None and not (config.option.collectonly or stopped_early):
                    self.upcoming = iter(session.items)
                    self._top_up()
                return (yield)
        finally:
            self.ahead.close()

    def _gentle_interrupt(
        self, config: pytest.Config, worker: bool
    ) -> contextlib.AbstractContextManager[object]:
        """Ctrl-C's first press stops scheduling everywhere. Alone or on an xdist worker, the
        calls in flight get the grace period, then are given up on; the xdist controller
        publishes the stop (for workers the signal did not reach) and, should workers not
        be done a while after the grace, stops at once."""
        stops = self.runtime.stops
        if stops is None:
            return contextlib.nullcontext()
        grace = self.runtime.settings.interrupt_grace or INTERRUPT_GRACE
        say: Callable[[str], None] = partial(say_now, config)
        if config.pluginmanager.hasplugin("dsession"):
            return GentleInterrupt(stops, grace, say, grace + CONTROLLER_MARGIN, publish=True)
        if worker:
            say = _silent  # the controller tells the terminal
        return GentleInterrupt(stops, grace, say, grace, on_grace=self._give_up)

    def _give_up(self) -> None:
        """The grace is over: the calls still in flight are given up on (their items are
        skipped, not recorded) and what they started is killed."""
        self.ahead.cancel(f"interrupted (Ctrl-C): still running after the {self.grace_text}")
        self.runtime.runner.executor.kill_running()

    @property
    def grace_text(self) -> str:
        grace = self.runtime.settings.interrupt_grace or INTERRUPT_GRACE
        return f"{grace:g}s grace period"

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if self.deferred and self.deferred[0] is item:
            # its turn: it runs now, as in a serial run, holding its place among those that
            # take sandbox slots before any later attempt may take one
            self.deferred.popleft().schedule(at_turn=True)
        self._retry_deferred()
        if self.upcoming is not None:
            self._top_up()
        if self.queue is not None:
            self._schedule(self._until_alone([item, *self._worker_items(item.session)]))

    def _worker_items(self, session: pytest.Session) -> list[pytest.Item]:
        """The items sent to this worker that follow the current one."""
        assert self.queue is not None
        return [session.items[i] for i in self.queue()]

    def _until_alone(self, items: list[pytest.Item]) -> list[pytest.Item]:
        """The items whose calls may be in flight together: those before the first attempt
        that must run alone (its call was in flight when a worker died), and none while it
        runs. It is never scheduled: it runs at its turn, when no other call is in flight, so
        a crash then is provably its own."""
        alone = self.runtime.alone
        if alone:
            for i, item in enumerate(items):
                if isinstance(item, AttemptItem) and item.key in alone:
                    return items[:i]
        return items

    def _top_up(self) -> None:
        """Schedule the next items until `lookahead` calls wait for their turn: scheduling all
        at once would keep the main thread from taking answers (so the pool would idle at a
        full window) for as long as deciding every attempt takes."""
        upcoming, ahead = self.upcoming, self.ahead
        assert upcoming is not None
        while ahead.queued < self.lookahead:
            item = next(upcoming, None)
            if item is None:
                self.upcoming = None
                return
            self._schedule((item,))

    def _schedule(self, items: Iterable[pytest.Item]) -> None:
        """Schedule the items not seen yet, in order; those whose agent cannot be had yet
        (a session fixture made at the first item's setup) wait in `deferred`."""
        for item in items:
            if isinstance(item, AttemptItem) and item not in self.seen:
                self.seen.add(item)
                if self.deferred or not item.schedule():
                    self.deferred.append(item)

    def _retry_deferred(self) -> None:
        """Schedule deferred items in order, up to the first one still not ready."""
        while self.deferred and self.deferred[0].schedule():
            self.deferred.popleft()


class GentleInterrupt:
    """Ctrl-C with attempts in flight: the first press starts no new attempt and lets those in
    flight finish and be recorded; after `wait` seconds `on_grace` gives up on them (without
    it, the process stops at once); a second press stops at once. A terminal's Ctrl-C reaches
    every process of the group, xdist workers too, so each handles its own."""

    def __init__(
        self,
        stops: Stops,
        grace: float,
        say: Callable[[str], None],
        wait: float,
        *,
        publish: bool = False,
        on_grace: Callable[[], None] | None = None,
    ) -> None:
        self.stops = stops
        self.say = say
        self.grace = grace
        self.wait = wait
        self.publish = publish
        self.on_grace = on_grace
        self.timer: threading.Timer | None = None
        self.previous: Any = None

    def __enter__(self) -> GentleInterrupt:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._first)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def _first(self, signum: int, frame: Any) -> None:
        self.stops.halt("interrupted", CTRL_C, publish=self.publish)
        signal.signal(signal.SIGINT, self._again)
        self.say(
            f"agenteval: Ctrl-C: no new attempt starts; those in flight get {self.grace:g}s "
            "to finish and be recorded. Ctrl-C again stops at once."
        )
        self.timer = threading.Timer(self.wait, self._grace_over)
        self.timer.daemon = True
        self.timer.start()

    def _grace_over(self) -> None:
        if self.on_grace is not None:
            self.on_grace()
        else:
            os.kill(os.getpid(), signal.SIGINT)

    def _again(self, signum: int, frame: Any) -> None:
        raise KeyboardInterrupt


def _silent(line: str) -> None:
    """Say nothing (an xdist worker has no terminal)."""


def say_now(config: pytest.Config, line: str) -> None:
    """Print a line on the terminal now, also while an item's output is being captured."""
    with uncaptured(config):
        sys.stderr.write(f"\n{line}\n")
        sys.stderr.flush()
