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
