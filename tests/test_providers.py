"""The `openai` agent against a real chat server on 127.0.0.1: answers, records, retries,
refusals, unreadable replies, timeouts, and the SDK missing."""

from __future__ import annotations

from typing import Any

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, latest_record

KEY_ENV = "AGENTEVAL_TEST_KEY"
KEY = "sk-test-a1b2c3d4e5f6-not-a-real-key"


def openai_agent(server: ChatServer, **options: Any) -> dict[str, Any]:
    """A manifest `agent:` for the test server, with the test key variable."""
    return {
        "openai": {
            "model": "test-model",
            "base_url": server.base_url,
            "api_key_env": KEY_ENV,
            "backoff": 0.01,
            **options,
        }
    }


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def test_answers_pass_and_fail_and_the_record_keeps_the_call(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """A right answer passes, a wrong one fails; the record keeps usage, the served model,
    the finish reason, the messages sent (system first) and zero retries; the key is sent."""
    cached = {"prompt_tokens_details": {"cached_tokens": 40}}
    chat_server.reset(usage={"prompt_tokens": 100, "completion_tokens": 20, **cached})
    dataset(
        {
            "right.yaml": {"input": "What is 6*7? <<42>>", "expected": "42"},
            "wrong.yaml": {"input": "What is 6*7? <<41>>", "expected": "42"},
            "chat.yaml": {
                "input": [{"role": "user", "content": "hi <<hello>>"}],
                "expected": "hello",
            },
        },
        manifest={"agent": openai_agent(chat_server, system="Answer briefly.", temperature=0.2)},
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=2, failed=1)
    record = latest_record(pytester.path, "right", 0)
    assert record["output"] == "42"
    assert record["usage"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "cost": None,
        "cached_input_tokens": 40,
        "model": "served-model-1",
    }
    assert record["call"] == {"model": "served-model-1", "finish_reason": "stop", "retries": 0}
    events = record["transcript"]
    assert [(e["type"], e.get("role")) for e in events] == [
        ("message", "system"),
        ("message", "user"),
        ("model_call", None),
        ("message", "assistant"),
    ]
    assert [e["content"] for e in events if e["type"] == "message"] == [
        "Answer briefly.",
        "What is 6*7? <<42>>",
        "42",
    ]
    call = events[2]
    assert (call["provider"], call["request_model"], call["model"]) == (
        "openai",
        "test-model",
        "served-model-1",
    )
    assert (call["input_tokens"], call["output_tokens"], call["cached_input_tokens"]) == (
        100,
        20,
        40,
    )
    assert call["finish_reason"] == "stop" and call["cached"] is False and call["retries"] == 0
    assert call["started_at"] <= call["at"] and call["latency"] >= 0
    chat = next(r for r in chat_server.requests if r["messages"][-1]["content"].startswith("hi"))
    assert chat["messages"] == [{"role": "user", "content": "hi <<hello>>"}]
    assert chat["model"] == "test-model" and chat["temperature"] == 0.2
    assert set(chat_server.auth) == {f"Bearer {KEY}"}


def test_a_429_with_retry_after_is_retried_and_counted(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """A 429 is retried after the server's Retry-After (not the 30 s backoff, which would
    overrun the task's timeout), and the record counts the retry."""
    chat_server.reset(statuses=[429], retry_after="0.05")
    dataset(
        {"t.yaml": {"input": "<<ok>>", "expected": "ok", "timeout": 10}},
        manifest={"agent": openai_agent(chat_server, backoff=30)},
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    assert len(chat_server.requests) == 2
    assert latest_record(pytester.path, "t", 0)["call"]["retries"] == 1


def test_server_errors_until_retries_run_out_are_an_error_not_a_failure(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """500s are retried `retries` times, then the attempt is an error saying so."""
    chat_server.reset(always=500)
    dataset(
        {"t.yaml": {"input": "<<ok>>", "expected": "ok"}},
        manifest={"agent": openai_agent(chat_server, retries=2)},
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    assert len(chat_server.requests) == 3
    result.stdout.fnmatch_lines(["*failed (after 2 retries): HTTP 500: scripted status 500*"])
    record = latest_record(pytester.path, "t", 0)
    assert (record["status"], record["phase"], record["error_type"]) == (
        "error",
        "agent",
        "ProviderError",
    )


def test_refusals_are_not_retried_and_say_what_to_check(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """A 401 is tried once and names the key variable; a 404 names the model and base_url."""
    chat_server.reset(statuses=[401, 404])
    dataset(
        {
            "a.yaml": {"input": "<<ok>>", "expected": "ok"},
            "b.yaml": {"input": "<<ok>>", "expected": "ok"},
        },
        manifest={"agent": openai_agent(chat_server)},
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=2)
    assert len(chat_server.requests) == 2
    result.stdout.fnmatch_lines(
        [f"*Hint: check the API key in the environment variable {KEY_ENV} (api_key_env)*"]
    )
    result.stdout.fnmatch_lines(
        [f"*Hint: check the model name 'test-model' and base_url {chat_server.base_url}*"]
    )


@pytest.mark.slow
def test_malformed_replies_and_slow_replies_are_errors(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """A reply that is not JSON is an error (not retried); a reply slower than the task's
    timeout ends the attempt as an error."""
    chat_server.reset(malformed=True)
    dataset(
        {"t.yaml": {"input": "<<ok>>", "expected": "ok"}},
        manifest={"agent": openai_agent(chat_server)},
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the reply is not a chat completion*"])
    assert len(chat_server.requests) == 1

    chat_server.reset(latency=5)
    dataset(
        {"t.yaml": {"input": "<<ok>>", "expected": "ok", "timeout": 0.5}},
        manifest={"agent": openai_agent(chat_server)},
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*agent timed out after 0.5s*"])


def test_without_the_openai_package_agent_and_judge_work(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With `openai` not importable, the agent and the judge still run: they speak HTTP
    through the provider seam, no SDK needed."""
    blocker = pytester.mkdir("blocker")
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['openai'] = None\n")
    monkeypatch.setenv("PYTHONPATH", str(blocker))
    rubric = 'right? <<{"score": 1, "reason": "ok"}>>'
    dataset(
        {
            "t.yaml": {"input": "<<ok>>", "expected": "ok"},
            "j.yaml": {"input": "<<fine>>", "graders": [{"judge": rubric}]},
        },
        manifest={
            "agent": openai_agent(chat_server),
            "judge": {"model": "m", "base_url": chat_server.base_url, "api_key_env": KEY_ENV},
        },
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=2)
    assert len(chat_server.requests) == 3


def test_sessions_in_one_process_do_not_share_connections(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """Two sessions in one process (as `agenteval validate` or an IDE may run them) each
    answer, on their own event loop's connections."""
    import openai  # noqa: F401 - kept loaded across both inline runs

    import pytest_agenteval.providers.openai  # noqa: F401 - loaded once for both runs

    dataset(
        {"t.yaml": {"input": "<<ok>>", "expected": "ok"}},
        manifest={"agent": openai_agent(chat_server)},
    )
    for _ in range(2):
        pytester.inline_run("--agenteval", "ds").assertoutcome(passed=1)
    assert len(chat_server.requests) == 2
