"""Per-agent limits that hold across every process of a run on one machine.

`max_in_flight` and `min_interval` bound how hard a run hits a provider. With xdist each worker
is a process, so the authority is the file system: lock files in the run folder, held with
`fcntl.flock`. A call takes one of `max_in_flight` slot files (a lock the kernel releases
when the holder dies, so a killed worker never leaks a slot past its call's timeout: below),
then, under the agent's pace lock, waits until `min_interval` has passed since the last
recorded start and records its own. Lock files, unlike a coordinator process, need no address
in `workerinput` and survive any worker's death; they hold only for processes on this machine
that see the run folder.

A forked child closes its copies of the locks at once (`store/locks.py`), so a pool's
long-lived worker never holds a slot of its parent.

A slot is held until the call really ends: a sync agent abandoned at its deadline (its thread
runs on, its HTTP request still at the provider) keeps its slot until its thread returns. A
killed worker's call may run on too (its requests at the provider, a command agent's program):
a call with a timeout stamps its slot (`core/holders.py`), so the slot of a holder that died
stays taken until that timeout has passed since the call took it.

A wait for a slot costs nothing while it waits: a slot this process gives back wakes its
waiters at once (`wait_freed`), and only another process's is looked for, every
`SLOT_POLL` seconds (the kernel tells no one when a flock is released).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..core import holders
from ..store.locks import HELD, locked

SLOT_POLL = 0.1
"""Seconds between looks for a slot another process gave back (this process's own wake its
waiters at once)."""
_STAMP = struct.Struct("<d")


@dataclass(frozen=True)
class Limits:
    """The limits of one agent's calls."""

    max_in_flight: int | None = None
    min_interval: float | None = None

    def __bool__(self) -> bool:
        return bool(self.max_in_flight or self.min_interval)


class LimitGate:
    """Makes agent calls wait for their agent's limits; lock files live in `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @contextlib.contextmanager
    def hold(self, agent: str, limits: Limits, timeout: float | None = None) -> Iterator[None]:
        """Wait for a free slot and the agent's pace, and keep the slot for the block (a call
        of `timeout` seconds: that long from its start should its process die holding it)."""
        if not limits:
            yield
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(agent.encode()).hexdigest()[:16]
        slot = self._slot(name, limits.max_in_flight) if limits.max_in_flight else None
        release = _release
        try:
            if limits.min_interval:
                self._pace(name, limits.min_interval)
            if slot is not None and timeout is not None:  # the call starts now
                holders.stamp(slot, timeout)
                release = _release_stamped
            yield
        except BaseException as exc:
            running_on = getattr(exc, "running_on", None)  # a call abandoned at its deadline
            if slot is not None and running_on is not None:
                running_on(partial(release, slot))  # the slot is its until it really ends
                slot = None
            raise
        finally:
            if slot is not None:
                release(slot)

    def _slot(self, name: str, size: int) -> int:
        return take_slot(self.folder, name, size)

    def _pace(self, name: str, interval: float) -> None:
        with locked(self.folder / f"{name}.pace") as fd:
            data = os.pread(fd, _STAMP.size, 0)
            last = _STAMP.unpack(data)[0] if len(data) == _STAMP.size else 0.0
            wait = last + interval - time.time()
            if wait > 0:
                time.sleep(wait)
            os.pwrite(fd, _STAMP.pack(time.time()), 0)


_FREED = threading.Condition()
"""Notified whenever this process gives back a slot (`_release`)."""
_freed = 0
"""How many slots this process gave back: a waiter that saw a count waits for a change."""


def freed() -> int:
    """A mark for `wait_freed`: take it before looking for a free slot, so a slot given back
    between the look and the wait is not missed."""
    return _freed


def wait_freed(mark: int, timeout: float | None = SLOT_POLL) -> None:
    """Wait until this process gave back a slot since `mark` (`freed`), or `timeout` passed
    (another process may have: the caller looks again)."""
    with _FREED:
        _FREED.wait_for(lambda: _freed != mark, timeout)


def take_slot(folder: Path, name: str, size: int) -> int:
    """Wait for the first free of `size` slot files `<name>.slot<i>` in `folder` and hold it
    (`_release` gives it back; the kernel does when the holder dies)."""
    while True:
        mark = freed()
        if (slot := try_slot(folder, name, size)) is not None:
            return slot
        wait_freed(mark)


def try_slot(folder: Path, name: str, size: int) -> int | None:
    """The first free of `size` slot files, held, or None when all are held. Each file is
    made when first reached, so a look costs the slots held, however large `size` is."""
    for i in range(size):
        fd = os.open(folder / f"{name}.slot{i}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        HELD.add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if holders.dead_until(fd) is not None:  # a dead holder's call may run on
                raise BlockingIOError
        except BlockingIOError:
            HELD.discard(fd)
            os.close(fd)
            continue
        return fd
    return None


def held_slots(folder: Path, name: str, size: int) -> int:
    """How many of `size` slot files some process holds now (a look that may change at once;
    the holding itself is `try_slot`'s)."""
    held = 0
    for i in range(size):
        path = folder / f"{name}.slot{i}"
        if not path.exists():
            continue
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held += 1
        finally:
            os.close(fd)
    return held


def _release(slot: int, *_: object) -> None:
    global _freed
    HELD.discard(slot)
    os.close(slot)  # releases the lock
    with _FREED:
        _freed += 1
        _FREED.notify_all()


def _release_stamped(slot: int, *_: object) -> None:
    with contextlib.suppress(OSError):
        holders.clear(slot)  # the call is over: nothing of it runs on
    _release(slot)


def release_slot(slot: int | None) -> None:
    """Give back a slot `take_slot` gave (a second call, or None, does nothing)."""
    if slot is not None and slot in HELD:
        _release(slot)
