"""Fresh working directories for attempts: created on demand, kept only when an attempt fails."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class Workspaces:
    """One base folder per process; one subfolder per attempt that asks for a workspace."""

    def __init__(self, basetemp: Path | None = None, label: str = "main") -> None:
        self._basetemp = basetemp
        self._label = label
        self._base: Path | None = None

    @property
    def base(self) -> Path:
        if self._base is None:
            if self._basetemp is not None:
                self._base = self._basetemp / f"agenteval-{self._label}"
                self._base.mkdir(parents=True, exist_ok=True)
            else:
                self._base = Path(tempfile.mkdtemp(prefix=f"agenteval-{self._label}-"))
        return self._base

    def create(self, dataset: str, task_id: str, attempt: int, template: Path | None) -> Path:
        """A new empty folder for one attempt, or a copy of the task's workspace template."""
        path = self.base / f"{_UNSAFE.sub('_', dataset)}--{_UNSAFE.sub('_', task_id)}--{attempt}"
        if path.exists():
            shutil.rmtree(path)
        if template is not None:
            shutil.copytree(template, path, symlinks=True)
        else:
            path.mkdir()
        return path

    @staticmethod
    def discard(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Remove the base folder if no failed attempt's workspace was kept in it."""
        if self._base is not None and self._basetemp is None:
            with contextlib.suppress(OSError):
                self._base.rmdir()
