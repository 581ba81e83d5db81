"""The plugin owns its dataset folders: workspace templates are never collected as tests."""

from __future__ import annotations

import pytest

from helpers import DatasetMaker

FIX = {"input": "fix calc.py", "workspace": "fix_ws", "graders": ["equals"], "expected": "ok"}
FAILING_TEST = "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"


def with_template(dataset: DatasetMaker, folder: str) -> None:
    """A dataset whose task's workspace template holds a test that fails on purpose."""
    root = dataset({"coding/fix.yaml": FIX}, name=folder, folder=folder)
    (root / "coding/fix_ws").mkdir()
    (root / "coding/fix_ws/calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "coding/fix_ws/test_calc.py").write_text(FAILING_TEST)


@pytest.mark.parametrize(
    "options", [[], ["-o", "python_files=test_*.py calc.py"], ["--agenteval", "one"]]
)
def test_plain_pytest_never_collects_templates(
    pytester: pytest.Pytester, dataset: DatasetMaker, options: list[str]
) -> None:
    """A plain `pytest` in a project holding two datasets whose templates hold same-named
    failing tests runs only the project's tests: no template test, no "import file mismatch",
    whatever `python_files` says, and also when one dataset is evaluated beside the tests."""
    with_template(dataset, "one")
    with_template(dataset, "two")
    pytester.makepyfile(test_project="def test_ok():\n    assert True\n")
    args = [*options, "."] if "--agenteval" in options else options
    result = pytester.runpytest(*args, "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1, result.stdout.str()
    assert set(outcomes) <= {"passed", "failed", "warnings"}, result.stdout.str()
    assert "test_calc" not in result.stdout.str() and "mismatch" not in result.stdout.str()
