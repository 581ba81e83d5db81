"""A task file with `source:`: one task per row of a JSONL or CSV file, filled from templates.

The task file is validated once; each row then only renders its templates (`id`,
`description`, `input`, `expected`, `metadata`) and checks what it rendered, so a row costs
about what a cached YAML task does. Rows are never put in the spec cache: the source file
is read each session, and a row that changed changes only its own task's digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from ..core.errors import TaskFileError, did_you_mean, display_path
from ..core.model import SourceTaskSpec, TaskSpec, check_input, check_task_id
from ..core.text import excerpt
from .rows import Row, RowError, SourceError, compile_template, read_rows, render, source_format
from .speccache import CachedTask
from .taskfile import LoadFailure
from .yamlfile import field_path, line_of, validation_errors

TEMPLATED = ("id", "description", "input", "expected", "metadata")
"""Fields filled from each row; the others are shared by every row."""
T = TypeVar("T")

SHARED = ("tags", "graders", "timeout", "grader_timeout", "agent", "workspace")
ROW_HINT = "fields are the keys of a JSONL row or the columns of the CSV header"


def read_sourced(
    path: Path, node: Any, data: dict[str, Any], default_id: str, root: Path
) -> list[CachedTask | LoadFailure]:
    """The tasks of the rows of the file `data["source"]` names; problems become LoadFailures
    (the whole file's at the task file's line, a bad row's at its own line)."""
    line = line_of(node, ()) or 1
    try:
        spec = SourceTaskSpec.model_validate(data)
        templates = _templates(spec)
        source = _source_path(path, spec.source, root)
        rows = read_rows(source, source_format(source, spec.format))
    except ValidationError as exc:
        errors = validation_errors(exc, path, node, (), SourceTaskSpec)
        return [LoadFailure(path, default_id, line, errors)]
    except RowError as exc:
        error = TaskFileError(
            path, exc.problem, line=line_of(node, exc.loc), field=field_path(exc.loc)
        )
        return [LoadFailure(path, default_id, error.line or line, [error])]
    except SourceError as exc:
        at = line_of(node, ("source",)) or line
        error = TaskFileError(path, exc.problem, line=at, field="source", hint=exc.hint)
        return [LoadFailure(path, default_id, at, [error])]
    # Rows differ only in the templated fields: copying one spec skips validating the rest
    base = TaskSpec.model_construct(**{name: getattr(spec, name) for name in SHARED}, input="")
    tasks = [_row_task(row, templates, base, source, default_id, line) for row in rows]
    return _one_error_per_field(tasks, path, node, source, len(rows), default_id)


@dataclass(frozen=True)
class _Missing:
    """A row that lacks a field a template names."""

    row: Row
    label: str
    error: RowError


def _one_error_per_field(
    tasks: list[CachedTask | LoadFailure | _Missing],
    path: Path,
    node: Any,
    source: Path,
    rows: int,
    default_id: str,
) -> list[CachedTask | LoadFailure]:
    """A field that several rows lack is one error at the template naming it (a typo there
    would otherwise be one identical error per row), named like the task file's own errors;
    a field one row lacks is that row's."""
    groups: dict[tuple[Any, ...], list[_Missing]] = {}
    for task in tasks:
        if isinstance(task, _Missing):
            groups.setdefault((task.error.loc, task.error.missing), []).append(task)
    out: list[CachedTask | LoadFailure] = []
    for task in tasks:
        if not isinstance(task, _Missing):
            out.append(task)
            continue
        group = groups[(task.error.loc, task.error.missing)]
        if len(group) == 1:
            error = task.error
            out.append(
                _row_failure(source, task.row, task.label, error.problem, field_path(error.loc))
            )
        elif group[0] is task:
            out.append(_template_failure(path, node, group, source, rows, default_id))
    return out


def _template_failure(
    path: Path, node: Any, group: list[_Missing], source: Path, rows: int, label: str
) -> LoadFailure:
    first = group[0]
    name, loc = first.error.missing, first.error.loc
    assert name is not None
    if len(group) == rows:
        which, lines = f"all {rows}", ""
    else:
        which, lines = f"{len(group)} of {rows}", f" ({line_list([m.row.line for m in group])})"
    problem = f"{which} rows of {display_path(source)} have no field {name!r}{lines}"
    fields = list(first.row.values or {})
    listed = ", ".join(repr(f) for f in fields[:12]) or "none"
    hint = did_you_mean(name, fields) or f"{ROW_HINT} (line {first.row.line} has {listed})"
    line = line_of(node, loc) or 1
    error = TaskFileError(path, problem, line=line, field=field_path(loc), hint=hint)
    return LoadFailure(path, label, line, [error])


def line_list(lines: list[int], most: int = 6) -> str:
    """`lines 1-4, 7` for sorted line numbers: runs joined, at most `most` of them shown."""
    runs: list[list[int]] = []
    for line in lines:
        if runs and line == runs[-1][-1] + 1:
            runs[-1].append(line)
        else:
            runs.append([line])
    shown = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs[:most])
    more = sum(len(r) for r in runs[most:])
    word = "lines" if len(lines) > 1 else "line"
    return f"{word} {shown}" + (f" and {more} more" if more else "")


def _templates(spec: SourceTaskSpec) -> dict[str, Any]:
    """The templated fields, compiled; a missing `id` is the row's index below the file's id."""
    templates = {name: compile_template(getattr(spec, name), (name,)) for name in TEMPLATED}
    if spec.id is None:
        templates["id"] = None
    return templates


def _source_path(path: Path, value: str, root: Path) -> Path:
    """The source file, resolved relative to the task file; it must lie inside the dataset."""
    try:
        source = (path.parent / value).resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise SourceError(f"source {excerpt(value, 80)!r} is not a usable path: {exc}") from None
    if not source.is_relative_to(root):
        raise SourceError(
            f"source {excerpt(value, 80)!r} is outside the dataset (it is {source})",
            hint=f"a source is a file inside the dataset ({root}), relative to the task file",
        )
    if not source.is_file():
        raise SourceError(
            f"source file {excerpt(value, 80)!r} not found (looked for {source})",
            hint="the path is relative to the task file",
        )
    return source


def _row_task(
    row: Row,
    templates: dict[str, Any],
    base: TaskSpec,
    source: Path,
    default_id: str,
    line: int,
) -> CachedTask | LoadFailure | _Missing:
    label = f"{default_id}/{row.index}"
    if row.values is None:
        assert row.problem is not None
        return _row_failure(source, row, label, row.problem, None)
    try:
        task_id = label if templates["id"] is None else _task_id(templates["id"], row.values)
        label = task_id
        fields = _filled(templates, row.values, task_id)
    except RowError as exc:
        if exc.missing is not None:
            return _Missing(row, label, exc)
        return _row_failure(source, row, label, exc.problem, field_path(exc.loc))
    spec = base.model_copy(update=fields)
    return CachedTask(spec, line, (), (source, row.line))


def _task_id(template: Any, values: dict[str, Any]) -> str:
    task_id = _as_text(_render_field("id", template, values))
    _check(check_task_id, task_id, "id")
    return task_id


def _filled(templates: dict[str, Any], values: dict[str, Any], task_id: str) -> dict[str, Any]:
    """The templated fields of one row, checked as TaskSpec would check them."""
    fields = {name: _render_field(name, t, values) for name, t in templates.items() if name != "id"}
    _check(check_input, fields["input"], "input")
    if not isinstance(fields["metadata"], dict):
        raise RowError("metadata must be a mapping", ("metadata",))
    fields["id"] = task_id
    fields["description"] = _as_text(fields["description"])
    return fields


def _render_field(name: str, template: Any, values: dict[str, Any]) -> Any:
    try:
        return render(template, values)
    except RowError as exc:
        raise exc.at(name) from None


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _check(check: Any, value: Any, name: str) -> None:
    try:
        check(value)
    except ValueError as exc:
        raise RowError(str(exc), (name,)) from None


def _row_failure(
    source: Path, row: Row, label: str, problem: str, field: str | None
) -> LoadFailure:
    hint = ROW_HINT if "no field" in problem else None
    error = TaskFileError(source, problem, line=row.line, field=field or None, hint=hint)
    return LoadFailure(source, label, row.line, [error])


def one_failure_per_problem(results: list[T | LoadFailure]) -> list[T | LoadFailure]:
    """Rows whose shared settings fail alike (a grader that does not suit them) are one load
    error naming the rows, not one identical error per row."""
    groups: dict[tuple[Any, ...], list[LoadFailure]] = {}
    for failure in results:
        if isinstance(failure, LoadFailure) and failure.row is not None:
            groups.setdefault(_problems(failure), []).append(failure)
    out: list[T | LoadFailure] = []
    for result in results:
        if not isinstance(result, LoadFailure) or result.row is None:
            out.append(result)
            continue
        group = groups[_problems(result)]
        if group[0] is not result:
            continue
        source = display_path(result.row[0])
        if len(group) == 1:
            where = f"for the row at {source}:{result.row[1]}"
        else:
            lines = line_list([f.row[1] for f in group if f.row])
            where = f"for {len(group)} rows of {source}: {lines}"
        errors = [_for_rows(e, where) for e in result.errors]
        out.append(LoadFailure(result.path, result.label, result.line, errors))
    return out


def _problems(failure: LoadFailure) -> tuple[Any, ...]:
    return tuple((e.line, e.field, e.problem, e.hint) for e in failure.errors)


def _for_rows(error: TaskFileError, where: str) -> TaskFileError:
    problem = f"{error.problem} ({where})"
    return TaskFileError(error.path, problem, line=error.line, field=error.field, hint=error.hint)
