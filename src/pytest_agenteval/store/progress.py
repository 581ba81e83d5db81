"""Live progress of a run, for people who are not watching the terminal: `progress.json`.

Written by the controller (or the lone process) into the run folder, replaced atomically, at
most about once a second and once at the end. It is a view, not a source of truth: summaries
and records stay the only source of metrics.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from .files import write_json

PROGRESS_FILE = "progress.json"
PROGRESS_SCHEMA = "agenteval.progress/1"
EVERY = 1.0
"""Seconds between two writes while the run goes on."""


@dataclass
class Progress:
    """What the session has done so far; `write` puts it in the run folder."""

    run_id: str
    path: Path | None
    """progress.json of the run; None writes nothing."""
    planned: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    """pass, fail, error, skipped; and reused (also counted in its status)."""
    tokens: int = 0
    cost: float = 0.0
    in_flight: int | None = None
    started: float = field(default_factory=time.time)
    _written: float = 0.0

    def attempt(self, status: str, reused: bool) -> None:
        self.counts[status] += 1
        if reused:
            self.counts["reused"] += 1

    def as_json(self, status: str) -> dict[str, Any]:
        c = self.counts
        done = c["pass"] + c["fail"] + c["error"]
        elapsed = time.time() - self.started
        ran = done - c["reused"]
        left = max(self.planned - done - c["skipped"], 0)
        eta = left * elapsed / ran if ran and status == "running" else None
        return {
            "schema": PROGRESS_SCHEMA,
            "run_id": self.run_id,
            "status": status,
            "planned": self.planned,
            "done": done,
            **{name: c[name] for name in ("pass", "fail", "error", "skipped", "reused")},
            "in_flight": self.in_flight,
            "tokens": self.tokens,
            "cost": round(self.cost, 6),
            "elapsed": round(elapsed, 3),
            "eta": None if eta is None else round(eta, 1),
            "updated_at": time.time(),
        }

    def due(self) -> bool:
        """Whether a write now would happen (the last was a second ago or more)."""
        return self.path is not None and time.monotonic() - self._written >= EVERY

    def write(self, status: str, *, final: bool = False) -> None:
        """Replace progress.json, unless it was written less than a second ago (`final`
        always writes). A write that fails is skipped: progress is a view, never a cause to
        stop the run."""
        if self.path is None or not (final or self.due()):
            return
        self._written = time.monotonic()
        with contextlib.suppress(StoreError):
            write_json(self.path, self.as_json(status))


def read_progress(run_dir: Path) -> dict[str, Any] | None:
    """A run's progress.json, or None when it has none (or a newer major version)."""
    try:
        data = json.loads((run_dir / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != PROGRESS_SCHEMA:
        return None
    return data


def progress_lines(data: dict[str, Any]) -> list[str]:
    """progress.json for people: what `agenteval status` prints."""
    eta = f", about {data['eta']:.0f}s left" if data.get("eta") is not None else ""
    flight = f", {data['in_flight']} in flight" if data.get("in_flight") is not None else ""
    return [
        f"run {data['run_id']}: {data['status']} · {data['done']}/{data['planned']} done"
        f"{flight} · {data['elapsed']:.0f}s elapsed{eta}",
        f"{data['pass']} passed, {data['fail']} failed, {data['error']} errors, "
        f"{data['skipped']} skipped ({data['reused']} reused)",
        f"tokens {data['tokens']} · cost {data['cost']:.4f}",
    ]
