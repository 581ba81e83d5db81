"""Live progress of a run, for people who are not watching the terminal: `progress.json`.

Written by the controller (or the lone process) into the run folder, replaced atomically: once
as the session starts (`starting`), at most about once a second while it runs, and once at the
end. It names the session that wrote it (pid, host, start), so `agenteval status` tells a live
session's progress from what a session that is gone left behind. It is a view, not a source of
truth: summaries and records stay the only source of metrics.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import StoreError
from ..core.identity import AttemptId
from ..core.pids import start_time
from .files import RUN_JSON_LIMIT, read_small, write_json
from .index import IndexRow

PROGRESS_FILE = "progress.json"
PROGRESS_SCHEMA: Final = "agenteval.progress/1"
EVERY = 1.0
"""Seconds between two writes while the run goes on."""


class SessionInfo(BaseModel):
    """The session that wrote the file."""

    pid: int
    """Its process id on `host`."""
    host: str
    """The machine it runs on."""
    started_at: float
    """When it started (epoch seconds)."""


class VariantProgress(BaseModel):
    """One variant's part of the session's progress."""

    model_config = ConfigDict(strict=True, populate_by_name=True)

    planned: int
    """Attempts of the variant the session planned."""
    done: int
    """Its attempts finished (passed, failed or errored), reused ones included."""
    pass_: int = Field(alias="pass")
    """Its attempts that passed."""
    fail: int
    """Its attempts that failed."""
    error: int
    """Its attempts that ended in an error."""
    skipped: int
    """Its attempts skipped."""
    reused: int
    """Its finished attempts replayed from the store."""


class RunningAttempt(BaseModel):
    """An attempt running now, and the phase it is in."""

    model_config = ConfigDict(strict=True)

    dataset: str
    """The attempt's dataset."""
    task: str
    """Its task's id."""
    variant: str | None
    """Its variant; None for a dataset without variants."""
    attempt: int
    """Its attempt index."""
    phase: Literal["waiting", "environment", "agent", "tool", "grading", "judge", "artifacts"]
    """`waiting` (for its agent's limits, or its turn), `environment` (made), `agent` (its
    call runs), `tool` (the agent runs a tool), `grading`, `judge`, `artifacts` (collected)."""
    since: float
    """When it entered the phase (epoch seconds)."""
    turn: int
    """Model calls its agent made so far (what its trace says)."""


class ProgressFile(BaseModel):
    """progress.json (`agenteval.progress/1`): what a run's current (or last) session has done.
    Written and read through this one definition; a field that does not fit is damage."""

    model_config = ConfigDict(strict=True, populate_by_name=True)

    schema_: Literal["agenteval.progress/1"] = Field(PROGRESS_SCHEMA, alias="schema")
    """The format and its major version."""
    run_id: str
    """The run's id."""
    status: str
    """`starting`, `running` or `stopping` while a session runs; then its last word
    (`complete`, `interrupted`, or why a stop ended it)."""
    session: SessionInfo | None = None
    """The session that wrote it (absent in files of older versions)."""
    planned: int
    """Attempts the session planned."""
    done: int
    """Attempts finished (passed, failed or errored), reused ones included."""
    pass_: int = Field(alias="pass")
    """Attempts that passed."""
    fail: int
    """Attempts that failed (a wrong answer)."""
    error: int
    """Attempts that ended in an error."""
    skipped: int
    """Attempts skipped (a stop, or Ctrl-C's grace ran out)."""
    reused: int
    """Finished attempts replayed from the store (also counted in their status)."""
    in_flight: int | None = None
    """Agent calls running now, under concurrency."""
    tokens: int
    """Tokens the session's attempts used."""
    cost: float
    """What the session's attempts cost (agent + judge)."""
    elapsed: float
    """Seconds since the session started."""
    eta: float | None = None
    """Seconds left, estimated from the pace so far, while running."""
    updated_at: float | None = None
    """When this was written (epoch seconds)."""
    variants: dict[str, VariantProgress] | None = None
    """The counts of each variant, for a run with variants only (absent otherwise)."""
    running: list[RunningAttempt] | None = None
    """The attempts running now and their phases, while the session runs (absent in its
    last word, and in files of older versions)."""
    providers: dict[str, ProviderProgress] | None = None
    """Each provider with `limits: max_in_flight`: its current (adaptive) limit and its 429s
    so far, across the run's processes (absent when no provider has limits)."""


class ProviderProgress(BaseModel):
    """A provider's adaptive in-flight limit now."""

    model_config = ConfigDict(strict=True)

    limit: int
    """Requests it may have in flight now."""
    max_in_flight: int
    """Its `limits: max_in_flight`."""
    rate_limited: int
    """429 answers so far."""


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
    by_variant: dict[str, tuple[int, Counter[str]]] = field(default_factory=dict)
    """Each variant's planned attempts and counts, by name (empty for a run without
    variants)."""
    running: Callable[[], list[dict[str, Any]]] | None = None
    """The attempts running now (this process's and its workers'), while the session runs."""
    providers: Callable[[], dict[str, dict[str, int]]] | None = None
    """Each limited provider's current limit and 429 count."""
    _written: float = 0.0

    def plan(self, keys: Collection[AttemptId]) -> None:
        """The attempts the session plans, counted per variant too."""
        self.planned = len(keys)
        planned = Counter(variant for key in keys if (variant := key.variant) is not None)
        self.by_variant = {  # by name: the same order in every session and process layout
            name: (planned[name], self.by_variant.get(name, (0, Counter()))[1])
            for name in sorted(planned)
        }

    def attempt(self, status: str, reused: bool, variant: str | None = None) -> None:
        for counts in self._counters(variant):
            counts[status] += 1
            if reused:
                counts["reused"] += 1

    def skip(self, variant: str | None = None) -> None:
        for counts in self._counters(variant):
            counts["skipped"] += 1

    def _counters(self, variant: str | None) -> list[Counter[str]]:
        found = self.by_variant.get(variant) if variant is not None else None
        return [self.counts] if found is None else [self.counts, found[1]]

    def as_json(self, status: str) -> dict[str, Any]:
        c = self.counts
        done = c["pass"] + c["fail"] + c["error"]
        elapsed = time.time() - self.started
        ran = done - c["reused"]
        left = max(self.planned - done - c["skipped"], 0)
        eta = left * elapsed / ran if ran and status == "running" else None
        data: dict[str, Any] = {
            "schema": PROGRESS_SCHEMA,
            "run_id": self.run_id,
            "status": status,
            "session": {"pid": os.getpid(), "host": _HOST, "started_at": self.started},
            "planned": self.planned,
            "done": done,
            **{name: c[name] for name in COUNTS},
            "in_flight": self.in_flight,
            "tokens": self.tokens,
            "cost": round(self.cost, 6),
            "elapsed": round(elapsed, 3),
            "eta": None if eta is None else round(eta, 1),
            "updated_at": time.time(),
        }
        if self.by_variant:
            data["variants"] = {
                name: {
                    "planned": planned,
                    "done": c["pass"] + c["fail"] + c["error"],
                    **{count: c[count] for count in COUNTS},
                }
                for name, (planned, c) in self.by_variant.items()
            }
        if status in LIVE and self.running is not None:
            data["running"] = self.running()
        found = self.providers() if self.providers is not None else None
        if found:
            data["providers"] = found
        written = ProgressFile.model_validate(data)  # what is written is what the reader takes
        dumped = written.model_dump(by_alias=True)
        for name in ("variants", "running", "providers"):
            if dumped[name] is None:
                del dumped[name]  # a run without variants: the file it always had
        return dumped

    def due(self) -> bool:
        """Whether a write now would happen (the last was a second ago or more)."""
        return self.path is not None and time.monotonic() - self._written >= EVERY

    def write(self, status: str, *, force: bool = False) -> None:
        """Replace progress.json, unless it was written less than a second ago (`force`
        always writes). A write that fails is skipped: progress is a view, never a cause to
        stop the run."""
        if self.path is None or not (force or self.due()):
            return
        self._written = time.monotonic()
        with contextlib.suppress(StoreError):
            write_json(self.path, self.as_json(status))


COUNTS = ("pass", "fail", "error", "skipped", "reused")
LIVE = ("starting", "running", "stopping")
"""Statuses a session writes while it runs (any other is its last word)."""
_HOST = socket.gethostname()


def read_progress(run_dir: Path) -> dict[str, Any] | None:
    """A run's progress.json, or None when it has none; StoreError when it cannot be used
    (damaged, a field missing, or of a newer version), naming the file and what is wrong."""
    path = run_dir / PROGRESS_FILE
    try:
        data = json.loads(read_small(path, RUN_JSON_LIMIT))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: cannot be read ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != PROGRESS_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise StoreError(f"{path}: not an {PROGRESS_SCHEMA} file (schema {found!r})")
    try:
        ProgressFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = first["loc"][0]
        problem = "is missing" if first["type"] == "missing" else f"is {data.get(name)!r}"
        raise StoreError(f"{path}: field {name!r} {problem}") from None
    return data


def writer_alive(data: dict[str, Any]) -> bool | None:
    """Whether the session that wrote `data` still runs; None: not known (another host, or
    written by a version that did not name its session)."""
    session = data.get("session")
    if not isinstance(session, dict) or session.get("host") != _HOST:
        return None
    pid = session.get("pid")
    if type(pid) is not int or pid <= 0:
        return None
    return start_time(pid) is not None


def stale_lines(
    data: dict[str, Any], rows: Sequence[IndexRow], planned: int, status: str
) -> list[str]:
    """What `agenteval status` says of a run whose session is gone (killed): its progress.json
    lags (written at most once a second, its calls in flight died with it), so the numbers are
    counted from the run's index, which holds every committed attempt."""
    counts = Counter(row.status for row in rows)
    tokens = sum((row.input_tokens or 0) + (row.output_tokens or 0) for row in rows)
    cost = sum(row.spend or 0.0 for row in rows)
    by_variant: dict[str, Counter[str]] = {}
    for row in rows:
        if row.variant is not None:
            by_variant.setdefault(row.variant, Counter())[row.status] += 1
    planned_of = {name: v["planned"] for name, v in (data.get("variants") or {}).items()}
    pid = (data.get("session") or {}).get("pid", "?")
    return [
        f"run {data['run_id']}: {status} · {len(rows)}/{max(planned, len(rows))} done",
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['error']} errors",
        f"tokens {tokens} · cost {cost:.4f}",
        *(
            f"  variant {name}: {sum(c.values())}/{planned_of.get(name, '?')} done · "
            f"{c['pass']} passed, {c['fail']} failed, {c['error']} errors"
            for name, c in sorted(by_variant.items())
        ),
        f"counted from the run's index: the session that wrote progress.json (pid {pid}) is "
        f"gone, and its last word was {data['done']}/{data['planned']} done",
    ]


def progress_lines(data: dict[str, Any]) -> list[str]:
    """progress.json for people: what `agenteval status` prints."""
    if data["status"] == "starting":
        return [f"run {data['run_id']}: a session is starting (collecting and planning)"]
    eta = f", about {data['eta']:.0f}s left" if data.get("eta") is not None else ""
    running = data.get("running") or []
    flight = f", {data['in_flight']} in flight" if data.get("in_flight") is not None else ""
    if running:  # the same two numbers as the list of running attempts below
        flight = ", " + _running_counts(running)
    return [
        f"run {data['run_id']}: {data['status']} · {data['done']}/{data['planned']} done"
        f"{flight} · {data['elapsed']:.0f}s elapsed{eta}",
        f"{data['pass']} passed, {data['fail']} failed, {data['error']} errors, "
        f"{data['skipped']} skipped ({data['reused']} reused)",
        f"spent by the run, its earlier sessions included: tokens {data['tokens']} · cost "
        f"{data['cost']:.4f}",
        *(
            f"  variant {name}: {v['done']}/{v['planned']} done · {v['pass']} passed, "
            f"{v['fail']} failed, {v['error']} errors, {v['skipped']} skipped"
            for name, v in (data.get("variants") or {}).items()
        ),
        *running_lines(running, data.get("updated_at")),
    ]


def _running_counts(running: list[dict[str, Any]]) -> str:
    """`15 in flight, 33 waiting`: attempts past their `waiting` phase (their call runs), and
    those waiting for their agent's limits or their turn."""
    waiting = sum(1 for r in running if r.get("phase") == "waiting")
    flight = f"{len(running) - waiting} in flight"
    return f"{flight}, {waiting} waiting" if waiting else flight


def running_lines(running: list[dict[str, Any]], now: float | None) -> list[str]:
    """One line per running attempt: its name, phase, how long it has been in it, its turn;
    headed by the counts the status line gives, so the two never differ."""
    lines = [f"running ({_running_counts(running)}):"] if running else []
    for r in running:
        variant = f"{r['variant']} " if r.get("variant") else ""
        since = f" {max((now or time.time()) - r['since'], 0):.0f}s" if r.get("since") else ""
        turn = f" · turn {r['turn']}" if r.get("turn") else ""
        lines.append(f"  {r['task']} [{variant}attempt {r['attempt']}] {r['phase']}{since}{turn}")
    return lines
