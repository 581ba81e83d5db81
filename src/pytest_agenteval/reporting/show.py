"""`agenteval show`: a stored run drilled down in the terminal, as lines of text.

A run: one line per task with its status counts. A task: one line per attempt. An attempt:
everything stored about it (output, each grader's verdict, error, transcript, usage, timing, and
whether the last session reused it).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.errors import AgentevalError
from ..core.records import AttemptRecord
from ..store.index import IndexRow
from ..store.runs import RunInfo

_ATTEMPT = re.compile(r"(.+)/(\d+)")


class ShowError(AgentevalError):
    """What `show` was asked for is not in the run."""


def split_target(target: str, task_ids: Iterable[str]) -> tuple[str, int | None]:
    """`TASK_ID` or `TASK_ID/ATTEMPT`. Task ids may hold `/` (and end in a number), so a whole
    task id wins; else the last `/N` is the attempt."""
    known = set(task_ids)
    if target in known:
        return target, None
    match = _ATTEMPT.fullmatch(target)
    if match and match[1] in known:
        return match[1], int(match[2])
    wanted = match[1] if match else target
    close = difflib.get_close_matches(wanted, sorted(known), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ShowError(f"no task {wanted!r} in this run{hint}")


def reuse_of(record: AttemptRecord, earlier_until: float | None) -> str:
    """ "replayed": recorded by an earlier session than the last (which replayed it, unless it
    left the task out); "regraded": a stored answer graded again (the agent was not called
    for it); "" otherwise."""
    if earlier_until is not None and record.started_at + record.duration <= earlier_until:
        return "replayed"
    return "regraded" if record.regraded else ""


def earlier_sessions_end(info: RunInfo) -> float | None:
    """When the session before the last one ended (None with a single session)."""
    finished = info.sessions if info.status == "running" else info.sessions[:-1]
    value = finished[-1].get("finished_at") if finished else None
    return float(value) if isinstance(value, (int, float)) else None


def run_lines(info: RunInfo, rows: Sequence[IndexRow]) -> list[str]:
    """The run's heading and one line per task: passed/attempts, fails, errors, id."""
    by_task: dict[tuple[str, str], list[IndexRow]] = {}
    for row in rows:
        by_task.setdefault(row.key[:2], []).append(row)
    datasets = "+".join(d["name"] for d in info.datasets)
    lines = [
        f"run {info.run_id} ({info.status}) · dataset {datasets} · {len(by_task)} tasks, "
        f"{len(rows)} attempts",
        f"{'passed':>8} {'fail':>5} {'error':>5}  task",
    ]
    several = len(info.datasets) > 1
    for (dataset, task_id), attempts in sorted(by_task.items()):
        counts = {s: sum(1 for a in attempts if a.status == s) for s in ("pass", "fail", "error")}
        name = f"{dataset}::{task_id}" if several else task_id
        lines.append(
            f"{counts['pass']:>4}/{len(attempts):<3} {counts['fail']:>5} {counts['error']:>5}"
            f"  {name}"
        )
    lines.append(
        f"show a task's attempts: agenteval show {info.run_id} TASK_ID; one attempt: TASK_ID/N"
    )
    return lines


def task_lines(task_id: str, rows: Sequence[IndexRow], run_id: str = "RUN") -> list[str]:
    """One line per attempt of the task: status, score, duration, tokens, cost, reason."""
    mine = sorted((r for r in rows if r.task_id == task_id), key=lambda r: r.key)
    passed = sum(1 for r in mine if r.status == "pass")
    lines = [f"task {task_id}: {passed}/{len(mine)} attempts passed"]
    for row in mine:
        usage = _usage(row.input_tokens, row.output_tokens, row.cost)
        lines.append(
            f"  {row.key[2]:>3}  {row.status:5}  score {_num(row.score)}  "
            f"{row.duration:.2f}s{usage}  {row.reason}"
        )
    lines.append(f"one attempt in full: agenteval show {run_id} {task_id}/N")
    return lines


def attempt_lines(record: AttemptRecord, reuse: str) -> list[str]:
    """Everything stored about one attempt, section by section."""
    lines = [
        f"task {record.task_id} attempt {record.attempt} ({record.dataset}): {record.status}"
        + (f" ({reuse})" if reuse else ""),
        f"score {_num(record.score)} · duration {record.duration:.3f}s"
        + _usage(record.input_tokens, record.output_tokens, record.cost),
        "",
        "output:",
        *_indented(record.output if record.output is not None else "(none)"),
        "",
        "graders:",
    ]
    for verdict in record.verdicts:
        mark = "pass" if verdict.passed else "FAIL"
        score = f" (score {_num(verdict.score)})" if verdict.score is not None else ""
        lines.append(f"  {mark} {verdict.grader}{score}: {verdict.reason}")
    if not record.verdicts:
        lines.append("  (none: the attempt ended before grading)")
    if record.error:
        where = f" in {record.phase}" if record.phase else ""
        kind = f" ({record.error_type})" if record.error_type else ""
        lines += ["", f"error{where}{kind}:", *_indented(record.error)]
    if record.transcript:
        lines += ["", "transcript:", *_transcript(record.transcript)]
    if record.usage:
        lines += ["", "usage: " + json.dumps(record.usage, ensure_ascii=False)]
    if record.previous:
        lines += ["", f"replaces {len(record.previous)} earlier record(s) of this attempt"]
    return lines


def _transcript(entries: list[Any]) -> list[str]:
    lines = []
    for entry in entries:
        if isinstance(entry, dict) and "content" in entry:
            role = entry.get("role", "?")
            lines.append(f"  [{role}]")
            content = entry["content"]
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            lines += _indented(text, "    ")
        else:
            lines.append("  " + json.dumps(entry, ensure_ascii=False))
    return lines


def _indented(text: str, prefix: str = "  ") -> list[str]:
    return [prefix + line for line in text.splitlines()] or [prefix]


def _usage(input_tokens: int | None, output_tokens: int | None, cost: float | None) -> str:
    parts = []
    if input_tokens is not None or output_tokens is not None:
        parts.append(f"tokens {input_tokens or 0} in / {output_tokens or 0} out")
    if cost is not None:
        parts.append(f"cost {cost:.4f}")
    return "".join(f" · {p}" for p in parts)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
