"""Which agent calls a process has in flight, in a file of the run folder that outlives it.

An xdist worker that dies is named after the item its main thread was on, but with attempts in
flight (`--agenteval-concurrency`) any of its calls may have killed it. Each worker keeps the
calls it has in flight in `inflight/<worker>.json`, so the controller can tell a crash that is
provably an attempt's own from one that only happened while it waited.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from pathlib import Path

from ..core.files import NotRegular, open_fd
from ..core.identity import AttemptId
from .files import read_small

INFLIGHT_DIR = "inflight"


def inflight_path(run_dir: Path, process: str) -> Path:
    """The notes of one process (an xdist worker id) of the run."""
    return run_dir / INFLIGHT_DIR / f"{process}.json"


NOTES_LIMIT = 2**24
"""A process's notes name the calls it has in flight: a bigger file is no notes."""


class InFlight:
    """Notes each agent call of this process as it starts and ends: one write each, padded to
    the longest note so far (no truncate, so a process that dies between two writes never
    leaves a torn note). Best effort: a note that cannot be written removes the file, which
    the reader takes as "not known"."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._keys: list[AttemptId] = []
        self._lock = threading.Lock()  # calls start and end in several threads
        self._size = 0
        self._fd = -1
        with contextlib.suppress(OSError, NotRegular):  # a planted link: no notes, not followed
            path.parent.mkdir(exist_ok=True)
            self._fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            self._write()

    def note(self, key: AttemptId, running: bool) -> None:
        """The agent call of `key` starts (`running`) or has ended."""
        with self._lock:
            if running:
                self._keys.append(key)
            elif key in self._keys:
                self._keys.remove(key)
            if self._fd >= 0:
                self._write()

    def _write(self) -> None:
        data = json.dumps([key.to_json() for key in self._keys]).encode()
        try:
            os.pwrite(self._fd, data.ljust(self._size), 0)
        except OSError:
            os.close(self._fd)
            self._fd = -1
            with contextlib.suppress(OSError):
                self.path.unlink()
            return
        self._size = max(self._size, len(data))


def read_in_flight(path: Path) -> list[AttemptId] | None:
    """The calls a process had in flight when it last wrote its notes; None: not known (no
    notes, or notes that cannot be read)."""
    try:
        data = json.loads(read_small(path, NOTES_LIMIT))
    except (OSError, ValueError):
        return None
    if not isinstance(data, list):
        return None
    try:
        return [AttemptId.from_json(values) for values in data]
    except (TypeError, ValueError):
        return None


def left_in_flight(run_dir: Path) -> set[AttemptId]:
    """The calls the run's earlier processes still had in flight when they ended: those of a
    worker that died (a worker that ends cleanly leaves no call noted)."""
    found: set[AttemptId] = set()
    for path in sorted((run_dir / INFLIGHT_DIR).glob("*.json")):
        found.update(read_in_flight(path) or ())
    return found


def clear_in_flight(run_dir: Path) -> None:
    """Forget the notes of a run's earlier sessions (their processes are gone)."""
    shutil.rmtree(run_dir / INFLIGHT_DIR, ignore_errors=True)
