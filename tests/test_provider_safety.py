"""Real providers and the run's safety nets: the API key never reaches a file or the terminal,
priced spend stops a run at its cap, and per-agent limits hold at the server across workers."""

from __future__ import annotations

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker
from test_judge import judge_settings, judged
from test_providers import KEY, KEY_ENV, openai_agent

SECRET = "sk-LEAKCANARY-7f3a9c1e5b2d4086"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def test_the_api_key_never_reaches_a_file_or_the_terminal(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a distinctive key, a passing run (agents and judges) and a failing one whose
    server quotes the key back in its errors (to the agent and to a judge), with -vv --tb=long -l and JUnit: no file below the
    test's folder (store, records, summaries, JUnit, progress, spec cache, workspaces) and no
    line of output holds the key."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    dataset(
        {
            "t.yaml": {"input": "<<Paris>>", "graders": [{"judge": judged(0.9)}]},
            "u.yaml": {"input": "<<Lyon>>", "expected": "Paris"},
            "j.yaml": {
                "input": "q",
                "metadata": {"answer": "Paris"},
                "agent": "agent:run",
                "graders": [{"judge": judged(0.9)}],
            },
        },
        manifest={"agent": openai_agent(chat_server), "judge": judge_settings(chat_server)},
    )
    args = ("--agenteval", "ds", "-vv", "--tb=long", "-l", "--junitxml=junit.xml")
    passing = pytester.runpytest_subprocess(*args)
    passing.assert_outcomes(passed=2, failed=1)
    chat_server.reset(always=401, echo_auth_in_errors=True)
    failing = pytester.runpytest_subprocess(*args, "--agenteval-rerun")
    failing.assert_outcomes(errors=3)
    failing.stdout.fnmatch_lines(["*HTTP 401: scripted status 401 for Bearer ****"])
    failing.stdout.fnmatch_lines(["*judge: model 'judge-model'*HTTP 401*for Bearer ****"])
    assert chat_server.auth and set(chat_server.auth) == {f"Bearer {SECRET}"}

    for run in (passing, failing):
        assert SECRET not in "\n".join(run.outlines + run.errlines)
    files = [p for p in pytester.path.rglob("*") if p.is_file()]
    assert any(p.name == "records.jsonl" for p in files)
    assert any(p.name == "progress.json" for p in files)
    leaked = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_priced_spend_stops_the_run_at_the_cap(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """Costs computed from `pricing:` count toward --agenteval-max-cost: past the cap the
    remaining attempts are skipped."""
    dataset(
        {f"t{i}.yaml": {"input": "<<ok>>", "expected": "ok"} for i in range(4)},
        manifest={
            "agent": openai_agent(chat_server),
            "pricing": {"served-model-1": {"input_per_mtok": 10_000, "output_per_mtok": 0}},
        },
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-max-cost", "1.5")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*spend cap reached: $2.00 of $1.50*"])


@pytest.mark.slow
def test_max_in_flight_holds_at_the_server_across_workers(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """`limits: {max_in_flight: 2}` with 8 in flight per process on 2 xdist workers: the
    server never sees more than 2 requests at once (its own count)."""
    chat_server.reset(latency=0.3)
    dataset(
        {f"t{i}.yaml": {"input": "<<ok>>", "expected": "ok"} for i in range(10)},
        manifest={"agent": openai_agent(chat_server), "limits": {"max_in_flight": 2}},
    )
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "8", "-n", "2"
    )
    result.assert_outcomes(passed=10)
    assert len(chat_server.requests) == 10
    assert chat_server.max_concurrent == 2
