"""The run store: append-only files per run in the pytest cache dir, written by the controller.

    <cache_dir>/agenteval/runs/<run_id>/
        run.json        what the run is (datasets, agent, planned, status); replaced atomically
        index.jsonl     one small line per committed attempt: what planning and metrics read
        records.jsonl   one line per full record (outputs, transcripts), found by offset
        lock            held (flock) by the pytest session that is running the run

Committing an attempt appends its record, then its index line: two `write()`s, no rewriting,
O(1) whatever the run's size. The index line is the commit point. A kill -9 cannot tear a
`write()` to a regular file, so every committed attempt survives it; after a power loss a torn
last line is reported as unreadable and that attempt runs again. The newest line of a key wins;
a replaced record is kept in its successor's `previous`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from sys import intern
from typing import Any

from ..core.errors import StoreError
from ..core.model import RECORD_SCHEMA, Key
from ..core.records import AttemptRecord, Detail, index_line

RUN_SCHEMA = "agenteval.run/1"


@dataclass(frozen=True)
class RunInfo:
    """One run as `agenteval runs` lists it."""

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
    """What planning and metrics read of one stored attempt: compact, no output, no transcript.

    Runs hold tens of thousands of rows, so the replay data stays a JSON string until an item
    actually replays it.
    """

    key: Key
    digest: str
    run_digest: str
    status: str
    score: float | None
    duration: float
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None
    tags: tuple[str, ...]
    reason: str
    """One line on why the attempt passed, failed or errored."""
    phase: str | None
    """Where an error happened: agent, grading or crash."""
    replay: str
    """JSON of what replaying a failure or error shows: verdicts, output excerpt, error (a
    replayed pass shows nothing, so passes store "")."""
    crashes: int = 0
    """How many times in a row the attempt's process died (phase `crash`)."""

    @property
    def dataset(self) -> str:
        return self.key[0]

    def detail(self) -> Detail:
        """What replaying this attempt shows (nothing for a pass)."""
        return Detail.from_json(json.loads(self.replay)) if self.replay else Detail()

    @property
    def task_id(self) -> str:
        return self.key[1]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored attempt that cannot be read; it is reported and runs again."""

    where: str
    """`path:line` of the bad index line."""
    problem: str


def new_run_id() -> str:
    return secrets.token_hex(4)


class Store:
    """Runs below `root` (`<cache_dir>/agenteval`); without a cache dir, a temporary folder."""

    def __init__(self, root: Path | None) -> None:
        self.temporary = root is None
        self.root = Path(tempfile.mkdtemp(prefix="agenteval-store-")) if root is None else root
        self.runs_dir = self.root / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.problems: list[str] = []
        self._open: dict[str, _RunFiles] = {}
        self._offsets: dict[str, dict[Key, tuple[int, int]]] = {}

    def describe(self) -> str:
        return "memory only (no cache dir)" if self.temporary else str(self.runs_dir)

    def close(self) -> None:
        for files in self._open.values():
            files.close()
        self._open.clear()
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- runs -----------------------------------------------------------------------------

    def create_run(
        self, run_id: str, datasets: list[dict[str, str]], agent: dict[str, Any]
    ) -> None:
        folder = self.runs_dir / run_id
        try:
            folder.mkdir()
        except FileExistsError:
            raise StoreError(
                f"run {run_id!r} exists already; add --resume-suite to continue it"
            ) from None
        now = time.time()
        meta = {
            "schema": RUN_SCHEMA,
            "run_id": run_id,
            "datasets": datasets,
            "dataset_key": dataset_key(datasets),
            "agent": agent,
            "created_at": now,
            "updated_at": now,
            "planned": 0,
            "status": "running",
            "sessions": [],
        }
        _write_json(folder / "run.json", meta)
        self.claim_run(run_id)

    def latest_run(self, datasets: list[dict[str, str]]) -> str | None:
        """The most recently used run of exactly these datasets."""
        wanted = dataset_key(datasets)
        best: tuple[float, str] | None = None
        for meta in self._scan():
            if meta["dataset_key"] == wanted and (best is None or meta["updated_at"] > best[0]):
                best = (meta["updated_at"], meta["run_id"])
        return best[1] if best else None

    def _scan(self) -> Iterator[dict[str, Any]]:
        """Every run's run.json; unreadable ones are skipped and listed in `problems`."""
        for folder in sorted(self.runs_dir.iterdir()):
            try:
                meta = self._meta_or_none(folder.name)
            except StoreError as exc:
                self.problems.append(str(exc))
                continue
            if meta is not None:
                yield meta

    def run(self, run_id: str, *, count: bool = False) -> RunInfo | None:
        """A run's description (`count`: also read its index to count finished attempts)."""
        meta = self._meta_or_none(run_id)
        if meta is None:
            return None
        done = len(self.index(run_id)[0]) if count else 0
        status = meta["status"]
        if status == "running" and run_id not in self._open and not _locked(self.runs_dir / run_id):
            status = "interrupted"
        return RunInfo(
            run_id,
            meta["datasets"],
            meta["agent"],
            meta["created_at"],
            meta["updated_at"],
            max(meta["planned"], done),
            done,
            status,
            meta["sessions"],
        )

    def runs(self) -> list[RunInfo]:
        """Every readable run, most recently used first, with counts."""
        found = [self.run(meta["run_id"], count=True) for meta in self._scan()]
        return sorted((r for r in found if r), key=lambda r: r.updated_at, reverse=True)

    def claim_run(self, run_id: str) -> None:
        """Take the run's lock for this session; refuse if another pytest process holds it."""
        if run_id in self._open:
            return
        files = _RunFiles(self.runs_dir / run_id)
        if not files.lock():
            files.close()
            raise StoreError(f"run {run_id} is being run by another pytest process right now")
        self._open[run_id] = files
        self._update(run_id, status="running")

    def set_planned(self, run_id: str, planned: int) -> None:
        self._update(run_id, planned=planned)

    def set_agent(self, run_id: str, agent: dict[str, Any]) -> None:
        """Replace the run's agent fingerprint (only while it has no records)."""
        self._update(run_id, agent=agent)

    def finish_run(self, run_id: str, status: str, session: dict[str, Any]) -> None:
        meta = self._meta(run_id)
        self._update(run_id, status=status, sessions=[*meta["sessions"], session])
        files = self._open.pop(run_id, None)
        if files is not None:
            files.close()

    def _update(self, run_id: str, **changes: Any) -> None:
        meta = {**self._meta(run_id), **changes, "updated_at": time.time()}
        _write_json(self.runs_dir / run_id / "run.json", meta)

    def _meta(self, run_id: str) -> dict[str, Any]:
        path = self.runs_dir / run_id / "run.json"
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path} is unreadable ({exc}); delete that run's folder") from None
        if _major(meta.get("schema", "")) > _major(RUN_SCHEMA):
            raise StoreError(
                f"{path} was written by a newer pytest-agenteval ({meta['schema']}); "
                "upgrade pytest-agenteval or use another cache_dir"
            )
        return meta

    def _meta_or_none(self, run_id: str) -> dict[str, Any] | None:
        if not (self.runs_dir / run_id / "run.json").exists():
            return None
        return self._meta(run_id)

    # --- attempts -------------------------------------------------------------------------

    def commit(self, run_id: str, record: AttemptRecord, *, replaces: bool = False) -> None:
        """Store one finished attempt durably; keep the record it replaces as history."""
        if replaces:
            old = self.record(run_id, record.key)
            if old is not None:
                record = record.replacing(old)
        files = self._open[run_id]
        offset, length = files.append_record(json.dumps(record.to_json(), ensure_ascii=False))
        files.append_index(json.dumps(index_line(record, offset, length), ensure_ascii=False))
        offsets = self._offsets.get(run_id)  # loaded only once a plan or a replace needed it
        if offsets is not None:
            offsets[record.key] = (offset, length)

    def index(
        self, run_id: str, *, for_plan: bool = True
    ) -> tuple[list[IndexRow], list[Unreadable]]:
        """The newest readable line of every stored attempt; unreadable lines apart.

        Without `for_plan` the digests, replay data and record offsets are left out (metrics
        need none of them). Equal reasons share one string: most attempts have one of a few.
        """
        path = self.runs_dir / run_id / "index.jsonl"
        rows: dict[Key, IndexRow] = {}
        offsets: dict[Key, tuple[int, int]] = {}
        reasons: dict[str, str] = {}
        bad = []
        with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = json.loads(raw)
                    key = (intern(line["dataset"]), line["task_id"], line["attempt"])
                    if line["schema"] != RECORD_SCHEMA or line["status"] not in _STATUSES:
                        raise ValueError(f"unknown schema {line['schema']!r} or status")
                    rows[key] = IndexRow(
                        key,
                        line["digest"] if for_plan else "",
                        line["run_digest"] if for_plan else "",
                        intern(line["status"]),
                        line["score"],
                        line["duration"],
                        line["input_tokens"],
                        line["output_tokens"],
                        line["cost"],
                        tuple(map(intern, line["tags"])),
                        reasons.setdefault(line["reason"], line["reason"]),
                        line["phase"],
                        line["replay"] if for_plan else "",
                        line.get("crashes", 0),
                    )
                    if for_plan:
                        offsets[key] = tuple(line["record"])  # type: ignore[assignment]
                except (ValueError, KeyError, TypeError) as exc:
                    bad.append(Unreadable(f"{path}:{number}", f"{type(exc).__name__}: {exc}"))
        if for_plan:
            self._offsets[run_id] = offsets
        return list(rows.values()), bad

    def record(self, run_id: str, key: Key) -> AttemptRecord | None:
        """The full stored record of one attempt (None when missing or unreadable)."""
        if run_id not in self._offsets:
            self.index(run_id)
        where = self._offsets[run_id].get(key)
        if where is None:
            return None
        try:
            with (self.runs_dir / run_id / "records.jsonl").open("rb") as f:
                f.seek(where[0])
                return AttemptRecord.from_json(json.loads(f.read(where[1])))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def records(self, run_id: str) -> Iterator[AttemptRecord]:
        """Every stored attempt's full record (the newest of each)."""
        rows, _ = self.index(run_id)
        for row in rows:
            record = self.record(run_id, row.key)
            if record is not None:
                yield record


_STATUSES = frozenset({"pass", "fail", "error"})


class _RunFiles:
    """The open, append-only files of the run this session writes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock_fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        self._index_fd = self._records_fd = -1
        self._records_end = 0

    def lock(self) -> bool:
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._index_fd = _open_append(self.folder / "index.jsonl")
        self._records_fd = _open_append(self.folder / "records.jsonl")
        self._records_end = os.lseek(self._records_fd, 0, os.SEEK_END)
        return True

    def append_record(self, text: str) -> tuple[int, int]:
        data = text.encode("utf-8") + b"\n"
        offset = self._records_end
        _write_all(self._records_fd, data)
        self._records_end += len(data)
        return offset, len(data) - 1

    def append_index(self, text: str) -> None:
        _write_all(self._index_fd, text.encode("utf-8") + b"\n")

    def close(self) -> None:
        for fd in (self._index_fd, self._records_fd, self._lock_fd):
            if fd >= 0:
                os.close(fd)
        self._index_fd = self._records_fd = self._lock_fd = -1


def _open_append(path: Path) -> int:
    """Open for appending; a torn last line (power loss) is ended so it cannot swallow the next."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    size = os.lseek(fd, 0, os.SEEK_END)
    if size and os.pread(fd, 1, size - 1) != b"\n":
        _write_all(fd, b"\n")
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _locked(folder: Path) -> bool:
    """Whether some process holds the run's lock (it is running right now)."""
    try:
        fd = os.open(folder / "lock", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def dataset_key(datasets: list[dict[str, str]]) -> str:
    return "+".join(sorted(d["name"] for d in datasets))


def _major(schema: str) -> int:
    try:
        return int(schema.rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return 0
