"""The local environments' folders: one per attempt that needs one, kept only when it fails.

They live in pytest's base temporary folder (one per session, and per xdist worker), so pytest's
`tmp_path_retention_count` / `tmp_path_retention_policy` remove old sessions' folders.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ..core.identity import AttemptId
from .environment import LocalEnvironment

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
NAME_PREFIX_CHARS = 60
"""Readable part of a workspace folder's name; a hash of the exact key follows it."""


class Workspaces:
    """One base folder per process; one subfolder per attempt that asks for a workspace."""

    def __init__(self, basetemp: Path | Callable[[], Path | None] | None = None) -> None:
        """`basetemp`: the folder to work in, or a function giving it when first needed (pytest's
        basetemp, made on demand). None: a new folder in the system's temp folder."""
        self._basetemp = basetemp
        self._base: Path | None = None
        self._lock = threading.Lock()  # attempts in flight make workspaces from pool threads

    @property
    def base(self) -> Path:
        with self._lock:
            return self._base or self._make_base()

    def _make_base(self) -> Path:
        if self._base is None:
            basetemp = self._basetemp() if callable(self._basetemp) else self._basetemp
            if basetemp is not None:
                self._base = basetemp / "agenteval"
                self._base.mkdir(parents=True, exist_ok=True)
            else:
                self._base = Path(tempfile.mkdtemp(prefix="agenteval-"))
        return self._base

    def path(self, key: AttemptId) -> Path:
        """Where the attempt's folder is (or will be, once something asks for it)."""
        return self.base / folder_name(key)

    def create(self, key: AttemptId, template: Path | None) -> LocalEnvironment:
        """A new empty folder for one attempt, or a copy of the task's workspace template."""
        return LocalEnvironment.create(self.path(key), template)

    def existing(self, key: AttemptId, template: Path | None) -> LocalEnvironment | None:
        """The attempt's folder, when another process made it."""
        path = self.path(key)
        return LocalEnvironment(path, template) if path.exists() else None

    def close(self) -> None:
        """Remove the base folder if no failed attempt's workspace was kept in it."""
        if self._base is not None:
            with contextlib.suppress(OSError):
                self._base.rmdir()


def folder_name(key: AttemptId) -> str:
    """A short, file-name-safe name that only this attempt gets.

    Readable (`ds--arith_add--0-<hash>`, a variant's `ds--arith_add--base--0-<hash>`), bounded
    in length whatever the id's length, and collision-free: ids that read the same once made
    safe (`x/y`, `x_y`) differ in the hash.
    """
    dataset, task_id, variant = key.dataset, key.task_id, key.variant
    named = f"{dataset}--{task_id}" if variant is None else f"{dataset}--{task_id}--{variant}"
    readable = _UNSAFE.sub("_", named)[:NAME_PREFIX_CHARS]
    exact = json.dumps(key.to_json()).encode()
    return f"{readable}--{key.attempt}-{hashlib.sha256(exact).hexdigest()[:12]}"
