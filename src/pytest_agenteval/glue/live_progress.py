"""progress.json while the controller's session runs, for `agenteval status` and dashboards.

Written on reports (at most about once a second), by a ticker thread when no report comes (a
slow attempt's phases), and once more with the session's last word; one write at a time and
none after the last word. The controller makes it; the recorder counts into it, the reporter
says the last word.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import StoreError
from ..providers.gate import status as provider_status
from ..store.files import write_json
from ..store.progress import EVERY, LIVE, PROGRESS_FILE, Progress, read_progress
from ..store.running import read_running
from ..store.stops import Budget
from .runtime import Runtime


class LiveProgress:
    """The session's progress file and the thread that keeps it fresh."""

    def __init__(
        self, runtime: Runtime, run_id: str, run_dir: Path | None, budget: Budget, distributed: bool
    ):
        """`run_dir` None (a dry run) writes nothing; `distributed`: xdist workers run the
        attempts and note theirs in the run folder."""
        self.runtime = runtime
        self.budget = budget
        self.run_dir = run_dir
        self.distributed = distributed
        self.file = Progress(
            run_id,
            None if run_dir is None else run_dir / PROGRESS_FILE,
            running=self._running,
            providers=provider_status,
        )
        self._lock = threading.Lock()
        self._last_word = False
        self._ticker: threading.Thread | None = None
        self._ticking = threading.Event()
        """Set when the ticker must stop (the session ends)."""
        self._before: dict[str, Any] | None = None
        """The last session's progress.json, given back if this one never begins."""
        if run_dir is not None:
            with contextlib.suppress(StoreError):  # a damaged one is not worth keeping
                self._before = read_progress(run_dir)
        self.file.write("starting", force=True)  # `agenteval status` sees this session

    def give_back(self) -> None:
        """This session never began (a usage error, a failed probe): progress.json says again
        what the run's last session said (or nothing, as before)."""
        path = self.file.path
        self._last_word = True
        if path is None:
            return
        with contextlib.suppress(StoreError, OSError):
            if self._before is None:
                path.unlink(missing_ok=True)
            else:
                write_json(path, self._before)

    def _running(self) -> list[dict[str, Any]]:
        """The attempts running now: this process's, and what its xdist workers wrote."""
        own = self.runtime.running
        found = own.snapshot() if own is not None else []
        if self.distributed and self.run_dir is not None:
            found += read_running(self.run_dir)
        return found

    def start(self) -> None:
        """The run is planned: say so, and keep saying how it goes until the session ends."""
        self.show("running")
        if self.file.path is not None and self._ticker is None:
            self._ticker = threading.Thread(
                target=self._tick, name="agenteval-progress", daemon=True
            )
            self._ticker.start()

    def _tick(self) -> None:
        while not self._ticking.wait(EVERY) and not self._last_word:
            self.show()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """The session ends: the ticker stops before the session's last word is written."""
        self._ticking.set()
        if self._ticker is not None:
            self._ticker.join(5)

    def show(self, status: str | None = None) -> None:
        """Refresh progress.json (at most about once a second unless `status` is given); a
        status that is not a live one is the last word."""
        progress, runtime = self.file, self.runtime
        if status is None and not progress.due():
            return
        with self._lock:
            if self._last_word:
                return
            progress.tokens, progress.cost = self.budget.tokens, self.budget.cost
            ahead = runtime.runner.ahead
            progress.in_flight = (
                ahead.running if ahead is not None and not self.distributed else None
            )
            if status is None:
                stopping = runtime.stops is not None and runtime.stops.reason() is not None
                progress.write("stopping" if stopping else "running")
            else:
                self._last_word = status not in LIVE
                progress.write(status, force=True)
