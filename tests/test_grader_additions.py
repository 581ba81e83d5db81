"""`contains` with `none:` and `json` with `schema:`: verdicts, reasons and load errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import DatasetMaker, task
from pytest_agenteval.core.errors import GraderSpecError
from pytest_agenteval.core.model import AgentResult, GraderSpec, Task, TaskSpec, normalize_grader
from pytest_agenteval.execution import graders
from pytest_agenteval.execution.graders import GradeContext, make_builtin_grader


def grade(raw: Any, output: str, expected: Any = None) -> tuple[bool, str]:
    spec = GraderSpec.model_validate(normalize_grader(raw))
    grader = make_builtin_grader(spec, TaskSpec(input="q", expected=expected), Path("."))
    assert grader is not None
    task_ = Task(id="t", input="q", metadata={}, attempt=0, seed=1, workspace=Path("."))
    verdict = grader.grade(GradeContext(output, expected, task_, AgentResult(output=output)))
    return verdict.passed, verdict.reason


@pytest.mark.parametrize(
    ("options", "output", "expected", "verdict"),
    [
        ({"none": ["error", "sorry"]}, "All fine.", None, (True, "none of 'error', 'sorry'")),
        ({"none": ["error"]}, "It is 42.", "42", (True, "contains '42'; none of 'error'")),
        ({"none": ["error"]}, "It is 41.", "42", (False, "missing '42'")),
        (
            {"none": ["error", "sorry"]},
            "Sorry, an error.",
            None,
            (False, "contains forbidden 'error'"),
        ),
        (
            {"none": ["error", "sorry"], "case_insensitive": True},
            "Sorry, an Error.",
            None,
            (False, "contains forbidden 'error', 'sorry'"),
        ),
        (
            {"all": ["Paris"], "none": ["London"]},
            "Paris",
            None,
            (True, "contains 'Paris'; none of 'London'"),
        ),
        ({"all": ["Paris"], "none": ["London"]}, "London", None, (False, "missing 'Paris'")),
        (
            {"any": ["a", "b"], "none": ["c"]},
            "a c",
            None,
            (False, "contains forbidden 'c'"),
        ),
    ],
)
def test_contains_none(
    options: dict[str, Any], output: str, expected: Any, verdict: tuple[bool, str]
) -> None:
    """`none:` fails on any listed string, names each one found, and composes with `all`/`any`
    and with `expected` (which must still occur when the task has one)."""
    assert grade({"contains": options}, output, expected) == verdict


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name"],
}


@pytest.mark.parametrize(
    ("output", "options", "verdict"),
    [
        ('{"name": "a", "age": 3}', {}, (True, "output matches the schema")),
        ('```json\n{"name": "a"}\n```', {}, (True, "output matches the schema")),
        ('{"age": 3}', {}, (False, "schema: at $: 'name' is a required property")),
        (
            '{"name": "a", "age": -1}',
            {},
            (False, "schema: at $.age: -1 is less than the minimum of 0"),
        ),
        ('{"name": "a"}', {"subset": {"name": "b"}}, (False, 'at $.name: expected "b", got "a"')),
        ('{"name": "a"}', {"subset": {"name": "a"}}, (True, "JSON contains the expected values")),
    ],
)
def test_json_schema(output: str, options: dict[str, Any], verdict: tuple[bool, str]) -> None:
    """The parsed output must match `schema:` (the most relevant violation is the reason), and
    then `subset` when there is one."""
    assert grade({"json": {"schema": SCHEMA, **options}}, output) == verdict


def test_invalid_schema_is_a_load_error_at_the_grader(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A schema that is not a valid JSON Schema fails loading at the grader's line; the other
    tasks run."""
    bad = "input: q\ngraders:\n  - json:\n      schema: {type: objekt}\n"
    dataset({"good.yaml": task("ok"), "bad.yaml": bad})
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ds/bad.yaml:3: at graders[[]0[]].schema: not a valid JSON Schema: at schema.type: *objekt*"
        ]
    )


def test_schema_without_jsonschema_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the jsonschema package, `schema:` is a spec error saying what to install."""
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    monkeypatch.setattr(graders, "_validators", {})
    with pytest.raises(GraderSpecError) as info:
        grade({"json": {"schema": {"type": "object", "title": "unseen"}}}, "{}")
    assert "needs the jsonschema package" in info.value.problem
    assert info.value.hint == "pip install 'pytest-agenteval[jsonschema]'"
