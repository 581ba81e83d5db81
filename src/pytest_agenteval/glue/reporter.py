"""The reporter: at session end, the summary from the stored records, the report files, the
run's final status, the CI gate, and the terminal section (or, when only planning, the plan).

Registered only in the controller (or the lone process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import StoreError
from ..core.text import printable
from ..providers.gate import status as provider_status
from ..reporting.finish import GateRule, finish_run
from ..reporting.plan_lines import Planned, plan_lines
from ..reporting.regression import with_regression
from ..reporting.reports import store_damage_lines, terminal_lines
from ..reporting.summary import ProviderSummary, Summary, build_summary
from ..sources.tags import marker_name, unknown_tag_lines
from ..store.ledger import run_spend
from ..store.lifecycle import OpenRun
from ..store.plan import Decision, changed_parts
from ..store.problems import StoreProblem
from ..store.runs import Store
from ..store.sessions import SessionEntry
from ..store.stops import Stop
from .items import AttemptItem
from .live_progress import LiveProgress
from .observers import observers
from .runtime import Runtime
from .session_end import (
    PROBE_FAILED,
    Ending,
    SessionFacts,
    end_session,
    run_exitstatus,
    run_status,
)
from .session_state import SessionState


class PlanAlone:
    """`--agenteval-plan` prints the plan alone: the tree of collected items `--co` prints
    comes with `-v` (or `--co`) only. The terminal reporter prints the tree when it sees
    `collectonly` as collection finishes, so it sees it unset then; it is set again before
    the run loop, which it keeps from running anything."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> Generator[None, None, None]:
        option = session.config.option
        option.collectonly = False
        try:
            return (yield)
        finally:
            option.collectonly = True


class Reporter:
    """Turns the stored records into the summary, the files and the exit status."""

    def __init__(
        self,
        runtime: Runtime,
        store: Store,
        run: OpenRun,
        state: SessionState,
        live: LiveProgress,
        *,
        dry: bool,
        baseline: Summary | None = None,
    ):
        """`state` is the session's state, which this only reads; `live`, its progress file,
        to which this says the last word."""
        self.runtime = runtime
        self.baseline = baseline
        """The regression gate's baseline summary (`--agenteval-baseline`), or None."""
        self.settings = runtime.settings
        self.store = store
        self.run = run
        self.live = live
        self.dry = dry
        self.state = state
        self.summary: Summary | None = None
        self.ending: Ending | None = None
        """How the session ended (None before its end, or when nothing was kept)."""
        self.dry_plan: list[Planned] = []
        self.ctrl_c = False
        """A KeyboardInterrupt ended the session (pytest caught it)."""
        self.midway = 0
        """Stored attempts a run-wide stop ended mid-way (phase `stopped`)."""

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        state = self.run.note or ("resuming" if self.run.resumed else "new")
        shard = f" · shard {self.runtime.shard}" if self.runtime.shard else ""
        lines = [
            f"agenteval: run {self.run.run_id} ({state}){shard} · store {self.store.describe()}"
        ]
        if self.run.died_running:
            lines.append(
                f"agenteval: the last session of this run died while the agent ran "
                f"{self.run.died_running} (os._exit, a crash in C code, a signal or the OOM "
                "killer); it runs again now (--agenteval-isolate makes such an attempt one error)"
            )
        return lines + [f"agenteval: store damage: {p}" for p in self.store.problems]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.dry and self.run.resumed:
            decide = self.runtime.decide
            self.dry_plan = [
                self._planned(item, decide(item.key, item.task))
                for item in session.items
                if isinstance(item, AttemptItem)
            ]

    def _planned(self, item: AttemptItem, decision: Decision) -> Planned:
        """An attempt as the plan printout shows it; for a changed task, its changed parts
        (from its stored record: read only for the printout)."""
        changed = None
        if decision.action == "regrade" or decision.why == "changed":
            stored = decision.record or self.store.record(self.run.run_id, item.key)
            if stored is not None:
                changed = changed_parts(stored.part_digests, item.task.part_digests)
        task = item.task
        return Planned(task.dataset.name, task.id, item.variant, decision, changed)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Summarize, write the reports and the session's entry, then end the session once:
        `end_session` decides its exit status from what the session did."""
        if self.dry or self.run.dropped:
            return
        if self._nothing_happened():
            self.store.drop_run(self.run.run_id)
            self.run.dropped = True
            return
        if self._never_began(exitstatus):
            self.live.give_back()
            self.store.release_run(self.run.run_id, self.run.was or "interrupted")
            self.run.dropped = True
            return
        stop = self._stop()
        facts = SessionFacts(
            int(exitstatus),
            "",
            stop,
            exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and self._empty_shard(),
            budget=self.state.budget,
            ctrl_c=self.ctrl_c,
        )
        status = self._summarize(session, int(exitstatus), stop)
        self.live.show(status)
        facts = replace(facts, midway=self.midway)
        recorded = run_exitstatus(replace(facts, status=status))
        assert self.summary is not None
        out_dir = self.settings.report_dir
        if out_dir is None and not self.store.temporary:
            out_dir = self.store.runs_dir / self.run.run_id
        finished = finish_run(
            self.summary,
            out_dir=out_dir,
            task_rule=self.settings.task_rule,
            html=self._html_writer(),
            rule=GateRule(self.settings.min_pass_rate, self.settings.allow_errors),
            exitstatus=recorded,
            other_failures=self.state.other_failures,
        )
        for failure in finished.failures:
            self.state.fail(failure)
        self.summary = finished.summary
        config = session.config
        observers(config).notify("pytest_agenteval_summary", summary=self.summary, config=config)
        try:
            self.store.finish_run(
                self.run.run_id, self.summary.status, self._session_entry(recorded)
            )
        except StoreError as exc:
            self.state.fail(exc)
        self.ending = end_session(
            replace(
                facts,
                status=self.summary.status,
                gate=finished.gate,
                failures=tuple(self.state.failures),
                written=tuple(finished.written),
            )
        )
        session.exitstatus = self.ending.exitstatus

    def _session_entry(self, exitstatus: int) -> SessionEntry:
        """run.json's entry for this session."""
        summary = self.summary
        assert summary is not None
        return SessionEntry(
            finished_at=time.time(),
            exitstatus=exitstatus,
            counts=self.state.counts(),
            load_errors=self.state.load_errors,
            agent_errors=[e.model_dump() for e in summary.agent_errors],
            regression=summary.regression and summary.regression.model_dump(),
            **variant_regressions(summary),
        )

    def _html_writer(self) -> Callable[[Summary], Path] | None:
        """What writes the HTML report (`--agenteval-html`), with every stored attempt's
        details read back from the store; None when it is not asked for."""
        path = self.settings.html_file
        if path is None:
            return None
        # Imported only when asked for: the page's modules (SVG, variants) cost every run
        # ~30 ms of imports otherwise.
        from ..reporting.html import attempt_details, write_html

        store, run_id, reused = self.store, self.run.run_id, self.state.reused
        return lambda summary: write_html(summary, attempt_details(store, run_id, reused), path)

    def _damage_found_since(self) -> list[StoreProblem]:
        """Store damage found after the summary was made (the HTML report reading records)."""
        told = {p.where for p in self.summary.store_problems} if self.summary else set()
        return [p for p in self.store.problems if p.where not in told]

    def _nothing_happened(self) -> bool:
        """A new run in which no attempt ran nor could even start (collection failed under
        --agenteval-strict, Ctrl-C before the first attempt ended) and no stop came: there is
        nothing to keep."""
        sharded = self.runtime.shard is not None  # an empty shard is kept for merge
        if self.settings.probe_only or self._probe_failed():  # a probe leaves no run behind
            return not self.run.resumed
        return not (self.run.resumed or self.state.began() or sharded or self._stop() is not None)

    def _never_began(self, exitstatus: int) -> bool:
        """A resumed run whose session ended in a usage error (a path that does not exist, a
        bad option) or at the probe before any attempt: the run is left as it was, its reports
        untouched."""
        usage_error = (
            exitstatus == pytest.ExitCode.USAGE_ERROR
            or self.settings.probe_only
            or self._probe_failed()
        )
        return self.run.resumed and usage_error and not self.state.began()

    def _empty_shard(self) -> bool:
        """A shard that holds no task of a small suite did its part: CI must not fail it (but
        a shard whose tasks `-k`/`-m` all left out still says that nothing was selected)."""
        return self.runtime.shard is not None and not self.runtime.whole_keys()

    def _stop(self) -> Stop | None:
        stops = self.runtime.stops
        if stops is None:
            return None
        stops.reason()  # an xdist controller starts no attempt: look at the run folder now
        return stops.stop

    def _spend(self) -> dict[str, float | int] | None:
        """What the run paid in all (its ledger); a ledger that cannot be read is said as a
        store failure, and the summary goes without it."""
        try:
            return run_spend(self.store.runs_dir / self.run.run_id)
        except StoreError as exc:
            self.state.fail(exc)
            return None

    def _probe_failed(self) -> bool:
        """The probe before the first attempt failed: no run's status (new: not kept)."""
        stop = self._stop()
        return stop is not None and stop.kind == "probe_failed"

    def _summarize(self, session: pytest.Session, exitstatus: int, stop: Stop | None) -> str:
        """Build the summary from the stored records; returns the run's status."""
        rows = self.store.rows(self.run.run_id)
        unfinished = (
            exitstatus == pytest.ExitCode.INTERRUPTED
            or bool(session.shouldfail or session.shouldstop)
            or len(rows) < len(self.state.planned_keys)
        )
        self.midway = sum(row.phase == "stopped" for row in rows)
        status = run_status(unfinished, stop, self.midway)
        info = self.store.run(self.run.run_id)
        assert info is not None
        self.summary = build_summary(
            info,
            rows,
            ks=self.settings.pass_k,
            session_counts=self.state.counts(),
            status=status,
            agent_errors=[
                {"message": message, "attempts": n}
                for message, n in self.state.agent_errors.items()
            ],
            load_errors=self.state.load_errors,
            store_problems=[p.as_dict() for p in self.store.problems],
            spend=self._spend(),
        )
        providers = {n: p for n, p in provider_status().items() if p["rate_limited"]}
        if providers:
            self.summary = self.summary.model_copy(
                update={"providers": {n: ProviderSummary(**p) for n, p in providers.items()}}
            )
        if self.baseline is not None and self.settings.baseline is not None:
            self.summary = with_regression(
                self.summary,
                self.baseline,
                self.settings.baseline,
                self.settings.max_regression or 0.0,
            )
        return status

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        for line in self._unknown_tag_lines(tr.config):
            tr.write_line(printable(line), yellow=True)
        if self.dry:
            if self.run.resumed:
                tr.write_sep("=", "agenteval plan")
                verbose = tr.config.option.verbose > 0
                for line in plan_lines(self.run.run_id, self.dry_plan, verbose):
                    tr.write_line(line)
                for line in store_damage_lines(self.store.problems):
                    tr.write_line(printable(line))
            return
        if self.run.dropped:
            if self._probe_failed():
                tr.write_line(PROBE_FAILED, yellow=True, bold=True)
            run = f"run {self.run.run_id}"
            kept = f"{run} is left as it was ({self.run.was})" if self.run.resumed else None
            tr.write_line(f"agenteval: no attempt ran; {kept or run + ' was not kept'}")
            return
        if self.summary is not None:
            tr.write_sep("=", "agenteval")
            verbose = tr.config.option.verbose > 0
            for line in terminal_lines(self.summary, verbose, self.settings.task_rule):
                tr.write_line(printable(line))  # agents' and load errors' messages among them
        if self.ending is None:
            return
        if self.ending.written:
            tr.write_line(f"written: {', '.join(str(p) for p in self.ending.written)}")
        for line in store_damage_lines(self._damage_found_since()):  # by the HTML report
            tr.write_line(printable(line))
        if self.ending.stop_line:
            tr.write_line(self.ending.stop_line, yellow=True, bold=True)
        gate_message = self.ending.gate_message
        if gate_message:
            tr.write_line(gate_message, bold=True, red="NOT" in gate_message)
        for failure in self.ending.failures:
            tr.write_line(failure, red=True, bold=True)

    def _unknown_tag_lines(self, config: pytest.Config) -> list[str]:
        """A hint for each name of `-m` no task tag nor marker answers to (a typo selects
        nothing, silently)."""
        markexpr = config.option.markexpr
        if not markexpr:
            return []
        markers = (marker_name(line) for line in config.getini("markers"))
        return unknown_tag_lines(markexpr, self.runtime.task_tags(), markers)

    def pytest_keyboard_interrupt(self) -> None:
        self.ctrl_c = True

    def pytest_unconfigure(self) -> None:
        self.store.close()


def variant_regressions(summary: Summary) -> dict[str, Any]:
    """The session entry's `variant_regressions` (each variant's regression verdict, for
    `agenteval report` to show again); nothing for a run without variants or baseline."""
    blocks = {
        name: part.regression.model_dump()
        for name, part in (summary.variants or {}).items()
        if part.regression is not None
    }
    return {"variant_regressions": blocks} if blocks else {}
