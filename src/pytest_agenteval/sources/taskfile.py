"""Read one task file: parse it, validate its tasks, and note the workspace folders it names.

Reading stops at validated specs; graders and workspaces are checked when the dataset turns the
specs into tasks, because both can change without the file changing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import TaskFileError, did_you_mean
from ..core.model import TaskSpec, check_task_id
from .speccache import CachedTask, SpecCache
from .yamlfile import field_path, line_of, parse, validation_errors


@dataclass(frozen=True)
class LoadFailure:
    """A task file, or one task of a `tasks:` list, that could not be loaded."""

    path: Path
    label: str
    """Task id when known, else the file's id-like path (and list position)."""
    line: int
    errors: list[TaskFileError] = field(default_factory=list)
    row: tuple[Path, int] | None = None
    """(source file, line) of the row, for a problem of the task file's shared settings."""
    partial: CachedTask | None = None
    """The task without its invalid keys, when that is valid: its graders are built anyway,
    so one round of `validate` reports their problems too."""

    def render(self) -> str:
        return "\n".join(e.render() for e in self.errors)


@dataclass(frozen=True)
class FileRead:
    """What one task file holds."""

    tasks: list[CachedTask | LoadFailure]
    """Each task's validated spec, or why it is not valid."""
    workspaces: tuple[str, ...]
    """`workspace:` values of its tasks, valid or not: templates that are never collected."""


def read_task_file(path: Path, default_id: str, cache: SpecCache | None, root: Path) -> FileRead:
    """Read `path` (through the cache when given); problems become LoadFailures."""
    cached = cache.get(path) if cache is not None else None
    if cached is not None:
        return FileRead(list(cached), tuple(t.spec.workspace for t in cached if t.spec.workspace))
    read, _ = read_with_node(path, default_id, root)
    if cache is not None and all(isinstance(t, CachedTask) and t.row is None for t in read.tasks):
        cache.put(path, read.tasks)  # type: ignore[arg-type]
    return read


def read_with_node(path: Path, default_id: str, root: Path) -> tuple[FileRead, Any]:
    """Parse and validate `path`; also return its YAML node tree (None if unparseable).

    `root` is the dataset's folder, which a `source:` file must lie in."""
    try:
        node, data = parse(path)
    except TaskFileError as exc:
        return FileRead([LoadFailure(path, default_id, exc.line or 1, [exc])], ()), None
    if isinstance(data, dict) and "source" in data:
        from .sourced import read_sourced  # it builds on this module

        tasks = read_sourced(path, node, data, default_id, root)
        return FileRead(tasks, _named_workspaces([data])), node
    if isinstance(data, dict) and "tasks" in data:
        raws = data["tasks"] if isinstance(data["tasks"], list) else []
        tasks = _read_list(path, default_id, node, data)
    elif isinstance(data, dict):
        raws = [data]
        tasks = [_read_task(path, node, data, (), default_id)]
    else:
        raws = []
        problem = "a task file holds one task (a mapping) or a `tasks:` list of tasks"
        tasks = [LoadFailure(path, default_id, 1, [TaskFileError(path, problem, line=1)])]
    return FileRead(tasks, _named_workspaces(raws)), node


def _named_workspaces(raws: list[Any]) -> tuple[str, ...]:
    return tuple(
        raw["workspace"]
        for raw in raws
        if isinstance(raw, dict) and isinstance(raw.get("workspace"), str)
    )


def _list_hint(key: Any) -> str:
    """What an unknown key beside `tasks:` is told: a list file holds only its tasks."""
    meant = did_you_mean(str(key), ["tasks"])
    return meant or "a file with a `tasks:` list holds nothing else: put the key in each task"


def _read_list(
    path: Path, stem: str, node: Any, data: dict[str, Any]
) -> list[CachedTask | LoadFailure]:
    tasks = data["tasks"]
    extra = [key for key in data if key != "tasks"]
    if extra or not isinstance(tasks, list):
        errors = [
            TaskFileError(path, problem, line=line_of(node, (key,)), field=str(key), hint=hint)
            for key, problem, hint in [
                *((key, f"unknown key {key!r}", _list_hint(key)) for key in extra),
                *(
                    [("tasks", "`tasks` must be a list of tasks", None)]
                    if not isinstance(tasks, list)
                    else []
                ),
            ]
        ]
        errors.sort(key=lambda e: e.line or 0)
        return [LoadFailure(path, stem, errors[0].line or 1, errors)]
    results: list[CachedTask | LoadFailure] = []
    for index, raw in enumerate(tasks):
        loc = ("tasks", index)
        if isinstance(raw, dict) and "id" not in raw:
            err = TaskFileError(
                path,
                "missing required field 'id' (tasks in a `tasks:` list need one)",
                line=line_of(node, loc),
                field=field_path(loc),
            )
            results.append(LoadFailure(path, f"{stem}.{index}", err.line or 1, [err]))
            continue
        results.append(_read_task(path, node, raw, loc, f"{stem}.{index}"))
    return results


def _read_task(
    path: Path, node: Any, raw: Any, loc: tuple[Any, ...], default_id: str
) -> CachedTask | LoadFailure:
    line = line_of(node, loc) or 1
    label = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
    label = label or default_id
    if not isinstance(raw, dict):
        err = TaskFileError(path, "a task must be a mapping", line=line, field=field_path(loc))
        return LoadFailure(path, label, line, [err])
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as exc:
        errors = validation_errors(exc, path, node, loc, TaskSpec)
        partial = _without_invalid(raw, exc, label)
        kept = CachedTask(partial, line, loc) if partial is not None else None
        return LoadFailure(path, label, line, errors, partial=kept)
    if spec.id is None:
        try:
            check_task_id(default_id)
        except ValueError as exc:
            hint = "add an `id:` field, or rename the file"
            return LoadFailure(
                path, label, line, [TaskFileError(path, str(exc), line=line, hint=hint)]
            )
        spec = spec.model_copy(update={"id": default_id})
    return CachedTask(spec, line, loc)


def _without_invalid(raw: dict[str, Any], exc: ValidationError, label: str) -> TaskSpec | None:
    """`raw` without the keys pydantic refused (a missing `input` made empty), if that is a
    valid task whose graders can still be checked; None when the graders themselves are bad."""
    bad = {e["loc"][0] for e in exc.errors(include_url=False) if e["loc"]}
    if "graders" in bad:
        return None
    kept = {k: v for k, v in raw.items() if k not in bad and k in TaskSpec.model_fields}
    try:
        return TaskSpec.model_validate({"input": "", **kept, "id": label})
    except ValidationError:
        return None
