"""The probe before spending: a typo'd model, a bad key or a model without a price under a
cost cap stops the session before any attempt (status `probe_failed`, exit 2), against the
real model server, alone and under `-n 2`; `--agenteval-probe-only` and `--agenteval-no-probe`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import DatasetMaker, latest_run, run_ids, run_layout, summary_of
from model_server import ModelServer
from pytest_agenteval.core.llm import ModelPrice
from pytest_agenteval.core.model import Action, TaskSpec
from pytest_agenteval.glue.probe import uses_of
from pytest_agenteval.providers.probe import Use, probe, unpriced
from pytest_agenteval.providers.seam import Route, forget, run_sync
from pytest_agenteval.sources.dataset import load_dataset
from pytest_agenteval.sources.speccache import CachedTask
from pytest_agenteval.store.stops import Stops

KEY = "local-key-abcdefghijkl"
XDIST = [pytest.param((), id="alone"), pytest.param(("-n", "2"), id="n2", marks=pytest.mark.slow)]


def _manifest(server: ModelServer, model: str, **more: Any) -> dict[str, Any]:
    provider = {"openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY"}}
    return {
        "providers": {"local": provider},
        "agent": {"openai": {"model": model, "provider": "local"}},
        **more,
    }


def _tasks(n: int) -> dict[str, Any]:
    return {f"t{i:02}.yaml": {"input": "q <<42>>", "expected": "42"} for i in range(n)}


def _chats(server: ModelServer) -> list[str]:
    return [p for p in server.paths if p.startswith("POST")]


def _run_json(root: Path) -> dict[str, Any]:
    run = root / ".pytest_cache/agenteval/runs" / latest_run(root)
    return dict(json.loads((run / "run.json").read_text()))


@pytest.mark.parametrize("xdist", XDIST)
def test_unknown_model_stops_the_session_before_any_attempt_and_keeps_no_run(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    """20 tasks whose agent names a model the server does not know (its 404): no chat request
    reaches the server, exit 2, the message names the provider and the model and says how to
    go on, and no run is kept (a `probe_failed` run in `agenteval runs` per failed probe)."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["gpt-right"])
    dataset(_tasks(20), manifest=_manifest(model_server, "gpt-wrong"))
    result = run_layout(pytester, "--agenteval", "ds", *xdist)
    assert result.ret == 2
    result.stdout.fnmatch_lines(
        [
            "*the probe failed*",
            "*provider 'local' model 'gpt-wrong'*HTTP 404*check the model*",
            "agenteval: stopped (the probe failed): no attempt started; fix what it named*",
            "agenteval: no attempt ran; run * was not kept",
        ]
    )
    assert _chats(model_server) == []
    assert run_ids(pytester.path) == []


@pytest.mark.parametrize("xdist", XDIST)
def test_probe_only_exits_2_for_a_wrong_name_and_0_for_the_right_one(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    """`--agenteval-probe-only` runs the probe alone: exit 2 naming the unknown model, exit 0
    once the manifest names the right one, said as a plain line (no pytest `!!! Exit` banner); no
    chat request either way, no run kept."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["gpt-right"])
    dataset(_tasks(20), manifest=_manifest(model_server, "gpt-wrong"))
    result = run_layout(pytester, "--agenteval", "ds", "--agenteval-probe-only", *xdist)
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*model 'gpt-wrong'*"])
    dataset(_tasks(20), manifest=_manifest(model_server, "gpt-right"))
    result = run_layout(pytester, "--agenteval", "ds", "--agenteval-probe-only", *xdist)
    assert result.ret == 0, result.stdout.str()
    assert "agenteval: probe passed: 1 provider(s), 1 model(s)" in result.stdout.lines
    assert not [line for line in result.outlines + result.errlines if "!!!" in line]
    assert _chats(model_server) == []
    assert "GET /v1/models" in model_server.paths


def test_a_bad_key_names_its_variable(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key the server refuses (401) stops the session, naming the key's variable."""
    monkeypatch.setenv("LOCAL_KEY", "expired-key-abcdefghij")
    model_server.reset(api_key=KEY)
    dataset(_tasks(3), manifest=_manifest(model_server, "m1"))
    result = pytester.runpytest("--agenteval", "ds")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*provider 'local'*HTTP 401*environment variable LOCAL_KEY*"])
    assert "expired-key" not in result.stdout.str()
    assert _chats(model_server) == []


def test_an_unknown_judge_model_and_a_missing_price_are_both_named(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under --agenteval-max-cost the agent's model has no price and the judge's model is
    unknown: one message names both, what each is used for and what to fix."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["m1"])
    manifest = _manifest(
        model_server,
        "m1",
        judge={"model": "judge-typo", "provider": "local"},
        pricing={"judge-typo": {"input_per_mtok": 1, "output_per_mtok": 1}},
    )
    tasks = {"t.yaml": {"input": "q <<42>>", "graders": [{"judge": "is it 42?"}]}}
    dataset(tasks, manifest=manifest)
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-max-cost", "1")
    assert result.ret == 2
    result.stdout.fnmatch_lines(
        [
            "*the probe failed (2 problem(s))*",
            "*model 'm1': has no price (agent [[]ds]) and --agenteval-max-cost*pricing:*",
            "*model 'judge-typo'*HTTP 404*judge of t [[]ds]*",
        ]
    )
    assert _chats(model_server) == []


def test_no_probe_leaves_the_errors_to_the_attempts(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--agenteval-no-probe`: no models list is asked for; the unknown model errors each
    attempt, as before the probe."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["gpt-right"])
    dataset(_tasks(2), manifest=_manifest(model_server, "gpt-wrong"))
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-no-probe")
    result.assert_outcomes(errors=2)
    assert not [p for p in model_server.paths if p.startswith("GET")]
    assert len(_chats(model_server)) == 2


def test_probe_falls_back_to_the_smallest_request_without_a_models_list(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint without a models list is probed with one request of one token per model:
    a known model passes, an unknown one is named with its 404."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["m1"], list_models=False)
    route = Route("local", "openai", model_server.base_url, "LOCAL_KEY", retries=0)
    try:
        uses = [Use(route, "m1", "agent"), Use(route, "typo", "judge", "judge")]
        (problem,) = run_sync(probe(uses))
        assert problem.model == "typo" and "HTTP 404" in problem.what
        assert [r["max_tokens"] for r in model_server.requests] == [1, 1]
        model_server.reset(models=["m1"])
        listed = [Use(route, "m1", "agent"), Use(route, None, "llm", "llm")]
        assert run_sync(probe(listed)) == []
        assert _chats(model_server) == []
    finally:
        forget()


def test_the_smallest_request_is_reserved_and_counted_against_the_run_caps(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The one-token probe request spends: it is reserved against the run's caps, priced,
    counted in the run's spend ledger, and not sent when the cap has no room for it."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["m1"], list_models=False, input_tokens=7, output_tokens=1)
    route = Route("local", "openai", model_server.base_url, "LOCAL_KEY", retries=0)
    pricing = {"m1": ModelPrice(input_per_mtok=10_000.0, output_per_mtok=10_000.0)}
    try:
        stops = Stops(tmp_path, max_cost=100.0, max_tokens=10_000)
        assert run_sync(probe([Use(route, "m1", "agent")], stops, pricing)) == []
        settled = stops.ledger.read().settled
        assert settled.cost == pytest.approx(0.08)  # 8 tokens at a cent
        assert (settled.tokens, settled.calls) == (8, 1)
        model_server.reset(models=["m1"], list_models=False)
        tight = Stops(tmp_path / "tight", max_tokens=5)  # the request's bytes alone exceed it
        (problem,) = run_sync(probe([Use(route, "m1", "agent")], tight, pricing))
        assert "no room for the probe" in problem.what and "--agenteval-max-tokens" in problem.fix
        assert _chats(model_server) == []
    finally:
        forget()


def test_unpriced_counts_agents_and_judges_once_and_only_under_a_cap() -> None:
    """Only agent and judge models need a price, only under a cost cap, each named once;
    a price found by the `name-` prefix rule counts."""
    route = Route("p", "openai", "http://x/v1", "K")
    uses = [
        Use(route, "a", "agent"),
        Use(route, "a", "agent of t2"),
        Use(route, "j", "judge", "judge"),
        Use(route, "l", "task.llm", "llm"),
        Use(route, "gpt-4o-2024", "agent"),
    ]
    pricing = {"gpt-4o": ModelPrice(input_per_mtok=1, output_per_mtok=1)}
    assert unpriced(uses, pricing, capped=False) == []
    assert [p.model for p in unpriced(uses, pricing, capped=True)] == ["a", "j"]


def test_a_key_variable_not_set_is_said_once_with_what_to_do(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A provider whose key variable is not set stops the session at the probe, its line
    naming the provider once and saying what to export."""
    monkeypatch.delenv("LOCAL_KEY", raising=False)
    dataset(_tasks(2), manifest=_manifest(model_server, "gpt-right"))
    result = run_layout(pytester, "--agenteval", "ds")
    assert result.ret == 2
    (line,) = [line for line in result.outlines if "LOCAL_KEY (api_key_env)" in line]
    assert line.count("provider 'local'") == 1 and "Fix: export LOCAL_KEY=" in line, line
    assert _chats(model_server) == []


@pytest.mark.parametrize("xdist", XDIST)
def test_a_resume_probes_only_what_runs_and_a_failed_probe_leaves_the_run_as_it_was(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    """With the model server down, a resume with nothing left to run probes nothing and ends
    as the run is (exit 0, `complete`); one that must run an attempt stops at the probe
    (exit 2) and leaves the run as it was: run.json's status, sessions and plan, and its
    progress.json."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["m1"])
    dataset(_tasks(2), manifest=_manifest(model_server, "m1"))
    run = ("--agenteval", "ds", "--agenteval-run-id", "r1", *xdist)
    run_layout(pytester, *run, "-k", "t00").assert_outcomes(passed=1)
    before = _run_json(pytester.path)
    progress = pytester.path / ".pytest_cache/agenteval/runs/r1/progress.json"
    model_server.stop()
    nothing = run_layout(pytester, *run, "--resume-suite", "-k", "t00")
    nothing.assert_outcomes(passed=1)
    assert nothing.ret == pytest.ExitCode.OK
    assert summary_of(pytester)["status"] == _run_json(pytester.path)["status"] == "complete"
    after_reuse, progress_was = _run_json(pytester.path), progress.read_text()
    failed = run_layout(pytester, *run, "--resume-suite")
    assert failed.ret == pytest.ExitCode.INTERRUPTED
    failed.stdout.fnmatch_lines(
        [
            "*the probe failed*",
            "*no connection*",
            "agenteval: no attempt ran; run r1 is left as it was (complete)",
        ]
    )
    after = _run_json(pytester.path)
    assert len(run_ids(pytester.path)) == 1
    assert after["status"] == before["status"] == "complete"
    assert after["sessions"] == after_reuse["sessions"] and after["planned"] == before["planned"]
    assert json.loads(progress.read_text()) == json.loads(progress_was)  # not `starting`


@pytest.mark.parametrize("xdist", XDIST)
def test_k_probes_only_the_models_of_the_tasks_it_selects(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    """`-k` selecting a task that calls no model runs it though another task's judge names a
    model the server does not know; selecting that task stops at the probe, naming it."""
    monkeypatch.setenv("LOCAL_KEY", KEY)
    model_server.reset(models=["m1"])
    provider = {"openai": {"base_url": model_server.base_url, "api_key_env": "LOCAL_KEY"}}
    tasks: dict[str, Any] = {
        "plain.yaml": {"input": "q", "expected": "ok", "metadata": {"answer": "ok"}},
        "judged.yaml": {"input": "q", "graders": [{"judge": "is it ok?"}]},
    }
    dataset(
        tasks,
        manifest={
            "providers": {"local": provider},
            "judge": {"model": "judge-typo", "provider": "local"},
        },
    )
    plain = run_layout(pytester, "--agenteval", "ds", "-k", "plain", *xdist)
    plain.assert_outcomes(passed=1)
    assert not [p for p in model_server.paths if "judge-typo" in p]
    judged = run_layout(pytester, "--agenteval", "ds", "-k", "judged", *xdist)
    assert judged.ret == pytest.ExitCode.INTERRUPTED
    judged.stdout.fnmatch_lines(["*model 'judge-typo'*HTTP 404*judge of judged [[]ds]*"])
    assert _chats(model_server) == []


def test_uses_follow_what_the_plan_does_with_each_attempt(
    dataset: DatasetMaker, model_server: ModelServer
) -> None:
    """A reused attempt reaches nothing, a regraded one only its judges, one that runs its
    agent (the task's own or the manifest's, none under --agenteval-agent), its judges and
    the providers `task.llm()` may use."""
    manifest = _manifest(model_server, "m1", judge={"model": "j1", "provider": "local"})
    tasks: dict[str, Any] = {
        "own.yaml": {"input": "q", "agent": {"openai": {"model": "m2", "provider": "local"}}},
        "judged.yaml": {"input": "q", "graders": [{"judge": "ok?"}]},
    }
    ds = load_dataset(dataset(tasks, manifest=manifest))
    own, judged = (
        next(t.spec for t in ds.read(path).tasks if isinstance(t, CachedTask))
        for path in (ds.root / "own.yaml", ds.root / "judged.yaml")
    )

    def reached(*attempts: tuple[TaskSpec, Action], override: bool = False) -> list[str]:
        found = uses_of(ds, [(ds, s, None, a) for s, a in attempts], override)
        return sorted(f"{u.role} {u.model} {u.who}" for u in found)

    assert reached((own, "reuse"), (judged, "reuse")) == []
    assert reached((own, "reuse"), (judged, "regrade")) == ["judge j1 judge of judged [ds]"]
    assert reached((own, "run")) == [
        "agent m2 agent of own [ds]",
        "llm None task.llm('local') [ds]",
    ]
    assert reached((judged, "run")) == [
        "agent m1 agent [ds]",
        "judge j1 judge of judged [ds]",
        "llm None task.llm('local') [ds]",
    ]
    assert reached((judged, "run"), override=True) == [
        "judge j1 judge of judged [ds]",
        "llm None task.llm('local') [ds]",
    ]
