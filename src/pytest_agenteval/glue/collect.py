"""pytest glue for collection: dataset folders and task files become attempt items."""

from __future__ import annotations

import atexit
import gc
import inspect
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from ..core.errors import TaskFileError, display_path
from ..core.identity import item_name
from ..core.payloads import LoadError
from ..core.shards import Shard
from ..sources.dataset import Dataset, TaskDef, find_task, load_dataset, load_task_file
from ..sources.discovery import (
    TASK_SUFFIXES,
    add_dataset_args,
    is_selected,
    one_pass_roots,
    selected_parts,
)
from ..sources.speccache import SpecCache
from ..sources.taskfile import LoadFailure
from .internals import conftest_paths
from .items import AgentevalItem, AttemptItem
from .runtime import RUNTIME

Parts = dict[Path, tuple[Dataset, tuple[Path, ...] | None]]
"""Each named dataset by root, with the parts of it named (None: all of it)."""


def load_datasets(
    named: dict[Path, str],
    specs: SpecCache | None = None,
    allow: frozenset[str] = frozenset(),
    kinds: Mapping[str, type[BaseModel]] | None = None,
) -> Parts:
    """The datasets the paths are, or lie in; `named` gives the option naming each path;
    their sandboxes may lift what `allow` says (`--agenteval-sandbox-allow`) and be of the
    `kinds` named (their options models by name)."""
    found: dict[Path, tuple[Dataset, list[Path]]] = {}
    by_name: dict[str, Path] = {}
    for path, how in named.items():
        try:
            dataset = load_dataset(path, specs, allow, kinds)
        except TaskFileError as exc:
            raise pytest.UsageError(f"{how}: {exc}" if how else str(exc)) from None
        found.setdefault(dataset.root, (dataset, []))[1].append(path)
        other = by_name.setdefault(dataset.name, dataset.root)
        if other != dataset.root:
            raise pytest.UsageError(
                f"two datasets are named {dataset.name!r}: {other} and {dataset.root}; "
                "give them different `name:`s in agenteval.yaml"
            )
    return {root: (ds, selected_parts(root, paths)) for root, (ds, paths) in found.items()}


def point_collection_at(config: pytest.Config, parts: Parts, specs: SpecCache) -> set[Path]:
    """Make pytest collect the named datasets, keeping the paths and node ids the user named.

    `--agenteval` paths replace pytest's default arguments; ini paths join them; either joins
    explicit arguments unless one covers it or points inside it. Returns the roots that can be
    collected in one pass: selected whole, with no argument pointing below them.
    """
    base = config.invocation_params.dir
    datasets = [dataset for dataset, _ in parts.values()]
    args = [_task_node_id(arg, base, datasets, specs) for arg in config.args]
    named = [p for root, (_, selected) in parts.items() for p in selected or (root,)]
    defaults = config.args_source != pytest.Config.ArgsSource.ARGS
    if defaults and config.getoption("agenteval_datasets"):
        args = []
    config.args[:] = add_dataset_args(args, named, base)
    whole = [root for root, (_, selected) in parts.items() if selected is None]
    return one_pass_roots(whole, config.args, base)


def _task_node_id(arg: str, base: Path, datasets: list[Dataset], specs: SpecCache) -> str:
    """`<folder>::<task id>[attempt-<i>]` names a task of a dataset by its id, wherever its
    file is: it becomes that file's node id (pytest itself refuses `::` after a folder)."""
    where, sep, name = arg.partition("::")
    folder = (base / where).resolve()
    if not sep or "::" in name or not folder.is_dir():
        return arg
    inside = [d for d in datasets if folder.is_relative_to(d.root)]
    if not inside:
        return arg
    dataset = max(inside, key=lambda d: len(d.root.parts))
    task_id = name.partition("[")[0]
    path = find_task(dataset, folder, task_id, specs)
    if path is None:
        raise pytest.UsageError(
            f"not found: {arg}\n(no task {task_id!r} in dataset {dataset.name!r} below {where})"
        )
    return f"{path}::{name}"


class DatasetDir(pytest.Directory):
    """A folder of a dataset whose task files' items are collected straight away.

    pytest's usual walk collects each file as its own collector, with a report and every
    plugin asked about it: that cost more than parsing the file. Here the same hooks still
    decide what is collected, in pytest's order (so `--ignore`, `collect_ignore` and folder
    conftests work as before), subfolders are collected as usual, and TaskFile nodes stay the
    items' parents, so node ids and `-k` names do not change. Only below roots no argument
    points into (pytest matches such arguments against a collector per file), and not with
    --agenteval-strict, where a bad file must fail as its own collector.
    """

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        ihook = self.ihook
        ask = not self._files_never_ignored(ihook)
        dataset = self.config.stash[RUNTIME].dataset_for(self.path)
        assert dataset is not None
        for entry in sorted(os.scandir(self.path), key=lambda e: e.name):
            path = Path(entry.path)
            folder = entry.is_dir()
            if (folder or ask) and ihook.pytest_ignore_collect(
                collection_path=path, config=self.config
            ):
                continue
            if folder:
                collector = ihook.pytest_collect_directory(path=path, parent=self)
                if collector is not None:
                    yield collector
            elif entry.is_file() and dataset.is_task_file(path):
                yield from TaskFile.from_parent(self, path=path).collect()

    def _files_never_ignored(self, ihook: Any) -> bool:
        """Whether `pytest_ignore_collect` can only say None for every file here, so it need
        not be asked file by file (a system call or two each, most of collecting a folder of
        small task files): no --ignore or --ignore-glob, no `collect_ignore(_glob)` in a
        conftest that applies here, and no hook but pytest's own and ours (which say no to
        what is not a task file: `is_task_file` below, and ignore no file but folders of
        templates). Any doubt: ask about every file."""
        config = self.config
        if config.getoption("ignore") or config.getoption("ignore_glob"):
            return False
        if conftest_paths(config, "collect_ignore", self.path) or conftest_paths(
            config, "collect_ignore_glob", self.path
        ):
            return False
        default = config.pluginmanager.get_plugin("main")  # pytest's own collection hooks
        # pytest 9.0 wraps path hooks in a function (functools.wraps) that passes legacy paths
        hook = inspect.unwrap(ihook.pytest_ignore_collect)
        return all(
            impl.plugin is default
            or isinstance(impl.plugin, CollectHooks)
            or getattr(impl.plugin, "ignores_folders_only", False)
            for impl in hook.get_hookimpls()
        )


@dataclass
class CollectState:
    """What collection of this session has seen so far."""

    whole_roots: set[Path]
    """Dataset roots collected in one pass (no argument names anything below them)."""
    seen_ids: dict[tuple[str, str], str] = field(default_factory=dict)
    """Where each task id was first defined: its file, or its row's `file:line`."""
    registered_tags: set[str] = field(default_factory=set)

    KEY: ClassVar[pytest.StashKey[CollectState]] = pytest.StashKey()


class TaskFile(pytest.File):
    """A task YAML file: one item per task and attempt, or one erroring item per bad task."""

    def collect(self) -> Iterator[pytest.Item]:
        runtime = self.config.stash[RUNTIME]
        dataset = runtime.dataset_for(self.path)
        assert dataset is not None
        attempts = runtime.attempts_for(dataset)
        makers = runtime.grader_factory(dataset)
        state = self.config.stash[CollectState.KEY]
        for loaded in load_task_file(self.path, dataset, makers, runtime.specs):
            if isinstance(loaded, TaskDef):
                loaded = _check_unique(state, loaded)
            if isinstance(loaded, LoadFailure):
                if runtime.settings.strict:
                    raise self.CollectError(loaded.render())
                name = loaded.label + LOAD_ERROR
                yield LoadErrorItem.from_parent(
                    self, name=name, nodeid=self._child_id(name), failure=loaded
                )
                continue
            marks = [_mark(state, self.config, tag) for tag in loaded.spec.tags]
            variants = runtime.variants_of(loaded)
            for attempt in range(attempts):
                for variant in variants:  # a task's variants side by side, attempt by attempt
                    name = item_name(loaded.id, attempt, variant)
                    item = AttemptItem.from_parent(
                        self,
                        name=name,
                        nodeid=self._child_id(name),
                        task=loaded,
                        attempt=attempt,
                        variant=variant,
                    )
                    for mark in marks:
                        item.add_marker(mark)
                    yield item

    def _child_id(self, name: str) -> str:
        """The node id as text, so pytest parses `[attempt-0]` into the id's params, as it does
        for the ids it stores (`--lf`, `--nf` and `--sw` compare the two)."""
        return f"{self.nodeid}::{name}"


def _check_unique(state: CollectState, task: TaskDef) -> TaskDef | LoadFailure:
    first = state.seen_ids.setdefault((task.dataset.name, task.id), task.where)
    if first == task.where:
        return task
    path, line = task.row or (task.path, task.line)
    error = TaskFileError(
        path,
        f"duplicate task id {task.id!r}, first defined in {display_path(first)}",
        line=line,
        field="id",
        hint="task ids must be unique across the dataset",
    )
    return LoadFailure(path, task.id, line, [error])


def _mark(state: CollectState, config: pytest.Config, tag: str) -> pytest.MarkDecorator:
    if tag not in state.registered_tags:
        state.registered_tags.add(tag)
        config.addinivalue_line("markers", f"{tag}: agenteval task tag")
    mark: pytest.MarkDecorator = getattr(pytest.mark, tag)
    return mark


LOAD_ERROR = "[load-error]"
"""The suffix of a load-error item's name, after the task's label."""


def load_error_label(nodeid: str) -> str | None:
    """The task label of a load-error item's node id (None for any other node id); tolerates
    xdist's `@group` suffix."""
    label, found, rest = nodeid.partition("::")[2].rpartition(LOAD_ERROR)
    return label if found and (not rest or rest.startswith("@")) else None


class LoadErrorItem(AgentevalItem):
    """Stands for a task that could not be loaded: it errors with file, line and field."""

    def __init__(self, *, failure: LoadFailure, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failure = failure

    def setup(self) -> None:
        raise TaskFileError(self.failure.path, self.failure.render())

    def runtest(self) -> None:  # pragma: no cover - setup always raises
        pass

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return self.failure.render()

    def failed_at(self, exc: BaseException) -> str | None:
        return "load"

    def heading(self) -> None:
        """None: the first line stays `path:line: at field: problem`, which terminals and
        editors open at its line (`load` is in the crash message, and the item's name)."""
        return None

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.failure.path, self.failure.line - 1, f"agenteval: {self.name}"

    @property
    def dataset_name(self) -> str:
        dataset = self.config.stash[RUNTIME].dataset_for(self.path)
        return dataset.name if dataset else ""

    def report_extras(self) -> LoadError:
        failure = self.failure
        return LoadError(self.dataset_name, failure.label, str(failure.path), failure.render())


@cache
def _freeze_at_exit() -> None:
    """Freeze all that lives when the process exits (registered once per process)."""
    atexit.register(gc.freeze)


REFREEZE_EVERY = 3000
"""Reports between the controller's freezes (three per attempt)."""


class Refreeze:
    """In xdist's controller, freeze what piled up every few thousand reports: pytest keeps
    the reports all session, and the cyclic GC rescanning them cost the controller over a
    second at 30,000 attempts. Only there (no user code runs in the controller, so the cycles
    that wait for the thaw are the plugins' own few), and off every worker's hot path."""

    def __init__(self) -> None:
        self.reports = 0

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self) -> None:
        self.reports += 1
        if self.reports % REFREEZE_EVERY == 0:
            gc.freeze()


class CollectHooks:
    """Collection hooks, registered only while a dataset is active."""

    froze = False

    def __init__(self, parts: dict[Path, tuple[Path, ...]]) -> None:
        self.parts = parts
        """Dataset roots of which only some parts were named, with those parts."""

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Below a dataset root only task files are collected, only in the parts named (when
        an argument above the dataset walks into it), and workspace templates never are."""
        dataset = config.stash[RUNTIME].dataset_for(collection_path)
        if dataset is None or collection_path == dataset.root:
            return None
        parts = self.parts.get(dataset.root)
        if parts is not None and not is_selected(collection_path, parts):
            return True
        if collection_path.is_dir():
            return dataset.is_workspace_dir(collection_path) or None
        return not dataset.is_task_file(collection_path) or None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(
        self, path: Path, parent: pytest.Collector
    ) -> pytest.Directory | None:
        config = parent.config
        dataset = config.stash[RUNTIME].dataset_for(path)
        if dataset is not None and dataset.root in config.stash[CollectState.KEY].whole_roots:
            return DatasetDir.from_parent(parent, path=path)
        return None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> TaskFile | None:
        if file_path.suffix not in TASK_SUFFIXES:
            return None
        dataset = parent.config.stash[RUNTIME].dataset_for(file_path)
        if dataset is None or not dataset.is_task_file(file_path):
            return None
        return TaskFile.from_parent(parent, path=file_path)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> Any:
        """Keep the cyclic GC off the collected tree: it lives all session, so scanning it
        again and again (a third of collecting 10,000 tasks) frees nothing. Frozen until the
        session ends, unless something else froze objects already; the few cycles that became
        garbage while collecting (a few dozen objects for 10,000 tasks) wait until then."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return (yield)
        finally:
            if enabled:
                gc.enable()
            if gc.get_freeze_count() == 0:
                gc.freeze()
                self.froze = True
                plugins = session.config.pluginmanager
                if plugins.hasplugin("dsession"):
                    plugins.register(Refreeze(), "agenteval-refreeze")

    def thaw(self) -> None:
        """Give the frozen tree back to the GC when the session ends, so what runs after it in
        this process (another session, an IDE's) has the GC as it was. At the process's exit
        everything is frozen again (`atexit`, before the interpreter's final collections):
        those would only scan the dead tree once more, freeing nothing the exit does not (5 s
        of CPU at 30,000 attempts and `-n 4`, bench/RESULTS.md)."""
        if self.froze:
            gc.unfreeze()
            self.froze = False
            _freeze_at_exit()

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """`--agenteval-shard I/N`: deselect (not skip) the attempts of other shards' tasks, and
        load errors outside shard 1, so each shard's JUnit holds only what it ran."""
        shard = config.stash[RUNTIME].shard
        if shard is not None:
            kept, dropped = split_by_shard(items, shard)
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = kept

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        runtime = session.config.stash[RUNTIME]
        runtime.specs.save()
        for dataset in runtime.datasets:
            dataset.forget_reads()


def split_by_shard(items: list[pytest.Item], shard: Shard) -> tuple[list[pytest.Item], list[Any]]:
    """The items the shard runs, and the rest; other tests (not ours) always stay."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    held: dict[tuple[str, str], bool] = {}
    for item in items:
        if isinstance(item, AttemptItem):
            task = item.task
            where = (task.dataset.name, task.id)
            mine = held.get(where)
            if mine is None:
                mine = held[where] = shard.holds(*where)
        else:
            mine = not isinstance(item, LoadErrorItem) or shard.reports_load_errors
        (kept if mine else dropped).append(item)
    return kept, dropped
