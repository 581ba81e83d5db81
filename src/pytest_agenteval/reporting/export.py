"""`agenteval export`: one row per stored attempt, as CSV or JSON Lines, for pandas and
spreadsheets."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from ..core.records import AttemptRecord
from ..core.text import printable
from ..core.trace import event_json, read_events, turns
from ..store.artifacts import Copied, copy_kept, kept_paths
from .show import reuse_of

COLUMNS = (
    "dataset",
    "task",
    "attempt",
    "status",
    "score",
    "input_tokens",
    "output_tokens",
    "cost",
    "agent_cost",
    "judge_cost",
    "duration",
    "tags",
    "reused",
    "turns",
    "tool_calls",
    "stopped",
)
"""`cost`: everything the attempt cost (agent + judges), split in `agent_cost` and
`judge_cost`; `reused`: "replayed" (recorded by an earlier session), "regraded", or empty;
`turns` and `tool_calls`: the model calls and tool calls of its trace (empty without one);
`stopped`: the attempt's own limit that ended its loop (`max_turns`, `budget`, `timeout`)."""
TRACE = "trace"
"""JSON Lines only: the attempt's typed trace events (null without a trace)."""


def columns(variants: bool, fmt: str = "csv") -> tuple[str, ...]:
    """The export's columns: with `variant` after `task` for a run with variants (empty for
    a task that names its own agent), else COLUMNS as ever; JSON Lines add `trace`."""
    found: tuple[str, ...] = COLUMNS
    if variants:
        at = COLUMNS.index("task") + 1
        found = (*COLUMNS[:at], "variant", *COLUMNS[at:])
    return (*found, TRACE) if fmt == "jsonl" else found


def attempt_row(record: AttemptRecord, earlier_until: float | None) -> dict[str, Any]:
    """One attempt as plain values; numbers stay numbers, a missing one is None."""
    return {
        "dataset": record.dataset,
        "task": record.task_id,
        "variant": record.variant,
        "attempt": record.attempt,
        "status": record.status,
        "score": record.score,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cost": record.spend,
        "agent_cost": record.cost,
        "judge_cost": record.judge_cost,
        "duration": record.duration,
        "tags": list(record.tags),
        "reused": reuse_of(record, earlier_until),
        **_trace_columns(record),
    }


def _trace_columns(record: AttemptRecord) -> dict[str, Any]:
    events = read_events(record.transcript)
    return {
        "turns": None if events is None else turns(events),
        "tool_calls": None if events is None else sum(1 for e in events if e.type == "tool_call"),
        "stopped": record.stopped,
        TRACE: None if events is None else [event_json(e) for e in events],
    }


def write_csv(rows: Iterable[dict[str, Any]], out: TextIO, names: tuple[str, ...] = COLUMNS) -> int:
    """A header, then a row per attempt; tags `;`-joined, a missing number an empty cell.

    Numbers are written unquoted (QUOTE_MINIMAL), so spreadsheets and pandas read them as
    numbers. Returns how many rows were written."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    count = 0
    for row in rows:
        values = {**row, "tags": ";".join(row["tags"])}
        writer.writerow(["" if values[c] is None else values[c] for c in names])
        count += 1
    return count


def write_jsonl(
    rows: Iterable[dict[str, Any]], out: TextIO, names: tuple[str, ...] = COLUMNS
) -> int:
    """One JSON object per line (tags a list, a missing number null); returns the count."""
    count = 0
    for row in rows:
        out.write(json.dumps({c: row[c] for c in names}, ensure_ascii=False) + "\n")
        count += 1
    return count


WRITERS = {"csv": write_csv, "jsonl": write_jsonl}


def write_artifacts(run_dir: Path, records: Iterable[AttemptRecord], out: Path) -> Copied:
    """Copy each attempt's kept artifacts (the regular files its record lists as kept) to
    `out/<dataset>/<task>[attempt-N]/` (the run store's layout); what was copied and what
    was skipped."""
    copied = Copied()
    for record in records:
        paths = kept_paths(record.changed_files)
        if paths:
            copied += copy_kept(run_dir, record.key, paths, out)
    return copied


def skipped_lines(copied: Copied) -> list[str]:
    """What a copy of artifacts skipped, one line per file, then how many (none: no line)."""
    if not copied.skipped:
        return []
    count = len(copied.skipped)
    return [
        *(printable(f"  skipped {line}") for line in copied.skipped),
        f"{count} artifact file{'s' if count > 1 else ''} not copied: only the regular files "
        "a record lists as kept, inside its attempt's folder, are copied",
    ]
