"""A dataset: its manifest, its task files (each read once), the workspace templates they name,
and its tasks with versioned content digests."""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..core.errors import (
    GraderSpecError,
    TaskFileError,
    TaskFileErrors,
    TemplateError,
    did_you_mean,
)
from ..core.model import (
    ArtifactsSpec,
    Budget,
    GraderSpec,
    Manifest,
    RetrySpec,
    SandboxSpec,
    TaskSpec,
    effective_budget,
)
from ..core.text import excerpt, json_encoder
from ..core.values import cached
from .discovery import MANIFEST_NAME, TASK_SUFFIXES, find_dataset_root
from .provider_refs import manifest_provider_problems, task_provider_problems
from .sourced import one_failure_per_problem
from .speccache import CachedTask, SpecCache
from .taskfile import FileRead, LoadFailure, read_task_file, read_with_node
from .templates import Entry, template_digest, template_entries
from .yamlfile import field_path, line_of, parse, validation_errors

DIGEST_VERSION = "agenteval.digest/1"
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "venv", "build", "dist", "CVS"})


# A grader factory: (spec, task) -> grader object. Raises GraderSpecError for bad specs.
MakeGrader = Callable[[GraderSpec, TaskSpec], Any]


@dataclass(frozen=True)
class Dataset:
    """A dataset root folder and its manifest; reads each of its task files once."""

    root: Path
    manifest: Manifest
    manifest_path: Path | None
    cache: SpecCache | None = field(default=None, compare=False, repr=False)
    """Where validated specs of unchanged files are kept between sessions."""
    sandbox_allow: frozenset[str] | None = field(default=None, compare=False, repr=False)
    """What its sandboxes may lift of the default isolation (the run's
    `--agenteval-sandbox-allow`): a sandbox asking for more is a load error. None: not
    checked (read only to know its templates)."""
    kinds: Mapping[str, type[BaseModel]] | None = field(default=None, compare=False, repr=False)
    """The options model of each sandbox kind the run knows, by name (`docker` and the
    plugins'): a sandbox of another kind, or with bad options, is a load error. None: not
    checked."""
    templates_only: bool = field(default=False, compare=False, repr=False)
    """Read only to know its templates (a session that does not evaluate it): a task file
    without the word `workspace` names none, and is not parsed."""
    _reads: dict[Path, FileRead] = field(default_factory=dict, compare=False, repr=False)
    _loaded: dict[Path, list[TaskDef | LoadFailure]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _walked: list[tuple[list[Path], frozenset[Path]]] = field(
        default_factory=list, compare=False, repr=False
    )
    _templates: dict[Path, list[Entry] | TemplateError] = field(
        default_factory=dict, compare=False, repr=False
    )
    _builds: dict[Path, BuildFolder] = field(default_factory=dict, compare=False, repr=False)

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

    def read(self, path: Path, cache: SpecCache | None = None) -> FileRead:
        """The validated specs of the task file `path`, read once per session."""
        found = self._reads.get(path)
        if found is None:
            found = read_task_file(path, self.id_for(path), cache or self.cache, self.root)
            self._reads[path] = found
        return found

    def forget_reads(self) -> None:
        """Drop what was read (once collected, tasks hold their own specs)."""
        self._reads.clear()
        self._loaded.clear()

    def is_workspace_dir(self, path: Path) -> bool:
        """Whether `path` is (inside) a workspace template: never collected, conftest unused.

        Templates are the folders the dataset's tasks name in `workspace:` (valid tasks or not).
        """
        _, templates = self._walk()
        return any(p in templates for p in (path, *path.parents) if p != self.root)

    def task_files(self) -> Iterator[Path]:
        """Task files in collection order (sorted, skipping the folders pytest skips)."""
        files, _ = self._walk()
        yield from files

    def _walk(self) -> tuple[list[Path], frozenset[Path]]:
        """Read every task file once, top down; the folders named as workspaces are pruned.

        A template named from elsewhere (`../ws`) after the walk went into it is pruned after.
        """
        if not self._walked:
            files: list[Path] = []
            templates: set[Path] = set()
            for dirpath, dirnames, filenames in os.walk(self.root):
                here = Path(dirpath)
                for name in sorted(filenames):
                    path = here / name
                    if self.is_task_file(path):
                        files.append(path)
                        templates.update(self._named_templates(path))
                dirnames[:] = sorted(
                    d for d in dirnames if not _skipped_dir(d) and here / d not in templates
                )
            found = frozenset(templates)
            inside = (
                [f for f in files if not any(p in found for p in f.parents)] if found else files
            )
            self._walked.append((inside, found))
        return self._walked[0]

    def _named_templates(self, path: Path) -> set[Path]:
        """The folders `path`'s tasks name as workspaces, as written and resolved."""
        if self.templates_only and not _mentions_workspace(path):
            return set()
        named = set()
        for value in self.read(path).workspaces:
            folder = path.parent / value
            with contextlib.suppress(OSError, ValueError, RuntimeError):  # not a usable path
                for form in (Path(os.path.normpath(folder)), folder.resolve()):
                    if not path.is_relative_to(form):  # never hides its own task file
                        named.add(form)
        return named

    def template(self, folder: Path) -> list[Entry]:
        """The checked contents of the workspace template `folder`; raises TemplateError."""
        found = self._templates.get(folder)
        if found is None:
            try:
                found = template_entries(folder)
            except TemplateError as exc:
                found = exc
            except OSError as exc:
                found = TemplateError(
                    f"cannot read the workspace folder: {exc.strerror} ({exc.filename})",
                    hint="make the folder and everything in it readable",
                )
            self._templates[folder] = found
        if isinstance(found, TemplateError):
            raise found
        return found

    def build_folder(self, folder: Path) -> BuildFolder:
        """The sandbox build folder `folder` (resolved) with its content digest, made once
        for all the tasks that name it."""
        found = self._builds.get(folder)
        if found is None:
            try:
                found = BuildFolder(
                    folder, template_digest(template_entries(folder, "build folder"))
                )
            except TemplateError as exc:
                found = BuildFolder(folder, None, exc.problem)
            except OSError as exc:
                found = BuildFolder(folder, None, f"{exc.strerror} ({exc.filename})")
            self._builds[folder] = found
        return found


@dataclass(frozen=True, slots=True)
class BuildFolder:
    """A sandbox's `build:` folder: where it is and its content digest (the image's tag), or
    why it cannot be read (then there is no tag, and its attempts are `build_failed`)."""

    folder: Path
    digest: str | None
    problem: str | None = None


def _mentions_workspace(path: Path) -> bool:
    try:
        return b"workspace" in path.read_bytes()
    except OSError:
        return False


def _skipped_dir(name: str) -> bool:
    return name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg")


def load_dataset(
    path: Path,
    cache: SpecCache | None = None,
    sandbox_allow: frozenset[str] | None = None,
    kinds: Mapping[str, type[BaseModel]] | None = None,
) -> Dataset:
    """The dataset `path` is, or lies in: its manifest is the nearest `agenteval.yaml` at or
    above `path`, as pytest finds its rootdir, so a part of a dataset keeps its ids and agent.

    Without a manifest, the folder itself (a file's folder) is a dataset named after it. With a
    cache, unchanged task files are not parsed again. Its sandboxes may lift what
    `sandbox_allow` says of the default isolation, and be of the `kinds` named (None: not
    checked).
    """
    path = path.resolve()
    if not path.exists():
        raise TaskFileError(
            path, "not found", hint="pass a dataset folder, a folder inside one, or a task file"
        )
    root = find_dataset_root(path)
    if root is None:
        folder = path if path.is_dir() else path.parent
        manifest = Manifest(name=_safe_name(folder.name))
        return Dataset(folder, manifest, None, cache, sandbox_allow, kinds)
    manifest_path = root / MANIFEST_NAME
    node, data = parse(manifest_path)
    if not isinstance(data, dict):
        raise TaskFileError(
            manifest_path, "the manifest must be a mapping (name, version, agent, ...)"
        )
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        errors = validation_errors(exc, manifest_path, node, (), Manifest)
        raise TaskFileErrors(errors) from None
    if manifest.agent is not None and manifest.variants:
        raise TaskFileError(
            manifest_path,
            "`agent:` and `variants:` both set: which agent runs the tasks is unclear",
            line=line_of(node, ("agent",)),
            field="agent",
            hint="put the agent in `variants:` (`NAME: AGENT-SPEC`), or drop `variants:`",
        )
    errors = manifest_provider_problems(manifest, manifest_path, node)
    default = manifest.defaults.sandbox
    if default is not None:
        errors += sandbox_problems(
            default, root, sandbox_allow, manifest_path, node, ("defaults",), kinds
        )
    if errors:
        raise TaskFileErrors(errors)
    return Dataset(root, manifest, manifest_path, cache, sandbox_allow, kinds)


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
    row: tuple[Path, int] | None = None
    """(source file, line) of the row this task was made from, for a task file with `source:`."""

    @cached
    def where(self) -> str:
        """Where the task is defined: its file, or its row's `file:line`."""
        return str(self.path) if self.row is None else f"{self.row[0]}:{self.row[1]}"

    @cached  # the spec is frozen: asked for about ten times an attempt
    def id(self) -> str:
        assert self.spec.id is not None
        return self.spec.id

    @cached
    def timeout(self) -> float | None:
        return self.spec.timeout or self.dataset.manifest.defaults.timeout

    @cached
    def budget(self) -> Budget | None:
        """What each attempt may use: the task's limits over the manifest's defaults."""
        return effective_budget(self.spec.budget, self.dataset.manifest.defaults.budget)

    @cached
    def retry(self) -> RetrySpec | None:
        """Which errors run the attempt again: the task's `retry:`, else the manifest's."""
        return self.spec.retry or self.dataset.manifest.defaults.retry

    @cached
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
                # the budget judges usage as graders judge the output: a change regrades
                **({"budget": self.budget.model_dump()} if self.budget else {}),
                "tags": spec.tags,
                "description": spec.description,
            }
        )

    @cached
    def run_digest(self) -> str:
        """Digest of what the agent sees; equal digests mean a regrade can reuse the output."""
        spec = self.spec
        return _digest(
            {
                "id": spec.id,
                "input": spec.input,
                "metadata": spec.metadata,
                "agent": spec.agent.model_dump(mode="json", exclude={"limits"})
                if spec.agent
                else None,
                "workspace": self._workspace_digest,
                # only when set, so the digests of tasks written before it stay the same
                # what it captures (`environment:`) is not what the agent sees
                **(
                    {
                        "sandbox": self.sandbox.model_dump(
                            mode="json", exclude={"environment": True, "docker": {"hosts"}}
                        )
                    }
                    if self.sandbox
                    else {}
                ),
                **(
                    {"sandbox_build": self.sandbox_build.digest or "unreadable"}
                    if self.sandbox_build
                    else {}
                ),
            }
        )

    @cached
    def part_digests(self) -> dict[str, str]:
        """A short digest of each part of the task that `digest` and `run_digest` cover (the
        parts that are set), kept in its records: a resume that finds the task changed can
        say which parts changed (`--agenteval-plan`)."""
        spec, sandbox = self.spec, self.sandbox
        parts: dict[str, Any] = {
            "input": spec.input,
            "metadata": spec.metadata,
            "agent": spec.agent.model_dump(mode="json", exclude={"limits"}) if spec.agent else None,
            "workspace": self._workspace_digest,
            "sandbox": [
                sandbox.model_dump(mode="json", exclude={"environment": True, "docker": {"hosts"}}),
                (self.sandbox_build.digest or "unreadable") if self.sandbox_build else None,
            ]
            if sandbox
            else None,
            "expected": spec.expected,
            "graders": [[[g.type, g.options] for g in self.grader_specs], spec.grader_timeout],
            "timeout": self.timeout,
            "budget": self.budget.model_dump() if self.budget else None,
            "tags": spec.tags,
            "description": spec.description,
        }
        return {name: _digest(value)[:8] for name, value in parts.items() if value is not None}

    @cached
    def sandbox_build(self) -> BuildFolder | None:
        """The folder a sandbox's `build:` image is made from, and its content digest (the
        image's tag): a changed Dockerfile is a changed task. None without a `build:`."""
        docker = self.sandbox.docker if self.sandbox else None
        build = docker.build if docker else None
        if build is None:
            return None
        return self.dataset.build_folder((self.dataset.root / build).resolve())

    @cached
    def sandbox(self) -> SandboxSpec | None:
        """The task's Docker sandbox, else the manifest's default, else None (the host)."""
        return self.spec.sandbox or self.dataset.manifest.defaults.sandbox

    @cached
    def artifacts(self) -> ArtifactsSpec | None:
        """What the task keeps of its attempts' changed files: its own `artifacts:`, else the
        manifest's, else the default for a sandbox; None (nothing kept) for a local task."""
        chosen = self.spec.artifacts or self.dataset.manifest.defaults.artifacts
        if chosen is None and self.sandbox is not None:
            return ArtifactsSpec()
        return chosen

    @cached
    def regradable(self) -> bool:
        """Whether a recorded output can be judged again without the agent's workspace."""
        return (
            self.workspace_dir is None
            and self.sandbox is None
            and all(g.type != "command" for g in self.grader_specs)
        )

    @cached
    def workspace_dir(self) -> Path | None:
        return (self.path.parent / self.spec.workspace).resolve() if self.spec.workspace else None

    @cached
    def _workspace_digest(self) -> str | None:
        folder = self.workspace_dir
        return None if folder is None else template_digest(self.dataset.template(folder))


_DIGEST_JSON = json_encoder(sort_keys=True, default=str, acyclic=True)
"""`json.dumps` with these options builds an encoder per call; digests are made per task (a
task's values hold no cycle: the YAML loader refuses recursive aliases)."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_shared_digest = lru_cache(maxsize=4096)(_sha)
"""Most tasks share most of their parts (graders, tags, metadata, timeout): a short part's
digest is worked out once."""


def _digest(value: Any) -> str:
    text = _DIGEST_JSON([DIGEST_VERSION, value])
    return _shared_digest(text) if len(text) < 256 else _sha(text)


def load_task_file(
    path: Path,
    dataset: Dataset,
    make_grader: MakeGrader | None = None,
    cache: SpecCache | None = None,
) -> list[TaskDef | LoadFailure]:
    """Load every task of one file; problems become LoadFailures, never exceptions.

    The file is read once per session (through the cache: an unchanged file is not parsed);
    with graders, its tasks are built once too (collection, then the run's planning)."""
    loaded = dataset._loaded.get(path) if make_grader is not None else None
    if loaded is None:
        loaded = _load(path, dataset, make_grader, cache)
        if make_grader is not None:
            dataset._loaded[path] = loaded
    return loaded


def _load(
    path: Path, dataset: Dataset, make_grader: MakeGrader | None, cache: SpecCache | None
) -> list[TaskDef | LoadFailure]:
    read = dataset.read(path, cache)
    results = [_finish(path, dataset, t, None, make_grader) for t in read.tasks]
    if all(r is t or isinstance(r, TaskDef) for r, t in zip(results, read.tasks, strict=True)):
        return results
    # A valid spec failed its graders or workspace check: parse again for the error's lines.
    again, node = read_with_node(path, dataset.id_for(path), dataset.root)
    return one_failure_per_problem(
        [_finish(path, dataset, t, node, make_grader) for t in again.tasks]
    )


def _finish(
    path: Path,
    dataset: Dataset,
    read: CachedTask | LoadFailure,
    node: Any,
    make_grader: MakeGrader | None,
) -> TaskDef | LoadFailure:
    """A validated spec becomes a TaskDef: manifest defaults, workspace check, graders built."""
    if isinstance(read, LoadFailure):
        return _with_grader_problems(path, dataset, read, node, make_grader)
    spec, line, loc = read.spec, read.line, read.loc
    task = TaskDef(spec, dataset, path, line, loc, row=read.row)
    errors = _check_workspace(task, node, loc) + _check_sandbox(task, node, loc)
    errors += task_provider_problems(spec, dataset.manifest.providers, path, node, loc)
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
    specs = with_judge_defaults(specs, dataset.manifest)
    object.__setattr__(task, "grader_specs", tuple(specs))
    graders, grader_errors = _build_graders(task, specs, node, loc, make_grader)
    errors += grader_errors
    if errors:
        assert spec.id is not None
        # A row's (shared settings that do not suit its values) is named once all are known
        return LoadFailure(path, spec.id, line, errors, row=task.row)
    object.__setattr__(task, "graders", tuple(graders))
    return task


def _with_grader_problems(
    path: Path, dataset: Dataset, failure: LoadFailure, node: Any, make_grader: MakeGrader | None
) -> LoadFailure:
    """A task that failed validation, with its graders' problems too (built from what was
    valid), so every problem of the task is reported at once, in line order."""
    partial = failure.partial
    if partial is None or make_grader is None:
        return failure
    task = TaskDef(partial.spec, dataset, path, partial.line, partial.loc)
    specs = partial.spec.graders or dataset.manifest.defaults.graders or []
    specs = with_judge_defaults(specs, dataset.manifest)
    _, errors = _build_graders(task, specs, node, partial.loc, make_grader)
    if not errors:
        return failure
    errors = sorted([*failure.errors, *errors], key=lambda e: e.line or 0)
    return LoadFailure(path, failure.label, failure.line, errors)


def with_judge_defaults(specs: list[GraderSpec], manifest: Manifest) -> list[GraderSpec]:
    """`judge` graders with the manifest's `judge:` block under their own options, so the
    effective settings (model, threshold...) are part of the task's digest: a change regrades."""
    if manifest.judge is None or all(g.type != "judge" for g in specs):
        return specs
    defaults = manifest.judge.model_dump(exclude_unset=True)
    return [
        GraderSpec(type="judge", options={**defaults, **_judge_options(g.options)})
        if g.type == "judge"
        else g
        for g in specs
    ]


def _judge_options(options: dict[str, Any]) -> dict[str, Any]:
    return {"rubric": options["_primary"]} if "_primary" in options else options


def _check_workspace(task: TaskDef, node: Any, loc: tuple[Any, ...]) -> list[TaskFileError]:
    if task.spec.workspace is None:
        return []
    try:
        problem, hint = _workspace_problem(task)
    except (OSError, ValueError, RuntimeError) as exc:  # a NUL byte, too long, a symlink loop
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problem = f"workspace {excerpt(task.spec.workspace, 80)!r} is not a usable path: {reason}"
        hint = "name a folder inside the dataset, relative to the task file"
    if problem is None:
        return []
    where = (*loc, "workspace")
    return [
        TaskFileError(
            task.path, problem, line=line_of(node, where), field=field_path(where), hint=hint
        )
    ]


def _check_sandbox(task: TaskDef, node: Any, loc: tuple[Any, ...]) -> list[TaskFileError]:
    """The task's own `sandbox:` against what the dataset may ask for (the manifest's
    defaults are checked when it is read)."""
    sandbox, dataset = task.spec.sandbox, task.dataset
    if sandbox is None:
        return []
    return sandbox_problems(
        sandbox, dataset.root, dataset.sandbox_allow, task.path, node, loc, dataset.kinds
    )


def sandbox_problems(
    sandbox: SandboxSpec,
    root: Path,
    allowed: frozenset[str] | None,
    path: Path,
    node: Any,
    loc: tuple[Any, ...],
    kinds: Mapping[str, type[BaseModel]] | None = None,
) -> list[TaskFileError]:
    """What a sandbox asks for that a dataset may not: a kind the run does not know or bad
    options of its kind (`kinds`: None, not checked), a `build:` folder outside it, and
    isolation lifted that the run's user did not allow (None: not checked), located at
    their lines."""
    if kinds is not None:
        wrong = kind_problems(sandbox, kinds, path, node, (*loc, "sandbox"))
        if wrong:
            return wrong
    found = []
    build = build_problem(sandbox, root)
    if build is not None:
        found.append(((*loc, "sandbox", "docker", "build"), *build))
    for name, allowance in sandbox.lifts():
        if allowed is not None and allowance not in allowed:
            value = getattr(sandbox, name)
            found.append(
                (
                    (*loc, "sandbox", name),
                    f"`{name}: {value}` lifts the sandbox's isolation, which only the run may "
                    "allow (a task file or manifest cannot)",
                    f"if you trust this dataset, run with `--agenteval-sandbox-allow {allowance}` "
                    f"(ini `agenteval_sandbox_allow = {allowance}`), or drop `{name}:`",
                )
            )
    return [
        TaskFileError(path, problem, line=line_of(node, where), field=field_path(where), hint=hint)
        for where, problem, hint in found
    ]


def kind_problems(
    sandbox: SandboxSpec,
    kinds: Mapping[str, type[BaseModel]],
    path: Path,
    node: Any,
    loc: tuple[Any, ...],
) -> list[TaskFileError]:
    """A sandbox of a kind no plugin registered, or whose options its kind's model refuses,
    located at the kind's key (an option's own line when pydantic names one)."""
    name = sandbox.kind
    where = (*loc, name)
    model = kinds.get(name)
    if model is None:
        known = ", ".join(sorted(kinds))
        return [
            TaskFileError(
                path,
                f"unknown sandbox kind {name!r} (known: {known})",
                line=line_of(node, where),
                field=field_path(where),
                hint=did_you_mean(name, list(kinds))
                or "a plugin or conftest.py registers a kind through the hook "
                "`pytest_agenteval_environment_kinds` (see docs/guides/sandbox-kinds.md)",
            )
        ]
    if sandbox.plugin is None:
        return []  # docker's options were validated with the task
    try:
        model.model_validate(sandbox.plugin.options)
    except ValidationError as exc:
        return validation_errors(exc, path, node, where, model)
    return []


def build_problem(sandbox: SandboxSpec, root: Path) -> tuple[str, str] | None:
    """Why a sandbox's `build:` folder cannot be used (outside the dataset), with a hint."""
    build = sandbox.docker.build if sandbox.docker is not None else None
    if build is None:
        return None
    try:
        folder = (root / build).resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        return f"build folder {excerpt(build, 80)!r} is not a usable path: {exc}", BUILD_HINT
    if folder.is_relative_to(root):
        return None
    return (
        f"build folder {excerpt(build, 80)!r} is outside the dataset (it is {folder})",
        BUILD_HINT,
    )


BUILD_HINT = "a build folder (holding a Dockerfile) lies inside the dataset, relative to its root"


def _workspace_problem(task: TaskDef) -> tuple[str | None, str | None]:
    """Why the task's workspace template cannot be used, with a hint; or Nones."""
    folder = task.workspace_dir
    assert folder is not None
    root = task.dataset.root
    name = excerpt(task.spec.workspace or "", 80)
    if not folder.is_relative_to(root):
        return (
            f"workspace folder {name!r} is outside the dataset (it is {folder})",
            f"a workspace is a folder inside the dataset ({root}), relative to the task file",
        )
    if task.path.parent.resolve().is_relative_to(folder):
        return (
            f"workspace folder {name!r} holds this task file",
            "templates are never collected: give the workspace a folder of its own",
        )
    if not folder.is_dir():
        return (
            f"workspace folder {name!r} not found (looked for {folder})",
            "the path is relative to the task file",
        )
    try:
        task.dataset.template(folder)
    except TemplateError as exc:
        return exc.problem, exc.hint
    return None, None


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
            for error in (exc, *exc.others):
                field_name = field_path(where) + (f".{error.option}" if error.option else "")
                errors.append(
                    TaskFileError(path, error.problem, line=line, field=field_name, hint=error.hint)
                )
    return graders, errors
