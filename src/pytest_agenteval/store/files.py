"""The files of one run folder: append-only writes that leave no torn line, the run's lock,
atomic JSON replacement. Every failure of the file system becomes a StoreError naming the path
and the errno; every file is created 0644 minus the umask, like pytest's cache.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import StoreError, os_failure
from ..core.files import NotRegular, open_fd
from ..core.text import clean_text

NOTE_SIZE = 256
"""Bytes of the running-attempt note in the lock file (padded, so a write needs no truncate)."""
FILE_MODE = 0o644
"""Store files are readable by everyone who may enter the folder, like pytest's cache."""


class RunFiles:
    """The open, append-only files of the run this session writes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # Made once: joining paths costs more than an append (they only name a failed write).
        self._index_path = folder / "index.jsonl"
        self._records_path = folder / "records.jsonl"
        self._index_fd = self._records_fd = -1
        self._index_end = self._records_end = 0
        self._lock_fd = _open(folder / "lock", os.O_RDWR | os.O_CREAT)

    def lock(self) -> bool:
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._index_fd, self._index_end = _open_append(self._index_path)
        self._records_fd, self._records_end = _open_append(self._records_path)
        return True

    def append_record(self, text: str) -> tuple[int, int]:
        data = _utf8(text) + b"\n"
        offset = self._records_end
        self._records_end = _append(self._records_fd, offset, data, self._records_path)
        return offset, len(data) - 1

    def append_index(self, text: str) -> None:
        data = _utf8(text) + b"\n"
        self._index_end = _append(self._index_fd, self._index_end, data, self._index_path)

    def note_running(self, text: str) -> None:
        """Keep `text` (the attempt whose agent runs now, or "") in the lock file, so a session
        that dies mid-attempt leaves its name behind: one fixed-size write, no fsync (it only
        has to outlive the process, not the machine)."""
        data = text.encode("utf-8")[:NOTE_SIZE].ljust(NOTE_SIZE)
        try:
            os.pwrite(self._lock_fd, data, 0)
        except OSError as exc:
            raise StoreError(os_failure("write", self.folder / "lock", exc)) from None

    def close(self) -> None:
        for fd in (self._index_fd, self._records_fd, self._lock_fd):
            if fd >= 0:
                os.close(fd)
        self._index_fd = self._records_fd = self._lock_fd = -1


def _utf8(text: str) -> bytes:
    """A line's bytes. Records are made storable (`core.text.clean_text`), but one whose text
    still holds a lone surrogate (from a plugin's or a worker's text) is stored with U+FFFD
    in its place, never lost with the session."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return clean_text(text).encode("utf-8")


def _open(path: Path, flags: int) -> int:
    """A run folder's file opened for writing: never through a link (a planted `lock` or
    `spend` link would have a session write into a host file), only a regular file."""
    try:
        return open_fd(path, flags, FILE_MODE)
    except NotRegular as exc:
        raise StoreError(not_followed(path, exc.why)) from None
    except OSError as exc:
        raise StoreError(os_failure("open", path, exc)) from None


def not_followed(path: Path, why: str) -> str:
    """The message of a store file that is no regular file: what it is and what to do."""
    return (
        f"{path} {why}: a store file is never followed or read through; "
        "remove it (the store did not make it) and run again"
    )


def _open_append(path: Path) -> tuple[int, int]:
    """Open for appending, and the file's end; a torn last line (power loss) is ended first so
    it cannot swallow the next."""
    fd = _open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    size = os.lseek(fd, 0, os.SEEK_END)
    if size and os.pread(fd, 1, size - 1) != b"\n":
        size = _append(fd, size, b"\n", path)
    return fd, size


def _append(fd: int, end: int, data: bytes, path: Path) -> int:
    """Append `data` at `end`, the file's end; returns the new end. A failed write (disk full)
    is cut off again, so no torn line is left, and raised as a StoreError."""
    try:
        written = os.write(fd, data)
        while written < len(data):  # a short write (rare): the rest
            written += os.write(fd, data[written:])
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, end)
        raise StoreError(os_failure("write", path, exc)) from None
    return end + len(data)


def locked(folder: Path) -> bool | None:
    """Whether some process holds the run's lock (it is running right now); None: unknown.

    A read-only descriptor is enough for flock, so this also works on a read-only store."""
    try:
        fd = open_fd(folder / "lock")
    except FileNotFoundError:
        return False
    except (OSError, NotRegular):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def running_note(folder: Path) -> str | None:
    """What a run's lock file says was running when its session ended (None: nothing)."""
    try:
        data = read_small(folder / "lock", NOTE_SIZE)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace").strip() or None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` atomically with `data` as JSON (mode 0644 minus the umask)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=1, ensure_ascii=False))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(os_failure("write", path, exc)) from None


RUN_JSON_LIMIT = 64 * 2**20
"""run.json is read whole: a bigger one (hundreds of times the largest ever written) is damage."""


class NotRegularFile(OSError):
    """A store file that is a FIFO, a device or a folder: reading it could block forever
    (a FIFO) or never end (`/dev/zero`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EINVAL, reason)


def open_regular(path: Path, limit: int | None = None) -> io.BufferedReader:
    """Open a store file for reading if it is a regular file (of at most `limit` bytes), not
    through a link; otherwise raise a NotRegularFile (an OSError) saying what it is. Opening
    does not block on a FIFO."""
    try:
        fd = open_fd(path, os.O_RDONLY | os.O_NONBLOCK)
    except NotRegular as exc:
        raise NotRegularFile(f"it {exc.why}") from None
    try:
        status = os.fstat(fd)
        if limit is not None and status.st_size > limit:
            raise NotRegularFile(
                f"it holds {status.st_size} bytes, more than {limit} (never written this big)"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_small(path: Path, limit: int) -> bytes:
    """A small store file's bytes (a note, a stop, a progress file): not through a link, only
    a regular file, at most `limit` bytes (a NotRegularFile past that)."""
    with open_regular(path, limit) as f:
        return f.read(limit)


def read_at(f: BinaryIO, where: tuple[int, int]) -> bytes:
    """The `(offset, length)` bytes of an open file; none when they would lie past its end (a
    damaged length in the index must not make a read of a terabyte)."""
    offset, length = where
    if offset + length > os.fstat(f.fileno()).st_size:
        return b""
    f.seek(offset)
    return f.read(length)


def line_number(path: Path, offset: int) -> int | None:
    """The line at byte `offset` of a file (counted only when reporting damage)."""
    try:
        with open_regular(path) as f:
            before = f.read(offset)
    except OSError:
        return None
    return before.count(b"\n") + 1 if len(before) == offset else None


def has_attempts(folder: Path) -> bool:
    """Whether a run folder holds stored attempts (index or records not empty)."""
    for name in ("index.jsonl", "records.jsonl"):
        with contextlib.suppress(OSError):
            if (folder / name).stat().st_size:
                return True
    return False
