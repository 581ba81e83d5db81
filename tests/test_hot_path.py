"""The per-attempt path stays cheap: what it must not do twice, and what travels on reports."""

from __future__ import annotations

import json

import pytest

from helpers import DatasetMaker, task
from pytest_agenteval.core.records import AttemptRecord

COUNTING_GRADERS = """
import pytest

BUILT = []


@pytest.hookimpl(tryfirst=True)
def pytest_agenteval_make_grader(spec, task, dataset_root):
    BUILT.append(task.id)


def pytest_sessionfinish(session):
    print("GRADERS-BUILT", len(BUILT))
"""


def test_tasks_and_graders_are_built_once_per_session(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Planning the run (is this the whole dataset?) reuses the tasks collection built instead
    of building every task and grader of the dataset a second time."""
    dataset({f"t{i}.yaml": task("ok") for i in range(3)})
    pytester.makeconftest(COUNTING_GRADERS)
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2", "-s")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*GRADERS-BUILT 3"])


def test_records_travel_on_reports_as_one_json_string(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A report carries its record as one JSON string (xdist ships a string far more cheaply
    than a nested dict), and it is the complete record that is committed."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("wrong")})
    pytester.makeconftest(
        """
        def pytest_runtest_logreport(report):
            record = (getattr(report, "agenteval", None) or {}).get("record")
            if record is not None:
                assert isinstance(record, str), type(record)
                print("RECORD-TEXT", record)
        """
    )
    reprec = pytester.inline_run("--agenteval", "ds", "-s")
    committed = [call.record for call in reprec.getcalls("pytest_agenteval_record_committed")]
    assert sorted(r["status"] for r in committed) == ["fail", "pass"]
    for record in committed:
        assert AttemptRecord.from_json(record).to_json() == record


def test_records_from_xdist_workers_are_stored_as_they_came(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under xdist the controller stores each worker's record text unchanged, one per attempt."""
    dataset({f"t{i}.yaml": task("ok") for i in range(4)})
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--attempts", "2")
    result.assert_outcomes(passed=8)
    (records,) = pytester.path.glob(".pytest_cache/agenteval/runs/*/records.jsonl")
    lines = records.read_text(encoding="utf-8").splitlines()
    keys = {(r["task_id"], r["attempt"]) for r in map(json.loads, lines)}
    assert len(lines) == len(keys) == 8
    for line in lines:
        assert AttemptRecord.from_text(line).to_text() == line
