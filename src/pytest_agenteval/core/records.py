"""One attempt's record: the typed `AttemptRecord`, its JSON form and the index line it yields.

A record is made once, where the attempt ends; it travels to the controller on the pytest
report as JSON text with its index entry (`index_entry`), is stored as that text, and its index
line (the entry `placed`) is the one compact row planning and metrics read. Records are keyed by
their `AttemptId` (core/identity.py), never by node id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from types import NoneType
from typing import Any

from .error_classes import derived_class, phase_class  # noqa: F401  # phase_class: in FIELDS
from .identity import AttemptId
from .model import RECORD_SCHEMA, AgentResult, Phase, Status, Usage, Verdict
from .numbers import rounded
from .text import clean_text, excerpt, json_encoder, json_safe

HISTORY_LIMIT = 10
"""How many replaced records a record keeps in `previous`."""
to_json_text = json_encoder(acyclic=True)
"""`json.dumps(value, ensure_ascii=False)` of a record, an index line or a record's part,
without building an encoder per call (per attempt, on the hot path)."""


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
    """What a failed or errored attempt shows when it is reported: its record's verdicts,
    output and error (attributes of `AttemptRecord`, by the same names), new or replayed from
    the index line (`to_json` is the line's `replay`)."""

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


DETAIL_FIELDS = tuple(f.name for f in fields(Detail))
"""The record's attributes a Detail holds (the same names and types)."""


@dataclass(frozen=True, slots=True)  # frozen: hooks get it (`pytest_agenteval_record_committed`)
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
    """The attempt's trace: the typed events its agent recorded (`task.trace`: objects with a
    `type` — `model_call`, `tool_call`, `tool_result`, `message`, `limit_hit` — and a
    timestamp `at`), in order, then any transcript it returned (records written before
    traces keep their plain lists)."""
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
    variant: str | None = None
    """The variant (agent configuration) the attempt ran; None for a dataset without variants,
    whose records do not name one."""
    image: str | None = None
    """The id of the Docker image the attempt's sandbox was made of, in records written before
    `sandbox` (newer ones say it there)."""
    sandbox: dict[str, Any] | None = None
    """The attempt's sandbox as its kind describes it: `kind` (`docker`, a plugin's) and what
    the kind says of it (Docker: the `image` id). None: no sandbox, or a record written before
    kinds (which names its Docker image in `image`)."""
    environment: dict[str, str] | None = None
    """What `sandbox: environment:` captured inside the attempt's container before its agent,
    by name (output stripped); None when nothing was asked."""
    changed_files: list[dict[str, Any]] | None = None
    """The files the agent created, changed or deleted in its workspace (against the
    template): each one's `path`, `change`, `size`, and whether its bytes were `kept` in the
    run store's `artifacts/` folder (up to `artifacts: {max_bytes}`); an entry with only a
    `note` says what was not listed. None when the task keeps no artifacts (a local task
    without `artifacts:`)."""
    part_digests: dict[str, str] | None = None
    """A short digest of each part of the task when the attempt ran (`input`, `metadata`,
    `agent`, `workspace`, `sandbox`, `expected`, `graders`, `timeout`, `budget`, `tags`,
    `description`; those set): which parts changed since, when a resume finds the task
    changed. None in records written before it was kept."""
    stopped: str | None = None
    """The attempt's own limit that ended its agent's loop: `max_turns`, `budget` or
    `timeout` (it was graded on what it produced); None when the agent finished."""
    timings: dict[str, Any] | None = None
    """Seconds spent in each phase: `wait` (for the agent's limits, when it waited),
    `environment` (making it), `agent`, `graders` (one per grader, in order, judges included),
    `artifacts`; None in records written before they were kept."""
    error_class: str | None = None
    """An error's class, one of `ERROR_CLASSES` (`rate_limited`, `provider_error`, `timeout`,
    ...); derived from `phase` and `error_type` for a record that stores none. None for a
    pass or a fail."""
    retries: int = 0
    """How many earlier tries of this attempt a `retry:` ran in its session (the first
    `retries` entries of `previous`, newest first); 0: it needed none."""
    retry_cost: float | None = None
    """What those earlier tries cost (agents and judges), counted in `spend`; None: none
    known."""

    @property
    def key(self) -> AttemptId:
        return AttemptId(
            dataset=self.dataset, task_id=self.task_id, variant=self.variant, attempt=self.attempt
        )

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
        return spend_sum((self.cost, self.judge_cost, self.retry_cost))

    @property
    def cache_hits(self) -> int:
        """Model calls (the agent's and its judges') the model cache answered."""
        return sum(_count(u, "cached_calls") for u in self._usages())

    @property
    def cache_misses(self) -> int:
        """Model calls the model cache was asked for and could not answer (they were sent)."""
        return sum(_count(u, "cache_misses") for u in self._usages())

    @property
    def cached_cost(self) -> float | None:
        """What the cached answers cost when they were first asked: what the cache saved."""
        return spend_sum(u.get("cached_cost") for u in self._usages())

    @property
    def asked_cache(self) -> bool:
        """Whether any of the attempt's model calls asked the model cache (cheap: the index
        line asks it of every record)."""
        if _asked(self.usage):
            return True
        return any(v.details and _asked(v.details.get("usage")) for v in self.verdicts)

    def _usages(self) -> list[dict[str, Any]]:
        """The agent's usage and each judge's (a verdict's `details.usage`)."""
        found = [self.usage] if self.usage else []
        for verdict in self.verdicts:
            usage = verdict.details.get("usage") if verdict.details else None
            found += [usage] if isinstance(usage, dict) else []
        return found

    def detail(self) -> Detail:
        """What the attempt shows when it did not pass: the record's fields `Detail` names."""
        return Detail(*[getattr(self, name) for name in DETAIL_FIELDS])

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
        """Plain JSON types: how the record travels on reports and is stored (`FIELDS`)."""
        return _record_json(self)

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
        values = {}
        for f in STORED:
            if f.read is not None:
                values[f.attribute] = f.read(data[f.name] if f.required else data.get(f.name))
        if values["status"] == "error" and values["error_class"] is None:
            values["error_class"] = derived_class(values["phase"], values["error_type"])
        return cls(**values)

    def replacing(self, old: AttemptRecord) -> AttemptRecord:
        """This record, keeping `old` (and its history) as `previous`."""
        history = (old.to_json() | {"previous": []}, *old.previous)
        return self.with_previous(history[:HISTORY_LIMIT])

    def with_previous(self, previous: tuple[dict[str, Any], ...]) -> AttemptRecord:
        return replace(self, previous=previous)


def new_record(
    *,
    key: AttemptId,
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
    image: str | None = None,
    sandbox: dict[str, Any] | None = None,
    environment: dict[str, str] | None = None,
    changed_files: list[dict[str, Any]] | None = None,
    part_digests: dict[str, str] | None = None,
    transcript: list[Any] | None = None,
    stopped: str | None = None,
    timings: dict[str, Any] | None = None,
    error_class: str | None = None,
    usage: Usage | None = None,
) -> AttemptRecord:
    """A record with every string made storable: agents and graders may return any text, but
    UTF-8 cannot hold a lone surrogate, and one such character would lose the attempt.
    `transcript` and `usage`: the trace of an attempt that ended without an answer (an
    error) and what its model calls used (what they cost is spent whatever became of it)."""
    usage = result.usage if result is not None else usage
    if result is not None and result.transcript:
        transcript = result.transcript
    return AttemptRecord(
        dataset=key.dataset,
        task_id=key.task_id,
        attempt=key.attempt,
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
        transcript=json_safe(transcript) if transcript else None,  # type: ignore[arg-type]
        artifacts=json_safe(result.artifacts) if result and result.artifacts else None,  # type: ignore[arg-type]
        call=json_safe(result.call) if result and result.call else None,  # type: ignore[arg-type]
        regraded=regraded,
        task_input=json_safe(task_input) if task_input is not None else None,
        expected=json_safe(expected) if expected is not None else None,
        wait=wait,
        variant=key.variant,
        image=image,
        sandbox=json_safe(sandbox) if sandbox is not None else None,  # type: ignore[arg-type]
        environment=json_safe(environment) if environment is not None else None,  # type: ignore[arg-type]
        changed_files=json_safe(changed_files) if changed_files else changed_files,  # type: ignore[arg-type]
        part_digests=part_digests,
        stopped=stopped,
        timings=timings,
        error_class=(error_class or derived_class(phase, error_type))
        if status == "error"
        else None,
    )


def usage_json(usage: Usage) -> dict[str, Any]:
    """Usage as stored: tokens and cost always, the optional facts only when known."""
    found = usage.model_dump()
    for name in ("cached_input_tokens", "model", "cached_calls", "cached_cost", "cache_misses"):
        if found[name] is None:
            del found[name]
    return found


def _asked(usage: Any) -> bool:
    """Whether a usage dict counts calls that asked the model cache."""
    return type(usage) is dict and ("cached_calls" in usage or "cache_misses" in usage)


def _count(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if type(value) is int else 0


def spend_sum(values: Iterable[float | None]) -> float | None:
    """The sum of the known amounts; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _clean_verdict(v: Verdict) -> Verdict:
    """A grader's verdict as a record keeps it: valid text, its details plain JSON (a plugin's
    grader may put any object, or one that holds itself, in them)."""
    reason, grader = clean_text(v.reason), clean_text(v.grader)
    details = v.details
    if details is not None:
        safe = json_safe(details)
        details = safe if isinstance(safe, dict) else {"details": safe}
    if reason is v.reason and grader is v.grader and details is None:
        return v
    return Verdict(grader, v.passed, reason, v.score, details)


def attempt_reason(record: AttemptRecord) -> str:
    """One line on why an attempt passed, failed or errored."""
    if record.status == "error":
        text = (record.error or "error").strip() or "error"
        return text.splitlines()[-1] if "Traceback" in text else text.splitlines()[0]
    verdicts = record.verdicts
    wanted = [v for v in verdicts if v.passed == (record.status == "pass")] or verdicts
    return "; ".join(f"{v.grader}: {v.reason}".splitlines()[0] for v in wanted)


def variant_agent(record: AttemptRecord) -> str | None:
    """The agent a variant's attempt was made with, as its session's fingerprint labels the
    variant (None for an attempt without variant, or a fingerprint that does not say): the
    index keeps it, so a variant resumed with another agent (`--agenteval-allow-drift`) is
    told to mix two agents."""
    if record.variant is None:
        return None
    labels = (record.agent.get("variants") or {}).get(record.dataset)
    label = labels.get(record.variant) if isinstance(labels, dict) else None
    return label if isinstance(label, str) else None


def index_entry(record: AttemptRecord) -> dict[str, Any]:
    """The record's line in index.jsonl but for where the record lies (`placed` adds that):
    what planning and metrics read (`INDEX_LINE`). Failures and errors keep what their replay
    shows; a replayed pass shows nothing, so passes store "". Made where the record is made
    (an xdist worker), so the controller need not parse the record to index it."""
    return _index_json(record)


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
    score = float(facts.score or 0.0)
    props: list[tuple[str, Any]] = [
        ("task_id", facts.task_id),
        _shared("attempt", facts.attempt),
        _shared("status", facts.status),
        # round() formats its number: a pass's or an error's score needs none
        _shared("score", score if score in (0.0, 1.0) else round(score, 4)),
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

    from .docstrings import field_docs

    schema = TypeAdapter(AttemptRecord).json_schema()
    typed = schema["properties"]
    derived = {
        "schema": {"const": RECORD_SCHEMA, "description": "The format and its major version."},
        "score": {"type": "number", "description": "Mean grader score; 0 for an error."},
        "finished_at": {"type": "number", "description": "When the attempt ended (epoch seconds)."},
    }
    for f in STORED:  # a field named apart from its attribute keeps the attribute's docstring
        if f.name != f.attribute:
            docs = field_docs(AttemptRecord)
            typed[f.attribute] = {"description": docs[f.attribute], **typed[f.attribute]}
    schema["properties"] = {f.name: derived.get(f.name) or typed[f.attribute] for f in STORED}
    schema["required"] = [f.name for f in STORED if f.required or f.name in derived]
    return schema


# --- the record's fields, defined once ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a record's JSON (`agenteval.record/1`) or of its index line: the one place
    that says how it is written, read back, left out and indexed."""

    name: str
    """Its JSON name."""
    write: str
    """A Python expression of the record `r`: the value written (compiled into `to_json` and
    `index_entry`, so writing costs what a hand-written dict display costs)."""
    read: Callable[[Any], Any] | None = None
    """The attribute's value from the JSON value (None: derived, never read back)."""
    attr: str = ""
    """The `AttemptRecord` attribute it holds, when not named like the field."""
    omit: str = ""
    """An expression of `r`: when true the field is left out (then `read` gets None)."""
    required: bool = False
    """Reading a record without it fails (the others read None when absent)."""
    stored: bool = True
    """In the stored record; False for a fact only the index line holds."""
    index: tuple[type, ...] | None = None
    """The JSON types its index line allows; None: not in the index line."""

    @property
    def attribute(self) -> str:
        return self.attr or self.name


def _optional(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else kind(value)


def _same(value: Any) -> Any:
    return value


def _verdicts(values: Any) -> tuple[Verdict, ...]:
    return tuple(Verdict(**v) for v in values or ())


_STR, _INT, _LIST = (str,), (int,), (list,)
_NUMBER, _MAYBE_NUMBER = (int, float), (int, float, NoneType)
_MAYBE_INT, _MAYBE_STR = (int, NoneType), (str, NoneType)

FIELDS: tuple[Field, ...] = (
    Field("schema", "RECORD_SCHEMA", index=_STR),
    Field("dataset", "r.dataset", str, required=True, index=_STR),
    Field("variant", "r.variant", _optional(str), omit="r.variant is None", index=_STR),
    Field("task_id", "r.task_id", str, required=True, index=_STR),
    Field("attempt", "r.attempt", int, required=True, index=_INT),
    Field("digest", "r.digest", str, required=True, index=_STR),
    Field("run_digest", "r.run_digest", str, required=True, index=_STR),
    Field("agent", "r.agent", dict, required=True),
    Field("tags", "list(r.tags)", lambda tags: tuple(tags or ()), index=_LIST),
    Field("status", "r.status", _same, required=True, index=_STR),
    Field("score", "r.score", index=_MAYBE_NUMBER),
    Field("verdicts", "[v.as_dict() for v in r.verdicts]", _verdicts),
    Field("output", "r.output", _same),
    Field("usage", "r.usage", _same),
    Field("duration", "r.duration", float, required=True, index=_NUMBER),
    Field("started_at", "r.started_at", float, required=True),
    Field("finished_at", "r.started_at + r.duration"),
    Field("error", "r.error", _same),
    Field("error_type", "r.error_type", _same),
    Field("phase", "r.phase", _same, index=_MAYBE_STR),
    Field("transcript", "r.transcript", _same),
    Field("artifacts", "r.artifacts", _same),
    Field("previous", "list(r.previous)", lambda old: tuple(old or ())),
    Field("call", "r.call", _same, omit="r.call is None"),
    Field("regraded", "True", lambda value: value is True, omit="not r.regraded"),
    Field("input", "r.task_input", _same, "task_input", omit="r.task_input is None"),
    Field("expected", "r.expected", _same, omit="r.expected is None"),
    Field("wait", "r.wait", lambda wait: float(wait or 0.0), omit="not r.wait"),
    Field("image", "r.image", _optional(str), omit="r.image is None"),
    Field("sandbox", "r.sandbox", _optional(dict), omit="r.sandbox is None"),
    Field("environment", "r.environment", _same, omit="r.environment is None", index=(dict,)),
    Field("changed_files", "r.changed_files", _same, omit="r.changed_files is None"),
    Field("part_digests", "r.part_digests", _same, omit="r.part_digests is None"),
    Field("stopped", "r.stopped", _optional(str), omit="r.stopped is None"),
    Field("timings", "r.timings", _same, omit="r.timings is None"),
    Field(
        "error_class",
        "r.error_class",
        _optional(str),
        omit="r.error_class is None or r.error_class == phase_class(r.phase)",
        index=_STR,
    ),
    Field("retries", "r.retries", lambda n: int(n or 0), omit="not r.retries", index=_INT),
    Field(
        "retry_cost",
        "r.retry_cost",
        _optional(float),
        omit="r.retry_cost is None",
        index=_NUMBER,
    ),
    # Facts only the index line holds: what metrics and replays need without the record.
    Field("input_tokens", "r.input_tokens", stored=False, index=_MAYBE_INT),
    Field("output_tokens", "r.output_tokens", stored=False, index=_MAYBE_INT),
    Field("cost", "r.cost", stored=False, index=_MAYBE_NUMBER),
    Field("reason", "attempt_reason(r)", stored=False, index=_STR),
    Field(
        "replay",
        '"" if r.status == "pass" else to_json_text(r.detail().to_json())',
        stored=False,
        index=_STR,
    ),
    Field("crashes", "crash_count(r)", omit='r.phase != "crash"', stored=False, index=_INT),
    Field("model", "r.model", omit="r.model is None", stored=False, index=_STR),
    Field("judge_cost", "r.judge_cost", omit="r.judge_cost is None", stored=False, index=_NUMBER),
    Field(
        "variant_agent",
        "variant_agent(r)",
        omit="variant_agent(r) is None",
        stored=False,
        index=_STR,
    ),
    Field(
        "cache_hits",
        "r.cache_hits",
        omit="not (r.asked_cache and r.cache_hits)",
        stored=False,
        index=_INT,
    ),
    Field(
        "cache_misses",
        "r.cache_misses",
        omit="not (r.asked_cache and r.cache_misses)",
        stored=False,
        index=_INT,
    ),
    Field(
        "cached_cost",
        "r.cached_cost",
        omit="not r.asked_cache or r.cached_cost is None",
        stored=False,
        index=_NUMBER,
    ),
)
"""Every field of a stored record (in its JSON's order) and of its index line. A new field is
one entry here (and the attribute it holds): the stored JSON, the index line, the shipped form
and the hook's payload follow."""

INDEX_LINE: tuple[str, ...] = (
    *("schema", "dataset", "variant", "task_id", "attempt", "digest", "run_digest", "status"),
    *("score", "duration", "input_tokens", "output_tokens", "cost", "tags", "reason", "phase"),
    *("replay", "crashes", "model", "judge_cost", "environment", "variant_agent", "error_class"),
    *("retries", "retry_cost", "cache_hits", "cache_misses", "cached_cost"),
)
"""The order of an index line's fields (format `/1`'s; `placed` appends `record`)."""

STORED = tuple(f for f in FIELDS if f.stored)
INDEXED = tuple(next(f for f in FIELDS if f.name == name) for name in INDEX_LINE)


def _compile(name: str, fields: tuple[Field, ...]) -> Callable[[AttemptRecord], dict[str, Any]]:
    """A function writing `fields` of a record `r` as dict displays (as fast as writing them
    by hand). A field with an `omit` rule among the last ones is spliced in only when it holds;
    one before them (the variant) chooses between two displays, with and without it, because a
    splice inside a display makes CPython build and merge a second dict."""
    source = f"def {name}(r):\n    return {_display(fields)}\n"
    namespace: dict[str, Any] = {}
    exec(source, globals(), namespace)  # the source is built from FIELDS only
    made: Callable[[AttemptRecord], dict[str, Any]] = namespace[name]
    return made


def _display(fields: tuple[Field, ...]) -> str:
    """A dict display of `fields` (an expression of `r`)."""
    tail = len(fields)
    while tail and fields[tail - 1].omit:
        tail -= 1
    inner = next((i for i, f in enumerate(fields[:tail]) if f.omit), None)
    if inner is not None:
        without, f = fields[:inner] + fields[inner + 1 :], fields[inner]
        with_it = (*fields[:inner], replace(f, omit=""), *fields[inner + 1 :])
        return f"({_display(without)} if ({f.omit}) else {_display(with_it)})"
    parts = [f"{f.name!r}: {f.write}" for f in fields[:tail]]
    parts += [f"**({{{f.name!r}: {f.write}}} if not ({f.omit}) else {{}})" for f in fields[tail:]]
    return f"{{{', '.join(parts)}}}"


_record_json = _compile("record_json", STORED)
_index_json = _compile("index_json", INDEXED)
