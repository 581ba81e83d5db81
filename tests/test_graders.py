"""Built-in graders judge outputs and explain why, as plain unit tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_agenteval.core.errors import GraderError, GraderSpecError
from pytest_agenteval.core.model import (
    AgentResult,
    GraderSpec,
    Task,
    TaskSpec,
    Verdict,
    normalize_grader,
)
from pytest_agenteval.execution.graders import (
    GradeContext,
    as_verdict,
    json_mismatch,
    make_builtin_grader,
    parse_number,
)


def grade(raw: Any, output: str, expected: Any = None, workspace: Path | None = None) -> Verdict:
    spec = GraderSpec.model_validate(normalize_grader(raw))
    task_spec = TaskSpec(input="q", expected=expected)
    grader = make_builtin_grader(spec, task_spec, Path(__file__).parent)
    assert grader is not None
    task = Task(id="t", input="q", metadata={}, attempt=0, seed=1, workspace=workspace or Path("."))
    return as_verdict(
        spec.type, grader.grade(GradeContext(output, expected, task, AgentResult(output=output)))
    )


@pytest.mark.parametrize(
    ("raw", "output", "expected", "passed"),
    [
        ("equals", " 42\n", 42, True),
        ("equals", "Paris", "paris", False),
        ({"equals": {"case_insensitive": True}}, "PARIS", "paris", True),
        ({"equals": {"strip": False}}, " a", "a", False),
        ({"equals": "yes"}, "yes", None, True),
        ({"contains": "Paris"}, "It is Paris.", None, True),
        ({"contains": {"all": ["a", "b"]}}, "a only", None, False),
        ({"contains": {"any": ["x", "b"]}}, "a b", None, True),
        ({"contains": {"any": ["x", "y"], "case_insensitive": True}}, "X", None, True),
        ("contains", "one two", ["one", "two"], True),
        ("contains", "The answer is 42.", 42, True),
        ({"regex": r"^\d{4}-\d{2}$"}, "2024-03", None, True),
        ({"regex": {"pattern": "abc", "fullmatch": True}}, "abcd", None, False),
        ({"regex": {"pattern": "ABC", "ignorecase": True}}, "xabcx", None, True),
        ("json", '{"a": 1, "b": [1, {"c": 2}]}', {"b": [1, {"c": 2}]}, True),
        ("json", 'Here:\n```json\n{"a": 1}\n```', {"a": 1}, True),
        ("json", '{"a": true}', {"a": 1}, False),
        ("json", "not json", None, False),
        ({"json": {"subset": None}}, "[1]", None, True),
        ("number", "The answer is 1,234.5.", 1234.5, True),
        ({"number": {"tolerance": 0.1}}, "3.05", 3, True),
        ({"number": {"rel_tolerance": 0.01}}, "101", 100, True),
        ("number", "no digits", 1, False),
        ({"number": 7}, "7", None, True),
    ],
)
def test_builtin_graders(raw: Any, output: str, expected: Any, passed: bool) -> None:
    """Each built-in passes and fails where a user would expect, always with a reason."""
    verdict = grade(raw, output, expected)
    assert verdict.passed is passed
    assert verdict.reason
    assert verdict.score == (1.0 if passed else 0.0)


def test_equals_failure_shows_expected_as_written() -> None:
    """A case-insensitive `equals` names the expected text as the task wrote it, not folded."""
    verdict = grade({"equals": {"case_insensitive": True}}, "Sydney", " Canberra\n")
    assert not verdict.passed
    assert verdict.reason == "expected 'Canberra' (ignoring case), got 'Sydney'"
    assert grade("equals", "41", 42).reason == "expected '42', got '41'"


def test_json_mismatch_names_the_path() -> None:
    assert (
        json_mismatch({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}, "$")
        == "at $.a.b[1]: expected 2, got 3"
    )
    assert json_mismatch({"a": 1}, {}, "$") == "at $: missing key 'a'"


def test_parse_number() -> None:
    assert parse_number(" -3e2 ") == -300
    assert parse_number("x 1,000 y 2") == 2
    assert parse_number("none") is None


def test_command_grader_runs_in_the_workspace(tmp_path: Path) -> None:
    """`command` passes on exit 0, fails with the output tail otherwise; the output is on stdin."""
    script = "import sys, pathlib; data = sys.stdin.read(); print('got', data); sys.exit(0 if pathlib.Path('ok').exists() else 3)"
    raw = {"command": ["{python}", "-c", script]}
    failed = grade(raw, "hello", workspace=tmp_path)
    assert not failed.passed and "exited 3" in failed.reason and "got hello" in failed.reason
    (tmp_path / "ok").touch()
    assert grade(raw, "hello", workspace=tmp_path).passed


def test_command_grader_timeout_fails_and_missing_program_errors(tmp_path: Path) -> None:
    slow = {
        "command": {"argv": [sys.executable, "-c", "import time; time.sleep(30)"], "timeout": 0.3}
    }
    verdict = grade(slow, "", workspace=tmp_path)
    assert not verdict.passed and "timed out" in verdict.reason
    with pytest.raises(GraderError, match="could not start"):
        grade({"command": "no-such-program-xyz"}, "", workspace=tmp_path)


def test_python_grader_fills_parameters_by_name(tmp_path: Path) -> None:
    """`python` graders name the values they want; bools, scores and (value, reason) all work."""
    (tmp_path / "checks.py").write_text(
        "def exact(output, expected):\n    return output == expected\n"
        "def scored(output):\n    return len(output) / 10, 'length score'\n"
        "def bad(output, nonsense):\n    return True\n"
        "def weird(output):\n    return 'yes'\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        assert grade({"python": "checks:exact"}, "a", "a").passed
        verdict = grade({"python": {"function": "checks:scored", "threshold": 0.5}}, "abcdef")
        assert verdict.passed and verdict.score == 0.6 and verdict.reason == "length score"
        with pytest.raises(GraderSpecError, match="parameter 'nonsense' cannot be filled"):
            grade({"python": "checks:bad"}, "a")
        with pytest.raises(GraderSpecError, match="no module named 'nope'"):
            grade({"python": "nope:f"}, "a")
        with pytest.raises(GraderSpecError, match="has no attribute 'exat'") as info:
            grade({"python": "checks:exat"}, "a")
        assert info.value.hint == "did you mean 'exact'?"
        with pytest.raises(GraderError, match="returned 'yes'"):
            grade({"python": "checks:weird"}, "a")
    finally:
        sys.path.remove(str(tmp_path))
