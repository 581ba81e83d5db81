"""The report payloads: each kind's one wire form reads back as itself, and the recorder commits
each kind through its own handler (no pytester: a real store, the recorder, plain reports)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import aid
from pytest_agenteval.core.identity import AttemptId, parse_item_name
from pytest_agenteval.core.model import AgentResult, Verdict
from pytest_agenteval.core.payloads import (
    LoadError,
    NeverStarted,
    NewRecord,
    Payload,
    Replayed,
    ShippedRecord,
    from_wire,
    to_wire,
)
from pytest_agenteval.core.records import UNATTRIBUTED_CRASH, AttemptRecord, new_record
from pytest_agenteval.glue.live_progress import LiveProgress
from pytest_agenteval.glue.recorder import Recorder
from pytest_agenteval.glue.session_state import SessionState
from pytest_agenteval.store.inflight import InFlight, inflight_path
from pytest_agenteval.store.lifecycle import OpenRun
from pytest_agenteval.store.plan import make_plan
from pytest_agenteval.store.runs import Store


def record(key: AttemptId, status: str = "pass") -> AttemptRecord:
    return new_record(
        key=key,
        digest="d1",
        run_digest="r1",
        agent={},
        tags=[],
        status="pass" if status == "pass" else "fail",
        verdicts=[Verdict("equals", status == "pass", status, 1.0)],
        result=AgentResult(output="ok"),
        started_at=1.0,
        duration=0.5,
    )


def test_an_identity_derives_each_of_its_forms() -> None:
    """Item name, plan key, JSON list and label come from the one identity and read back."""
    plain, variant = aid("ds", "t", 2), aid("ds", "t", 2, "cand")
    assert (plain.item_name, variant.item_name) == ("t[attempt-2]", "t[cand-attempt-2]")
    assert parse_item_name("ds/t.yaml::t[cand-attempt-2]@g", "ds") == variant
    assert (plain.to_json(), variant.to_json()) == (["ds", "t", 2], ["ds", "t", 2, "cand"])
    assert AttemptId.from_json(variant.to_json()) == variant != plain
    assert (plain.label, variant.label) == ("t [attempt 2]", "t [cand attempt 2]")
    assert AttemptId.of_fields({"dataset": "ds", "task_id": "t", "attempt": "2"}) is None


@pytest.mark.parametrize(
    "payload",
    [
        Replayed("reuse", aid("ds", "t", 0, "v")),
        NeverStarted(aid("ds", "t", 1), "no agent"),
        LoadError("ds", "t", "/x/t.yaml", "bad"),
    ],
    ids=["replayed", "never-started", "load-error"],
)
def test_each_payload_reads_back_from_its_wire_form(payload: Payload) -> None:
    assert from_wire(to_wire(payload)) == payload


def test_a_new_record_ships_as_one_string_and_reads_back_as_shipped() -> None:
    made = NewRecord("run", record(aid("ds", "t", 0, "v")))
    wire = to_wire(made)
    assert isinstance(wire, str)
    shipped = from_wire(wire)
    assert isinstance(shipped, ShippedRecord) and shipped.key == made.record.key
    assert shipped.text == made.record.to_text() and to_wire(shipped) == wire


class Hook:
    """The record-committed hook as pluggy gives it: its implementations, and the calls."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def get_hookimpls(self) -> list[Any]:
        return [
            SimpleNamespace(
                argnames=("attempt_record",),
                wrapper=False,
                hookwrapper=False,
                plugin=object(),
                plugin_name="listener",
            )
        ]

    def __call__(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)


def recorder(tmp_path: Path, stored: list[AttemptRecord]) -> tuple[Recorder, Store, Hook]:
    store = Store(tmp_path / "agenteval")
    store.create_run("r1", [{"name": "ds", "version": "1"}], {"override": None})
    for old in stored:
        store.commit("r1", old)
    store.claim_run("r1")
    rows, _ = store.index("r1")
    plan = make_plan(rows, rerun_errors=False, rerun_all=False)
    hook = Hook()
    logged: list[pytest.TestReport] = []
    option = SimpleNamespace(
        markers=False,
        showfixtures=False,
        show_fixtures_per_test=False,
        collectonly=False,
        numprocesses=None,
    )
    config = SimpleNamespace(
        option=option,
        pluginmanager=SimpleNamespace(
            hasplugin=lambda name: False, getplugin=lambda name: None, register=lambda *a: None
        ),
        stash=pytest.Stash(),
        hook=SimpleNamespace(
            pytest_agenteval_record_committed=hook,
            pytest_runtest_logreport=lambda report: logged.append(report),
        ),
        rootpath=tmp_path,
        logged=logged,
    )
    settings = SimpleNamespace(max_cost=None, max_tokens=None, variants=(), concurrency=None)
    dataset = SimpleNamespace(name="ds")
    runtime = SimpleNamespace(
        settings=settings,
        stops=None,
        plan=plan,
        runner=SimpleNamespace(fingerprint={}, ahead=None),
        running=None,
        datasets=[],
        # the dataset's folder is tmp_path/ds; its task files are not read back (no task)
        dataset_for=lambda path: dataset if path == tmp_path / "ds" else None,
    )
    run = OpenRun("r1", True, plan)
    state = SessionState.of(run, None, None, None)
    live = LiveProgress(runtime, "r1", store.runs_dir / "r1", state.budget, distributed=False)  # type: ignore[arg-type]
    made = Recorder(config, runtime, store, run, state, live)  # type: ignore[arg-type]
    return made, store, hook


def report_of(key: AttemptId, payload: Any) -> pytest.TestReport:
    report = pytest.TestReport(
        f"ds/{key.task_id}.yaml::{key.item_name}", ("x", 0, "x"), {}, "passed", None, "call"
    )
    report.agenteval = payload  # type: ignore[attr-defined]
    return report


def send(made: Recorder, report: pytest.TestReport) -> None:
    """One report through the recorder's logreport wrapper, as pluggy runs it."""
    wrapper = made.pytest_runtest_logreport(report)
    next(wrapper)
    with pytest.raises(StopIteration):
        wrapper.send(None)


def test_the_recorder_commits_each_payload_kind(tmp_path: Path) -> None:
    """A typed new record, a worker's shipped one (replacing a stored one), a replay, an
    attempt that never started and a load error: each handled by kind, once."""
    old = record(aid("ds", "b", 0), "fail")
    made, store, hook = recorder(tmp_path, [old, record(aid("ds", "c", 0))])
    new_a = record(aid("ds", "a", 0, "v"))
    shipped_b = to_wire(NewRecord("regrade", record(aid("ds", "b", 0))))
    payloads: list[tuple[AttemptId, Any]] = [
        (new_a.key, NewRecord("run", new_a)),
        (aid("ds", "b", 0), shipped_b),
        (aid("ds", "c", 0), to_wire(Replayed("reuse", aid("ds", "c", 0)))),
        (aid("ds", "d", 0), NeverStarted(aid("ds", "d", 0), "no agent for it")),
        (aid("ds", "e", 0), to_wire(LoadError("ds", "e", "/x/e.yaml", "bad YAML"))),
    ]
    for key, payload in payloads:
        send(made, report_of(key, payload))
    assert made.state.actions == {"run": 1, "regrade": 1, "reuse": 1}
    assert made.state.reused == {aid("ds", "c", 0)}
    assert made.state.agent_errors == {"no agent for it": 1}
    assert made.state.load_errors == [
        {"dataset": "ds", "label": "e", "path": "/x/e.yaml", "message": "bad YAML"}
    ]
    assert made.state.reported == {aid("ds", "a", 0, "v"), aid("ds", "b", 0), aid("ds", "c", 0)}
    committed = [call["attempt_record"] for call in hook.calls]
    assert [r.key for r in committed] == [new_a.key, aid("ds", "b", 0)]
    assert all(isinstance(r, AttemptRecord) for r in committed)
    assert hook.calls[1]["record"] is None  # nobody asked for the dict: not parsed for it
    store.close()
    rows, problems = Store(tmp_path / "agenteval").index("r1")
    assert not problems
    assert {(r.key, r.status) for r in rows} == {
        (aid("ds", "a", 0, "v"), "pass"),
        (aid("ds", "b", 0), "pass"),
        (aid("ds", "c", 0), "pass"),
    }
    replaced = Store(tmp_path / "agenteval").record("r1", aid("ds", "b", 0))
    assert replaced is not None and len(replaced.previous) == 1


def test_the_dict_form_of_the_committed_hook_and_key_are_deprecated() -> None:
    """An implementation that still names `record` (the stored JSON as a dict) is warned when
    registered; `pytest_agenteval.Key` imports as AttemptId, warned."""
    import pluggy

    import pytest_agenteval
    from pytest_agenteval import hookspecs

    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(hookspecs)

    class Old:
        @pytest.hookimpl
        def pytest_agenteval_record_committed(self, record: dict[str, Any]) -> None:
            """An implementation written for the dict."""

    with pytest.warns(DeprecationWarning, match="attempt_record"):
        manager.register(Old())
    with pytest.warns(DeprecationWarning, match="AttemptId"):
        assert pytest_agenteval.Key is AttemptId


def crash_report(key: AttemptId, dataset: str = "ds") -> pytest.TestReport:
    """What xdist's controller makes of an item whose worker died."""
    nodeid = f"{dataset}/{key.task_id}.yaml::{key.item_name}"
    when: Any = "???"  # xdist's, outside TestReport's Literal
    return pytest.TestReport(nodeid, ("x", 0, "x"), {}, "failed", "worker 'gw0' crashed", when)


def test_a_worker_crash_is_recorded_as_the_attempts_error_or_not_counted(
    tmp_path: Path,
) -> None:
    """A crash with no other call in flight is the attempt's own (WorkerCrash); one while the
    worker's notes name other calls, or with calls run ahead and no notes, does not count
    towards the crash limit; each is committed as a crash record and closed with a teardown
    report so JUnit writes its properties."""
    made, store, _ = recorder(tmp_path, [])
    own, noted, unknown = aid("ds", "own", 0), aid("ds", "noted", 0), aid("ds", "unknown", 0)
    notes = InFlight(inflight_path(store.runs_dir / "r1", "gw1"))
    notes.note(noted, running=True)
    notes.note(aid("ds", "other", 1), running=True)
    made.runtime.settings.concurrency = 1  # type: ignore[misc]
    for key, worker in ((own, None), (noted, "gw1")):
        report = crash_report(key)
        made.crashed(report.nodeid, report, worker)
        assert report.when == "setup"
        send(made, report)
    made.runtime.settings.concurrency = 4  # type: ignore[misc]
    report = crash_report(unknown)
    made.crashed(report.nodeid, report, "gw2")
    send(made, report)
    assert [r.when for r in made.config.logged] == ["teardown"] * 3  # type: ignore[attr-defined]
    store.close()
    reread = Store(tmp_path / "agenteval")
    found = {key: reread.record("r1", key) for key in (own, noted, unknown)}
    records = {key: r for key, r in found.items() if r is not None}
    assert {key: (r.status, r.phase) for key, r in records.items()} == {
        key: ("error", "crash") for key in (own, noted, unknown)
    }
    assert records[own].error_type == "WorkerCrash"
    assert str(records[own].error).startswith("worker 'gw0' crashed (the process running")
    assert records[noted].error_type == records[unknown].error_type == UNATTRIBUTED_CRASH
    assert "the agent calls of other [attempt 1] were in flight too" in str(records[noted].error)
    assert "may have been in flight too (which is not known)" in str(records[unknown].error)


def test_a_crash_after_the_report_keeps_the_record_and_one_elsewhere_is_ignored(
    tmp_path: Path,
) -> None:
    """A worker that dies after its attempt's record came is said on the item's teardown, the
    record stays; a crashed item of no dataset is left to pytest."""
    made, store, _ = recorder(tmp_path, [])
    key = aid("ds", "a", 0)
    send(made, report_of(key, NewRecord("run", record(key))))
    after = crash_report(key)
    made.crashed(after.nodeid, after, "gw0")
    assert after.when == "teardown" and "the record stays" in str(after.longrepr)
    elsewhere = crash_report(key, dataset="tests")
    made.crashed(elsewhere.nodeid, elsewhere, "gw0")
    assert str(elsewhere.when) == "???" and not hasattr(elsewhere, "agenteval")
    store.close()
    kept = Store(tmp_path / "agenteval").record("r1", key)
    assert kept is not None and kept.status == "pass"


def test_a_failed_report_without_its_record_gets_one_saying_so(tmp_path: Path) -> None:
    """A report that failed while its payload says the attempt ran but no record came: the
    plugin failed around it, recorded as an InternalError crash record a resume runs again."""
    made, _, hook = recorder(tmp_path, [])
    key = aid("ds", "a", 0)
    report = report_of(key, Replayed("run", key))
    report.outcome, report.longrepr = "failed", "KeyError: 'x' in a plugin"
    send(made, report)
    (committed,) = [call["attempt_record"] for call in hook.calls]
    assert committed.key == key and committed.error_type == "InternalError"
    assert committed.error and committed.error.endswith("KeyError: 'x' in a plugin")
    assert made.state.actions == {"run": 1}


def test_a_payload_this_version_cannot_read_stops_the_session_said(tmp_path: Path) -> None:
    """A worker running another pytest-agenteval ships what the controller cannot read: the
    session stops with a message saying to install one version, nothing is committed."""
    made, _, hook = recorder(tmp_path, [])
    session = SimpleNamespace(shouldstop=False)
    made.session = session  # type: ignore[assignment]
    send(made, report_of(aid("ds", "a", 0), {"kind": "from-the-future"}))
    (failure,) = made.state.failures
    assert session.shouldstop == failure
    assert "carried what this pytest-agenteval cannot read" in failure
    assert "install the same version on every worker" in failure
    assert not hook.calls and not made.state.reported
