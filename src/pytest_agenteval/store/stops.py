"""Suite-wide stops: cancel, spend cap, token cap, deadline, Ctrl-C.

Every process of a run checks them where an agent call would *start* (never mid-call: after
it got its limit slot), so one stop halts all xdist workers on the machine. The authority is
the run folder: `cancel` is written by `agenteval cancel` from another shell, `stop.json` when
the run's spend or tokens reach a cap; a deadline is an absolute time every process knows. A
resumed run starts with both files removed.

Money is counted in the run's ledger (`store/ledger.py`), which no session resets: a call
through the provider seam holds its worst case there before it is sent (waiting while the
calls in flight hold the room it needs) and settles to what it cost when it ends; an answer
whose agent reported its own usage is added as it arrives, before the call gives up its limit
slot. So a cap with known prices and `max_tokens` is never passed by seam calls, and is passed
by agents that report their own usage by at most the calls already at the server when it was
reached: `max_in_flight` of them for an agent with that limit, else the calls in flight of
every process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..core.errors import StoreError
from ..core.text import dollars
from .files import read_small, write_json
from .ledger import Book, Ledger, Paid

CANCEL_FILE = "cancel"
STOP_FILE = "stop.json"
CANCEL_SCHEMA = "agenteval.cancel/1"
STOP_SCHEMA = "agenteval.stop/1"

STOP_LIMIT = 2**16
"""stop.json is a few hundred bytes: a bigger one (or a link, a FIFO) is not a stop."""
LOOK_EVERY = 0.01
"""Seconds between two looks for stop files; bounds how late a process sees a stop."""
WAIT_EVERY = 0.02
"""Seconds between two looks at the ledger of a call waiting for room under a cap."""

StopKind = Literal["cancelled", "budget", "deadline", "interrupted", "probe_failed"]
STOP_KINDS = ("cancelled", "budget", "deadline")
CTRL_C = "interrupted (Ctrl-C)"
"""The reason of a stop by Ctrl-C, as every report says it."""
"""Run statuses that say why a run stopped early (besides pytest's own `interrupted`)."""


def request_cancel(run_dir: Path) -> None:
    """Ask every process of the run to start no new attempt (what `agenteval cancel` does)."""
    write_json(run_dir / CANCEL_FILE, {"schema": CANCEL_SCHEMA, "requested_at": time.time()})


def clear_stops(run_dir: Path) -> None:
    """Forget earlier stop requests: the run is resumed on purpose."""
    for name in (CANCEL_FILE, STOP_FILE):
        with contextlib.suppress(FileNotFoundError):
            (run_dir / name).unlink()


@dataclass(frozen=True)
class Stop:
    """Why a run stops starting attempts."""

    kind: StopKind
    reason: str


class Stops:
    """One process's view of the run's stops; once one is seen, it stays."""

    def __init__(
        self,
        run_dir: Path | None,
        deadline: float | None = None,
        *,
        max_cost: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        """`max_cost`/`max_tokens`: the run's caps, checked at every call's start, their spend
        kept in this run's folder (so every process of the run counts against them)."""
        self.run_dir = run_dir
        self.deadline = deadline
        self._stop: Stop | None = None
        self._published: set[str] = set()
        self._lock = threading.Lock()
        self._looked = 0.0
        self._files = (run_dir / CANCEL_FILE, run_dir / STOP_FILE) if run_dir else None
        self.ledger = Ledger(run_dir)
        """Every call the run paid for, in any session, and the reservations held now."""
        self.budget: Budget | None = None
        """The run's caps and spend; None: uncapped."""
        if max_cost is not None or max_tokens is not None:
            self.budget = Budget(max_cost, max_tokens, self.ledger)

    def spent(self, cost: float | None, tokens: int, calls: int = 0) -> None:
        """An answer arrived whose calls held no reservation (the agent reported its usage):
        count what it cost (before its call gives up its limit slot)."""
        if cost or tokens or calls:
            self.ledger.add(Paid(cost or 0.0, tokens, calls))

    async def reserve(self, cost: float | None, tokens: int | None) -> str | None:
        """Before a model call is sent: hold its worst case (`cost`, `tokens`; None: not
        known, that cap is then approximate for it) against the caps, in every process. A
        call that does not fit waits while other calls hold reservations (they may settle
        lower) and is admitted when it fits; when it cannot fit with nothing else in flight,
        the run stops (`budget`) and the reason is returned, as is any stop seen meanwhile
        (cancel, the deadline). Cancelling the waiting task stops the wait."""
        budget = self.budget
        if budget is None:
            self.ledger.hold(Paid(cost or 0.0, tokens or 0, 1))
            return None
        while (refusal := budget.reserve(cost or 0.0, tokens or 0)) is not None:
            if not refusal.wait:
                self.halt("budget", refusal.reason, publish=True)
                return refusal.reason
            stopped = self.reason()
            if stopped is not None:
                return stopped
            await asyncio.sleep(WAIT_EVERY)
        return None

    def settle(self, reserved: tuple[float, int], actual: tuple[float, int] | None) -> None:
        """The call ended: its reservation is given back and what it cost is settled (None:
        it was never answered nor billed)."""
        paid = Paid(*actual, 1) if actual is not None else Paid()
        self.ledger.settle(Paid(*reserved, 1), paid)

    @property
    def stop(self) -> Stop | None:
        return self._stop

    def reason(self) -> str | None:
        """Why no new attempt may start now, or None (called before each attempt starts). A
        query: it writes nothing (`halt(..., publish=True)` tells the other processes)."""
        found = self._stop or self._look() or self._over_budget()
        return found.reason if found else None

    def _over_budget(self) -> Stop | None:
        """The caps against every answer of the run so far (read each time: exact)."""
        reason = self.budget.reached() if self.budget is not None else None
        if reason is not None:  # every process reads the same ledger: nothing to publish
            self.halt("budget", reason)
        return self._stop

    def halt(self, kind: StopKind, reason: str, *, publish: bool = False) -> None:
        """Stop starting attempts here; `publish` tells the run's other processes too."""
        with self._lock:
            if self._stop is None:
                self._stop = Stop(kind, reason)
            first = publish and kind not in self._published  # once per kind is enough
            if first:
                self._published.add(kind)
        if first and self.run_dir is not None:
            with contextlib.suppress(StoreError):  # stops this process; others see no file
                data = {"schema": STOP_SCHEMA, "kind": kind, "reason": reason}
                write_json(self.run_dir / STOP_FILE, data)

    def _look(self) -> Stop | None:
        if self.deadline is not None and time.time() >= self.deadline:
            self.halt("deadline", "deadline passed")
        elif self._files is not None and self._due():
            cancel, stop = self._files
            if cancel.exists():
                self.halt("cancelled", "cancelled")
            elif stop.exists():
                self._adopt(stop)
        return self._stop

    def _due(self) -> bool:
        """Whether to look at the run folder again (at most every LOOK_EVERY seconds: trivial
        attempts start thousands of times a second)."""
        now = time.monotonic()
        if now - self._looked < LOOK_EVERY:
            return False
        self._looked = now
        return True

    def _adopt(self, path: Path) -> None:
        """Take the stop another process published (a half-written file is not read: it is
        replaced atomically)."""
        try:
            data = json.loads(read_small(path, STOP_LIMIT))
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        kind = data.get("kind")
        if data.get("schema") == STOP_SCHEMA and kind in (*STOP_KINDS, "interrupted"):
            self.halt(kind, str(data.get("reason", kind)))


@dataclass(frozen=True)
class Refusal:
    """Why a call's reservation was not made: `wait` when it would fit once the calls in
    flight settle (it waits for them), else the run stops."""

    reason: str
    wait: bool


class Budget:
    """The run's spend and tokens against its caps: in `ledger`, every call any session of
    the run paid for and the reservations held now; in `cost` and `tokens`, what its recorded
    attempts spent (the larger counts: a run of an older version kept no whole ledger)."""

    def __init__(
        self, max_cost: float | None, max_tokens: int | None, ledger: Ledger | None = None
    ) -> None:
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self.cost = 0.0
        self.tokens = 0
        self.ledger = ledger if ledger is not None else Ledger(None)

    @property
    def capped(self) -> bool:
        return self.max_cost is not None or self.max_tokens is not None

    def add(self, cost: float | None, input_tokens: int | None, output_tokens: int | None) -> None:
        self.cost += cost or 0.0
        self.tokens += (input_tokens or 0) + (output_tokens or 0)

    def reserve(self, cost: float, tokens: int) -> Refusal | None:
        """Hold a call's worst case when it fits under the caps with every reservation held
        (one locked read and write, so two processes cannot both take the last room); else
        why not, and whether waiting for the calls in flight may make room."""
        return self.ledger.reserve(
            Paid(cost, tokens, 1), lambda book: self._refusal(book, cost, tokens)
        )

    def _refusal(self, book: Book, cost: float, tokens: int) -> Refusal | None:
        settled, held = book.settled, book.holding()
        spent, used = max(self.cost, settled.cost), max(self.tokens, settled.tokens)
        if self.max_cost is not None and cost and spent + held.cost + cost > self.max_cost:
            return Refusal(
                f"spend cap reached: {dollars(spent)} spent and {dollars(held.cost)} held of "
                f"{dollars(self.max_cost)}, the next call may cost ${cost:.4f}",
                spent + cost <= self.max_cost,
            )
        if self.max_tokens is not None and tokens and used + held.tokens + tokens > self.max_tokens:
            return Refusal(
                f"token cap reached: {used} used and {held.tokens} held of {self.max_tokens}, "
                f"the next call may use {tokens}",
                used + tokens <= self.max_tokens,
            )
        return None

    def totals(self) -> tuple[float, int]:
        """The run's spend and tokens: every call paid for (a reservation still held counted
        at its worst), at least what its recorded attempts spent."""
        paid = self.ledger.paid()
        return max(self.cost, paid.cost), max(self.tokens, paid.tokens)

    def reached(self) -> str | None:
        """The stop's reason once a cap is reached by what was settled (the calls in flight
        may settle lower: a call waits for them), else None."""
        settled = self.ledger.read().settled
        cost, tokens = max(self.cost, settled.cost), max(self.tokens, settled.tokens)
        if self.max_cost is not None and cost >= self.max_cost:
            return f"spend cap reached: {dollars(cost)} of {dollars(self.max_cost)}"
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"token cap reached: {tokens} of {self.max_tokens}"
        return None
