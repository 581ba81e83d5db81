"""An attempt's artifacts: the files its agent created or changed in its environment, the
bytes of those that fit in the task's `artifacts: {max_bytes}` kept with the attempt.

Collected right after the agent call (before graders, which may write files of their own),
while the environment still exists. What is collected is the record's `changed_files` list
(path, change, size, kept) and the bytes of the kept files, which travel to the controller
beside the record and are written into the run store by it (`store/artifacts.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..core.environment import ChangedFile, Environment

MAX_LISTED = 1000
"""Changed files an attempt's record lists one by one; the rest are counted in one note (an
agent that installs packages into its workspace makes thousands)."""


@dataclass(frozen=True, slots=True)
class Artifacts:
    """What an attempt keeps of its changed files."""

    files: list[dict[str, Any]]
    """Every changed file (path, change, size, kept), sorted by path, or a `note` entry (what
    could not be listed): the record's field."""
    kept: dict[str, bytes] = field(default_factory=dict)
    """The bytes of the kept files, by path."""


def collect(environment: Environment | None, max_bytes: int) -> Artifacts:
    """The files the agent changed against the template; regular files are kept in path
    order while they fit in `max_bytes` (one that does not fit is listed, not kept, and a
    smaller one after it may still be kept). No environment: nothing changed. A file that
    cannot be read is listed, not kept."""
    if environment is None:
        return Artifacts([])
    files: list[dict[str, Any]] = []
    kept: dict[str, bytes] = {}
    room = max_bytes
    changes = environment.changed_files()
    for change in changes[:MAX_LISTED]:
        wanted = change.change != "deleted" and not change.link and change.size <= room
        data = _bytes(environment, change) if wanted and keepable(change.path) else None
        if data is not None and len(data) <= room:
            kept[change.path] = data
            room -= len(data)
        files.append(
            {
                "path": change.path,
                "change": change.change,
                "size": change.size,
                "kept": change.path in kept,
            }
        )
    if len(changes) > MAX_LISTED:
        rest = changes[MAX_LISTED:]
        size = sum(c.size for c in rest)
        files.append({"note": f"{len(rest):,} more files ({size:,} B) not listed"})
    return Artifacts(files, kept)


def keepable(path: str) -> bool:
    """Whether `path` may be written below an attempt's folder: relative, no `.`, `..` or
    empty segment."""
    parts = path.split("/")
    return (
        bool(path)
        and not PurePosixPath(path).is_absolute()
        and "" not in parts
        and all(p not in (".", "..") for p in parts)
    )


def _bytes(environment: Environment, change: ChangedFile) -> bytes | None:
    if change.data is not None:
        return change.data
    try:
        return environment.read_file(change.path)
    except (OSError, KeyError):
        return None


def failed(exc: BaseException) -> Artifacts:
    """What an attempt whose changed files could not be listed (a daemon error, a plugin's
    environment that cannot) keeps: nothing, and why."""
    why = f"{type(exc).__name__}: {exc}"[:500]
    return Artifacts([{"note": f"the changed files could not be listed: {why}"}])
