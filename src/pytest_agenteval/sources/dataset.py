"""Find, parse and validate task files; every task gets versioned content digests."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import GraderSpecError, TaskFileError
from ..core.model import GraderSpec, Manifest, TaskSpec, check_task_id
from .discovery import MANIFEST_NAME, TASK_SUFFIXES, find_dataset_root
from .speccache import SpecCache
from .yamlfile import field_path, line_of, parse, validation_errors

DIGEST_VERSION = "agenteval.digest/1"
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "venv", "build", "dist", "CVS"})


# A grader factory: (spec, task) -> grader object. Raises GraderSpecError for bad specs.
MakeGrader = Callable[[GraderSpec, TaskSpec], Any]


_WORKSPACE_LINE = re.compile(
    rb"""(?:^|[\s{,-])["']?workspace["']?[ \t]*:[ \t]*["']?([^"'\s#,}\]]+)"""
)


@dataclass(frozen=True)
class Dataset:
    """A dataset root folder and its manifest."""

    root: Path
    manifest: Manifest
    manifest_path: Path | None
    _referenced: dict[Path, frozenset[Path]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def name(self) -> str:
        return self.manifest.name

    def is_task_file(self, path: Path) -> bool:
        """Whether pytest should collect `path` (absolute, below root) as a task file."""
        if path.suffix not in TASK_SUFFIXES or path == self.manifest_path:
            return False
        patterns = self.manifest.tasks
        if patterns is None:
            return True
        rel = path.relative_to(self.root).as_posix()
        return any(fnmatch.fnmatchcase(rel, p) for p in patterns)

    def id_for(self, path: Path) -> str:
        """The default task id of a file: its path below the root, without extension."""
        rel = str(path)[len(str(self.root)) + 1 :]
        return rel.rpartition(".")[0].replace(os.sep, "/")

    def is_workspace_dir(self, path: Path) -> bool:
        """Whether `path` is a task's workspace template: never collected, its conftest unused.

        A template is named by a `workspace:` line of a task file in one of its parent folders;
        only folders that have subfolders are scanned, once each.
        """
        for parent in path.parents:
            if path in self._workspaces_named_in(parent):
                return True
            if parent == self.root:
                break
        return False

    def _workspaces_named_in(self, folder: Path) -> frozenset[Path]:
        found = self._referenced.get(folder)
        if found is None:
            names: set[Path] = set()
            for file in folder.iterdir():
                if file.suffix in TASK_SUFFIXES and file.is_file():
                    for match in _WORKSPACE_LINE.finditer(file.read_bytes()):
                        names.add((folder / match.group(1).decode(errors="replace")).resolve())
            found = self._referenced[folder] = frozenset(names)
        return found

    def task_files(self) -> Iterator[Path]:
        """Task files in collection order (sorted, skipping the folders pytest skips)."""
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d for d in dirnames if not _skipped_dir(d) and not self.is_workspace_dir(here / d)
            )
            for name in sorted(filenames):
                path = Path(dirpath, name)
                if self.is_task_file(path):
                    yield path


def _skipped_dir(name: str) -> bool:
    return name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg")


def load_dataset(path: Path) -> Dataset:
    """The dataset `path` is, or lies in: its manifest is the nearest `agenteval.yaml` at or
    above `path`, as pytest finds its rootdir, so a part of a dataset keeps its ids and agent.

    Without a manifest, the folder itself (a file's folder) is a dataset named after it.
    """
    path = path.resolve()
    if not path.exists():
        raise TaskFileError(
            path, "not found", hint="pass a dataset folder, a folder inside one, or a task file"
        )
    root = find_dataset_root(path)
    if root is None:
        folder = path if path.is_dir() else path.parent
        return Dataset(folder, Manifest(name=_safe_name(folder.name)), None)
    manifest_path = root / MANIFEST_NAME
    node, data = parse(manifest_path)
    if not isinstance(data, dict):
        raise TaskFileError(
            manifest_path, "the manifest must be a mapping (name, version, agent, ...)"
        )
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise validation_errors(exc, manifest_path, node, (), Manifest)[0] from None
    return Dataset(root, manifest, manifest_path)


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in name) or "dataset"


def find_task(
    dataset: Dataset, folder: Path, task_id: str, cache: SpecCache | None = None
) -> Path | None:
    """The task file below `folder` that defines `task_id`, so `ds::<task id>` can name a task.

    The file a default id names is tried first; other ids need a search of the dataset.
    """
    guesses = (dataset.root / f"{task_id}{suffix}" for suffix in TASK_SUFFIXES)
    for path in (*(g for g in guesses if g.is_file()), *dataset.task_files()):
        if not (path.is_relative_to(folder) and dataset.is_task_file(path)):
            continue
        for loaded in load_task_file(path, dataset, cache=cache):
            if (loaded.id if isinstance(loaded, TaskDef) else loaded.label) == task_id:
                return path
    return None


@dataclass(frozen=True, eq=False)
class TaskDef:
    """A validated task with its source location and effective settings."""

    spec: TaskSpec
    dataset: Dataset
    path: Path
    line: int
    """1-based line where the task starts."""
    loc: tuple[Any, ...] = ()
    """Where in the file the task is: () for a one-task file, ("tasks", i) in a list."""
    graders: tuple[Any, ...] = ()
    grader_specs: tuple[GraderSpec, ...] = ()

    @property
    def id(self) -> str:
        assert self.spec.id is not None
        return self.spec.id

    @property
    def timeout(self) -> float | None:
        return self.spec.timeout or self.dataset.manifest.defaults.timeout

    @cached_property
    def digest(self) -> str:
        """Content digest of the whole effective task: what the agent sees, plus grading."""
        spec = self.spec
        return _digest(
            {
                "run": self.run_digest,
                "expected": spec.expected,
                "graders": [[g.type, g.options] for g in self.grader_specs],
                "timeout": self.timeout,
                # only when set, so the digests of tasks written before it stay the same
                **({"grader_timeout": spec.grader_timeout} if spec.grader_timeout else {}),
                "tags": spec.tags,
                "description": spec.description,
            }
        )

    @cached_property
    def run_digest(self) -> str:
        """Digest of what the agent sees; equal digests mean a regrade can reuse the output."""
        spec = self.spec
        return _digest(
            {
                "id": spec.id,
                "input": spec.input,
                "metadata": spec.metadata,
                "agent": spec.agent.model_dump(mode="json") if spec.agent else None,
                "workspace": self._workspace_digest,
            }
        )

    @property
    def regradable(self) -> bool:
        """Whether a recorded output can be judged again without the agent's workspace."""
        return self.workspace_dir is None and all(g.type != "command" for g in self.grader_specs)

    @cached_property
    def workspace_dir(self) -> Path | None:
        return (self.path.parent / self.spec.workspace).resolve() if self.spec.workspace else None

    @cached_property
    def _workspace_digest(self) -> str | None:
        folder = self.workspace_dir
        if folder is None:
            return None
        sha = hashlib.sha256()
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            sha.update(file.relative_to(folder).as_posix().encode() + b"\0")
            sha.update(file.read_bytes() + b"\0")
        return sha.hexdigest()[:16]


def _digest(value: Any) -> str:
    text = json.dumps([DIGEST_VERSION, value], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LoadFailure:
    """A task file, or one task of a `tasks:` list, that could not be loaded."""

    path: Path
    label: str
    """Task id when known, else the file's id-like path (and list position)."""
    line: int
    errors: list[TaskFileError] = field(default_factory=list)

    def render(self) -> str:
        return "\n".join(e.render() for e in self.errors)


def load_task_file(
    path: Path,
    dataset: Dataset,
    make_grader: MakeGrader | None = None,
    cache: SpecCache | None = None,
) -> list[TaskDef | LoadFailure]:
    """Load every task of one file; problems become LoadFailures, never exceptions.

    With a cache, an unchanged file's validated specs are reused instead of parsing it again.
    """
    cached = cache.get(path) if cache is not None else None
    if cached is not None:
        results = [_finish(path, dataset, *entry, None, make_grader) for entry in cached]
        if all(isinstance(r, TaskDef) for r in results):
            return results
        return load_task_file(path, dataset, make_grader)  # again, for the error's line numbers
    results = _load_file(path, dataset, make_grader)
    if cache is not None and all(isinstance(r, TaskDef) for r in results):
        cache.put(path, [(t.spec, t.line, t.loc) for t in results])  # type: ignore[union-attr]
    return results


def _load_file(
    path: Path, dataset: Dataset, make_grader: MakeGrader | None
) -> list[TaskDef | LoadFailure]:
    default_id = dataset.id_for(path)
    try:
        node, data = parse(path)
    except TaskFileError as exc:
        return [LoadFailure(path, default_id, exc.line or 1, [exc])]
    if isinstance(data, dict) and "tasks" in data:
        return _load_list(path, dataset, node, data, make_grader)
    if not isinstance(data, dict):
        problem = "a task file holds one task (a mapping) or a `tasks:` list of tasks"
        return [LoadFailure(path, default_id, 1, [TaskFileError(path, problem, line=1)])]
    return [_load_task(path, dataset, node, data, (), default_id, make_grader)]


def _load_list(
    path: Path, dataset: Dataset, node: Any, data: dict[str, Any], make_grader: MakeGrader | None
) -> list[TaskDef | LoadFailure]:
    stem = dataset.id_for(path)
    tasks = data["tasks"]
    extra = sorted(set(data) - {"tasks"})
    if extra or not isinstance(tasks, list):
        field_name = extra[0] if extra else "tasks"
        problem = f"unknown field {field_name!r}" if extra else "`tasks` must be a list of tasks"
        err = TaskFileError(path, problem, line=line_of(node, (field_name,)), field=field_name)
        return [LoadFailure(path, stem, err.line or 1, [err])]
    results: list[TaskDef | LoadFailure] = []
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
        results.append(_load_task(path, dataset, node, raw, loc, f"{stem}.{index}", make_grader))
    return results


def _load_task(
    path: Path,
    dataset: Dataset,
    node: Any,
    raw: Any,
    loc: tuple[Any, ...],
    default_id: str,
    make_grader: MakeGrader | None,
) -> TaskDef | LoadFailure:
    line = line_of(node, loc) or 1
    label = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
    label = label or default_id
    if not isinstance(raw, dict):
        err = TaskFileError(path, "a task must be a mapping", line=line, field=field_path(loc))
        return LoadFailure(path, label, line, [err])
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as exc:
        return LoadFailure(path, label, line, validation_errors(exc, path, node, loc, TaskSpec))
    if spec.id is None:
        try:
            spec = spec.model_copy(update={"id": _checked_default_id(default_id)})
        except ValueError as exc:
            hint = "add an `id:` field, or rename the file"
            return LoadFailure(
                path, label, line, [TaskFileError(path, str(exc), line=line, hint=hint)]
            )
    return _finish(path, dataset, spec, line, loc, node, make_grader)


def _finish(
    path: Path,
    dataset: Dataset,
    spec: TaskSpec,
    line: int,
    loc: tuple[Any, ...],
    node: Any,
    make_grader: MakeGrader | None,
) -> TaskDef | LoadFailure:
    """A validated spec becomes a TaskDef: manifest defaults, workspace check, graders built."""
    task = TaskDef(spec, dataset, path, line, loc)
    errors = _check_workspace(task, node, loc)
    specs = spec.graders or dataset.manifest.defaults.graders
    if specs is None:
        if spec.expected is None:
            errors.append(
                TaskFileError(
                    path,
                    "no graders: the task names none and has no `expected` answer",
                    line=line,
                    field=field_path(loc) or None,
                    hint="add `graders:` (e.g. `- contains: [...]`), or `expected:` for `equals`",
                )
            )
        specs = [GraderSpec(type="equals")]
    object.__setattr__(task, "grader_specs", tuple(specs))
    graders, grader_errors = _build_graders(task, specs, node, loc, make_grader)
    errors += grader_errors
    if errors:
        assert spec.id is not None
        return LoadFailure(path, spec.id, line, errors)
    object.__setattr__(task, "graders", tuple(graders))
    return task


def _checked_default_id(default_id: str) -> str:
    check_task_id(default_id)
    return default_id


def _check_workspace(task: TaskDef, node: Any, loc: tuple[Any, ...]) -> list[TaskFileError]:
    folder = task.workspace_dir
    if folder is None or folder.is_dir():
        return []
    where = (*loc, "workspace")
    return [
        TaskFileError(
            task.path,
            f"workspace folder {task.spec.workspace!r} not found (looked for {folder})",
            line=line_of(node, where),
            field=field_path(where),
            hint="the path is relative to the task file",
        )
    ]


def _build_graders(
    task: TaskDef,
    specs: list[GraderSpec],
    node: Any,
    loc: tuple[Any, ...],
    make_grader: MakeGrader | None,
) -> tuple[list[Any], list[TaskFileError]]:
    if make_grader is None:
        return [], []
    from_task = task.spec.graders is not None
    graders, errors = [], []
    for index, gspec in enumerate(specs):
        try:
            graders.append(make_grader(gspec, task.spec))
        except GraderSpecError as exc:
            where = (*loc, "graders", index) if from_task else ("defaults", "graders", index)
            path = task.path if from_task else task.dataset.manifest_path or task.path
            line = line_of(node, where) if from_task else None
            field_name = field_path(where) + (f".{exc.option}" if exc.option else "")
            errors.append(
                TaskFileError(path, exc.problem, line=line, field=field_name, hint=exc.hint)
            )
    return graders, errors
