"""One attempt's record: the typed `AttemptRecord`, its JSON form and the index line it yields.

A record is made once, where the attempt ends; it travels to the controller on the pytest
report as JSON text with its index entry (`index_entry`), is stored as that text, and its index
line (the entry `placed`) is the one compact row planning and metrics read. Keys are (dataset,
task id, attempt), never node ids; `item_name` / `parse_item_name` map between keys and pytest
item names.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .model import RECORD_SCHEMA, AgentResult, Key, Phase, Status, Usage, Verdict
from .numbers import rounded
from .text import clean_text, excerpt, json_safe

ITEM_NAME_RE = re.compile(r"^(?P<task_id>.+)\[attempt-(?P<attempt>\d+)\](?:@.*)?$")
HISTORY_LIMIT = 10
"""How many replaced records a record keeps in `previous`."""
to_json_text = json.JSONEncoder(ensure_ascii=False).encode
"""`json.dumps(value, ensure_ascii=False)` without building an encoder per call (per attempt,
records and index lines are encoded on the hot path)."""


def item_name(task_id: str, attempt: int) -> str:
    """The pytest item name of one attempt: `<task_id>[attempt-<i>]`."""
    return f"{task_id}[attempt-{attempt}]"


def parse_item_name(nodeid: str) -> tuple[str, int] | None:
    """(task id, attempt) from a node id or item name; tolerates xdist's `@group` suffix."""
    match = ITEM_NAME_RE.match(nodeid.rpartition("::")[2])
    return (match["task_id"], int(match["attempt"])) if match else None


def plan_key(key: Key) -> str:
    """A key as one string (dataset names and task ids never contain NUL)."""
    return f"{key[0]}\0{key[1]}\0{key[2]}"


def attempt_seed(key: Key) -> int:
    """A deterministic 32-bit seed per (dataset, task, attempt)."""
    return int.from_bytes(hashlib.sha256(plan_key(key).encode()).digest()[:4], "big")


def attempt_score(verdicts: tuple[Verdict, ...] | list[Verdict]) -> float:
    """Mean of the graders' scores (a grader without a score counts 1 if passed, else 0)."""
    if not verdicts:
        return 0.0
    total = 0.0
    for v in verdicts:
        total += v.score if v.score is not None else (1.0 if v.passed else 0.0)
    return total / len(verdicts)


@dataclass(frozen=True, slots=True)
class Detail:
    """What a failed or errored attempt shows when it is reported: verdicts, output, error."""

    verdicts: tuple[Verdict, ...] = ()
    output: str | None = None
    """The output, or an excerpt of it when replayed from the index."""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdicts": [v.as_dict(details=False) for v in self.verdicts],
            "output_excerpt": excerpt(self.output or "", 300),
            "error": excerpt(self.error, 2000) if self.error else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Detail:
        return cls(
            tuple(Verdict(**v) for v in data.get("verdicts") or ()),
            data.get("output_excerpt"),
            data.get("error"),
        )


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One finished attempt (`agenteval.record/1`): what ran, what it answered, the verdict."""

    dataset: str
    """The dataset's name (its manifest's `name`)."""
    task_id: str
    """The task's id, unique in its dataset."""
    attempt: int
    """The attempt's index, from 0."""
    digest: str
    """Content digest of the task when the attempt ran."""
    run_digest: str
    """Digest of what the agent saw (everything but graders, expected, tags, description)."""
    agent: dict[str, Any]
    """Fingerprint of the agent: its spec, override and declared version, and what ran."""
    status: Status
    """`pass` (every grader passed), `fail` (a grader failed) or `error` (the agent or a
    grader could not finish)."""
    started_at: float
    """When the attempt started, in seconds since the epoch."""
    duration: float
    """Seconds the attempt took, agent and graders."""
    tags: tuple[str, ...] = ()
    """The task's tags when the attempt ran."""
    verdicts: tuple[Verdict, ...] = ()
    """Each grader's verdict, in the task's order."""
    output: str | None = None
    """What the agent answered (as text); None when it gave no answer."""
    usage: dict[str, Any] | None = None
    """input_tokens, output_tokens, cost, as the agent reported them."""
    error: str | None = None
    """What went wrong, for an error."""
    error_type: str | None = None
    """The exception's type name, for an error."""
    phase: Phase | None = None
    """Where an error happened: agent, grading, budget (usage over the task's budget) or crash."""
    transcript: list[Any] | None = None
    """The agent's messages, as it reported them."""
    artifacts: dict[str, Any] | None = None
    """Files the agent produced, as it reported them."""
    previous: tuple[dict[str, Any], ...] = field(default=())
    """Records this one replaced (`--agenteval-rerun`), newest first, as JSON."""
    call: dict[str, Any] | None = None
    """How a model provider answered the agent: model, finish reason, retries."""
    regraded: bool = False
    """The answer is a stored one graded again (the agent was not called for this record)."""
    task_input: Any = None
    """The task's input as the agent got it (None in records written before it was kept)."""
    expected: Any = None
    """The task's `expected` when it was graded (None when it has none)."""
    wait: float = 0.0
    """Seconds the attempt waited for its agent's limits (a `max_in_flight` slot, the pace)
    before its call started; `started_at` and `duration` are of the call and grading only."""

    @property
    def key(self) -> Key:
        return (self.dataset, self.task_id, self.attempt)

    @property
    def score(self) -> float:
        return attempt_score(self.verdicts) if self.status != "error" else 0.0

    @property
    def input_tokens(self) -> int | None:
        return self.usage.get("input_tokens") if self.usage else None

    @property
    def output_tokens(self) -> int | None:
        return self.usage.get("output_tokens") if self.usage else None

    @property
    def cost(self) -> float | None:
        """The agent's cost (reported, or priced from `pricing:`)."""
        return self.usage.get("cost") if self.usage else None

    @property
    def model(self) -> str | None:
        """The model the agent's usage is of, when it says."""
        return self.usage.get("model") if self.usage else None

    @property
    def judge_cost(self) -> float | None:
        """What grading cost (LLM judges), kept apart from the agent's cost."""
        return spend_sum(v.cost for v in self.verdicts)

    @property
    def spend(self) -> float | None:
        """Everything the attempt cost: the agent and its judges (what spend caps count)."""
        return spend_sum((self.cost, self.judge_cost))

    def detail(self) -> Detail:
        return Detail(self.verdicts, self.output, self.error)

    def result(self) -> AgentResult:
        """The agent's answer as recorded, for regrading without calling the agent."""
        return AgentResult.model_validate(
            {
                "output": self.output or "",
                "usage": self.usage,
                "transcript": self.transcript,
                "artifacts": self.artifacts,
                "call": self.call,
            }
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types: how the record travels on reports and is stored."""
        return {
            "schema": RECORD_SCHEMA,
            "dataset": self.dataset,
            "task_id": self.task_id,
            "attempt": self.attempt,
            "digest": self.digest,
            "run_digest": self.run_digest,
            "agent": self.agent,
            "tags": list(self.tags),
            "status": self.status,
            "score": self.score,
            "verdicts": [v.as_dict() for v in self.verdicts],
            "output": self.output,
            "usage": self.usage,
            "duration": self.duration,
            "started_at": self.started_at,
            "finished_at": self.started_at + self.duration,
            "error": self.error,
            "error_type": self.error_type,
            "phase": self.phase,
            "transcript": self.transcript,
            "artifacts": self.artifacts,
            "previous": list(self.previous),
            **({"call": self.call} if self.call is not None else {}),
            **({"regraded": True} if self.regraded else {}),
            **({"input": self.task_input} if self.task_input is not None else {}),
            **({"expected": self.expected} if self.expected is not None else {}),
            **({"wait": self.wait} if self.wait else {}),
        }

    def to_text(self) -> str:
        """The record as one line of JSON: how it travels on reports (one string is far cheaper
        for xdist to ship than a nested dict) and how it is stored."""
        return to_json_text(self.to_json())

    @classmethod
    def from_text(cls, text: str) -> AttemptRecord:
        """The record `to_text` wrote; raises ValueError (or KeyError, TypeError) otherwise."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a record is a JSON object")
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AttemptRecord:
        """The record a `to_json` dict describes; raises ValueError (or KeyError, TypeError) on
        a dict of another shape, so callers can treat the record as unreadable."""
        if data.get("schema") != RECORD_SCHEMA:
            raise ValueError(f"not an {RECORD_SCHEMA} record: schema {data.get('schema')!r}")
        if data["status"] not in ("pass", "fail", "error"):
            raise ValueError(f"unknown status {data['status']!r}")
        return cls(
            dataset=str(data["dataset"]),
            task_id=str(data["task_id"]),
            attempt=int(data["attempt"]),
            digest=str(data["digest"]),
            run_digest=str(data["run_digest"]),
            agent=dict(data["agent"]),
            status=data["status"],
            started_at=float(data["started_at"]),
            duration=float(data["duration"]),
            tags=tuple(data.get("tags") or ()),
            verdicts=tuple(Verdict(**v) for v in data.get("verdicts") or ()),
            output=data.get("output"),
            usage=data.get("usage"),
            error=data.get("error"),
            error_type=data.get("error_type"),
            phase=data.get("phase"),
            transcript=data.get("transcript"),
            artifacts=data.get("artifacts"),
            previous=tuple(data.get("previous") or ()),
            call=data.get("call"),
            regraded=data.get("regraded") is True,
            task_input=data.get("input"),
            expected=data.get("expected"),
            wait=float(data.get("wait") or 0.0),
        )

    def replacing(self, old: AttemptRecord) -> AttemptRecord:
        """This record, keeping `old` (and its history) as `previous`."""
        history = (old.to_json() | {"previous": []}, *old.previous)
        return self.with_previous(history[:HISTORY_LIMIT])

    def with_previous(self, previous: tuple[dict[str, Any], ...]) -> AttemptRecord:
        values = {name: getattr(self, name) for name in AttemptRecord.__slots__}
        return AttemptRecord(**{**values, "previous": previous})


def new_record(
    *,
    key: Key,
    digest: str,
    run_digest: str,
    agent: dict[str, Any],
    tags: tuple[str, ...] | list[str],
    status: Status,
    verdicts: list[Verdict],
    result: AgentResult | None,
    started_at: float,
    duration: float,
    error: str | None = None,
    error_type: str | None = None,
    phase: Phase | None = None,
    regraded: bool = False,
    task_input: Any = None,
    expected: Any = None,
    wait: float = 0.0,
) -> AttemptRecord:
    """A record with every string made storable: agents and graders may return any text, but
    UTF-8 cannot hold a lone surrogate, and one such character would lose the attempt."""
    usage = result.usage if result is not None else None
    return AttemptRecord(
        dataset=key[0],
        task_id=key[1],
        attempt=key[2],
        digest=digest,
        run_digest=run_digest,
        agent=agent,
        status=status,
        started_at=started_at,
        duration=duration,
        tags=tuple(tags),
        verdicts=tuple(_clean_verdict(v) for v in verdicts),
        output=clean_text(result.output) if result is not None else None,
        usage=json_safe(usage_json(usage)) if usage is not None else None,  # type: ignore[arg-type]
        error=clean_text(error) if error else None,
        error_type=error_type,
        phase=phase,
        transcript=json_safe(result.transcript) if result and result.transcript else None,  # type: ignore[arg-type]
        artifacts=json_safe(result.artifacts) if result and result.artifacts else None,  # type: ignore[arg-type]
        call=json_safe(result.call) if result and result.call else None,  # type: ignore[arg-type]
        regraded=regraded,
        task_input=json_safe(task_input) if task_input is not None else None,
        expected=json_safe(expected) if expected is not None else None,
        wait=wait,
    )


def usage_json(usage: Usage) -> dict[str, Any]:
    """Usage as stored: tokens and cost always, the optional facts only when known."""
    found = usage.model_dump()
    for name in ("cached_input_tokens", "model"):
        if found[name] is None:
            del found[name]
    return found


def spend_sum(values: Iterable[float | None]) -> float | None:
    """The sum of the known amounts; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _clean_verdict(v: Verdict) -> Verdict:
    reason, grader = clean_text(v.reason), clean_text(v.grader)
    if reason is v.reason and grader is v.grader:
        return v
    return Verdict(grader, v.passed, reason, v.score, v.details)


def attempt_reason(record: AttemptRecord) -> str:
    """One line on why an attempt passed, failed or errored."""
    if record.status == "error":
        text = (record.error or "error").strip() or "error"
        return text.splitlines()[-1] if "Traceback" in text else text.splitlines()[0]
    verdicts = record.verdicts
    wanted = [v for v in verdicts if v.passed == (record.status == "pass")] or verdicts
    return "; ".join(f"{v.grader}: {v.reason}".splitlines()[0] for v in wanted)


def index_entry(record: AttemptRecord) -> dict[str, Any]:
    """The record's line in index.jsonl but for where the record lies (`placed` adds that):
    what planning and metrics read. Failures and errors keep what their replay shows; a
    replayed pass shows nothing, so passes store "". Made where the record is made (an xdist
    worker), so the controller need not parse the record to index it."""
    return {
        "schema": RECORD_SCHEMA,
        "dataset": record.dataset,
        "task_id": record.task_id,
        "attempt": record.attempt,
        "digest": record.digest,
        "run_digest": record.run_digest,
        "status": record.status,
        "score": record.score,
        "duration": record.duration,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cost": record.cost,
        "tags": list(record.tags),
        "reason": attempt_reason(record),
        "phase": record.phase,
        "replay": "" if record.status == "pass" else to_json_text(record.detail().to_json()),
        **({"crashes": crash_count(record)} if record.phase == "crash" else {}),
        **({"model": record.model} if record.model is not None else {}),
        **({"judge_cost": judge} if (judge := record.judge_cost) is not None else {}),
    }


def ship(action: str, entry: str, text: str) -> str:
    """A new record as its report carries it: the action, the index entry's JSON and the
    record's, a line each (JSON text holds no raw newline). One string, because execnet ships
    one value far more cheaply than a dict of them."""
    return f"{action}\n{entry}\n{text}"


def unship(shipped: str) -> dict[str, str]:
    """What `ship` packed, as the dict other reports carry: action, entry, record."""
    action, entry, text = shipped.split("\n", 2)
    return {"action": action, "entry": entry, "record": text}


def placed(entry: str, offset: int, length: int) -> str:
    """The index line of an entry's JSON text: the entry, and where its record lies in
    records.jsonl (byte offset and length)."""
    return f'{entry[:-1]}, "record": [{offset}, {length}]}}'


UNATTRIBUTED_CRASH = "WorkerCrashUnattributed"
"""error_type of a crash that is not provably the attempt's own: other agent calls of the
process were in flight when it died."""


def crash_count(record: AttemptRecord) -> int:
    """How many times in a row this attempt's process died running it, this record included.
    A crash that is not provably its own neither counts nor breaks the row."""
    chain = ({"phase": record.phase, "error_type": record.error_type}, *record.previous)
    count = 0
    for old in chain:
        if old.get("phase") != "crash":
            break
        count += old.get("error_type") != UNATTRIBUTED_CRASH
    return count


def junit_properties(facts: Any, reused: bool) -> list[tuple[str, Any]]:
    """Per-attempt JUnit properties: task_id, attempt, status, score, duration, tokens, cost
    (agent + judges) and judge_cost (when a judge cost something).

    Numbers are rounded for people (the record keeps them at full precision).

    `facts` is an AttemptRecord or a stored IndexRow (both have these fields). Reports keep
    their properties all session long, so the ones that repeat across attempts share one tuple.
    """
    props: list[tuple[str, Any]] = [
        ("task_id", facts.task_id),
        _shared("attempt", facts.key[2]),
        _shared("status", facts.status),
        _shared("score", float(round(facts.score or 0.0, 4))),
        ("duration", round(facts.duration or 0.0, 4)),
    ]
    tokens = (facts.input_tokens, facts.output_tokens)
    if tokens != (None, None):
        props.append(("tokens", (tokens[0] or 0) + (tokens[1] or 0)))
    if facts.spend is not None:  # everything it cost: the agent and its judges
        props.append(("cost", rounded(facts.spend)))
    if facts.judge_cost is not None:
        props.append(("judge_cost", rounded(facts.judge_cost)))
    if reused:
        props.append(_shared("reused", "true"))
    return props


_SHARED_PROPERTIES: dict[tuple[str, Any], tuple[str, Any]] = {}


def _shared(name: str, value: Any) -> tuple[str, Any]:
    prop = (name, value)
    return _SHARED_PROPERTIES.setdefault(prop, prop)


def record_schema() -> dict[str, Any]:
    """The JSON Schema of a stored record (`agenteval schema record`)."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(AttemptRecord).json_schema()
    schema["properties"] = {
        "schema": {"const": RECORD_SCHEMA, "description": "The format and its major version."},
        **schema["properties"],
        "score": {"type": "number", "description": "Mean grader score; 0 for an error."},
        "finished_at": {"type": "number", "description": "When the attempt ended (epoch seconds)."},
    }
    schema["required"] = ["schema", *schema["required"], "score", "finished_at"]
    return schema
