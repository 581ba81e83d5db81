"""Real providers and the run's safety nets: the API key never reaches a file or the terminal,
priced spend stops a run at its cap, and per-agent limits hold at the server across workers."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat_server import ChatServer
from helpers import DatasetMaker, latest_record
from test_judge import judge_settings, judged
from test_providers import KEY, KEY_ENV, openai_agent

SECRET = "sk-LEAKCANARY-7f3a9c1e5b2d4086"
LONG_SECRET = "sk-canary-a4b205b6ccc36a9e41d07c3f8b6a2e5d9df7eb121250a6a21c494f81"
"""Long enough for pydantic to abbreviate it in a message (`sk-canary-a4b2...c494f81`)."""


def pieces(secret: str, size: int = 12) -> set[str]:
    """Every run of `size` characters of `secret`."""
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.mark.slow
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


def test_no_run_of_the_key_escapes_whatever_quotes_it(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that quotes the key after 266 characters of an error message, one whose usage
    is the key (pydantic abbreviates it), one that echoes it in a reply, and a judge quoting it
    in its reason or as its score: no 12 characters of the key reach any file (records, index,
    summaries, JUnit, HTML) or the terminal under -vv --tb=long -l."""
    monkeypatch.setenv(KEY_ENV, LONG_SECRET)
    servers = [ChatServer().start() for _ in range(3)]
    failing, counting, echoing = servers
    failing.reset(always=500, echo_key=True, error_message="x" * 266 + " {KEY} " + "y" * 400)
    counting.reset(echo_key=True, usage={"prompt_tokens": "{KEY}", "completion_tokens": 1})
    echoing.reset(echo_key=True)
    quoting = '<<{"score": 0.9, "reason": "the key is {KEY}"}>>'
    dataset(
        {
            "err.yaml": {"input": "q", "expected": "q", "agent": openai_agent(failing, retries=0)},
            "usage.yaml": {"input": "q", "expected": "q", "agent": openai_agent(counting)},
            "echo.yaml": {"input": "<<sent {KEY}>>", "graders": [{"judge": quoting}]},
            "score.yaml": {
                "input": "q",
                "agent": "agent:run",
                "metadata": {"answer": "ok"},
                "graders": [{"judge": '<<{"score": "{KEY}"}>>'}],
            },
        },
        manifest={"agent": openai_agent(echoing), "judge": judge_settings(echoing)},
    )
    try:
        result = pytester.runpytest(
            "--agenteval",
            "ds",
            "-vv",
            "--tb=long",
            "-l",
            "--junitxml=junit.xml",
            "--agenteval-html=report.html",
        )
    finally:
        for server in servers:
            server.stop()
    result.assert_outcomes(passed=1, errors=3)
    assert all(LONG_SECRET in s.auth[0] for s in servers)
    shown = "\n".join(result.outlines + result.errlines)
    assert "x" * 200 + " *** y" in shown
    assert "input_value='***" in latest_record(pytester.path, "usage", 0)["error"]
    echoed = latest_record(pytester.path, "echo", 0)
    assert echoed["output"] == "sent ***"
    assert echoed["verdicts"][0]["reason"] == "score 0.9 (>= 0.5): the key is ***"
    files = [p for p in pytester.path.rglob("*") if p.is_file() and p.name != "agenteval.yaml"]
    assert {"records.jsonl", "index.jsonl", "junit.xml", "report.html"} <= {p.name for p in files}
    texts = {str(p): p.read_text(errors="replace") for p in files} | {"terminal": shown}
    leaked = {
        where for where, text in texts.items() for piece in pieces(LONG_SECRET) if piece in text
    }
    assert leaked == set()


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
    # The server names the model it served (served-model-1), which the probe cannot know:
    # without it, it would ask for a price of the model asked for.
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-max-cost", "1.5", "--agenteval-no-probe"
    )
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


def _masked_by_brute_force(text: str, key: str) -> str:
    """What `mask` must give: every character inside a run of at least min(12, len(key))
    characters of `key` hidden, each maximal hidden stretch as one `***`."""
    shortest = min(12, len(key))
    hidden = [False] * len(text)
    for start in range(len(text)):
        for end in range(start + shortest, len(text) + 1):
            if text[start:end] in key:
                hidden[start:end] = [True] * (end - start)
    out, i = [], 0
    while i < len(text):
        if hidden[i]:
            while i < len(text) and hidden[i]:
                i += 1
            out.append("***")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@given(
    key=st.text(alphabet="abcx-", min_size=4, max_size=20),
    text=st.text(alphabet="abcx-y", max_size=40),
)
def test_mask_hides_every_run_of_the_key_and_returns_other_texts_as_they_are(
    key: str, text: str
) -> None:
    """`mask` (its short-text and no-run fast paths included) hides what a brute-force search
    finds, and returns a text with no run of the key as the same object."""
    from pytest_agenteval.providers import client

    with patch.object(client, "_keys", {key}):
        masked = client.mask(text)
    assert masked == _masked_by_brute_force(text, key)
    if masked == text:
        assert masked is text
