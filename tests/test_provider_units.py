"""Pure parts of the providers: retry decisions, prices, reading a judge's reply, and what
`agenteval validate` and `agenteval schema` say about provider settings."""

from __future__ import annotations

import json
import random
import time
from email.utils import formatdate
from pathlib import Path

import pytest

from pytest_agenteval.cli import main
from pytest_agenteval.core.llm import ModelPrice
from pytest_agenteval.providers.judge import parse_reply
from pytest_agenteval.providers.pricing import cost, price_of, priced
from pytest_agenteval.providers.retry import (
    MAX_DELAY,
    RetryPolicy,
    parse_retry_after,
    retryable,
)


def test_what_is_retried() -> None:
    """Rate limits, server errors and lost connections are retried; refusals are not."""
    assert all(retryable(s) for s in (None, 408, 429, 500, 502, 503))
    assert not any(retryable(s) for s in (400, 401, 403, 404, 422))


def test_retry_after_and_backoff() -> None:
    """Retry-After (seconds or an HTTP date) wins, capped; else exponential backoff with
    jitter stays between half and all of backoff * 2^retry."""
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(formatdate(0, usegmt=True)) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    policy, rng = RetryPolicy(retries=3, backoff=1.0), random.Random(1)
    assert policy.delay(0, "0.5", rng) == 0.5
    assert policy.delay(0, "9999", rng) == MAX_DELAY
    for retry in range(4):
        assert 2**retry / 2 <= policy.delay(retry, None, rng) <= 2**retry


@pytest.mark.parametrize(
    "header", ["nan", "NaN", "inf", "-inf", "1e999", "-1", "-0.5", "soon", "Wed, 99 Foo 2015"]
)
def test_a_retry_after_that_is_no_wait_falls_back_to_the_backoff(header: str) -> None:
    """A Retry-After that is not finite, negative or unreadable is ignored: the wait is the
    backoff's, never a NaN timer that would disorder the event loop's timers."""
    policy, rng = RetryPolicy(retries=3, backoff=1.0), random.Random(1)
    assert parse_retry_after(header) is None
    assert 2 <= policy.delay(2, header, rng) <= 4


def test_a_retry_after_date_without_a_zone_is_gmt() -> None:
    """An HTTP date in `-0000` (no zone) counts as GMT, as RFC 9110 dates are."""
    in_an_hour = formatdate(time.time() + 3600, usegmt=True).replace("GMT", "-0000")
    assert 3590 <= (parse_retry_after(in_an_hour) or 0) <= 3600


def test_prices_by_exact_name_then_longest_family() -> None:
    """A model is priced by its exact name, else by the longest `name-` prefix; cached input
    tokens cost their own price; a reported cost is never replaced."""
    table = {
        "gpt": ModelPrice(input_per_mtok=1, output_per_mtok=1),
        "gpt-4o": ModelPrice(input_per_mtok=2.5, output_per_mtok=10, cached_input_per_mtok=1.25),
    }
    assert price_of("gpt-4o", table) is table["gpt-4o"]
    assert price_of("gpt-4o-2024-08-06", table) is table["gpt-4o"]
    assert price_of("gpt4", table) is None and price_of(None, table) is None
    assert cost(table["gpt-4o"], 1_000_000, 1_000_000, cached=500_000) == pytest.approx(
        1.25 + 0.625 + 10
    )
    assert priced({"input_tokens": 10, "cost": 7.0, "model": "gpt"}, table)["cost"] == 7.0
    assert priced({"input_tokens": 10, "output_tokens": None, "cost": None}, table)["cost"] is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"score": 1, "reason": "fine"}', (1.0, "fine")),
        ('Here you go:\n```json\n{"score": 0.25, "reason": "meh"}\n```', (0.25, "meh")),
        ('{"score": 0}', (0.0, "")),
        ('The output says {"a": 1}. Verdict: {"score": 0.8, "reason": "ok"}', (0.8, "ok")),
        ('Quoted: {"score": 1, "reason": "x"}\nMine: {"score": 0.2, "reason": "y"}', (0.2, "y")),
        ('{"score": 0.4} then {"score": 7}', (0.4, "")),
    ],
)
def test_judge_replies_that_read(reply: str, expected: tuple[float, str]) -> None:
    """A judge's JSON object is found bare or inside prose and fences; after JSON quoted
    before it, the last object with a valid score is the verdict."""
    assert parse_reply(reply) == expected


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("I think it is good", "no JSON object"),
        ('{"score": 7}', "not a number from 0 to 1"),
        ('{"score": "high"}', "not a number from 0 to 1"),
        ('{"score": true}', "not a number from 0 to 1"),
    ],
)
def test_judge_replies_that_do_not_read(reply: str, problem: str) -> None:
    """A reply without a score from 0 to 1 is refused, saying why."""
    with pytest.raises(ValueError, match=problem):
        parse_reply(reply)


def test_validate_knows_provider_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval validate` reports a misspelt manifest `judge:` key, an unknown `openai`
    agent option and a judge without a model, each where it is written."""
    root = tmp_path / "ds"
    root.mkdir()
    (root / "agenteval.yaml").write_text(
        "name: ds\nagent: {openai: {model: m, temprature: 0}}\njudge: {modle: x}\n"
    )
    (root / "t.yaml").write_text("input: q\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "agenteval.yaml:3: at judge.modle" in out
    (root / "agenteval.yaml").write_text("name: ds\nagent: {openai: {model: m, temprature: 0}}\n")
    (root / "t.yaml").write_text("input: q\ngraders:\n  - judge: Is it right?\n")
    (root / "ok.yaml").write_text("input: q\nexpected: a\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "t.yaml:3: at graders[0]" in out and "judge needs a model" in out
    assert "unknown option 'temprature'" in out and "did you mean 'temperature'?" in out


def test_schemas_know_provider_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest schema describes `judge:` and `pricing:`; both schemas the judge and the
    `openai` agent's options (a misspelt option is refused)."""
    import jsonschema

    assert main(["schema", "manifest"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert {"judge", "pricing"} <= set(manifest["properties"])
    assert main(["schema", "task"]) == 0
    task = json.loads(capsys.readouterr().out)
    assert "rubric" in json.dumps(task)
    check = jsonschema.Draft202012Validator(task).is_valid
    assert check({"input": "q", "agent": {"openai": {"model": "m", "max_tokens": 9}}})
    assert check(
        {"input": "q", "agent": {"openai": {"model": "m"}, "limits": {"max_in_flight": 2}}}
    )
    assert not check({"input": "q", "agent": {"openai": {"modle": "m"}}})


def test_the_openai_example_validates(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`examples/openai` loads, builds its agent and judge offline, and passes the schemas."""
    from written import check_dataset

    example = Path(__file__).parent.parent / "examples" / "openai"
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    assert main(["validate", str(example)]) == 0, capsys.readouterr().out
    check_dataset(example)
