"""xdist glue: the controller ships the run's plan to workers once; crashes come back here.

Registered only when xdist is loaded (its hook specs exist only then).
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import StoreError
from ..core.identity import AttemptId
from ..core.shards import parse_shard
from ..store.inflight import InFlight, inflight_path
from ..store.plan import Plan
from ..store.running import Running, RunningFile, running_path
from ..store.stops import Stops
from .internals import queued_reports
from .recorder import Recorder
from .runtime import Parts, RunContext, Runtime

SHIPMENT_SCHEMA = "agenteval.worker/1"
UNSHARED = "agenteval_unshared"
"""workeroutput key: why a worker does not share the controller's run folder."""


class XdistHooks:
    """Controller side: ship the plan, learn what workers collected, record crashes."""

    def __init__(self, runtime: Runtime, recorder: Recorder) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self._shipment: dict[str, Any] | None = None
        self.unshared: dict[str, str] = {}
        """Workers that did not see the run folder, and what that means."""

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["agenteval"] = self.shipment()

    def shipment(self) -> dict[str, Any]:
        """What every worker gets (made once, also for replacement workers): the plan with the
        records regrades need, and the agent fingerprint."""
        if self._shipment is None:
            plan = self.runtime.plan
            if plan.rows:  # the shipped copy carries the records; the plan is not changed
                regrades = {**plan.regrade_records, **_regrades(self.runtime)}
                plan = replace(plan, regrade_records=regrades)
            self._shipment = {
                "schema": SHIPMENT_SCHEMA,
                "plan": plan.to_json(),
                "fingerprint": self.runtime.runner.fingerprint,
                "stops": _stops(self.runtime.stops),
                "shard": str(self.runtime.shard) if self.runtime.shard else None,
                "alone": sorted(key.to_json() for key in self.recorder.run.alone),
            }
        return self._shipment

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        """On Ctrl-C, the reports workers already sent still get committed: xdist would drop
        its queue of them, and with them finished (maybe paid) attempts."""
        try:
            return (yield)
        except KeyboardInterrupt as exc:
            if type(exc) is KeyboardInterrupt:  # not xdist's own stop (`-x`, maxfail)
                interrupt_workers()
            _report_what_arrived(session.config)
            raise

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        note = getattr(node, "workeroutput", {}).get(UNSHARED)
        if note:
            self.unshared[node.gateway.id] = note

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Say so when a worker did not see the run folder: its stops and limits differed."""
        for worker, note in sorted(self.unshared.items()):
            terminalreporter.write_line(f"agenteval: worker {worker} {note}", yellow=True)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.recorder.node_collected(list(ids))

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        worker = getattr(getattr(report, "node", None), "gateway", None)
        self.recorder.crashed(crashitem, report, worker.id if worker is not None else None)


def _regrades(runtime: Runtime) -> dict[str, Any]:
    """The stored records the plan will regrade, without their history: every variant's
    attempt is looked up with its variant (a key without it finds nothing, and the worker would
    pay for what it should regrade)."""
    found = {}
    for task in runtime.all_tasks():
        for attempt in range(runtime.attempts_for(task.dataset)):
            for variant in runtime.variants_of(task):
                key = AttemptId(
                    dataset=task.dataset.name, task_id=task.id, variant=variant, attempt=attempt
                )
                decision = runtime.decide(key, task)
                if decision.record is not None:
                    found[key.plan_key] = decision.record.with_previous(())
    return found


def interrupt_workers() -> None:
    """Pass a SIGINT on to the workers, unless a terminal's Ctrl-C already reached them.

    A SIGINT sent to the controller alone (`kill -INT`, a CI job's timeout) would leave the
    workers starting attempts whose reports nobody reads any more: paid for, then lost. The
    workers are this process's children; a terminal signals its whole foreground group."""
    if _in_terminals_foreground():
        return
    for pid in _children():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGINT)


def _in_terminals_foreground() -> bool:
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no controlling terminal: nobody pressed Ctrl-C at one
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _children() -> list[int]:
    """This process's child processes (Linux's /proc; elsewhere none are known)."""
    found: list[int] = []
    for listing in Path("/proc/self/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            found += [int(pid) for pid in listing.read_text().split()]
    return found


def _report_what_arrived(config: pytest.Config) -> None:
    """Hand the test reports waiting in xdist's queue to pytest, as xdist would have."""
    for report, node in queued_reports(config):
        report.node = node  # type: ignore[attr-defined]  # as xdist sets it
        config.hook.pytest_runtest_logreport(report=report)


def worker_context(config: pytest.Config, parts: Parts, fingerprint: dict[str, Any]) -> RunContext:
    """On an xdist worker: the run as the controller shipped it (plan, fingerprint, stops)."""
    shipped = config.workerinput.get("agenteval")  # type: ignore[attr-defined]
    if not shipped:
        return RunContext(fingerprint)
    if shipped.get("schema") != SHIPMENT_SCHEMA:
        raise pytest.UsageError(
            "the xdist controller runs another pytest-agenteval than this worker "
            f"(it sent {shipped.get('schema')!r}); install the same version on both"
        )
    try:
        plan = Plan.from_json(shipped["plan"])
    except StoreError as exc:
        raise pytest.UsageError(str(exc)) from None
    alone = frozenset(AttemptId.from_json(values) for values in shipped.get("alone", ()))
    shard = shipped.get("shard")  # `auto` as the controller resolved it: a remote env may differ
    context = RunContext(
        shipped["fingerprint"],
        plan,
        alone=alone,
        shard=parse_shard(shard) if shard else None,  # type: ignore[arg-type]
    )
    stops = shipped.get("stops")
    if not stops:
        return context
    caps = parts.settings.max_cost, parts.settings.max_tokens
    joined, unshared = worker_stops(stops, parts.agenteval_dir, caps)
    note = running = None
    if unshared:
        config.workeroutput[UNSHARED] = unshared  # type: ignore[attr-defined]
    else:
        worker = config.workerinput["workerid"]  # type: ignore[attr-defined]
        run_dir = Path(stops["run_dir"])
        if parts.concurrency > 1:  # else the item running is the one in flight
            note = InFlight(inflight_path(run_dir, worker)).note
        running = Running()  # the controller's progress.json merges what this file says
        config.add_cleanup(RunningFile(running, running_path(run_dir, worker)).close)
    return replace(context, stops=joined, note_running=note, running=running)


def worker_stops(
    shipped: dict[str, Any],
    local: Path | None,
    caps: tuple[float | None, int | None] = (None, None),
) -> tuple[Stops, str | None]:
    """The stops a worker checks: in the controller's run folder when the worker sees it;
    otherwise (another machine or working directory) in a folder of its own machine, so limits
    hold among that machine's workers and nothing is written where the controller's path
    happens to point. Also says why, when the run folder is not shared."""
    run_dir = Path(shipped["run_dir"])
    if (run_dir / "run.json").is_file():
        return Stops(run_dir, shipped["deadline"], max_cost=caps[0], max_tokens=caps[1]), None
    base = local if local is not None else Path(tempfile.gettempdir()) / "agenteval"
    own = base / "unshared" / run_dir.name
    note = (
        f"does not see the run folder {run_dir} (another machine or working directory): "
        "agent limits hold only among the workers of its machine, and cancel, the spend and "
        "token caps and a Ctrl-C of the controller do not reach it (the deadline does)"
    )
    return Stops(own, shipped["deadline"], max_cost=caps[0], max_tokens=caps[1]), note


def _stops(stops: Stops | None) -> dict[str, Any] | None:
    """Where workers look for the run's stops: its folder (local workers), and the deadline."""
    if stops is None or stops.run_dir is None:
        return None
    return {"run_dir": str(stops.run_dir), "deadline": stops.deadline}
