"""OpenTelemetry export against a real OTLP/HTTP receiver on 127.0.0.1: each attempt arrives
as one trace (the attempt, its agent call, a span per model call with the GenAI usage
attributes and per tool call, the verdict as an event), and a command agent's own span,
started from TRACEPARENT with the otel SDK, is in its attempt's trace."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from helpers import WORKERS, DatasetMaker, run_layout
from otlp_receiver import HangingCollector, OtlpReceiver, Span, dead_endpoint
from test_traces import LOOP

COMMAND_AGENT = """
import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

provider = TracerProvider(resource=Resource.create({"service.name": "command-agent"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
parent = TraceContextTextMapPropagator().extract({"traceparent": os.environ["TRACEPARENT"]})
with provider.get_tracer("agent").start_as_current_span("command-agent-work", context=parent):
    print("done")
provider.shutdown()
"""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server
    server.stop()


def by_name(spans: list[Span]) -> dict[str, list[Span]]:
    found: dict[str, list[Span]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


@pytest.mark.parametrize("workers", WORKERS)
def test_each_attempt_arrives_as_one_trace_with_its_model_and_tool_calls(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    workers: list[str],
) -> None:
    """The standard OTLP endpoint variable turns export on: the loop's attempt is one trace
    whose chat spans carry the usage and sit under the agent span; the command agent's span
    joins its attempt's trace under the agent span TRACEPARENT named; no content is sent."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    root = dataset(
        {
            "loop.yaml": {"input": "q", "expected": "done"},
            "command.yaml": {
                "input": "q",
                "expected": "done",
                "agent": {"command": [sys.executable, "{dataset}/command_agent.py"]},
            },
        },
        manifest={"agent": "loop:loop"},
    )
    (root / "loop.py").write_text(LOOP)
    (root / "command_agent.py").write_text(COMMAND_AGENT)
    run_layout(pytester, "--agenteval", "ds", *workers).assert_outcomes(passed=2)
    assert set(receiver.paths) == {"/v1/traces"}
    traces = receiver.traces()
    assert len(traces) == 2
    loop = next(spans for spans in traces.values() if len(spans) > 3)
    named = by_name(loop)
    (attempt,) = named["attempt loop[attempt-0]"]
    (agent,) = named["invoke_agent"]
    assert attempt.parent_id == "" and agent.parent_id == attempt.span_id
    assert attempt.attributes["agenteval.status"] == "pass"
    assert attempt.attributes["agenteval.task_id"] == "loop"
    verdict = dict(attempt.events)["agenteval.verdict"]
    assert verdict["agenteval.status"] == "pass" and verdict["agenteval.score"] == 1.0
    chats = named["chat m1"]
    assert len(chats) == 3
    for chat in chats:
        assert chat.parent_id == agent.span_id
        assert chat.attributes["gen_ai.usage.input_tokens"] == 100
        assert chat.attributes["gen_ai.usage.output_tokens"] == 10
        assert chat.attributes["gen_ai.system"] == "scripted"
        assert chat.attributes["gen_ai.response.model"] == "m1"
        assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    tools = named["execute_tool bash"]
    assert len(tools) == 3 and all(t.parent_id == agent.span_id for t in tools)
    assert all("gen_ai.tool.call.arguments" not in t.attributes for t in tools)
    command = next(spans for spans in traces.values() if spans is not loop)
    named = by_name(command)
    (agent,) = named["invoke_agent"]
    (work,) = named["command-agent-work"]
    assert work.parent_id == agent.span_id and work.service == "command-agent"
    assert {s.service for s in named["attempt command[attempt-0]"]} == {"pytest-agenteval"}


def test_content_is_sent_only_when_asked(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With `--agenteval-otel` and the GenAI content variable set, tool spans carry their
    arguments and output and the agent span the messages."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint + "/v1/traces")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    root = dataset(
        {"loop.yaml": {"input": "q", "expected": "done"}}, manifest={"agent": "loop:loop"}
    )
    (root / "loop.py").write_text(LOOP)
    pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-otel").assert_outcomes(passed=1)
    named = by_name(receiver.spans)
    assert named["execute_tool bash"][1].attributes["gen_ai.tool.call.arguments"] == (
        '{"cmd": "pytest -q"}'
    )
    assert "line 0" in named["execute_tool bash"][1].attributes["gen_ai.tool.call.result"]
    messages = [name for name, _ in named["invoke_agent"][0].events]
    assert messages == ["gen_ai.assistant.message"] * 3


def test_asking_for_otel_without_the_extra_is_a_usage_error(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--agenteval-otel` where the SDK cannot be imported says how to install it."""
    dataset({"t.yaml": {"input": "q", "metadata": {"answer": "ok"}}})
    (pytester.path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-otel")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agenteval-otel needs*pip install 'pytest-agenteval?otel?'"])


@pytest.fixture(params=["dead", "hanging"])
def unanswering(request: pytest.FixtureRequest) -> Iterator[str]:
    """The endpoint of a collector that is dead (nothing listens) or hangs (never answers)."""
    if request.param == "dead":
        yield dead_endpoint()
        return
    collector = HangingCollector().start()
    yield collector.endpoint
    collector.stop()


@pytest.mark.parametrize("workers", WORKERS)
def test_a_collector_that_does_not_answer_is_said_once_before_the_summary(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    unanswering: str,
    monkeypatch: pytest.MonkeyPatch,
    workers: list[str],
) -> None:
    """A dead or hanging collector: the session's end waits for it a bounded time, then says
    in one line before the summary how many spans were not sent, and the exporter's retries
    and failures are printed nowhere (not after the summary either)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", unanswering)
    root = dataset(
        {"loop.yaml": {"input": "q", "expected": "done"}}, manifest={"agent": "loop:loop"}
    )
    (root / "loop.py").write_text(LOOP)
    result = pytester.runpytest_subprocess("--agenteval", "ds", *workers)
    result.assert_outcomes(passed=1)
    said = f"agenteval: OpenTelemetry: the collector at {unanswering}/v1/traces did not answer"
    lines = result.outlines
    (line,) = [i for i, text in enumerate(lines) if text.startswith(said)]
    assert lines[line].endswith("; 8 of 8 spans not sent")
    assert lines[line + 1].startswith("=") and "agenteval" in lines[line + 1]  # the summary's
    everything = "\n".join(result.outlines + result.errlines)
    for exporters_own in ("Transient error", "Failed to export", "retrying in", "Shutdown"):
        assert exporters_own not in everything
