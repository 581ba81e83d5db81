"""The recorder: commits each attempt's record the moment its report reaches the controller.

Registered only in the controller (or the lone process); it is the store's one writer. Workers
compute and put records on their reports.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ..core.model import Key
from ..core.records import AttemptRecord, junit_properties, parse_item_name
from ..execution.attempt import interrupted_record
from ..sources.dataset import TaskDef, load_task_file
from ..store.lifecycle import OpenRun
from ..store.runs import Store
from .items import AttemptItem
from .runtime import Runtime
from .settings import dry_run


class Recorder:
    """Commits records, counts what the session did, and notices attempts that vanish."""

    def __init__(self, config: pytest.Config, runtime: Runtime, store: Store, run: OpenRun):
        self.config = config
        self.runtime = runtime
        self.store = store
        self.run = run
        self.dry = dry_run(config)
        self.actions: Counter[str] = Counter()
        self.load_errors: list[dict[str, str]] = []
        self.agent_errors: Counter[str] = Counter()
        """Agents that could not be built (their problem, rendered) and how many attempts
        did not start because of each."""
        self.other_failures = 0
        self.planned_keys: set[Key] = {row.key for row in run.plan.rows.values()}
        self.collected_once = False

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._planned([i.key for i in session.items if isinstance(i, AttemptItem)])

    def node_collected(self, ids: list[str]) -> None:
        """Under xdist: what the first worker collected is this session's plan."""
        if self.collected_once:
            return
        self.collected_once = True
        keys = []
        for nodeid in ids:
            parsed = parse_item_name(nodeid)
            dataset = self._dataset_of(nodeid)
            if parsed and dataset:
                keys.append((dataset, *parsed))
        self._planned(keys)

    def _planned(self, keys: list[Key]) -> None:
        self.planned_keys.update(keys)
        if not self.dry:
            self.store.set_planned(self.run.run_id, len(self.planned_keys))

    def _dataset_of(self, nodeid: str) -> str | None:
        dataset = self.runtime.dataset_for(self._path_of(nodeid))
        return dataset.name if dataset else None

    def _path_of(self, nodeid: str) -> Path:
        return (self.config.rootpath / nodeid.split("::")[0]).resolve()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Any:
        info = getattr(report, "agenteval", None)
        if info is None:
            if report.failed:
                self.other_failures += 1
            return (yield)
        if "load_error" in info:
            self.load_errors.append(info["load_error"])
            return (yield)
        if "agent_error" in info:  # the attempt never started: nothing to commit
            self.agent_errors[info["agent_error"]] += 1
            return (yield)
        self.actions[info["action"]] += 1
        data = info.get("record")
        if data is None and report.failed and info["action"] != "reuse":
            data = self._vanished(report, "InternalError", "the plugin failed around it")
        if data is not None:
            self._commit(AttemptRecord.from_json(data))
        result = yield
        # Every plugin has seen the record; the terminal reporter keeps reports all session long.
        report.agenteval = None  # type: ignore[attr-defined]
        if info.get("crashed"):
            self._close_crashed(report)
        return result

    def _commit(self, record: AttemptRecord) -> None:
        replaces = self.runtime.plan.stored(record.key) is not None
        self.store.commit(self.run.run_id, record, replaces=replaces)
        self.config.hook.pytest_agenteval_record_committed(
            record=record.to_json(), config=self.config
        )

    def crashed(self, nodeid: str, report: pytest.TestReport) -> None:
        """A worker died running `nodeid`: an interruption, recorded as an error a resume runs
        again; unless the attempt was only replaying its stored verdict, which stays."""
        parsed = parse_item_name(nodeid)
        dataset = self._dataset_of(nodeid)
        if parsed is None or dataset is None:
            return
        key: Key = (dataset, *parsed)
        task = self._task(nodeid, parsed[0])
        if task is not None:
            decision = self.runtime.plan.decide(key, task.digest, task.run_digest, task.regradable)
            if decision.action == "reuse":
                report.agenteval = {"action": "reuse", "key": list(key), "record": None}  # type: ignore[attr-defined]
                return
        message = (
            f"{report.longrepr} (the process running the attempt died: os._exit, a signal or OOM)"
        )
        fingerprint = self.runtime.runner.fingerprint
        record = interrupted_record(task, key, fingerprint, message, "WorkerCrash")
        report.when = "setup"  # type: ignore[assignment]
        report.user_properties = junit_properties(record, reused=False)
        report.agenteval = {  # type: ignore[attr-defined]
            "action": "run",
            "key": list(key),
            "record": record.to_json(),
            "crashed": True,
        }

    def _vanished(self, report: pytest.TestReport, error_type: str, why: str) -> dict[str, Any]:
        parsed = parse_item_name(report.nodeid)
        assert parsed is not None
        dataset = self._dataset_of(report.nodeid) or ""
        task = self._task(report.nodeid, parsed[0])
        message = f"the attempt ended without a record ({why}):\n{report.longrepr}"
        record = interrupted_record(
            task, (dataset, *parsed), self.runtime.runner.fingerprint, message, error_type
        )
        return record.to_json()

    def _task(self, nodeid: str, task_id: str) -> TaskDef | None:
        path = self._path_of(nodeid)
        dataset = self.runtime.dataset_for(path)
        if dataset is None:
            return None
        loaded = load_task_file(path, dataset, cache=self.runtime.specs)
        return next((t for t in loaded if isinstance(t, TaskDef) and t.id == task_id), None)

    def _close_crashed(self, report: pytest.TestReport) -> None:
        """A crashed attempt gets no teardown report; send one so JUnit writes its properties."""
        closing = pytest.TestReport(
            nodeid=report.nodeid,
            location=report.location,
            keywords={},
            outcome="passed",
            longrepr=None,
            when="teardown",
            user_properties=report.user_properties,
        )
        closing.node = getattr(report, "node", None)  # type: ignore[attr-defined]
        self.config.hook.pytest_runtest_logreport(report=closing)
