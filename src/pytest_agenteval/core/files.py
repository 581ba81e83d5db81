"""Opening a file that someone else named or made (an agent's workspace, a stored run from a
shard's CI job) without following a link out of its folder, and never a FIFO or a device."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO


class NotRegular(Exception):
    """The names lead to no regular file below the folder: a link on the way or at the end, a
    FIFO, a device, a folder; `why` says which."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def open_below(root: Path, names: Sequence[str], *, one_link: bool = False) -> BinaryIO:
    """The regular file `root/names[0]/.../names[-1]`, opened for reading.

    `root` is opened as named (the caller chose it); each name below it is opened without
    following a link, and the file is looked at before it is opened (opening a device can
    act) and after (it may have been replaced), without blocking on a FIFO. `one_link`: a
    file with a second hard link is refused too (it may be a file outside the folder).
    Raises NotRegular, FileNotFoundError when a name is not there, OSError otherwise."""
    bad = [n for n in names if n in ("", ".", "..") or "/" in n or "\0" in n]
    if bad or not names:
        raise NotRegular("has an empty, '.' or '..' part")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names[:-1]:
            inner = _enter(fd, name)
            os.close(fd)
            fd = inner
        _check(os.stat(names[-1], dir_fd=fd, follow_symlinks=False), one_link)
        file_fd = os.open(names[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        _check(os.fstat(file_fd), one_link)
        os.set_blocking(file_fd, True)
        return os.fdopen(file_fd, "rb")
    except BaseException:
        os.close(file_fd)
        raise


def open_fd(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """`path` opened with `flags` (made with `mode` under O_CREAT) only when it is a regular
    file: never through a link at its end (a planted link must not lead a write to a host
    file), and without blocking on a FIFO. Raises NotRegular for a link, a FIFO, a device or a
    folder; FileNotFoundError or another OSError otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            with contextlib.suppress(OSError):
                _check(os.lstat(path), False)
        raise
    try:
        _check(os.fstat(fd), False)
        if not flags & os.O_NONBLOCK:
            os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _enter(fd: int, name: str) -> int:
    """The folder `name` in the folder `fd`, opened without following a link."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        kind = kind_of(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        raise NotRegular(f"goes through {name!r}, {kind}, not a folder") from None


def _check(status: os.stat_result, one_link: bool) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise NotRegular(f"is {kind_of(status.st_mode)}, not a regular file")
    if one_link and status.st_nlink > 1:
        raise NotRegular(f"has {status.st_nlink} hard links")


def kind_of(mode: int) -> str:
    """What a file of `mode` is, for a person: `a FIFO`, `a symbolic link`..."""
    for test, kind in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "no regular file"
