"""Which parts of which datasets a pytest session collects, found as pytest finds its rootdir.

A dataset is the nearest folder at or above a path that holds `agenteval.yaml`, so a folder or
a task file inside a dataset keeps the dataset's name, manifest and task ids. Every pytest run
asks this module whether its arguments name a dataset, so it stays cheap: paths only, no YAML,
no pydantic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dataset import Dataset

MANIFEST_NAME = "agenteval.yaml"
TASK_SUFFIXES = (".yaml", ".yml")


def find_dataset_root(path: Path) -> Path | None:
    """The nearest folder at or above `path` that holds a manifest, or None."""
    folder = path if path.is_dir() else path.parent
    for candidate in (folder, *folder.parents):
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    return None


def arg_path(base: Path, arg: str) -> Path:
    """The absolute path of a pytest argument: a path, or a node id `path::name[param]`."""
    return (base / arg.split("::", 1)[0]).resolve()


def dataset_args(args: Iterable[str], base: Path) -> list[Path]:
    """The paths of the arguments that are, or lie in, a dataset (a manifest at or above them).

    Only folders and task files count: a Python file inside a dataset (a workspace template's
    test, say) named on the command line runs as the plain test it is.
    """
    found = []
    for arg in args:
        path = arg_path(base, arg)
        if _may_hold_tasks(path) and find_dataset_root(path) is not None:
            found.append(path)
    return found


def _may_hold_tasks(path: Path) -> bool:
    if path.suffix in TASK_SUFFIXES:
        return path.name != MANIFEST_NAME and path.is_file()
    return path.is_dir()


def add_dataset_args(args: list[str], paths: Iterable[Path], base: Path) -> list[str]:
    """pytest's arguments plus each dataset path no argument already covers or narrows.

    An argument above a path collects it already; one inside it (a task file, a node id) says
    which part of it to run, so adding the whole path would run more than was asked for.
    """
    given = [arg_path(base, arg) for arg in args]
    extra = [
        str(path)
        for path in paths
        if not any(g.is_relative_to(path) or path.is_relative_to(g) for g in given)
    ]
    return [*args, *extra]


def selected_parts(root: Path, paths: Iterable[Path]) -> tuple[Path, ...] | None:
    """The parts of the dataset at `root` that `paths` (inside it) select; None for all of it."""
    parts = tuple(sorted(set(paths)))
    return None if root in parts else parts


def is_selected(path: Path, parts: tuple[Path, ...]) -> bool:
    """Whether `path` lies in a selected part, or on the way down to one."""
    return any(path.is_relative_to(p) or p.is_relative_to(path) for p in parts)


def one_pass_roots(roots: Iterable[Path], args: Iterable[str], base: Path) -> set[Path]:
    """The roots no argument points below: pytest matches those against a collector per file."""
    given = [arg_path(base, arg) for arg in args]
    return {r for r in roots if not any(g != r and g.is_relative_to(r) for g in given)}


class TemplateFolders:
    """Which folders are workspace templates of a dataset, for every folder a session walks.

    A template holds the code an agent is asked to fix, so its tests may fail on purpose, and two
    datasets' same-named template tests would abort collection ("import file mismatch"): the
    plugin owns its dataset folders, and no session collects their templates, evaluating them
    or not. Cheap where there is no dataset: one look for a manifest per folder walked.
    """

    def __init__(self) -> None:
        self._roots: dict[Path, Path | None] = {}
        """Each folder seen, with the dataset root at or above it (None: no dataset)."""
        self._datasets: dict[Path, Dataset | None] = {}
        """Each dataset root, with its Dataset (None: its manifest is unusable)."""

    def adopt(self, datasets: Iterable[Dataset]) -> None:
        """Use the session's own datasets (read once), with a manifest or not."""
        for dataset in datasets:
            self._datasets[dataset.root] = dataset

    def is_template(self, path: Path) -> bool:
        """Whether `path` is a folder some task of its dataset names as a `workspace:`."""
        root = self._root_of(path.parent)
        if root is None or not path.is_dir():
            return False
        dataset = self._dataset(root)
        return dataset is not None and dataset.is_workspace_dir(path)

    def _root_of(self, folder: Path) -> Path | None:
        """The dataset root at or above `folder`, remembered for every folder on the way."""
        chain: list[Path] = []
        found: Path | None = None
        while True:
            if folder in self._roots:
                found = self._roots[folder]
                break
            chain.append(folder)
            if folder in self._datasets or (folder / MANIFEST_NAME).is_file():
                found = folder
                break
            if folder.parent == folder:
                break
            folder = folder.parent
        for seen in chain:
            self._roots[seen] = found
        return found

    def _dataset(self, root: Path) -> Dataset | None:
        if root not in self._datasets:
            from ..core.errors import TaskFileError
            from .dataset import load_dataset  # only where a dataset is walked

            try:
                dataset = load_dataset(root)
            except TaskFileError:  # the session that evaluates it says why
                self._datasets[root] = None
            else:
                self._datasets[root] = dataclasses.replace(dataset, templates_only=True)
        return self._datasets[root]
