"""Attempts' artifacts in the run store: the bytes of the files an agent changed, kept below
the run folder, one folder per attempt.

    <run>/artifacts/<dataset>/<task id>[attempt-<N>]/<path in the workspace>

(a variant's attempt: `<task id>[<variant>-attempt-<N>]`). The attempt's folder is named as
its pytest item, so `ds/a[attempt-0]` and `ds/a/b[attempt-0]` never nest (a task id has no
`[`). Written only by the controller, before the attempt's record (the commit point): a
session killed between the two leaves files of an attempt without a record, which runs again
and replaces them. Every new record of an attempt (a run again, a regrade) first removes the
folder, so no attempt shows an earlier one's files.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from ..core.errors import StoreError, os_failure
from ..core.model import Key
from ..core.records import item_name, variant_of

ARTIFACTS = "artifacts"
"""The run folder's subfolder holding every attempt's artifacts."""


def attempt_path(key: Key) -> str:
    """The attempt's folder below `artifacts/` (and below an export's DIR), in POSIX form."""
    return f"{key[0]}/{item_name(key[1], key[2], variant_of(key))}"


def attempt_folder(run_dir: Path, key: Key) -> Path:
    return run_dir / ARTIFACTS / attempt_path(key)


def replace(run_dir: Path, key: Key, files: Mapping[str, bytes]) -> None:
    """Remove the attempt's earlier artifacts and write `files` (paths checked by
    `execution.artifacts.keepable` where they were collected); raises StoreError."""
    folder = attempt_folder(run_dir, key)
    try:
        if folder.exists():
            shutil.rmtree(folder)
        for path, data in files.items():
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:  # a fresh folder: nothing there to follow
                out.write(data)
    except OSError as exc:
        raise StoreError(os_failure("write", folder, exc)) from None


def read(run_dir: Path, key: Key, path: str) -> bytes | None:
    """A kept file's bytes; None when it is not there (never kept, or lost)."""
    try:
        return (attempt_folder(run_dir, key) / path).read_bytes()
    except OSError:
        return None


def copy_out(run_dir: Path, key: Key, out: Path) -> int:
    """Copy the attempt's kept files to `out/<attempt path>/`; how many were copied."""
    folder = attempt_folder(run_dir, key)
    if not folder.is_dir():
        return 0
    target = out / attempt_path(key)
    shutil.copytree(folder, target, dirs_exist_ok=True)
    return sum(1 for p in target.rglob("*") if p.is_file())
