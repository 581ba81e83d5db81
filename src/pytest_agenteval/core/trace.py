"""An attempt's typed trace: the events an agent's turns leave (model calls, tool calls and
their results, messages, limits hit), kept in the record's `transcript` field.

An agent appends events to `task.trace` as they happen; the attempt's record keeps them as
JSON objects with a `type` and a timestamp `at` (epoch seconds), so `show`, the HTML report,
trajectory graders and OpenTelemetry read one list. A stored transcript may also hold plain
items (what agents returned before there were events, or besides them): readers take the
typed events of a transcript (`read_events`) and show the rest as it is.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .errors import LimitReached, RunStopped

EVENT_TYPES = ("model_call", "tool_call", "tool_result", "message", "limit_hit")
OUTPUT_EXCERPT = 4000
"""Characters of a tool's output a `tool_call` event keeps (its full size is noted)."""


class _Event(BaseModel):
    """What every event has: its type and when it happened."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: float = Field(default_factory=time.time)
    """When the event was recorded (epoch seconds); a call's, when it ended."""


class ModelCall(_Event):
    """One model call (a turn): what it asked of which model, what it used and cost."""

    type: Literal["model_call"] = "model_call"
    provider: str | None = None
    """The provider (its name in the manifest, or the API kind: `openai`, `anthropic`)."""
    request_model: str | None = None
    """The model asked for."""
    model: str | None = None
    """The model that answered, as the provider names it (looked up in `pricing:`)."""
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    cached_input_tokens: int | None = Field(default=None, ge=0)
    """Input tokens served from the provider's cache (part of `input_tokens`)."""
    cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """What the call cost, when known (else priced from `pricing:` by `model`)."""
    latency: float | None = Field(default=None, ge=0)
    """Seconds from the request to the whole reply."""
    cached: bool = False
    """The answer came from a cache (no request reached the provider; `cost` is 0)."""
    cached_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """A cached answer's cost when it was first asked (counted against no cap)."""
    cache_missed: bool | None = None
    """True: the model cache (`--agenteval-model-cache`) was asked and had no answer, so the
    request was sent; absent when no cache was asked or it answered."""
    finish_reason: str | None = None
    """Why the model stopped (`stop`, `length`, `tool_calls`...)."""
    started_at: float | None = None
    """When the request was sent (epoch seconds; default: `at` less `latency`)."""
    retries: int | None = Field(default=None, ge=0)
    """Requests retried before this answer."""

    @property
    def start(self) -> float:
        """When the call started (epoch seconds)."""
        if self.started_at is not None:
            return self.started_at
        return self.at - (self.latency or 0.0)


class ToolCall(_Event):
    """One tool run on the model's behalf: the command and how it went."""

    type: Literal["tool_call"] = "tool_call"
    tool: str
    """The tool's name (`bash`, `python`, `read_file`...)."""
    arguments: Any = None
    """What the model passed to it (JSON)."""
    id: str | None = None
    """The model's id of the call (to pair it with its result)."""
    exit_status: int | None = None
    """The program's exit status, for a tool that runs one."""
    duration: float | None = Field(default=None, ge=0)
    """Seconds the tool ran."""
    output: str | None = None
    """An excerpt of what it printed (`OUTPUT_EXCERPT` characters at most)."""
    output_size: int | None = Field(default=None, ge=0)
    """The whole output's length, when the excerpt is cut."""
    error: str | None = None
    """Why the tool could not run (an unknown tool, bad arguments, a timeout)."""
    started_at: float | None = None
    """When it started (epoch seconds; default: `at` less `duration`)."""

    @property
    def start(self) -> float:
        if self.started_at is not None:
            return self.started_at
        return self.at - (self.duration or 0.0)


class ToolResult(_Event):
    """What went back to the model for one tool call."""

    type: Literal["tool_result"] = "tool_result"
    tool: str | None = None
    id: str | None = None
    """The model's id of the call it answers."""
    content: Any = None
    """The text (or content parts) sent to the model."""


class Message(_Event):
    """A message of the conversation: the task's prompt, the model's reply."""

    type: Literal["message"] = "message"
    role: str
    """`system`, `user`, `assistant` or `tool`."""
    content: Any = None
    """Its text, or content parts."""
    tool_calls: list[Any] | None = None
    """The tool calls an assistant message asks for, as the provider wrote them."""


class LimitHit(_Event):
    """A limit that ended (or stopped) the attempt's loop."""

    type: Literal["limit_hit"] = "limit_hit"
    limit: str
    """`max_turns`, `budget`, `timeout` (the attempt's own), or `run` (a run-wide stop)."""
    reason: str = ""
    """What was reached, for people."""


Event = Annotated[
    ModelCall | ToolCall | ToolResult | Message | LimitHit, Field(discriminator="type")
]
"""One typed event of a trace (the `type` field says which)."""
AnyEvent = ModelCall | ToolCall | ToolResult | Message | LimitHit
_EVENT = TypeAdapter(Event)
ATTEMPT_LIMITS = ("max_turns", "budget", "timeout")
"""Limits of the attempt itself: reaching one ends the loop and the attempt is graded."""


def event_json(event: AnyEvent) -> dict[str, Any]:
    """An event as stored: its fields, those not set left out."""
    return event.model_dump(exclude_none=True)


def read_event(item: Any) -> AnyEvent | None:
    """A stored transcript item as a typed event, or None when it is not one (a plain
    message an agent returned, or something else)."""
    if not isinstance(item, dict) or item.get("type") not in EVENT_TYPES:
        return None
    try:
        return _EVENT.validate_python(item)
    except ValidationError:
        return None


def read_events(transcript: Sequence[Any] | None) -> list[AnyEvent] | None:
    """The typed events of a stored transcript, in order; None when it has none (no trace:
    an agent that returned plain messages, or nothing)."""
    if not transcript:
        return None
    found = [event for item in transcript if (event := read_event(item)) is not None]
    return found or None


def turns(events: Sequence[AnyEvent]) -> int:
    """Model turns: the model calls among the events."""
    return sum(1 for event in events if isinstance(event, ModelCall))


Price = Callable[[ModelCall], float | None]
"""A model call's cost: the reported one, else priced from the manifest's `pricing:`."""


def event_cost(event: ModelCall, price: Price | None) -> float | None:
    """A model call's cost: reported, else priced by `price` (None when neither is known)."""
    if event.cost is not None or price is None:
        return event.cost
    return price(event)


class Trace:
    """The typed trace of one attempt, which its agent writes as it goes (`task.trace`).

    Thread-safe (an agent may run tools side by side). The attempt runner watches it:
    `on_event` sees every event (live phases, the run's spend), `run_stop`, `deadline` and
    `price` are what `check` asks before a turn.
    """

    __slots__ = (
        "_events",
        "_lock",
        "deadline",
        "on_event",
        "on_phase",
        "price",
        "run_stop",
        "stopped",
        "traceparent",
    )

    def __init__(self) -> None:
        self._events: list[AnyEvent] = []
        self._lock = threading.Lock()
        self.on_event: Callable[[AnyEvent, bool], None] | None = None
        """Told each event as it is appended, and whether its spend is counted already (set
        by the attempt runner)."""
        self.on_phase: Callable[[str], None] | None = None
        """Told when a tool starts (`tool`) and ends (`agent`), for live progress."""
        self.run_stop: Callable[[], str | None] | None = None
        """Why the run stops now (cancel, deadline, a spend or token cap), or None."""
        self.deadline: float | None = None
        """When the attempt's `timeout` passes (`time.monotonic()`), or None."""
        self.price: Price | None = None
        """Prices a model call that reported no cost."""
        self.stopped: LimitHit | None = None
        """The limit `check` found reached (or the last one the agent appended)."""
        self.traceparent: str | None = None
        """The W3C `traceparent` of the attempt's agent span, with OpenTelemetry on."""

    # --- writing ------------------------------------------------------------------------

    def append(self, event: AnyEvent | dict[str, Any], *, counted: bool = False) -> AnyEvent:
        """Add one event (a typed event, or its JSON form with a `type`); returns it. A model
        call's cost and tokens count in the run's spend as it is appended, unless `counted`
        (a provider that settled them in the run's ledger itself)."""
        if isinstance(event, dict):
            event = _EVENT.validate_python(event)
        with self._lock:
            self._events.append(event)
        if isinstance(event, LimitHit):
            self.stopped = event
        if self.on_event is not None:
            self.on_event(event, counted)
        return event

    def extend(self, events: Sequence[AnyEvent]) -> None:
        """Add events written elsewhere and already seen there (a forked agent's), unwatched."""
        with self._lock:
            self._events.extend(events)
        hits = [e for e in events if isinstance(e, LimitHit)]
        if hits:
            self.stopped = hits[-1]

    def model_call(self, *, counted: bool = False, **fields: Any) -> ModelCall:
        """Record one model call (the fields of `ModelCall`): what a provider writes per
        request, and what a user's loop calls after each of its own. Its cost and tokens
        count in the run's spend now (`counted`: already counted by the caller)."""
        event = ModelCall(**fields)
        self.append(event, counted=counted)
        return event

    def message(self, role: str, content: Any, **fields: Any) -> Message:
        """Record a message of the conversation (`tool_calls=` for an assistant's)."""
        event = Message(role=role, content=content, **fields)
        self.append(event)
        return event

    def tool_result(self, content: Any, **fields: Any) -> ToolResult:
        """Record what went back to the model for a tool call (`id=`, `tool=`)."""
        event = ToolResult(content=content, **fields)
        self.append(event)
        return event

    def limit_hit(self, limit: str, reason: str = "") -> LimitHit:
        """Record that a limit ended the loop: `max_turns`, `budget` or `timeout` (the
        attempt is then graded on what it produced, its record says `stopped`)."""
        event = LimitHit(limit=limit, reason=reason)
        self.append(event)
        return event

    @contextmanager
    def tool(self, tool: str, arguments: Any = None, id: str | None = None) -> Iterator[ToolRun]:
        """Time one tool run: `with task.trace.tool("bash", {"cmd": c}) as run:` ... then
        `run.done(exit_status=..., output=...)`; the `tool_call` event is appended when the
        block ends (with `error` when it raised). Live progress shows the attempt in its
        `tool` phase meanwhile."""
        run = ToolRun(tool, arguments, id)
        if self.on_phase is not None:
            self.on_phase("tool")
        try:
            yield run
        except BaseException as exc:
            run.error = run.error or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            if self.on_phase is not None:
                self.on_phase("agent")
            self.append(run.event())

    # --- reading ------------------------------------------------------------------------

    @property
    def events(self) -> tuple[AnyEvent, ...]:
        with self._lock:
            return tuple(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def to_json(self) -> list[dict[str, Any]]:
        return [event_json(event) for event in self.events]

    def usage(self) -> tuple[int, int, float | None]:
        """Tokens in, tokens out and cost of the model calls so far (cost None when no call
        has a known one); priced by `price` where a call reported none."""
        tokens_in = tokens_out = 0
        cost: float | None = None
        for event in self.events:
            if isinstance(event, ModelCall):
                tokens_in += event.input_tokens or 0
                tokens_out += event.output_tokens or 0
                spent = self.cost_of(event)
                if spent is not None:
                    cost = (cost or 0.0) + spent
        return tokens_in, tokens_out, cost

    def cost_of(self, event: ModelCall) -> float | None:
        """A model call's cost: reported, else priced (None when neither is known)."""
        return event_cost(event, self.price)

    # --- limits between turns -----------------------------------------------------------

    def check(self, budget: Any = None) -> None:
        """Raise RunStopped when the run says stop, LimitReached when the attempt's `budget`
        (a `Budget`) or timeout is passed by the model calls so far; each also records a
        `limit_hit` event. `task.check()` calls this with the task's budget."""
        reason = self.run_stop() if self.run_stop is not None else None
        if reason is not None:
            self.limit_hit("run", reason)
            raise RunStopped(reason)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self._reached("timeout", "the task's timeout passed")
        if budget is not None:
            tokens_in, tokens_out, cost = self.usage()
            model_calls = any(isinstance(e, ModelCall) for e in self.events)
            over = budget.over(tokens_in + tokens_out if model_calls else None, cost)
            if over is not None:
                self._reached("budget", over)

    def _reached(self, limit: str, reason: str) -> None:
        self.limit_hit(limit, reason)
        raise LimitReached(limit, reason)


class ToolRun:
    """A tool run being timed by `Trace.tool`; `done` says how it ended."""

    __slots__ = ("arguments", "error", "exit_status", "id", "output", "started", "t0", "tool")

    def __init__(self, tool: str, arguments: Any, id: str | None) -> None:
        self.tool, self.arguments, self.id = tool, arguments, id
        self.exit_status: int | None = None
        self.output: str | None = None
        self.error: str | None = None
        self.started = time.time()
        self.t0 = time.perf_counter()

    def done(
        self, exit_status: int | None = None, output: str | None = None, error: str | None = None
    ) -> None:
        self.exit_status, self.output, self.error = exit_status, output, error

    def event(self) -> ToolCall:
        output, size = self.output, None
        if output is not None and len(output) > OUTPUT_EXCERPT:
            output, size = output[:OUTPUT_EXCERPT], len(output)
        return ToolCall(
            tool=self.tool,
            arguments=self.arguments,
            id=self.id,
            exit_status=self.exit_status,
            duration=time.perf_counter() - self.t0,
            output=output,
            output_size=size,
            error=self.error,
            started_at=self.started,
        )


RENDER_LIMIT = 2000
"""Characters of one event's text `render` keeps."""


def render(events: Sequence[AnyEvent], limit: int = RENDER_LIMIT) -> str:
    """The trace as plain text, an event a paragraph (what a judge `on: trajectory` reads)."""
    return "\n".join(render_event(n, e, limit) for n, e in enumerate(events, 1))


def render_event(number: int, event: AnyEvent, limit: int = RENDER_LIMIT) -> str:
    """One event as text: a heading line, then its content indented."""
    head, body = describe(event)
    lines = [f"[{number}] {head}"]
    if body:
        text = body if len(body) <= limit else body[:limit] + f"… [{len(body) - limit} more]"
        lines += ["    " + line for line in text.splitlines()]
    return "\n".join(lines)


def describe(event: AnyEvent) -> tuple[str, str]:
    """(heading, content) of an event, for people and judges."""
    if isinstance(event, ModelCall):
        facts = [f"{event.input_tokens or 0} in / {event.output_tokens or 0} out"]
        if event.cost is not None:
            facts.append(f"cost {event.cost:.4g}")
        if event.latency is not None:
            facts.append(f"{event.latency:.2f}s")
        if event.finish_reason:
            facts.append(f"finish {event.finish_reason}")
        if event.cached:
            facts.append("cached")
        model = event.model or event.request_model or "?"
        return f"model call {model} ({', '.join(facts)})", ""
    if isinstance(event, ToolCall):
        status = "" if event.exit_status is None else f" → exit {event.exit_status}"
        took = "" if event.duration is None else f" ({event.duration:.2f}s)"
        error = f" error: {event.error}" if event.error else ""
        size = f"\n… [{event.output_size} characters in all]" if event.output_size else ""
        return (
            f"tool {event.tool} {_compact(event.arguments)}{status}{took}{error}",
            (event.output or "") + size,
        )
    if isinstance(event, ToolResult):
        return f"tool result{f' ({event.tool})' if event.tool else ''}", _compact(event.content)
    if isinstance(event, Message):
        calls = "".join(f"\n→ {_compact(call)}" for call in event.tool_calls or ())
        return f"{event.role}", _compact(event.content) + calls
    return f"limit hit: {event.limit}", event.reason


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
