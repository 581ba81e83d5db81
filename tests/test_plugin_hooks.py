"""Our hooks as pytest's per-path hooks: a conftest applies below its folder, and a bad answer
names the conftest or plugin that gave it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from helpers import WORKERS, DatasetMaker, task

GRADER = """
class Mine:
    def grade(self, ctx):
        return {verdict}, "graded by {where}"

def pytest_agenteval_make_grader(spec, task, dataset_root):
    if spec.type == "mine":
        return Mine()
"""


def write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


@pytest.mark.parametrize("workers", WORKERS)
def test_a_conftest_grader_applies_only_to_datasets_below_it(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Two datasets each with a conftest grader of the same name get their own; a third without
    one gets neither, while a conftest above them all supplies every dataset."""
    graded = {**task("x"), "graders": [{"mine": {}}, {"shared": {}}]}
    for folder in ("a", "b", "c"):
        dataset({"t.yaml": graded}, name=folder, folder=folder)
    write(pytester.path / "a/conftest.py", GRADER.format(verdict=True, where="a"))
    write(pytester.path / "b/conftest.py", GRADER.format(verdict=False, where="b"))
    pytester.makeconftest(
        """
        class Shared:
            def grade(self, ctx):
                return True

        def pytest_agenteval_make_grader(spec, task, dataset_root):
            if spec.type == "shared":
                return Shared()
        """
    )
    args = ["--agenteval", "a", "--agenteval", "b", "--agenteval", "c", *workers]
    result = pytester.runpytest_subprocess(*args) if workers else pytester.runpytest(*args)
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*[[]FAIL[]] mine: graded by b*"])
    result.stdout.fnmatch_lines(["c/t.yaml:1: at graders[[]0[]]: unknown grader 'mine'*"])


def test_a_grader_without_grade_names_its_conftest(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A plugin grader with no `grade` method errors its task at the grader's line, naming the
    conftest that returned it; the other tasks still run."""
    dataset({"bad.yaml": {**task("ok"), "graders": [{"mine": {}}]}, "good.yaml": task("ok")})
    write(
        pytester.path / "ds/conftest.py",
        """
        def pytest_agenteval_make_grader(spec, task, dataset_root):
            if spec.type == "mine":
                return "not a grader"
        """,
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "ds/bad.yaml:1: at graders[[]0[]]: pytest_agenteval_make_grader returned str for "
            "'mine', which has no grade(ctx) method (answered by conftest ds/conftest.py)"
        ]
    )


def test_an_agent_that_is_not_callable_names_its_plugin(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A plugin agent that is not callable: its attempts do not run, and the error names the
    plugin (here registered by name) that returned it."""
    dataset({"a.yaml": task("ok")}, manifest={"agent": {"echo": {}}})
    pytester.makeconftest(
        """
        class EchoPlugin:
            def pytest_agenteval_make_agent(self, spec, dataset_root):
                if getattr(spec, "type", None) == "echo":
                    return 42

        def pytest_configure(config):
            config.pluginmanager.register(EchoPlugin(), "echo-agents")
        """
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest_agenteval_make_agent returned int, which is not callable "
            "(answered by plugin 'echo-agents')*"
        ]
    )


def test_an_environment_that_is_not_one_names_its_conftest(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A plugin environment that is not an Environment errors the attempt, naming the conftest
    that made it."""
    (pytester.path / "ds/ws").mkdir(parents=True)
    dataset({"a.yaml": {**task("ok"), "workspace": "ws"}})
    write(
        pytester.path / "ds/conftest.py",
        """
        def pytest_agenteval_make_environment(task, key, template, dataset_root, config):
            return "a folder"
        """,
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest_agenteval_make_environment returned str, not an Environment "
            "(answered by conftest ds/conftest.py)*"
        ]
    )
