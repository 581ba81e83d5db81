"""`agenteval show`: a stored run drilled down in the terminal, as lines of text.

A run: one line per task with its status counts. A task: one line per attempt. An attempt:
everything stored about it (the task's input and `expected`, output, each grader's verdict and
reason — a judge's threshold, prompt and raw reply too —, error, transcript, usage, cost of the
agent and the judges, timing, and whether the last session reused it). Long inputs, expected
answers and judge texts are cut to SHOWN_LIMIT characters unless `--full` asks for all.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import AgentevalError
from ..core.model import Verdict
from ..core.records import AttemptRecord
from ..core.trace import read_event, render_event, turns
from ..store.artifacts import Refused, attempt_folder, kept_paths, open_kept
from ..store.index import IndexRow
from ..store.runs import RunInfo
from ..store.sessions import read_session

_ATTEMPT = re.compile(r"(.+)/(\d+)")
_PRINTED = re.compile(r"(.+?)\[([^\[\]]+)\](?:/(\d+))?")
"""The forms the terminal prints: `TASK[VARIANT]`, `TASK[VARIANT]/N`, and the item names
`TASK[attempt-N]` and `TASK[VARIANT-attempt-N]`."""
_ITEM = re.compile(r"(?:(.+)-)?attempt-(\d+)")
SHOWN_LIMIT = 1000
"""Characters of an input, `expected`, judge prompt or judge reply shown without `--full`."""


class ShowError(AgentevalError):
    """What `show` was asked for is not in the run."""


def split_target(
    target: str, task_ids: Iterable[str], variants: Sequence[str] = ()
) -> tuple[str, str | None, int | None]:
    """`TASK_ID`, `TASK_ID/ATTEMPT`, and in a run with variants `TASK_ID/VARIANT` and
    `TASK_ID/VARIANT/ATTEMPT`, as (task id, variant, attempt). Task ids may hold `/` (and end
    in a number), so a whole task id wins; else the last `/N` is the attempt. The forms the
    terminal prints (`TASK[VARIANT]/N`, `TASK[VARIANT-attempt-N]`) are read as the same."""
    known = set(task_ids)
    printed = _PRINTED.fullmatch(target)
    if target not in known and printed and printed[1] in known:
        item = _ITEM.fullmatch(printed[2])
        variant, number = (item[1], item[2]) if item else (printed[2], printed[3])
        if variant is not None:
            check_variant(variant, variants, "this run")
        return printed[1], variant, None if number is None else int(number)
    match = _ATTEMPT.fullmatch(target)
    head, attempt = (match[1], int(match[2])) if match else (target, None)
    for task_id, rest in ((target, None), (head, attempt)):
        if task_id in known:
            return task_id, None, rest
    for task_id, rest in ((target, None), (head, attempt)):
        task_id, _, variant = task_id.rpartition("/")
        if variant in variants and task_id in known:
            return task_id, variant, rest
    close = difflib.get_close_matches(head, sorted(known), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ShowError(f"no task {head!r} in this run{hint}")


def variant_names(info: RunInfo, rows: Iterable[IndexRow]) -> list[str]:
    """The run's variants: those its last session selected (the reference first), then any
    other its records hold, by name; empty for a run without variants."""
    chosen = list(info.variants or ())
    stored = {row.variant for row in rows if row.variant is not None}
    return chosen + sorted(stored - set(chosen))


def in_order(variants: Sequence[str]) -> Callable[[IndexRow | AttemptRecord], tuple[Any, ...]]:
    """A sort key of attempts: by dataset, task and attempt, then variant in the run's order
    (an attempt without variant first)."""
    rank = {name: i for i, name in enumerate(variants)}

    def key(attempt: IndexRow | AttemptRecord) -> tuple[Any, ...]:
        variant = attempt.variant
        place = -1 if variant is None else rank.get(variant, len(rank))
        return (attempt.dataset, attempt.task_id, attempt.key.attempt, place, variant or "")

    return key


def check_variant(name: str, variants: Sequence[str], run_id: str) -> str:
    """`name` when the run has that variant, else a ShowError listing the run's variants
    (`run_id` may be the words `this run`)."""
    if name in variants:
        return name
    run = run_id if run_id == "this run" else f"run {run_id}"
    if not variants:
        raise ShowError(f"{run} has no variants (its dataset names no `variants:`)")
    close = difflib.get_close_matches(name, variants, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listed = ", ".join(variants)
    raise ShowError(f"no variant {name!r} in {run}{hint}; its variants: {listed}")


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
    return read_session(finished[-1]).finished_at if finished else None


def run_lines(info: RunInfo, rows: Sequence[IndexRow]) -> list[str]:
    """The run's heading and one line per task (per task and variant in a run with variants):
    passed/attempts, fails, errors, variant, id."""
    by_task: dict[tuple[str, str, str | None], list[IndexRow]] = {}
    for row in rows:
        by_task.setdefault((row.dataset, row.task_id, row.variant), []).append(row)
    variants = variant_names(info, rows)
    rank = {name: i for i, name in enumerate(variants)}
    width = max((len(v) for v in variants), default=0)
    datasets = "+".join(d["name"] for d in info.datasets)
    tasks = len({key[:2] for key in by_task})
    lines = [
        f"run {info.run_id} ({info.status}) · dataset {datasets} · {tasks} tasks, "
        f"{len(rows)} attempts" + (f" · variants {', '.join(variants)}" if variants else ""),
        f"{'passed':>8} {'fail':>5} {'error':>5}  "
        + (f"{'variant':{width}}  " if width else "")
        + "task",
    ]
    several = len(info.datasets) > 1
    order = sorted(by_task, key=lambda k: (k[0], k[1], rank.get(k[2], -1) if k[2] else -1))
    for dataset, task_id, variant in order:
        attempts = by_task[(dataset, task_id, variant)]
        counts = {s: sum(1 for a in attempts if a.status == s) for s in ("pass", "fail", "error")}
        name = f"{dataset}::{task_id}" if several else task_id
        column = f"{variant or '-':{width}}  " if width else ""
        lines.append(
            f"{counts['pass']:>4}/{len(attempts):<3} {counts['fail']:>5} {counts['error']:>5}"
            f"  {column}{name}"
        )
    one = "TASK_ID/N --variant NAME (or TASK_ID/VARIANT/N)" if variants else "TASK_ID/N"
    lines.append(
        f"show a task's attempts: agenteval show {info.run_id} TASK_ID; one attempt: {one}"
    )
    return lines


def task_lines(
    task_id: str, rows: Sequence[IndexRow], run_id: str = "RUN", variants: Sequence[str] = ()
) -> list[str]:
    """One line per attempt of the task: status, score, duration, tokens, cost, reason (and
    its variant, in a run with variants: the variants in the run's order)."""
    rank = {name: i for i, name in enumerate(variants)}
    mine = sorted(
        (r for r in rows if r.task_id == task_id),
        key=lambda r: (r.dataset, rank.get(r.variant, -1) if r.variant else -1, r.key.attempt),
    )
    passed = sum(1 for r in mine if r.status == "pass")
    shown = sorted({r.variant for r in mine if r.variant}, key=lambda v: rank.get(v, -1))
    width = max((len(v) for v in shown), default=0)
    lines = [
        f"task {task_id}: {passed}/{len(mine)} attempts passed"
        + (f" (variant {', '.join(shown)})" if shown else "")
    ]
    for row in mine:
        usage = _usage(row.input_tokens, row.output_tokens, row.spend)
        column = f"  {row.variant or '-':{width}}" if width else ""
        lines.append(
            f"  {row.key.attempt:>3}{column}  {row.status:5}  score {_num(row.score)}  "
            f"{row.duration:.2f}s{usage}  {row.reason}"
        )
    if shown:
        lines.append(f"one attempt in full: agenteval show {run_id} {task_id}/VARIANT/N")
    else:
        lines.append(f"one attempt in full: agenteval show {run_id} {task_id}/N")
    return lines


def _sandbox_lines(record: AttemptRecord) -> list[str]:
    """The sandbox an attempt ran in (its kind's description; an older record's Docker
    image), and what it captured inside."""
    lines = [f"sandbox image {record.image}"] if record.image else []
    described = dict(record.sandbox or {})
    kind = described.pop("kind", None)
    if kind == "docker" and list(described) == ["image"]:
        lines.append(f"sandbox image {described['image']}")
    elif kind is not None:
        facts = ", ".join(f"{name} {value}" for name, value in described.items())
        lines.append(f"sandbox {kind}" + (f": {facts}" if facts else ""))
    for name, value in (record.environment or {}).items():
        lines.append(f"environment {name}: {value}")
    return lines


def attempt_lines(record: AttemptRecord, reuse: str, full: bool = False) -> list[str]:
    """Everything stored about one attempt, section by section; long texts cut unless `full`."""
    cut = _Cut(full)
    asked = "(not kept)" if record.task_input is None else cut(_text(record.task_input))
    lines = [
        f"task {record.task_id} attempt {record.attempt} ({record.dataset}"
        + (f", variant {record.variant}" if record.variant else "")
        + f"): {record.status}"
        + (f" ({reuse})" if reuse else ""),
        f"score {_num(record.score)} · duration {record.duration:.3f}s"
        + (f" (after {record.wait:.3f}s waiting for a slot)" if record.wait else "")
        + _usage(record.input_tokens, record.output_tokens, record.spend)
        + _split(record),
        *(
            [f"stopped at its {record.stopped} (graded on what it produced)"]
            if record.stopped
            else []
        ),
        *_timing_lines(record),
        *_sandbox_lines(record),
        "",
        "input:",
        *_indented(asked),
    ]
    if record.expected is not None:
        lines += ["", "expected:", *_indented(cut(_text(record.expected)))]
    lines += [
        "",
        "output:",
        *_indented(record.output if record.output is not None else "(none)"),
        "",
        "graders:",
    ]
    for verdict in record.verdicts:
        lines += _verdict_lines(verdict, cut)
    if not record.verdicts:
        lines.append("  (none: the attempt ended before grading)")
    if record.error:
        where = f" in {record.phase}" if record.phase else ""
        named = [n for n in (record.error_class, record.error_type) if n]
        kind = f" ({', '.join(dict.fromkeys(named))})" if named else ""
        lines += ["", f"error{where}{kind}:", *_indented(record.error)]
    if record.transcript:
        lines += ["", *_trace_lines(record.transcript, cut)]
    if record.usage:
        lines += ["", "usage: " + json.dumps(record.usage, ensure_ascii=False)]
    if record.previous:
        lines += ["", f"replaces {len(record.previous)} earlier record(s) of this attempt"]
    if cut.count:
        lines += ["", f"{cut.count} text(s) cut to {SHOWN_LIMIT} characters; --full shows all"]
    return lines


def artifact_lines(record: AttemptRecord, run_dir: Path) -> list[str]:
    """The files the attempt's agent changed (path, change, size, kept) and where the kept
    ones are (no folder when none was kept: deletions keep nothing); nothing for an attempt
    that keeps no artifacts. A kept file whose stored path names no regular file inside the
    attempt's folder (`open_kept` refuses it) says so."""
    if record.changed_files is None:
        return []
    if not record.changed_files:
        return ["", "files changed: none"]
    kept = kept_paths(record.changed_files)
    listed = sum(1 for f in record.changed_files if "note" not in f)
    folder = attempt_folder(run_dir, record.key)
    where = f"{len(kept)} kept in {folder}" if kept else "none kept"  # no folder was made
    lines = ["", f"files changed: {listed}, {where}"]
    for entry in record.changed_files:
        if "note" in entry:
            lines.append(f"  ({entry['note']})")
            continue
        size = "" if entry["change"] == "deleted" else f"{entry['size']:,} B"
        note = "" if entry["kept"] or entry["change"] == "deleted" else "  (not kept)"
        if entry["path"] in kept:
            note = _refused(run_dir, record, entry["path"])
        lines.append(f"  {entry['change']:8} {size:>12}  {entry['path']}{note}")
    return lines


def _refused(run_dir: Path, record: AttemptRecord, path: str) -> str:
    """Nothing for a kept file that `open_kept` opens (or that is lost); why, for one refused."""
    try:
        open_kept(run_dir, record.key, path).close()
    except Refused as exc:
        return f"  (REFUSED, not read: {exc.why})"
    except OSError:
        pass
    return ""


class _Cut:
    """Cuts long texts to SHOWN_LIMIT (unless `full`), counting the texts it cut."""

    def __init__(self, full: bool) -> None:
        self.full, self.count = full, 0

    def __call__(self, text: str) -> str:
        if self.full or len(text) <= SHOWN_LIMIT:
            return text
        self.count += 1
        return text[:SHOWN_LIMIT] + f"… [{len(text) - SHOWN_LIMIT:,} more characters]"


def _verdict_lines(verdict: Verdict, cut: _Cut) -> list[str]:
    """A grader's verdict and reason; a judge's threshold, model, cost, prompt and reply."""
    mark = "pass" if verdict.passed else "FAIL"
    score = f" (score {_num(verdict.score)})" if verdict.score is not None else ""
    lines = [f"  {mark} {verdict.grader}{score}: {verdict.reason}"]
    details = verdict.details or {}
    facts = [
        f"{name} {details[name]}" for name in ("threshold", "model", "retries") if name in details
    ]
    if verdict.cost is not None:
        facts.append(f"cost {verdict.cost:.4f}")
    if facts:
        lines.append("    " + " · ".join(facts))
    if isinstance(details.get("prompt"), list):
        lines += ["    prompt:", *_transcript(details["prompt"], "    ", cut)]
    if isinstance(details.get("reply"), str):
        lines += ["    reply:", *_indented(cut(details["reply"]), "      ")]
    return lines


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)


def _split(record: AttemptRecord) -> str:
    judge = record.judge_cost
    if judge is None:
        return ""
    return f" (agent {record.cost or 0:.4f}, judge {judge:.4f})"


def _trace_lines(transcript: list[Any], cut: _Cut) -> list[str]:
    """The attempt's trace, an event (a turn's model call, a tool call with its command and
    output, a message) a paragraph; a transcript of plain items as before."""
    events = [read_event(item) for item in transcript]
    typed = [e for e in events if e is not None]
    if not typed:
        return ["transcript:", *_transcript(transcript)]
    tools = sum(1 for e in typed if e.type == "tool_call")
    lines = [f"trace: {turns(typed)} model turns, {tools} tool calls"]
    shown = ""
    for number, (item, event) in enumerate(zip(transcript, events, strict=True), 1):
        if event is None:
            lines += _transcript([item])
            continue
        text = render_event(number, event, limit=10**9)
        head, _, body = text.partition("\n")
        if body and body == shown:  # a tool's result as the model got it: the output above
            lines.append(f"  {head}: the output above")
            continue
        lines.append("  " + head)
        if body:
            lines += _indented(cut(body), "  ")
        shown = body
    return lines


def _timing_lines(record: AttemptRecord) -> list[str]:
    """Seconds per phase (records written before they were kept have none)."""
    timings = record.timings
    if not timings:
        return []
    parts = []
    for name, value in timings.items():
        if name == "graders" and isinstance(value, list):
            named = zip(
                [v.grader for v in record.verdicts] or ["?"] * len(value), value, strict=False
            )
            shown = ", ".join(f"{g} {s:.3f}s" for g, s in named if isinstance(s, int | float))
            if shown:
                parts.append(f"graders {shown}")
        elif isinstance(value, int | float):
            parts.append(f"{name} {value:.3f}s")
    return ["timings: " + " · ".join(parts)] if parts else []


def _transcript(entries: list[Any], indent: str = "", cut: _Cut | None = None) -> list[str]:
    lines = []
    for entry in entries:
        if isinstance(entry, dict) and "content" in entry:
            role = entry.get("role", "?")
            lines.append(f"{indent}  [{role}]")
            content = entry["content"]
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            lines += _indented(cut(text) if cut else text, indent + "    ")
        else:
            lines.append(f"{indent}  " + json.dumps(entry, ensure_ascii=False))
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
