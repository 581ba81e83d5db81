"""The controller: owns the run, commits each record as its report arrives, writes the reports.

Registered only in the controller (or the lone process without xdist). Workers compute and put
records on their reports; this object is the store's one writer.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import ReportError, StoreError
from ..core.model import Key
from ..core.records import build_record, junit_properties, parse_item_name
from ..reporting.reports import store_damage_lines, terminal_lines, write_reports
from ..reporting.summary import build_summary
from ..sources.dataset import TaskDef, load_task_file
from ..store.locate import resolve_cache_dir
from ..store.plan import Plan, count_actions, make_plan, plan_key
from ..store.runs import Store, Unreadable, new_run_id
from .items import AttemptItem
from .runtime import RUNTIME, Runtime


class Controller:
    """Run lifecycle, durable commits and end-of-session reports."""

    def __init__(self, config: pytest.Config, runtime: Runtime) -> None:
        self.config = config
        self.runtime = runtime
        self.settings = runtime.settings
        self.dry = bool(config.option.collectonly or self.settings.show_plan)
        self.store_dir = runtime.agenteval_dir
        self.store = self._open_store()
        self.datasets = [{"name": d.name, "version": d.manifest.version} for d in runtime.datasets]
        self.actions: Counter[str] = Counter()
        self.load_errors: list[dict[str, str]] = []
        self.unreadable: list[Unreadable] = []
        self.other_failures = 0
        self.planned_keys: set[Key] = set()
        self.summary: dict[str, Any] | None = None
        self.written: list[Path] = []
        self.gate_message: str | None = None
        self.collected_once = False
        self.dry_plan: dict[Key, str] = {}
        self.shipped: dict[str, Any] | None = None
        self.resumed = self.settings.resume or self.settings.rerun_all
        self.session: pytest.Session | None = None
        self.failures: list[str] = []
        """Store or report writes that failed: each stops the session, the run is interrupted."""
        try:
            self.run_id = self._resume() if self.resumed else self._create()
        except StoreError as exc:
            raise pytest.UsageError(str(exc)) from None

    # --- start --------------------------------------------------------------------------------

    def _open_store(self) -> Store:
        if self.store_dir is None and (self.settings.resume or self.settings.rerun_all):
            raise pytest.UsageError(
                "--resume-suite needs the pytest cache, but the cacheprovider plugin is "
                "disabled (-p no:cacheprovider); enable it to store and resume runs"
            )
        try:
            return Store(self.store_dir)
        except StoreError as exc:
            raise pytest.UsageError(str(exc)) from None

    def _create(self) -> str:
        run_id = self.settings.run_id or new_run_id()
        if not self.dry:
            self.store.create_run(run_id, self.datasets, self.runtime.fingerprint)
        return run_id

    def _resume(self) -> str:
        names = "+".join(d["name"] for d in self.datasets)
        run_id = self.settings.run_id or self.store.latest_run(self.datasets)
        info = self.store.run(run_id) if run_id else None
        if info is None:
            which = f"run {run_id!r}" if self.settings.run_id else f"run of dataset {names}"
            raise pytest.UsageError(
                f"--resume-suite: no {which} in {self.store.describe()}; nothing was started. "
                "Run without --resume-suite first (`agenteval runs` lists stored runs)"
            )
        stored = "+".join(sorted(d["name"] for d in info.datasets))
        if stored != "+".join(sorted(d["name"] for d in self.datasets)):
            raise pytest.UsageError(f"run {run_id} is of dataset {stored}, not {names}")
        drift = fingerprint_drift(info.agent, self.runtime.fingerprint)
        if drift and not self.settings.allow_drift:
            raise pytest.UsageError(
                f"run {run_id} was made with a different agent; resuming would mix two agents "
                "in one summary:\n" + "\n".join(drift) + "\nUse the same agent, start a new run "
                "(drop --resume-suite), or pass --agenteval-allow-drift to mix them on purpose"
            )
        rows, self.unreadable = self.store.index(run_id)
        self.runtime.plan = plan = make_plan(
            rows, rerun_errors=self.settings.rerun_errors, rerun_all=self.settings.rerun_all
        )
        plan.fetch = lambda key: self.store.record(run_id, key)
        self.planned_keys.update(r.key for r in rows)
        if not self.dry:
            self.store.claim_run(run_id)
        return run_id

    def worker_plan(self) -> dict[str, Any]:
        """The plan for xdist workers (made once): regrades carry their stored records along."""
        if self.shipped is None:
            plan = self.runtime.plan
            if self.resumed and plan.entries:
                for task in _load_tasks(self.runtime):
                    for attempt in range(self.runtime.attempts_for(task.dataset)):
                        key = (task.dataset.name, task.id, attempt)
                        action, data = plan.decide(
                            key, task.digest, task.run_digest, task.regradable
                        )
                        if action == "regrade":
                            plan.regrade_records[plan_key(key)] = data
            self.shipped = {"plan": plan.to_json(), "fingerprint": self.runtime.fingerprint}
        return self.shipped

    # --- hooks --------------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        state = "resuming" if self.resumed else "new"
        lines = [f"agenteval: run {self.run_id} ({state}) · store {self.store.describe()}"]
        return lines + [f"agenteval: store damage: {p}" for p in self.store.problems]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def _failed(self, exc: StoreError | ReportError) -> None:
        """A store or report write failed (disk full, read-only): stop cleanly, say where and
        why once; what is committed stays committed."""
        message = f"agenteval: {exc}"
        if message not in self.failures:
            self.failures.append(message)
        if self.session is not None:
            self.session.shouldstop = self.failures[0]
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None:  # xdist's controller loop checks its own flag
            dsession.shouldstop = self.failures[0]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        keys = [i.key for i in session.items if isinstance(i, AttemptItem)]
        self._planned(keys)
        if self.dry and self.resumed:
            self.dry_plan = {
                i.key: self.runtime.plan.decide(
                    i.key, i.task.digest, i.task.run_digest, i.task.regradable
                )[0]
                for i in session.items
                if isinstance(i, AttemptItem)
            }

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
            try:
                self.store.set_planned(self.run_id, len(self.planned_keys))
            except StoreError as exc:
                self._failed(exc)

    def _dataset_of(self, nodeid: str) -> str | None:
        dataset = self.runtime.dataset_for((self.config.rootpath / nodeid.split("::")[0]).resolve())
        return dataset.name if dataset else None

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
        self.actions[info["action"]] += 1
        record = info.get("record")
        if record is not None:
            key: Key = tuple(info["key"])  # type: ignore[assignment]
            try:
                self.store.commit(self.run_id, record, replaces=self.runtime.plan.existing(key))
            except StoreError as exc:
                self._failed(exc)
            else:
                self.config.hook.pytest_agenteval_record_committed(
                    record=record, config=self.config
                )
        result = yield
        # Every plugin has seen the record; the terminal reporter keeps reports all session long.
        report.agenteval = None  # type: ignore[attr-defined]
        if info.get("crashed"):
            self._close_crashed(report)
        return result

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

    def crashed(self, nodeid: str, report: pytest.TestReport) -> None:
        """A worker died running `nodeid`: record the attempt as an error, and report it as one."""
        parsed = parse_item_name(nodeid)
        path = (self.config.rootpath / nodeid.split("::")[0]).resolve()
        dataset = self.runtime.dataset_for(path)
        if parsed is None or dataset is None:
            return
        task = next(
            (
                t
                for t in load_task_file(path, dataset)
                if isinstance(t, TaskDef) and t.id == parsed[0]
            ),
            None,
        )
        key = (dataset.name, *parsed)
        message = str(report.longrepr)
        record = build_record(
            key=key,
            digest=task.digest if task else "",
            run_digest=task.run_digest if task else "",
            agent=self.runtime.fingerprint,
            tags=list(task.spec.tags) if task else [],
            status="error",
            verdicts=[],
            result=None,
            started_at=time.time(),
            duration=0.0,
            error=f"{message} (the process running the attempt died: os._exit, a signal or OOM)",
            error_type="WorkerCrash",
            phase="crash",
        )
        report.when = "setup"  # type: ignore[assignment]
        report.user_properties = junit_properties(key[1], key[2], record, reused=False)
        report.agenteval = {"action": "run", "key": list(key), "record": record, "crashed": True}  # type: ignore[attr-defined]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.dry:
            return
        status, counts = self._summarize(session, int(exitstatus))
        out_dir = self.settings.report_dir or (
            self.store_dir / "runs" / self.run_id if self.store_dir else None
        )
        if out_dir is not None:
            try:
                self.written = write_reports(self.summary, out_dir, self.settings.task_rule)
            except ReportError as exc:
                self._failed(exc)
                status = self.summary["status"] = "interrupted"
        self.config.hook.pytest_agenteval_summary(summary=self.summary, config=self.config)
        try:
            self.store.finish_run(
                self.run_id,
                status,
                {"finished_at": time.time(), "exitstatus": int(exitstatus), "counts": counts},
            )
        except StoreError as exc:
            self._failed(exc)
        self._gate(session, int(exitstatus))
        if self.failures:
            session.exitstatus = pytest.ExitCode.INTERRUPTED

    def _summarize(self, session: pytest.Session, exitstatus: int) -> tuple[str, dict[str, int]]:
        """Build the summary from the stored records (freed before the reports are written)."""
        rows, _ = self.store.index(self.run_id, for_plan=False)
        interrupted = (
            exitstatus == pytest.ExitCode.INTERRUPTED
            or bool(session.shouldfail or session.shouldstop)
            or len(rows) < len(self.planned_keys)
        )
        status = "interrupted" if interrupted else "complete"
        counts = {
            "reused": self.actions["reuse"],
            "regraded": self.actions["regrade"],
            "run": self.actions["run"],
        }
        info = self.store.run(self.run_id)
        assert info is not None
        self.summary = build_summary(
            info,
            rows,
            ks=self.settings.pass_k,
            session_counts=counts,
            status=status,
            load_errors=self.load_errors,
            store_problems=[p.as_dict() for p in self.store.problems],
        )
        return status, counts

    def _gate(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus not in (0, 1) or self.summary is None:
            return
        counts = self.summary["counts"]
        errors = counts["error"] + len(self.load_errors)
        errors_ok = self.settings.allow_errors or errors == 0
        minimum = self.settings.min_pass_rate
        if minimum is None:
            if (
                self.settings.allow_errors
                and exitstatus == 1
                and not counts["fail"]
                and not self.other_failures
            ):
                session.exitstatus = pytest.ExitCode.OK if not self.load_errors else 1
            return
        rate = self.summary["metrics"]["pass_at_k"].get("1") or 0.0
        passed = rate >= minimum and errors_ok and not self.other_failures
        session.exitstatus = pytest.ExitCode.OK if passed else pytest.ExitCode.TESTS_FAILED
        verdict = "met" if passed else "NOT met"
        why = (
            "" if errors_ok else f"; {errors} errored attempts (--agenteval-allow-errors to accept)"
        )
        self.gate_message = (
            f"gate {verdict}: pass@1 {rate:.3f} vs --agenteval-min-pass-rate {minimum:g}{why}"
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        if self.dry:
            if self.resumed:
                tr.write_sep("=", "agenteval plan")
                for line in plan_lines(self.dry_plan, self.run_id):
                    tr.write_line(line)
                for line in store_damage_lines([p.as_dict() for p in self.store.problems]):
                    tr.write_line(line)
            return
        if self.summary is not None:
            tr.write_sep("=", "agenteval")
            for line in terminal_lines(
                self.summary, tr.config.option.verbose > 0, self.settings.task_rule
            ):
                tr.write_line(line)
        if self.written:
            tr.write_line(f"written: {', '.join(str(p) for p in self.written)}")
        if self.gate_message:
            tr.write_line(self.gate_message, bold=True, red="NOT" in self.gate_message)
        for failure in self.failures:
            tr.write_line(failure, red=True, bold=True)

    def pytest_unconfigure(self) -> None:
        self.store.close()


def plan_lines(decisions: dict[Key, str], run_id: str) -> list[str]:
    """The plan printout: totals, and per task when few tasks need work."""
    totals = count_actions(decisions.values())  # type: ignore[arg-type]
    lines = [
        f"run {run_id}: {totals['reuse']} reused, {totals['regrade']} to regrade, "
        f"{totals['run']} to run (nothing was started)"
    ]
    per_task: dict[tuple[str, str], Counter[str]] = {}
    for key, action in decisions.items():
        if action != "reuse":
            per_task.setdefault(key[:2], Counter())[action] += 1
    if 0 < len(per_task) <= 20:
        for (dataset, task_id), c in sorted(per_task.items()):
            lines.append(
                f"  {dataset}/{task_id}: " + ", ".join(f"{n} to {a}" for a, n in sorted(c.items()))
            )
    return lines


def fingerprint_drift(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines naming what differs between two agent fingerprints."""
    return [
        f"  {name}: stored {old.get(name)!r}, now {new.get(name)!r}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]


def agenteval_dir(config: pytest.Config) -> Path | None:
    """<cache_dir>/agenteval: beside pytest's d/ and v/, so --cache-clear never wipes runs.

    Asking pytest for a d/ folder first makes it create the cache dir with its .gitignore.
    """
    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    try:
        return Path(cache.mkdir("agenteval")).parent.parent / "agenteval"
    except OSError:  # a read-only cache dir: the store says what it cannot do there
        return resolve_cache_dir(str(config.getini("cache_dir")), config.rootpath) / "agenteval"


def _load_tasks(runtime: Runtime) -> list[TaskDef]:
    tasks = []
    for dataset in runtime.datasets:
        for path in dataset.task_files():
            loaded = load_task_file(path, dataset, cache=runtime.specs)
            tasks += [t for t in loaded if isinstance(t, TaskDef)]
    return tasks


class XdistHooks:
    """xdist's hooks, registered only when xdist is loaded (their specs exist only then)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["agenteval"] = self.controller.worker_plan()

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.controller.node_collected(list(ids))

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        self.controller.crashed(crashitem, report)


def worker_setup(config: pytest.Config) -> None:
    """On an xdist worker: take the controller's plan and fingerprint."""
    shipped = config.workerinput.get("agenteval")  # type: ignore[attr-defined]
    runtime = config.stash[RUNTIME]
    if shipped:
        runtime.plan = Plan.from_json(shipped["plan"])
        runtime.fingerprint = shipped["fingerprint"]
