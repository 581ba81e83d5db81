"""The recorder: plans the run from what the session selected (and marks a run that covers only
part of its datasets as narrowed), then commits each attempt's record the moment its report
reaches the controller.

Registered only in the controller (or the lone process); it is the store's one writer. Workers
compute and put records on their reports.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import ReportError, StoreError, display_path
from ..core.model import Key
from ..core.records import AttemptRecord, junit_properties, parse_item_name
from ..execution.attempt import interrupted_record
from ..sources.dataset import TaskDef, load_task_file
from ..sources.discovery import arg_path
from ..store.lifecycle import OpenRun, narrowing
from ..store.progress import PROGRESS_FILE, Progress
from ..store.runs import Store
from ..store.stops import Budget
from .collect import LoadErrorItem, load_error_label
from .failures import junit_error_message
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
        self.reused: set[Key] = set()
        """Attempts whose stored verdict this session replayed (the HTML report flags them)."""
        self.load_errors: list[dict[str, str]] = []
        self.agent_errors: Counter[str] = Counter()
        """Agents that could not be built (their problem, rendered) and how many attempts
        did not start because of each."""
        self.other_failures = 0
        self.planned_keys: set[Key] = {row.key for row in run.plan.rows.values()}
        self.collected_once = False
        self.session: pytest.Session | None = None
        self._distributed = config.pluginmanager.hasplugin("dsession") or bool(
            getattr(config.option, "numprocesses", None)
        )
        self.failures: list[str] = []
        """Store or report writes that failed: each stops the session; the run is interrupted."""
        settings = runtime.settings
        self.budget = Budget(settings.max_cost, settings.max_tokens)
        for row in run.plan.rows.values():  # a resumed run's earlier sessions spent too
            self.budget.add(row.spend, row.input_tokens, row.output_tokens)
        self._check_budget()
        folder = None if self.dry else store.runs_dir / run.run_id / PROGRESS_FILE
        self.progress = Progress(run.run_id, folder)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def failed(self, exc: StoreError | ReportError) -> None:
        """A store or report write failed (disk full, read-only): stop cleanly and say where
        and why, once; what is committed stays committed."""
        message = f"agenteval: {exc}"
        if message not in self.failures:
            self.failures.append(message)
        if self.session is not None:
            self.session.shouldstop = self.failures[0]
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None:  # xdist's controller loop checks its own flag
            dsession.shouldstop = self.failures[0]

    @pytest.hookimpl(tryfirst=True)  # before the spec cache is saved and emptied
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        keys: list[Key] = []
        broken: set[tuple[str, str]] = set()
        for item in session.items:
            if isinstance(item, AttemptItem):
                keys.append(item.key)
            elif isinstance(item, LoadErrorItem):
                broken.add((item.dataset_name, item.failure.label))
        self._selected(keys, broken)

    def node_collected(self, ids: list[str]) -> None:
        """Under xdist: what the first worker collected is this session's selection."""
        if self.collected_once:
            return
        self.collected_once = True
        keys: list[Key] = []
        broken: set[tuple[str, str]] = set()
        datasets: dict[str, str | None] = {}  # by file: resolving a path costs system calls
        for nodeid in ids:
            file = nodeid.split("::")[0]
            if file not in datasets:
                datasets[file] = self._dataset_of(nodeid)
            dataset = datasets[file]
            parsed = parse_item_name(nodeid)
            label = load_error_label(nodeid)
            if dataset and parsed:
                keys.append((dataset, *parsed))
            elif dataset and label is not None:
                broken.add((dataset, label))
        self._selected(keys, broken)
        for ds in self.runtime.datasets:  # what planning loaded is not needed any more
            ds.forget_reads()

    def _selected(self, keys: list[Key], broken: set[tuple[str, str]]) -> None:
        """Plan the run from what this session selected, and mark it narrowed when that is not
        every attempt of its datasets: a new run that selected nothing is not kept at all."""
        if self.dry:
            return
        run = self.run
        # An empty shard is kept: merge must see that the shard ran and held no task.
        if not keys and not broken and not run.resumed and self.runtime.shard is None:
            self.store.drop_run(run.run_id)
            run.dropped = True
            return
        whole = {k for k in self.runtime.whole_keys() if k[:2] not in broken}
        narrowed_by = narrowing(keys, whole, _narrowing_hints(self.config, self.runtime))
        if run.resumed and narrowed_by is not None:
            narrowed_by = run.narrowed_by  # a narrowed session continues the run as it is
        self.planned_keys.update(keys)
        if narrowed_by is None:
            self.planned_keys.update(whole)
        try:
            self.store.set_planned(run.run_id, len(self.planned_keys), narrowed_by)
        except StoreError as exc:
            self.failed(exc)
        self.progress.planned = len(self.planned_keys)
        self.show_progress()

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
            elif report.skipped and report.when == "setup" and parse_item_name(report.nodeid):
                self.progress.counts["skipped"] += 1
                self.show_progress()
            return (yield)
        if "load_error" in info:
            self._load_error(info["load_error"])
        elif "agent_error" in info:  # the attempt never started: nothing to commit
            self.agent_errors[info["agent_error"]] += 1
        else:
            self._attempt_reported(report, info)
        result = yield
        if report.when == "setup" and report.failed:  # after --junitxml's plugin saw it
            junit_error_message(self.config, report)
        # Every plugin has seen the record; the terminal reporter keeps reports all session long.
        report.agenteval = None  # type: ignore[attr-defined]
        if info.get("crashed"):
            self._close_crashed(report)
        return result

    def _attempt_reported(self, report: pytest.TestReport, info: dict[str, Any]) -> None:
        self.actions[info["action"]] += 1
        if info["action"] == "reuse":
            self.reused.add(tuple(info["key"]))
        text: str | None = info.get("record")
        record = None
        if text is None and report.failed and info["action"] != "reuse":
            record = self._vanished(report, "InternalError", "the plugin failed around it")
            text = record.to_text()
        if text is not None:
            record = self._commit(text, record)
        self._attempt_done(info, record)

    def _load_error(self, error: dict[str, str]) -> None:
        """Count each broken task once (also if a report should come twice)."""
        where = (error["path"], error["label"])
        if where not in {(e["path"], e["label"]) for e in self.load_errors}:
            self.load_errors.append(error)

    def _commit(self, text: str, record: AttemptRecord | None = None) -> AttemptRecord:
        """Commit the record JSON a report carried (checked by parsing it once, unless this
        process made it); returns the record."""
        data = None
        if record is None:
            made = self._made_here(text)
            if made is not None:
                record, data = made
            else:
                data = json.loads(text)
                record = AttemptRecord.from_json(data)
        replaces = self.runtime.plan.stored(record.key) is not None
        try:
            stored = self.store.commit(self.run.run_id, record, replaces=replaces, as_text=text)
        except StoreError as exc:
            self.failed(exc)
            return record
        if stored is not text:  # it replaced a record: what is stored now keeps the history
            data = json.loads(stored)
        hook = self.config.hook.pytest_agenteval_record_committed
        hook(record=data if data is not None else record.to_json(), config=self.config)
        self._spend(record)
        return record

    def _made_here(self, text: str) -> tuple[AttemptRecord, dict[str, Any]] | None:
        """The record behind `text` and its JSON when this process's last attempt made it (a
        lone process: the very string its report carries), so it need not be parsed again."""
        made = self.runtime.last_made
        if made is not None and made[0] is text:
            self.runtime.last_made = None
            return made[1], made[2]
        return None

    def _spend(self, record: AttemptRecord) -> None:
        """Count the attempt's spend (a regrade spent only on its judges: the agent's usage
        is the stored one's); at a cap, tell every process of the run to stop."""
        if record.regraded:
            self.budget.add(record.judge_cost, None, None)
        else:
            self.budget.add(record.spend, record.input_tokens, record.output_tokens)
        if self.budget.capped:
            self._check_budget()

    def _attempt_done(self, info: dict[str, Any], record: AttemptRecord | None) -> None:
        key = tuple(info["key"])
        stored = self.runtime.plan.stored(key) if record is None else None
        status = record.status if record is not None else stored.status if stored else None
        if status is not None:
            self.progress.attempt(status, reused=record is None)
        self.show_progress()

    def show_progress(self, status: str | None = None) -> None:
        """Refresh progress.json (at most about once a second unless `status` is final)."""
        progress, runtime = self.progress, self.runtime
        if status is None and not progress.due():
            return
        progress.tokens, progress.cost = self.budget.tokens, self.budget.cost
        ahead = runtime.runner.ahead
        progress.in_flight = ahead.running if ahead is not None and not self._distributed else None
        if status is None:
            stopping = runtime.stops is not None and runtime.stops.reason() is not None
            progress.write("stopping" if stopping else "running")
        else:
            progress.write(status, final=True)

    def _check_budget(self) -> None:
        reason = self.budget.reached()
        stops = self.runtime.stops
        if reason is not None and stops is not None and stops.stop is None:
            stops.halt("budget", reason, publish=True)

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
        report.when = "setup"
        report.user_properties = junit_properties(record, reused=False)
        report.agenteval = {  # type: ignore[attr-defined]
            "action": "run",
            "key": list(key),
            "record": record.to_text(),
            "crashed": True,
        }

    def _vanished(self, report: pytest.TestReport, error_type: str, why: str) -> AttemptRecord:
        parsed = parse_item_name(report.nodeid)
        assert parsed is not None
        dataset = self._dataset_of(report.nodeid) or ""
        task = self._task(report.nodeid, parsed[0])
        message = f"the attempt ended without a record ({why}):\n{report.longrepr}"
        return interrupted_record(
            task, (dataset, *parsed), self.runtime.runner.fingerprint, message, error_type
        )

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


_NARROWING_OPTIONS = (
    ("keyword", "-k"),
    ("markexpr", "-m"),
    ("lf", "--lf"),
    ("deselect", "--deselect"),
    ("stepwise", "--sw"),
)


def _narrowing_hints(config: pytest.Config, runtime: Runtime) -> list[str]:
    """The options and paths of this session that select part of a dataset, for run.json."""
    hints = []
    for dest, flag in _NARROWING_OPTIONS:
        value = getattr(config.option, dest, None)
        if value:
            hints.append(flag if value is True else f"{flag} {_shown(value)}")
    base = config.invocation_params.dir
    roots = [dataset.root for dataset in runtime.datasets]
    for arg in config.args:
        path = arg_path(base, arg)
        if any(path != root and path.is_relative_to(root) for root in roots):
            hints.append(display_path(arg))
    return hints


def _shown(value: object) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else repr(value)
