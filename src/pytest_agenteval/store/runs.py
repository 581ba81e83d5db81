"""The run store: append-only files per run in the pytest cache dir, written by the controller.

    <cache_dir>/agenteval/runs/<run_id>/
        run.json        what the run is (datasets, agent, planned, status); replaced atomically
        index.jsonl     one small line per committed attempt: what planning and metrics read
        records.jsonl   one line per full record (outputs, transcripts), found by offset
        lock            held (flock) by the pytest session that is running the run
        artifacts/      the files attempts' agents changed, kept per attempt (store/artifacts.py)

Committing an attempt appends its record, then its index line: two `write()`s, no rewriting,
O(1) whatever the run's size. The index line is the commit point. A kill -9 cannot tear a
`write()` to a regular file, so every committed attempt survives it; after a power loss a torn
last line is reported as unreadable and that attempt runs again. The newest line of a key wins;
a replaced record is kept in its successor's `previous`.

Damage is never fatal and never silent: what cannot be read is left out and listed in
`Store.problems`; a failed read or write of the file system is a `StoreError` naming the path
and the errno. No message advises deleting data: `agenteval repair` rebuilds a lost run.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import StoreError, os_failure
from ..core.identity import AttemptId
from ..core.model import RECORD_SCHEMA
from ..core.records import AttemptRecord, index_entry, placed, to_json_text
from . import artifacts
from .artifacts import ARTIFACTS
from .files import (
    RUN_JSON_LIMIT,
    RunFiles,
    has_attempts,
    line_number,
    locked,
    open_regular,
    read_at,
    running_note,
    write_json,
)
from .index import IndexRead, IndexRow, read_index, row_of
from .problems import OUTPUT_LOST, RUN_SKIPPED, StoreProblem
from .reindex import Reindexed, consistent, reindex
from .sessions import SessionEntry, read_session

__all__ = [
    "IndexRow",
    "RunFileError",
    "RunInfo",
    "Store",
    "StoreProblem",
    "Unreadable",
    "new_run_id",
]

RUN_SCHEMA = "agenteval.run/1"

Unreadable = StoreProblem
"""The former name of a store problem (an unreadable index line)."""


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
    died_running: str | None = None
    """The attempt whose agent a dead session started last and that has no record, as the
    run's index tells (without `count`: the raw note, for `unfinished` to judge)."""
    narrowed_by: str | None = None
    """What narrowed the run to part of its datasets (-k, -m, paths...); None for a whole run."""
    shard: str | None = None
    """`I/N` for a run of one shard of its datasets; None for a run of all of them."""
    merged_from: list[dict[str, Any]] | None = None
    """For a run `agenteval merge` wrote: the shard runs it holds (run id, shard, status)."""
    variants: list[str] | None = None
    """The variants the run's last session selected, in the manifest's order (the reference
    first); None for a run without `variants:`."""
    reference: str | None = None
    """The variant the others are compared with; None without variants."""

    @property
    def last_session(self) -> SessionEntry:
        """How the run's last session ended (an empty entry for a run no session ended)."""
        return read_session(self.sessions[-1]) if self.sessions else SessionEntry()


class RunFileError(StoreError):
    """A run.json that cannot be used: damaged or missing (`repairable`), or of a newer version."""

    def __init__(self, path: Path, problem: str, *, repairable: bool = True) -> None:
        self.path = path
        self.problem = problem
        self.repairable = repairable
        remedy = (
            f"; `agenteval repair {path.parent.name}` rebuilds it from the run's stored attempts"
        )
        self.detail = problem + (remedy if repairable else "")  # what is wrong, what to do
        super().__init__(f"{path} {self.detail}")


def new_run_id() -> str:
    return secrets.token_hex(4)


class Store:
    """Runs below `root` (`<cache_dir>/agenteval`); without a cache dir, a temporary folder."""

    def __init__(self, root: Path | None, *, runs_dir: Path | None = None) -> None:
        """`runs_dir`: the folder of run folders, when it is not `root/runs` (an unpacked CI
        artifact that `agenteval merge` reads)."""
        self.temporary = root is None
        self.root = Path(tempfile.mkdtemp(prefix="agenteval-store-")) if root is None else root
        self.runs_dir = runs_dir or self.root / "runs"
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(os_failure("create", self.runs_dir, exc)) from None
        self._problems: dict[str, StoreProblem] = {}
        self._open: dict[str, RunFiles] = {}
        self._offsets: dict[str, dict[AttemptId, tuple[int, int]]] = {}
        self._held: dict[str, dict[AttemptId, IndexRow]] = {}
        self._reindexed: dict[str, tuple[int, list[str], int]] = {}
        """Index lines re-indexed from records.jsonl, not yet appended (with the index's size
        when they were made, and how many attempts they re-index)."""
        self._artifacts: dict[str, bool] = {}
        """Whether each run written or read holds artifacts (`has_artifacts`)."""
        self._checked: set[str] = set()
        """Runs whose records.jsonl this store has re-indexed (done at most once on a miss)."""
        """Rows of the runs this session writes, kept as it commits (`hold`)."""

    @property
    def problems(self) -> list[StoreProblem]:
        """Every damaged place this store has come across, each once, in the order found."""
        return list(self._problems.values())

    def found(self, problems: Iterable[StoreProblem]) -> None:
        """Note damage; a place read twice keeps its first description."""
        for problem in problems:
            self._problems.setdefault(problem.where, problem)

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
        self,
        run_id: str,
        datasets: list[dict[str, str]],
        agent: dict[str, Any],
        *,
        shard: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Start a run (`shard`: the `I/N` it runs; `extra`: more run.json fields) and claim it."""
        folder = self.runs_dir / run_id
        try:
            folder.mkdir()
        except FileExistsError:
            raise StoreError(
                f"run {run_id!r} exists already; add --resume-suite to continue it"
            ) from None
        except OSError as exc:
            raise StoreError(os_failure("create", folder, exc)) from None
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
            **({"shard": shard} if shard else {}),
            **(extra or {}),
        }
        try:
            write_json(folder / "run.json", meta)
        except StoreError:
            with contextlib.suppress(OSError):
                folder.rmdir()  # still empty: no half-made run is left behind
            raise
        self.claim_run(run_id)

    def latest_run(self, datasets: list[dict[str, str]], shard: str | None = None) -> str | None:
        """The most recently used run of exactly these datasets that was started on all of
        them: a narrowed run (`-k`, `-m`, a path inside a dataset...) or one with nothing
        planned is resumed only by its id, so it can never take a whole run's place. A shard's
        runs are apart from the others: shard 2/4 continues only a run of shard 2/4.

        A damaged run that may be more recent is never passed over in silence: that raises a
        StoreError naming the run and how to repair it.
        """
        wanted = dataset_key(datasets)
        best: tuple[float, str] | None = None
        damaged: list[tuple[str, StoreError]] = []
        for run_id, meta in self._scan():
            if isinstance(meta, StoreError):
                damaged.append((run_id, meta))
            elif (
                meta["dataset_key"] == wanted
                and meta.get("shard") == shard
                and not meta.get("narrowed")
                and meta["planned"]
                and (best is None or meta["updated_at"] > best[0])
            ):
                best = (meta["updated_at"], run_id)
        for run_id, error in damaged:
            used = self._last_used(run_id, wanted)
            if used is not None and (best is None or used > best[0]):
                raise StoreError(
                    f"the latest run of {wanted} may be run {run_id}, which cannot be read: "
                    f"{error}\nOr resume another run by its id: --agenteval-run-id ID "
                    "(`agenteval runs` lists them)"
                )
        return best[1] if best else None

    def _last_used(self, run_id: str, wanted: str) -> float | None:
        """When a damaged run last committed an attempt, if its attempts are of `wanted`."""
        path = self.runs_dir / run_id / "index.jsonl"
        try:
            rows = read_index(path, for_plan=False).rows
            names = {key.dataset for key in rows}
            return path.stat().st_mtime if names and names <= set(wanted.split("+")) else None
        except OSError:
            return None

    def _scan(self) -> Iterator[tuple[str, dict[str, Any] | StoreError]]:
        """Every run's run.json; a damaged one is listed in `problems` and given as its error."""
        for folder in sorted(self.runs_dir.iterdir()):
            if not folder.is_dir():
                continue
            try:
                meta = self._meta_or_none(folder.name)
            except StoreError as exc:
                where, problem = _split(exc, folder / "run.json")
                self.found([StoreProblem(where, problem, RUN_SKIPPED)])
                yield folder.name, exc
                continue
            if meta is not None:
                yield folder.name, meta

    def run(self, run_id: str, *, count: bool = False) -> RunInfo | None:
        """A run's description (`count`: also read its index to count finished attempts)."""
        meta = self._meta_or_none(run_id)
        if meta is None:
            return None
        rows = self.index(run_id, for_plan=False)[0] if count else []
        done = len(rows)
        status = meta["status"]
        died_running = None
        if status == "running" and not self.running(run_id):
            status = "interrupted"
            note = running_note(self.runs_dir / run_id)
            died_running = unfinished(note, rows) if count else note
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
            died_running,
            meta.get("narrowed_by") if meta.get("narrowed") else None,
            meta.get("shard"),
            meta.get("merged_from"),
            *_variants(meta),
        )

    def runs(self) -> list[RunInfo]:
        """Every readable run, most recently used first, with counts (damage in `problems`:
        a run whose index cannot be read at all is left out and named there)."""
        found = [self._counted(run_id) for run_id, meta in self._scan() if isinstance(meta, dict)]
        return sorted((r for r in found if r), key=lambda r: r.updated_at, reverse=True)

    def _counted(self, run_id: str) -> RunInfo | None:
        try:
            return self.run(run_id, count=True)
        except StoreError as exc:
            where, problem = _split(exc, self.runs_dir / run_id / "index.jsonl")
            self.found([StoreProblem(where, problem, RUN_SKIPPED)])
            return None

    def resolve(self, prefix: str) -> str:
        """The run whose id is `prefix`, or the only one starting with it (as git finds commits)."""
        names = sorted(p.name for p in self.runs_dir.iterdir() if p.is_dir())
        if prefix in names:
            return prefix
        matches = [name for name in names if name.startswith(prefix)] if prefix else []
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise StoreError(f"no run {prefix!r} in {self.runs_dir} (`agenteval runs` lists them)")
        raise StoreError(
            f"run id {prefix!r} is ambiguous; it starts {len(matches)} runs: {', '.join(matches)}"
        )

    def running(self, run_id: str) -> bool:
        """Whether a pytest session (this one or another) holds the run's lock right now."""
        return run_id in self._open or locked(self.runs_dir / run_id) is not False

    def claim_run(self, run_id: str) -> None:
        """Take the run's lock for this session; refuse if another pytest process holds it."""
        if run_id in self._open:
            return
        files = RunFiles(self.runs_dir / run_id)
        if not files.lock():
            files.close()
            raise StoreError(f"run {run_id} is being run by another pytest process right now")
        self._open[run_id] = files
        self._update(run_id, status="running")
        self.save_reindexed(run_id)

    def note_running(self, run_id: str, key: AttemptId) -> None:
        """Name the attempt whose agent starts now; see RunInfo.died_running."""
        # json.dumps(key.to_json()), without an encoder per attempt
        variant = f", {_quoted(key.variant)}" if key.variant is not None else ""
        self._open[run_id].note_running(
            f"[{_quoted(key.dataset)}, {_quoted(key.task_id)}, {key.attempt:d}{variant}]"
        )

    def set_agent(self, run_id: str, agent: dict[str, Any]) -> None:
        """Replace the run's agent fingerprint (while it has no records, or to add variants)."""
        self._update(run_id, agent=agent)

    def set_variants(self, run_id: str, variants: list[str], reference: str) -> None:
        """The variants the run's session selected (the reference first), for a run with
        variants only: run.json of a run without them never names any."""
        self._update(run_id, variants=variants, reference=reference)

    def set_planned(self, run_id: str, planned: int, narrowed_by: str | None = None) -> None:
        """How many attempts the run plans, and whether it covers only part of its datasets."""
        self._update(
            run_id, planned=planned, narrowed=narrowed_by is not None, narrowed_by=narrowed_by
        )

    def drop_run(self, run_id: str) -> None:
        """Remove a run this session created but never used: it selected nothing to run."""
        files = self._open.pop(run_id, None)
        if files is not None:
            files.close()
        shutil.rmtree(self.runs_dir / run_id, ignore_errors=True)

    def release_run(self, run_id: str, status: str) -> None:
        """Give the run back as it was (its status), recording no session: this session
        never began (a usage error before the first attempt)."""
        try:
            self._update(run_id, status=status)
        finally:
            files = self._open.pop(run_id, None)
            if files is not None:
                files.close()

    def finish_run(
        self, run_id: str, status: str, session: SessionEntry | Mapping[str, Any]
    ) -> None:
        """Record how the session ended and release the run, also when run.json cannot be
        written (the run then reads as interrupted: nobody holds its lock)."""
        try:
            meta = self._meta(run_id)
            entry = session.to_json() if isinstance(session, SessionEntry) else dict(session)
            self._update(run_id, status=status, sessions=[*meta["sessions"], entry])
        finally:
            files = self._open.pop(run_id, None)
            if files is not None:
                with contextlib.suppress(StoreError):
                    files.note_running("")
                files.close()

    def _update(self, run_id: str, **changes: Any) -> None:
        meta = {**self._meta(run_id), **changes, "updated_at": time.time()}
        write_json(self.runs_dir / run_id / "run.json", meta)

    def _meta(self, run_id: str) -> dict[str, Any]:
        path = self.runs_dir / run_id / "run.json"
        try:
            with open_regular(path, RUN_JSON_LIMIT) as f:
                meta: dict[str, Any] = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            raise RunFileError(path, "is missing, but the run has stored attempts") from None
        except OSError as exc:
            raise StoreError(os_failure("read", path, exc)) from None
        except (ValueError, RecursionError) as exc:
            raise RunFileError(path, f"is unreadable ({exc})") from None
        problem = _meta_problem(meta)
        if problem:
            raise RunFileError(path, problem)
        if _major(meta["schema"]) > _major(RUN_SCHEMA):
            raise RunFileError(
                path,
                f"was written by a newer pytest-agenteval ({meta['schema']}); "
                "upgrade pytest-agenteval or use another cache_dir",
                repairable=False,
            )
        return meta

    def _meta_or_none(self, run_id: str) -> dict[str, Any] | None:
        """The run's run.json, None when there is no such run; a run whose run.json is missing
        but whose attempts are stored is damaged, not absent."""
        folder = self.runs_dir / run_id
        if not (folder / "run.json").exists() and not has_attempts(folder):
            return None
        return self._meta(run_id)

    # --- attempts -------------------------------------------------------------------------

    def commit(
        self, run_id: str, record: AttemptRecord, *, replaces: bool = False
    ) -> tuple[str, IndexRow]:
        """Store one finished attempt durably; keep the record it replaces as history.

        Returns the JSON stored and its index row. A failed write raises StoreError (path and
        errno) and leaves no torn line behind.
        """
        if replaces:
            old = self.record(run_id, record.key)
            if old is not None:
                record = record.replacing(old)
        text = record.to_text()
        entry = index_entry(record)
        row = row_of(entry)
        self.append(run_id, text, to_json_text(entry), row)
        return text, row

    def append(self, run_id: str, text: str, entry: str, row: IndexRow) -> None:
        """Store a new attempt's record JSON and its index entry's (as they came on a report:
        neither is parsed or encoded again here); `row` is what the entry reads as."""
        files = self._open[run_id]
        offset, length = files.append_record(text)
        files.append_index(placed(entry, offset, length))
        held = self._held.get(run_id)
        if held is not None:
            held[row.key] = row
        offsets = self._offsets.get(run_id)  # loaded only once a plan or a replace needed it
        if offsets is not None:
            offsets[row.key] = (offset, length)

    def keep_artifacts(self, run_id: str, key: AttemptId, files: Mapping[str, bytes]) -> None:
        """Replace the attempt's artifacts with `files` (`store/artifacts.py`), before its new
        record is committed; raises StoreError."""
        artifacts.replace(self.runs_dir / run_id, key, files)
        if files:
            self._artifacts[run_id] = True

    def has_artifacts(self, run_id: str) -> bool:
        """Whether the run keeps any attempt's artifacts (looked up once per run): only then
        does a new record need to clear its attempt's folder."""
        found = self._artifacts.get(run_id)
        if found is None:
            found = self._artifacts[run_id] = (self.runs_dir / run_id / ARTIFACTS).is_dir()
        return found

    def hold(self, run_id: str, rows: Iterable[IndexRow]) -> None:
        """Keep `run_id`'s rows (as its index reads now) up to date as this session commits,
        so its summary need not read the index back; this session must be its one writer."""
        self._held[run_id] = {row.key: row for row in rows}

    def rows(self, run_id: str) -> list[IndexRow]:
        """The newest row of every stored attempt, as metrics read them: the held rows, else
        the index read back."""
        held = self._held.get(run_id)
        if held is not None:
            return list(held.values())
        return self.index(run_id, for_plan=False)[0]

    def index(
        self, run_id: str, *, for_plan: bool = True, check: bool = False
    ) -> tuple[list[IndexRow], list[StoreProblem]]:
        """The newest readable line of every stored attempt; damaged lines apart (and in
        `problems`).

        Without `for_plan` the digests, replay data and record offsets are left out (metrics
        need none of them). When the index and records.jsonl disagree (checked cheaply at the
        end of records.jsonl; always with `check`), records.jsonl is re-indexed: attempts
        whose records are intact keep their verdicts and outputs, the others run again.
        """
        read = self._read(run_id, for_plan, check)
        self.found(read.problems)
        if isinstance(read, Reindexed):
            self.found(read.records_problems)
            self._offsets[run_id] = read.offsets
        elif for_plan:
            self._offsets[run_id] = read.offsets
        return list(read.rows.values()), read.problems

    def _read(self, run_id: str, for_plan: bool, check: bool) -> IndexRead:
        folder = self.runs_dir / run_id
        path, records = folder / "index.jsonl", folder / "records.jsonl"
        read = _read_index(path, for_plan)
        with contextlib.ExitStack() as stack:
            try:
                opened: BinaryIO | None = stack.enter_context(open_regular(records))
            except FileNotFoundError:
                opened = None
            except OSError as exc:
                raise StoreError(os_failure("read", records, exc)) from None
            unsaved = run_id in self._reindexed  # re-indexed before: the index still misses it
            if not (check or unsaved) and consistent(read, opened):
                return read
            if not for_plan:
                read = _read_index(path, True)
            fixed = reindex(read, path, records, opened)
        self._checked.add(run_id)
        if fixed.lines:
            self._reindexed[run_id] = (_size(path), fixed.lines, fixed.attempts)
            if run_id in self._open:  # this session writes the run: say so in its index now
                self.save_reindexed(run_id)
        return fixed

    def save_reindexed(self, run_id: str) -> int:
        """Append the index lines the last read re-indexed from records.jsonl, so later reads
        find those attempts without re-indexing; returns how many. Only while this session
        holds the run (or nobody does), and only if index.jsonl did not change since."""
        size, lines, attempts = self._reindexed.pop(run_id, (-1, [], 0))
        if not lines:
            return 0
        files = self._open.get(run_id)
        if files is not None:
            return _append_lines(files, lines, size, attempts)
        files = RunFiles(self.runs_dir / run_id)
        try:
            return _append_lines(files, lines, size, attempts) if files.lock() else 0
        finally:
            files.close()

    def record(self, run_id: str, key: AttemptId) -> AttemptRecord | None:
        """The full stored record of one attempt (None when missing or unreadable, which is
        reported in `problems`)."""
        if run_id not in self._offsets:
            self.index(run_id)
        where = self._offsets[run_id].get(key)
        if where is None:
            return None
        checked = run_id in self._checked
        record = self._read_record(run_id, key, where, report=checked)
        if record is None and not checked:  # the index may point elsewhere: re-index once
            self.index(run_id, check=True)
            where = self._offsets[run_id].get(key)
            record = None if where is None else self._read_record(run_id, key, where)
        return record

    def _read_record(
        self,
        run_id: str,
        key: AttemptId,
        where: tuple[int, int],
        opened: BinaryIO | None = None,
        *,
        report: bool = True,
    ) -> AttemptRecord | None:
        """The record at `where` in records.jsonl (read from `opened` when given)."""
        try:
            if opened is None:
                with open_regular(self._records_path(run_id)) as f:
                    data = read_at(f, where)
            else:
                data = read_at(opened, where)
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            raise StoreError(os_failure("read", self._records_path(run_id), exc)) from None
        record, problem = parse_record(data, key)
        if problem and report:
            path = self._records_path(run_id)
            line = line_number(path, where[0])
            self.found(
                [StoreProblem(f"{path}:{line}" if line else str(path), problem, OUTPUT_LOST)]
            )
        return record

    def _records_path(self, run_id: str) -> Path:
        return self.runs_dir / run_id / "records.jsonl"

    def records(self, run_id: str) -> Iterator[AttemptRecord]:
        """Every stored attempt's full record (the newest of each); those not where the index
        says are looked for once more after re-indexing records.jsonl."""
        rows, _ = self.index(run_id)
        offsets = self._offsets[run_id]
        checked = run_id in self._checked
        missed = []
        with contextlib.ExitStack() as stack:
            opened = None
            with contextlib.suppress(FileNotFoundError):  # open once, not once per record
                opened = stack.enter_context(open_regular(self._records_path(run_id)))
            for row in rows:
                where = offsets.get(row.key)
                record = (
                    None
                    if where is None
                    else self._read_record(run_id, row.key, where, opened, report=checked)
                )
                if record is not None:
                    yield record
                elif where is not None:
                    missed.append(row.key)
        if missed and not checked:
            self.index(run_id, check=True)
            yield from filter(None, map(partial(self.record, run_id), missed))


def _read_index(path: Path, for_plan: bool) -> IndexRead:
    try:
        return read_index(path, for_plan=for_plan)
    except FileNotFoundError:
        return IndexRead()
    except OSError as exc:
        raise StoreError(os_failure("read", path, exc)) from None


def _append_lines(files: RunFiles, lines: list[str], size: int, attempts: int) -> int:
    """Append re-indexed lines if the index is as it was read (`size`, once its torn last
    line, if any, is ended as opening it for appending does); returns `attempts` or 0."""
    if _size(files.folder / "index.jsonl") != size:
        return 0
    for line in lines:
        files.append_index(line)
    return attempts


def _size(path: Path) -> int:
    """The size of an index once opened for appending (a torn last line gets its end)."""
    try:
        with open_regular(path) as f:
            end = f.seek(0, os.SEEK_END)
            return end + (end > 0 and os.pread(f.fileno(), 1, end - 1) != b"\n")
    except FileNotFoundError:
        return 0  # opening it for appending creates it empty
    except OSError:
        return -1


_quoted = encode_basestring
"""A str as a JSON string (json's own C function)."""


def unfinished(note: str | None, rows: list[IndexRow]) -> str | None:
    """The attempt a dead session last started, unless it has a record (then it finished, and
    the session died somewhere else)."""
    try:
        key = AttemptId.from_json(json.loads(note or "null"))
    except (ValueError, TypeError):
        return None
    if any(row.key == key for row in rows):
        return None
    variant = key.variant
    of = f" of variant {variant}" if variant else ""
    return f"{key.task_id} [attempt {key.attempt}]{of} of {key.dataset}"


def parse_record(data: bytes, key: AttemptId) -> tuple[AttemptRecord | None, str | None]:
    """The stored record of attempt `key` from its bytes, or what is wrong with them."""
    what = f"the record of {key.task_id} attempt {key.attempt}"
    if not data:
        return None, f"{what} is missing (records.jsonl is shorter than the index says)"
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return None, f"{what} is not complete JSON ({exc})"
    if not isinstance(record, dict) or record.get("schema") != RECORD_SCHEMA:
        return None, f"{what} is not an {RECORD_SCHEMA} record"
    if AttemptId.of_fields(record) != key:
        return None, f"{what} is not where the index says (another attempt's record is there)"
    try:
        return AttemptRecord.from_json(record), None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"{what} has fields of the wrong shape ({type(exc).__name__}: {exc})"


_META_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (str,),
    "run_id": (str,),
    "datasets": (list,),
    "dataset_key": (str,),
    "agent": (dict,),
    "created_at": (int, float),
    "updated_at": (int, float),
    "planned": (int,),
    "status": (str,),
    "sessions": (list,),
}


def _variants(meta: dict[str, Any]) -> tuple[list[str] | None, str | None]:
    """run.json's `variants` and `reference`, when they are what a session writes (names);
    None and None otherwise (a run without variants, or a hand-edited file)."""
    names, reference = meta.get("variants"), meta.get("reference")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None, None
    return names, reference if isinstance(reference, str) else None


def _meta_problem(meta: Any) -> str | None:
    """What makes a parsed run.json unusable, if anything."""
    if not isinstance(meta, dict):
        return "is not a JSON object"
    for name, kinds in _META_FIELDS.items():
        if type(meta.get(name)) not in kinds:
            return f"has no valid {name!r}"
    datasets = meta["datasets"]
    if not all(isinstance(d, dict) and type(d.get("name")) is str for d in datasets):
        return "has no valid 'datasets'"
    if not all(isinstance(s, dict) for s in meta["sessions"]):
        return "has no valid 'sessions'"
    return None


def _split(exc: StoreError, default: Path) -> tuple[str, str]:
    """(where, problem) of a store error, for the problem list."""
    if isinstance(exc, RunFileError):
        return str(exc.path.parent), f"{exc.path.name} {exc.detail}"
    return str(default), str(exc)


def dataset_key(datasets: list[dict[str, str]]) -> str:
    return "+".join(sorted(d["name"] for d in datasets))


def _major(schema: str) -> int:
    try:
        return int(schema.rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return 0
