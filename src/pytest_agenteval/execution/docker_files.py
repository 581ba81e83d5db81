"""A container's files as tar streams, the form `docker cp` speaks: the workspace template
and single files copied in, a folder copied out and read as it streams (never held whole),
and its changes against the template listed from that stream."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ..core.environment import Change, ChangedFile
from ..sources.templates import template_entries
from .docker_cli import DOCKER_TIMEOUT, cli, docker_env, unreachable


def workspace_tar(template: Path | None, workdir: str, owner: tuple[int, int]) -> bytes:
    """The template as a tar below `workdir`, owned by `owner` (uid, gid)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        root = workdir.strip("/")
        _add(tar, root, None, owner)
        for rel, source in template_entries(template) if template else []:
            _add(tar, f"{root}/{rel}", source, owner)
    return buffer.getvalue()


def file_tar(path: PurePosixPath, data: bytes, owner: tuple[int, int]) -> bytes:
    """One file's tar, at its absolute `path`, owned by `owner`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(str(path).lstrip("/"))
        info.size, info.mode, (info.uid, info.gid) = len(data), 0o644, owner
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _add(tar: tarfile.TarFile, name: str, source: Path | None, owner: tuple[int, int]) -> None:
    info = tarfile.TarInfo(name)
    (info.uid, info.gid), info.mtime = owner, int(time.time())
    if source is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        return
    data = source.read_bytes()
    stat = source.stat()
    info.size, info.mode, info.mtime = len(data), stat.st_mode & 0o777, int(stat.st_mtime)
    tar.addfile(info, io.BytesIO(data))


@contextlib.contextmanager
def copy_out(container: str, path: str, host: str | None = None) -> Iterator[tarfile.TarFile]:
    """`path` of `container` as a tar, read as `docker cp` streams it (never whole); a copy
    that fails or is cut short raises OSError (FileNotFoundError: no such path), or
    SandboxUnavailable when the daemon is gone."""
    proc = subprocess.Popen(
        [*cli(host), "cp", f"{container}:{path}", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=docker_env(),
    )
    timer = threading.Timer(DOCKER_TIMEOUT, proc.kill)
    timer.start()
    assert proc.stdout is not None and proc.stderr is not None
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            yield tar
    except (tarfile.TarError, EOFError):  # no tar, or one cut short
        raise _copy_failed(proc, path) from None
    finally:
        timer.cancel()
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()  # what was wanted is read (a file's first member): stop the copy
        proc.wait()
        proc.stderr.close()


def _copy_failed(proc: subprocess.Popen[bytes], path: str) -> OSError:
    """Why a copy out of a container gave no (whole) tar, from docker's own words."""
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    said = proc.stderr.read().decode(errors="replace").strip()
    proc.wait()
    if "Could not find the file" in said or "No such container:path" in said:
        return FileNotFoundError(f"{path}: {said}")
    unreachable(said)
    return OSError(f"{path}: {said or 'the copy out of the sandbox was cut short'}")


def first_file(tar: tarfile.TarFile, path: str, limit: int = -1) -> tuple[bytes, int]:
    """The first `limit` bytes (-1: all) of the one regular file a copy of `path` holds, and
    its size from the tar header: the rest is left in the stream, never held (`copy_out`
    stops the copy)."""
    member = tar.next()
    if member is not None and member.isdir():
        raise IsADirectoryError(path)
    if member is None or not member.isfile():  # a link: never followed
        raise OSError(f"{path}: not a regular file")
    body = tar.extractfile(member)
    assert body is not None
    return body.read(limit), member.size


def changes(tar: tarfile.TarFile, template: Path | None, room: int) -> list[ChangedFile]:
    """The files of a copied folder that differ from the template, sorted by path, read as
    the tar streams: a file is hashed as it passes (only when the template has one of its
    size), and only the bytes of changed files that fit in `room` are held, in the tar's
    order (artifacts' `collect` reads any other it keeps). A hard link is the file it
    names; a symbolic link or a device is listed, never read."""
    before = _template_files(template)
    seen: set[str] = set()
    changed: list[ChangedFile] = []
    files: dict[str, tuple[int, bytes | None, bytes | None]] = {}
    """Each changed file's size, digest (when hashed) and bytes (when held), for the hard
    links to it that come later in the tar."""
    for member in tar:
        rel = _relative(member.name)
        if member.isdir() or not rel:
            continue
        seen.add(rel)
        was = before.get(rel)
        change: Change = "added" if was is None else "modified"
        if member.isfile():
            size, digest, data = member.size, None, None
            if size <= room or (was is not None and was[0] == size):
                digest, data = _hashed(tar, member, keep=size <= room)
        elif member.islnk():  # a second name of a file the tar gave before
            size, digest, data = files.get(_relative(member.linkname), (0, None, None))
        else:  # a symbolic link (its size: its target's name's), a device: never read
            changed.append(ChangedFile(rel, change, member.size, True))
            continue
        if was is not None and was == (size, digest):
            continue
        held = data if data is not None and size <= room else None
        room -= size if held is not None else 0
        files[rel] = size, digest, held
        changed.append(ChangedFile(rel, change, size, False, held))
    changed += [ChangedFile(rel, "deleted", 0) for rel in before.keys() - seen]
    return sorted(changed, key=lambda c: c.path)


def _relative(name: str) -> str:
    """A tar member's path below the copied folder (`./src/a.py`: `src/a.py`; `.`: empty)."""
    return "/".join(PurePosixPath(name).parts)


def _hashed(
    tar: tarfile.TarFile, member: tarfile.TarInfo, *, keep: bool
) -> tuple[bytes, bytes | None]:
    """The digest of a member's bytes read as they stream, and the bytes when `keep`."""
    body = tar.extractfile(member)
    assert body is not None
    if keep:
        data = body.read()
        return hashlib.sha256(data).digest(), data
    sha = hashlib.sha256()
    while chunk := body.read(1 << 20):
        sha.update(chunk)
    return sha.digest(), None


def _template_files(template: Path | None) -> dict[str, tuple[int, bytes]]:
    """The template's files by relative path: each one's size and digest (read in chunks)."""
    found = {}
    for rel, source in template_entries(template) if template else []:
        if source is not None:
            with source.open("rb") as f:
                found[rel] = os.fstat(f.fileno()).st_size, hashlib.file_digest(f, "sha256").digest()
    return found
