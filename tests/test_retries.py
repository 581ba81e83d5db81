"""In-session retries (`retry:`): an attempt that ends in a named error class runs again in the
same session against a real model server that answers 429 or 500 first; the earlier tries stay
in the record's `previous`, summary.json counts the attempts that needed a retry, a bad `retry:`
is a clear task error, and a resume does not run a retried attempt again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from helpers import DatasetMaker, latest_run, summary_of
from model_server import ModelServer

KEY = "local-key-abcdefghijkl"
AGENT = {"openai": {"model": "m", "provider": "local"}}


def _manifest(server: ModelServer, **defaults: Any) -> dict[str, Any]:
    provider = {"openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY"}}
    return {
        "providers": {"local": {**provider, "retries": 0, "backoff": 0}},
        **({"defaults": defaults} if defaults else {}),
    }


def _task(**fields: Any) -> dict[str, Any]:
    return {"input": "<<ok>>", "expected": "ok", "agent": AGENT, **fields}


def _records(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    lines = (run / "records.jsonl").read_text().splitlines()
    return {r["task_id"]: r for r in map(json.loads, lines)}


RETRY = {"on": ["rate_limited", "provider_error"], "max": 2, "backoff": "0s"}


def test_a_retried_attempt_passes_and_keeps_its_earlier_try(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 429, then an answer: the attempt passes in one session, its record keeps the 429's
    try in `previous`, summary.json counts one retried attempt, the terminal says so; a resume
    reuses it without a request."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(statuses=[429])
    dataset({"a.yaml": _task(retry=RETRY)}, manifest=_manifest(model_server))
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 attempt needed a retry*"])
    record = _records(pytester)["a"]
    assert record["status"] == "pass" and record["retries"] == 1
    (earlier,) = record["previous"]
    assert (earlier["status"], earlier["error_class"]) == ("error", "rate_limited")
    assert summary_of(pytester)["counts"]["retried"] == 1
    assert len(model_server.requests) == 2
    md = next((pytester.path / ".pytest_cache/agenteval/runs").glob("*/summary.md")).read_text()
    assert "1 attempt needed a retry" in md

    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")  # nothing runs again
    result.assert_outcomes(passed=1)
    assert len(model_server.requests) == 2


def test_retries_stop_at_max_with_every_try_kept(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that always answers 500: `max: 2` makes three tries, the record is a
    `provider_error` with both earlier tries in `previous`; a task whose `retry:` (here the
    manifest's default, replaced by its own) does not name the class is tried once."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(always=500)
    tasks = {
        "kept.yaml": _task(),
        "other.yaml": _task(retry={"on": ["timeout"], "max": 3, "backoff": 0}),
    }
    dataset(tasks, manifest=_manifest(model_server, retry=RETRY))
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=2)
    records = _records(pytester)
    kept, other = records["kept"], records["other"]
    assert kept["status"] == "error" and kept.get("error_class", "provider_error") == (
        "provider_error"
    )
    assert kept["retries"] == 2 and len(kept["previous"]) == 2
    assert all(p["status"] == "error" for p in kept["previous"])
    assert "retries" not in other and other["previous"] == []
    assert len(model_server.requests) == 4  # three tries and one
    assert summary_of(pytester)["counts"]["retried"] == 1


@pytest.mark.parametrize(
    ("retry", "words"),
    [
        ({"on": ["bogus"]}, "rate_limited, provider_error, timeout, sandbox_error"),
        ({"on": ["timeout"], "max": 0}, "retry.max"),
        ({"on": ["timeout"], "backoff": "soon"}, "is not a duration"),
        ({"max": 2}, "at retry: missing required field 'on'"),
    ],
)
def test_a_bad_retry_is_a_clear_error_and_the_other_tasks_run(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    retry: dict[str, Any],
    words: str,
) -> None:
    """A `retry:` naming an unknown class (the valid ones listed), a bad max, backoff or no
    `on:` is an error of its file naming the field; the other task still runs."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    dataset(
        {"bad.yaml": _task(retry=retry), "good.yaml": _task()}, manifest=_manifest(model_server)
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    out = result.stdout.str()
    assert "bad.yaml" in out and words in out


@pytest.mark.slow
def test_retries_under_xdist(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under `-n 2`: two 429s among four attempts make exactly two retries, and every
    attempt passes."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(statuses=[429, 429])
    tasks = {f"t{i}.yaml": _task() for i in range(4)}
    dataset(tasks, manifest=_manifest(model_server, retry=RETRY))
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2")
    result.assert_outcomes(passed=4)
    records = _records(pytester).values()
    assert sum(r.get("retries", 0) for r in records) == 2
    assert sum(len(r["previous"]) for r in records) == 2
    assert 1 <= summary_of(pytester)["counts"]["retried"] <= 2
    assert len(model_server.requests) == 6


LLM_AGENT = """
def run(task):
    client = task.llm()
    first = client.chat([{"role": "user", "content": "<<half>>"}])
    return client.chat([{"role": "user", "content": "<<" + first.text + "-done>>"}]).text
"""


def test_a_retried_try_that_spent_keeps_its_cost_apart(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A try whose first call answered (100 tokens in, 20 out) and whose second got a 500:
    the retry passes, the record's usage is the final try's two calls, `retry_cost` is the
    failed try's one call, and summary.json's spend counts all three."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(statuses=[200, 500])
    manifest = _manifest(model_server, retry=RETRY)
    manifest["providers"]["local"]["openai"]["model"] = "m1"
    manifest["pricing"] = {"m1": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}}
    root = dataset({"a.yaml": {"input": "q", "expected": "half-done"}}, manifest=manifest)
    (root / "agent.py").write_text(LLM_AGENT)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    record = _records(pytester)["a"]
    one_call = (100 * 1.0 + 20 * 10.0) / 1e6
    assert record["retries"] == 1 and len(model_server.requests) == 4
    assert record["usage"]["cost"] == pytest.approx(2 * one_call)
    assert record["retry_cost"] == pytest.approx(one_call)
    assert summary_of(pytester)["totals"]["cost"] == pytest.approx(3 * one_call)


def test_a_backoff_gives_way_to_the_deadline(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 429 with a backoff of 10 minutes and a deadline 2 s away: no retry is started, the
    attempt keeps its rate_limited error, the next task is not started and the run's status
    is `deadline` (the session ends at the deadline, not after the backoff)."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(statuses=[429])
    slow = {**RETRY, "backoff": "10m"}
    tasks = {"a.yaml": _task(retry=slow), "b.yaml": _task(retry=slow)}
    dataset(tasks, manifest=_manifest(model_server))
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-deadline", "2s", "-p", "no:randomly"
    )
    result.assert_outcomes(errors=1, skipped=1)
    record = _records(pytester)["a"]
    assert (record["error_class"], record.get("retries")) == ("rate_limited", None)
    assert len(model_server.requests) == 1
    assert summary_of(pytester)["status"] == "deadline"
