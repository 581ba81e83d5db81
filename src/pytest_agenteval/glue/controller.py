"""The controller: the process that owns the run. It opens the run in the store and registers
the parts that act on it: the recorder (commits), the reporter (summary, files, gate) and, under
xdist, the hooks that ship the plan to workers.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ..core import options
from ..core.errors import StoreError
from ..core.identity import AttemptId
from ..reporting.runref import RunRefError, load_summary
from ..reporting.summary import Summary
from ..store.lifecycle import OpenRun, RunRequest, open_run
from ..store.locate import resolve_cache_dir
from ..store.running import Running, clear_running
from ..store.runs import Store
from ..store.stops import Stops
from .caps import approximate_line
from .concurrency import say_now
from .live_progress import LiveProgress
from .recorder import Recorder
from .reporter import Reporter
from .runtime import Parts, RunContext, Runtime, selected_variants
from .session_state import SessionState
from .settings import Settings, dry_run


@dataclass(frozen=True)
class OpenedRun:
    """The run the controller opened, and what its processes learn of it."""

    store: Store
    run: OpenRun
    baseline: Summary | None
    context: RunContext


def open_controller_run(
    config: pytest.Config, parts: Parts, fingerprint: dict[str, Any]
) -> OpenedRun:
    """Open (create or resume) the run: its plan, its stops, where calls in flight are noted."""
    settings = parts.settings
    folder = parts.agenteval_dir
    if folder is None and (settings.resume or settings.rerun_all):
        raise pytest.UsageError(
            "--resume-suite needs the pytest cache, but the cacheprovider plugin is "
            "disabled (-p no:cacheprovider); enable it to store and resume runs"
        )
    try:
        store = Store(folder)
    except StoreError as exc:
        raise pytest.UsageError(str(exc)) from None
    baseline = read_baseline(settings, store)  # before the run opens: `latest` is older
    variants, reference = selected_variants(settings, parts.datasets) or (None, None)
    request = RunRequest(
        datasets=[{"name": d.name, "version": d.manifest.version} for d in parts.datasets],
        fingerprint=fingerprint,
        resume=settings.resume,
        run_id=settings.run_id,
        rerun_errors=settings.rerun_errors,
        rerun_all=settings.rerun_all,
        allow_drift=settings.allow_drift,
        dry=dry_run(config),
        shard=str(settings.shard) if settings.shard else None,
        variants=variants,
        reference=reference,
    )
    try:
        run = open_run(store, request)
    except StoreError as exc:
        store.close()
        raise pytest.UsageError(str(exc)) from None
    context = RunContext(fingerprint, run.plan)
    if not request.dry:
        deadline = settings.deadline
        at = options.deadline_at(deadline, time.time()) if deadline else None
        run_dir = store.runs_dir / run.run_id
        stops = Stops(run_dir, at, max_cost=settings.max_cost, max_tokens=settings.max_tokens)
        clear_running(run_dir)  # an earlier session's workers are gone
        context = RunContext(
            fingerprint,
            run.plan,
            stops,
            partial(_note_running, store, run.run_id),
            running=Running(),
        )
    return OpenedRun(store, run, baseline, context)


def start_controller(config: pytest.Config, runtime: Runtime, opened: OpenedRun) -> None:
    """Register the opened run's recorder and reporter (and, under xdist, what ships the plan
    to workers)."""
    store, run, baseline = opened.store, opened.run, opened.baseline
    settings = runtime.settings
    dry = dry_run(config)
    try:  # the spend ledger is opened here: a damaged or newer one, or a link in its place
        state = SessionState.of(run, runtime.stops, settings.max_cost, settings.max_tokens)
    except StoreError as exc:
        store.close()
        raise pytest.UsageError(str(exc)) from None
    capped = settings.max_cost is not None or settings.max_tokens is not None
    approximate = approximate_line(runtime.datasets, settings.variants, settings.max_cost, capped)
    if approximate is not None and not dry_run(config):
        say_now(config, approximate)
    distributed = config.pluginmanager.hasplugin("dsession") or bool(
        getattr(config.option, "numprocesses", None)
    )
    run_dir = None if dry else store.runs_dir / run.run_id
    live = LiveProgress(runtime, run.run_id, run_dir, state.budget, distributed)
    config.pluginmanager.register(live, "agenteval-progress")
    recorder = Recorder(config, runtime, store, run, state, live)
    config.pluginmanager.register(recorder, "agenteval-recorder")
    reporter = Reporter(runtime, store, run, state, live, dry=dry, baseline=baseline)
    config.pluginmanager.register(reporter, "agenteval-reporter")
    if runtime.settings.probe and runtime.stops is not None:
        from .probe import ProbeHooks

        probe = ProbeHooks(runtime, recorder.keys_of)  # after the recorder: before it, too
        config.pluginmanager.register(probe, "agenteval-probe")
    if not dry:
        from .preflight import PreflightHooks

        preflight = PreflightHooks(runtime, recorder.keys_of)  # after the probe: before it
        config.pluginmanager.register(preflight, "agenteval-preflight")
    if config.pluginmanager.hasplugin("xdist"):
        from .xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(runtime, recorder), "agenteval-xdist")


def read_baseline(settings: Settings, store: Store) -> Summary | None:
    """The regression gate's baseline summary; a baseline that cannot be had is a usage
    error now, not a traceback at the session's end."""
    if settings.baseline is None:
        if settings.max_regression is not None:
            raise pytest.UsageError(
                "--agenteval-max-regression needs --agenteval-baseline BASE: the run to compare "
                "with (a run id, `latest`, a run folder or a summary.json)"
            )
        return None
    try:
        return load_summary(
            settings.baseline, None if store.temporary else store, settings.invocation_dir
        )
    except (RunRefError, StoreError) as exc:
        store.close()
        raise pytest.UsageError(f"--agenteval-baseline {settings.baseline}: {exc}") from None


def _note_running(store: Store, run_id: str, attempt: AttemptId, running: bool) -> None:
    """Name the attempt whose agent call starts in the lock file (it stays there: a record
    tells a finished one). Best effort: a store that cannot take the note fails loudly at
    the next commit."""
    if running:
        with contextlib.suppress(StoreError):
            store.note_running(run_id, attempt)


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
