"""Merging the runs of a suite's shards (`--agenteval-shard I/N` on N CI machines) into one run.

The sources are run folders, or stores holding them (a pytest cache dir, its `agenteval`
folder, or a `runs` folder), e.g. CI artifacts. The merged run is written into a store like any
other, so `agenteval report`, `agenteval runs` and `--resume-suite` take it as it is: its
records are copied byte for byte and indexed as the store indexes them; its run.json lists the
shard runs it holds (`merged_from`). Its id is derived from theirs, so merging again, or merging
the merged run with a shard it already holds, writes the same run again.

A merge is refused, naming what differs, when the shards are of different datasets, dataset
versions, agents (those two unless `allow_drift`) or shard counts; when a shard is missing;
when two different runs claim one shard; and when a source's stored attempts are damaged.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import StoreError, os_failure
from ..core.identity import AttemptId
from ..core.records import AttemptRecord, index_entry, placed, to_json_text
from ..core.shards import Shard, parse_shard
from .artifacts import ARTIFACTS, Copied, copy_kept, kept_paths
from .files import RunFiles, locked, open_regular, read_at, write_json
from .index import IndexRead, read_index
from .lifecycle import fingerprint_drift, variant_drift
from .problems import RUNS_AGAIN
from .reindex import reindex
from .runs import RUN_SCHEMA, RunInfo, Store, dataset_key, parse_record
from .sessions import SessionEntry

MERGED_FROM = "merged_from"


class MergeError(StoreError):
    """Shards that cannot be merged; the message lists every problem found."""


@dataclass(frozen=True)
class ShardRun:
    """One shard's run, as a source holds it (itself, or inside a merged run)."""

    run_id: str
    shard: Shard
    status: str
    planned: int
    narrowed_by: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    load_errors: list[dict[str, str]] = field(default_factory=list)
    created_at: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "shard": str(self.shard),
            "status": self.status,
            "planned": self.planned,
            "narrowed_by": self.narrowed_by,
            "counts": self.counts,
            "load_errors": self.load_errors,
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardRun:
        shard = parse_shard(data["shard"])
        assert isinstance(shard, Shard)
        return cls(
            data["run_id"],
            shard,
            data["status"],
            data["planned"],
            data.get("narrowed_by"),
            data.get("counts") or {},
            data.get("load_errors") or [],
            data.get("created_at", 0.0),
        )


@dataclass
class Part:
    """One run folder given to merge: a shard's run, or a merged run of several shards."""

    folder: Path
    info: RunInfo
    shards: list[ShardRun]
    source: Path
    """The source it was found in, as the user named it."""

    def __str__(self) -> str:
        which = ", ".join(str(s.shard) for s in self.shards)
        return f"run {self.info.run_id} (shard {which}, from {self.source})"


@dataclass(frozen=True)
class Merged:
    """What a merge wrote."""

    run_id: str
    store_root: Path
    attempts: int
    shards: int
    artifacts: Copied = field(default_factory=Copied)
    """The shards' artifacts copied, and those skipped (each with why)."""


def merge_runs(sources: Iterable[Path], out: Path, *, allow_drift: bool = False) -> Merged:
    """Merge the shard runs found in `sources` into one run in the store of cache dir `out`."""
    parts = [part for source in sources for part in find_parts(source)]
    shards = check_parts(parts, allow_drift=allow_drift)
    parts.sort(key=lambda part: min(s.shard.index for s in part.shards))  # order given: no matter
    run_id = merged_id(shards)
    store_root = out / "agenteval"
    final = store_root / "runs" / run_id
    if locked(final):
        raise MergeError(f"run {run_id} in {final.parent} is being run right now; merge later")
    tmp = store_root / f".merging-{run_id}-{os.getpid()}"
    try:
        _make_dirs(tmp, store_root / "runs")
        attempts, artifacts = _copy_records(parts, tmp)
        write_json(tmp / "run.json", merged_meta(parts, shards, run_id, attempts))
        _replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Merged(run_id, store_root, attempts, len(shards), artifacts)


def find_parts(source: Path) -> list[Part]:
    """The runs a source holds: itself if it is a run folder; else, in a store, the newest
    run of each shard (and merged runs)."""
    if (source / "run.json").exists():
        return [_part(source, source)]
    for runs in (source / "agenteval" / "runs", source / "runs", source):
        if runs.is_dir() and any((p / "run.json").exists() for p in runs.iterdir()):
            found = _newest_per_shard([_part(p, source) for p in _run_folders(runs)])
            if not found:
                raise MergeError(f"{source}: holds no shard's run (made with --agenteval-shard)")
            return found
    raise MergeError(
        f"{source}: no run found (give a run folder, holding run.json, or a pytest cache dir)"
    )


def _run_folders(runs: Path) -> Iterator[Path]:
    for folder in sorted(runs.iterdir()):
        if (folder / "run.json").exists() and not folder.name.startswith("."):
            yield folder


def _newest_per_shard(parts: list[Part]) -> list[Part]:
    """A store may hold earlier runs of a shard (retries): the most recently used one counts;
    runs of no shard (plain runs) are left out."""
    newest: dict[tuple[str, ...], Part] = {}
    for part in sorted(parts, key=lambda p: p.info.updated_at):
        if part.shards:
            newest[tuple(str(s.shard) for s in part.shards)] = part
    return list(newest.values())


def _part(folder: Path, source: Path) -> Part:
    store = Store(folder.parent.parent, runs_dir=folder.parent)
    try:
        info = store.run(folder.name)
    finally:
        store.close()
    assert info is not None  # the folder holds a run.json
    if info.merged_from:
        try:
            shards = [ShardRun.from_json(entry) for entry in info.merged_from]
        except (KeyError, TypeError, AssertionError, argparse.ArgumentTypeError) as exc:
            raise MergeError(
                f"{folder / 'run.json'}: its {MERGED_FROM!r} is damaged ({exc!r}); merge the "
                "shard runs themselves"
            ) from None
    elif info.shard:
        last = info.last_session
        shard = parse_shard(info.shard)
        assert isinstance(shard, Shard)
        shards = [
            ShardRun(
                info.run_id,
                shard,
                info.status,
                info.planned,
                info.narrowed_by,
                last.counts,
                last.load_errors,
                info.created_at,
            )
        ]
    else:
        shards = []
    return Part(folder, info, shards, source)


def check_parts(parts: list[Part], *, allow_drift: bool) -> list[ShardRun]:
    """The shard runs to merge, one per shard, in shard order; MergeError with every problem."""
    if not parts:
        raise MergeError("no shard runs to merge")
    unsharded = [p for p in parts if not p.shards]
    problems = [
        f"{p.folder} is not a shard's run (it was run without --agenteval-shard)" for p in unsharded
    ]
    parts, twice = _one_copy_each([p for p in parts if p.shards])
    problems += twice
    if parts:
        problems += _drift(parts, allow_drift)
    by_index: dict[int, dict[str, tuple[ShardRun, Part]]] = {}
    for part in parts:
        for shard in part.shards:
            by_index.setdefault(shard.shard.index, {}).setdefault(shard.run_id, (shard, part))
    problems += _overlaps(by_index)
    totals = {s.shard.total for p in parts for s in p.shards}
    if len(totals) == 1:
        total = totals.pop()
        missing = [f"{i}/{total}" for i in range(1, total + 1) if i not in by_index]
        if missing:
            several = len(missing) > 1
            problems.append(
                f"missing shard{'s' if several else ''} {', '.join(missing)}: no source holds "
                f"a run of {'them' if several else 'it'} (add {'their' if several else 'its'} "
                "run folder or cache dir to the sources); a merge of part of a suite would give "
                "partial metrics"
            )
    if problems:
        raise MergeError("cannot merge:\n" + "\n".join(f"  {p}" for p in problems))
    return [next(iter(runs.values()))[0] for _, runs in sorted(by_index.items())]


def _one_copy_each(parts: list[Part]) -> tuple[list[Part], list[str]]:
    """Two copies of one shard's run (an artifact given twice, or taken at two times): taken
    as one when their files are byte-identical; otherwise refused, naming both, since which
    copy's status and attempts count would depend on the order the sources were named."""
    first: dict[str, Part] = {}
    kept, problems = [], []
    for part in parts:
        if part.info.merged_from:  # the shard runs it holds are checked record by record
            kept.append(part)
            continue
        seen = first.setdefault(part.info.run_id, part)
        if seen is part:
            kept.append(part)
            continue
        differ = [
            name for name in RUN_FILES if _digest(seen.folder / name) != _digest(part.folder / name)
        ]
        if differ:
            problems.append(
                f"run {part.info.run_id} is given twice, and the copies differ in "
                f"{', '.join(differ)}: {seen.folder} and {part.folder}; give the copy to merge "
                "(the newest, if one was taken before its session ended)"
            )
    return kept, problems


RUN_FILES = ("run.json", "index.jsonl", "records.jsonl")
"""The files that make a run: two copies of a run are one when these are byte-identical."""


def _digest(path: Path) -> bytes | None:
    """The SHA-256 of a run file (None: there is none)."""
    try:
        with open_regular(path) as f:
            return hashlib.file_digest(f, "sha256").digest()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(os_failure("read", path, exc)) from None


def _drift(parts: list[Part], allow_drift: bool) -> list[str]:
    """What differs between the parts: datasets, versions, agent, shard count."""
    first, problems = parts[0], []
    for part in parts[1:]:
        if dataset_key(part.info.datasets) != dataset_key(first.info.datasets):
            problems.append(
                f"different datasets: {first} is of {dataset_key(first.info.datasets)}, "
                f"{part} of {dataset_key(part.info.datasets)}"
            )
            continue
        if part.shards[0].shard.total != first.shards[0].shard.total:
            problems.append(
                f"different shard counts: {first} is one of {first.shards[0].shard.total} "
                f"shards, {part} one of {part.shards[0].shard.total}"
            )
        if allow_drift:
            continue
        if _versions(part) != _versions(first):
            problems.append(
                f"different dataset versions: {first} is of {_versions(first)}, {part} of "
                f"{_versions(part)} (--allow-drift merges them anyway)"
            )
        drift = fingerprint_drift(first.info.agent, part.info.agent)
        drift += variant_drift(first.info.agent, part.info.agent)
        if drift:
            problems.append(
                f"different agents: {first} and {part} (--allow-drift merges them anyway):\n"
                + "\n".join(f"  {line}" for line in drift)
            )
    return problems


def _versions(part: Part) -> str:
    return ", ".join(f"{d['name']} {d.get('version')}" for d in part.info.datasets)


def _overlaps(by_index: dict[int, dict[str, tuple[ShardRun, Part]]]) -> list[str]:
    """Two different runs of one shard: which, and the tasks both hold."""
    problems = []
    for index, runs in sorted(by_index.items()):
        if len(runs) < 2:
            continue
        held = [(shard, part, _task_ids(part, shard)) for shard, part in runs.values()]
        common = set.intersection(*(tasks for _, _, tasks in held))
        names = " and ".join(f"run {s.run_id} (from {p.source})" for s, p, _ in held)
        tasks = f"both hold tasks {_listed(common)}" if common else "they hold no task in common"
        problems.append(
            f"overlapping shards: shard {index}/{held[0][0].shard.total} is in {names}; {tasks}. "
            "Give one run per shard (the newest, if a shard's job was run again)"
        )
    return problems


def _task_ids(part: Part, shard: ShardRun) -> set[str]:
    """The tasks of `shard` whose attempts the part holds."""
    index = part.folder / "index.jsonl"
    rows = _read_index(index, for_plan=False).rows if index.exists() else {}
    return {key.task_id for key in rows if shard.shard.holds(key.dataset, key.task_id)}


def _read_index(path: Path, *, for_plan: bool) -> IndexRead:
    try:
        return read_index(path, for_plan=for_plan)
    except OSError as exc:
        raise StoreError(os_failure("read", path, exc)) from None


def _listed(names: set[str], most: int = 10) -> str:
    shown = sorted(names)
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more


def merged_id(shards: list[ShardRun]) -> str:
    """The merged run's id: the same for the same shard runs, however they were given."""
    ids = "\0".join(sorted(s.run_id for s in shards))
    return "m" + hashlib.sha256(ids.encode()).hexdigest()[:7]


def _copy_records(parts: list[Part], folder: Path) -> tuple[int, Copied]:
    """Copy every stored attempt once, byte for byte, and index it, with the artifacts its
    record lists as kept (`copy_kept`: regular files inside its folder only); a key two parts
    hold (the merged run and a shard it holds) must have the same record in both."""
    files = RunFiles(folder)
    copied: dict[AttemptId, tuple[bytes, Part]] = {}
    artifacts = Copied()
    try:
        files.lock()
        for part in parts:
            for key, data, record in _stored(part):
                digest = hashlib.sha256(data).digest()
                seen = copied.get(key)
                if seen is not None:
                    if seen[0] != digest:
                        raise MergeError(
                            f"{key.task_id} attempt {key.attempt} has different records in "
                            f"{seen[1]} and {part} (was a shard run again after it was "
                            "merged?); merge the shard runs themselves"
                        )
                    continue
                offset, length = files.append_record(data.decode("utf-8"))
                files.append_index(placed(to_json_text(index_entry(record)), offset, length))
                copied[key] = (digest, part)
                kept = kept_paths(record.changed_files)
                if kept:  # and its artifacts, in the same layout
                    artifacts += copy_kept(part.folder, key, kept, folder / ARTIFACTS)
    finally:
        files.close()
    return len(copied), artifacts


def _stored(part: Part) -> Iterator[tuple[AttemptId, bytes, AttemptRecord]]:
    """Each attempt's stored record, as bytes and parsed; damage refuses the merge (naming it)."""
    index = part.folder / "index.jsonl"
    if not index.exists():  # a shard that held no task
        return
    read = _read_index(index, for_plan=True)
    path = part.folder / "records.jsonl"
    damage: list[str] = []
    try:
        with open_regular(path) as f:
            # Every record is read anyway: re-index, so an index that names wrong places (or
            # lost lines) costs no attempt whose record is intact.
            read = reindex(read, index, path, f)
            damage += [str(p) for p in read.problems if p.effect == RUNS_AGAIN]
            for key, where in read.offsets.items():
                data = read_at(f, where)
                record, problem = parse_record(data, key)
                if record is None:
                    damage.append(f"{path}: {problem}")
                else:
                    yield key, data, record
    except FileNotFoundError:
        damage += [str(p) for p in read.problems]
        if read.offsets:
            damage.append(f"{path} is missing")
    except OSError as exc:
        raise StoreError(os_failure("read", path, exc)) from None
    if damage:
        raise MergeError(
            f"{part} has damaged stored attempts:\n"
            + "\n".join(f"  {d}" for d in damage)
            + "\nResume that shard (--resume-suite with its --agenteval-shard) to run them "
            "again, then merge"
        )


def merged_meta(
    parts: list[Part], shards: list[ShardRun], run_id: str, attempts: int
) -> dict[str, Any]:
    """run.json of the merged run: complete only if every shard's run is."""
    first = parts[0].info
    unfinished = [s.status for s in shards if s.status != "complete"]
    narrowed = [f"shard {s.shard}: {s.narrowed_by}" for s in shards if s.narrowed_by]
    counts: dict[str, int] = {}
    for shard in shards:
        for name, n in shard.counts.items():
            counts[name] = counts.get(name, 0) + n
    now = time.time()
    return {
        "schema": RUN_SCHEMA,
        "run_id": run_id,
        "datasets": first.datasets,
        "dataset_key": dataset_key(first.datasets),
        "agent": first.agent,
        "created_at": min(s.created_at for s in shards),
        "updated_at": now,
        "planned": max(sum(s.planned for s in shards), attempts),
        "status": unfinished[0] if unfinished else "complete",
        "narrowed": bool(narrowed),
        "narrowed_by": "; ".join(narrowed) or None,
        **merged_variants(parts),
        "sessions": [
            SessionEntry(
                finished_at=now,
                exitstatus=0,
                counts=counts,
                load_errors=next(
                    (s.load_errors for s in shards if s.shard.reports_load_errors), []
                ),
                merged=True,
            ).to_json()
        ],
        MERGED_FROM: [s.as_json() for s in shards],
        **({"variants": first.variants, "reference": first.reference} if first.variants else {}),
    }


def merged_variants(parts: list[Part]) -> dict[str, Any]:
    """run.json's `variants` and `reference` of the merged run: the shards' selections in
    order (the same in every shard of one run); nothing when the shards have no variants."""
    names = dict.fromkeys(name for part in parts for name in part.info.variants or [])
    if not names:
        return {}
    reference = next((p.info.reference for p in parts if p.info.reference in names), None)
    return {"variants": list(names), "reference": reference or next(iter(names))}


def _make_dirs(tmp: Path, runs: Path) -> None:
    try:
        runs.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as exc:
        raise StoreError(os_failure("create", tmp, exc)) from None


def _replace(tmp: Path, final: Path) -> None:
    """Put the new run in place of an earlier merge of the same shards, if any."""
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    try:
        if final.exists():
            final.rename(old)
        tmp.rename(final)
    except OSError as exc:
        raise StoreError(os_failure("write", final, exc)) from None
    finally:
        shutil.rmtree(old, ignore_errors=True)
