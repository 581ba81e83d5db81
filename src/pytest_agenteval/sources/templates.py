"""Workspace templates: what a template may hold, its content digest, and copying it.

A template may hold folders, regular files and symlinks to files inside the template. Links are
copied as the files they point to, so a workspace never links anywhere: an agent cannot reach
outside it, nor change the dataset, through the template.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..core.errors import TemplateError

Entry = tuple[str, Path | None]
"""(path below the template in POSIX form, the file to copy, or None for a folder)."""


def template_entries(folder: Path, what: str = "workspace folder") -> list[Entry]:
    """Everything in the template `folder` (resolved), checked; raises TemplateError (which
    calls the folder `what`)."""
    entries: list[Entry] = []
    pending = [""]
    while pending:
        below = pending.pop()
        with os.scandir(folder / below) as scan:
            found = sorted(scan, key=lambda e: e.name)
        for entry in found:
            rel = f"{below}/{entry.name}" if below else entry.name
            if entry.is_symlink():
                entries.append((rel, _link_target(folder, rel, entry.path, what)))
            elif entry.is_dir(follow_symlinks=False):
                entries.append((rel, None))
                pending.append(rel)
            elif entry.is_file(follow_symlinks=False):
                entries.append((rel, Path(entry.path)))
            else:
                raise TemplateError(
                    f"{rel} in the {what} is not a file, folder or symlink",
                    hint=f"a {what} holds plain files and folders only",
                )
    return entries


def _link_target(folder: Path, rel: str, link: str, what: str) -> Path:
    target = Path(os.path.realpath(link))
    if not target.is_relative_to(folder):
        raise TemplateError(
            f"the symlink {rel} in the {what} points outside it (to {target})",
            hint="an attempt's workspace gets only what is inside the template: "
            "copy the file into the folder instead of linking to it",
        )
    if not target.is_file():
        raise TemplateError(
            f"the symlink {rel} in the {what} points to "
            f"{'a folder' if target.is_dir() else 'nothing'}",
            hint="links to files are copied as files; put folders in the template themselves",
        )
    return target


def template_digest(entries: list[Entry]) -> str:
    """Digest of the template's files: their paths and contents (folders alone do not count)."""
    sha = hashlib.sha256()
    for rel, source in sorted((e for e in entries if e[1]), key=lambda e: e[0].split("/")):
        assert source is not None
        sha.update(rel.encode() + b"\0")
        sha.update(source.read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def copy_template(folder: Path, dest: Path) -> None:
    """Copy the template `folder` to the new folder `dest`, links as the files they point to."""
    dest.mkdir()
    for rel, source in template_entries(folder):
        if source is None:
            (dest / rel).mkdir()
        else:
            shutil.copy2(source, dest / rel)
