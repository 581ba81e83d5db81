"""The per-attempt path stays cheap: what it must not do twice, and what travels on reports."""

from __future__ import annotations

import json
import re

import pytest

from helpers import DatasetMaker, task
from pytest_agenteval.core.payloads import ShippedRecord, from_wire
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


@pytest.mark.slow
def test_a_new_record_travels_as_one_string_and_is_stored_as_it_came(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A report carries a new record as one string (execnet ships one value far more cheaply
    than a dict of them): its action, index entry and record JSON; the xdist controller stores
    both texts as they came, and the hook gets the complete record."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("wrong")})
    pytester.makeconftest(
        """
        import json

        ON_CONTROLLER = []

        def pytest_configure(config):
            ON_CONTROLLER.append(not hasattr(config, "workerinput"))

        def pytest_runtest_logreport(report):
            carried = getattr(report, "agenteval", None)
            if carried is not None and ON_CONTROLLER[0]:
                assert isinstance(carried, str), type(carried)
                print("SHIPPED", json.dumps(carried))

        def pytest_agenteval_record_committed(attempt_record):
            print("COMMITTED", json.dumps(attempt_record.to_json()))
        """
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "-s")
    result.assert_outcomes(passed=1, failed=1)
    found = (re.search("(SHIPPED|COMMITTED) (.*)", line) for line in result.outlines)
    printed = [m.groups() for m in found if m]  # after the progress characters
    wired = [from_wire(json.loads(text)) for kind, text in printed if kind == "SHIPPED"]
    shipped = [s for s in wired if isinstance(s, ShippedRecord)]
    assert len(shipped) == len(wired)
    committed = [json.loads(text) for kind, text in printed if kind == "COMMITTED"]
    assert sorted(s.action for s in shipped) == ["run", "run"]
    assert sorted(r["status"] for r in committed) == ["fail", "pass"]
    (run,) = pytester.path.glob(".pytest_cache/agenteval/runs/*")
    records = (run / "records.jsonl").read_text(encoding="utf-8").splitlines()
    index = [json.loads(line) for line in (run / "index.jsonl").read_text().splitlines()]
    assert sorted(records) == sorted(s.text for s in shipped)
    assert sorted(map(json.loads, records), key=str) == sorted(committed, key=str)
    entries = [{k: v for k, v in line.items() if k != "record"} for line in index]
    assert sorted(entries, key=str) == sorted((s.fields for s in shipped), key=str)


TYPED_IN_PROCESS = """
import json

import pytest_agenteval.glue.recorder as recorder
from pytest_agenteval.core.payloads import NewRecord
from pytest_agenteval.core.records import AttemptRecord


class NoParsing:
    def __getattr__(self, name):
        if name == "loads":
            raise AssertionError("the lone process parsed a record it made")
        return getattr(json, name)


def pytest_configure(config):
    recorder.json = NoParsing()


def pytest_runtest_logreport(report):
    carried = getattr(report, "agenteval", None)
    if carried is not None and report.when == "call":
        assert isinstance(carried, NewRecord), type(carried)
        assert isinstance(carried.record, AttemptRecord)
        print("TYPED", carried.action, carried.record.status)


def pytest_agenteval_record_committed(attempt_record):
    print("COMMITTED", attempt_record.status)
"""


def test_a_lone_process_commits_the_typed_record_its_report_carries(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Alone, an attempt's report carries its typed record (no side channel, no JSON text to
    parse back): the recorder commits it and the hook gets its JSON, parsing nothing."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("wrong")})
    pytester.makeconftest(TYPED_IN_PROCESS)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-s", "-p", "no:xdist")
    result.assert_outcomes(passed=1, failed=1)
    typed = sorted(line.split()[-1] for line in result.outlines if "TYPED run" in line)
    committed = sorted(line.split()[-1] for line in result.outlines if "COMMITTED" in line)
    assert typed == committed == ["fail", "pass"]
    (records,) = pytester.path.glob(".pytest_cache/agenteval/runs/*/records.jsonl")
    assert len(records.read_text(encoding="utf-8").splitlines()) == 2


@pytest.mark.slow
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
