"""The run store: one SQLite file (WAL) in the pytest cache dir, written only by the controller.

Each attempt is one small transaction, so a kill -9 keeps every committed record. The `attempts`
table holds what planning and metrics read; full records (outputs, transcripts) live apart in
`payloads`, so large outputs never slow planning.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import StoreError
from .model import RECORD_SCHEMA
from .text import excerpt

STORE_SCHEMA = "agenteval.store/1"
STORE_FILE = "store.sqlite"
HISTORY_LIMIT = 10
CHECKPOINT_SECONDS = 1.0
"""How often a background thread moves the WAL into the database file (and fsyncs it)."""

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    datasets TEXT NOT NULL,
    dataset_key TEXT NOT NULL,
    agent TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    planned INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    owner TEXT,
    sessions TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL, dataset TEXT NOT NULL, task_id TEXT NOT NULL, attempt INTEGER NOT NULL,
    digest TEXT, run_digest TEXT, status TEXT,
    score REAL, duration REAL, input_tokens INTEGER, output_tokens INTEGER, cost REAL,
    finished_at REAL, summary TEXT,
    PRIMARY KEY (run_id, dataset, task_id, attempt)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS payloads (
    run_id TEXT NOT NULL, dataset TEXT NOT NULL, task_id TEXT NOT NULL, attempt INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, dataset, task_id, attempt)
) WITHOUT ROWID;
"""

Key = tuple[str, str, int]
"""(dataset, task id, attempt index): how records are keyed, never by node id."""


@dataclass(frozen=True)
class RunInfo:
    """One run as listed by `agenteval runs`."""

    run_id: str
    datasets: list[dict[str, str]]
    agent: dict[str, Any]
    created_at: float
    updated_at: float
    planned: int
    done: int
    status: str
    sessions: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class IndexRow:
    """What planning and metrics read of one stored attempt (no output, no transcript)."""

    key: Key
    digest: str
    run_digest: str
    status: str
    score: float | None
    duration: float
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    summary: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored attempt that cannot be read; it is reported and runs again."""

    key: Key
    problem: str


def new_run_id() -> str:
    return secrets.token_hex(4)


def owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Store:
    """Runs and their attempt records. Open with a file path, or ":memory:" without a cache."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self.conn = self._connect()
        self._checkpointer: threading.Thread | None = None

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint=0")  # see keep_checkpointed()
            conn.executescript(_TABLES)
            row = _first(conn.execute("SELECT value FROM meta WHERE key='schema'"))
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (STORE_SCHEMA,))
                conn.commit()
            elif _major(row[0]) > _major(STORE_SCHEMA):
                raise StoreError(
                    f"{self.path} was written by a newer pytest-agenteval ({row[0]}); "
                    "upgrade pytest-agenteval or use another cache_dir"
                )
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a readable run store ({exc})") from exc
        return conn

    def keep_checkpointed(self) -> None:
        """Checkpoint from a background thread instead of inside commits.

        With synchronous=NORMAL a commit never waits for the disk, but a checkpoint fsyncs; done
        inside a commit that stalls the run. SQLite releases the GIL while it syncs, so the
        thread costs the test loop nothing, and a power loss still cannot corrupt the store.
        """
        if self.path == ":memory:" or self._checkpointer is not None:
            return
        self._stop = threading.Event()
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name="agenteval-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def _checkpoint_loop(self) -> None:
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            while not self._stop.wait(CHECKPOINT_SECONDS):
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()

    def close(self) -> None:
        if self._checkpointer is not None:
            self._stop.set()
            self._checkpointer.join()
            self._checkpointer = None
        with contextlib.suppress(sqlite3.Error):
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()

    # --- runs -----------------------------------------------------------------------------

    def create_run(
        self, run_id: str, datasets: list[dict[str, str]], agent: dict[str, Any]
    ) -> None:
        now = time.time()
        try:
            self.conn.execute(
                "INSERT INTO runs (run_id, datasets, dataset_key, agent, created_at, updated_at,"
                " status, owner) VALUES (?, ?, ?, ?, ?, ?, 'running', ?)",
                (
                    run_id,
                    json.dumps(datasets),
                    dataset_key(datasets),
                    json.dumps(agent),
                    now,
                    now,
                    owner_tag(),
                ),
            )
        except sqlite3.IntegrityError:
            raise StoreError(
                f"run {run_id!r} exists already; add --resume-suite to continue it"
            ) from None
        self.conn.commit()

    def latest_run(self, datasets: list[dict[str, str]]) -> str | None:
        row = _first(
            self.conn.execute(
                "SELECT run_id FROM runs WHERE dataset_key = ? ORDER BY updated_at DESC LIMIT 1",
                (dataset_key(datasets),),
            )
        )
        return row[0] if row else None

    def run(self, run_id: str) -> RunInfo | None:
        for info in self._runs("WHERE r.run_id = ?", (run_id,)):
            return info
        return None

    def runs(self) -> list[RunInfo]:
        return list(self._runs("ORDER BY r.updated_at DESC", ()))

    def _runs(self, clause: str, params: tuple[Any, ...]) -> Iterator[RunInfo]:
        rows = self.conn.execute(
            "SELECT r.run_id, r.datasets, r.agent, r.created_at, r.updated_at, r.planned, r.status,"
            " r.owner, r.sessions,"
            " (SELECT COUNT(*) FROM attempts a WHERE a.run_id = r.run_id)"
            f" FROM runs r {clause}",
            params,
        ).fetchall()
        for rid, ds, agent, created, updated, planned, status, owner, sessions, done in rows:
            if status == "running" and not _owner_alive(owner):
                status = "interrupted"
            yield RunInfo(
                rid,
                json.loads(ds),
                json.loads(agent),
                created,
                updated,
                max(planned, done),
                done,
                status,
                json.loads(sessions),
            )

    def claim_run(self, run_id: str) -> None:
        """Mark the run as being continued by this process; refuse if another one runs it."""
        info = self.run(run_id)
        assert info is not None
        if info.status == "running":
            raise StoreError(f"run {run_id} is being run by another pytest process right now")
        self.conn.execute(
            "UPDATE runs SET status='running', owner=?, updated_at=? WHERE run_id=?",
            (owner_tag(), time.time(), run_id),
        )
        self.conn.commit()

    def set_planned(self, run_id: str, planned: int) -> None:
        self.conn.execute("UPDATE runs SET planned=? WHERE run_id=?", (planned, run_id))
        self.conn.commit()

    def finish_run(self, run_id: str, status: str, session: dict[str, Any]) -> None:
        row = _first(self.conn.execute("SELECT sessions FROM runs WHERE run_id=?", (run_id,)))
        sessions = [*json.loads(row[0]), session] if row else [session]
        self.conn.execute(
            "UPDATE runs SET status=?, owner=NULL, updated_at=?, sessions=? WHERE run_id=?",
            (status, time.time(), json.dumps(sessions), run_id),
        )
        self.conn.commit()

    # --- attempts -------------------------------------------------------------------------

    def commit(self, run_id: str, record: dict[str, Any], *, replaces: bool = False) -> None:
        """Store one finished attempt durably (one transaction); keep what it replaces."""
        key = (run_id, record["dataset"], record["task_id"], record["attempt"])
        if replaces:
            old = self.record(run_id, key[1:])
            if isinstance(old, dict):
                history = old.pop("previous", [])
                record = {**record, "previous": [old, *history][:HISTORY_LIMIT]}
        usage = record.get("usage") or {}
        with self.conn:
            self.conn.execute(
                "INSERT OR REPLACE INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    *key,
                    record["digest"],
                    record["run_digest"],
                    record["status"],
                    record.get("score"),
                    record["duration"],
                    usage.get("input_tokens"),
                    usage.get("output_tokens"),
                    usage.get("cost"),
                    record["finished_at"],
                    json.dumps(index_summary(record)),
                ),
            )
            self.conn.execute(
                "INSERT OR REPLACE INTO payloads VALUES (?,?,?,?,?)",
                (*key, json.dumps(record, ensure_ascii=False)),
            )

    def index(self, run_id: str) -> tuple[list[IndexRow], list[Unreadable]]:
        """Every stored attempt of a run, without outputs; unreadable ones apart."""
        rows, bad = [], []
        for r in self.conn.execute(
            "SELECT dataset, task_id, attempt, digest, run_digest, status, score, duration,"
            " input_tokens, output_tokens, cost, summary FROM attempts WHERE run_id=?",
            (run_id,),
        ):
            key = (r[0], r[1], r[2])
            try:
                summary = json.loads(r[11])
                if summary.get("schema") != RECORD_SCHEMA or r[5] not in ("pass", "fail", "error"):
                    raise ValueError(f"unknown schema {summary.get('schema')!r} or status {r[5]!r}")
                rows.append(
                    IndexRow(key, r[3], r[4], r[5], r[6], r[7] or 0.0, r[8], r[9], r[10], summary)
                )
            except (TypeError, ValueError, AttributeError) as exc:
                bad.append(Unreadable(key, f"{type(exc).__name__}: {exc}"))
        return rows, bad

    def record(self, run_id: str, key: Key) -> dict[str, Any] | Unreadable | None:
        """The full stored record of one attempt."""
        row = _first(
            self.conn.execute(
                "SELECT record FROM payloads"
                " WHERE run_id=? AND dataset=? AND task_id=? AND attempt=?",
                (run_id, *key),
            )
        )
        if row is None:
            return None
        try:
            record = json.loads(row[0])
            if not isinstance(record, dict) or record.get("schema") != RECORD_SCHEMA:
                raise ValueError("not an agenteval.record/1")
            return record
        except ValueError as exc:
            return Unreadable(key, str(exc))

    def records(self, run_id: str) -> Iterator[dict[str, Any]]:
        for (text,) in self.conn.execute("SELECT record FROM payloads WHERE run_id=?", (run_id,)):
            yield json.loads(text)


def index_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The small part of a record that replay and reports read (excerpts, no transcript)."""
    error = record.get("error")
    return {
        "schema": record["schema"],
        "tags": record.get("tags", []),
        "verdicts": record.get("verdicts", []),
        "output_excerpt": excerpt(record.get("output") or "", 500),
        "error": excerpt(error, 2000) if error else None,
        "error_type": record.get("error_type"),
        "phase": record.get("phase"),
        "started_at": record["started_at"],
    }


def _first(cursor: sqlite3.Cursor) -> Any:
    """The first row, reading the cursor to its end: a half-read statement keeps a read
    transaction open, and a later write on this connection would then fail as "locked"."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def dataset_key(datasets: list[dict[str, str]]) -> str:
    return "+".join(sorted(d["name"] for d in datasets))


def _major(schema: str) -> int:
    try:
        return int(schema.rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return 10**6


def _owner_alive(owner: str | None) -> bool:
    if not owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return True
