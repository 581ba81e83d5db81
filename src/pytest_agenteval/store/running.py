"""Which attempts a process is running now, and in which phase: progress.json's `running`.

Each attempt's phase (waiting, environment, agent, tool, grading, judge, artifacts) and model
turn are noted in memory as they change: a lock and a dict entry, nothing written, so noting
costs nothing an attempt would show. The controller (or the lone process) puts its own set
in progress.json when it refreshes the file, about once a second. An xdist worker's set is
not known to the controller: a thread of the worker writes it to `running/<worker>.json` in
the run folder, at most once a second and only when it changed, and progress.json merges
those files (a worker without the run folder's disk is left out).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ..core.files import NotRegular, open_fd
from ..core.identity import AttemptId
from .files import read_small

RUNNING_DIR = "running"
PHASES = ("waiting", "environment", "agent", "tool", "grading", "judge", "artifacts")
EVERY = 1.0
"""Seconds between two writes of a worker's file, at most."""


class Running:
    """The attempts of this process in flight and the phase of each. Thread-safe without a
    lock: each change is one dict operation (atomic under the GIL), and an attempt's phases
    are noted by the thread that runs it at the time."""

    def __init__(self) -> None:
        self._slots: dict[AttemptId, tuple[str, float, int]] = {}
        self.changes = 0
        """Counts changes (a writer compares it with the last one it wrote; two changes at
        once may count as one, which still differs from what was written)."""

    def note(self, key: AttemptId, phase: str | None, turn: int = 0) -> None:
        """The attempt `key` is now in `phase` at model turn `turn` (None: it ended)."""
        self.changes += 1
        if phase is None:
            self._slots.pop(key, None)
            return
        old = self._slots.get(key)
        since = old[1] if old is not None and old[0] == phase else time.time()
        self._slots[key] = (phase, since, turn)

    def snapshot(self) -> list[dict[str, Any]]:
        """The attempts running now as progress.json lists them, oldest phase first."""
        slots = list(self._slots.items())  # one C call: no other thread changes it meanwhile
        return sorted(
            (entry(key, phase, since, turn) for key, (phase, since, turn) in slots),
            key=lambda e: (e["since"], e["task"], e["attempt"]),
        )


def entry(key: AttemptId, phase: str, since: float, turn: int) -> dict[str, Any]:
    """One running attempt: dataset, task, variant, attempt, phase, since (epoch), turn."""
    return {
        "dataset": key.dataset,
        "task": key.task_id,
        "variant": key.variant,
        "attempt": key.attempt,
        "phase": phase,
        "since": round(since, 3),
        "turn": turn,
    }


def running_path(run_dir: Path, process: str) -> Path:
    """The running set of one process (an xdist worker id) of the run."""
    return run_dir / RUNNING_DIR / f"{process}.json"


class RunningFile:
    """Writes a worker's running set to its file when it changed, at most every `every`
    seconds, from a daemon thread of its own; `close` writes it empty."""

    def __init__(self, running: Running, path: Path, every: float = EVERY) -> None:
        self.running = running
        self.path = path
        self.every = every
        self._written = -1
        self._stop = threading.Event()
        with contextlib.suppress(OSError):
            path.parent.mkdir(exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="agenteval-running", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.flush()

    def flush(self) -> None:
        changes = self.running.changes
        if changes != self._written:
            self._written = changes
            _write(self.path, self.running.snapshot())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        _write(self.path, [])


def _write(path: Path, entries: list[dict[str, Any]]) -> None:
    """Replace the file (best effort: progress is a view, never a cause to stop)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(OSError, NotRegular):  # a planted link is not written through
        fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(entries))
        os.replace(tmp, path)


RUNNING_LIMIT = 2**24
"""A worker's running set names a few attempts: a bigger file is left out."""


def read_running(run_dir: Path) -> list[dict[str, Any]]:
    """Every worker's running attempts, as their files say (unreadable ones left out)."""
    found: list[dict[str, Any]] = []
    for path in sorted((run_dir / RUNNING_DIR).glob("*.json")):
        try:
            data = json.loads(read_small(path, RUNNING_LIMIT))
        except (OSError, ValueError):
            continue
        if isinstance(data, list):
            found.extend(e for e in data if isinstance(e, dict) and e.get("phase") in PHASES)
    return found


def clear_running(run_dir: Path) -> None:
    """Forget the running sets an earlier session's workers left."""
    shutil.rmtree(run_dir / RUNNING_DIR, ignore_errors=True)
