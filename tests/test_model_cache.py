"""The model-call cache (`--agenteval-model-cache`): a fresh run answered from the cache sends
nothing, attempt k stays its own sample, `read` never writes, `replay` makes a miss an error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from helpers import DatasetMaker, latest_run, summary_of
from model_server import ModelServer
from pytest_agenteval.cli import main as agenteval
from pytest_agenteval.providers.cache import FOLDER, ModelCache, entries, prune, stats


def _manifest(server: ModelServer) -> dict[str, Any]:
    return {
        "providers": {
            "local": {
                "openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY"},
                "limits": {"max_in_flight": 4},
            }
        },
        "defaults": {"attempts": 3},
        "agent": {"openai": {"model": "m1", "provider": "local"}},
        "pricing": {"m1": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}},
    }


def _tasks(n: int = 10) -> dict[str, Any]:
    return {f"t{i}.yaml": {"input": f"task {i} <<ok>>", "expected": "ok"} for i in range(n)}


def _records(root: Path) -> list[dict[str, Any]]:
    run = root / ".pytest_cache/agenteval/runs" / latest_run(root) / "records.jsonl"
    return [json.loads(line) for line in run.read_text().splitlines() if line.strip()]


def _outcome(summary: dict[str, Any]) -> Any:
    """What two runs of the same answers agree on: the counts, the metrics, the tokens and
    each attempt's status (not the cost: a cached answer costs $0)."""
    tasks = {t["task_id"]: [a["status"] for a in t["attempts"]] for t in summary["tasks"]}
    tokens = (summary["totals"]["input_tokens"], summary["totals"]["output_tokens"])
    return summary["counts"], summary["metrics"], tokens, tasks


@pytest.fixture
def cached_dataset(
    dataset: DatasetMaker, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> Path:
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    return dataset(_tasks(), manifest=_manifest(model_server))


def _cache_dir(pytester: pytest.Pytester) -> Path:
    return pytester.path / ".pytest_cache" / FOLDER


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_second_fresh_run_sends_nothing(
    pytester: pytest.Pytester,
    cached_dataset: Path,
    model_server: ModelServer,
    workers: list[str],
) -> None:
    """10 tasks x 3 attempts under `on`: the first run sends 30 requests (one per attempt,
    though attempts of a task ask the same), the second fresh run none, and their summaries
    agree; the second run's records, JUnit and HTML say each call was cached, at $0 with its
    first cost kept apart; each summary (json, md, terminal) counts the hits, misses and the
    cost saved."""
    args = ["--agenteval", "ds", "--agenteval-model-cache", "on", *workers]
    first = pytester.runpytest_subprocess(*args)
    first.assert_outcomes(passed=30)
    assert len(model_server.requests) == 30
    assert len({json.dumps(r, sort_keys=True) for r in model_server.requests}) == 10
    assert stats(_cache_dir(pytester)).entries == 30
    before = summary_of(pytester, latest_run(pytester.path))
    one = (100 * 1.0 + 20 * 10.0) / 1e6
    assert before["model_cache"] == {"hits": 0, "misses": 30, "cost_saved": None}
    first.stdout.fnmatch_lines(["*model cache: 0 hits, 30 misses"])
    model_server.reset()
    junit = pytester.path / "junit.xml"
    html = pytester.path / "report.html"
    second = pytester.runpytest_subprocess(*args, f"--junitxml={junit}", f"--agenteval-html={html}")
    second.assert_outcomes(passed=30)
    assert model_server.requests == []
    after = summary_of(pytester, latest_run(pytester.path))
    assert before["run_id"] != after["run_id"]
    assert _outcome(after) == _outcome(before)
    assert after["model_cache"] == {"hits": 30, "misses": 0, "cost_saved": pytest.approx(30 * one)}
    assert after["totals"]["cost"] == 0
    second.stdout.fnmatch_lines(["*model cache: 30 hits, 0 misses, 0.0090 saved"])
    markdown = pytester.path / ".pytest_cache/agenteval/runs" / after["run_id"] / "summary.md"
    assert "- model cache: 30 hits, 0 misses, 0.0090 saved" in markdown.read_text()
    for record in _records(pytester.path):
        usage = record["usage"]
        assert usage["cached_calls"] == 1 and usage["cost"] == 0
        assert usage["cached_cost"] == pytest.approx(one)
        (call,) = [e for e in record["transcript"] if e.get("type") == "model_call"]
        assert call["cached"] is True
    assert junit.read_text().count('name="cached_calls" value="1"') == 30
    assert html.read_text().count('"cached 1"') == 30


@pytest.mark.slow
def test_replay_with_an_empty_cache_errors_every_attempt(
    pytester: pytest.Pytester, cached_dataset: Path, model_server: ModelServer
) -> None:
    """`replay` with nothing cached: every attempt is an error naming its task and model,
    and no request reaches the server."""
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-model-cache", "replay", "-n", "2"
    )
    result.assert_outcomes(errors=30)
    assert model_server.requests == []
    records = _records(pytester.path)
    assert len(records) == 30
    for record in records:
        assert record["status"] == "error"
        assert "model cache (replay): no cached answer for task" in record["error"]
        assert f"{record['task_id']!r} attempt {record['attempt']}" in record["error"]
        assert "model 'm1'" in record["error"]


@pytest.mark.slow
def test_read_uses_hits_and_never_writes(
    pytester: pytest.Pytester, cached_dataset: Path, model_server: ModelServer
) -> None:
    """`read` on an empty cache calls the model and writes nothing; after an `on` run it is
    answered from the cache."""
    read = ["--agenteval", "ds", "--agenteval-model-cache", "read", "-p", "no:xdist"]
    pytester.runpytest_subprocess(*read).assert_outcomes(passed=30)
    assert len(model_server.requests) == 30
    assert stats(_cache_dir(pytester)).entries == 0
    pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-model-cache", "on", "-p", "no:xdist"
    ).assert_outcomes(passed=30)
    model_server.reset()
    pytester.runpytest_subprocess(*read).assert_outcomes(passed=30)
    assert model_server.requests == []


def test_the_attempt_index_and_the_request_make_the_key() -> None:
    """Attempt k of one request is its own entry; any byte of the request or the endpoint
    changes the key."""
    key = ModelCache.key
    base = key("openai", "http://h/v1", b'{"model":"m"}', 0)
    assert base != key("openai", "http://h/v1", b'{"model":"m"}', 1)
    assert base != key("openai", "http://h/v1", b'{"model":"n"}', 0)
    assert base != key("openai", "http://other/v1", b'{"model":"m"}', 0)
    assert base != key("anthropic", "http://h/v1", b'{"model":"m"}', 0)
    assert base == key("openai", "http://h/v1/", b'{"model":"m"}', 0)


def test_the_variant_makes_the_key_and_no_variant_keeps_the_old_one() -> None:
    """Two variants of one request are two entries; a call of no variant keeps the key it had
    before the variant was part of it (caches written then stay valid)."""
    key = ModelCache.key
    body = b'{"model":"m"}'
    assert key("openai", "http://h/v1", body, 0, "a") != key("openai", "http://h/v1", body, 0, "b")
    assert key("openai", "http://h/v1", body, 0, "a") != key("openai", "http://h/v1", body, 0)
    assert key("openai", "http://h/v1", body, 0, None) == (
        "8a52a907ea9319b4040c59108e41f63cda1b2d140a6a9929064b8f7f89b018c2"  # the key before
    )


def test_two_variants_sending_the_same_request_each_pay_their_own(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two variants whose requests are byte-identical (they differ only in `timeout`, which
    is not sent), 2 tasks x 1 attempt under `on`: both variants' calls reach the server and
    each record pays its own cost; a second run answers all four from the cache."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    manifest = _manifest(model_server)
    agent = manifest.pop("agent")["openai"]
    manifest["defaults"] = {"attempts": 1}
    manifest["variants"] = {
        "slow": {"openai": {**agent, "timeout": 60}},
        "quick": {"openai": {**agent, "timeout": 30}},
    }
    root = dataset(_tasks(2), manifest=manifest)
    written = json.loads((root / "agenteval.yaml").read_text())
    del written["agent"]  # the variants name the agents
    (root / "agenteval.yaml").write_text(json.dumps(written))
    args = ["--agenteval", "ds", "--agenteval-model-cache", "on", "-p", "no:xdist"]
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=4)
    assert len(model_server.requests) == 4
    assert len({json.dumps(r, sort_keys=True) for r in model_server.requests}) == 2
    records = _records(pytester.path)
    assert sorted(r["variant"] for r in records) == ["quick", "quick", "slow", "slow"]
    assert all(r["usage"]["cost"] > 0 and not r["usage"].get("cached_calls") for r in records)
    model_server.reset()
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=4)
    assert model_server.requests == []
    assert all(r["usage"]["cached_calls"] == 1 for r in _records(pytester.path))


def test_a_corrupt_entry_is_a_miss_reported_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreadable entry is reported once on stderr and treated as a miss."""
    from pytest_agenteval.core.chat import ChatReply, ToolRequest

    cache = ModelCache(tmp_path, "on")
    reply = ChatReply("hi", (ToolRequest("c1", "bash", {"cmd": "ls"}),), "stop", "m", 3, 4)
    cache.put("ab" + "0" * 62, reply, 0.5)
    found = cache.get("ab" + "0" * 62)
    assert found is not None and found[0] == reply and found[1] == 0.5
    broken = tmp_path / "cd" / ("cd" + "0" * 62 + ".json")
    broken.parent.mkdir()
    broken.write_text("{not json")
    assert cache.get("cd" + "0" * 62) is None
    assert cache.get("cd" + "0" * 62) is None
    assert capsys.readouterr().err.count("treated as a miss") == 1


def test_cache_commands_stats_prune_clear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval cache stats` counts the entries; `prune --older-than` removes the old ones,
    `clear` the rest; a bad age is a one-line error."""
    from pytest_agenteval.core.chat import ChatReply

    folder = tmp_path / FOLDER
    cache = ModelCache(folder, "on")
    for i in range(3):
        cache.put(f"{i:02}" + "0" * 62, ChatReply(f"r{i}"), 0.25)
    old = next(entries(folder))
    data = json.loads(old.read_text())
    old.write_text(json.dumps({**data, "at": data["at"] - 40 * 86400}))
    assert agenteval(["cache", "stats", "--cache-dir", str(tmp_path)]) == 0
    assert "3 cached answers" in capsys.readouterr().out
    assert agenteval(["cache", "prune", "--older-than", "30d", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 1 cached answer" in capsys.readouterr().out
    assert agenteval(["cache", "clear", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 2 cached answers" in capsys.readouterr().out
    assert prune(folder, 0) == 0
    with pytest.raises(SystemExit):
        agenteval(["cache", "prune", "--older-than", "soon", "--cache-dir", str(tmp_path)])
    assert "'soon' is not an age" in capsys.readouterr().err


def test_the_cache_needs_the_cache_provider(
    pytester: pytest.Pytester, cached_dataset: Path, model_server: ModelServer
) -> None:
    """Without pytest's cache provider there is nowhere to keep answers: `replay` is a usage
    error, not a run that quietly reaches the model."""
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-model-cache", "replay", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agenteval-model-cache replay*needs the cache provider*"])
    assert model_server.requests == []


def test_a_bad_mode_is_refused(pytester: pytest.Pytester, cached_dataset: Path) -> None:
    """A mode that is none of on, read, replay, off is a usage error quoting it."""
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-model-cache", "yes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'yes' is not one of on, read, replay, off*"])


HANG = 120
"""Seconds after which a session is taken as hung (a FIFO entry used to block it forever)."""


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_fifo_or_a_link_in_the_cache_is_a_miss_said_on_the_terminal(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    workers: list[str],
) -> None:
    """An entry that is a FIFO (reading it blocked the session) or a link to `/dev/zero` (read
    until memory ran out) is neither waited on nor followed: a miss, said on the terminal past
    the item's capture, and the model is asked."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    manifest = {**_manifest(model_server), "defaults": {"attempts": 1}}
    dataset(_tasks(2), manifest=manifest)
    args = ["--agenteval", "ds", "--agenteval-model-cache", "on", *workers]
    pytester.runpytest_subprocess(*args, timeout=HANG).assert_outcomes(passed=2)
    fifo, link = sorted(entries(_cache_dir(pytester)))
    fifo.unlink()
    os.mkfifo(fifo)
    link.unlink()
    link.symlink_to("/dev/zero")
    model_server.reset()
    result = pytester.runpytest_subprocess(*args, timeout=HANG)
    result.assert_outcomes(passed=2)
    assert len(model_server.requests) == 2
    said = "\n".join(result.outlines + result.errlines)
    assert f"model cache: {fifo}: is a FIFO, not a regular file (treated as a miss)" in said
    assert f"model cache: {link}: is a symbolic link, not a regular file" in said
    assert said.count("treated as a miss") == 2


def test_cache_commands_skip_a_fifo_and_a_link(tmp_path: Path) -> None:
    """`cache stats` and `prune` neither wait on a FIFO entry nor read through a link (to
    /dev/zero): they are no entries, and prune removes them; a linked folder is not entered
    (a prune through it would remove files elsewhere)."""
    from pytest_agenteval.core.chat import ChatReply

    cache = ModelCache(tmp_path / "c", "on")
    cache.put("ab" + "0" * 62, ChatReply("hi", (), "stop", "m", 3, 4), 0.5)
    folder = tmp_path / "c" / "ab"
    os.mkfifo(folder / ("ab" + "1" * 62 + ".json"))
    (folder / ("ab" + "2" * 62 + ".json")).symlink_to("/dev/zero")
    (tmp_path / "c" / "cd").symlink_to(folder)
    found = stats(tmp_path / "c")
    assert (found.entries, found.cost) == (1, 0.5)
    assert prune(tmp_path / "c", 1e9) == 2
    assert [p.name for p in entries(tmp_path / "c")] == ["ab" + "0" * 62 + ".json"]
