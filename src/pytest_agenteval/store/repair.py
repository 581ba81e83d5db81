"""`agenteval repair RUN`: rebuild a run's damaged or lost run.json from what the run stored.

Repair never deletes anything: a damaged run.json is kept beside the new one, and damaged
index or record lines stay where they are. Attempts whose records are intact but whose index
lines are damaged, lost or point elsewhere are re-indexed: their lines are appended to
index.jsonl (the newest line of an attempt wins). The others are reported and run again.
The rebuilt run.json says `interrupted`, so `--resume-suite` continues the run.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import StoreError, os_failure
from .files import RUN_JSON_LIMIT, open_regular, write_json
from .index import IndexRow
from .problems import StoreProblem
from .runs import RUN_SCHEMA, RunFileError, Store, dataset_key


@dataclass
class Repair:
    """What `repair_run` did, and the damage it found but cannot undo."""

    done: list[str] = field(default_factory=list)
    damage: list[StoreProblem] = field(default_factory=list)


def repair_run(store: Store, run_id: str) -> Repair:
    """Check every stored attempt of the run, and rebuild its run.json when that is damaged."""
    if store.running(run_id):
        raise StoreError(
            f"run {run_id} is being run by a pytest process right now; repair it later"
        )
    rows, _ = store.index(run_id, check=True)  # records.jsonl re-indexed where they disagree
    for row in rows:
        store.record(run_id, row.key)  # every full record read once: damage is noted
    repair = Repair()
    saved = store.save_reindexed(run_id)
    if saved:
        repair.done.append(f"{saved} attempts re-indexed from records.jsonl (lines appended)")
    try:
        found = store.run(run_id)
    except RunFileError as exc:
        if not exc.repairable:
            raise
        repair.done += _rebuild(store, run_id, rows, exc)
    else:
        state = "readable, kept as it is" if found else "absent, and nothing is stored: no run"
        repair.done.append(f"run.json is {state}")
    repair.done.append(f"{len(rows)} stored attempts checked")
    repair.damage = store.problems
    return repair


def _rebuild(store: Store, run_id: str, rows: list[IndexRow], exc: RunFileError) -> list[str]:
    folder = store.runs_dir / run_id
    if not rows:
        raise StoreError(f"{exc}, and run {run_id} has no readable stored attempts to rebuild from")
    done = []
    path = folder / "run.json"
    if path.exists():
        kept = _unused(folder / "run.json.damaged")
        try:
            os.replace(path, kept)
        except OSError as error:
            raise StoreError(os_failure("rename", path, error)) from None
        done.append(f"the damaged run.json ({exc.problem}) is kept as {kept.name}")
    meta = rebuilt_meta(store, run_id, rows)
    write_json(path, meta)
    names = ", ".join(f"{d['name']} {d['version']}" for d in meta["datasets"])
    done.append(
        f"run.json rebuilt from {len(rows)} stored attempts: dataset {names}, status interrupted"
    )
    return done


def rebuilt_meta(store: Store, run_id: str, rows: list[IndexRow]) -> dict[str, Any]:
    """A run.json from the run's index and records (versions from its summary.json, if any)."""
    folder = store.runs_dir / run_id
    versions, agent, shard = _from_summary(folder / "summary.json")
    datasets = [
        {"name": name, "version": versions.get(name, "unknown")}
        for name in sorted({row.dataset for row in rows})
    ]
    if agent is None:
        agent = _agent_of_records(store, run_id, rows)
    return {
        "schema": RUN_SCHEMA,
        "run_id": run_id,
        "datasets": datasets,
        "dataset_key": dataset_key(datasets),
        "agent": agent,
        "created_at": _first_started(folder / "records.jsonl"),
        "updated_at": (folder / "index.jsonl").stat().st_mtime,
        "planned": len(rows),
        "status": "interrupted",
        "sessions": [],
        "repaired_at": time.time(),
        **({"shard": shard} if shard else {}),
    }


def _from_summary(path: Path) -> tuple[dict[str, str], dict[str, Any] | None, str | None]:
    """Dataset versions, the agent fingerprint and the shard from the run's last summary.json,
    if any (the shard keeps the repaired run the one its shard's --resume-suite continues)."""
    try:
        with open_regular(path, RUN_JSON_LIMIT) as f:
            summary = json.loads(f.read().decode("utf-8"))
        versions = {d["name"]: d["version"] for d in summary["datasets"]}
        agent = summary["agent"]["fingerprint"]
        shard = summary.get("shard")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}, None, None
    return (
        versions,
        agent if isinstance(agent, dict) else None,
        shard if isinstance(shard, str) else None,
    )


def _agent_of_records(store: Store, run_id: str, rows: list[IndexRow]) -> dict[str, Any]:
    """The fingerprint the newest readable record was made with (records add what they used)."""
    for row in reversed(rows):
        record = store.record(run_id, row.key)
        if record is not None:
            return {k: v for k, v in record.agent.items() if k != "used"}
    return {}


def _first_started(path: Path) -> float:
    """When the run's first attempt started (its first record), else when the file was made."""
    try:
        with open_regular(path) as f:
            started = json.loads(f.readline()).get("started_at")
        if isinstance(started, int | float):
            return float(started)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def _unused(path: Path) -> Path:
    """`path`, or `path.1`, `path.2`... whichever does not exist yet."""
    candidate, number = path, 0
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}.{number}")
    return candidate
