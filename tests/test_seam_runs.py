"""Runs whose model calls go through the provider seam: a user's agent through `task.llm()`,
the `openai` agent and the judge naming a manifest provider, its limit held by all of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, latest_run, run_killing_holder, summary_of
from model_server import ModelServer

LLM_AGENT = """
def run(task):
    client = task.llm()
    first = client.chat([{"role": "user", "content": "<<half>>"}])
    second = client.chat([{"role": "user", "content": "<<" + first.text + "-done>>"}])
    return second.text
"""


def _records(root: Path) -> list[dict[str, object]]:
    run = root / ".pytest_cache/agenteval/runs" / latest_run(root) / "records.jsonl"
    return [json.loads(line) for line in run.read_text().splitlines() if line.strip()]


def test_user_agent_calls_are_summed_and_priced(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Python agent calling task.llm().chat twice per attempt: its record carries both
    calls' usage summed and priced, without the agent reporting any."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    root = dataset(
        {"t.yaml": {"input": "q", "expected": "half-done", "agent": "llm_agent:run"}},
        manifest={
            "providers": {
                "local": {
                    "openai": {
                        "base_url": model_server.base_url,
                        "api_key_env": "LOCAL_KEY",
                        "model": "m1",
                    },
                    "limits": {"max_in_flight": 2},
                }
            },
            "pricing": {"m1": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}},
        },
    )
    (root / "llm_agent.py").write_text(LLM_AGENT)
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    result.assert_outcomes(passed=2)
    records = _records(pytester.path)
    assert len(model_server.requests) == 4
    for record in records:
        usage = record["usage"]
        assert isinstance(usage, dict)
        assert (usage["input_tokens"], usage["output_tokens"]) == (200, 40)
        assert usage["cost"] == pytest.approx((200 * 1.0 + 40 * 10.0) / 1e6)


def test_named_provider_holds_agents_and_judges_together(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The openai agent and the judge naming one provider with max_in_flight 2, concurrency
    8: the server never sees more than 2 at once, and every attempt passes."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    model_server.reset(latency=0.05)
    rubric = 'good? <<{"score": 1, "reason": "ok"}>>'
    tasks = {
        f"t{i}.yaml": {
            "input": "<<ok>>",
            "expected": "ok",
            "graders": ["equals", {"judge": rubric}],
        }
        for i in range(6)
    }
    dataset(
        tasks,
        manifest={
            "providers": {
                "local": {
                    "openai": {"base_url": model_server.base_url, "api_key_env": "LOCAL_KEY"},
                    "limits": {"max_in_flight": 2},
                }
            },
            "agent": {"openai": {"model": "m1", "provider": "local"}},
            "judge": {"model": "j1", "provider": "local"},
        },
    )
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-concurrency", "8")
    result.assert_outcomes(passed=6)
    assert len(model_server.requests) == 12
    assert model_server.max_concurrent <= 2


def _shared_manifest(server: ModelServer, max_in_flight: int) -> dict[str, Any]:
    return {
        "providers": {
            "local": {
                "openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY"},
                "limits": {"max_in_flight": max_in_flight},
                "backoff": 0.05,
                "retries": 8,
            }
        },
        "variants": {
            "a": {"openai": {"model": "m1", "provider": "local"}},
            "b": {"openai": {"model": "m2", "provider": "local"}},
        },
        "agent": None,
        "judge": {"model": "j1", "provider": "local"},
    }


def _judged_tasks(n: int) -> dict[str, Any]:
    rubric = 'good? <<{"score": 1, "reason": "ok"}>>'
    return {
        f"t{i}.yaml": {
            "input": "<<ok>>",
            "expected": "ok",
            "graders": ["equals", {"judge": rubric}],
        }
        for i in range(n)
    }


@pytest.mark.slow
def test_provider_limit_holds_across_variants_judges_and_workers(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two openai variants and a judge on one provider with max_in_flight 3, concurrency 16,
    -n 2: the server never sees more than 3 requests at once."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    model_server.reset(latency=0.05)
    dataset(_judged_tasks(8), manifest=_shared_manifest(model_server, 3))
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "16", "-n", "2"
    )
    result.assert_outcomes(passed=16)
    assert len(model_server.requests) == 32
    assert model_server.max_concurrent <= 3


@pytest.mark.slow
def test_a_429_shrinks_the_shared_limit_until_they_stop(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that answers 429 above 4 requests in flight, max_in_flight 16: the run ends
    with no error, and the provider's reported limit settles at 4 or less."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    model_server.reset(latency=0.05, reject_above=4)
    dataset(_judged_tasks(10), manifest=_shared_manifest(model_server, 16))
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "16", "-n", "2"
    )
    result.assert_outcomes(passed=20)
    assert model_server.rate_limited > 0
    summary = summary_of(pytester)
    (provider,) = summary["providers"].values()
    assert provider["limit"] <= 4 and provider["rate_limited"] == model_server.rate_limited
    result.stdout.fnmatch_lines(["*provider local: limit * of 16 in flight, * 429s*"])
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    progress = json.loads((run / "progress.json").read_text())
    assert progress["providers"]["local"]["rate_limited"] == model_server.rate_limited


def _priced_requests(server: ModelServer) -> float:
    """What the server was asked for and answered, at the test's prices ($1000 per million
    input and output tokens)."""
    per_call = (server.script.input_tokens + server.script.output_tokens) * 1000 / 1e6
    return per_call * len(server.requests)


@pytest.mark.parametrize(
    "workers",
    [pytest.param([], id="alone"), pytest.param(["-n", "2"], id="xdist", marks=pytest.mark.slow)],
)
def test_a_cost_cap_is_never_passed(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    workers: list[str],
) -> None:
    """Prices and max_tokens known, concurrency 16: every call reserves its worst case before
    it is sent, so what the server was asked for, priced, never exceeds the cap; the run
    stops with `budget`, and a resume with a higher cap runs exactly the rest."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    model_server.reset(latency=0.05, input_tokens=10, output_tokens=20)
    tasks = {f"t{i:02}.yaml": {"input": "<<ok>>", "expected": "ok"} for i in range(30)}
    dataset(
        tasks,
        manifest={
            "providers": {
                "local": {"openai": {"base_url": model_server.base_url, "api_key_env": "LOCAL_KEY"}}
            },
            "agent": {"openai": {"model": "m1", "provider": "local", "max_tokens": 20}},
            "pricing": {"m1": {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}},
        },
    )
    args = ["--agenteval", "ds", "--agenteval-concurrency", "16", *workers]
    first = pytester.runpytest_subprocess(*args, "--agenteval-max-cost", "0.5")
    assert first.ret != 0
    assert 0 < _priced_requests(model_server) <= 0.5
    assert summary_of(pytester)["status"] == "budget"
    asked = len(model_server.requests)
    passed = sum(r["status"] == "pass" for r in _records(pytester.path))
    assert 0 < passed <= asked
    second = pytester.runpytest_subprocess(*args, "--resume-suite", "--agenteval-max-cost", "100")
    assert second.ret == 0
    assert len(model_server.requests) - asked == 30 - passed  # exactly the rest
    assert summary_of(pytester)["status"] == "complete"


KILLED_AGENT = """
import asyncio, os, pathlib

async def run(task):
    pathlib.Path(os.environ["HOLDER_PID"]).write_text(str(os.getpid()))
    client = task.llm()
    calls = [client.achat([{"role": "user", "content": "<<held>>"}]) for _ in range(2)]
    await asyncio.gather(*calls)  # killed while both are at the server
    return "held"
"""

WAITING_AGENT = """
import asyncio, os, pathlib

async def run(task):
    killed = pathlib.Path(os.environ["HOLDER_KILLED"])
    for _ in range(3000):  # at most 30 s, in case the other worker never starts
        if killed.exists():
            break
        await asyncio.sleep(0.01)
    client = task.llm()
    calls = [client.achat([{"role": "user", "content": "<<ok>>"}]) for _ in range(2)]
    replies = await asyncio.gather(*calls)
    return replies[0].text
"""


def test_a_killed_workers_requests_keep_its_provider_slots(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker SIGKILLed with its two requests at the server (max_in_flight 2): the other
    worker's calls wait for the dead calls' timeout instead of taking their slots at once,
    so the server never has more than 2 requests in flight."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    pid_file, killed = pytester.path / "holder.pid", pytester.path / "holder.killed"
    monkeypatch.setenv("HOLDER_PID", str(pid_file))
    monkeypatch.setenv("HOLDER_KILLED", str(killed))
    # the dead worker's requests stay 0.5 s at the server; their timeout (4 s) leaves room for
    # a server slow to let them go on a loaded machine
    chat_server.reset(latency=0.5)
    root = dataset(
        {
            "t0.yaml": {"input": "q", "expected": "held", "agent": "killed:run"},
            "t1.yaml": {"input": "q", "expected": "ok", "agent": "waiting:run"},
        },
        manifest={
            "providers": {
                "local": {
                    "openai": {
                        "base_url": chat_server.base_url,
                        "api_key_env": "LOCAL_KEY",
                        "model": "m1",
                    },
                    "limits": {"max_in_flight": 2},
                    "timeout": 4.0,
                    "retries": 0,
                }
            },
            "agent": None,
        },
    )
    (root / "killed.py").write_text(KILLED_AGENT)
    (root / "waiting.py").write_text(WAITING_AGENT)

    result = run_killing_holder(  # both of its requests at the server: SIGKILL its worker
        pytester, lambda: len(chat_server.requests), 2, pid_file, killed
    )
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'ds/t0.yaml::t0*"])
    result.assert_outcomes(passed=1, errors=1)
    assert len(chat_server.requests) == 4
    assert chat_server.max_concurrent == 2


TWO_CALLS = """
def run(task):
    client = task.llm()
    first = client.chat([{"role": "user", "content": "<<half>>"}], max_tokens=20)
    return client.chat([{"role": "user", "content": "<<" + first.text + ">>"}], max_tokens=20).text
"""


def test_a_call_the_cap_refuses_mid_attempt_ends_the_run_budget(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token cap that admits an attempt's first call and refuses its second: every planned
    attempt has a record, yet the run is `budget`, exit 2, with the stop line saying the
    attempt it ended mid-way is recorded as stopped (it read `complete`, exit 1)."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    model_server.reset(input_tokens=500, output_tokens=20)
    root = dataset(
        {"t.yaml": {"input": "q", "expected": "half", "agent": "two_calls:run"}},
        manifest={
            "providers": {
                "local": {
                    "openai": {
                        "base_url": model_server.base_url,
                        "api_key_env": "LOCAL_KEY",
                        "model": "m1",
                    }
                }
            }
        },
    )
    (root / "two_calls.py").write_text(TWO_CALLS)
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-max-tokens", "400", "--agenteval-no-probe"
    )
    result.assert_outcomes(errors=1)
    assert len(model_server.requests) == 1
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "agenteval: stopped (token cap reached*): attempts not started were skipped, "
            "the 1 it ended mid-way are recorded as stopped;*"
        ]
    )
    (record,) = _records(pytester.path)
    assert (record["status"], record["phase"]) == ("error", "stopped")
    assert summary_of(pytester)["status"] == "budget"
