"""Per-attempt budgets: usage over a task's `budget:` is an `over_budget` error, counted apart;
a changed budget regrades stored answers; the `openai` agent asks the server to stop there."""

from __future__ import annotations

import json

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, latest_record, summary_of
from pytest_agenteval.cli import main
from pytest_agenteval.core.model import Budget, effective_budget
from test_providers import openai_agent

USAGE_AGENT = """
import pathlib

from pytest_agenteval import AgentResult, Usage

LOG = pathlib.Path(__file__).with_name("calls.log")


def run(task):
    with LOG.open("a") as log:
        log.write(f"{task.id} {task.attempt}\\n")
    meta = task.metadata
    usage = Usage(input_tokens=meta["tokens"], output_tokens=0, cost=meta.get("cost"))
    return AgentResult(output="ok", usage=usage)
"""

COMMAND_AGENT = """
import json, sys

task = json.load(sys.stdin)
usage = {"input_tokens": 10, "output_tokens": 5, "cost": task["metadata"]["cost"]}
print(json.dumps({"output": json.dumps(task.get("budget")), "usage": usage}))
"""


def usage_task(tokens: int, **fields: object) -> dict[str, object]:
    return {"input": "q", "expected": "ok", "metadata": {"tokens": tokens}, **fields}


def test_effective_budget_takes_the_tasks_limits_over_the_defaults() -> None:
    """Each limit a task sets replaces the manifest default's; the others stay."""
    defaults = Budget(max_tokens=100, max_cost=1.0)
    assert effective_budget(Budget(max_cost=0.5), defaults) == Budget(max_tokens=100, max_cost=0.5)
    assert effective_budget(None, defaults) == defaults
    assert effective_budget(None, None) is None
    assert Budget(max_tokens=10).over(None, 99.0) is None  # unknown tokens are never over


def test_validate_and_the_schemas_know_the_budget(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval validate` names a misspelled budget limit with a did-you-mean, and both JSON
    Schemas describe `budget` (the manifest's under `defaults`)."""
    root = pytester.mkdir("ds")
    (root / "agenteval.yaml").write_text("name: ds\ndefaults:\n  budget: {max_cost: 0.5}\n")
    (root / "t.yaml").write_text("input: x\nexpected: y\nbudget: {max_tokns: 5}\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "t.yaml:3: at budget.max_tokns: unknown key" in out and "'max_tokens'?" in out
    for kind, where in (("task", "Task"), ("manifest", "Defaults")):
        assert main(["schema", kind]) == 0
        schema = json.loads(capsys.readouterr().out)
        assert "budget" in schema["$defs"][where]["properties"]
        assert set(schema["$defs"]["Budget"]["properties"]) == {"max_tokens", "max_cost"}


@pytest.mark.slow
def test_usage_over_budget_is_an_error_counted_apart_and_a_new_budget_regrades(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A Python agent's usage over the task's (or the defaults') budget errors the attempt with
    phase `budget`, summary.json and the reports count it apart, and raising the budget regrades
    the stored answer without calling the agent (on an xdist worker)."""
    root = dataset(
        {
            "under.yaml": usage_task(50),
            "over.yaml": usage_task(500),
            "own.yaml": usage_task(500, budget={"max_tokens": 1000}),
        },
        manifest={"agent": "usage_agent:run", "defaults": {"budget": {"max_tokens": 100}}},
    )
    (root / "usage_agent.py").write_text(USAGE_AGENT)
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*over budget: 500 tokens used (budget max_tokens 100)*", "*1 error (1 over budget)*"]
    )
    record = latest_record(pytester.path, "over", 0)
    assert (record["status"], record["phase"], record["error_type"]) == (
        "error",
        "budget",
        "over_budget",
    )
    assert record["output"] == "ok"
    summary = summary_of(pytester)
    assert summary["counts"]["over_budget"] == 1 and summary["counts"]["error"] == 1
    md = pytester.path / ".pytest_cache/agenteval/runs" / summary["run_id"] / "summary.md"
    assert "1 error (1 over budget)" in md.read_text()

    (root / "over.yaml").write_text(
        '{"input": "q", "expected": "ok", "metadata": {"tokens": 500},'
        ' "budget": {"max_tokens": 600}}'
    )
    calls = len(dataset.calls())
    again = pytester.runpytest_subprocess("--agenteval", "ds", "--resume-suite", "-n", "2")
    again.assert_outcomes(passed=3)
    assert len(dataset.calls()) == calls
    summary = summary_of(pytester)
    assert summary["counts"]["regraded"] == 1 and summary["counts"]["over_budget"] == 0


def test_a_command_agents_cost_over_max_cost_and_the_budget_on_its_stdin(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A command agent reads its budget on stdin; a reported cost over `max_cost` errors the
    attempt as over budget (also for calls made ahead under concurrency), one under it passes,
    and the HTML report's headline counts it."""
    root = dataset(
        {
            "cheap.yaml": {
                "input": "q",
                "expected": '{"max_tokens": null, "max_cost": 0.5}',
                "metadata": {"cost": 0.1},
            },
            "dear.yaml": {"input": "q", "expected": "x", "metadata": {"cost": 0.9}},
        },
        manifest={
            "agent": {"command": ["{python}", "{dataset}/cmd_agent.py"], "output": "json"},
            "defaults": {"budget": {"max_cost": 0.5}},
        },
    )
    (root / "cmd_agent.py").write_text(COMMAND_AGENT)
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-concurrency", "2", "--agenteval-html", "r.html"
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*over budget: cost 0.9 (budget max_cost 0.5)*"])
    assert summary_of(pytester)["counts"]["over_budget"] == 1
    assert "<dt>over budget</dt><dd>1</dd>" in (pytester.path / "r.html").read_text()


def test_the_openai_agent_asks_for_the_smaller_of_its_max_tokens_and_the_budgets(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The request's max_tokens is the budget's when lower than the agent's own, the agent's
    otherwise; usage the server reports over the budget errors the attempt."""
    monkeypatch.setenv("AGENTEVAL_TEST_KEY", "sk-test")
    chat_server.reset(usage={"prompt_tokens": 100, "completion_tokens": 20})
    dataset(
        {
            "tight.yaml": {"input": "tight <<ok>>", "expected": "ok", "budget": {"max_tokens": 50}},
            "loose.yaml": {
                "input": "loose <<ok>>",
                "expected": "ok",
                "budget": {"max_tokens": 900},
            },
        },
        manifest={"agent": openai_agent(chat_server, max_tokens=200)},
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    asked = {r["messages"][-1]["content"]: r["max_tokens"] for r in chat_server.requests}
    assert asked == {"tight <<ok>>": 50, "loose <<ok>>": 200}
    assert latest_record(pytester.path, "tight", 0)["phase"] == "budget"
