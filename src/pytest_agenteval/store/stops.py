"""Suite-wide stops: cancel, spend cap, token cap, deadline, Ctrl-C.

Every process of a run checks them where an agent call would *start* (never mid-call: after
it got its limit slot), so one stop halts all xdist workers on the machine. The authority is
the run folder: `cancel` is written by `agenteval cancel` from another shell, `stop.json` when
the run's spend or tokens reach a cap; a deadline is an absolute time every process knows. A
resumed run starts with both files removed.

Spend is counted when an answer arrives, not when its item reports: every process adds the
answer's cost and tokens to the run folder's `spend` file (under a lock) before the call gives
up its limit slot, and every call reads that file as it starts. So a cap is passed by at most
the calls already at the server when it was reached: `max_in_flight` of them for an agent with
that limit, else the calls in flight of every process (plus the judges of those attempts).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..core.errors import StoreError
from ..core.text import dollars
from .files import read_small, write_json
from .locks import locked

CANCEL_FILE = "cancel"
STOP_FILE = "stop.json"
SPEND_FILE = "spend"
CANCEL_SCHEMA = "agenteval.cancel/1"
STOP_SCHEMA = "agenteval.stop/1"

STOP_LIMIT = 2**16
"""stop.json is a few hundred bytes: a bigger one (or a link, a FIFO) is not a stop."""
LOOK_EVERY = 0.01
"""Seconds between two looks for stop files; bounds how late a process sees a stop."""

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
        self.budget: Budget | None = None
        """The run's caps and spend; None: uncapped."""
        if max_cost is not None or max_tokens is not None:
            ledger = Ledger(run_dir / SPEND_FILE if run_dir else None)
            self.budget = Budget(max_cost, max_tokens, ledger)

    def spent(self, cost: float | None, tokens: int) -> None:
        """An answer arrived: count what it cost (before its call gives up its limit slot)."""
        if self.budget is not None and (cost or tokens):
            self.budget.ledger.add(cost or 0.0, tokens)

    def reserve(self, cost: float | None, tokens: int | None) -> str | None:
        """Before a model call is sent: hold its worst case (`cost`, `tokens`; None: not
        known, that cap is then approximate for it) against the caps, in every process. A
        reservation that does not fit is not made: the run stops (`budget`) and its reason is
        returned."""
        budget = self.budget
        if budget is None:
            return None
        reason = budget.reserve(cost or 0.0, tokens or 0)
        if reason is not None:
            self.halt("budget", reason, publish=True)
        return reason

    def settle(self, reserved: tuple[float, int], actual: tuple[float, int]) -> None:
        """The call answered (or failed): its reservation becomes what it really cost."""
        if self.budget is not None:
            self.budget.ledger.add(actual[0] - reserved[0], actual[1] - reserved[1])

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


_SPENT = struct.Struct("<dq")


class Ledger:
    """The run's spend and tokens in a small file every process of the run adds to under an
    exclusive `flock`; without a run folder, in this process only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._here = (0.0, 0)
        self._lock = threading.Lock()

    def add(self, cost: float, tokens: int) -> tuple[float, int]:
        """Add an answer's cost and tokens; returns the new totals."""
        with self._locked() as fd:
            spent, used = self._read(fd)
            totals = (spent + cost, used + tokens)
            self._write(fd, totals)
        return totals

    def reset(self, cost: float, tokens: int) -> None:
        """Start from what the run's committed attempts spent (a session's start)."""
        with self._locked() as fd:
            self._write(fd, (cost, tokens))

    def read(self) -> tuple[float, int]:
        with self._locked() as fd:
            return self._read(fd)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int | None]:
        with self._lock:
            if self.path is None or not self.path.parent.is_dir():  # counted here
                yield None
            else:
                with locked(self.path) as fd:
                    yield fd

    def _read(self, fd: int | None) -> tuple[float, int]:
        if fd is None:
            return self._here
        data = os.pread(fd, _SPENT.size, 0)
        return _SPENT.unpack(data) if len(data) == _SPENT.size else (0.0, 0)

    def _write(self, fd: int | None, totals: tuple[float, int]) -> None:
        if fd is None:
            self._here = totals
        else:
            os.pwrite(fd, _SPENT.pack(*totals), 0)


class Budget:
    """The run's spend and tokens so far against its caps: in `cost` and `tokens`, what its
    committed attempts spent (earlier sessions too); in `ledger`, once the run's stops check
    it, every answer that arrived in any of its processes."""

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

    def reserve(self, cost: float, tokens: int) -> str | None:
        """Add a call's worst case to the ledger when it fits under the caps (one locked
        read and write, so two processes cannot both take the last room); else the reason."""
        with self.ledger._locked() as fd:
            answered, used = self.ledger._read(fd)
            spent, total = max(self.cost, answered), max(self.tokens, used)
            if self.max_cost is not None and cost and spent + cost > self.max_cost:
                return (
                    f"spend cap reached: {dollars(spent)} spent or held of "
                    f"{dollars(self.max_cost)}, the next call may cost ${cost:.4f}"
                )
            if self.max_tokens is not None and tokens and total + tokens > self.max_tokens:
                return (
                    f"token cap reached: {total} used or held of {self.max_tokens}, "
                    f"the next call may use {tokens}"
                )
            self.ledger._write(fd, (answered + cost, used + tokens))
        return None

    def totals(self) -> tuple[float, int]:
        """The run's spend and tokens: every answer that arrived, at least what committed."""
        answered, used = self.ledger.read()
        return max(self.cost, answered), max(self.tokens, used)

    def reached(self) -> str | None:
        """The stop's reason once a cap is reached (by committed spend or by answers that
        arrived), else None."""
        cost, tokens = self.totals()
        if self.max_cost is not None and cost >= self.max_cost:
            return f"spend cap reached: {dollars(cost)} of {dollars(self.max_cost)}"
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"token cap reached: {tokens} of {self.max_tokens}"
        return None
