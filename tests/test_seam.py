"""The provider seam against a real local server: both wire formats, tool calls, retries,
keep-alive, errors, and the attempt's trace."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from model_server import ModelServer
from pytest_agenteval.core.chat import ChatMessage, ToolSpec
from pytest_agenteval.core.errors import AgentError
from pytest_agenteval.core.llm import ProviderSpec
from pytest_agenteval.core.trace import ModelCall, Trace
from pytest_agenteval.providers import seam
from pytest_agenteval.providers.bound import attempt_llm
from pytest_agenteval.providers.client import ProviderError

READ = ToolSpec(
    "read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}
)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("LOCAL_KEY", "sk-local-test-key-0123456789")
    yield
    seam.forget()


def _providers(server: ModelServer, **limits: int) -> dict[str, ProviderSpec]:
    return {
        "oa": ProviderSpec.model_validate(
            {
                "openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY", "model": "m1"},
                "limits": limits,
                "backoff": 0,
            }
        ),
        "an": ProviderSpec.model_validate(
            {
                "anthropic": {"base_url": server.root, "api_key_env": "LOCAL_KEY", "model": "c1"},
                "limits": limits,
                "backoff": 0,
            }
        ),
    }


@pytest.mark.parametrize("name", ["oa", "an"])
def test_tool_call_round_trip(model_server: ModelServer, name: str) -> None:
    """A tool call asked for, its result sent back, the final answer: in both wire formats."""
    client = attempt_llm(_providers(model_server), name, Trace())
    messages: list[ChatMessage] = [
        ChatMessage("system", "be brief"),
        ChatMessage("user", 'look <<call read {"path": "a.txt"}>>'),
    ]
    first = client.chat(messages, tools=[READ])
    assert [(c.name, dict(c.arguments)) for c in first.tool_calls] == [("read", {"path": "a.txt"})]
    call = first.tool_calls[0]
    messages += [first.message(), ChatMessage("tool", "file says <<done>>", tool_call_id=call.id)]
    second = client.chat(messages, tools=[READ])
    assert second.text == "done" and not second.tool_calls
    sent = model_server.requests[1]
    if name == "oa":
        assert sent["messages"][2]["tool_calls"][0]["function"]["name"] == "read"
        assert sent["messages"][3] == {
            "role": "tool",
            "tool_call_id": call.id,
            "content": "file says <<done>>",
        }
        assert sent["tools"][0]["function"]["parameters"]["type"] == "object"
    else:
        assert sent["system"] == "be brief" and "max_tokens" in sent
        assert sent["messages"][1]["content"][0]["type"] == "tool_use"
        assert sent["messages"][2]["content"][0]["tool_use_id"] == call.id
        assert sent["tools"][0]["input_schema"]["type"] == "object"


def test_calls_are_trace_events_with_usage(model_server: ModelServer) -> None:
    """Each call is a model_call event with the reply's usage and the provider's name."""
    trace = Trace()
    client = attempt_llm(_providers(model_server), "oa", trace)
    client.chat([{"role": "user", "content": "<<hi>>"}])
    reply = client.chat([{"role": "user", "content": "<<again>>"}], model="m2")
    calls = [e for e in trace.events if isinstance(e, ModelCall)]
    assert [(c.provider, c.request_model, c.input_tokens, c.output_tokens) for c in calls] == [
        ("oa", "m1", 100, 20),
        ("oa", "m2", 100, 20),
    ]
    assert reply.text == "again" and reply.model == "m2"


def test_async_calls_share_keep_alive_connections(model_server: ModelServer) -> None:
    """Many calls in turn on one loop reuse one connection."""
    client = attempt_llm(_providers(model_server), "oa", Trace())

    async def calls() -> None:
        for _ in range(5):
            await client.achat([{"role": "user", "content": "<<x>>"}])
        await asyncio.gather(
            *(client.achat([{"role": "user", "content": "<<y>>"}]) for _ in range(4))
        )

    asyncio.run(calls())
    assert model_server.connections <= 4


def test_retries_then_answer(model_server: ModelServer) -> None:
    """A 429 and a 503 are retried; the reply says how many retries it took."""
    model_server.reset(statuses=[429, 503])
    reply = attempt_llm(_providers(model_server), "oa", Trace()).chat(
        [{"role": "user", "content": "<<ok>>"}]
    )
    assert (reply.text, reply.retries) == ("ok", 2)


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ({"always": 500}, "HTTP 500"),
        ({"malformed": True}, "not a chat completion"),
        ({"models": ["other"]}, "HTTP 404"),
    ],
)
def test_failures_are_provider_errors(
    model_server: ModelServer, script: dict[str, object], said: str
) -> None:
    """Out of retries, unreadable, or refused: a ProviderError naming model and server, the
    key never in it."""
    model_server.reset(**script)
    with pytest.raises(ProviderError) as raised:
        attempt_llm(_providers(model_server), "oa", Trace()).chat(
            [{"role": "user", "content": "x"}]
        )
    assert said in raised.value.message and "'m1'" in raised.value.message
    assert "sk-local" not in raised.value.message + raised.value.detail


def test_unknown_provider_names_the_choices(model_server: ModelServer) -> None:
    """task.llm('o') for a manifest with `oa`: an agent error with a did-you-mean."""
    with pytest.raises(AgentError) as raised:
        attempt_llm(_providers(model_server), "o", Trace())
    assert "did you mean 'oa'" in raised.value.detail


def test_in_flight_limit_holds_in_process(model_server: ModelServer) -> None:
    """max_in_flight bounds the provider's calls at the server, whichever client makes them."""
    model_server.reset(latency=0.05)
    table = _providers(model_server, max_in_flight=2)
    clients = [attempt_llm(table, "oa", Trace()) for _ in range(3)]

    async def calls() -> None:
        await asyncio.gather(
            *(c.achat([{"role": "user", "content": "<<z>>"}]) for c in clients * 3)
        )

    asyncio.run(calls())
    assert model_server.max_concurrent == 2


def test_the_anthropic_body_has_no_empty_turn_and_marks_failed_tools() -> None:
    """An empty assistant message is left out and the user messages around it share one turn
    (the Messages API refuses empty content); a failed tool's result says `is_error`, also
    from an OpenAI-style dict, and a tool that worked does not."""
    from pytest_agenteval.providers.wire import WIRES, as_message

    messages = [
        ChatMessage("user", "q"),
        ChatMessage("assistant", ""),
        ChatMessage("user", "go on"),
        as_message({"role": "assistant", "content": "", "tool_calls": [_call("a"), _call("b")]}),
        as_message({"role": "tool", "tool_call_id": "a", "content": "boom", "is_error": True}),
        ChatMessage("tool", "fine", tool_call_id="b"),
    ]
    body = WIRES["anthropic"].body("m", messages, (), {})
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "q"},
        {"type": "text", "text": "go on"},
    ]
    failed, fine = body["messages"][2]["content"]
    assert failed == {
        "type": "tool_result",
        "tool_use_id": "a",
        "content": "boom",
        "is_error": True,
    }
    assert fine == {"type": "tool_result", "tool_use_id": "b", "content": "fine"}


def _call(id: str) -> dict[str, object]:
    return {"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
