"""A run's life in the store: create it, or resume it (agent drift checked, plan made once),
and tell a run of whole datasets from a narrowed one.

Pure: raises StoreError with the message a user reads; the pytest glue turns it into a usage
error before anything runs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import StoreError
from ..core.identity import AttemptId
from .inflight import clear_in_flight, left_in_flight
from .plan import Plan, make_plan
from .runs import Store, dataset_key, new_run_id, unfinished
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
    shard: str | None = None
    """`I/N` when the session runs one shard: part of the run's identity."""
    variants: list[str] | None = None
    """The variants the session runs (the reference first); None: no dataset has variants."""
    reference: str | None = None
    """The variant the others are compared with; None without variants."""

    def run_variants(self) -> dict[str, Any]:
        """run.json's `variants` and `reference`, for a run with variants only."""
        if self.variants is None:
            return {}
        return {"variants": self.variants, "reference": self.reference}


@dataclass
class OpenRun:
    """The run this session writes, and what it knew of it when it began."""

    run_id: str
    resumed: bool
    plan: Plan = field(default_factory=Plan)
    died_running: str | None = None
    """The attempt whose agent was running when the run's last session died."""
    note: str = ""
    """How the header describes the run, when plain "new" or "resuming" would not say enough."""
    narrowed_by: str | None = None
    """A resumed run's own narrowing (None: it covers its datasets whole)."""
    alone: set[AttemptId] = field(default_factory=set)
    """Attempts whose agent call was in flight when a worker of the last session died: they
    run with no other call in flight, so a crash is provably theirs (see store/inflight.py)."""
    dropped: bool = False
    """The session selected nothing, so its new run was removed again."""
    was: str | None = None
    """A resumed run's status before this session (restored if the session never began)."""


def open_run(store: Store, request: RunRequest) -> OpenRun:
    """Create the run, or continue the one asked for; its lock is held from here on.

    `--resume-suite` with a run id that does not exist yet starts that run, so a CI job can be
    retried with the same command line."""
    if request.resume or request.rerun_all:
        return _resume(store, request)
    return _create(store, request, request.run_id or new_run_id())


def _create(store: Store, request: RunRequest, run_id: str, note: str = "") -> OpenRun:
    if not request.dry:
        store.create_run(
            run_id,
            request.datasets,
            request.fingerprint,
            shard=request.shard,
            extra=request.run_variants(),
        )
        store.hold(run_id, ())
    return OpenRun(run_id, resumed=False, note=note)


def _resume(store: Store, request: RunRequest) -> OpenRun:
    names = dataset_key(request.datasets)
    run_id = request.run_id or store.latest_run(request.datasets, request.shard)
    note = ""
    if run_id is None:
        run_id = _never_planned(store, request)
        note = "resuming: its last session ended before planning, so all of it runs"
    info = store.run(run_id) if run_id else None
    if info is None and request.run_id:
        return _create(store, request, request.run_id, "new: nothing to resume yet")
    if info is None:
        of = f" shard {request.shard}" if request.shard else ""
        raise StoreError(
            f"--resume-suite: no run of{of} dataset {names} in {store.describe()}; nothing was "
            "started. Run without --resume-suite first; a run of part of the dataset (-k, -m, "
            "a path inside it) is resumed only by its id (--agenteval-run-id ID; "
            "`agenteval runs` lists stored runs)"
        )
    stored = dataset_key(info.datasets)
    if stored != names:
        raise StoreError(f"run {info.run_id} is of dataset {stored}, not {names}")
    if info.shard != request.shard:
        raise StoreError(
            f"run {info.run_id} is of {_shard_words(info.shard)}, and this session runs "
            f"{_shard_words(request.shard)}; resume it with the same --agenteval-shard"
        )
    rows, damaged = store.index(info.run_id)  # damage is also in store.problems
    # A run with no records (its agent could not be built, say) has no agent to drift from.
    recorded = bool(rows or damaged)
    drift = fingerprint_drift(info.agent, request.fingerprint) if recorded else []
    ran = {row.variant for row in rows}
    changed = variant_drift(info.agent, request.fingerprint, ran) if recorded else []
    if (drift or changed) and not request.allow_drift:
        raise StoreError(_drift_message(info.run_id, drift, changed))
    plan = make_plan(
        rows,
        rerun_errors=request.rerun_errors,
        rerun_all=request.rerun_all,
        fetch=lambda key: store.record(info.run_id, key),
    )
    alone = left_in_flight(store.runs_dir / info.run_id)
    if not request.dry:
        store.claim_run(info.run_id)
        store.hold(info.run_id, rows)
        agent = request.fingerprint if not recorded else with_variants(info.agent, request, ran)
        if agent != info.agent:
            store.set_agent(info.run_id, agent)
        if request.variants is not None and request.reference is not None:
            store.set_variants(info.run_id, request.variants, request.reference)
        clear_stops(store.runs_dir / info.run_id)
        clear_in_flight(store.runs_dir / info.run_id)
    died = unfinished(info.died_running, rows) if info.status == "interrupted" else None
    return OpenRun(info.run_id, True, plan, died, note, info.narrowed_by, alone, was=info.status)


def _never_planned(store: Store, request: RunRequest) -> str | None:
    """The newest run of these datasets whose sessions all died before planning (killed
    while collecting): nothing planned, nothing recorded. `latest_run` never picks such a run
    over one with work in it, but when there is no other, resuming it starts it over."""
    names = dataset_key(request.datasets)
    for info in store.runs():
        if (
            dataset_key(info.datasets) == names
            and info.shard == request.shard
            and info.planned == 0
            and info.status == "interrupted"
            and info.narrowed_by is None
        ):
            return info.run_id
    return None


def narrowing(
    selected: Collection[AttemptId], whole: Collection[AttemptId], how: Sequence[str]
) -> str | None:
    """Why a session's selection is less than its datasets' every attempt (None: it is all of
    them); `how` names the options and paths that may have narrowed it."""
    chosen = set(selected)
    missing = sum(1 for key in whole if key not in chosen)
    if not missing:
        return None
    count = f"{len(whole) - missing} of {len(whole)} attempts"
    return f"{', '.join(how)} ({count})" if how else count


def fingerprint_drift(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines naming what differs between two agent fingerprints, but their variants (see
    `variant_drift`)."""
    return [
        f"  {name}: stored {old.get(name)!r}, now {new.get(name)!r}"
        for name in sorted((set(old) | set(new)) - {"variants"})
        if old.get(name) != new.get(name)
    ]


def variant_drift(
    old: dict[str, Any], new: dict[str, Any], ran: Collection[str | None] | None = None
) -> list[str]:
    """Lines naming each variant whose agent differs between two fingerprints (of those that
    `ran`, when given: a variant without records has nothing to mix with). A variant added or
    removed is no drift: it runs alone, or its records stay out of the summary."""
    before, now = old.get("variants") or {}, new.get("variants") or {}
    return [
        f"  variant {name!r} of dataset {dataset}: stored {label!r}, now {now[dataset][name]!r}"
        for dataset, labels in sorted(before.items())
        if isinstance(labels, dict) and dataset in now
        for name, label in labels.items()
        if name in now[dataset] and now[dataset][name] != label and (ran is None or name in ran)
    ]


def with_variants(
    stored: dict[str, Any], request: RunRequest, ran: Collection[str | None]
) -> dict[str, Any]:
    """The stored fingerprint with the session's variants added: a variant once run keeps its
    agent in run.json, also while it is left out (bringing it back with another agent is drift
    too), and also when it is allowed to drift (`--agenteval-allow-drift`): its label stays
    that of the agent its records were made with, as a run without variants keeps its agent,
    and every later resume with the other agent is drift again. A variant without records
    takes the session's label."""
    now = request.fingerprint.get("variants")
    if not now:
        return stored
    before = stored.get("variants") or {}

    def label(dataset: str, name: str, given: str) -> str:
        return before.get(dataset, {}).get(name, given) if name in ran else given

    merged = {
        ds: {**before.get(ds, {}), **{name: label(ds, name, v) for name, v in labels.items()}}
        for ds, labels in now.items()
    }
    return {**stored, "variants": {**before, **merged}}


def _drift_message(run_id: str, drift: list[str], changed: list[str]) -> str:
    if drift:
        return (
            f"run {run_id} was made with a different agent; resuming would mix two agents "
            "in one summary:\n" + "\n".join(drift + changed) + "\nUse the same agent, start "
            "a new run (drop --resume-suite), or pass --agenteval-allow-drift to mix them on "
            "purpose"
        )
    return (
        f"run {run_id}: a variant's agent differs from the one its records were made with; "
        "resuming would mix two agents in one variant:\n" + "\n".join(changed) + "\nUse the "
        "same agent, give the changed agent a new variant name (it then runs as a new "
        "variant), start a new run (drop --resume-suite), or pass --agenteval-allow-drift to "
        "mix them on purpose"
    )


def _shard_words(shard: str | None) -> str:
    return f"shard {shard}" if shard else "all shards (no --agenteval-shard)"
