"""Error classes end to end: a provider that still answers 429, one that answers too slowly and
an agent that raises are three classes, counted by class in summary.json, the terminal and
JUnit, against real model servers, alone and under `-n 2`; and the classification itself."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest

from helpers import DatasetMaker, latest_run, run_layout, summary_of, task
from model_server import ModelServer
from pytest_agenteval.core.error_classes import ERROR_CLASSES, class_of, derived_class
from pytest_agenteval.core.errors import AgentTimeout, GraderError, OverBudget

KEY = "local-key-abcdefghijkl"
XDIST = [pytest.param((), id="alone"), pytest.param(("-n", "2"), id="n2", marks=pytest.mark.slow)]


@pytest.fixture
def slow_server() -> Iterator[ModelServer]:
    """A second real model API, for a provider that answers too slowly."""
    server = ModelServer().start()
    yield server
    server.stop()


def _provider(server: ModelServer, **more: Any) -> dict[str, Any]:
    return {"openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY"}, **more}


@pytest.mark.parametrize("xdist", XDIST)
def test_errors_are_counted_by_class(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    slow_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    """429 after its retries is `rate_limited`, a request past its timeout is `timeout`, an
    agent raising is `agent_error`: each record says so, summary.json counts them by class,
    the terminal prints `errors by class`, JUnit's suite has `errors_<class>` properties."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(always=429)
    slow_server.reset(latency=2.0)
    limited = {"openai": {"model": "m", "provider": "limited"}}
    slow = {"openai": {"model": "m", "provider": "slow"}}
    tasks = {
        "limited1.yaml": {"input": "<<ok>>", "expected": "ok", "agent": limited},
        "limited2.yaml": {"input": "<<ok>>", "expected": "ok", "agent": limited},
        "slow.yaml": {"input": "<<ok>>", "expected": "ok", "agent": slow},
        "boom.yaml": task(metadata={"raise": "boom"}),
    }
    providers = {
        "limited": _provider(model_server, retries=1, backoff=0),
        "slow": _provider(slow_server, retries=0, timeout=0.3),
    }
    dataset(tasks, manifest={"providers": providers})
    result = run_layout(pytester, "--agenteval", "ds", *xdist)
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(["errors by class: rate_limited 2, *"])
    expected = {"rate_limited": 2, "timeout": 1, "agent_error": 1}
    assert summary_of(pytester)["counts"]["error_classes"] == expected
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert {r["task_id"]: r.get("error_class") for r in records} == {
        "limited1": "rate_limited",
        "limited2": "rate_limited",
        "slow": "timeout",
        "boom": None,  # implied by its phase (agent): not written
    }
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert (props["errors_rate_limited"], props["errors_timeout"]) == ("2", "1")
    assert props["errors_agent_error"] == "1"
    assert model_server.rate_limited == 4  # two attempts, each tried twice


def test_classes_of_exceptions_and_of_old_records() -> None:
    """An exception's own class wins, else its phase and type imply one; every class named is
    in the documented list."""
    named = {
        class_of(AgentTimeout("t"), "agent", "AgentTimeout"),
        class_of(GraderError("g"), "grading", "GraderError"),
        class_of(OverBudget("o"), "budget", "over_budget"),
        class_of(ValueError("v"), "agent", "ValueError"),
        class_of(None, "crash", "WorkerCrash"),
        derived_class("build", "build_failed"),
        derived_class("sandbox", "sandbox_error"),
        derived_class("agent", "ProviderError"),
        derived_class("stopped", "RunStopped"),
    }
    assert named == {
        "timeout",
        "grading_error",
        "over_budget",
        "agent_error",
        "crash",
        "build_failed",
        "sandbox_error",
        "provider_error",
        "stopped",
    }
    assert named <= set(ERROR_CLASSES)
    required = {"rate_limited", "provider_error", "timeout", "sandbox_error", "build_failed"}
    assert required | {
        "crash",
        "agent_error",
        "grading_error",
        "over_budget",
        "probe_failed",
    } <= set(ERROR_CLASSES)


def test_the_records_reference_lists_every_class() -> None:
    """docs/reference/records.md's table names every error class, with its meaning."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs/reference/records.md").read_text()
    for name, meaning in ERROR_CLASSES.items():
        assert f"| `{name}` | {meaning} |" in text
