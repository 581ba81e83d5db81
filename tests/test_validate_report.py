"""`agenteval validate` and load-error items report every problem of a task file at once."""

from __future__ import annotations

import pytest

from helpers import DatasetMaker
from pytest_agenteval.cli import main

FOUR_TYPOS = """\
id: t1
inptu: "what is 2+2?"
expected: 4
timeout: soon
graders:
  - equals
  - judge: {rubrik: "be nice"}
  - contians: x
"""

PROBLEMS = [
    "ds/t.yaml:2: at inptu: unknown key 'inptu'",
    "Hint: did you mean 'input'?",
    "ds/t.yaml:4: at timeout: Input should be a valid number*",
    "ds/t.yaml:7: at graders[1]: unknown key 'rubrik'",
    "Hint: did you mean 'rubric'?",
    "ds/t.yaml:8: at graders[2]: unknown grader 'contians'",
    "Hint: did you mean 'contains'?",
]


def test_every_problem_at_once_with_unknown_keys_named(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four typos in one task (a key, a value, a grader option, a grader name) are four problems
    in one round, in line order; a misspelt key is "unknown key" with a did-you-mean, never the
    "missing"/"Field required" of the key it misspells; the load-error item says the same."""
    root = dataset({"t.yaml": FOUR_TYPOS, "ok.yaml": {"input": "q", "expected": "4"}})
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    pytest.LineMatcher(out.splitlines()).fnmatch_lines([*PROBLEMS, "1 task valid, 4 problems"])
    assert "required" not in out.lower()
    result = pytester.runpytest("--agenteval", "ds", "-p", "no:randomly")
    result.assert_outcomes(errors=1, failed=1)
    result.stdout.fnmatch_lines(["*t1[[]load-error[]]*", *PROBLEMS])


def test_every_problem_of_a_manifest_and_a_task_list_at_once(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest with two misspelt keys, and a `tasks:` file with two unknown keys beside the
    list, report both problems each, in one round of `validate` and of pytest."""
    root = dataset({"list.yaml": "tasks: []\nother: 1\nmore: 2\n"})
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "list.yaml:2: at other: unknown key 'other'\nHint: " in out
    assert "\nds/list.yaml:3: at more: unknown key 'more'\n" in out
    (root / "agenteval.yaml").write_text("name: ds\nversoin: '1'\nagnet: agent:run\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    pytest.LineMatcher(out.splitlines()).fnmatch_lines(
        [
            "ds/agenteval.yaml:2: at versoin: unknown key 'versoin'",
            "Hint: did you mean 'version'?",
            "ds/agenteval.yaml:3: at agnet: unknown key 'agnet'",
            "Hint: did you mean 'agent'?",
            "0 tasks valid, 2 problems",
        ]
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.stderr.fnmatch_lines(["*agenteval.yaml:2: at versoin*", "*agenteval.yaml:3: at agnet*"])
