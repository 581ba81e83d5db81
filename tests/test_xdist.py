"""pytest-xdist: -n N gives the same results as one process; crashes and stops lose nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from junitparser import xunit2

from helpers import DatasetMaker, aid, comparable, latest_record, stored, summary_of, task

MIXED = {
    **{f"ok{i}.yaml": task(metadata={"answers": ["ok", "no", "ok"]}, tags=["a"]) for i in range(5)},
    "bad.yaml": task(metadata={"answers": ["no"]}, tags=["b"]),
    "boom.yaml": task(metadata={"raise": "x"}),
    "list.yaml": {"tasks": [{"id": f"l{i}", **task("ok")} for i in range(3)]},
}


@pytest.mark.parametrize(
    "args",
    [
        ["-n", "2"],
        pytest.param(["-n", "8"], marks=pytest.mark.slow),
        pytest.param(["-n", "2", "--dist", "loadscope"], marks=pytest.mark.slow),
        pytest.param(["-n", "2", "--dist", "loadfile"], marks=pytest.mark.slow),
        pytest.param(["-n", "2", "--dist", "worksteal"], marks=pytest.mark.slow),
    ],
)
def test_parallel_summary_equals_single_process(
    pytester: pytest.Pytester, dataset: DatasetMaker, args: list[str]
) -> None:
    """For a deterministic agent, summary.json is identical with and without workers."""
    dataset(MIXED)
    pytester.runpytest_subprocess("--agenteval", "ds", "--attempts", "3", "-p", "no:xdist")
    single = comparable(summary_of(pytester))
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--attempts", "3", *args)
    result.assert_outcomes(passed=19, failed=8, errors=3)
    assert comparable(summary_of(pytester)) == single
    assert len(stored(pytester.path)) == 30


@pytest.mark.slow
def test_worker_death_is_an_error_and_the_run_goes_on(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """An agent that kills its worker errors that attempt; the rest runs; summary counts it."""
    dataset(
        {"dies.yaml": task(metadata={"exit": 3}), **{f"ok{i}.yaml": task("ok") for i in range(4)}}
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--junitxml=out.xml")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(
        ["*worker 'gw*' crashed while running 'ds/dies.yaml::dies[[]attempt-0[]]'*"]
    )
    summary = summary_of(pytester)
    assert summary["counts"]["error"] == 1 and summary["status"] == "complete"
    (dies,) = [t for t in summary["tasks"] if t["task_id"] == "dies"]
    assert "the process running the attempt died" in dies["attempts"][0]["reason"]
    cases = {c.name: c for s in xunit2.JUnitXml.fromfile(str(pytester.path / "out.xml")) for c in s}
    dies_case = cases["dies[attempt-0]"]
    assert isinstance(dies_case, xunit2.TestCase)  # what an xunit2 suite holds
    props = {p.name: p.value for p in dies_case.properties()}
    assert (
        cases["dies[attempt-0]"].is_error
        and props["status"] == "error"
        and props["task_id"] == "dies"
    )
    message = cases["dies[attempt-0]"].result[0].message
    assert (
        message.startswith("failed on setup with \"worker 'gw")
        and "crashed while running" in message
    )


@pytest.mark.slow
def test_stop_early_then_resume(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """-x under xdist: finished attempts are committed, the run is marked interrupted, and
    --resume-suite completes it without redoing them."""
    dataset(
        {
            "a_fail.yaml": task(metadata={"answers": ["no"]}),
            **{f"t{i}.yaml": task("ok", metadata={"sleep": 0.1}) for i in range(8)},
        }
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "-x")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert summary_of(pytester)["status"] == "interrupted"
    done = {(t, a) for t, a, _ in stored(pytester.path)}
    assert 1 <= len(done) < 9
    calls = len(dataset.calls())
    pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--resume-suite").assert_outcomes(
        passed=8, failed=1
    )
    assert len(dataset.calls()) - calls == 9 - len(done)
    assert summary_of(pytester)["status"] == "complete"


@pytest.mark.slow
def test_regrade_under_xdist_ships_records_to_workers(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Workers regrade from records the controller sends them; no agent call, same verdicts."""
    tasks = {f"t{i}.yaml": task("answer: ok", expected="ok") for i in range(4)}
    dataset(tasks)
    pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2").assert_outcomes(failed=4)
    dataset({name: {**t, "graders": ["contains"]} for name, t in tasks.items()})
    pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--resume-suite").assert_outcomes(
        passed=4
    )
    assert len(dataset.calls()) == 4
    assert summary_of(pytester)["counts"]["regraded"] == 4


@pytest.mark.slow
def test_ctrl_c_commits_what_workers_already_sent(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """When the controller is interrupted, reports that arrived from workers are still
    committed; only attempts that were in flight are lost (and a resume runs them)."""
    dataset({f"t{i:02}.yaml": task("ok") for i in range(30)})
    pytester.makeconftest(
        """
        import os, pathlib, time

        def pytest_configure(config):
            os._on_controller = not hasattr(config, "workerinput")

        def pytest_runtest_logreport(report):
            on_controller = os._on_controller
            if on_controller and getattr(report, "agenteval", None) and not hasattr(os, "_stop"):
                os._stop = True
                # Each worker runs all it was handed but its last attempt (xdist holds that
                # back until it knows what comes next): wait for those, and their reports.
                log = pathlib.Path("ds/calls.log")
                give_up = time.monotonic() + 120  # a hang guard, not a timing check
                while time.monotonic() < give_up and len(log.read_text().splitlines()) < 28:
                    time.sleep(0.05)
                time.sleep(1)
                raise KeyboardInterrupt
        """
    )
    # worksteal hands out every attempt up front, so the workers go on while the controller waits
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--dist", "worksteal")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    calls, committed = len(dataset.calls()), len(stored(pytester.path))
    assert 28 <= calls <= 30 and committed >= 26  # interrupted workers start nothing more
    (pytester.path / "conftest.py").unlink()
    pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--resume-suite")
    assert len(stored(pytester.path)) == 30 and len(dataset.calls()) == calls + 30 - committed


def test_a_worker_that_does_not_see_the_run_folder_keeps_its_stops_local(tmp_path: Path) -> None:
    """A worker on another machine (the controller's run folder is not there) checks stops and
    holds limits in a folder of its own machine, writes nothing at the controller's path, and
    says why; a worker that sees the run folder shares it."""
    from pytest_agenteval.glue.xdist import worker_stops

    shared = tmp_path / "runs/abc"
    shared.mkdir(parents=True)
    (shared / "run.json").write_text("{}")
    stops, note = worker_stops({"run_dir": str(shared), "deadline": 5.0}, tmp_path / "own")
    assert (stops.run_dir, stops.deadline, note) == (shared, 5.0, None)
    elsewhere = tmp_path / "not-here/runs/abc"
    stops, note = worker_stops({"run_dir": str(elsewhere), "deadline": None}, tmp_path / "own")
    assert stops.run_dir == tmp_path / "own/unshared/abc"
    assert note is not None and "does not see the run folder" in note
    assert "cancel, the spend and token caps" in note
    assert stops.reason() is None and not elsewhere.exists()


@pytest.mark.slow
def test_worker_without_the_run_folder_is_named_in_the_terminal(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A worker told a run folder it cannot see (as on another machine) still runs and reports
    its attempts, and the terminal names it and what it means for stops and limits."""
    dataset({f"t{i}.yaml": task("ok") for i in range(4)})
    pytester.makeconftest(
        """
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_configure_node(node):
            stops = node.workerinput["agenteval"]["stops"]
            stops["run_dir"] = "/nonexistent/elsewhere/" + stops["run_dir"].rsplit("/", 1)[-1]
        """
    )
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "1", "--agenteval-concurrency", "2"
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["agenteval: worker gw0 does not see the run folder /nonexistent*"])
    assert len(stored(pytester.path)) == 4


@pytest.mark.slow
def test_the_controller_refreezes_the_reports_it_keeps(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """xdist's controller moves the reports it keeps out of the cyclic GC's way as they come."""
    dataset({f"ok{i}.yaml": task("ok") for i in range(4)})
    pytester.makeconftest(
        """
        import gc
        import pytest
        import pytest_agenteval.glue.collect as collect

        collect.REFREEZE_EVERY = 3
        frozen = []

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtestloop(session):
            frozen.append(gc.get_freeze_count())

        def pytest_sessionfinish(session):
            if not hasattr(session.config, "workerinput"):
                print(f"FROZEN {frozen[0]} {gc.get_freeze_count()}")
        """
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--attempts", "3", "-n", "2", "-s")
    result.assert_outcomes(passed=12)
    (line,) = [line for line in result.outlines if "FROZEN" in line]
    before, after = map(int, line.split("FROZEN")[1].split())
    assert after > before


NEIGHBOURS = """
import os, pathlib, time

HERE = pathlib.Path(__file__).parent


def waits(task):
    (HERE / "a.started").touch()
    for _ in range(60):  # alone, it answers after 3 s
        if (HERE / "b.started").exists():
            time.sleep(30)  # b, in flight beside it, ends the process first (a hang guard)
        time.sleep(0.05)
    return "ok"


def dies(task):
    (HERE / "b.started").touch()
    for _ in range(600):
        if (HERE / "a.started").exists():
            os._exit(1)
        time.sleep(0.05)
    return "ok"
"""


@pytest.mark.slow
def test_a_crash_while_other_calls_are_in_flight_is_not_held_against_the_waiting_attempt(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A worker killed by one agent call while its main thread waits on another attempt's call
    does not count towards that attempt's crash limit; the resume runs each call that was in
    flight alone, so the killer's crash is proven its own and the other attempt passes."""
    # xdist sends a and b to one worker, c and d to the other.
    root = dataset(
        {
            "a.yaml": {**task(), "agent": "neighbours:waits"},
            "b.yaml": {**task(), "agent": "neighbours:dies"},
            **{f"{name}.yaml": task("ok") for name in "cd"},
        }
    )
    (root / "neighbours.py").write_text(NEIGHBOURS)
    args = ["--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "4"]
    result = pytester.runpytest_subprocess(*args)
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running*a[[]attempt-0[]]*"])
    assert stored(pytester.path) == [("a", 0, "error"), ("b", 0, "error"), ("c", 0, "pass"), ("d", 0, "pass")]  # fmt: skip
    a_error = latest_record(pytester.path, "a", 0)["error"]
    assert "; the agent calls of b [attempt 0] were in flight too: any of them" in a_error
    assert "does not count towards the 2 crashes in a row" in a_error
    for marker in ("a.started", "b.started"):
        (root / marker).unlink()
    pytester.runpytest_subprocess(*args, "--resume-suite").assert_outcomes(passed=3, errors=1)
    assert stored(pytester.path)[:2] == [("a", 0, "pass"), ("b", 0, "error")]
    b_error = latest_record(pytester.path, "b", 0)["error"]
    assert "the process running the attempt died" in b_error
    plan = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-plan")
    plan.stdout.no_fnmatch_line("*crashed*")


def test_in_flight_notes_read_back_what_is_in_flight_now(tmp_path: Path) -> None:
    """A worker's notes always read as the calls in flight at its last write, also after a
    shorter note overwrote a longer one; notes that cannot be read are "not known"."""
    from pytest_agenteval.store.inflight import InFlight, inflight_path, read_in_flight

    path = inflight_path(tmp_path, "gw0")
    notes = InFlight(path)
    assert read_in_flight(path) == []
    notes.note(aid("ds", "a-long-task-id", 0), True)
    notes.note(aid("ds", "b", 1), True)
    notes.note(aid("ds", "a-long-task-id", 0), False)
    assert read_in_flight(path) == [aid("ds", "b", 1)]
    path.write_text('[["ds", "b"')
    assert read_in_flight(path) is None
    assert read_in_flight(inflight_path(tmp_path, "gw9")) is None


def test_only_crashes_proven_the_attempts_own_count_towards_the_limit() -> None:
    """A crash while other calls were in flight neither counts nor breaks the row of an
    attempt's own crashes."""
    from pytest_agenteval.core.records import UNATTRIBUTED_CRASH, crash_count
    from pytest_agenteval.execution.attempt import interrupted_record

    def crash(error_type: str) -> dict[str, object]:
        return interrupted_record(None, aid("ds", "a", 0), {}, "died", error_type).to_json()

    own, other = crash("WorkerCrash"), crash(UNATTRIBUTED_CRASH)
    latest = interrupted_record(None, aid("ds", "a", 0), {}, "died", UNATTRIBUTED_CRASH)
    assert crash_count(latest.with_previous((other, other))) == 0
    assert crash_count(latest.with_previous((own, other))) == 1
    mine = interrupted_record(None, aid("ds", "a", 0), {}, "died", "WorkerCrash")
    assert crash_count(mine.with_previous((other, own))) == 2


DIES_AFTER_COMMIT = """
import os, pathlib, time

import pytest

HERE = pathlib.Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
    '''On a worker, once: die in ok0's teardown, after the controller committed its record.'''
    flag = HERE / "killed.flag"
    if item.name != "ok0[attempt-0]" or flag.exists() or not hasattr(item.config, "workerinput"):
        return
    for _ in range(600):
        runs = HERE.glob(".pytest_cache/agenteval/runs/*/records.jsonl")
        if any('"ok0"' in path.read_text() for path in runs):
            break
        time.sleep(0.05)
    flag.touch()
    os._exit(1)
"""


def test_a_crash_after_the_record_was_committed_keeps_the_record(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A worker that dies after its item's record reached the controller (before the item's
    last report) is reported as a crash of that item by xdist: the committed record stays (no
    crash record over it), the crash is said as the item's teardown error, and a resume
    calls no agent for it."""
    dataset({f"ok{i}.yaml": task("ok") for i in range(4)})
    pytester.makeconftest(DIES_AFTER_COMMIT)
    args = ["--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "8"]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of ds/ok0.yaml*",
            "*crashed while running*ok0[[]attempt-0[]]*",
            "*record was committed*",
        ]
    )
    assert (pytester.path / "killed.flag").exists()
    assert stored(pytester.path) == [(f"ok{i}", 0, "pass") for i in range(4)]
    folder = next((pytester.path / ".pytest_cache/agenteval/runs").iterdir())
    assert len((folder / "records.jsonl").read_text().splitlines()) == 4
    calls = dataset.calls()
    assert calls.count("ok0 0") == 1  # others in flight on the dead worker may run again
    pytester.runpytest_subprocess(*args, "--resume-suite").assert_outcomes(passed=4)
    assert dataset.calls() == calls
