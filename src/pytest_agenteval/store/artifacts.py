"""Attempts' artifacts in the run store: the bytes of the files an agent changed, kept below
the run folder, one folder per attempt.

    <run>/artifacts/<dataset>/<task id>[attempt-<N>]/<path in the workspace>

(a variant's attempt: `<task id>[<variant>-attempt-<N>]`). The attempt's folder is named as
its pytest item, so `ds/a[attempt-0]` and `ds/a/b[attempt-0]` never nest (a task id has no
`[`); a name part longer than a file name may be is bounded and hashed (`attempt_path`).
Written only by the controller, before the attempt's record (the commit point): a session
killed between the two leaves files of an attempt without a record, which runs again and
replaces them. Every new record of an attempt (a run again, a regrade) first removes the
folder, so no attempt shows an earlier one's files.

A stored record and its run folder may come from elsewhere (a shard's CI job, a restored cache),
so whatever reads a kept file (the HTML report, `agenteval show`, `export --artifacts`,
`merge`) opens it with `open_kept`: only a regular file that the record's path names inside the
attempt's folder, reached without following any link; anything else is `Refused`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import StoreError, os_failure
from ..core.files import NotRegular, open_below
from ..core.identity import AttemptId, item_name

ARTIFACTS = "artifacts"
"""The run folder's subfolder holding every attempt's artifacts."""
MAX_NAME_BYTES = 255
"""The longest file name common file systems take (NAME_MAX): a part of an attempt's folder
path longer than this is bounded and hashed."""
READABLE_CHARS = 60
"""The readable part of a bounded name; a hash of the attempt's exact identity follows it."""


class Refused(StoreError):
    """A stored artifact path that names no regular file inside its attempt's folder (absolute,
    with `..`, through a symbolic link, a FIFO, a device): it is never read or copied."""

    def __init__(self, folder: str, path: str, why: str) -> None:
        super().__init__(f"{folder}: {why}")
        self.where = f"{folder}/{path}"
        """The attempt's folder (as its key names it) and the path, as stored."""
        self.why = why
        """What is wrong, quoting the path as stored."""


def attempt_path(key: AttemptId) -> str:
    """The attempt's folder below `artifacts/` (and below an export's DIR), in POSIX form.

    Named as its item (`ds/a[attempt-0]`) as every version named it; when a part would be
    longer than MAX_NAME_BYTES (a long task id or variant name), that attempt's folder is
    `<dataset>/<task id, cut>~<hash>[<variant, cut>-attempt-<N>]` instead: `~` is in no task
    id, so a bounded name is never an item's, and the hash keeps it the attempt's own."""
    dataset, task_id, attempt, variant = key.dataset, key.task_id, key.attempt, key.variant
    named = f"{dataset}/{key.item_name}"
    if all(len(part.encode()) <= MAX_NAME_BYTES for part in named.split("/")):
        return named
    exact = hashlib.sha256(json.dumps(key.to_json()).encode()).hexdigest()[:12]
    task = task_id.replace("/", "_")[:READABLE_CHARS]
    short = variant[:READABLE_CHARS] if variant is not None else None
    folder = dataset if len(dataset.encode()) <= MAX_NAME_BYTES else dataset[:READABLE_CHARS]
    return f"{folder}/{item_name(f'{task}~{exact}', attempt, short)}"


def attempt_folder(run_dir: Path, key: AttemptId) -> Path:
    return run_dir / ARTIFACTS / attempt_path(key)


def replace(run_dir: Path, key: AttemptId, files: Mapping[str, bytes]) -> None:
    """Remove the attempt's earlier artifacts and write `files` (paths checked by
    `execution.artifacts.keepable` where they were collected); raises StoreError."""
    folder = attempt_folder(run_dir, key)
    try:
        if folder.exists():
            shutil.rmtree(folder)
        for path, data in files.items():
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:  # a fresh folder: nothing there to follow
                out.write(data)
    except OSError as exc:
        raise StoreError(os_failure("write", folder, exc)) from None


def open_kept(run_dir: Path, key: AttemptId, path: str) -> BinaryIO:
    """The attempt's kept file `path` (as its record names it), opened for reading.

    Each folder from the run folder down is opened without following a link and the file only
    if it is a regular file there of one name (the store writes every kept file anew), so no
    stored name (absolute, `..`, a link, a FIFO or device, a folder replaced by a link, a hard
    link) reads anything outside the attempt's folder (`core.files.open_below`). Raises
    FileNotFoundError when it is not there, Refused for anything else."""
    folder = attempt_path(key)
    where = f"{run_dir / ARTIFACTS}/{folder}"
    for what, named in ((f"the attempt's folder name '{folder}'", folder), (f"'{path}'", path)):
        why = _unsafe(named)
        if why is not None:
            raise Refused(where, path, f"{what} {why}")
    try:
        return open_below(run_dir, [ARTIFACTS, *folder.split("/"), *path.split("/")], one_link=True)
    except NotRegular as exc:
        raise Refused(where, path, f"'{path}' {exc.why}") from None


def _unsafe(path: str) -> str | None:
    """Why a stored POSIX path may not be followed below a folder, or None."""
    if path.startswith("/"):
        return "is an absolute path"
    if any(p in ("", ".", "..") or "\0" in p for p in path.split("/")):
        return "has an empty, '.' or '..' part"
    return None


def read(run_dir: Path, key: AttemptId, path: str, limit: int | None = None) -> bytes | None:
    """A kept file's bytes (its first `limit`, when given); None when it is not there (never
    kept, or lost). Raises Refused (see `open_kept`)."""
    try:
        with open_kept(run_dir, key, path) as f:
            return f.read() if limit is None else f.read(limit)
    except OSError:  # Refused is no OSError: it is raised
        return None


def kept_paths(changed_files: Iterable[Any] | None) -> list[str]:
    """The paths a record's `changed_files` says were kept, as written (a note, or an entry
    a damaged record holds that is no kept file, names none)."""
    return [
        entry["path"]
        for entry in changed_files or ()
        if isinstance(entry, dict)
        and entry.get("kept") is True
        and isinstance(entry.get("path"), str)
    ]


@dataclass(frozen=True)
class Copied:
    """What `copy_kept` copied, and what it did not."""

    files: int = 0
    skipped: tuple[str, ...] = ()
    """One line per kept file not copied: where, and why."""

    def __add__(self, other: Copied) -> Copied:
        return Copied(self.files + other.files, self.skipped + other.skipped)


def copy_kept(run_dir: Path, key: AttemptId, paths: Iterable[str], out: Path) -> Copied:
    """Copy the attempt's kept files `paths` (those its record lists) from the run folder to
    `out/<attempt path>/`, each opened by `open_kept`; nothing else in the attempt's folder is
    copied. A file not copied (refused, missing, unreadable) is a line of `skipped`."""
    target = out / attempt_path(key)
    where = f"{run_dir / ARTIFACTS}/{attempt_path(key)}"
    files, skipped = 0, []
    for path in paths:
        try:
            with open_kept(run_dir, key, path) as source:
                _write(target, path, source)
            files += 1
        except FileNotFoundError:
            skipped.append(f"{where}: '{path}' is listed as kept, but is not there")
        except Refused as exc:
            skipped.append(str(exc))
        except OSError as exc:
            skipped.append(f"{where}: '{path}': {exc.strerror or exc}")
    return Copied(files, tuple(skipped))


def _write(folder: Path, path: str, source: BinaryIO) -> None:
    """Write `source` to `folder/path`, never through a link already there."""
    target = folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
        shutil.copyfileobj(source, out)
