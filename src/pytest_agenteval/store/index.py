"""index.jsonl: one small line per committed attempt, what resume plans and metrics read.

A run's index is read whole for every resume and report, up to 100,000 lines, so a line is
checked with one type signature lookup and a few comparisons; only a line that fails them is
examined field by field, to say what is wrong with it. A bad line never stops the reader: its
attempt is left out (it runs again) and the line is reported as a `StoreProblem`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container
from dataclasses import dataclass, field
from itertools import product
from math import isfinite
from operator import itemgetter
from pathlib import Path
from sys import intern
from types import NoneType
from typing import Any, BinaryIO

from ..core.error_classes import phase_class
from ..core.gcpause import gc_paused
from ..core.identity import AttemptId
from ..core.model import RECORD_SCHEMA
from ..core.records import INDEXED, Detail, spend_sum
from ..core.text import excerpt
from ..core.values import value_class
from .files import open_regular
from .problems import RUNS_AGAIN, StoreProblem

STATUSES = frozenset({"pass", "fail", "error"})
UNREADABLE_DETAILS = "(the stored details of this verdict are unreadable)"

FIELDS: dict[str, tuple[type, ...]] = {
    **{f.name: f.index for f in INDEXED if f.index is not None and not f.omit},
    "record": (list,),
}
"""Every field of an index line but the optional ones, in its order, and the JSON types it may
have (`bool` is never a number): the record's `INDEXED` fields, and where the record lies."""
OPTIONAL = {f.name: f.index for f in INDEXED if f.index is not None and f.omit}
"""The fields a line holds only when they say something (crashes, model, judge cost, variant)."""

_values = itemgetter(*FIELDS)
_SIGNATURES = frozenset(product(*FIELDS.values()))
"""Every allowed tuple of field types: checking a line's types is one set lookup."""


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


_decode = json.JSONDecoder(parse_constant=_refuse_constant).decode
UNREADABLE_ERRORS = (ValueError, KeyError, TypeError, ArithmeticError, RecursionError)
"""What a damaged line can raise while it is read (a JSON error is a ValueError)."""


@value_class
class IndexRow:
    """What planning and metrics read of one stored attempt: compact, no output, no transcript.

    Runs hold tens of thousands of rows, so the replay data stays a JSON string until an item
    actually replays it.
    """

    key: AttemptId
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
    model: str | None = None
    """The model the agent's usage is of, when it said (for pricing coverage)."""
    judge_cost: float | None = None
    """What grading cost (LLM judges), apart from the agent's `cost`."""
    variant: str | None = None
    """The variant the attempt ran (None for a dataset without variants; `key` then ends
    with it)."""
    environment: dict[str, str] | None = None
    """What the attempt's sandbox captured (`sandbox: environment:`), when it did."""
    variant_agent: str | None = None
    """A variant's attempt: the agent its session's fingerprint names for the variant (None
    in index lines written before it was kept: run.json's label then)."""
    error_class: str | None = None
    """An error's class (`core.error_classes`): the line's (written only when its phase does
    not imply it), else what its phase implies; None for a pass or a fail."""
    retries: int = 0
    """How many earlier tries of the attempt a `retry:` ran in its session."""
    retry_cost: float | None = None
    """What those tries cost (agents and judges), counted in `spend`."""
    cache_hits: int = 0
    """Model calls (agent and judges) the model cache answered."""
    cache_misses: int = 0
    """Model calls the model cache was asked for and could not answer (they were sent)."""
    cached_cost: float | None = None
    """What the cached answers cost when they were first asked (in no cap, not in `cost`)."""

    @property
    def spend(self) -> float | None:
        """Everything the attempt cost: the agent and its judges (what spend caps count)."""
        return spend_sum((self.cost, self.judge_cost, self.retry_cost))

    @property
    def dataset(self) -> str:
        return self.key.dataset

    def detail(self) -> Detail:
        """What replaying this attempt shows; damaged details become a note, never an error."""
        if not self.replay:
            return Detail()
        try:
            return Detail.from_json(json.loads(self.replay))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return Detail(error=UNREADABLE_DETAILS)

    @property
    def task_id(self) -> str:
        return self.key.task_id

    @property
    def attempt(self) -> int:
        return self.key.attempt


def row_of(line: dict[str, Any], key: AttemptId | None = None) -> IndexRow:
    """The row reading `line` (an index entry) back would give (metrics' fields): a session's
    own commits. `key`: the attempt the line is of, when the caller has it made."""
    phase, variant = line["phase"], line.get("variant")
    return IndexRow(
        key
        if key is not None
        else AttemptId(
            dataset=line["dataset"],
            task_id=line["task_id"],
            variant=variant,
            attempt=line["attempt"],
        ),
        "",
        "",
        *_before_tags(line),
        tuple(line["tags"]),
        *_after_tags(line),
        "",  # replay
        line.get("crashes", 1) if phase == "crash" else 0,
        line.get("model"),
        line.get("judge_cost"),
        variant,
        line.get("environment"),
        line.get("variant_agent"),
        _class_of(line.get("error_class"), line["status"], phase),
        line.get("retries", 0),
        line.get("retry_cost"),
        line.get("cache_hits", 0),
        line.get("cache_misses", 0),
        line.get("cached_cost"),
    )  # type: ignore[call-arg]  # mypy cannot count the itemgetters'


_NAMES = list(FIELDS)
_TAGS = _NAMES.index("tags")
_before_tags = itemgetter(*_NAMES[_NAMES.index("status") : _TAGS])
_after_tags = itemgetter(*_NAMES[_TAGS + 1 : _NAMES.index("replay")])
"""status ... phase: the fields an index line and its row hold alike, in the same order."""


@dataclass
class IndexRead:
    """What reading one index gives: the newest readable row of each attempt, and the damage."""

    rows: dict[AttemptId, IndexRow] = field(default_factory=dict)
    offsets: dict[AttemptId, tuple[int, int]] = field(default_factory=dict)
    """Where each row's full record lies in records.jsonl: (offset, length)."""
    problems: list[StoreProblem] = field(default_factory=list)
    newest: tuple[AttemptId, tuple[int, int]] | None = None
    """The last readable line's attempt and record place (its record ends records.jsonl)."""
    damage: Damage | None = None
    """The damaged lines, by attempt (None when there are none)."""


def read_index(path: Path, *, for_plan: bool = True) -> IndexRead:
    """Read index.jsonl; never raises for its content (only OSError for the file, also when
    it is no regular file: a FIFO would block, /dev/zero never end).

    The newest line of an attempt wins, also when it is damaged: then the attempt is left out
    and runs again, never silently replaced by an older verdict. Without `for_plan` the
    digests, replay data and record offsets are left out (metrics need none of them). Equal
    reasons share one string: most attempts have one of a few.
    """
    with open_regular(path) as f, gc_paused():
        return _read(f, path, for_plan)


def _read(f: BinaryIO, path: Path, for_plan: bool) -> IndexRead:
    read = IndexRead()
    rows, offsets = read.rows, read.offsets
    reasons: dict[str, str] = {}
    damage = Damage(path)
    for number, raw in enumerate(f, 1):
        try:
            row, where = parse_line(raw, reasons, for_plan)
        except UNREADABLE_ERRORS:
            key = damage.add(number, raw, read.newest)
            if key is not None:
                rows.pop(key, None)
                offsets.pop(key, None)
            continue
        rows[row.key] = row
        read.newest = (row.key, where)
        if for_plan:
            offsets[row.key] = where
        if damage:
            damage.superseded(row.key)
    if damage:
        read.damage = damage
        read.problems = damage.problems()
    return read


class Damage:
    """Damaged lines of one index, by attempt (None: the line does not say which)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: dict[AttemptId | None, list[tuple[int, str]]] = {}
        self.floors: dict[AttemptId, int] = {}
        """For each attempt whose newest line is damaged: where the records written after
        that line begin (a record of the attempt before it is an older verdict)."""

    def __bool__(self) -> bool:
        return bool(self.lines)

    def add(
        self, number: int, raw: bytes, before: tuple[AttemptId, tuple[int, int]] | None
    ) -> AttemptId | None:
        """Note a line `parse_line` refused (blank lines lose nothing); returns its attempt.
        `before`: the newest readable line before it (its record precedes this line's)."""
        if raw.isspace():
            return None
        problem, key = explain(raw)
        self.lines.setdefault(key, []).append((number, problem))
        if key is not None:
            self.floors[key] = sum(before[1]) if before else 0
        return key

    def superseded(self, key: AttemptId) -> None:
        """A newer readable line of the attempt makes its earlier damage harmless."""
        if self.lines.pop(key, None) is not None:
            self.floors.pop(key, None)

    def problems(
        self, reindexed: Container[AttemptId | None] = (), effect: str = RUNS_AGAIN
    ) -> list[StoreProblem]:
        """The damaged lines in file order; those of attempts in `reindexed` with `effect`."""
        numbered = sorted(
            (number, problem, key) for key, lines in self.lines.items() for number, problem in lines
        )
        return [
            StoreProblem(
                f"{self.path}:{number}", problem, effect if key in reindexed else RUNS_AGAIN
            )
            for number, problem, key in numbered
        ]


def parse_line(
    raw: bytes, reasons: dict[str, str], for_plan: bool
) -> tuple[IndexRow, tuple[int, int]]:
    """One line as a row and its record's place; any exception means the line is damaged."""
    line = _decode(raw.decode())
    values = _values(line)
    if tuple(map(type, values)) not in _SIGNATURES:
        raise TypeError
    schema, dataset, task_id, attempt, digest, run_digest, status, score, duration = values[:9]
    input_tokens, output_tokens, cost, tags, reason, phase, replay, record = values[9:]
    if (
        schema != RECORD_SCHEMA
        or status not in STATUSES
        or attempt < 0
        or (replay and replay[0] != "{")
        or not _is_location(record)
        or not (isfinite(duration) and (score is None or isfinite(score)))
        or not (cost is None or isfinite(cost))  # a too large int raises OverflowError
    ):
        raise ValueError
    facts = _optional_facts(line) if len(line) > _PLAIN_FIELDS else ()
    if status == "error":
        written = facts[5] if facts else None
        facts = (
            *(facts[:5] if facts else _NO_FACTS),
            _class_of(written, status, phase),
            *facts[6:],
        )
    variant = intern(facts[2]) if facts and facts[2] is not None else None
    key = AttemptId(dataset=intern(dataset), task_id=task_id, variant=variant, attempt=attempt)
    row = IndexRow(
        key,
        digest if for_plan else "",
        run_digest if for_plan else "",
        intern(status),
        score,
        duration,
        input_tokens,
        output_tokens,
        cost,
        tuple(map(intern, tags)),
        reasons.setdefault(reason, reason),
        phase,
        replay if for_plan else "",
        _crashes(raw) if phase == "crash" else 0,
        *facts,
    )
    return row, (record[0], record[1])


_PLAIN_FIELDS = len(FIELDS)
"""Fields of a line without optional facts (crashes, model, judge cost, variant): most lines."""


_NO_FACTS = (None, None, None, None, None)


def _class_of(written: Any, status: str, phase: str | None) -> str | None:
    if status != "error":
        return None
    return written if type(written) is str else phase_class(phase)


def _optional_facts(
    line: dict[str, Any],
) -> tuple[Any, ...]:
    """The optional model, judge cost, variant, captured environment and variant's agent of a
    line; a mistyped model, judge cost, environment or agent is left out, not fatal (a mistyped
    variant is: its attempt would be another's)."""
    model, judge, variant = line.get("model"), line.get("judge_cost"), line.get("variant")
    known = type(judge) in (int, float) and _finite(judge)  # type: ignore[arg-type]
    if variant is not None and type(variant) is not str:
        raise TypeError
    environment = line.get("environment")
    captured = environment if type(environment) is dict else None
    agent, kind = line.get("variant_agent"), line.get("error_class")
    retries, retry_cost = line.get("retries", 0), line.get("retry_cost")
    known_retry = type(retry_cost) in (int, float) and _finite(retry_cost)  # type: ignore[arg-type]
    saved = line.get("cached_cost")
    known_saved = type(saved) in (int, float) and _finite(saved)  # type: ignore[arg-type]
    return (
        model if type(model) is str else None,
        judge if known else None,
        variant,
        captured,
        intern(agent) if type(agent) is str else None,
        intern(kind) if type(kind) is str else None,
        retries if type(retries) is int and retries > 0 else 0,
        retry_cost if known_retry else None,
        _positive(line.get("cache_hits", 0)),
        _positive(line.get("cache_misses", 0)),
        saved if known_saved else None,
    )


def _positive(count: Any) -> int:
    """An optional count of a line: 0 unless a positive int."""
    return count if type(count) is int and count > 0 else 0


def _crashes(raw: bytes) -> int:
    """The crash count of a line of phase `crash` (optional; rare, so parsed again)."""
    count = json.loads(raw).get("crashes", 1)
    return count if type(count) is int and count > 0 else 1


def _is_location(record: list[Any]) -> bool:
    return (
        len(record) == 2
        and type(record[0]) is int
        and type(record[1]) is int
        and record[0] >= 0
        and record[1] >= 0
    )


def explain(raw: bytes) -> tuple[str, AttemptId | None]:
    """What is wrong with a line `parse_line` refused, and its attempt's key when readable."""
    try:
        line = _decode(raw.rstrip(b"\r\n").decode())
    except RecursionError:
        return "nested too deeply to read", None
    except ValueError as exc:
        return f"not valid JSON ({exc})", _key_from_start(raw)
    if not isinstance(line, dict):
        return f"expected a JSON object, got {_show(line)}", None
    key = _key_of(line)
    for name, kinds in FIELDS.items():
        if name not in line:
            return f"missing field {name!r}", key
        problem = _type_problem(line[name], kinds) or _value_problem(name, line[name])
        if problem:
            return f"at {name}: {problem}", key
    variant = line.get("variant")
    if variant is not None and type(variant) is not str:
        return f"at variant: {_type_problem(variant, (str,))}", key
    return "unreadable", key


def _key_of(line: dict[str, Any]) -> AttemptId | None:
    dataset, task_id, attempt = (line.get(k) for k in ("dataset", "task_id", "attempt"))
    variant = line.get("variant")
    if (
        type(dataset) is str
        and type(task_id) is str
        and type(attempt) is int
        and attempt >= 0
        and (variant is None or type(variant) is str)
    ):
        return AttemptId(dataset=intern(dataset), task_id=task_id, variant=variant, attempt=attempt)
    return None


_STRING = rb'("(?:[^"\\]|\\.)*")'
_START = re.compile(
    rb'\{"schema": "[^"]*", "dataset": ' + _STRING + rb", "
    rb'(?:"variant": ' + _STRING + rb", )?"
    rb'"task_id": ' + _STRING + rb', "attempt": (\d+),'
)


def _key_from_start(raw: bytes) -> AttemptId | None:
    """The attempt of a torn line, from its start (as `index_entry` writes it), if still there."""
    match = _START.match(raw)
    if match is None:
        return None
    try:
        variant = json.loads(match[2]) if match[2] else None
        return AttemptId(
            dataset=intern(json.loads(match[1])),
            task_id=json.loads(match[3]),
            variant=variant,
            attempt=int(match[4]),
        )
    except ValueError:
        return None


_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", list: "a list"}


def _type_problem(value: Any, kinds: tuple[type, ...]) -> str | None:
    if type(value) in kinds:
        return None
    wanted = "a number" if float in kinds else _KIND_NAMES[kinds[0]]
    if NoneType in kinds:
        wanted += " or null"
    return f"expected {wanted}, got {_show(value)}"


def _value_problem(name: str, value: Any) -> str | None:
    if name == "schema" and value != RECORD_SCHEMA:
        return f"unknown schema {_show(value)} (this pytest-agenteval reads {RECORD_SCHEMA})"
    if name == "status" and value not in STATUSES:
        return f"unknown status {_show(value)} (pass, fail or error)"
    if name == "attempt" and value < 0:
        return f"a negative attempt {value}"
    if name in ("score", "duration", "cost") and value is not None and not _finite(value):
        return f"not a finite number: {_show(value)}"
    if name == "tags" and not all(type(t) is str for t in value):
        return f"expected a list of strings, got {_show(value)}"
    if name == "replay" and value and value[0] != "{":
        return f'expected "" or a JSON object, got {_show(value)}'
    if name == "record" and not _is_location(value):
        return f"expected [offset, length] in records.jsonl, got {_show(value)}"
    return None


def _finite(value: float) -> bool:
    try:
        return isfinite(value)
    except OverflowError:
        return False


def _show(value: Any) -> str:
    return excerpt(json.dumps(value, ensure_ascii=False), 80)
