"""Mistakes found before the run (issue 50): a task file that does not load and a variant whose
agent cannot be built are printed, located and with their hints, as collection finishes:
before the probe (so a failed probe does not hide them) and before any attempt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker

KEY = "local-key-abcdefghijkl"
HEAD = "agenteval: 2 problem(s) found before the run (their attempts will not run; the others do):"
TOOL = "ds/agenteval.yaml:8: at variants.bad.agent.react.tools[1]: react agent: unknown tool 'raed_file'"
HINT = "Hint: did you mean 'read_file'?"
XDIST = [pytest.param((), id="alone"), pytest.param(("-n", "2"), id="n2")]


def _dataset(dataset: DatasetMaker, base_url: str) -> Path:
    """A good variant and one with a tool typo, a task and a judge grader without its rubric."""
    root = dataset(
        {
            "t.yaml": {"input": "q", "expected": "ok"},
            "broken.yaml": {"input": "q", "expected": "ok"},
        }
    )
    (root / "broken.yaml").write_text("input: q\nexpected: ok\ngraders:\n  - judge: {}\n")
    (root / "agenteval.yaml").write_text(
        "name: ds\n"
        "providers:\n"
        "  local:\n"
        f"    openai: {{base_url: '{base_url}', api_key_env: LOCAL_KEY, model: m}}\n"
        "variants:\n"
        "  good: {openai: {provider: local, model: m}}\n"
        "  bad:\n"
        "    react: {provider: local, tools: [submit, raed_file]}\n"
    )
    return root


def _merged(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A real pytest run whose stderr (where the problems go) and stdout are one stream, in
    the order written, so a test can say which line came first."""
    env = {**os.environ, "LOCAL_KEY": KEY, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agenteval", "ds", *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("xdist", XDIST)
def test_a_failed_probe_follows_the_mistakes_found_before_it_and_prints_no_banner(
    pytester: pytest.Pytester, dataset: DatasetMaker, xdist: tuple[str, ...]
) -> None:
    """With an unreachable endpoint, the task file that does not load and the unknown tool
    (file:line, did-you-mean) are printed before the probe's failure, and the session ends
    with status 2 and no `!!! Exit` banner (before: only the probe's failure was said)."""
    _dataset(dataset, "http://127.0.0.1:9/v1")
    result = _merged(pytester.path, *xdist)
    assert result.returncode == 2
    out = result.stdout.splitlines()
    assert HEAD in out and TOOL in out and HINT in out
    assert out[out.index(TOOL) + 1] == HINT
    assert "ds/broken.yaml:4: at graders[0].rubric: Field required" in out
    failed = min(i for i, line in enumerate(out) if "agenteval: the probe failed" in line)
    assert out.index(HEAD) < out.index(TOOL) < failed
    assert not any(line.startswith("!!!") for line in out)


def test_without_the_probe_the_mistakes_come_before_any_attempt_and_the_item_error_has_the_hint(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """Under `--agenteval-no-probe` the problems are printed before the first attempt's result
    (the good variant's attempt still runs), and the bad variant's `agent build` error holds
    the tool's did-you-mean (before: only the end-of-run section had it)."""
    _dataset(dataset, chat_server.base_url)
    done = _merged(pytester.path, "-v", "--agenteval-no-probe")
    out = done.stdout.splitlines()
    assert HEAD in out, done.stdout
    first_result = min(i for i, line in enumerate(out) if "[good-attempt-0]" in line)
    assert out.index(HEAD) < first_result
    assert len(chat_server.paid) >= 1  # the good variant's attempt ran
    assert f"{TOOL}\n{HINT}\n(nothing was recorded" in done.stdout


def test_a_plugin_tool_of_the_datasets_own_conftest_is_no_problem_under_xdist(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under `-n 2` the controller, which does not load a dataset's own conftest.py, does not
    call its plugin's tool unknown (the workers, which load it, build that agent)."""
    root = dataset({"t.yaml": {"input": "q", "expected": "ok"}})
    (root / "conftest.py").write_text(
        "def pytest_agenteval_make_tool(name, dataset_root):\n"
        "    if name == 'lookup':\n"
        "        def lookup(q: str) -> str:\n"
        "            '''Look q up.'''\n"
        "            return q\n"
        "        return lookup\n"
        "    return None\n"
    )
    (root / "agenteval.yaml").write_text(
        "name: ds\n"
        "providers:\n"
        "  local:\n"
        "    openai: {base_url: 'http://127.0.0.1:9/v1', api_key_env: LOCAL_KEY, model: m}\n"
        "agent: {react: {provider: local, tools: [submit, lookup]}}\n"
    )
    result = _merged(pytester.path, "-n", "2")
    assert result.returncode == 2
    assert "agenteval: the probe failed" in result.stdout
    assert "problem(s) found before the run" not in result.stdout
    assert "unknown tool" not in result.stdout
