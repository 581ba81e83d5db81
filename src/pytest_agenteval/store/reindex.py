"""Re-indexing records.jsonl when index.jsonl and the records disagree (store damage).

Records are self-describing: each line of records.jsonl is a whole attempt, and its index line
is computed from it. So when the index is damaged (a cut, a garbled line) or no longer points
at the records (bytes inserted or lost in records.jsonl), the records are read line by line,
garbage skipped up to the next line that reads as a record, and every attempt whose record is
intact keeps its verdict and its output: nothing that was paid for runs again.

This is the damage path only: a sound run is recognised by one `stat` and one record read (its
newest record lies at the end of records.jsonl, where the index says).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..core.identity import AttemptId
from ..core.model import RECORD_SCHEMA
from ..core.records import AttemptRecord, index_entry, placed, to_json_text
from ..core.text import excerpt
from .index import UNREADABLE_ERRORS, IndexRead, IndexRow, parse_line
from .problems import OUTPUT_LOST, REINDEXED, StoreProblem

LOST_RECORD = "what it held is lost; an attempt whose verdict index.jsonl keeps still counts"


@dataclass
class Reindexed(IndexRead):
    """An index read corrected by the records: rows, their places, the damage, and the index
    lines that would make index.jsonl say so (appended by the session that owns the run)."""

    lines: list[str] = field(default_factory=list)
    attempts: int = 0
    """How many attempts `lines` re-index (the last line may repeat one, to close the index)."""
    records_problems: list[StoreProblem] = field(default_factory=list)
    """Damage in records.jsonl: lines that are not records, a file cut short."""


def consistent(read: IndexRead, records: BinaryIO | None) -> bool:
    """Whether the index and records.jsonl agree, checked cheaply: no damaged index line,
    and the newest indexed record is whole and ends the file (records after it, or a file
    shorter than the index says, mean one of the two lost something)."""
    if read.problems:
        return False
    size = os.fstat(records.fileno()).st_size if records is not None else 0
    if read.newest is None:
        return size == 0
    key, (offset, length) = read.newest
    if offset + length + 1 != size:
        return False
    assert records is not None
    records.seek(offset)
    return record_of(records.read(length), key)[0] is not None


def record_of(data: bytes, key: AttemptId | None = None) -> tuple[AttemptRecord | None, str | None]:
    """The record stored in `data` (one line, of attempt `key` when given), or why not."""
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return None, f"not complete JSON ({exc})"
    if not isinstance(parsed, dict) or parsed.get("schema") != RECORD_SCHEMA:
        return None, f"not an {RECORD_SCHEMA} record"
    if key is not None and AttemptId.of_fields(parsed) != key:
        return None, "another attempt's record"
    try:
        return AttemptRecord.from_json(parsed), None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"fields of the wrong shape ({type(exc).__name__}: {exc})"


def reindex(read: IndexRead, index: Path, records: Path, opened: BinaryIO | None) -> Reindexed:
    """The index `read` corrected by every intact record of records.jsonl (`opened`).

    Per attempt the newer of its index line and its newest intact record wins (records and
    index lines are written in the same order, so a record at or past the place its index
    line names is that one or a newer one). An attempt whose newest index line is damaged
    takes only a record written after the line before it: never an older verdict.
    """
    starts = {offset: key for key, (offset, _) in read.offsets.items()}
    found, problems = _scan(opened, records, starts) if opened is not None else ({}, [])
    fixed = Reindexed(dict(read.rows), dict(read.offsets))
    floors = read.damage.floors if read.damage else {}
    gone = read.damage.lines.keys() if read.damage else set()
    lost_lines, moved, taken = 0, 0, ""
    for key, (row, where, line) in sorted(found.items(), key=lambda item: item[1][1]):
        old = read.rows.get(key)
        if (old is None and key in gone and where[0] < floors.get(key, 0)) or (
            old is not None and where[0] < read.offsets.get(key, (0, 0))[0] and row != old
        ):
            continue  # an older verdict than the index's
        fixed.rows[key], fixed.offsets[key], taken = row, where, line
        if read.offsets.get(key) != where:
            fixed.lines.append(line)
            lost_lines += old is None and key not in gone
            moved += old is not None
    fixed.attempts = len(fixed.lines)
    if fixed.lines and fixed.lines[-1] != taken:
        fixed.lines.append(taken)  # the newest line names the last record, as a sound index's
    damage = read.damage
    unnamed = damage is not None and None in damage.lines  # lines that do not say whose
    reindexed: set[AttemptId | None] = {*fixed.rows, *([None] if unnamed and lost_lines else [])}
    fixed.problems = damage.problems(reindexed, REINDEXED) if damage else []
    size = os.fstat(opened.fileno()).st_size if opened is not None else 0
    fixed.records_problems = problems + _beyond(fixed, records, size)
    if lost_lines and not unnamed:
        fixed.problems.append(
            StoreProblem(
                str(index),
                f"has no line for {lost_lines} attempts records.jsonl holds",
                "re-indexed from their intact records: nothing runs again",
            )
        )
    if moved:
        fixed.problems.append(
            StoreProblem(
                str(index),
                f"names the wrong place in records.jsonl for {moved} attempts",
                "re-indexed from where their intact records are: nothing runs again",
            )
        )
    return fixed


def _scan(
    f: BinaryIO, path: Path, starts: dict[int, AttemptId]
) -> tuple[dict[AttemptId, tuple[IndexRow, tuple[int, int], str]], list[StoreProblem]]:
    """The newest intact record of each attempt (its row, place and index line), and the lines
    of records.jsonl that are not records (named by the attempt whose index line points at
    them, in `starts`, if any: its verdict still counts)."""
    found: dict[AttemptId, tuple[IndexRow, tuple[int, int], str]] = {}
    problems: list[StoreProblem] = []
    reasons: dict[str, str] = {}
    f.seek(0)
    offset = 0
    for number, raw in enumerate(f, 1):
        data = raw.rstrip(b"\n")
        record, problem = record_of(data) if data.strip() else (None, None)
        if record is not None:
            line = placed(to_json_text(index_entry(record)), offset, len(data))
            try:
                row, where = parse_line(line.encode(), reasons, True)
            except UNREADABLE_ERRORS:
                problem = "a record that makes no valid index line"
            else:
                found[row.key] = (row, where, line)
        if problem and raw.endswith(b"\n"):  # an unended last line: see _beyond
            problems.append(_not_a_record(f"{path}:{number}", problem, data, starts.get(offset)))
        offset += len(raw)
    return found, problems


def _not_a_record(where: str, problem: str, data: bytes, key: AttemptId | None) -> StoreProblem:
    if key is None:
        return StoreProblem(where, f"{problem}: {_shown(data)}", LOST_RECORD)
    return StoreProblem(
        where, f"the record of {key.task_id} attempt {key.attempt} is {problem}", OUTPUT_LOST
    )


def _beyond(read: IndexRead, path: Path, size: int) -> list[StoreProblem]:
    """records.jsonl cut short: the attempts whose records lay past its end."""
    lost = sum(1 for offset, length in read.offsets.values() if offset + length > size)
    if not lost:
        return []
    problem = (
        f"the file ends at byte {size}, but the records of {lost} stored attempts lie "
        "beyond it (it was cut short)"
    )
    return [StoreProblem(str(path), problem, OUTPUT_LOST)]


def _shown(data: bytes) -> str:
    return excerpt(data.decode("utf-8", errors="replace"), 60)
