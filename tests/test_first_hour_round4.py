"""A new user's first hour, round 4: mistakes on the provider, react, retry, cache and Docker
host surfaces found before anything runs, located, with a did-you-mean."""

from __future__ import annotations

import pytest

from helpers import DatasetMaker
from pytest_agenteval.cli import main

PROVIDERS = """\
providers:
  local:
    openai: {base_url: http://127.0.0.1:9/v1, api_key_env: LOCAL_KEY, model: m}
"""


def test_provider_typos_are_found_at_load_with_a_did_you_mean(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every `provider:` a dataset writes (variants' react/openai agents, `judge:` with no
    judge grader in use, a task's agent and its judge grader) is checked against
    `providers:` when it is read: located, with a did-you-mean, in `validate` and before any
    attempt of a run."""
    root = dataset({})
    (root / "agenteval.yaml").write_text(
        "name: ds\n" + PROVIDERS + "judge: {model: m, provider: lcoal}\n"
        "variants:\n"
        "  a: {react: {provider: lcoal, tools: [submit]}}\n"
        "  b: {agent: {openai: {model: m, provider: locl}}}\n"
    )
    (root / "t.yaml").write_text("input: q\nexpected: ok\nagent: agent:run\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    problem = "no provider 'lcoal' in the manifest's `providers:` (it has: local)"
    assert f"ds/agenteval.yaml:5: at judge.provider: {problem}" in out
    assert f"ds/agenteval.yaml:7: at variants.a.react.provider: {problem}" in out
    assert "ds/agenteval.yaml:8: at variants.b.agent.openai.provider: no provider 'locl'" in out
    assert out.count("did you mean 'local'?") == 3
    (root / "agenteval.yaml").write_text("name: ds\nagent: agent:run\n" + PROVIDERS)
    (root / "t.yaml").write_text(
        "input: q\n"
        "expected: ok\n"
        "agent: {react: {provider: lcoal, tools: [submit]}}\n"
        "graders:\n"
        "  - judge: {rubric: good, provider: loca}\n"
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "ds/t.yaml:3: at agent.react.provider: no provider 'lcoal'" in out
    assert "ds/t.yaml:5: at graders[0].judge.provider: no provider 'loca'" in out
    assert out.count("did you mean 'local'?") == 2
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(["*ds/t.yaml:3: at agent.react.provider: no provider 'lcoal'*"])
    result.assert_outcomes(errors=1)  # the task's load error: no attempt item, none ran


def test_an_unknown_docker_host_option_is_located_with_a_did_you_mean(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`?max_sandbox=2` after a Docker host's address is an error naming the option with a
    did-you-mean (a task's `hosts:` at its line, the command line, the ini), never part of
    the address Docker is given."""
    root = dataset({})
    (root / "t.yaml").write_text(
        "input: q\n"
        "expected: ok\n"
        "sandbox:\n"
        "  docker:\n"
        "    image: i:1\n"
        "    hosts:\n"
        "      - unix:///run/a.sock?max_sandbox=2\n"
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "ds/t.yaml:7: at sandbox.docker.hosts:" in out
    said = "unknown option 'max_sandbox' after the address (did you mean 'max_sandboxes'?)"
    assert said in out
    (root / "t.yaml").write_text("input: q\nexpected: ok\n")
    result = pytester.runpytest("--agenteval-docker-host", "unix:///a.sock?max_sandbox=2")
    result.stderr.fnmatch_lines([f"*--agenteval-docker-host:*{said}*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    pytester.makeini("[pytest]\nagenteval_docker_hosts = tcp://h:2376?max_sandboxs=1\n")
    result = pytester.runpytest("--agenteval", "ds")
    result.stderr.fnmatch_lines(["*agenteval_docker_hosts:*'max_sandboxs'*'max_sandboxes'?*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_every_bad_retry_class_is_named_at_its_line_with_a_did_you_mean(
    dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `retry: on:` naming several unknown classes names each, at its own line, with a
    did-you-mean (before, only the first, with none)."""
    root = dataset({})
    (root / "t.yaml").write_text(
        "input: q\nexpected: ok\nretry:\n  on:\n    - timeot\n    - rate_limited\n"
        "    - provder_error\n"
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert (
        "ds/t.yaml:5: at retry.on[0]: 'timeot' is not an error class a retry may name "
        "(did you mean 'timeout'?)" in out
    )
    assert (
        "ds/t.yaml:7: at retry.on[2]: 'provder_error' is not an error class a retry may "
        "name (did you mean 'provider_error'?)" in out
    )
    assert out.rstrip().endswith("0 tasks valid, 2 problems")


def test_a_cache_mode_typo_gets_a_did_you_mean(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`--agenteval-model-cache repaly` and its ini twin say which mode was meant."""
    dataset({"t.yaml": {"input": "q", "expected": "ok"}})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-model-cache", "repaly")
    result.stderr.fnmatch_lines(
        ["*'repaly' is not one of on, read, replay, off (did you mean 'replay'?)*"]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    pytester.makeini("[pytest]\nagenteval_model_cache = of\n")
    result = pytester.runpytest("--agenteval", "ds")
    result.stderr.fnmatch_lines(
        ["*agenteval_model_cache: 'of' is not one of*(did you mean 'off'?)*"]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_react_option_types_and_tool_references_are_located_and_say_what_is_wanted(
    dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A react option of the wrong type is an error at the option's line quoting the value,
    and a tool reference to a file that is not Python (`/etc/passwd:run`) says what a
    reference must be, at the tool's line (before: an AssertionError at the agent)."""
    root = dataset({"t.yaml": {"input": "q", "expected": "ok"}})
    head = "name: ds\n" + PROVIDERS + "agent:\n  react:\n    tools:\n      - submit\n"
    (root / "agenteval.yaml").write_text(head + "    max_turns: many\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert (
        "ds/agenteval.yaml:9: at agent.react.max_turns: react agent: option 'max_turns' is "
        "'many': Input should be a valid integer" in out
    )
    (root / "agenteval.yaml").write_text(head + "      - /etc/passwd:run\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert (
        "ds/agenteval.yaml:9: at agent.react.tools[1]: react agent: cannot load tool "
        "'/etc/passwd:run': '/etc/passwd' is not a Python file" in out
    )
    assert "Hint: a reference is `module:function` or `path/to/file.py:function`" in out
    assert "AssertionError" not in out
