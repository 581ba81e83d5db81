"""Validated task specs of unchanged task files, so that re-runs skip parsing YAML.

Like pytest's own bytecode cache, a file counts as unchanged while its size and modification
time (ns) are. Only specs are kept; defaults, workspaces and graders are derived afresh.

`.pytest_cache` is often kept between CI runs, so the cache is plain JSON (loading it runs no
code, unlike a pickle), every entry is validated again when read (anything damaged, truncated,
mistyped or from another version is a cache miss, never an error), and files whose tasks carry
`env:` values are never stored: those may be secrets. An entry is trusted on size and mtime:
whoever can write the cache can change the tasks (`command:` agents included), as the README says.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pydantic

from ..core.model import TaskSpec

CACHE_SCHEMA = "agenteval.specs/1"
CACHE_NAME = "specs.json"
LEGACY_NAMES = ("specs.pickle",)
"""Caches of older versions: never read, removed when the cache is saved."""


class CachedTask(NamedTuple):
    """One task of a file as the cache keeps it."""

    spec: TaskSpec
    line: int
    """1-based line where the task starts."""
    loc: tuple[Any, ...]
    """() for a one-task file, ("tasks", i) in a list."""
    row: tuple[Path, int] | None = None
    """(source file, line) of the row a task of a `source:` file was made from (never cached)."""


def _versions() -> dict[str, str]:
    from ..core.version import __version__

    python = "{}.{}".format(*sys.version_info[:2])
    return {"plugin": __version__, "pydantic": pydantic.VERSION, "python": python}


class SpecCache:
    """{path: [size, mtime_ns, tasks]} in a JSON file; loaded once, saved when it grew."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stored: dict[str, Any] = _read(path) if path is not None else {}
        self._fresh: dict[str, tuple[int, int, list[CachedTask]]] = {}

    def get(self, file: Path) -> list[CachedTask] | None:
        """The validated tasks of `file` if it is unchanged since they were stored, else None."""
        found = self._stored.get(str(file))
        if not isinstance(found, list) or len(found) != 3:
            return None
        try:
            stat = os.stat(file)
        except OSError:
            return None
        if [stat.st_size, stat.st_mtime_ns] != found[:2]:
            return None
        try:
            return [_task_from_json(entry) for entry in found[2]]
        except (TypeError, ValueError):  # pydantic's ValidationError is a ValueError
            return None

    def put(self, file: Path, tasks: list[CachedTask]) -> None:
        """Remember the tasks of `file` (with its current size and time) for the next session."""
        try:
            stat = os.stat(file)
        except OSError:
            return
        self._fresh[str(file)] = (stat.st_size, stat.st_mtime_ns, tasks)

    def save(self) -> None:
        """Write the cache atomically (xdist workers may race: the last complete one wins).

        Called when collection is done; the entries are dropped then, as collected tasks hold
        their own specs and nothing is collected again."""
        if self.path is not None:
            for name in LEGACY_NAMES:
                with contextlib.suppress(OSError):
                    (self.path.parent / name).unlink(missing_ok=True)
            if self._fresh:
                _write(self.path, self._merged())
        self._stored = {}
        self._fresh = {}

    def _merged(self) -> dict[str, Any]:
        files = dict(self._stored)
        for name, (size, mtime, tasks) in self._fresh.items():
            entries = _tasks_to_json(tasks)
            if entries is None:
                files.pop(name, None)
            else:
                files[name] = [size, mtime, entries]
        return {"schema": CACHE_SCHEMA, "versions": _versions(), "files": files}


def _write(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` with `data` as JSON, or leave it be: a cache is never worth an error."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, path)
    except (OSError, ValueError):  # a full disk; an int JSON cannot write
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any]:
    """The stored files of a cache of this exact version, else nothing."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    if (
        not isinstance(data, dict)
        or data.get("schema") != CACHE_SCHEMA
        or data.get("versions") != _versions()
        or not isinstance(data.get("files"), dict)
    ):
        return {}
    files: dict[str, Any] = data["files"]
    return files


def _task_from_json(entry: Any) -> CachedTask:
    if type(entry) is not list or len(entry) != 3:
        raise ValueError("not a cached task")
    raw, line, loc = entry
    if type(line) is not int or line < 1:
        raise ValueError("not a line number")
    spec = TaskSpec.model_validate(raw)
    if spec.id is None:
        raise ValueError("a cached task has an id")
    return CachedTask(spec, line, _loc_from_json(loc))


def _loc_from_json(loc: Any) -> tuple[Any, ...]:
    if loc == []:
        return ()
    if type(loc) is list and len(loc) == 2 and loc[0] == "tasks" and type(loc[1]) is int:
        return ("tasks", loc[1])
    raise ValueError("not a place in a task file")


def _tasks_to_json(tasks: list[CachedTask]) -> list[Any] | None:
    """The tasks as JSON values, or None when they must not or cannot be stored."""
    entries = []
    for task in tasks:
        if _carries_env(task.spec):
            return None
        raw = task.spec.model_dump(exclude_defaults=True)
        if not _is_plain_json(raw):  # e.g. YAML's !!binary or !!set: JSON would change them
            return None
        entries.append([raw, task.line, list(task.loc)])
    return entries


def _carries_env(spec: TaskSpec) -> bool:
    """Whether the task's agent or a grader has `env:` values (possibly secrets)."""
    if getattr(spec.agent, "env", None):
        return True
    return any(grader.options.get("env") for grader in spec.graders or ())


def _is_plain_json(value: Any) -> bool:
    """Whether `value` survives a JSON round trip unchanged (exact types, string keys)."""
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return True
    if kind is list:
        return all(_is_plain_json(v) for v in value)
    if kind is dict:
        return all(type(k) is str and _is_plain_json(v) for k, v in value.items())
    return False
