"""A `-m` name that no task tag nor marker answers to gets a hint, alone and under xdist."""

from __future__ import annotations

import pytest

from helpers import DatasetMaker, task
from pytest_agenteval.sources.tags import expression_names, marker_name, unknown_tag_lines

TAGGED = {
    "capital.yaml": task("ok", tags=["geo", "smoke"]),
    "sum.yaml": task("ok", tags=["math"]),
}
HINT = "agenteval: -m names 'goe', which is no task's tag nor a marker; did you mean 'geo'?"


def test_expression_names_skip_words_and_arguments() -> None:
    """`and`/`or`/`not` and a marker's keyword arguments are no names; each name comes once."""
    assert expression_names("not goe and (smoke or goe) and run(n=3)") == ["goe", "smoke", "run"]


def test_marker_name_of_an_ini_line() -> None:
    """An ini `markers` line names its marker before its arguments and description."""
    assert marker_name("skipif(condition, ..., *, reason=...): skip if") == "skipif"


def test_known_names_get_no_hint() -> None:
    """Tags and registered markers are known; an unknown name far from any tag lists the tags."""
    assert unknown_tag_lines("geo or slow", ["geo"], ["slow"]) == []
    (line,) = unknown_tag_lines("zzz", ["math", "geo"], [])
    assert line.endswith("the tasks' tags: geo, math")


def test_typo_hint_alone(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A lone process says which `-m` name is no tag, with the tag it is close to."""
    dataset(TAGGED)
    result = pytester.runpytest("--agenteval", "ds", "-m", "goe or math")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines([HINT])
    assert "'math'" not in result.stdout.str()


def test_typo_hint_under_xdist(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """The xdist controller, which collects no task, gives the same hint from the task files."""
    dataset(TAGGED)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-m", "goe", "-n", "2")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([HINT])
