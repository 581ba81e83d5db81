"""Numbers without bound: counts, timeouts and prices past their documented maximum are load
errors at their line, and a task's `timeout` bounds all its tries together."""

from __future__ import annotations

import json
from typing import Any

import pytest

from helpers import DatasetMaker, latest_run
from model_server import ModelServer
from pytest_agenteval.execution.react import MAX_TURNS

KEY = "local-key-abcdefghijkl"
AGENT = {"openai": {"model": "m", "provider": "local"}}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_KEY", KEY)


def _manifest(server: ModelServer, **provider: Any) -> dict[str, Any]:
    endpoint = {"openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY"}}
    return {"providers": {"local": {**endpoint, "retries": 0, "backoff": 0, **provider}}}


def _task(**fields: Any) -> dict[str, Any]:
    return {"input": "<<ok>>", "expected": "ok", "agent": AGENT, **fields}


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"retry": {"on": ["rate_limited"], "max": 1000000000}}, "retry.max"),
        ({"timeout": 1e9}, "at timeout"),
        ({"grader_timeout": 1e9}, "at grader_timeout"),
        ({"retry": {"on": ["rate_limited"], "backoff": 1e9}}, "retry.backoff"),
    ],
)
def test_a_count_or_time_past_its_bound_is_a_located_error(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    fields: dict[str, Any],
    words: str,
) -> None:
    """A retry max, timeout, backoff, turn count or tool timeout past its maximum is an
    error of its task file naming the field and the bound, before any model is asked; the
    other task runs."""
    dataset({"bad.yaml": _task(**fields), "good.yaml": _task()}, manifest=_manifest(model_server))
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    out = result.stdout.str()
    assert "bad.yaml:" in out and words in out and "less than or equal to" in out
    assert len(model_server.requests) == 1
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("react", "words"),
    [
        (
            {"max_turns": 99999999999999999999},
            f"'max_turns' is 99999999999999999999: Input should be less than or equal to {MAX_TURNS}",
        ),
        (
            {"tool_timeout": 1e9},
            "'tool_timeout' is 1000000000.0: Input should be less than or equal to 604800",
        ),
    ],
)
def test_a_react_loop_past_its_bounds_is_a_located_error(
    pytester: pytest.Pytester, model_server: ModelServer, react: dict[str, Any], words: str
) -> None:
    """`max_turns` past 10,000 or a `tool_timeout` past a week is an error at the agent's
    spec, and no model is asked (before, each turn was a paid call until the session ended)."""
    manifest = _manifest(model_server)
    manifest["agent"] = {"react": {"provider": "local", "model": "m", **react}}
    root = DatasetMaker(pytester.path)(
        {"t.yaml": {"input": "q", "expected": "ok"}}, manifest=manifest
    )
    result = pytester.runpytest("--agenteval", "ds")
    out = result.stdout.str() + result.stderr.str()
    assert f"{root.name}/agenteval.yaml:" in out and words in out
    assert model_server.requests == []
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("manifest", "words"),
    [
        ({"pricing": {"m": {"input_per_mtok": 1e300, "output_per_mtok": 1}}}, "input_per_mtok"),
        ({"pricing": {"m": {"input_per_mtok": 1, "output_per_mtok": 1e5}}}, "output_per_mtok"),
        ({"retries": 1000000000}, "retries"),
        ({"timeout": 1e9}, "timeout"),
    ],
)
def test_a_price_or_provider_count_past_its_bound_is_a_located_error(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    manifest: dict[str, Any],
    words: str,
) -> None:
    """A price above $10,000 per million tokens (or infinite), or a provider's retries or
    timeout past its bound, is an error at its manifest line: no model is paid first."""
    base = _manifest(model_server)
    if "pricing" in manifest:
        base.update(manifest)
    else:
        base["providers"]["local"].update(manifest)
    dataset({"t.yaml": _task()}, manifest=base)
    result = pytester.runpytest("--agenteval", "ds")
    out = result.stdout.str() + result.stderr.str()
    assert "agenteval.yaml:" in out and words in out and "less than or equal to" in out
    assert model_server.requests == []
    assert "Traceback" not in out


def test_the_timeout_bounds_all_the_tries(
    pytester: pytest.Pytester, dataset: DatasetMaker, model_server: ModelServer
) -> None:
    """A try that used the whole `timeout` leaves no time for a retry: one request, the
    attempt keeps its timeout error (before, each of the 4 tries had a timeout of its own)."""
    model_server.reset(latency=3.0)
    retry = {"on": ["timeout"], "max": 3, "backoff": 0}
    dataset({"t.yaml": _task(timeout=0.5, retry=retry)}, manifest=_manifest(model_server))
    pytester.runpytest("--agenteval", "ds").assert_outcomes(errors=1)
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    (record,) = map(json.loads, (run / "records.jsonl").read_text().splitlines())
    assert (record["error_class"], record.get("retries")) == ("timeout", None)
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("option", ["--agenteval-min-interval", "--agenteval-interrupt-grace"])
def test_a_time_option_past_a_week_is_a_usage_error(
    pytester: pytest.Pytester, dataset: DatasetMaker, option: str
) -> None:
    """A command-line interval or grace of 1e308 seconds is refused quoting the value and the
    bound, before anything runs."""
    dataset({"t.yaml": {"input": "q", "expected": "ok"}})
    result = pytester.runpytest("--agenteval", "ds", option, "1e308")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'1e308' is not a number of seconds*604800 (a week)*"])


def test_a_request_is_not_retried_past_the_timeout(
    pytester: pytest.Pytester, dataset: DatasetMaker, model_server: ModelServer
) -> None:
    """A 429 whose backoff (5 s at least) would outlast the task's 1 s timeout is not waited
    for: the call fails at once as rate limited, after one request (before, it slept until
    the timeout cancelled it)."""
    model_server.reset(always=429)
    manifest = _manifest(model_server, retries=5, backoff=10)
    dataset({"t.yaml": _task(timeout=1)}, manifest=manifest)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(errors=1)
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    (record,) = map(json.loads, (run / "records.jsonl").read_text().splitlines())
    assert record["error_class"] == "rate_limited"
    assert len(model_server.requests) == 1
