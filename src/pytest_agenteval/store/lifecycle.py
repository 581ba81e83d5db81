"""A run's life in the store: create it, or resume it (agent drift checked, plan made once).

Pure: raises StoreError with the message a user reads; the pytest glue turns it into a usage
error before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.errors import StoreError
from .plan import Plan, make_plan
from .runs import Store, dataset_key, new_run_id
from .stops import clear_stops


@dataclass(frozen=True)
class RunRequest:
    """What the session asks of the store."""

    datasets: list[dict[str, str]]
    """name and version of each dataset."""
    fingerprint: dict[str, Any]
    resume: bool = False
    run_id: str | None = None
    rerun_errors: bool = False
    rerun_all: bool = False
    allow_drift: bool = False
    dry: bool = False
    """Plan only (`--co`, `--agenteval-plan`): create nothing, claim nothing."""


@dataclass
class OpenRun:
    """The run this session writes, and what it knew of it when it began."""

    run_id: str
    resumed: bool
    plan: Plan = field(default_factory=Plan)
    died_running: str | None = None
    """The attempt whose agent was running when the run's last session died."""


def open_run(store: Store, request: RunRequest) -> OpenRun:
    """Create the run, or continue the one asked for; its lock is held from here on."""
    if request.resume or request.rerun_all:
        return _resume(store, request)
    run_id = request.run_id or new_run_id()
    if not request.dry:
        store.create_run(run_id, request.datasets, request.fingerprint)
    return OpenRun(run_id, resumed=False)


def _resume(store: Store, request: RunRequest) -> OpenRun:
    names = dataset_key(request.datasets)
    run_id = request.run_id or store.latest_run(request.datasets)
    info = store.run(run_id) if run_id else None
    if info is None:
        which = f"run {run_id!r}" if request.run_id else f"run of dataset {names}"
        raise StoreError(
            f"--resume-suite: no {which} in {store.describe()}; nothing was started. "
            "Run without --resume-suite first (`agenteval runs` lists stored runs)"
        )
    stored = dataset_key(info.datasets)
    if stored != names:
        raise StoreError(f"run {info.run_id} is of dataset {stored}, not {names}")
    drift = fingerprint_drift(info.agent, request.fingerprint)
    if drift and not request.allow_drift:
        raise StoreError(
            f"run {info.run_id} was made with a different agent; resuming would mix two agents "
            "in one summary:\n" + "\n".join(drift) + "\nUse the same agent, start a new run "
            "(drop --resume-suite), or pass --agenteval-allow-drift to mix them on purpose"
        )
    rows, _ = store.index(info.run_id)  # damage is in store.problems
    plan = make_plan(rows, rerun_errors=request.rerun_errors, rerun_all=request.rerun_all)
    plan.fetch = lambda key: store.record(info.run_id, key)
    if not request.dry:
        store.claim_run(info.run_id)
        clear_stops(store.runs_dir / info.run_id)
    return OpenRun(info.run_id, True, plan, info.died_running)


def fingerprint_drift(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines naming what differs between two agent fingerprints."""
    return [
        f"  {name}: stored {old.get(name)!r}, now {new.get(name)!r}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]
