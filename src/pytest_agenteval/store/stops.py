"""Suite-wide stops: cancel, spend cap, token cap, deadline, Ctrl-C.

Every process of a run checks them where an attempt would *start* (never mid-attempt), so one
stop halts all xdist workers on the machine. The authority is the run folder: `cancel` is
written by `agenteval cancel` from another shell, `stop.json` by the controller when the run's
spend or tokens reach a cap (only the controller sees every committed record); a deadline is
an absolute time every process knows. A resumed run starts with both files removed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..core.errors import StoreError
from .files import write_json

CANCEL_FILE = "cancel"
STOP_FILE = "stop.json"
CANCEL_SCHEMA = "agenteval.cancel/1"
STOP_SCHEMA = "agenteval.stop/1"

LOOK_EVERY = 0.01
"""Seconds between two looks for stop files; bounds how late a process sees a stop."""

StopKind = Literal["cancelled", "budget", "deadline", "interrupted"]
STOP_KINDS = ("cancelled", "budget", "deadline")
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

    def __init__(self, run_dir: Path | None, deadline: float | None = None) -> None:
        self.run_dir = run_dir
        self.deadline = deadline
        self._stop: Stop | None = None
        self._lock = threading.Lock()
        self._looked = 0.0
        self._files = (run_dir / CANCEL_FILE, run_dir / STOP_FILE) if run_dir else None

    @property
    def stop(self) -> Stop | None:
        return self._stop

    def reason(self) -> str | None:
        """Why no new attempt may start now, or None (called before each attempt starts)."""
        found = self._stop or self._look()
        return found.reason if found else None

    def halt(self, kind: StopKind, reason: str, *, publish: bool = False) -> None:
        """Stop starting attempts here; `publish` tells the run's other processes too."""
        with self._lock:
            if self._stop is None:
                self._stop = Stop(kind, reason)
        if publish and self.run_dir is not None:
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
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        kind = data.get("kind")
        if data.get("schema") == STOP_SCHEMA and kind in (*STOP_KINDS, "interrupted"):
            self.halt(kind, str(data.get("reason", kind)))


class Budget:
    """The run's spend and tokens so far (every committed attempt, earlier sessions too),
    against its caps."""

    def __init__(self, max_cost: float | None, max_tokens: int | None) -> None:
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self.cost = 0.0
        self.tokens = 0

    @property
    def capped(self) -> bool:
        return self.max_cost is not None or self.max_tokens is not None

    def add(self, cost: float | None, input_tokens: int | None, output_tokens: int | None) -> None:
        self.cost += cost or 0.0
        self.tokens += (input_tokens or 0) + (output_tokens or 0)

    def reached(self) -> str | None:
        """The stop's reason once a cap is reached, else None."""
        if self.max_cost is not None and self.cost >= self.max_cost:
            return f"spend cap reached: ${self.cost:.2f} of ${self.max_cost:.2f}"
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"token cap reached: {self.tokens} of {self.max_tokens}"
        return None
