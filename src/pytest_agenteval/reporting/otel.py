"""OpenTelemetry export (the `otel` extra): one trace per attempt, built from its record.

`--agenteval-otel`, or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`),
sends each attempt the process runs to an OTLP/HTTP collector as one trace: a span for the
attempt (the verdict and each grader's as events), a span for its agent call, and under it a
span per model call (the GenAI semantic conventions' `gen_ai.*` attributes) and per tool
call, built from the typed events of the attempt's trace at their own timestamps, so
whatever writes events gets spans. Message content and tool arguments and output are sent
only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. A command agent gets the
agent span as `TRACEPARENT` (W3C), so spans it makes join the attempt's trace.

A dead or hanging collector costs the session's end at most `FLUSH_BOUND` seconds: the last
flush runs in a thread of its own that is given up on then, and the exporter's complaints (its
retries) are kept, not printed, for the one line the session says before its summary.

Off, nothing here is imported: the runner has no exporter to call and no span ids to make.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.identity import item_name
from ..core.model import Task
from ..core.records import AttemptRecord, attempt_reason
from ..core.trace import AnyEvent, Message, ModelCall, ToolCall, read_events

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
INSTALL = "pip install 'pytest-agenteval[otel]'"
SCOPE = "pytest_agenteval"
CONTENT_LIMIT = 4000
"""Characters of a message or a tool's output a span keeps (with content capture on)."""
FLUSH_BOUND = 3.0
"""Seconds the session's end waits for the collector to take the spans not sent yet."""
EXPORT_TIMEOUT = 5.0
"""Seconds one export (its retries included) may take, unless the standard
`OTEL_EXPORTER_OTLP_TIMEOUT` / `..._TRACES_TIMEOUT` says otherwise."""
TIMEOUT_ENV = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
"""Where the OTLP/HTTP exporter logs its failed exports and retries."""


def wanted(flag: bool, environ: Mapping[str, str]) -> bool:
    """Whether to export: `--agenteval-otel`, or an OTLP endpoint in the environment."""
    return flag or any(environ.get(name) for name in ENDPOINT_ENV)


def available() -> bool:
    """Whether the `otel` extra (the SDK and its OTLP/HTTP exporter) is installed."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def new_traceparent() -> str:
    """A W3C `traceparent` for a new trace: version 00, random ids, sampled."""
    return f"00-{_nonzero(128):032x}-{_nonzero(64):016x}-01"


def _nonzero(bits: int) -> int:
    return secrets.randbits(bits) or 1


class Telemetry:
    """Sends each attempt's spans through a batching processor (its own thread); `close`
    flushes them at the session's end, for at most `FLUSH_BOUND` seconds."""

    def __init__(self, exporter: Any = None, content: bool = False) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.content = content
        """Whether message content, tool arguments and output go into spans."""
        self.resource = Resource.create({"service.name": "pytest-agenteval"})
        timeout = None if any(os.environ.get(name) for name in TIMEOUT_ENV) else EXPORT_TIMEOUT
        self.exporter = _Counting(exporter or OTLPSpanExporter(timeout=timeout))
        self.processor = BatchSpanProcessor(self.exporter)  # type: ignore[arg-type]  # duck-typed
        self.queued = 0
        """Spans handed to the processor."""
        self.complaints = _Complaints()
        logging.getLogger(EXPORTER_LOGGER).addFilter(self.complaints)
        self._closed: dict[str, Any] | None = None

    def traceparent(self) -> str:
        """The `traceparent` of a new attempt's agent span."""
        return new_traceparent()

    def export(self, record: AttemptRecord, task: Task) -> None:
        """Queue the spans of one finished attempt (best effort: never the attempt's error)."""
        parent = task.trace.traceparent or new_traceparent()
        for span in attempt_spans(record, parent, self.content, self.resource):
            self.queued += 1
            self.processor.on_end(span)

    def close(self, bound: float = FLUSH_BOUND) -> dict[str, Any]:
        """Flush what is left for at most `bound` seconds, then stop: what was not sent (a
        note for `unsent_line`; the same note again on a second call)."""
        if self._closed is not None:
            return self._closed
        flusher = threading.Thread(target=self._finish, name="agenteval-otel-end", daemon=True)
        flusher.start()
        flusher.join(bound)
        hung = flusher.is_alive()
        if hung:  # ends the exporter's retries; a request that hangs is left to its thread
            with contextlib.suppress(Exception):
                self.exporter.inner.shutdown()
        else:
            logging.getLogger(EXPORTER_LOGGER).removeFilter(self.complaints)
        self._closed = {
            "endpoint": str(getattr(self.exporter.inner, "_endpoint", "") or "its endpoint"),
            "spans": self.queued,
            "unsent": max(0, self.queued - self.exporter.sent),
            "why": f"waited {bound:g} s" if hung else self.complaints.last,
        }
        return self._closed

    def _finish(self) -> None:
        self.processor.force_flush()
        self.processor.shutdown()  # type: ignore[no-untyped-call]


class _Counting:
    """The exporter, counting the spans the collector took."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent = 0

    def export(self, spans: Sequence[ReadableSpan]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.sent += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class _Complaints(logging.Filter):
    """Keeps the exporter's last complaint instead of printing it (its retries would print
    in the middle of the run's output, and after its summary)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.last = _reason(record.getMessage()) or self.last
        return False


def _reason(message: str) -> str | None:
    """What an exporter's complaint says went wrong, short (None: it names nothing)."""
    if found := re.search(r"\[Errno -?\d+\] ([^'\")]+)", message):
        return found[1].strip()
    if "timed out" in message.lower():
        return "timed out"
    if found := re.search(r"code: (\d+)", message):
        return f"HTTP {found[1]}"
    if "due to timeout, max retries or shutdown" in message or "hutdown" in message:
        return None
    return message.split("\n")[0][:120]


def unsent_line(notes: Sequence[Mapping[str, Any]]) -> str | None:
    """The one line the session says when spans were not sent (its processes' `close`
    notes together), or None when every span reached the collector."""
    unsent = sum(int(note.get("unsent", 0)) for note in notes)
    if not unsent:
        return None
    spans = sum(int(note.get("spans", 0)) for note in notes)
    first = next(note for note in notes if note.get("unsent"))
    why = f" ({first['why']})" if first.get("why") else ""
    return (
        f"agenteval: OpenTelemetry: the collector at {first.get('endpoint')} did not answer"
        f"{why}; {unsent} of {spans} spans not sent"
    )


def attempt_spans(
    record: AttemptRecord, traceparent: str, content: bool = False, resource: Any = None
) -> list[ReadableSpan]:
    """The spans of one attempt: its own, its agent call's (the id `traceparent` names) and
    one per model call and tool call of its trace, children of the agent span."""
    from opentelemetry.sdk.trace import Event as SpanEvent
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

    _, trace_hex, agent_hex, _ = traceparent.split("-")
    trace_id = int(trace_hex, 16)
    scope = InstrumentationScope(SCOPE)

    def context(span_id: int) -> SpanContext:
        return SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(1))

    def span(name: str, span_id: int, parent: SpanContext | None, **fields: Any) -> ReadableSpan:
        return ReadableSpan(
            name,
            context(span_id),
            parent,
            resource,
            instrumentation_scope=scope,
            **fields,
        )

    start, end = record.started_at, record.started_at + record.duration
    root = context(_nonzero(64))
    timings = record.timings or {}
    agent_end = start + float(timings.get("agent") or record.duration)
    events = read_events(record.transcript) or []
    failed = Status(StatusCode.ERROR, (record.error or "").split("\n")[0][:200])
    verdicts = [
        SpanEvent(
            "agenteval.grader", _grader_attributes(v.grader, v.passed, v.score, v.reason), _ns(end)
        )
        for v in record.verdicts
    ]
    verdict = SpanEvent(
        "agenteval.verdict",
        {
            "agenteval.status": record.status,
            "agenteval.score": record.score,
            "agenteval.reason": attempt_reason(record)[:500],
        },
        _ns(end),
    )
    spans = [
        span(
            f"attempt {item_name(record.task_id, record.attempt, record.variant)}",
            root.span_id,
            None,
            attributes=_attempt_attributes(record),
            events=[*verdicts, verdict],
            start_time=_ns(start),
            end_time=_ns(end),
            status=failed if record.status == "error" else Status(StatusCode.OK),
        )
    ]
    if not record.regraded:
        agent = context(int(agent_hex, 16))
        spans.append(
            span(
                "invoke_agent",
                agent.span_id,
                root,
                attributes={"gen_ai.operation.name": "invoke_agent"}
                | {"agenteval.agent": str(record.agent.get("used", ""))},
                events=_messages(events) if content else (),
                start_time=_ns(start),
                end_time=_ns(max(agent_end, start)),
                status=failed if record.phase in ("agent", "stopped") else Status(StatusCode.OK),
            )
        )
        for event in events:
            made = _event_span(event, content)
            if made is not None:
                name, kind, begin, finish, attributes, error = made
                spans.append(
                    span(
                        name,
                        _nonzero(64),
                        agent,
                        attributes=attributes,
                        kind=kind,
                        start_time=_ns(begin),
                        end_time=_ns(max(finish, begin)),
                        status=Status(StatusCode.ERROR, error) if error else Status(StatusCode.OK),
                    )
                )
    return spans


def _event_span(event: AnyEvent, content: bool) -> tuple[Any, ...] | None:
    """(name, kind, start, end, attributes, error) of a model or tool call's span."""
    from opentelemetry.trace import SpanKind

    if isinstance(event, ModelCall):
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": event.provider or "_OTHER",
        }
        for name, value in (
            ("gen_ai.request.model", event.request_model or event.model),
            ("gen_ai.response.model", event.model),
            ("gen_ai.usage.input_tokens", event.input_tokens),
            ("gen_ai.usage.output_tokens", event.output_tokens),
            ("gen_ai.usage.cached_input_tokens", event.cached_input_tokens),
            ("agenteval.cost", event.cost),
            ("agenteval.retries", event.retries),
        ):
            if value is not None:
                attributes[name] = value
        if event.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = [event.finish_reason]
        attributes["agenteval.cached"] = event.cached
        begin = event.start
        finish = begin + event.latency if event.latency is not None else event.at
        name = f"chat {event.request_model or event.model or ''}".rstrip()
        return name, SpanKind.CLIENT, begin, finish, attributes, None
    if isinstance(event, ToolCall):
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool}
        if event.id is not None:
            attributes["gen_ai.tool.call.id"] = event.id
        if event.exit_status is not None:
            attributes["agenteval.exit_status"] = event.exit_status
        if content:
            attributes["gen_ai.tool.call.arguments"] = _text(event.arguments)
            if event.output is not None:
                attributes["gen_ai.tool.call.result"] = event.output[:CONTENT_LIMIT]
        begin = event.start
        finish = begin + event.duration if event.duration is not None else event.at
        error = event.error or (
            f"exit status {event.exit_status}" if event.exit_status not in (None, 0) else None
        )
        return f"execute_tool {event.tool}", SpanKind.INTERNAL, begin, finish, attributes, error
    return None


def _messages(events: list[AnyEvent]) -> list[Any]:
    """The conversation as span events of the agent span (content capture only)."""
    from opentelemetry.sdk.trace import Event as SpanEvent

    return [
        SpanEvent(
            f"gen_ai.{event.role}.message",
            {"gen_ai.message.content": _text(event.content)[:CONTENT_LIMIT]},
            _ns(event.at),
        )
        for event in events
        if isinstance(event, Message)
    ]


def _grader_attributes(grader: str, passed: bool, score: float | None, reason: str) -> Any:
    found: dict[str, Any] = {"agenteval.grader": grader, "agenteval.passed": passed}
    if score is not None:
        found["agenteval.score"] = score
    found["agenteval.reason"] = reason[:500]
    return found


def _attempt_attributes(record: AttemptRecord) -> dict[str, Any]:
    found: dict[str, Any] = {
        "agenteval.dataset": record.dataset,
        "agenteval.task_id": record.task_id,
        "agenteval.attempt": record.attempt,
        "agenteval.status": record.status,
        "agenteval.score": record.score,
    }
    if record.variant is not None:
        found["agenteval.variant"] = record.variant
    if record.stopped is not None:
        found["agenteval.stopped"] = record.stopped
    for name, value in (
        ("gen_ai.usage.input_tokens", record.input_tokens),
        ("gen_ai.usage.output_tokens", record.output_tokens),
        ("agenteval.cost", record.cost),
    ):
        if value is not None:
            found[name] = value
    return found


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
