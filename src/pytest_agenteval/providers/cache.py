"""The model-call cache: a request asked before is answered from disk, not paid for again.

`--agenteval-model-cache on|read|replay|off` (off by default). The key is the provider's
kind and endpoint, the whole request as sent (model, messages, tools, parameters), the
attempt index and the variant, so attempt k of a task stays an independent sample of the
model and each variant pays for its own answers: the cache replays the run, it never turns
three attempts, or two variants, into one answer. Entries are one JSON file
each under `<cache_dir>/agenteval-models/`, written as the store writes (a temporary file,
then a rename), so a worker that dies mid-write leaves no half entry; an unreadable entry (a
link, a FIFO, a device, one past ENTRY_LIMIT) is never followed, waited on or read whole: it is
reported once, on the terminal, and treated as a miss.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from ..core.chat import ChatReply, ToolRequest
from ..core.files import NotRegular, kind_of, open_fd

Mode = Literal["on", "read", "replay", "off"]
MODES: tuple[Mode, ...] = ("on", "read", "replay", "off")
SCHEMA = "agenteval.model-cache/1"
KEY_VERSION = 1
"""Part of every key: a change to what a key covers makes old entries misses, not errors."""
FOLDER = "agenteval-models"
"""Beside the agenteval store in pytest's cache dir (`--cache-clear` leaves both)."""
ENTRY_LIMIT = 64 * 2**20
"""An entry is one reply: a bigger file is damage, not read (a link to `/dev/zero` never ends)."""


@dataclass(frozen=True, slots=True)
class Stats:
    """What `agenteval cache stats` prints."""

    entries: int
    bytes: int
    oldest: float | None
    newest: float | None
    cost: float
    """What the cached answers cost when they were first asked (0 where unknown)."""


class ModelCache:
    """One session's view of the cache: its mode and folder."""

    def __init__(self, folder: Path, mode: str, say: Callable[[str], None] | None = None) -> None:
        self.folder = folder
        self.mode = mode
        self._say = say or _stderr  # the session's terminal, past pytest's capture
        self._reported: set[str] = set()
        self._lock = threading.Lock()

    @property
    def reads(self) -> bool:
        return self.mode in ("on", "read", "replay")

    @property
    def writes(self) -> bool:
        return self.mode == "on"

    @staticmethod
    def key(
        kind: str, base_url: str, body: bytes, attempt: int | None, variant: str | None = None
    ) -> str:
        """The entry's name: endpoint, whole request body, attempt index and variant, hashed.
        A call of no variant keeps the key it had before variants were part of it."""
        digest = hashlib.sha256()
        fields: list[object] = [KEY_VERSION, kind, base_url.rstrip("/"), attempt]
        if variant is not None:
            fields.append(variant)
        digest.update(json.dumps(fields).encode() + b"\n" + body)
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> tuple[ChatReply, float | None] | None:
        """The cached reply and its original cost; None on a miss (or an unreadable entry,
        reported once)."""
        try:  # a FIFO opens without blocking and is refused: no thread needed off the loop
            data = json.loads(_read(self.folder, (key[:2], f"{key}.json")))
            if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                raise ValueError(f"not a {SCHEMA} entry")
            return _reply(data["reply"]), data.get("cost")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, NotRegular) as exc:
            self._report(self._path(key), exc)
            return None

    def put(self, key: str, reply: ChatReply, cost: float | None) -> None:
        """Keep a reply (best effort: a cache that cannot be written costs a call, not a run)."""
        path = self._path(key)
        entry = {"schema": SCHEMA, "at": time.time(), "cost": cost, "reply": _json(reply)}
        data = json.dumps(entry, ensure_ascii=False).encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.parent.is_symlink():
                raise NotRegular(f"is in {path.parent.name!r}, a symbolic link, not a folder")
            with open(open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except (OSError, NotRegular) as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._report(path, exc)

    def _report(self, path: Path, exc: Exception) -> None:
        with self._lock:
            if str(path) in self._reported:
                return
            self._reported.add(str(path))
        self._say(f"agenteval: model cache: {path}: {exc} (treated as a miss)")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _read(folder: Path, names: Sequence[str]) -> bytes:
    """The bytes of the entry `folder/names[0]/names[1]`: no link followed on the way or at
    the end, a FIFO opened without waiting and refused, at most ENTRY_LIMIT bytes read (a
    ValueError past that). Cheaper than `read_bytes` (no file object): a hit is a hot path."""
    try:
        inner = os.open(folder / names[0], _FOLDER)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotRegular(f"goes through {names[0]!r}, a symbolic link, not a folder") from None
        raise
    try:
        fd = os.open(names[1], _ENTRY, dir_fd=inner)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular("is a symbolic link, not a regular file") from None
        raise
    finally:
        os.close(inner)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotRegular(f"is {kind_of(status.st_mode)}, not a regular file")
        if status.st_size > ENTRY_LIMIT:
            raise ValueError(f"holds {status.st_size} bytes, more than {ENTRY_LIMIT}")
        return os.read(fd, status.st_size + 1)
    finally:
        os.close(fd)


def entries(folder: Path) -> Iterator[Path]:
    """Every entry file of the cache at `folder` (a linked subfolder is none of its own: a
    prune through it would remove files elsewhere)."""
    if folder.is_dir():
        for inner in folder.glob("??"):
            if not inner.is_symlink() and inner.is_dir():
                yield from inner.glob("*.json")


def stats(folder: Path) -> Stats:
    """How many entries, how large, how old, and what they cost when asked."""
    count = size = 0
    oldest: float | None = None
    newest: float | None = None
    cost = 0.0
    for path in entries(folder):
        try:
            raw = _read(folder, path.relative_to(folder).parts)
            data = json.loads(raw)
        except (OSError, ValueError, NotRegular):
            continue
        count, size = count + 1, size + len(raw)
        at = data.get("at") if isinstance(data, dict) else None
        if isinstance(at, int | float):
            oldest = at if oldest is None else min(oldest, at)
            newest = at if newest is None else max(newest, at)
        spent = data.get("cost") if isinstance(data, dict) else None
        cost += spent if isinstance(spent, int | float) else 0.0
    return Stats(count, size, oldest, newest, cost)


def prune(folder: Path, older_than: float, now: float | None = None) -> int:
    """Remove the entries written more than `older_than` seconds ago (and unreadable ones);
    returns how many."""
    cutoff = (time.time() if now is None else now) - older_than
    removed = 0
    for path in entries(folder):
        try:
            data = json.loads(_read(folder, path.relative_to(folder).parts))
            at = data.get("at") if isinstance(data, dict) else None
        except (OSError, ValueError, NotRegular):
            at = None
        if not isinstance(at, int | float) or at < cutoff:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed


def clear(folder: Path) -> int:
    """Remove every entry; returns how many."""
    return prune(folder, -1e18)


def _json(reply: ChatReply) -> dict[str, Any]:
    found = asdict(reply)
    found["tool_calls"] = [asdict(call) for call in reply.tool_calls]
    found["extra"] = dict(reply.extra)
    for name in ("cost", "cached", "cached_cost", "cache_missed", "latency", "retries"):
        del found[name]
    return found


def _reply(data: dict[str, Any]) -> ChatReply:
    calls = tuple(ToolRequest(c["id"], c["name"], c["arguments"]) for c in data["tool_calls"])
    return ChatReply(**{**data, "tool_calls": calls})


_cache: ModelCache | None = None


def current() -> ModelCache | None:
    """The session's cache (None: off)."""
    return _cache


def use_cache(cache: ModelCache | None) -> None:
    """Every model call of this process from now on goes through `cache` (None: off)."""
    global _cache
    _cache = cache if cache is not None and cache.mode != "off" else None
