"""The recorder: plans the run from what the session selected (and marks a run that covers only
part of its datasets as narrowed), then commits each attempt's record the moment its report
reaches the controller.

Registered only in the controller (or the lone process); it is the store's one writer. Workers
compute and put records on their reports.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import ReportError, StoreError, display_path
from ..core.identity import AttemptId, parse_item_name
from ..core.payloads import (
    PAYLOADS,
    LoadError,
    NeverStarted,
    NewRecord,
    Payload,
    Replayed,
    ShippedRecord,
    from_wire,
)
from ..core.records import (
    UNATTRIBUTED_CRASH,
    AttemptRecord,
    index_entry,
    junit_properties,
    to_json_text,
)
from ..execution.attempt import interrupted_record
from ..execution.exits import guard_exits, unguard_exits
from ..providers.pricing import price_of
from ..sources.dataset import TaskDef, load_task_file
from ..sources.discovery import arg_path
from ..store.index import IndexRow, row_of
from ..store.inflight import inflight_path, read_in_flight
from ..store.lifecycle import OpenRun, narrowing
from ..store.plan import CRASH_LIMIT
from ..store.runs import Store
from .collect import LoadErrorItem, load_error_label
from .concurrency import concurrency_of, say_now
from .internals import stop_distributing
from .items import AttemptItem
from .live_progress import LiveProgress
from .observers import observers
from .runtime import Runtime
from .session_state import SessionState
from .settings import dry_run


class Recorder:
    """Commits records, counts what the session did, and notices attempts that vanish."""

    def __init__(
        self,
        config: pytest.Config,
        runtime: Runtime,
        store: Store,
        run: OpenRun,
        state: SessionState,
        live: LiveProgress,
    ):
        """`state` is the session's state, which this writes; `live`, its progress file."""
        self.config = config
        self.runtime = runtime
        self.store = store
        self.run = run
        self.dry = dry_run(config)
        self.state = state
        self.live = live
        self.properties: dict[str, list[tuple[str, Any]]] = {}
        """JUnit properties of attempts reported, until their teardown report carries them."""
        self.collected_once = False
        self._folders: dict[str, Path] = {}
        self._datasets: dict[str, str | None] = {}
        self.session: pytest.Session | None = None
        self._handlers: dict[type, Callable[[pytest.TestReport, Any], None]] = {
            NewRecord: self._new_record,
            ShippedRecord: self._shipped,
            Replayed: self._replayed,
            NeverStarted: self._not_started,
            LoadError: self._load_error,
        }
        """Each payload kind's handler (xdist's DSession dispatches worker events alike)."""
        self.unpriced_warned = False
        self.repriced: set[str | None] = set()
        """Models replies named, looked up once each (one without a price is said)."""
        """Whether the terminal was told that the spend cap cannot count some attempt."""
        self._check_budget()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        """Alone, agents run in this process: an `os._exit` there must not end the session as
        a success (xdist workers that die are crashes the controller records)."""
        if self.live.distributed:
            return (yield)
        guard_exits(partial(say_now, self.config))
        try:
            return (yield)
        finally:
            unguard_exits()

    def failed(self, exc: StoreError | ReportError) -> None:
        """A store or report write failed (disk full, read-only): stop cleanly and say where
        and why, once; what is committed stays committed."""
        first = self.state.fail(exc)
        if self.session is not None:
            self.session.shouldstop = first
        stop_distributing(self.config, first)

    @pytest.hookimpl(tryfirst=True)  # before the spec cache is saved and emptied
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        keys: list[AttemptId] = []
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
        self._selected(*self.keys_of(ids))
        for ds in self.runtime.datasets:  # what planning loaded is not needed any more
            ds.forget_reads()

    def keys_of(self, ids: list[str]) -> tuple[list[AttemptId], set[tuple[str, str]]]:
        """The attempts a worker's collected node ids name, and its task files that did not
        load (as (dataset, label))."""
        keys: list[AttemptId] = []
        broken: set[tuple[str, str]] = set()
        for nodeid in ids:
            dataset = self._dataset_of(nodeid)
            parsed = parse_item_name(nodeid, dataset) if dataset else None
            label = load_error_label(nodeid)
            if parsed is not None:
                keys.append(parsed)
            elif dataset and label is not None:
                broken.add((dataset, label))
        return keys, broken

    def _selected(self, keys: list[AttemptId], broken: set[tuple[str, str]]) -> None:
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
        whole = self._whole(keys, broken)
        narrowed_by = narrowing(keys, whole, _narrowing_hints(self.config, self.runtime))
        if run.resumed and narrowed_by is not None:
            narrowed_by = run.narrowed_by  # a narrowed session continues the run as it is
        self.state.planned_keys.update(keys)
        if narrowed_by is None:
            self.state.planned_keys.update(whole)
        try:
            self.store.set_planned(run.run_id, len(self.state.planned_keys), narrowed_by)
        except StoreError as exc:
            self.failed(exc)
        self.live.file.plan(self.state.planned_keys)
        self.live.start()

    def _whole(self, keys: list[AttemptId], broken: set[tuple[str, str]]) -> set[AttemptId]:
        """The attempts of the whole run but for the load errors this session collected. When
        the session selected every task whose spec is valid, that is the answer (the tasks
        that load are among them) and no grader need be built (the controller collects
        nothing): only a narrowed session pays for the exact set."""

        def kept(key: AttemptId) -> bool:
            return (key.dataset, key.task_id) not in broken

        specs = set(filter(kept, self.runtime.whole_keys(built=False)))
        if specs.issubset(keys):
            return specs
        return set(filter(kept, self.runtime.whole_keys()))

    def _dataset_of(self, nodeid: str) -> str | None:
        """The dataset of `nodeid`'s file: its folder's (datasets are folders), looked up once
        per folder (resolving a path costs a system call per part)."""
        folder = nodeid.split("::")[0].rpartition("/")[0]
        if folder not in self._datasets:
            dataset = self.runtime.dataset_for(self._resolved(folder))
            self._datasets[folder] = dataset.name if dataset else None
        return self._datasets[folder]

    def _path_of(self, nodeid: str) -> Path:
        folder, _, name = nodeid.split("::")[0].rpartition("/")
        return self._resolved(folder) / name

    def _resolved(self, folder: str) -> Path:
        found = self._folders.get(folder)
        if found is None:
            found = self._folders[folder] = (self.config.rootpath / folder).resolve()
        return found

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Any:
        carried = getattr(report, "agenteval", None)
        if carried is None:
            if report.when == "teardown":  # where --junitxml reads them
                properties = self.properties.pop(report.nodeid, None)
                if properties:
                    report.user_properties.extend(properties)
            if report.failed:
                self.state.other_failures += 1
            elif (
                report.skipped
                and report.when == "setup"
                and (parsed := parse_item_name(report.nodeid, ""))
            ):
                self.live.file.skip(parsed.variant)
                self.live.show()
            return (yield)
        payload = carried if isinstance(carried, PAYLOADS) else self._from_wire(report, carried)
        if payload is not None:
            self._handlers[type(payload)](report, payload)
        result = yield
        # Every plugin has seen the record; the terminal reporter keeps reports all session long.
        report.agenteval = None  # type: ignore[attr-defined]
        if isinstance(payload, NewRecord) and payload.crashed:
            self._close_crashed(report)
        return result

    def _from_wire(self, report: pytest.TestReport, value: Any) -> Payload | None:
        """A worker's payload read back; one that is none stops the session, said."""
        try:
            return from_wire(value)
        except (ValueError, TypeError, KeyError, AttributeError):
            self.failed(
                ReportError(
                    f"the report of {report.nodeid} carried what this pytest-agenteval cannot "
                    f"read ({str(value)[:200]!r}); install the same version on every worker"
                )
            )
            return None

    def _new_record(self, report: pytest.TestReport, made: NewRecord) -> None:
        """A record made in this process (a lone process's attempt, a crash record): its JSON
        and index entry are written here, nothing parsed."""
        action, record = made.action, made.record
        self.state.actions[action] += 1
        key = record.key  # made from the record's fields: once
        self._keep_files(report, key)
        data, fields = record.to_json(), index_entry(record)
        text, entry = to_json_text(data), to_json_text(fields)
        row = self._commit(action, key, text, entry, fields, record, data)
        self._reported(report, row, action, reused=False)

    def _shipped(self, report: pytest.TestReport, shipped: ShippedRecord) -> None:
        """A record a worker made: its texts are stored as they came (the record is parsed only
        to replace a stored one, kept as its history, or for a hook that reads it)."""
        self.state.actions[shipped.action] += 1
        self._keep_files(report, shipped.key)
        action, key = shipped.action, shipped.key
        row = self._commit(action, key, shipped.text, shipped.entry, shipped.fields)
        self._reported(report, row, action, reused=False)

    def _replayed(self, report: pytest.TestReport, replayed: Replayed) -> None:
        """No new record: a replayed verdict, or an attempt that never began; one whose report
        failed without a record (the plugin failed around it) gets a record saying so."""
        action, key = replayed.action, replayed.key
        if report.failed and action != "reuse":
            self._new_record(report, NewRecord(action, self._vanished(report)))
            return
        self.state.actions[action] += 1
        if action == "reuse":
            self.state.reused.add(key)
        self._reported(report, self.runtime.plan.stored(key), action, reused=True)

    def _not_started(self, report: pytest.TestReport, not_started: NeverStarted) -> None:
        """The attempt never started (its agent cannot be built): nothing to commit."""
        self.state.agent_errors[not_started.problem] += 1

    def _load_error(self, report: pytest.TestReport, error: LoadError) -> None:
        """Count each broken task once (also if a report should come twice)."""
        where = (error.path, error.label)
        if where not in {(e["path"], e["label"]) for e in self.state.load_errors}:
            self.state.load_errors.append(error.as_dict())

    def _reported(
        self, report: pytest.TestReport, row: IndexRow | None, action: str, reused: bool
    ) -> None:
        """What every attempt's report updates: the attempts reported (a crash after it keeps
        its record), JUnit properties, progress."""
        if row is not None:
            self.state.reported.add(row.key)
            if not reused or action == "reuse":
                self.properties[report.nodeid] = junit_properties(row, reused)
            self.live.file.attempt(row.status, reused, row.variant)
        self.live.show()

    def _keep_files(self, report: pytest.TestReport, key: AttemptId) -> None:
        """Before a new record commits: the bytes of its attempt's kept files (which came
        beside it on the report) replace any earlier artifacts of the attempt."""
        files: dict[str, bytes] | None = getattr(report, "agenteval_files", None)
        run_id = self.run.run_id
        if files is None and not self.store.has_artifacts(run_id):
            return
        report.agenteval_files = None  # type: ignore[attr-defined]
        try:
            self.store.keep_artifacts(run_id, key, files or {})
        except StoreError as exc:
            self.failed(exc)

    def _commit(
        self,
        action: str,
        key: AttemptId,
        text: str,
        entry: str,
        fields: dict[str, Any],
        record: AttemptRecord | None = None,
        data: dict[str, Any] | None = None,
    ) -> IndexRow | None:
        """Commit a new record (its JSON text, its index entry's text and fields; the typed
        record and its JSON when this process made it); returns its row."""
        plan, run_id = self.runtime.plan, self.run.run_id
        try:
            if plan.stored(key) is None:
                row = row_of(fields, key)
                self.store.append(run_id, text, entry, row)
            else:  # replacing a stored record: kept as its history
                record = record or AttemptRecord.from_json(json.loads(text))
                text, row = self.store.commit(run_id, record, replaces=True)
                data = None
        except StoreError as exc:
            self.failed(exc)
            return None
        self._tell_committed(text, record, data)
        self._spend(row, action == "regrade")
        return row

    def _tell_committed(
        self, text: str, record: AttemptRecord | None, data: dict[str, Any] | None
    ) -> None:
        """Call `pytest_agenteval_record_committed` with the typed record (`attempt_record`)
        and, for implementations that still ask for it, the stored JSON (`record`). A shipped
        record is parsed only when someone listens; one that raises stops nothing."""
        hook = self.config.hook.pytest_agenteval_record_committed
        impls = hook.get_hookimpls()
        if record is None and not impls:
            return
        if record is None:
            data = json.loads(text)
            record = AttemptRecord.from_json(data)
        if data is None and any("record" in impl.argnames for impl in impls):
            data = json.loads(text)
        observers(self.config).notify(
            "pytest_agenteval_record_committed",
            attempt_record=record,
            record=data,
            config=self.config,
        )

    def _spend(self, row: IndexRow, regraded: bool) -> None:
        """Count the attempt's spend (a regrade spent only on its judges: the agent's usage
        is the stored one's); at a cap, tell every process of the run to stop."""
        if regraded:
            self.state.budget.add(row.judge_cost, None, None)
        else:
            self.state.budget.add(row.spend, row.input_tokens, row.output_tokens)
            if row.cost is None and (row.input_tokens or row.output_tokens):
                self._warn_unpriced(row)
            elif row.model is not None and row.model not in self.repriced:
                self._warn_repriced(row)
        if self.state.budget.capped:
            self._check_budget()

    def _warn_unpriced(self, row: IndexRow) -> None:
        """A spend cap that cannot see an attempt's cost is said at once, not only at the end."""
        if self.state.budget.max_cost is None or self.unpriced_warned:
            return
        self.unpriced_warned = True
        model = (
            f"model {row.model!r} has no price in the manifest's pricing:"
            if row.model
            else ("the agent reported tokens but no cost")
        )
        say_now(
            self.config,
            f"agenteval: WARNING: --agenteval-max-cost cannot count {row.key.label}: "
            f"{model}; such attempts run uncounted (add the price, or cap tokens with "
            "--agenteval-max-tokens)",
        )

    def _warn_repriced(self, row: IndexRow) -> None:
        """Replies naming a model without a price were counted at the asked model's price:
        said once per such model, under a spend cap."""
        pricing = next(
            (d.manifest.pricing for d in self.runtime.datasets if d.name == row.key.dataset), None
        )
        self.repriced.add(row.model)
        if self.state.budget.max_cost is None or not pricing or price_of(row.model, pricing):
            return
        say_now(
            self.config,
            f"agenteval: WARNING: replies named model {row.model!r} ({row.key.label}), which "
            "has no price in the manifest's pricing:; its calls are counted at the price of "
            "the model asked for (add its price to count them exactly)",
        )

    def _check_budget(self) -> None:
        reason = self.state.budget.reached()
        stops = self.runtime.stops
        stop = stops.stop if stops is not None else None
        if reason is not None and stops is not None and (stop is None or stop.kind == "budget"):
            stops.halt("budget", reason, publish=True)  # a committed price the ledger lacks

    def crashed(self, nodeid: str, report: pytest.TestReport, worker: str | None = None) -> None:
        """A worker died running `nodeid`: an interruption, recorded as an error a resume runs
        again; unless the attempt was only replaying its stored verdict, which stays. A crash
        while other agent calls of the worker were in flight is not provably the attempt's:
        it does not count towards CRASH_LIMIT."""
        dataset = self._dataset_of(nodeid)
        key = parse_item_name(nodeid, dataset) if dataset is not None else None
        if key is None:
            return
        if key in self.state.reported:
            self._crashed_after_report(report)
            return
        task = self._task(nodeid, key.task_id)
        if task is not None:
            decision = self.runtime.decide(key, task)
            if decision.action == "reuse":
                report.agenteval = Replayed("reuse", key)  # type: ignore[attr-defined]
                return
        message, error_type = self._crash_message(str(report.longrepr), key, worker)
        fingerprint = self.runtime.runner.fingerprint
        record = interrupted_record(task, key, fingerprint, message, error_type)
        report.when = "setup"
        report.agenteval = NewRecord("run", record, crashed=True)  # type: ignore[attr-defined]

    def _crashed_after_report(self, report: pytest.TestReport) -> None:
        """The worker died after the attempt's report reached this process (its record is
        committed or its verdict replayed): said as the item's teardown error, nothing
        recorded over what is stored."""
        report.when = "teardown"
        report.longrepr = (
            f"{report.longrepr}\n(after the attempt's record was committed: the record stays, "
            "and a resume reuses it)"
        )

    def _crash_message(self, died: str, key: AttemptId, worker: str | None) -> tuple[str, str]:
        """What the crash record of `key` says, and its error_type: its own crash, or one
        that happened while other calls of the worker were in flight (or may have been)."""
        others = self._in_flight_besides(key, worker)
        if others == []:
            own = "the process running the attempt died: os._exit, a signal or OOM"
            return f"{died} ({own})", "WorkerCrash"
        during = (
            f"the agent calls of {', '.join(key.label for key in others)} were in flight too"
            if others
            else "other agent calls may have been in flight too (which is not known)"
        )
        return (
            f"{died}; {during}: any of them may have ended the process (os._exit, a signal or "
            f"OOM), so this crash does not count towards the {CRASH_LIMIT} crashes in a row "
            "that keep an attempt as an error",
            UNATTRIBUTED_CRASH,
        )

    def _in_flight_besides(self, key: AttemptId, worker: str | None) -> list[AttemptId] | None:
        """The other attempts whose agent calls were in flight when `worker` died (empty: the
        crash is provably `key`'s); None when that is not known (the worker left no notes
        and ran calls ahead)."""
        notes = None
        if worker is not None and not self.dry:
            run_dir = self.store.runs_dir / self.run.run_id
            notes = read_in_flight(inflight_path(run_dir, worker))
        if notes is None:
            return [] if concurrency_of(self.runtime) == 1 else None
        return [noted for noted in notes if noted != key]

    def _vanished(self, report: pytest.TestReport) -> AttemptRecord:
        """The record of an attempt whose report came without one: the plugin failed around it."""
        key = parse_item_name(report.nodeid, self._dataset_of(report.nodeid) or "")
        assert key is not None
        task = self._task(report.nodeid, key.task_id)
        message = (
            f"the attempt ended without a record (the plugin failed around it):\n{report.longrepr}"
        )
        return interrupted_record(
            task, key, self.runtime.runner.fingerprint, message, "InternalError"
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
    hints.extend(f"--agenteval-variant {name}" for name in runtime.settings.variants)
    base = config.invocation_params.dir
    roots = [dataset.root for dataset in runtime.datasets]
    for arg in config.args:
        path = arg_path(base, arg)
        if any(path != root and path.is_relative_to(root) for root in roots):
            hints.append(display_path(arg))
    return hints


def _shown(value: object) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else repr(value)
