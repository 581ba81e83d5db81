"""An attempt's artifacts: the files its agent created or changed in its environment, the
bytes of those that fit in the task's `artifacts: {max_bytes}` kept with the attempt.

Collected right after the agent call (before graders, which may write files of their own),
while the environment still exists. What is collected is the record's `changed_files` list
(path, change, size, kept) and the bytes of the kept files, which travel to the controller
beside the record and are written into the run store by it (`store/artifacts.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..core.environment import ChangedFile, Environment
from ..core.files import NotRegular
from ..core.text import clean_text
from .environment import LocalEnvironment

MAX_LISTED = 1000
"""Changed files an attempt's record lists one by one; the rest are counted in one note (an
agent that installs packages into its workspace makes thousands)."""
COLLECT_SECONDS = 60.0
"""How long collecting an attempt's changed files may take (a local folder's listing, its
comparison with the template, reading the kept bytes); what is not looked at by then is left
out, a note says so, and the attempt is recorded as ever."""


@dataclass(frozen=True, slots=True)
class Artifacts:
    """What an attempt keeps of its changed files."""

    files: list[dict[str, Any]]
    """Every changed file (path, change, size, kept), sorted by path, or a `note` entry (what
    could not be listed): the record's field."""
    kept: dict[str, bytes] = field(default_factory=dict)
    """The bytes of the kept files, by path."""


def collect(
    environment: Environment | None, max_bytes: int, seconds: float = COLLECT_SECONDS
) -> Artifacts:
    """The files the agent changed against the template; regular files are kept in path
    order while they fit in `max_bytes` (one that does not fit is listed, not kept, and a
    smaller one after it may still be kept). No environment: nothing changed. A file that
    cannot be read, or is no regular file (a link, FIFO, device), is listed, not kept. A
    name that is not UTF-8 is listed escaped (`file_name`). Past `seconds`, what is left is
    not looked at (a note says so)."""
    if environment is None:
        return Artifacts([])
    deadline = time.monotonic() + seconds
    if isinstance(environment, LocalEnvironment):
        changes, complete = environment.changes_until(deadline)
    else:
        changes, complete = environment.changed_files(), True
    files: list[dict[str, Any]] = []
    kept: dict[str, bytes] = {}
    escaped: list[str] = []
    room = max_bytes
    for change in changes[:MAX_LISTED]:
        path = file_name(change.path)
        if path != change.path:
            escaped.append(path)
        wanted = change.change != "deleted" and not change.link and change.size <= room
        if wanted and time.monotonic() > deadline:
            complete = wanted = False
        data = _bytes(environment, change, room) if wanted and keepable(path) else None
        if data is not None and len(data) <= room:
            kept[path] = data
            room -= len(data)
        files.append(
            {"path": path, "change": change.change, "size": change.size, "kept": path in kept}
        )
    if len(changes) > MAX_LISTED:
        rest = changes[MAX_LISTED:]
        size = sum(c.size for c in rest)
        files.append({"note": f"{len(rest):,} more files ({size:,} B) not listed"})
    if escaped:
        files.append({"note": _escaped_note(escaped)})
    if not complete:
        files.append({"note": f"collecting stopped at {seconds:g}s: files after it not looked at"})
    return Artifacts(files, kept)


def file_name(path: str) -> str:
    """A changed file's name as the record holds it: as it is when it is UTF-8; else each byte
    that is not (a lone surrogate, as `os.fsdecode` and `tarfile` read it) written `\\xNN`, as
    Python writes bytes, so the name is text UTF-8 can store and still says which bytes it had.
    The local folder's and a container's listing (and a plugin environment's) pass here."""
    if path.isascii():
        return path
    try:
        raw = path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte (a plugin's name)
        return path.encode("utf-8", "backslashreplace").decode()
    return raw.decode("utf-8", "backslashreplace")


def _escaped_note(names: list[str]) -> str:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    count = f"{len(names)} file name{'s are' if len(names) > 1 else ' is'}"
    return f"{count} not UTF-8, listed with \\xNN for each byte that is not: {shown}"


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


def _bytes(environment: Environment, change: ChangedFile, room: int) -> bytes | None:
    """The changed file's bytes (a local folder's read without following a link; at most
    one more than `room`: it may have grown since it was listed), or None when unreadable."""
    if change.data is not None:
        return change.data
    try:
        if isinstance(environment, LocalEnvironment):
            return environment.read_regular(change.path, room + 1)
        return environment.read_file(change.path)
    except (OSError, KeyError, NotRegular):
        return None


def failed(exc: BaseException) -> Artifacts:
    """What an attempt whose changed files could not be listed (a daemon error, a plugin's
    environment that cannot) keeps: nothing, and why."""
    why = clean_text(f"{type(exc).__name__}: {exc}"[:500])  # an OSError may name a file
    return Artifacts([{"note": f"the changed files could not be listed: {why}"}])
