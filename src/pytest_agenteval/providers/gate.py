"""The limits all of a provider's calls share: how many in flight, adaptive on 429.

A `Gate` admits a provider's requests. The in-process gate counts the requests in flight per
provider (every loop and thread of the process together); the run's gate (set by the runtime
when a run folder is known, `use_gate`) shares the count across xdist workers through flock'd
slot files. Either adapts: a 429, or a server saying `x-ratelimit-remaining-requests: 0`,
halves the provider's current limit (at least 1); each success regrows it by one over the
limit, up to `max_in_flight` (additive increase, multiplicative decrease). Two refinements make
it settle instead of oscillating: it grows only on a success that filled the window (the call
held the top slot: demand reached the limit), and never past the level the last 429 showed
the server takes (the calls in flight then, less one), which itself creeps up slowly.

A killed worker's requests stay at the provider, which goes on answering them: the kernel
frees its slot files at once, but a slot whose holder died mid-call stays taken until the
call's request `timeout` has passed since it was sent (each slot file records its holder and
when its request went out), so the provider never sees more than `max_in_flight` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..core import holders

if TYPE_CHECKING:
    from .seam import Route

POLL = 0.002
"""Seconds between looks for room under a provider's limit."""


class Gate(Protocol):
    """Admits a provider's requests and learns from how they went."""

    def hold(
        self, route: Route, size: int
    ) -> contextlib.AbstractAsyncContextManager[int | None]: ...

    def rate_limited(self, route: Route, slot: int | None) -> None: ...

    def succeeded(self, route: Route, headers: Mapping[str, str], slot: int | None) -> None: ...


@dataclass
class Window:
    """One provider's adaptive limit and what is in flight under it."""

    ceiling: int
    limit: float
    cap: float
    in_flight: int = 0
    rate_limited: int = 0

    def shrink(self, slot: int | None) -> None:
        """A 429 for the call that held `slot` (0-based: slot+1 were in flight)."""
        self.rate_limited += 1
        if slot is not None:
            self.cap = float(max(1, min(slot, int(self.cap))))
        self.limit = max(1.0, min(self.limit / 2, self.cap))

    def grow(self, slot: int | None) -> None:
        """A success; the window grows when the call held its top slot."""
        if slot is None or slot + 1 < int(self.limit) or self.limit >= self.ceiling:
            return
        self.cap = min(float(self.ceiling), self.cap + 0.05 / self.cap)
        self.limit = min(self.cap, self.limit + 1 / self.limit)


class LocalGate:
    """Limits counted in this process (no run folder, or limits that need none shared)."""

    def __init__(self) -> None:
        self.windows: dict[str, Window] = {}
        self._lock = threading.Lock()

    def _window(self, route: Route) -> Window | None:
        ceiling = route.limits.max_in_flight
        if ceiling is None:
            return None
        found = self.windows.get(route.label)
        if found is None:
            found = self.windows[route.label] = Window(ceiling, float(ceiling), float(ceiling))
        return found

    @contextlib.asynccontextmanager
    async def hold(self, route: Route, size: int) -> AsyncIterator[int | None]:
        with self._lock:
            window = self._window(route)
        if window is None:
            yield None
            return
        slot = self._enter(window)
        while slot is None:
            await asyncio.sleep(POLL)
            slot = self._enter(window)
        try:
            yield slot
        finally:
            with self._lock:
                window.in_flight -= 1

    def _enter(self, window: Window) -> int | None:
        with self._lock:
            if window.in_flight < int(window.limit):
                window.in_flight += 1
                return window.in_flight - 1
            return None

    def rate_limited(self, route: Route, slot: int | None) -> None:
        with self._lock:
            window = self._window(route)
            if window is not None:
                window.shrink(slot)

    def succeeded(self, route: Route, headers: Mapping[str, str], slot: int | None) -> None:
        if headers.get("x-ratelimit-remaining-requests") == "0":
            self.rate_limited(route, slot)
            return
        with self._lock:
            window = self._window(route)
            if window is not None:
                window.grow(slot)

    def status(self) -> dict[str, dict[str, int]]:
        """Each provider's current limit and 429 count (for progress and the summary)."""
        with self._lock:
            return {
                label.split("@", 1)[0]: {
                    "limit": int(w.limit),
                    "max_in_flight": w.ceiling,
                    "rate_limited": w.rate_limited,
                }
                for label, w in self.windows.items()
            }


class FileGate:
    """Limits shared by every process of a run on this machine: flock'd slot files and a state
    file (the current limit and the 429 count) per provider in the run folder's `providers/`.

    A call takes a free slot below the provider's current limit (a lock the kernel releases if
    its holder dies; the file records the holder, when its request was sent and its timeout,
    cleared when the call gives the slot back, so a dead holder's request is known to be at
    the provider still until its timeout has passed); a 429 halves the limit in the state
    file, so every worker sees it. A slot's file stays open in the process that opened it (a
    call costs one `flock`, not an open and a close); the slots this process's calls hold are
    known without asking the kernel (two calls of one process would share an open file, and
    its lock)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._made = False
        self._bases: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._files: dict[str, int] = {}
        """Each slot file this process opened, by path (a forked child opens its own)."""
        self._held: set[str] = set()
        """The slot files this process's calls hold now."""
        self._dead: dict[str, float] = {}
        """Slots a dead holder's request keeps until the time given (not looked at before)."""

    def _base(self, route: Route) -> str:
        base = self._bases.get(route.label)
        if base is None:
            if not self._made:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._made = True
            digest = hashlib.sha256(route.label.encode()).hexdigest()[:16]
            base = self._bases[route.label] = f"{self.folder}/{route.name[:40]}-{digest}"
        return base

    @contextlib.asynccontextmanager
    async def hold(self, route: Route, size: int) -> AsyncIterator[int | None]:
        ceiling = route.limits.max_in_flight
        if ceiling is None:
            yield None
            return
        base = self._base(route)
        path, fd, slot = await self._take(base, ceiling)
        try:
            holders.stamp(fd, route.timeout)
            yield slot
        finally:
            with contextlib.suppress(OSError):
                holders.clear(fd)  # given back: no request of this slot is out
                fcntl.flock(fd, fcntl.LOCK_UN)
            with self._lock:
                self._held.discard(path)

    async def _take(self, base: str, ceiling: int) -> tuple[str, int, int]:
        while True:
            limit = min(ceiling, int(self._state(base, ceiling).limit))
            for slot in range(max(1, limit)):
                path = f"{base}.slot{slot}"
                fd = self._claim(path)
                if fd is not None:
                    return path, fd, slot
            await asyncio.sleep(POLL)

    def _claim(self, path: str) -> int | None:
        """The slot file's descriptor, locked for this call; None: another call holds it."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: its parent's files are not its own
                self._pid, self._files, self._held = os.getpid(), {}, set()
            if path in self._held or self._dead.get(path, 0.0) > time.time():
                return None
            fd = self._files.get(path)
            if fd is None:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                self._files[path] = fd
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            if (until := holders.dead_until(fd)) is not None:
                self._dead[path] = until
                fcntl.flock(fd, fcntl.LOCK_UN)
                return None
            self._held.add(path)
            return fd

    def _state(self, base: str, ceiling: int) -> Window:
        data = _read_state(f"{base}.state")
        if len(data) != _STATE.size:
            return Window(ceiling, float(ceiling), float(ceiling))
        limit, cap, count, _ = _STATE.unpack(data)
        return Window(ceiling, limit, cap, rate_limited=count)

    def close(self) -> None:
        """Close the slot files this process opened (none is held once its calls are done)."""
        with self._lock:
            files, self._files = self._files, {}
            if self._pid == os.getpid():
                for fd in files.values():
                    os.close(fd)

    def _update(self, route: Route, change: Callable[[Window], None]) -> None:
        ceiling = route.limits.max_in_flight
        if ceiling is None:
            return
        base = self._base(route)
        fd = os.open(f"{base}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            window = self._state(base, ceiling)
            before = (window.limit, window.cap, window.rate_limited)
            change(window)
            after = (window.limit, window.cap, window.rate_limited)
            if after != before:
                tmp = f"{base}.state.{os.getpid()}"
                with open(os.open(tmp, _WRITE, 0o600), "wb") as out:
                    out.write(_STATE.pack(*after, ceiling))
                os.replace(tmp, f"{base}.state")
        finally:
            os.close(fd)

    def rate_limited(self, route: Route, slot: int | None) -> None:
        self._update(route, lambda window: window.shrink(slot))

    def succeeded(self, route: Route, headers: Mapping[str, str], slot: int | None) -> None:
        if headers.get("x-ratelimit-remaining-requests") == "0":
            self.rate_limited(route, slot)
            return
        ceiling = route.limits.max_in_flight
        if ceiling is None or slot is None:
            return
        window = self._state(self._base(route), ceiling)
        if slot + 1 >= int(window.limit) and window.limit < ceiling:
            self._update(route, lambda w: w.grow(slot))

    def status(self) -> dict[str, dict[str, int]]:
        """Each provider's shared current limit and 429 count, as the state files say."""
        found: dict[str, dict[str, int]] = {}
        for path in sorted(self.folder.glob("*.state")):
            data = _read_state(str(path))
            if len(data) == _STATE.size:
                limit, _, count, ceiling = _STATE.unpack(data)
                name = path.name.removesuffix(".state").rsplit("-", 1)[0]
                found[name] = {"limit": int(limit), "max_in_flight": ceiling, "rate_limited": count}
        return found


_STATE = struct.Struct("<ddqq")
"""A provider's state file: its current limit and cap, its 429 count, its `max_in_flight`."""
_READ = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW


def _read_state(path: str) -> bytes:
    """A state file's bytes; none when there is none (or a link or FIFO someone left there:
    never followed nor waited on, it is no state)."""
    try:
        fd = os.open(path, _READ)
    except OSError:
        return b""
    try:
        return os.read(fd, _STATE.size + 1)
    except OSError:
        return b""
    finally:
        os.close(fd)


_gate: Gate = LocalGate()


def current() -> Gate:
    """The process's gate (the run's, once the runtime set one)."""
    return _gate


def use_gate(gate: Gate | None) -> None:
    """Every provider call from now on is admitted through `gate` (None: this process's own
    counts, as when no run folder is known)."""
    global _gate
    if isinstance(_gate, FileGate) and _gate is not gate:
        _gate.close()  # its slot files: the session that used them is over
    _gate = LocalGate() if gate is None else gate


def status() -> dict[str, dict[str, int]]:
    """Each provider's current limit and 429 count, for progress and the summary."""
    gate = _gate
    return gate.status() if isinstance(gate, LocalGate | FileGate) else {}
